"""`ctxlens models`: the registry, the model folders and the cached hub models."""
from __future__ import annotations

import os


def add(sub) -> None:
    sub.add_parser("models", help="list the model registry and what is available here"
                   ).set_defaults(run=cmd_models)


def cmd_models(args, engine_cls) -> int:
    """The registry, the model folders and the cached hub models, each with what it can do."""
    from engine.registry import catalogue, model_dirs, what_it_can

    rows = []
    for e, where in catalogue():
        shown = e.id if len(e.id) <= 40 else "…" + e.id[-39:]
        # a broken folder says why where the others say what they can do
        broken = where.startswith("broken: ")
        rows.append((shown, e.family, "broken" if broken else where,
                     where.removeprefix("broken: ") if broken else what_it_can(e)))
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'id':<{width}}{'family':<8}{'here':<27}can")
    for mid, fam, where, can in rows:
        print(f"{mid:<{width}}{fam:<8}{where:<27}{can}")
    print("Any Hugging Face hub id (org/name) or a folder under CTXLENS_MODEL_DIRS works too; "
          "see README.md, 'Your own model'.")
    print("Model directories: " + os.pathsep.join(str(d) for d in model_dirs()))
    return 0
