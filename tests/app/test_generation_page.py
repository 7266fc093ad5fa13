"""The Generation page on the tiny random GPT-2 (tests/zoo.py): the tokens, steps and
ranks shown are Engine.generate's, sampling repeats with its seed, a generated token is
explained over the text before it, and the page lives in the link."""
import numpy as np
import pytest

from app.figures import visible_token
from engine.api import Engine
from tests.app.helpers import figure, figures, messages, no_failures, page, title

pytestmark = pytest.mark.usefixtures("tiny_engine")
PROMPT = "The bank is"


def _generated(tiny, tokens: int = 6, sample: bool = False, seed: int = 0):
    at = page("generation")
    at.query_params["gen_model"] = tiny.gpt
    at.run()
    at.text_area(key="gen_prompt").set_value(PROMPT)
    at.slider(key="gen_tokens").set_value(tokens)
    at.toggle(key="gen_sample").set_value(sample).run()
    if sample:          # the seed box is enabled once sampling is on
        at.number_input(key="gen_seed").set_value(seed).run()
    return at


def _shown_tokens(at) -> list[str]:
    return at.dataframe[0].value["token"].tolist()


def test_the_generated_tokens_are_engine_generates(tiny_engine):
    at = _generated(tiny_engine)
    no_failures(at)
    gen = Engine().generate(tiny_engine.gpt, PROMPT, 6)
    assert _shown_tokens(at) == [visible_token(t) for t in gen.tokens]
    assert any(t.value == PROMPT + gen.text for t in at.text)
    steps = figure(at, "Each generated token")
    assert np.allclose(steps["data"][0]["y"], gen.prob, atol=1e-6)
    assert np.allclose(steps["data"][1]["y"], gen.entropy, atol=1e-5)
    ranks = figure(at, "Rank of the generated token")
    shown = np.array(ranks["data"][0]["text"], dtype=int)
    assert (shown == gen.layer_ranks.T).all()
    assert figure(at, "Attention of generated tokens")
    # the tokens shown are transformers' own greedy generate of 6 tokens (none the end)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_engine.gpt)
    model = AutoModelForCausalLM.from_pretrained(tiny_engine.gpt).eval()
    ids = torch.tensor([tok(PROMPT)["input_ids"]])
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=6, do_sample=False,
                              pad_token_id=tok.eos_token_id)[0, ids.shape[1]:].tolist()
    assert len(want) == 6 and tok.eos_token_id not in want, want
    assert _shown_tokens(at) == [visible_token(tok.decode([i])) for i in want]


def test_a_seeded_draw_is_engine_generates_with_that_seed(tiny_engine):
    at = _generated(tiny_engine, tokens=8, sample=True, seed=3)
    no_failures(at)
    gen = Engine().generate(tiny_engine.gpt, PROMPT, 8, sample=True, temperature=1.0, seed=3)
    assert _shown_tokens(at) == [visible_token(t) for t in gen.tokens]
    assert any("seed 3" in c.value for c in at.caption)


def test_a_generated_token_is_explained_over_the_text_before_it(tiny_engine):
    at = _generated(tiny_engine)
    gen = Engine().generate(tiny_engine.gpt, PROMPT, 6)
    i = next(j for j, t in enumerate(gen.tokens) if t.strip())
    at.selectbox(key="gen_explain").set_value(i).run()
    no_failures(at)
    maps = [f for f in figures(at) if title(f).startswith("gradient × input: why")]
    assert maps, [title(f) for f in figures(at)]
    att = Engine().attribute(tiny_engine.gpt, gen.contexts[i], gen.tokens[i].strip(),
                             method="gradxinput", kind="next")
    assert maps[0]["data"][0]["text"][0] == list(att.words)
    assert np.allclose(maps[0]["data"][0]["z"][0], att.scores, atol=1e-6)


def test_too_many_tokens_for_the_model_is_one_line_and_keeps_the_prompt(tiny_engine):
    at = page("generation")
    at.query_params["gen_model"] = tiny_engine.gpt
    at.run()
    at.text_area(key="gen_prompt").set_value(" ".join(["bank"] * 40))
    at.slider(key="gen_tokens").set_value(60).run()       # past its 64 positions
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(messages(at)["warning"]) == 1 and "positions" in messages(at)["warning"][0]
    assert at.text_area(key="gen_prompt").value.startswith("bank bank")


def test_the_generation_lives_in_the_link(tiny_engine):
    at = _generated(tiny_engine, tokens=5, sample=True, seed=7)
    params = {k: v[0] if isinstance(v, list) else v for k, v in dict(at.query_params).items()}
    assert params["gen_prompt"] == PROMPT and params["gen_tokens"] == "5"
    assert params["gen_seed"] == "7" and params["gen_sample"] == "True"
    again = page("generation")
    for k, v in params.items():
        again.query_params[k] = v
    again.run()
    no_failures(again)
    assert _shown_tokens(again) == _shown_tokens(at)
