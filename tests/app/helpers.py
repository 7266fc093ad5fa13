"""Reading AppTest output: plotly figures as dicts, messages as strings."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
# Query parameters every opened page starts with (the tiny_engine fixture puts its models here);
# a test may override them before the first run.
DEFAULT_QUERY: dict[str, str] = {}


def with_query(at: AppTest) -> AppTest:
    for k, v in DEFAULT_QUERY.items():
        at.query_params[k] = v
    return at


def page(name: str, timeout: float = 120) -> AppTest:
    return with_query(AppTest.from_file(str(ROOT / "app" / "pages" / f"{name}.py"),
                                        default_timeout=timeout))


def app(timeout: float = 120) -> AppTest:
    """The whole app through st.navigation."""
    return with_query(AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=timeout))


def _decode(value):
    """Plotly 6 ships numpy arrays as {"dtype", "bdata" (base64), "shape"}; turn them back."""
    if isinstance(value, dict) and "bdata" in value and "dtype" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        if "shape" in value:
            shape = value["shape"]
            arr = arr.reshape([int(x) for x in str(shape).split(",")] if isinstance(shape, str)
                              else shape)
        return arr.tolist()
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def figures(at: AppTest) -> list[dict]:
    return [_decode(json.loads(el.proto.spec)) for el in at.get("plotly_chart")]


def title(fig: dict) -> str:
    t = fig["layout"].get("title", {})
    return t.get("text", "") if isinstance(t, dict) else str(t)


def figure(at: AppTest, starts: str) -> dict:
    found = [f for f in figures(at) if title(f).startswith(starts)]
    assert found, f"no figure titled {starts!r}: {[title(f) for f in figures(at)]}"
    return found[0]


def messages(at: AppTest) -> dict[str, list[str]]:
    return {kind: [e.value for e in getattr(at, kind)]
            for kind in ("error", "warning", "info", "success", "exception")}


def no_failures(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def set_sentences(at: AppTest, sentences: list[str], target: str) -> AppTest:
    at.sidebar.text_area(key="sentences").set_value("\n".join(sentences))
    at.sidebar.text_input(key="target").set_value(target)
    return at


def exported_tables(monkeypatch) -> dict:
    """Every table a page hands to export.figure_downloads in the runs that follow, by its
    export name (the CSV a user downloads is this table)."""
    from app import export

    tables: dict = {}
    real = export.figure_downloads

    def record(fig, name, table, *args, **kwargs):
        tables[name] = table
        return real(fig, name, table, *args, **kwargs)

    monkeypatch.setattr(export, "figure_downloads", record)
    return tables
