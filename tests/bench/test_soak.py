"""bench/soak.py's bookkeeping (the soak itself drives browsers for minutes: make bench)."""
from bench import soak


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
