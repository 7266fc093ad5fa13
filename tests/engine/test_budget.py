"""The work cap (engine/budget.py, issue 66 H1/M1): every heavy Engine method states its work
before it runs and is refused, with the estimate, before its first forward pass when that work
is over the cap. The estimate's operation count is checked against torch's own FLOP counter,
and its pass count against the passes a run makes."""
from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from engine import budget
from engine.api import Engine
from engine.errors import EngineError
from engine.text import to_word_text

NEXT = ("She sat on the river bank and watched the", "She sat on the water bank and watched the")
MASKED = "She sat on the river [MASK] and watched the water ."


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("budget-zoo")
    for name in ("gpt2", "llama", "bert"):
        zoo.copy(f"arch:{name}", root / name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv(budget.MAX_WORK_S_ENV, raising=False)
        mp.delenv(budget.RATE_ENV, raising=False)
        yield Engine(device="cpu"), root


@contextmanager
def rows_run(model):
    """A list holding the rows of every forward pass of `model` while inside (a batch of B
    inputs is B passes, as Work counts them)."""
    rows = [0]

    def count(module, args, kwargs):
        x = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
        rows[0] += int(x.shape[0]) if x is not None and x.dim() > 1 else 1

    handle = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        yield rows
    finally:
        handle.remove()


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_pass_costs_what_torch_counts(served, name):
    """pass_ops (2 × weights × T + 4 × layers × width × T²) against torch's FlopCounterMode
    on the model's own forward of 16 and 64 tokens (its body, without the vocabulary head;
    eager attention, whose matmuls the counter sees: it skips the CPU's fused SDPA kernel)."""
    from torch.utils.flop_counter import FlopCounterMode
    from engine.families.hf.cost import anatomy_of
    from engine.families.hf.forward import attention_implementation

    engine, root = served
    base = engine.adapter(str(root / name)).model.base_model
    for tokens in (16, 64):
        ids = torch.randint(0, base.config.vocab_size, (1, tokens))
        counter = FlopCounterMode(display=False)
        with attention_implementation(base, "eager"), counter, torch.no_grad():
            base(input_ids=ids)
        ratio = budget.pass_ops(anatomy_of(base), tokens) / counter.get_total_flops()
        assert 0.7 <= ratio <= 1.5, (name, tokens, ratio)


def _refused_then_run(engine, model, work_seconds, call, monkeypatch):
    """With the cap at half the estimate: refused, naming it, before any pass; at twice it:
    the rows run, which the estimate bounds from above."""
    monkeypatch.setenv(budget.MAX_WORK_S_ENV, repr(work_seconds / 2))
    with rows_run(model) as rows, pytest.raises(budget.TooMuchWork) as refused:
        call()
    assert rows[0] == 0
    assert str(refused.value).startswith("refused before it starts: ")
    assert "\n" not in str(refused.value)
    monkeypatch.setenv(budget.MAX_WORK_S_ENV, repr(work_seconds * 2))
    with rows_run(model) as rows:
        call()
    return rows[0]


def test_patching_is_refused_before_its_first_pass_and_runs_what_it_said(served, monkeypatch):
    engine, root = served
    model_id = str(root / "gpt2")
    work = engine.patch_work(model_id, NEXT[0], NEXT[1], None, "residual", None, 5)
    tokens = engine.adapter(model_id).count_tokens(to_word_text(NEXT[0]))
    assert work.tokens == tokens
    assert work.passes == (engine.adapter(model_id).info.n_layers + 1) * tokens + 2
    ran = _refused_then_run(engine, engine.adapter(model_id).model, work.seconds,
                            lambda: engine.patch(model_id, NEXT[0], NEXT[1], "river"),
                            monkeypatch)
    # the cells before the first changed token are skipped, never more than the estimate
    assert work.passes / 3 <= ran <= work.passes


def test_noise_seeds_multiply_the_work(served):
    engine, root = served
    one = engine.patch_work(str(root / "llama"), NEXT[0], None, None, "mlp", "river", 1)
    five = engine.patch_work(str(root / "llama"), NEXT[0], None, None, "mlp", "river", 5)
    assert five.passes == 5 * one.passes and five.seconds == pytest.approx(5 * one.seconds)
    assert "5 seeds" in five.what and "fewer seeds" in five.shorter


def test_head_importance_is_refused_before_its_first_pass(served, monkeypatch):
    engine, root = served
    model_id = str(root / "bert")
    works = engine.head_importance_work(model_id, MASKED, None)
    heads = engine.adapter(model_id).info.n_layers * engine.adapter(model_id).info.n_heads
    assert works[0].passes == heads + 1 and works[1].backward
    ran = _refused_then_run(engine, engine.adapter(model_id).model, budget.estimate(*works),
                            lambda: engine.head_importance(model_id, MASKED, "river"),
                            monkeypatch)
    assert heads + 1 <= ran <= works[0].passes + works[1].passes + 1


@pytest.mark.parametrize("method", ["ig", "gradxinput", "occlusion"])
def test_an_attribution_is_refused_before_its_first_pass(served, monkeypatch, method):
    engine, root = served
    model_id = str(root / "gpt2")
    works = engine.attribute_work(model_id, NEXT[0], None, method, None)
    if method == "ig":       # the whole ladder: a map that does not converge climbs it all
        assert any(w.backward and w.passes == 32 + 64 + 128 + 256 for w in works)
    ran = _refused_then_run(engine, engine.adapter(model_id).model, budget.estimate(*works),
                            lambda: engine.attribute(model_id, NEXT[0], "river",
                                                     method=method, kind="next"),
                            monkeypatch)
    assert 0 < ran <= sum(w.passes for w in works) + 2


def test_generation_and_the_logits_parts_are_bounded_too(served, monkeypatch):
    engine, root = served
    model_id = str(root / "gpt2")
    monkeypatch.setenv(budget.RATE_ENV, "1")           # one operation a second: nothing fits
    model = engine.adapter(model_id).model
    with rows_run(model) as rows:
        for call in (lambda: engine.generate(model_id, NEXT[0], 5),
                     lambda: engine.components(model_id, NEXT[0], "river")):
            with pytest.raises(budget.TooMuchWork, match="refused before it starts"):
                call()
    assert rows[0] == 0


def test_an_empty_prompt_is_still_written_from_the_start_token(served):
    """The generation's estimate reads the prompt's tokens; an empty prompt has none to
    count (generation.generate starts it from the model's start token)."""
    engine, root = served
    assert len(engine.generate(str(root / "gpt2"), "", 3).tokens) == 3


def test_a_result_already_computed_is_not_refused(served, monkeypatch):
    """The cap guards work; a cached result costs none."""
    engine, root = served
    model_id = str(root / "gpt2")
    first = engine.patch(model_id, NEXT[0], NEXT[1], "bank", site="mlp")
    monkeypatch.setenv(budget.RATE_ENV, "1")
    assert engine.patch(model_id, NEXT[0], NEXT[1], "bank", site="mlp") is first


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "0"])
def test_a_bad_cap_setting_is_one_line(monkeypatch, value):
    monkeypatch.setenv(budget.MAX_WORK_S_ENV, value)
    with pytest.raises(EngineError, match=budget.MAX_WORK_S_ENV):
        budget.max_seconds()
    monkeypatch.setenv(budget.RATE_ENV, value)
    with pytest.raises(EngineError, match=budget.RATE_ENV):
        budget.rate("cpu")


def test_durations_read_as_people_say_them():
    assert [budget.duration(s) for s in (0.2, 40, 12 * 60, 28 * 3600, 6 * 86400)] == \
        ["1 s", "40 s", "12 min", "28 h", "6 days"]


@pytest.mark.slow
def test_the_day_long_link_is_refused_on_smollm2_at_once(monkeypatch):
    """Issue 66 H1: 300 astral-plane characters (84 words, inside every text cap) are 1,197
    SmolLM2 tokens; patching them is 31 × 1,197 cells, about a day of this machine. Refused
    with the estimate before a forward pass, and so is the 128-word patching of M1."""
    monkeypatch.delenv(budget.MAX_WORK_S_ENV, raising=False)
    monkeypatch.delenv(budget.RATE_ENV, raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)     # the rate of 2 cores
    engine = Engine()
    text = "".join(chr(0x10000 + 37 * i) for i in range(300))
    corrupt = chr(0x10001) + text[1:]
    adapter = engine.adapter("smollm2-135m")
    assert adapter.count_tokens(to_word_text(text)) == 1197
    work = engine.patch_work("smollm2-135m", text, corrupt, None, "residual", None, 5)
    assert work.passes == 31 * 1197 + 2 and work.seconds > 10 * 3600
    words = " ".join(["a"] * 128)
    with rows_run(adapter.model) as rows:
        with pytest.raises(budget.TooMuchWork, match=r"31 × 1,197 cells .* about \d+ h here"):
            engine.patch("smollm2-135m", text, corrupt, "a")
        with pytest.raises(budget.TooMuchWork, match="31 × 1[23]\\d cells"):
            engine.patch("smollm2-135m", words, "b" + words[1:], "a")
        with pytest.raises(budget.TooMuchWork, match="knocking out each of 270 heads"):
            engine.head_importance("smollm2-135m", text, "a", kind="next")
    assert rows[0] == 0
