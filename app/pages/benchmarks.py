"""Benchmarks: the reproduction tables and plots that `make bench` writes to results/."""
from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

RESULTS = Path(__file__).resolve().parents[2] / "results"
FINDINGS = "## Published findings: reproduced?"
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)\s*$")
_LINK = re.compile(r"\[([^\]]+)\]\(([\w\-.]+\.md)\)")


def sections(markdown: str) -> list[tuple[str, str]]:
    """Split markdown into ("text", chunk) and ("image", file) parts, so local PNGs show."""
    parts: list[tuple[str, str]] = []
    text: list[str] = []
    for line in markdown.splitlines():
        m = _IMAGE.match(line.strip())
        if m:
            if text:
                parts.append(("text", "\n".join(text)))
                text = []
            parts.append(("image", m.group(2)))
        else:
            text.append(line)
    if text:
        parts.append(("text", "\n".join(text)))
    return parts


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


def report_files() -> list[Path]:
    """results/README.md first, then the reports it links to, in its order."""
    readme = RESULTS / "README.md"
    if not readme.exists():
        return []
    linked = [RESULTS / name for _, name in _LINK.findall(readme.read_text())]
    return [readme] + [p for p in linked if p.exists()]


def show(path: Path, markdown: str | None = None) -> None:
    for kind, body in sections(path.read_text() if markdown is None else markdown):
        if kind == "image":
            image = (path.parent / body).resolve()
            if image.parent == RESULTS.resolve() and image.exists():
                st.image(str(image), caption=body)
            else:
                st.caption(f"missing plot: {body}")
        else:
            # links between reports become plain text: every report is on this page
            st.markdown(_LINK.sub(r"\1", body))


st.title("Benchmarks")
files = report_files()
if not files:
    st.info("No results yet: run `make bench` (it writes results/).")
else:
    st.caption("Written by `make bench`; published values come from "
               "shared/reference-numbers.md.")
    # the headline: which published findings the measured models reproduce
    findings, summary = split_section(files[0].read_text(), FINDINGS)
    if findings:
        st.subheader(FINDINGS.removeprefix("## "))
        st.markdown(_LINK.sub(r"\1", findings))
    tabs = st.tabs([("Summary" if p.name == "README.md" else p.stem.replace("_", " "))
                    for p in files])
    for tab, path in zip(tabs, files):
        with tab:
            show(path, summary if path == files[0] else None)
