"""Bad input in the browser: every case runs the whole app (Streamlit's AppTest, the real engine)
and records what the user sees. The test suite runs the same cases on tiny models
(tests/app/test_bad_input.py); `python -m bench.bad_input` runs them on the bundled models and
writes results/bad_input.json and bad_input.md.

A case passes when the app shows no exception and no traceback, every message is one line,
the sentence box still holds what was typed, and the case's own check holds.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
MOUSE = ["A mouse ran under the table .", "The mouse clicked twice .", "My mouse needs batteries .",
         "The cat caught a mouse ."]


@dataclass(frozen=True)
class Case:
    name: str
    query: dict[str, str | list[str]]           # the link's query parameters
    expect: str                                 # what the user should see, in words
    check: Callable[[dict], bool] = field(default=lambda seen: True)


def _lines(*extra: str) -> str:
    return "\n".join([*MOUSE, *extra])


def _said(seen: dict, text: str) -> bool:
    """`text` in a message as the page shows it: app.safe.safe_md's escapes undone and its word
    joiners dropped."""
    shown = [re.sub(r"\\(.)", r"\1", m).replace("\u2060", "")
             for kind in ("warning", "info", "error") for m in seen[kind]]
    return any(text in m for m in shown)


CASES: tuple[Case, ...] = (
    Case("one line of 5,000 characters", {"sentences": _lines("x" * 5000), "target": "mouse"},
         "that line left out, named; the rest plot",
         lambda s: _said(s, "Line 5 is left out: the text has 5000 characters") and s["charts"]),
    Case("10,000 pasted lines", {"sentences": _lines(*(f"a mouse {i}" for i in range(10_000))),
                                 "target": "mouse"},
         "the first 24 used, the cap said", lambda s: _said(s, "only the first 24 are used")),
    Case("emoji, CJK, right-to-left, combining marks",
         {"sentences": _lines("The mouse 🐭 ran .", "鼠标 mouse 坏了 .", "mouse الفأر هنا .",
                              "The mouse ̈ café ."), "target": "mouse"},
         "all plot, for every model", lambda s: s["charts"] and not s["warning"]
         and not s["error"]),
    Case("HTML and markdown in a sentence",
         {"sentences": _lines("<b>mouse</b> <script>alert(1)</script> **bold** [x](javascript:1)"),
          "target": "mouse"},
         "shown as text, never as markup", lambda s: s["charts"] and not s["raw_html"]),
    Case("control characters", {"sentences": _lines("The mouse\x07 \x00ran ."), "target": "mouse"},
         "ignored: the sentence plots", lambda s: s["charts"] and not s["error"]),
    Case("a 100,000-character sentence in the link",
         {"sentences": "m" * 100_000, "target": "mouse"},
         "one line naming the line and the cap", lambda s: _said(s, "Line 1 is left out")),
    Case("an unknown model in the link", {"sentences": _lines(), "target": "mouse",
                                          "model_gpt": "no-such-model"},
         "a one-line note, the default used", lambda s: _said(s, "no-such-model")),
    Case("negative and huge layers in the link", {"sentences": _lines(), "target": "mouse",
                                                  "layer_smollm2-135m": "-5", "top_k": "999999"},
         "clamped to the model's range", lambda s: s["charts"]),
    Case("repeated keys in the link", {"sentences": _lines(), "target": ["bank", "mouse"],
                                       "pool": ["first", "mean"]},
         "one line per key, the last value used",
         lambda s: _said(s, "The link gives 'target' 2 times") and
         _said(s, "The link gives 'pool' 2 times") and s["charts"]),
    Case("a target word in no sentence", {"sentences": _lines(), "target": "elephant"},
         "one line saying so", lambda s: _said(s, "is in none of the sentences")),
    Case("invisible characters (byte-order mark, zero-width space)",
         {"sentences": _lines("\ufeffThe mouse \u200b ran ."), "target": "mouse"},
         "ignored: the sentence plots", lambda s: s["charts"] and not s["error"]
         and not s["warning"]),
    Case("a target typed with a curly apostrophe",
         {"sentences": "I don't know .\nYou don't say .\nThey don't care .",
          "target": "don\u2019t"},
         "the word found in every sentence", lambda s: s["charts"] and not s["error"]
         and not s["warning"]),
    Case("Hindi: vowel signs and viramas in every word",
         {"sentences": "यह किताब अच्छी है .\nमेरी किताब नई है .\nवह किताब पढ़ता है .",
          "target": "किताब"},
         "the word found in every sentence", lambda s: s["charts"] and not s["error"]
         and not _said(s, "none of the sentences") and not _said(s, "tokenizer joins")),
)


def run_case(case: Case, query_defaults: dict[str, str] | None = None) -> dict:
    """Open the app with the case's link; what the user sees."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=300)
    at.query_params.update({**(query_defaults or {}), **case.query})
    at.run()
    seen = {kind: [str(e.value) for e in getattr(at, kind)]
            for kind in ("exception", "error", "warning", "info")}
    seen["charts"] = len(at.get("plotly_chart"))
    box = at.sidebar.text_area(key="sentences").value if at.sidebar.text_area else ""
    seen["text_kept"] = box.splitlines() == case.query["sentences"].splitlines()
    # typed markup must stay text: in markdown elements and in plotly's hover text (which
    # plotly reads as a small HTML subset)
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    seen["raw_html"] = (any("<script>" in str(e.proto) for e in at.get("markdown"))
                        or any("<script>" in json.dumps(sp, ensure_ascii=False) for sp in specs))
    seen["one_line"] = all("\n" not in m and "Traceback" not in m
                           for kind in ("error", "warning", "info") for m in seen[kind])
    seen["passed"] = (not seen["exception"] and seen["one_line"] and seen["text_kept"]
                      and bool(case.check(seen)))
    return seen


def report(rows: list[tuple[Case, dict]]) -> str:
    from bench.tables import table

    def shown(s: dict) -> str:
        msgs = s["exception"] + s["error"] + s["warning"] + s["info"]
        first = msgs[0].replace("|", "/")[:110] if msgs else "(no message)"
        return f"{s['charts']} charts; {first}"

    body = table(["case", "expected", "what the user saw", "text kept", "result"],
                 [[c.name, c.expect, shown(s), "yes" if s["text_kept"] else "NO",
                   "pass" if s["passed"] else "FAIL"] for c, s in rows])
    from bench.analysis.cloze import wilson

    k, n = sum(s["passed"] for _, s in rows), len(rows)
    lo, hi = wilson(k, n)
    return ("# Bad input in the browser\n\nEvery case opens the whole app with a link "
            "(`python -m bench.bad_input`, bundled models, first page). A case passes with no "
            "exception or traceback, one-line messages, the typed text still in the sentence "
            "box, and its own check.\n\n" + body + f"\n{k} of {n} cases pass: {k / n:.0%} "
            f"(95% CI {lo:.0%}–{hi:.0%}, Wilson; the cases are the ones the issues listed and "
            "two a new user's pass found (invisible characters, a curly apostrophe), not a "
            f"sample of all bad input, so the interval says how little {n} cases prove).\n")


def record(rows: list[tuple[Case, dict]]) -> dict:
    """results/bad_input.json: what the user saw in each case, and when it was measured."""
    from bench.meta import meta

    def message(s: dict) -> str:
        msgs = s["exception"] + s["error"] + s["warning"] + s["info"]
        return msgs[0][:110] if msgs else "(no message)"

    return {"cases": [{"case": c.name, "expected": c.expect, "charts": s["charts"],
                       "message": message(s), "text_kept": s["text_kept"],
                       "passed": bool(s["passed"])} for c, s in rows],
            "meta": meta("python -m bench.bad_input")}


def main() -> int:
    rows = []
    for case in CASES:
        print(f"bad input: {case.name}", file=sys.stderr, flush=True)
        rows.append((case, run_case(case)))
    out = ROOT / "results" / "bad_input.md"
    out.write_text(report(rows))
    out.with_suffix(".json").write_text(json.dumps(record(rows), indent=1))
    print(f"wrote {out}: {sum(s['passed'] for _, s in rows)}/{len(rows)} pass")
    return 0 if all(s["passed"] for _, s in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
