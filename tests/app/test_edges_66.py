"""Issue 66's edges of the "parts" and generation views, on the tiny random checkpoints:
patching a text against itself says there is nothing to restore (L3), the Generation page
states every cap and which tokens "Why this token?" can explain (L5), a knock-out spec typed
many times over is shown once, as the engine reads it (L8), and the patching NPZ says what
its axes are, as the CLI's does (L9)."""
import io
import re

import numpy as np
import pytest

from app import export, knockout
from engine.api import Engine
from engine.generation import MAX_GENERATED_TOKENS
from engine.text import MAX_CHARS, MAX_WORDS, TextError
from tests.app.helpers import figures, messages, no_failures, page, title

pytestmark = pytest.mark.usefixtures("tiny_engine")
TEXT, TARGET = "The bank is", "open"
# what the finding asks the page and the CLI to say
NOTHING_TO_RESTORE = "the corrupted run gives the same f as the clean one: nothing to restore"


def _captions(at) -> list[str]:
    return [re.sub(r"\\(.)", r"\1", c.value) for c in at.caption]


def _patching(model: str, **boxes):
    at = page("components")
    at.query_params.update(parts_model=model, parts_view="Activation patching",
                           patch_text_next=TEXT, patch_target_next=TARGET, **boxes)
    return at


# -- L3 ------------------------------------------------------------------------------------
def test_patching_a_text_against_itself_says_there_is_nothing_to_restore(tiny_engine):
    at = _patching(tiny_engine.gpt, patch_corrupt_next=TEXT).run()
    no_failures(at)
    said = [m for m in messages(at)["info"] if NOTHING_TO_RESTORE in m.lower()]
    assert len(said) == 1, messages(at)
    # no grid of NaN is drawn (and no CSV of NaN offered under it)
    assert not [f for f in figures(at) if "share of f restored" in title(f)]
    p = Engine().patch(tiny_engine.gpt, TEXT, TEXT, TARGET, kind="next")
    assert p.nothing_to_restore and np.isnan(p.restored).all()
    assert any(f"clean {p.clean:.3f}, corrupted {p.corrupt:.3f}" in c for c in _captions(at))


def test_a_real_corruption_still_draws_the_grid(tiny_engine):
    at = _patching(tiny_engine.gpt, patch_how="noise on words", patch_noise_next="bank").run()
    no_failures(at)
    assert not [m for m in messages(at)["info"] if NOTHING_TO_RESTORE in m.lower()]
    assert [f for f in figures(at) if title(f) == "residual: share of f restored"]


# -- L9 ------------------------------------------------------------------------------------
def _recorded_arrays(monkeypatch) -> dict:
    found: dict = {}
    real = export.figure_downloads

    def record(fig, name, table=None, settings=None, arrays=None):
        found[name] = arrays
        return real(fig, name, table, settings, arrays)

    monkeypatch.setattr(export, "figure_downloads", record)
    return found


def test_the_patching_npz_says_what_its_axes_are_as_the_clis_does(tiny_engine, monkeypatch,
                                                                  tmp_path, capsys):
    from engine.cli import main

    arrays = _recorded_arrays(monkeypatch)
    at = _patching(tiny_engine.gpt, patch_how="noise on words", patch_noise_next="bank",
                   patch_contrast_next="closed").run()
    no_failures(at)
    app_npz = np.load(io.BytesIO(export.arrays_npz(arrays["patching-grid"])))
    p = Engine().patch(tiny_engine.gpt, TEXT, None, TARGET, "closed", kind="next",
                       noise_words="bank")
    for key in ("tokens", "rows", "model", "target", "contrast", "site", "kind"):
        assert key in app_npz.files, app_npz.files
    assert tuple(app_npz["tokens"]) == p.tokens
    assert list(app_npz["rows"]) == ["embeddings"] + [f"layer {l}" for l in
                                                      range(1, p.patched.shape[0])]
    assert str(app_npz["model"]) == tiny_engine.gpt and str(app_npz["target"]) == TARGET
    assert str(app_npz["contrast"]) == "closed" and str(app_npz["site"]) == "residual"
    # the grid shown and the rows named agree
    grid = [f for f in figures(at) if title(f) == "residual: share of f restored"][0]
    assert list(grid["data"][0]["y"]) == list(app_npz["rows"])
    # `ctxlens patch` writes the same arrays under the same names
    out = tmp_path / "p.npz"
    code = main(["patch", "--model", tiny_engine.gpt, "--clean", TEXT, "--noise", "bank",
                 "--target", TARGET, "--contrast", "closed", "--output", str(out),
                 "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    cli_npz = np.load(out)
    assert sorted(cli_npz.files) == sorted(app_npz.files)
    for key in cli_npz.files:
        if cli_npz[key].dtype.kind in "fc":
            np.testing.assert_allclose(cli_npz[key], app_npz[key], atol=1e-6)
        else:
            assert (cli_npz[key] == app_npz[key]).all(), key


# -- L8 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("typed, shown", [
    (",".join(["1.1"] * 75), "1.1"),
    ("2.mlp, 1.2,1.*, 2.1 ,1.2, 02.1", "1.*, 2.1, 2.mlp"),
])
def test_a_knockout_spec_is_shown_as_the_engine_reads_it(tiny_engine, typed, shown):
    from engine.components import ablation

    eng = Engine()
    parsed = ablation.parse(typed, ablation.sites(eng.adapter(tiny_engine.gpt)))
    # the same parts, in the engine's order (its spec joins them without spaces)
    assert shown == parsed.spec.replace(",", ", ")
    at = page("predictions")
    at.query_params["ablate"] = typed
    at.run()
    no_failures(at)
    off = [title(f) for f in figures(at) if title(f).startswith("Next word") and " off (" in
           title(f)]
    assert off and all(t.endswith(f" · {shown} off (zero)") for t in off), off
    assert not [title(f) for f in figures(at) if typed in title(f)]
    # the box keeps what was typed; what is knocked out is what the engine reads
    assert at.text_input(key="ablate").value == typed
    prefix = [c.value for c in at.get("text") if c.value.startswith("The blank: ")][0]
    context = prefix.removeprefix("The blank: ").split("[MASK]")[0].strip()
    fig = [f for f in figures(at) if title(f) in off][0]
    pred = eng.predict_next(tiny_engine.gpt, context, top_k=8, ablate=typed)
    assert np.allclose(fig["data"][0]["x"][::-1], [c.prob for c in pred.candidates], atol=1e-6)
    assert knockout.canonical(typed) == shown


def test_a_spec_the_engine_would_refuse_is_left_as_typed():
    # the engine names the bad entry; the app does not rewrite what it cannot read
    assert knockout.canonical("1.1, 1.x, 1.1") == "1.1, 1.x, 1.1"
    assert knockout.canonical("") is None and knockout.canonical(" , ") is None


# -- L5 ------------------------------------------------------------------------------------
def _generation(model: str, prompt: str, tokens: int):
    at = page("generation")
    at.query_params.update(gen_model=model, gen_prompt=prompt, gen_tokens=str(tokens))
    return at.run()


def test_the_generation_caption_states_every_cap(tiny_engine):
    at = _generation(tiny_engine.gpt, TEXT, 3)
    no_failures(at)
    said = [c for c in _captions(at) if c.startswith("At most")]
    assert len(said) == 1, _captions(at)
    for cap in (f"{MAX_CHARS} characters", f"{MAX_WORDS} words",
                f"{MAX_GENERATED_TOKENS} generated tokens"):
        assert cap in said[0], said


@pytest.fixture(scope="module")
def long_gpt(tiny_checkpoints):
    """The tiny GPT-2 with room for a prompt at the character cap (1,100 positions)."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    path = tiny_checkpoints.root / "gpt2-long"
    if not path.exists():
        cfg = GPT2Config.from_pretrained(tiny_checkpoints.gpt)
        cfg.n_positions = 1100
        torch.manual_seed(0)
        GPT2LMHeadModel(cfg).eval().save_pretrained(path)
        AutoTokenizer.from_pretrained(tiny_checkpoints.gpt).save_pretrained(path)
    from app import engine_access

    engine_access._catalogue.clear()     # the model list a page offers is kept for seconds
    return str(path.resolve())


def _offered(at) -> list[int]:
    box = at.selectbox(key="gen_explain")
    return [int(str(o).split(":")[0]) for o in box.options]


def test_why_this_token_offers_only_the_tokens_within_the_caps(tiny_engine, long_gpt):
    words, prompt = "bankholidaytoday", []
    while len(" ".join(prompt + [words])) <= MAX_CHARS:
        prompt.append(words)
    prompt = " ".join(prompt)
    prompt += "x" * (MAX_CHARS - len(prompt))            # exactly at the character cap
    assert len(prompt) == MAX_CHARS and len(prompt.split()) <= MAX_WORDS
    at = _generation(long_gpt, prompt, 6)
    no_failures(at)
    assert at.selectbox(key="gen_model").value == long_gpt
    eng = Engine()
    gen = eng.generate(long_gpt, prompt, 6)
    fits = []
    for i, context in enumerate(gen.contexts):       # what the engine itself refuses
        try:
            eng.attribute(long_gpt, context, "bank", method="gradxinput", kind="next")
            fits.append(i + 1)
        except TextError:
            pass
    assert fits and len(fits) < len(gen.tokens), fits     # the case of the finding
    assert _offered(at) == fits
    said = [c for c in _captions(at) if "can be explained" in c]
    assert len(said) == 1 and f"the cap is {MAX_CHARS}" in said[0], _captions(at)
    assert not messages(at)["warning"], messages(at)


def test_why_this_token_says_when_no_token_can_be_explained(tiny_engine):
    at = _generation(tiny_engine.gpt, "", 1)      # one token, after nothing at all
    no_failures(at)
    said = [m for m in messages(at)["info"] if m.startswith("No generated token can be "
                                                            "explained")]
    assert len(said) == 1 and "empty" in said[0], messages(at)
    assert not [b for b in at.selectbox if b.key == "gen_explain"]
    assert not messages(at)["warning"], messages(at)
