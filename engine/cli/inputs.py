"""What the user gives the CLI: files read, and the arguments checked before a model loads."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from engine.errors import EngineError
from engine.text import TextError, drop_invisible, quoted, split_lines, unspaced_note

def read_lines(path: str) -> list[str]:
    """The file's lines, split at "\\n" only (engine.text.split_lines): line n is what an editor
    shows as line n."""
    f = Path(path)
    if f.is_dir():
        raise EngineError(f"input {path} is a folder; give a text file, one text a line")
    if not f.is_file():
        raise EngineError(f"input file {path} does not exist")
    try:
        lines = [drop_invisible(ln) for ln in split_lines(f.read_bytes().decode("utf-8"))]
    except UnicodeDecodeError as e:
        raise EngineError(f"input file {path} is not UTF-8 text") from e
    note_unspaced(lines)
    return lines



# notes already printed by this run (main() starts each run with none)
_NOTED: set[str] = set()


def new_run() -> None:
    """main() starts each run with no notes printed."""
    _NOTED.clear()


def note_unspaced(texts) -> None:
    """Once a run, on stderr: how the word split treats a script written without spaces."""
    note = unspaced_note(texts)
    if note and note not in _NOTED:
        _NOTED.add(note)
        print(f"ctxlens: {note}", file=sys.stderr)


def read_sentences(path: str) -> list[str]:
    sentences = [ln.strip() for ln in read_lines(path) if ln.strip()]
    if not sentences:
        raise EngineError(f"input file {path} holds no sentences")
    return sentences


def check_output(path: str) -> Path:
    out = Path(path)
    if out.suffix != ".npz":
        raise EngineError(f"--output must end in .npz (got {path})")
    if not out.parent.exists():
        raise EngineError(f"output folder {out.parent} does not exist")
    return out


# a model id is echoed in a message; a longer one that is no model folder is no model at all
MAX_MODEL_ID = 200
TEXT_ARGS = ("text", "next", "previous", "word")
# the flags whose word or text an error may say back (cut there: report.cut_echoes)
ECHOED_ARGS = TEXT_ARGS + ("target", "contrast", "clean", "corrupt", "noise", "ablate")


def _check_text_arg(flag: str, text: str) -> None:
    """An argument Python could not decode holds lone surrogates (PEP 383): one byte each,
    which a tokenizer refuses with a TypeError deep inside a run."""
    at = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if at is None:
        return
    c = text[at]
    what = (f"the byte 0x{ord(c) - 0xdc00:02x}" if "\udc80" <= c <= "\udcff"
            else f"a lone surrogate U+{ord(c):04X}")
    raise TextError(f"{flag} is not UTF-8 text: {what} at character {at + 1}; pass the text in "
                    "UTF-8")


def check_model_id(model: str) -> None:
    if len(model) > MAX_MODEL_ID and not os.path.isdir(model):
        raise EngineError(f"unknown model {quoted(model)}: not in the registry and no model "
                          "folder; see `ctxlens models`")


def _check_not_system(path: str, flag: str = "--output") -> None:
    # the kernel's folders answer "No such file or directory" to a new file, which misleads
    resolved = Path(path).resolve()
    for top in (Path("/proc"), Path("/sys")):
        if resolved == top or top in resolved.parents:
            raise EngineError(f"{flag} {path} cannot be written: {top} holds the system's "
                              "own files; choose another folder")


def check_writable_file(path: str, flag: str = "--output") -> None:
    """An output file (`flag` names it in a message) can be written: checked before any work,
    so that a long run does not end in an error (/proc/x.npz, a folder, a read-only disk).
    Opening for append leaves an existing file as it is; a file this check creates is removed
    again."""
    out = Path(path)
    _check_not_system(path, flag)
    if out.is_dir():
        raise EngineError(f"{flag} {path} is a folder; give a file name")
    if not out.parent.is_dir():
        raise EngineError(f"output folder {out.parent} does not exist")
    try:
        if out.exists():
            open(out, "ab").close()
        else:
            os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            out.unlink()
    except OSError as e:
        raise EngineError(f"{flag} {path} cannot be written ({e.strerror or e})") from None


def check_writable_folder(path: str) -> None:
    """An index folder (--output of `index`): a folder, or one that can be made where asked."""
    import tempfile

    out = Path(path)
    _check_not_system(path)
    if out.exists() and not out.is_dir():
        raise EngineError(f"--output {path} is a file; give a folder for the index")
    there = out
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise EngineError(f"--output {path} cannot be made: {there} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as e:
        raise EngineError(f"--output {path} cannot be written ({e.strerror or e})") from None


def echoed(args) -> list[str]:
    """The words and texts of `args` that an error may say back."""
    return [v for v in (getattr(args, name, None) for name in ECHOED_ARGS) if isinstance(v, str)]


def check_args(args) -> None:
    """What can be checked before a model loads: texts, the model id and the output path."""
    for name in TEXT_ARGS:
        if getattr(args, name, None) is not None:
            _check_text_arg(f"--{name}", getattr(args, name))
    texts = [getattr(args, n) for n in TEXT_ARGS[:3] if getattr(args, n, None) is not None]
    note_unspaced(texts)
    if getattr(args, "model", None) is not None:
        check_model_id(args.model)
    if getattr(args, "output", None) is not None:
        if args.command == "index":
            check_writable_folder(args.output)
        else:
            check_writable_file(args.output)
