"""User text made safe to show: safe_md for Streamlit's messages (read as markdown), safe_label
for plotly's text (read as a subset of HTML). Sentences, targets, sense labels, corpus words and
keyword labels, linked values and errors that quote any of them pass through one of the two
wherever they are shown (tests/app/test_safe_text.py keeps it so)."""
from __future__ import annotations

import html
import re

# GitHub-flavoured markdown finds "www.", "http:" and "name@host" links in the text after it
# is parsed, escapes undone; a word joiner (U+2060, invisible) where one would start breaks it
_AUTOLINK_START = re.compile(r"(?i)(?<=www)(?=\.)|(?<=http)(?=s?:)|(?<=[-.\w+])(?=@)")
_MARKDOWN_CHARS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$&])")


def safe_md(text) -> str:
    """Text for a message Streamlit reads as markdown (st.error, st.caption, ...): no link,
    image, auto-link, HTML or formatting, every markdown character escaped ("_bank_" stays
    "_bank_", not an italic bank), on one line."""
    text = _AUTOLINK_START.sub("\u2060", " ".join(str(text).splitlines()))
    return _MARKDOWN_CHARS.sub(r"\\\1", text)


def safe_label(text) -> str:
    """Text for plotly (a title, legend entry, tick, point text or hover): plotly draws a
    subset of HTML (<a href>, <span style>, <b>, <br>), so '<', '>' and '&' are escaped and no
    tag forms. Quotes stay as they are: plotly shows html.escape's "&quot;" literally."""
    return html.escape(str(text), quote=False)
