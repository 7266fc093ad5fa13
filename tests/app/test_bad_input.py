"""The bad-input cases of bench/bad_input.py, run through the whole app on the tiny models."""
import pytest

from bench.bad_input import CASES, run_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_one_clear_line_and_keeps_the_text(tiny_engine, case):
    query = dict(case.query)
    if "layer_smollm2-135m" in query:          # the tiny GPT stands in for SmolLM2
        query[f"layer_{tiny_engine.gpt}"] = query.pop("layer_smollm2-135m")
    seen = run_case(type(case)(case.name, query, case.expect, case.check), tiny_engine.query())
    assert not seen["exception"], seen["exception"]
    assert seen["one_line"] and seen["text_kept"], seen
    assert case.check(seen), seen
