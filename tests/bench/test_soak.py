"""bench/soak.py's bookkeeping (the soak itself drives browsers for minutes: make bench)."""
from concurrent.futures import ThreadPoolExecutor

from bench import soak


def _main(argv: list[str]) -> int:
    """soak.main as its own process runs it: in a thread with no event loop (a pytest-xdist
    worker that has run the browser tests keeps Playwright's loop running in its main thread,
    and asyncio.run refuses to start inside it)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(soak.main, argv).result()


def _run(rss, stats):
    return {"stats": stats, "log": [], "rss": rss, "session_failures": [], "seconds": 300.0}


def test_growth_is_measured_after_the_warm_up_and_events_are_counted():
    rss = [(t, 1000.0 if t < 100 else 1500.0 + 3 * (t - 100)) for t in range(0, 301, 5)]
    stats = {"Alice": {"pages": 14, "rounds": 2, "exceptions": 1, "leaks": 0, "text_lost": 0,
                       "timeouts": 0},
             "Bruno": {"pages": 7, "rounds": 1, "exceptions": 0, "leaks": 2, "text_lost": 1,
                       "timeouts": 1}}
    s = soak.summarise(_run(rss, stats), 2, 5, "ok\nTraceback (most recent call last):\nok")
    assert s["pages_visited"] == 21 and (s["rounds_min"], s["rounds_max"]) == (1, 2)
    assert (s["exceptions"], s["leaks"], s["text_lost"], s["timeouts"]) == (1, 2, 1, 1)
    assert s["server_log_errors"] == 1
    # medians of the middle third (100-195 s) and the last (200-300 s)
    assert s["rss_warm_mb"] == 1642.5 and s["rss_end_mb"] == 1950.0
    assert abs(s["rss_growth_after_warmup"] - 307.5 / 1642.5) < 1e-9
    text = soak.report(s)
    assert "MISSES target" in text and "+18.7%" in text


def test_every_session_names_its_own_person_in_every_sentence():
    for person in soak.PEOPLE[:8]:
        lines = soak.sentences(person)
        assert all(person in line and "mouse" in line for line in lines)


def test_long_sessions_type_arabic_and_hindi_at_the_caps_reshuffled_every_round():
    from engine.text import MAX_CHARS, MAX_WORDS, split_words

    first, second = soak.long_sentences("Alice", 0), soak.long_sentences("Alice", 1)
    assert first != second and first == soak.long_sentences("Alice", 0)
    for text in first + second:
        words = split_words(text).words
        assert len(words) == MAX_WORDS and len(text) <= MAX_CHARS and words[0] == "Alice"
    assert any("\u0600" <= c <= "\u06ff" for c in first[0])        # Arabic, right to left
    assert any("\u0900" <= c <= "\u097f" for c in first[1])        # Devanagari


def test_rss_after_the_idle_time_is_compared_with_the_warm_level():
    rss = [(t, 1000.0 if t <= 300 else (1600.0 if t < 360 else 1200.0))
           for t in range(0, 421, 5)]
    stats = {"Alice": {"pages": 7, "rounds": 1, "exceptions": 0, "leaks": 0, "text_lost": 0,
                       "timeouts": 0, "long": True}}
    s = soak.summarise({**_run(rss, stats), "idle": 120.0}, 1, 5, "")
    assert s["long_sessions"] == 1 and s["rss_warm_mb"] == 1000.0
    assert s["rss_idle_mb"] == 1200.0 and abs(s["rss_idle_vs_warm"] - 0.2) < 1e-9
    assert s["rss_end_mb"] == 1000.0          # idle samples are not the run's last third
    assert "120 s idle" in soak.report(s) and "MISSES target" in soak.report(s)


def test_with_a_pause_the_warm_level_is_the_pause_and_growth_the_rounds_after_it():
    """Models load during the first round: growth counts only the rounds after the pause, and
    the idle server is compared with the paused one (every model loaded, sessions open)."""
    def rss_at(t):
        if t < 200:
            return 500.0 + 5 * t            # round one: models load
        if t <= 260:
            return 1800.0                   # the pause
        if t <= 560:
            return 2000.0 + (t - 260)       # the rounds after it: +1 MB/s
        return 1850.0                       # idle, every session closed
    rss = [(t, rss_at(t)) for t in range(0, 681, 5)]
    stats = {"Alice": {"pages": 14, "rounds": 2, "exceptions": 0, "leaks": 0, "text_lost": 0,
                       "timeouts": 0}}
    run = {**_run(rss, stats), "seconds": 560.0, "idle": 120.0, "pause": (200.0, 260.0)}
    s = soak.summarise(run, 1, 5, "")
    assert s["rss_warm_mb"] == 1800.0
    # first third of 260-560 s: 265-360 s, median 2052.5; last third 460-560 s, median 2250
    assert s["rss_active_mb"] == 2052.5 and s["rss_end_mb"] == 2250.0
    assert abs(s["rss_growth_after_warmup"] - 197.5 / 2052.5) < 1e-9
    assert abs(s["rss_idle_vs_warm"] - 50 / 1800) < 1e-9
    text = soak.report(s)
    assert "--pause 60" in text and "paused, open and idle, until 260 s" in text
    assert "+2.8%" in text and "+9.6%" in text


def test_the_soaked_server_bounds_its_result_cache_small_and_the_report_says_so(monkeypatch,
                                                                              tmp_path):
    """At the app's default bound (1024 MB) the soak's growth after the warm level was mostly
    the result cache filling toward that bound; the server it starts holds a small one."""
    import contextlib
    import types

    seen = {}

    @contextlib.contextmanager
    def server(output, env=None, **kw):
        seen["env"] = env
        yield "http://127.0.0.1:1", types.SimpleNamespace(pid=1)

    async def drive(url, n, minutes, pid, **kw):
        stats = {"Alice": {"pages": 7, "rounds": 1, "exceptions": 0, "leaks": 0,
                           "text_lost": 0, "timeouts": 0}}
        return _run([(float(t), 1000.0) for t in range(0, 301, 5)], stats)

    monkeypatch.setattr(soak, "streamlit_server", server)
    monkeypatch.setattr(soak, "drive", drive)
    monkeypatch.setattr(soak.time, "sleep", lambda s: None)
    assert _main(["--pause", "0", "--idle", "0", "--out", str(tmp_path)]) == 0
    assert seen["env"]["CTXLENS_RESULT_CACHE_MB"] == str(soak.SOAK_RESULT_CACHE_MB) == "64"
    text = (tmp_path / "soak.md").read_text()
    assert "--result-cache-mb 64" in text and "bounded at 64 MB" in text
    _main(["--pause", "0", "--idle", "0", "--result-cache-mb", "1024", "--out", str(tmp_path)])
    assert seen["env"]["CTXLENS_RESULT_CACHE_MB"] == "1024"
