"""Small rules with one owner each (issue 53): a rule written twice drifts (the sentence cap
was 64 in the engine, unused, and 24 in the app), so each is defined in one module and the
others import it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for pkg in ("engine", "app", "bench", "lab")
                 for p in (ROOT / pkg).rglob("*.py"))


def _where_assigned(name: str) -> set[str]:
    """Modules that assign `name` at their top level."""
    found = set()
    for path in SOURCES:
        for node in ast.parse(path.read_text()).body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def test_the_sentence_cap_is_the_apps_alone():
    assert _where_assigned("MAX_SENTENCES") == {"app/state.py"}
