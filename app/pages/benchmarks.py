"""Benchmarks, for users: what each measurement means, our numbers with their 95% intervals as
sortable tables, the plots, and the published number each one echoes. The reports `make bench`
writes to results/ are the source; their method prose sits in an expander per topic."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import streamlit as st

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
FINDINGS = "## Published findings: reproduced?"
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)\s*$")
_LINK = re.compile(r"\[([^\]]+)\]\(([\w\-.]+\.md)\)")
_PATH = re.compile(r"(?<![\w/.])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|tsv|toml|png|txt))")

# What a reader needs before a table: what is measured, how to read it, what was published.
TOPICS: dict[str, tuple[str, str]] = {
    "README": ("Summary", "One row per bundled model: its depth, whether the geometry behaves "
               "as expected, the layer where part of speech and word sense are easiest to "
               "read, and how many published findings it reproduces. Brackets are 95% "
               "confidence intervals: two numbers whose intervals overlap may not differ."),
    "senses": ("Word senses", "Can a layer tell a word's senses apart? For words with several "
               "WordNet senses, each held-out occurrence is assigned to the nearest sense "
               "centroid built from other sentences; the score is the share assigned right "
               "(chance is given beside it). Peters et al. (2018) found ELMo's top layer best "
               "for word sense; higher is better."),
    "geometry": ("How contextual is each layer?", "Ethayarajh (2019): self-similarity (the "
                 "same word in different sentences), intra-sentence similarity and the "
                 "anisotropy baseline (random word pairs), per layer. Lower self-similarity "
                 "above the baseline means more context-specific vectors; GPT-2's anisotropy "
                 "approaches 1 in its top layers."),
    "pos": ("Part of speech", "A linear probe reads each word's part of speech from one "
            "layer's vectors (held-out Brown sentences). Peters et al. (2018) and Tenney et "
            "al. (2019) found lower layers best for syntax; the majority-class rate is the "
            "floor."),
    "cloze": ("Filling a blank", "149 everyday sentences with one blank and the accepted "
              "answers; a hit is an accepted answer among a model's top 5. A bert-base-class "
              "masked LM gets about 80% of such blanks."),
    "elmo_distill": ("A stronger ELMo", "Attempts to give the offline ELMo more meaning "
                     "than 1.1M words of Brown allow, and whether they helped."),
    "speed": ("Speed", "Ratios against a baseline measured in the same run (plain Hugging Face "
              "loops, the FLOP bound) and times against the targets, on 2 CPU cores."),
    "gpu": ("GPU", "Batch embedding on a GPU: tokens per second and model FLOP utilisation "
            "(MFU: the share of the chip's peak the model's matrix products use) for the "
            "engine, a plain Hugging Face loop and its bare forward passes, same run."),
    "bad_input": ("Bad input", "What a user sees after pasting or linking something the app "
                  "cannot take: one line naming the problem, the rest still plotted."),
    "soak": ("Many users at once", "Several browser sessions use every page at the same time: "
             "errors seen, memory over time, and whether any session saw another's text."),
    "corpus": ("Corpus mode", "Indexing all of Brown at every layer into a vector database "
               "and searching it: time, size, query speed and whether the approximate search "
               "finds what exact search finds (recall)."),
}


def report_files() -> list[Path]:
    """results/README.md first, then the reports it links to, in its order."""
    readme = RESULTS / "README.md"
    if not readme.exists():
        return []
    linked = [RESULTS / name for _, name in _LINK.findall(readme.read_text())]
    return [readme] + [p for p in linked if p.exists()]


def split_section(markdown: str, heading: str) -> tuple[str, str]:
    """(the section under `heading`, up to the next heading of its level; the rest)."""
    lines = markdown.splitlines()
    if heading not in lines:
        return "", markdown
    start = lines.index(heading)
    level = heading.split(" ")[0] + " "
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)),
               len(lines))
    return "\n".join(lines[start + 1:end]).strip(), "\n".join(lines[:start] + lines[end:])


def _cell(text: str) -> str:
    return re.sub(r"\*\*([^*]+)\*\*|`([^`]+)`", lambda m: m.group(1) or m.group(2),
                  text.strip())


def parts(markdown: str) -> list[tuple[str, object]]:
    """A report as ("heading", str), ("table", DataFrame), ("image", file) and ("prose", str)
    parts, in order."""
    out: list[tuple[str, object]] = []
    lines = markdown.splitlines()
    i = 0
    prose: list[str] = []

    def flush():
        text = "\n".join(prose).strip()
        if text:
            out.append(("prose", text))
        prose.clear()

    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|") and i + 1 < len(lines) and \
                re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip()):
            flush()
            header = [_cell(c) for c in line.strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = [_cell(c) for c in lines[i].strip().strip("|").split("|")]
                rows.append((cells + [""] * len(header))[:len(header)])
                i += 1
            out.append(("table", pd.DataFrame(rows, columns=_unique(header))))
            continue
        image = _IMAGE.match(line)
        if image:
            flush()
            out.append(("image", image.group(2)))
        elif line.startswith("#"):
            flush()
            out.append(("heading", line.lstrip("#").strip()))
        else:
            prose.append(lines[i])
        i += 1
    flush()
    return out


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out


_NUMBER = re.compile(r"^(?P<num>[+\-−]?\d[\d,]*(?:\.(?P<dec>\d+))?)(?P<unit>%|×|x| s| ms| min)?"
                     r"(?:\s+(?P<rest>\S.*))?$")
_MISSING = {"", "—", "-", "n/a"}
_INTERVAL = re.compile(r"^(\[[^\]]*\])\s*(.*)$")


def sortable(table: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The report's cells are text ("87.9% [81.7%, 92.2%]"), which a click on a column sorts as
    text (87.9%, 8.7%, 69.8%...). A column whose every cell is a number in one unit becomes a
    number column shown in that unit, and what followed the number (an interval, a note) moves
    to a column beside it."""
    out, config = {}, {}
    for name in table.columns:
        cells = [str(c).strip() for c in table[name]]
        matches = {c: _NUMBER.match(c) for c in cells if c not in _MISSING}
        found = list(matches.values())
        units = {m.group("unit") for m in found if m}
        # "3 of 5" or "119.7 / 118.4" is not a number with an interval: it stays text
        aside = all((m.group("rest") or "(")[0] in "[(" for m in found if m)
        if not found or not all(found) or len(units) != 1 or not aside:
            out[name] = table[name]
            continue
        unit = units.pop() or ""
        digits = max(len(m.group("dec") or "") for m in found)
        values = [float(matches[c].group("num").replace(",", "").replace("−", "-"))
                  if c in matches else None for c in cells]
        rest = [(matches[c].group("rest") or "") if c in matches else "" for c in cells]
        signed = any(m.group("num")[0] in "+−-" for m in found)
        head = name.replace(" (95% CI)", "")
        out[head] = pd.Series(values, dtype="float64")
        grouped = any("," in m.group("num") for m in found)        # "18,000,068" keeps them
        config[head] = st.column_config.NumberColumn(
            head, format="localized" if grouped and not unit and not digits else
            ("%+" if signed else "%") + f".{digits}f" + unit.replace("%", "%%"))
        # the interval ("[81.7%, 92.2%]") in its own column, anything after it ("(L4)",
        # "at L2 (majority ...)") in a note column: a note is no interval
        split = [_INTERVAL.match(r) for r in rest]
        intervals = [m.group(1) if m else "" for m in split]
        notes = [(m.group(2) if m else r).strip() for m, r in zip(split, rest)]
        if any(intervals):
            out[f"{head}: 95% CI"] = intervals
        if any(notes):
            out[f"{head}: note"] = notes
    return pd.DataFrame(out), config


def table(body: pd.DataFrame) -> None:
    frame, config = sortable(body)
    st.dataframe(frame, hide_index=True, width="stretch", column_config=config)


def clone_paths(text: str) -> str:
    """Method prose may name files of the machine that measured (training runs, the shared
    reference notes): a path that is not in this repository is said to be so."""
    def mark(m: re.Match) -> str:
        path = m.group(1)
        found = (ROOT / path).exists() or (RESULTS / path).exists()
        return path if found else f"{path} (not in this repository)"
    return _PATH.sub(mark, _LINK.sub(r"\1", text))


def show(path: Path, markdown: str) -> None:
    stem = path.stem
    title, what = TOPICS.get(stem, (stem.replace("_", " ").capitalize(), ""))
    if what:
        st.info(what)
    prose = []
    heading = ""
    for kind, body in parts(markdown):
        if kind == "heading":
            heading = clone_paths(str(body))
        elif kind == "table":
            if heading:
                st.markdown(f"**{heading}**")
                heading = ""
            table(body)
        elif kind == "image":
            image = (path.parent / str(body)).resolve()
            if image.parent == RESULTS.resolve() and image.exists():
                st.image(str(image), caption=str(body))
            else:
                st.caption(f"missing plot: {body}")
        else:
            prose.append((heading, str(body)))
    if prose:
        with st.expander("How it was measured"):
            for head, text in prose:
                if head:
                    st.markdown(f"**{head}**")
                st.markdown(clone_paths(text))


st.title("Benchmarks")
files = report_files()
if not files:
    st.info("No results yet: run `make bench` (it writes results/).")
else:
    st.caption("What the bundled models show, measured by `make bench`: every accuracy and "
               "similarity with its 95% confidence interval, beside the published finding it "
               "echoes (the published values are in bench/published.py). Tables sort when you "
               "click a column.")
    findings, summary = split_section(files[0].read_text(), FINDINGS)
    if findings:
        st.subheader(FINDINGS.removeprefix("## "))
        st.caption("yes: the measured difference's 95% interval excludes 0 on the side the "
                   "paper claims; partly: the right direction, or one of two parts; no: "
                   "otherwise, with the likely reason.")
        for kind, body in parts(findings):
            if kind == "table":
                table(body)
    tabs = st.tabs([TOPICS.get(p.stem, (p.stem.replace("_", " "), ""))[0] for p in files])
    for tab, path in zip(tabs, files):
        with tab:
            show(path, summary if path == files[0] else path.read_text())
