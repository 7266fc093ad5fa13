"""One rule for the target and contrast of every view that has them (attribution, head
importance, patching, direct logit attribution), issue 66 L1 and L4: a contrast the model reads
as the very tokens of the target is refused in one line (an uncased BERT reads 'bank' and 'BANK'
alike, and so does a decoder whose tokenizer lowercases), and a target is one word of the
shared split (engine.text) in every view, so DLA refuses what attribute, heads and patch do."""
from __future__ import annotations

import pytest

from engine.api import Engine
from engine.errors import EngineError
from tests.engine.cli_run import run

MASKED = "The [MASK] raised its interest rates."
TEXT = "She sat on the river bank and watched the"
SAME = "are the same token"
MUST = "a contrast must differ from the target"


def _lowercasing_gpt2(zoo, folder):
    """The tiny GPT-2 with a tokenizer that lowercases first (as an uncased decoder would):
    'water' and 'WATER' are then the same tokens, 'water' and 'sky' are not."""
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    zoo.copy("causal:gpt2", folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.backend_tokenizer.normalizer = normalizers.Lowercase()
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("target-rules")
    folders = {"bert": zoo.copy("bert", root / "bert"),
               "gpt2": _lowercasing_gpt2(zoo, root / "gpt2")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Engine(device="cpu"), {k: str(v) for k, v in folders.items()}


def _refused(call) -> str:
    with pytest.raises(EngineError) as err:
        call()
    said = str(err.value)
    assert "\n" not in said
    return said


def _views(engine, model, text, target, contrast, kind):
    """Every view with a target and a contrast, as a call each."""
    views = {
        "attribute": lambda: engine.attribute(model, text, target, contrast,
                                              method="gradxinput", kind=kind),
        "head importance": lambda: engine.head_importance(model, text, target, contrast, kind),
        "patch": lambda: engine.patch(model, text, None, target, contrast, kind=kind,
                                      noise_words="interest" if kind == "masked" else "river",
                                      seeds=1)}
    if kind == "next":
        views["direct logit attribution"] = lambda: engine.components(model, text, target,
                                                                      contrast)
    return views


@pytest.mark.parametrize("which,text,target,contrast,kind", [
    ("bert", MASKED, "bank", "BANK", "masked"),
    ("bert", MASKED, "bank", "Bank", "masked"),
    ("gpt2", TEXT, "water", "WATER", "next"),
])
def test_a_contrast_that_is_the_targets_own_tokens_is_refused_in_every_view(
        models, which, text, target, contrast, kind):
    engine, folders = models
    for view, call in _views(engine, folders[which], text, target, contrast, kind).items():
        said = _refused(call)
        assert said == (f"{target!r} and {contrast!r} are the same token for this model: "
                        f"{MUST}"), (view, said)


def test_a_decoders_filled_blank_refuses_the_same_tokens_too(models):
    engine, folders = models
    said = _refused(lambda: engine.attribute(folders["gpt2"], "She sat on the [MASK] bank",
                                             "river", "RIVER", method="gradxinput"))
    assert SAME in said and MUST in said


def test_a_target_of_several_pieces_says_tokens(models):
    engine, folders = models
    # 'riverbank' is river ##bank in the tiny WordPiece vocabulary
    said = _refused(lambda: engine.attribute(folders["bert"], MASKED, "riverbank",
                                             "RIVERBANK", method="gradxinput"))
    assert said == f"'riverbank' and 'RIVERBANK' are the same tokens for this model: {MUST}"


@pytest.mark.parametrize("which,text,target,contrast,kind", [
    ("bert", MASKED, "bank", "water", "masked"),
    ("gpt2", TEXT, "water", "sky", "next"),
])
def test_a_contrast_of_other_tokens_is_still_explained(models, which, text, target, contrast,
                                                       kind):
    engine, folders = models
    att = engine.attribute(folders[which], text, target, contrast, method="gradxinput",
                           kind=kind)
    assert att.f != 0.0 and att.contrast == contrast
    if kind == "next":
        c = engine.components(folders[which], text, target, contrast)
        assert c.logit != 0.0


def test_the_cli_refuses_the_same_tokens_in_one_line(models, capsys):
    _, folders = models
    code, out, err = run(capsys, "attribute", "--model", folders["bert"], "--text", MASKED,
                         "--target", "bank", "--contrast", "BANK", "--method", "gradxinput")
    assert code == 2, (out, err)
    assert SAME in err and MUST in err and len(err.strip().splitlines()) == 1, err


# -- L4: one word rule for every view ---------------------------------------------------------
@pytest.mark.parametrize("target,contrast", [
    ("![x](http://evil.example/a.png)", None),      # 13 words of the shared split
    ("water.", None),
    ("[MASK]", None),
    ("water", "![x](http://evil.example/a.png)"),
    ("water", "sky!"),
    ("", None),
])
def test_every_view_refuses_what_is_not_one_word_with_the_same_line(models, target, contrast):
    engine, folders = models
    said = {view: _refused(call) for view, call in
            _views(engine, folders["gpt2"], TEXT, target, contrast, "next").items()}
    assert len(set(said.values())) == 1, said
    assert "must be one word" in said["direct logit attribution"]
