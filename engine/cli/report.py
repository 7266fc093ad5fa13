"""What the CLI gives back besides its files: exit codes, JSON lines on stdout, progress on
stderr."""
from __future__ import annotations

import contextlib
import json
import math
import numbers
import sys
import time

from engine.text import ECHO_CHARS, quoted  # noqa: F401  (the commands' echo of a value)

# a run a user can fix (a bad flag, file or text); a failure of ctxlens itself
EXIT_USAGE = 2
EXIT_INTERNAL = 1
# JSON allows U+2028 and U+2029 raw inside a string, but JavaScript before ES2019 ends a line
# there: escaped, a JSON line pasted into a script or an HTML page's <script> stays one line
JS_LINE_ENDS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029"})
# runs shorter than this show no progress
PROGRESS_MIN = 50
# without a terminal: a line each tenth of the way, or after this many seconds without one
PROGRESS_SECONDS = 10.0


def _finite(obj):
    """`obj` with each NaN or infinity in it (numpy's floats too) as None: JSON has no such
    number, and Python's json writes NaN, which strict parsers (JavaScript's, jq) refuse."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, numbers.Real) and not isinstance(obj, numbers.Integral):
        return float(obj) if math.isfinite(obj) else None
    return obj


def to_json(obj) -> str:
    """The CLI's JSON: one line, non-ASCII text as it is (readable), U+2028/U+2029 escaped,
    null for a number that is not finite (an undefined Spearman ρ, a mean over nothing)."""
    return json.dumps(_finite(obj), ensure_ascii=False, allow_nan=False).translate(JS_LINE_ENDS)


def _echoes(value: str, limit: int) -> list[str]:
    """The forms in which a message may say `value` back: whole, stripped (as a target is
    read), each word of it (of --noise) or entry between commas (of --ablate), and its words
    joined by spaces (a text's, as engine.text splits it); those longer than `limit`, the
    longest first."""
    from engine.text import TextError, to_word_text

    forms = {value, value.strip(), " ".join(value.split()), *value.split(),
             *(entry.strip() for entry in value.split(","))}
    try:
        forms.add(" ".join(to_word_text(value).words))
    except TextError:
        pass
    return sorted((f for f in forms if len(f) > limit), key=len, reverse=True)


def cut_echoes(message: str, values, limit: int = ECHO_CHARS) -> str:
    """`message` with each long user value in it cut: quoted (the engine's messages quote a
    word with repr) or bare, after `limit` characters and with its length said."""
    for value in values:
        for form in _echoes(value, limit):
            message = message.replace(repr(form), quoted(form, limit))
            message = message.replace(form, f"{form[:limit]}… ({len(form):,} characters)")
    return message


def emit_json(obj, output: str | None) -> None:
    """One JSON object (to_json) to the file `output`, or to stdout without one."""
    line = to_json(obj)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    else:
        print(line)


@contextlib.contextmanager
def progress(total: int, unit: str, desc: str, done_verb: str):
    """Yields step(n): tqdm's bar on a terminal; elsewhere (a log file, a pipe, a batch job),
    where a bar draws nothing, plain lines such as "ctxlens: embedded 2000/10000 sentences"."""
    if sys.stderr.isatty() or total < PROGRESS_MIN:
        from tqdm import tqdm

        with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr,
                  disable=total < PROGRESS_MIN or None) as bar:
            yield bar.update
        return
    state = {"done": 0, "tenth": 0, "at": time.monotonic()}
    noun = {"sent": "sentences", "text": "texts"}.get(unit, unit)

    def step(n: int) -> None:
        state["done"] += n
        tenth = 10 * state["done"] // total
        if tenth > state["tenth"] or time.monotonic() - state["at"] >= PROGRESS_SECONDS:
            state.update(tenth=tenth, at=time.monotonic())
            print(f"ctxlens: {done_verb} {state['done']:,}/{total:,} {noun}", file=sys.stderr,
                  flush=True)

    yield step
