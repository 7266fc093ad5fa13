"""`ctxlens attribute` and `ctxlens generate` (issue #54 part 5) on tiny random checkpoints in
a configured model folder: the JSON's f is transformers' own log-probability, each word's score
sums its pieces', IG's f_baseline and completeness gap are measured against f and f(baseline)
worked out with transformers, the 6 generated tokens are model.generate's, and each bad input
is one line and exit 2."""
from __future__ import annotations

import json

import pytest
import torch

from tests.engine.cli_run import run

MASKED = "She sat on the [MASK] of the river ."
PROMPT = "She sat on the bank of the"


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("why-cli")
    return {name: zoo.copy(f"arch:{name}", root / name) for name in ("bert", "gpt2")}


@pytest.fixture(autouse=True)
def configured(models, monkeypatch):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(models["bert"].parent))


def _one_word_piece(folder, candidates=("river", "bank", "the", "sat")):
    """A word the tiny tokenizer spells as one piece (so f is one log-probability)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    for w in candidates:
        if len(tok.tokenize(" " + w if "gpt" in str(folder) else w)) == 1:
            return tok, w
    pytest.skip("no one-piece word in the tiny vocabulary")


def test_attribute_f_is_the_models_own_log_probability_at_the_blank(models, capsys, tmp_path):
    from transformers import AutoModelForMaskedLM

    tok, word = _one_word_piece(models["bert"])
    text = MASKED.replace("river", "riverbank")          # riverbank: river ##bank
    out = tmp_path / "a.json"
    code, _, err = run(capsys, "attribute", "--model", str(models["bert"]), "--text", text,
                        "--target", word, "--method", "gradxinput", "--output", str(out))
    assert code == 0, err
    got = json.loads(out.read_text())
    model = AutoModelForMaskedLM.from_pretrained(models["bert"]).eval()
    enc = tok(text.replace("[MASK]", tok.mask_token), return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0].float()
    blank = enc["input_ids"][0].tolist().index(tok.mask_token_id)
    want = torch.log_softmax(logits[blank], -1)[tok.convert_tokens_to_ids(word)].item()
    assert got["f"] == pytest.approx(want, abs=1e-4)
    assert got["method"] == "gradxinput" and got["target"] == word and got["contrast"] is None
    assert got["words"] == text.split()
    assert len(got["piece_scores"]) == len(got["pieces"]) == enc["input_ids"].shape[1]
    # each word's score is the sum of its pieces' scores, word by word: the pieces of each
    # word told by the tokenizer itself (word_ids), one word of two pieces among them
    of_word = enc.word_ids()
    assert of_word.count(text.split().index("riverbank")) == 2
    for w in range(len(got["words"])):
        mine = [s for s, k in zip(got["piece_scores"], of_word) if k == w]
        assert got["scores"][w] == pytest.approx(sum(mine), abs=1e-5), got["words"][w]
    for key in ("comprehensiveness", "sufficiency", "random_comprehensiveness",
                "random_sufficiency"):
        assert isinstance(got[key], float)


def test_attribute_contrast_is_the_log_odds_and_ig_reports_its_gap(models, capsys):
    from transformers import AutoModelForCausalLM

    tok, word = _one_word_piece(models["gpt2"])
    foil = next(w for w in ("the", "river", "sat", "of") if w != word
                and len(tok.tokenize(" " + w)) == 1)
    code, out, err = run(capsys, "attribute", "--model", str(models["gpt2"]), "--next",
                          PROMPT, "--target", word, "--method", "ig")
    assert code == 0, err
    alone = json.loads(out)
    code, out, err = run(capsys, "attribute", "--model", str(models["gpt2"]), "--next",
                          PROMPT, "--target", word, "--contrast", foil, "--method", "ig")
    assert code == 0, err
    got = json.loads(out)
    code, out, _ = run(capsys, "attribute", "--model", str(models["gpt2"]), "--next",
                        PROMPT, "--target", foil, "--method", "gradxinput")
    assert got["f"] == pytest.approx(alone["f"] - json.loads(out)["f"], abs=1e-4)
    # f and f(baseline) by transformers: log p(word) − log p(foil) next, on the prompt and on
    # the baseline docs/attribution.md states (every piece of every word as the padding
    # embedding, GPT-2's end-of-text; special tokens, and a piece that is a bare space before
    # a word of other pieces, as they are); the gap measured against them
    model = AutoModelForCausalLM.from_pretrained(models["gpt2"]).eval()
    enc = tok(PROMPT, return_offsets_mapping=True)
    ids = enc["input_ids"]
    (w_id,), (foil_id,) = (tok(PROMPT + " " + w)["input_ids"][len(ids):] for w in (word, foil))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    of_a_word = [i not in tok.all_special_ids and PROMPT[s:e].strip() != ""
                 for i, (s, e) in zip(ids, enc["offset_mapping"])]
    assert of_a_word.count(False) == 1            # the bare 'Ġ' of ' of' ('Ġ', 'o', 'f')
    embed = model.get_input_embeddings()
    with torch.no_grad():
        x = embed(torch.tensor([ids]))
        b = torch.where(torch.tensor(of_a_word)[None, :, None], embed(torch.tensor([pad])), x)
        logp = torch.log_softmax(model(inputs_embeds=torch.cat([x, b])).logits[:, -1].double(),
                                 -1)
    f_x, f_base = (float(v) for v in logp[:, w_id] - logp[:, foil_id])
    assert got["f"] == pytest.approx(f_x, abs=1e-4)
    assert got["f_baseline"] == pytest.approx(f_base, abs=1e-4)
    gap = abs(sum(got["piece_scores"]) - (f_x - f_base))
    assert got["completeness_gap"] == pytest.approx(gap, abs=1e-4)
    assert got["steps"] >= 32 and got["contrast"] == foil


def test_generate_gives_model_generates_tokens(models, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    code, out, err = run(capsys, "generate", "--model", str(models["gpt2"]), "--text", PROMPT,
                          "--tokens", "6")
    assert code == 0, err
    got = json.loads(out)
    tok = AutoTokenizer.from_pretrained(models["gpt2"])
    model = AutoModelForCausalLM.from_pretrained(models["gpt2"]).eval()
    ids = tok(PROMPT, return_tensors="pt")["input_ids"]
    want = model.generate(ids, max_new_tokens=6, do_sample=False,
                          pad_token_id=tok.eos_token_id)[0, ids.shape[1]:].tolist()
    # the tiny model runs to the 6 tokens asked, no end-of-text among them: all 6 compared
    assert len(want) == 6 and tok.eos_token_id not in want, want
    assert [s["token_id"] for s in got["steps"]] == want
    assert got["tokens"] == [tok.decode([i]) for i in want]
    assert got["stopped"] == "max_tokens"
    for step in got["steps"]:
        assert 0.0 < step["prob"] <= 1.0 and step["entropy"] >= 0.0
        assert step["top"][0]["prob"] >= step["prob"] - 1e-6    # greedy takes the top token
        assert len(step["layer_ranks"]) == len(got["layer_names"])


@pytest.mark.parametrize("args, fragment", [
    (["attribute", "--model", "{bert}", "--text", "no blank here .", "--target", "the"],
     "[MASK]"),
    (["attribute", "--model", "{bert}", "--text", "a [MASK] and a [MASK] .", "--target", "the"],
     "[MASK]"),
    (["attribute", "--model", "{bert}", "--text", MASKED, "--target", "the",
      "--contrast", "the"], "contrast"),
    (["attribute", "--model", "{bert}", "--next", PROMPT, "--target", "the"], "next"),
    (["attribute", "--model", "{gpt2}", "--previous", PROMPT, "--target", "the"], "previous"),
    (["attribute", "--model", "{bert}", "--text", MASKED, "--target", "the", "--steps", "0"],
     "steps"),
    # an encoder without a head: refused from its capabilities, before it loads
    (["attribute", "--model", "minilm-l6", "--text", MASKED, "--target", "the"],
     "no masked-word prediction to explain"),
    (["generate", "--model", "{gpt2}", "--text", PROMPT, "--tokens", "0"], "token"),
    (["generate", "--model", "{gpt2}", "--text", PROMPT, "--tokens", "10000"], "token"),
    (["generate", "--model", "{bert}", "--text", PROMPT, "--tokens", "3"], "left to right"),
    (["generate", "--model", "{gpt2}", "--text", PROMPT, "--sample", "--temperature", "0"],
     "temperature"),
])
def test_bad_input_is_one_line_and_exit_2(models, capsys, args, fragment):
    args = [a.format(**{k: str(v) for k, v in models.items()}) for a in args]
    code, out, err = run(capsys, *args)
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ctxlens: error:"), err
    assert fragment.lower() in lines[0].lower(), lines[0]
    assert out == ""
