"""Sizes a reader can take in at once, in the product (engine/, app/, streamlit_app.py; the lab
and the benchmarks are not shipped): no function over MAX_FUNCTION_LINES lines."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80


def product_files() -> list[Path]:
    files = [*(ROOT / "engine").rglob("*.py"), *(ROOT / "app").rglob("*.py"),
             ROOT / "streamlit_app.py"]
    return sorted(p for p in files if "training" not in p.relative_to(ROOT).parts)


def long_functions(path: Path, limit: int) -> list[str]:
    """"file:line name (n lines)" for each function or method of `path` over `limit` lines,
    from its `def` to its last line (decorators not counted, nested functions counted in
    their own right and in the function around them)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_in_the_product_is_over_80_lines():
    assert [f for p in product_files() for f in long_functions(p, MAX_FUNCTION_LINES)] == []
