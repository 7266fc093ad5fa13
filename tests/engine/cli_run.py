"""One run of the CLI in-process, as the CLI tests read it: (exit code, stdout, stderr)."""
from __future__ import annotations

from engine.cli import main


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
