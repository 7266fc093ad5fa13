"""Soak: N browser sessions at once drive the whole app for M minutes and we watch what breaks.

    python -m bench.soak [--sessions 4] [--long 2] [--minutes 5] [--pause 60] [--idle 120]
                         [--result-cache-mb 64] [--pages ...] [--out results]

One `streamlit run` server (the repository's config, bundled models) and one headless Chromium
with a separate browser context per session (its own cookies, so its own Streamlit session).
Each session types its own sentences (every one names the session's person: "Alice saw a mouse
..."), then visits every page in turn until time is up. After each page settles it records:
an exception box on the page, the sentence box not holding its own text, another session's
person anywhere on the page or in its address. The last `--long` sessions type instead two
sentences at the input caps, one in Arabic (right to left) and one in Hindi (Devanagari), 128
words each, with their words reshuffled every round: each round is new to every cache, and
their attention maps are hundreds of MB (SmolLM2-135M: ~700 tokens). Every session first
finishes one full round (every page, so every model loaded and every cache used); then all of
them wait `--pause` seconds, open and idle: that is the warm level. Then they go on for
`--minutes`, and after they close the server is left idle for `--idle` seconds. The server's RSS is sampled every 5 s and its log
scanned for warnings and tracebacks. The server's result cache is bounded at
`--result-cache-mb` (64 MB): at the app's default (1024 MB) the growth measured is mostly that
cache filling to a bound it already has. Written to results/soak.md and soak.json.

Targets (#18, #47): 0 exceptions, RSS growth <= 10% over the rounds after the pause (their
first third against their last), RSS after the idle time within 10% of the warm level, no
session sees another's sentences or settings.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

from bench.server import streamlit_server
from engine.cache import RESULT_CACHE_MB

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
PEOPLE = ("Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines",
          "Jonas", "Kemal", "Lena", "Mateo", "Nadia", "Oskar", "Priya")
PAGES = ("Polysemy clusters", "Layers side by side", "Compare layers", "ELMo layer weights",
         "Attention", "Predictions", "Benchmarks")
PAGE_WAIT_MS = 240_000
RSS_GROWTH_TARGET = 0.10
# the result cache fills toward its byte bound over a run (RESULT_CACHE_MB by default; one long
# sentence's attention maps alone are 370 MB): with a small bound, the growth the soak measures
# is what no bound holds
SOAK_RESULT_CACHE_MB = 64


def sentences(person: str) -> list[str]:
    return [f"{person} saw a mouse run under the table .",
            f"{person} clicked the mouse twice .",
            f"The mouse that {person} bought needs batteries .",
            f"A cat caught the mouse in {person}'s kitchen ."]


# words of everyday sentences, reshuffled into long ones (engine.text caps a sentence at 128
# words and 1000 characters)
ARABIC = ("ذهب الولد إلى المدرسة في الصباح مع أخته الصغيرة وقرأ كتابا جديدا عن البحر والسفن "
          "ثم عاد إلى البيت").split()
HINDI = ("राम ने सुबह बाज़ार से ताज़ी सब्ज़ियाँ खरीदीं और घर लौटकर अपनी माँ के साथ खाना "
         "बनाया फिर किताब पढ़ी").split()
LONG_WORDS = 128


def long_sentences(person: str, round_: int) -> list[str]:
    """Two sentences of LONG_WORDS words, the person's name first, the rest reshuffled by
    round: every round asks the models about texts none of the caches holds."""
    rng = random.Random(f"{person}-{round_}")
    return [" ".join([person] + rng.choices(words, k=LONG_WORDS - 1)) for words in
            (ARABIC, HINDI)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _settle(page) -> None:
    await page.wait_for_timeout(300)
    await page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
        timeout=PAGE_WAIT_MS)
    await page.wait_for_timeout(800)


async def _type(page, mine: list[str], word: str) -> None:
    box = page.get_by_role("textbox", name="Sentences, one per line", exact=True)
    await box.fill("\n".join(mine))
    await box.press("Control+Enter")
    await _settle(page)
    target = page.get_by_role("textbox", name="Target word", exact=True)
    await target.fill(word)
    await target.press("Enter")
    await _settle(page)


async def session(browser, url: str, k: int, deadline: float, log: list, stats: dict,
                  long: bool = False, pages: tuple[str, ...] = PAGES,
                  warmed=None) -> None:
    """`warmed(stats)`: awaited once, after the session's first round (or its failure), and
    returns the deadline of the rest of the run: the pause in between, with every session
    open and idle, is the warm level memory is measured against."""
    person = PEOPLE[k % len(PEOPLE)]
    others = [p for p in PEOPLE if p != person]
    # a long session's target is the person's name, the one word both its sentences hold
    mine, word = (long_sentences(person, 0), person) if long else (sentences(person), "mouse")
    ctx = await browser.new_context(viewport={"width": 1300, "height": 900})
    page = await ctx.new_page()
    s = stats[person] = {"pages": 0, "rounds": 0, "exceptions": 0, "leaks": 0,
                         "text_lost": 0, "timeouts": 0, "long": long}
    try:
        await page.goto(url, timeout=PAGE_WAIT_MS)
        await page.wait_for_selector("[data-testid='stSidebar']", timeout=PAGE_WAIT_MS)
        box = page.get_by_role("textbox", name="Sentences, one per line", exact=True)
        # typed on the first page visited: typed elsewhere, a page a short run never visits
        # computes them for every model first
        await page.get_by_role("link", name=pages[0]).first.click()
        await _settle(page)
        await _type(page, mine, word)
        if warmed:          # the first round runs to its end; warmed() sets the deadline
            deadline = float("inf")
        while time.monotonic() < deadline:
            if long and s["rounds"]:
                mine = long_sentences(person, s["rounds"])
                await _type(page, mine, word)
            for name in pages:
                if time.monotonic() >= deadline:
                    break
                try:
                    await page.get_by_role("link", name=name).first.click()
                    await _settle(page)
                except Exception as exc:  # noqa: BLE001 - a slow page is recorded, not fatal
                    s["timeouts"] += 1
                    log.append(f"{person} {name}: {type(exc).__name__}")
                    continue
                s["pages"] += 1
                if await page.locator('[data-testid="stException"]').count():
                    s["exceptions"] += 1
                    log.append(f"{person} {name}: exception box")
                body = await page.locator("body").inner_text()
                seen = [p for p in others
                        if re.search(rf"\b{p}\b", body) or re.search(rf"\b{p}\b", page.url)]
                if seen:
                    s["leaks"] += 1
                    log.append(f"{person} {name}: sees {', '.join(seen)}")
                if (await box.input_value()).splitlines() != mine:
                    s["text_lost"] += 1
                    log.append(f"{person} {name}: sentence box changed")
            s["rounds"] += 1
            if warmed and s["rounds"] == 1:
                deadline = await warmed()
    finally:
        if warmed and not s["rounds"]:
            await warmed(failed=True)
        await ctx.close()


async def drive(url: str, n: int, minutes: float, server_pid: int, long: int = 0,
                idle: float = 0, pages: tuple[str, ...] = PAGES, pause: float = 0) -> dict:
    """With `pause`: every session first finishes one full round (every page, every model
    loaded, the long sentences run once), then all wait `pause` seconds (the warm level), then
    they go on for `minutes`; without it, `minutes` from the start."""
    from playwright.async_api import async_playwright

    log: list[str] = []
    stats: dict = {}
    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    deadline = start + 60 * minutes
    phases: dict = {}
    arrived, go = [0], asyncio.Event()

    async def warmed(failed: bool = False) -> float:
        arrived[0] += 1
        if arrived[0] == n:
            phases["warm_round_s"] = time.monotonic() - start
            await asyncio.sleep(pause)
            phases["pause"] = (phases["warm_round_s"], time.monotonic() - start)
            phases["deadline"] = time.monotonic() + 60 * minutes
            go.set()
        if not failed:
            await go.wait()
        return phases.get("deadline", deadline)

    async def sample():
        while True:
            samples.append((time.monotonic() - start, rss_mb(server_pid)))
            await asyncio.sleep(5)

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        sampler = asyncio.create_task(sample())
        # sessions start a second apart, as people arrive
        tasks = []
        for k in range(n):
            tasks.append(asyncio.create_task(session(
                browser, url, k, deadline, log, stats, long=k >= n - long, pages=pages,
                warmed=warmed if pause else None)))
            await asyncio.sleep(1)
        done = await asyncio.gather(*tasks, return_exceptions=True)
        await browser.close()
        closed = time.monotonic() - start
        await asyncio.sleep(idle)       # every session gone: what the server gives back
        sampler.cancel()
    failures = [f"{type(d).__name__}: {d}" for d in done if isinstance(d, BaseException)]
    return {"stats": stats, "log": log, "rss": samples, "session_failures": failures,
            "seconds": closed, "idle": idle, "pages": pages,
            **{k: v for k, v in phases.items() if k != "deadline"}}


def summarise(run: dict, n: int, minutes: float, server_log: str) -> dict:
    stats = run["stats"].values()
    rounds = [s["rounds"] for s in stats]
    # warm-up: until every session has finished its first round (its pages all loaded once);
    # approximated by the first third of the run when a session never finished one
    idle_s = run.get("idle", 0)
    rss = [(t, m) for t, m in run["rss"] if t <= run["seconds"]]
    idle = [m for t, m in run["rss"] if t > run["seconds"] + idle_s / 2] if idle_s else []
    if "pause" in run:
        # warm: the pause's second half, every session open and idle after a full round;
        # growth: the rounds after it, their first third against their last
        p0, p1 = run["pause"]
        paused = [m for t, m in rss if (p0 + p1) / 2 <= t <= p1]
        third = (run["seconds"] - p1) / 3
        first = [m for t, m in rss if p1 < t <= p1 + third]
        late = [m for t, m in rss if t >= run["seconds"] - third]
        warm_t = p1
        warm = float(np.median(paused)) if paused else float("nan")
        active = float(np.median(first)) if first else float("nan")
    else:
        warm_t = run["seconds"] / 3
        # medians of the middle and the last third: single samples swing by gigabytes as
        # models load and sessions close (the last one is taken while the sessions shut down)
        middle = [m for t, m in rss if warm_t <= t < 2 * warm_t]
        late = [m for t, m in rss if t >= 2 * warm_t]
        warm = active = float(np.median(middle)) if middle else float("nan")
    last = float(np.median(late)) if late else float("nan")
    noisy = [ln for ln in server_log.splitlines()
             if any(w in ln for w in ("Traceback", "Error", "Exception", "WARNING", "Warning"))]
    return {
        "sessions": n, "minutes": minutes, "seconds": run["seconds"],
        "pages_visited": sum(s["pages"] for s in stats),
        "rounds_min": min(rounds, default=0), "rounds_max": max(rounds, default=0),
        "exceptions": sum(s["exceptions"] for s in stats),
        "leaks": sum(s["leaks"] for s in stats),
        "text_lost": sum(s["text_lost"] for s in stats),
        "timeouts": sum(s["timeouts"] for s in stats),
        "session_failures": run["session_failures"],
        "server_log_errors": len(noisy), "server_log_sample": noisy[:5],
        "rss_start_mb": rss[0][1] if rss else float("nan"),
        "rss_warm_mb": warm, "rss_active_mb": active, "rss_end_mb": last,
        "rss_peak_mb": max((m for _, m in rss), default=float("nan")),
        "rss_growth_after_warmup": (last - active) / active,
        "pause": run.get("pause"),
        # the median of the idle time's second half, every session closed
        "long_sessions": sum(bool(s.get("long")) for s in stats), "idle_s": idle_s,
        "pages": list(run.get("pages", PAGES)),
        "rss_idle_mb": float(np.median(idle)) if idle else float("nan"),
        "rss_idle_vs_warm": (float(np.median(idle)) - warm) / warm if idle else float("nan"),
        "warmup_s": warm_t, "rss_series": run["rss"], "log": run["log"][:50],
    }


def report(s: dict) -> str:
    def ok(passed: bool) -> str:
        return "meets target" if passed else "MISSES target"

    growth = s["rss_growth_after_warmup"]
    from bench.analysis.cloze import wilson

    visits = max(1, s["pages_visited"])

    def per_visit(k: int) -> str:
        lo, hi = wilson(k, visits)
        return f"{k} of {visits} visits (95% CI {lo:.1%}–{hi:.1%})"

    rows = [
        ["exceptions shown on a page", per_visit(s["exceptions"]), "0",
         ok(s["exceptions"] == 0)],
        ["server log: warnings, errors, tracebacks", str(s["server_log_errors"]), "0",
         ok(s["server_log_errors"] == 0)],
        ["a session saw another's sentences or settings", per_visit(s["leaks"]), "0",
         ok(s["leaks"] == 0)],
        ["a session's sentence box lost its text", per_visit(s["text_lost"]), "0",
         ok(s["text_lost"] == 0)],
        [("server RSS growth after warm-up (the rounds after the pause, median of their "
          "first third → median of their last third: " if s.get("pause") else
          "server RSS growth after warm-up (median of the middle third of the run → median "
          "of the last third: ")
         + f"{s.get('rss_active_mb', s['rss_warm_mb']):.0f} → {s['rss_end_mb']:.0f} MB)",
         f"{growth:+.1%}", f"≤ {RSS_GROWTH_TARGET:.0%}", ok(growth <= RSS_GROWTH_TARGET)],
        ["pages that did not settle within 4 minutes", str(s["timeouts"]), "(reported)", ""],
    ]
    if s["idle_s"]:
        rows.insert(-1, [f"server RSS after {s['idle_s']:.0f} s idle, every session closed, vs "
                         f"the warm level ({s['rss_warm_mb']:.0f} → {s['rss_idle_mb']:.0f} MB)",
                         f"{s['rss_idle_vs_warm']:+.1%}",
                         f"≤ {RSS_GROWTH_TARGET:.0%}",
                         ok(s["rss_idle_vs_warm"] <= RSS_GROWTH_TARGET)])
    from bench.tables import table

    series = ", ".join(f"{t:.0f} s {m:.0f}" for t, m in s["rss_series"][::6])
    out = ["# Soak: concurrent browser sessions", "",
           f"`python -m bench.soak --sessions {s['sessions']} --long {s['long_sessions']} "
           f"--minutes {s['minutes']:g} --result-cache-mb {s.get('result_cache_mb', RESULT_CACHE_MB)} --pause {(s['pause'][1] - s['pause'][0]) if s.get('pause') else 0:.0f} --idle {s['idle_s']:g}"
           + (f" --pages {','.join(s['pages'])}" if s.get("pages", PAGES) != list(PAGES) else "")
           + "`: "
           f"{s['sessions']} headless Chromium sessions (separate browser contexts; the last "
           f"{s['long_sessions']} with a 128-word Arabic and a 128-word Hindi sentence, "
           "reshuffled every round) against one "
           f"`streamlit run` server with the bundled models on this machine's 2 cores, for "
           f"{s['seconds'] / 60:.1f} minutes. Each session typed its own sentences (four "
           "short ones, or the two long ones; each naming the session's person) and visited "
           + ("every page" if s.get("pages", PAGES) == list(PAGES) else ", ".join(s["pages"]))
           + " in turn: "
           f"{s['pages_visited']} page visits, {s['rounds_min']}–{s['rounds_max']} full "
           "rounds per session. "
           f"The server's result cache was bounded at {s.get('result_cache_mb', RESULT_CACHE_MB)} MB "
           f"(CTXLENS_RESULT_CACHE_MB; the app's default is {RESULT_CACHE_MB} MB), so that "
           "the growth "
           "measured is not that cache filling to its bound.", "",
           table(["measurement", "value", "target", "result"], rows), "",
           "Intervals: 95% Wilson over page visits (visits of one session are not independent, "
           "so they are optimistic); RSS is one series and carries none.", "",
           f"Server RSS (MB): start {s['rss_start_mb']:.0f}, peak {s['rss_peak_mb']:.0f}; "
           + (f"every session had finished a full round (every page, every model loaded) "
              f"at {s['pause'][0]:.0f} s; all then paused, open and idle, until "
              f"{s['pause'][1]:.0f} s, and the median of the pause's second half is the warm "
              f"level ({s['rss_warm_mb']:.0f} MB). " if s.get("pause") else
              f"warm-up taken as the first {s['warmup_s']:.0f} s (models load on first use). ")
           + f"Every 30 s: {series}.", ""]
    if s["session_failures"]:
        out += ["Sessions that stopped early: " + "; ".join(s["session_failures"]), ""]
    if s["log"]:
        out += ["First events:", ""] + [f"- {e}" for e in s["log"][:20]] + [""]
    if s["server_log_sample"]:
        out += ["Server log lines:", ""] + [f"    {ln}" for ln in s["server_log_sample"]] + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--long", type=int, default=2,
                    help="how many of the sessions type the long Arabic and Hindi sentences")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--pause", type=float, default=60.0,
                    help="seconds every session waits, open and idle, after its first full "
                         "round: the warm level (0: the middle third of the run instead)")
    ap.add_argument("--idle", type=float, default=120.0,
                    help="seconds the server is watched idle after the sessions close")
    ap.add_argument("--pages", default=",".join(PAGES),
                    help="the pages each session visits, comma-separated (default: all)")
    ap.add_argument("--result-cache-mb", type=int, default=SOAK_RESULT_CACHE_MB,
                    help="the server's result-cache bound (CTXLENS_RESULT_CACHE_MB); small, so "
                         "that the growth measured is not that cache filling to its bound")
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    args = ap.parse_args(argv)
    pages = tuple(p.strip() for p in args.pages.split(",") if p.strip())
    log_path = Path(f"/tmp/ctxlens-soak-{os.getpid()}.log")
    env = {"CTXLENS_RESULT_CACHE_MB": str(args.result_cache_mb)}
    with open(log_path, "w") as log, streamlit_server(log, env=env) as (url, server):
        time.sleep(3)
        run = asyncio.run(drive(f"{url}/", args.sessions, args.minutes, server.pid,
                                long=min(args.long, args.sessions), idle=args.idle,
                                pages=pages, pause=args.pause))
    s = summarise(run, args.sessions, args.minutes, log_path.read_text())
    s["result_cache_mb"] = args.result_cache_mb
    from bench.meta import meta

    s["meta"] = meta("python -m bench.soak " + " ".join(argv if argv is not None else sys.argv[1:]))
    args.out.mkdir(exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(s, indent=1))
    (args.out / "soak.md").write_text(report(s))
    print(report(s))
    passed = (s["exceptions"] == 0 and s["leaks"] == 0 and s["text_lost"] == 0
              and s["server_log_errors"] == 0 and s["rss_growth_after_warmup"] <= RSS_GROWTH_TARGET
              and not s["rss_idle_vs_warm"] > RSS_GROWTH_TARGET)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
