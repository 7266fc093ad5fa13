"""What the CLI gives back besides its files: exit codes, JSON lines on stdout, progress on
stderr."""
from __future__ import annotations

import contextlib
import json
import sys
import time

# a run a user can fix (a bad flag, file or text); a failure of ctxlens itself
EXIT_USAGE = 2
EXIT_INTERNAL = 1
# JSON allows U+2028 and U+2029 raw inside a string, but JavaScript before ES2019 ends a line
# there: escaped, a JSON line pasted into a script or an HTML page's <script> stays one line
JS_LINE_ENDS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029"})
# runs shorter than this show no progress
PROGRESS_MIN = 50
# without a terminal: a line each tenth of the way, or after this many seconds without one
PROGRESS_SECONDS = 10.0


def to_json(obj) -> str:
    """The CLI's JSON: one line, non-ASCII text as it is (readable), U+2028/U+2029 escaped."""
    return json.dumps(obj, ensure_ascii=False).translate(JS_LINE_ENDS)


def emit_json(obj, output: str | None) -> None:
    """One JSON object (to_json) to the file `output`, or to stdout without one."""
    line = to_json(obj)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    else:
        print(line)


@contextlib.contextmanager
def progress(total: int, unit: str, desc: str, done_verb: str):
    """Yields step(n): tqdm's bar on a terminal; elsewhere (a log file, a pipe, a batch job),
    where a bar draws nothing, plain lines such as "ctxlens: embedded 2000/10000 sentences"."""
    if sys.stderr.isatty() or total < PROGRESS_MIN:
        from tqdm import tqdm

        with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr,
                  disable=total < PROGRESS_MIN or None) as bar:
            yield bar.update
        return
    state = {"done": 0, "tenth": 0, "at": time.monotonic()}
    noun = {"sent": "sentences", "text": "texts"}.get(unit, unit)

    def step(n: int) -> None:
        state["done"] += n
        tenth = 10 * state["done"] // total
        if tenth > state["tenth"] or time.monotonic() - state["at"] >= PROGRESS_SECONDS:
            state.update(tenth=tenth, at=time.monotonic())
            print(f"ctxlens: {done_verb} {state['done']:,}/{total:,} {noun}", file=sys.stderr,
                  flush=True)

    yield step
