"""`ctxlens` command line: models, embed, attention, predict, attribute, generate, index,
neighbours, stats, compare, heads, components, patch.

Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback.
A command is a module here with an add(sub) that adds its parser and sets `run`, the function
that runs it, as a default; COMMANDS names the modules.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from engine.cli import inputs
from engine.cli.report import EXIT_INTERNAL, EXIT_USAGE, cut_echoes
from engine.errors import EngineError
from engine.text import TextError

# the modules engine.cli.<name>, in this order in --help; imported when the parser is built
# (as the family table imports a family's module), so that a command may import the helpers
# of this package without a cycle through it
COMMANDS = ("models", "embed", "attention", "predict", "attribute", "generate", "corpus",
            "compare", "heads", "components", "patch")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxlens", description="Contextual word embeddings: "
                                "ELMo, GPT and BERT, layer by layer.")
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"engine.cli.{name}").add(sub)
    return p


def _quiet_libraries() -> None:
    """No library chatter on the terminal, without importing the libraries to say so (a run
    from a traced graph never imports transformers): transformers reads its verbosity from
    the environment when first imported (its loading bars: main's Engine options)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _internal_error(e: BaseException, limit: int = 300) -> str:
    """One short line: a library's message may span lines or quote a whole input."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return f"ctxlens: internal error: {text if len(text) <= limit else text[:limit] + '…'}"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "dtype", "float32") != "float32":
        from engine.families.base import resolve_device

        try:
            on_cpu = resolve_device(getattr(args, "device", "auto")) == "cpu"
        except Exception:  # noqa: BLE001 - a bad --device is said by the command itself
            on_cpu = False
        if on_cpu:          # the engine keeps float32 on CPU (slow, lossy half matmuls there)
            print(f"ctxlens: --dtype {args.dtype} applies on a GPU; on the CPU this runs in "
                  "float32", file=sys.stderr)
    _quiet_libraries()
    from functools import partial

    from engine.api import Engine

    inputs.new_run()
    try:
        inputs.check_args(args)
        # the terminal shows the engine's progress lines and bars, not transformers' own
        return args.run(args, partial(Engine, library_bars=False))
    except (EngineError, TextError) as e:
        # a message may quote a word or text as typed: a 10,000-character one is cut there
        print(f"ctxlens: error: {cut_echoes(str(e), inputs.echoed(args))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ctxlens: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as e:
        if not _reader_gone():        # a broken pipe of something else (a socket) is an error
            print(_internal_error(e), file=sys.stderr)
            return EXIT_INTERNAL
        # `ctxlens stats ... | head -3`: the reader has what it wanted; say nothing more (and
        # point stdout at nothing so that Python's own flush at exit does not complain)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # noqa: BLE001 - the CLI promises one line, never a traceback
        print(_internal_error(e), file=sys.stderr)
        return EXIT_INTERNAL
