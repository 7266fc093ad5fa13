"""The CLI's edges found by issue 66 on tiny random checkpoints in a configured model folder:
every JSON it writes is strict JSON (no NaN or Infinity: null), generate refuses a temperature
or seed the app would not take in one line and exit 2, and a long word or text a user typed is
cut where an error says it back."""
from __future__ import annotations

import json

import pytest
import torch

from engine.cli import main
from engine.cli.report import EXIT_USAGE
from tests.engine.cli_run import run

MASKED = "She sat on the river [MASK] and watched the water ."
PREFIX = "She sat on the river bank and watched the"
CORRUPT = "She sat on the water bank and watched the"
# no word twice: every layer's self-similarity is undefined (NaN)
NO_REPEATS = "a bank of the river .\nshe sat on one bench ?\n"
LONG = "a" * 10_000


def strict_json(text: str):
    """json.loads, refusing NaN, Infinity and -Infinity (Python reads them; JSON has none)."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    """The tiny BERT and GPT-2, and a GPT-2 whose attention writes nothing (every output
    projection zero): knocking out any of its heads changes nothing, so each head's drop and
    gradient are 0 and their rank correlation is undefined."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("hardening-cli")
    found = {name: zoo.copy(f"arch:{name}", root / name) for name in ("bert", "gpt2")}
    dead = root / "gpt2-silent-heads"
    model = AutoModelForCausalLM.from_pretrained(found["gpt2"])
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_proj.weight.zero_()
            block.attn.c_proj.bias.zero_()
    model.save_pretrained(dead)
    AutoTokenizer.from_pretrained(found["gpt2"]).save_pretrained(dead)
    return {**found, "silent": dead}


@pytest.fixture(scope="module")
def index(models, tmp_path_factory):
    """An index of NO_REPEATS by the tiny BERT."""
    folder = tmp_path_factory.mktemp("hardening-index")
    src = folder / "corpus.txt"
    src.write_text(NO_REPEATS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(models["bert"].parent))
        mp.setenv("CTXLENS_CACHE", str(folder / "cache"))
        assert main(["index", "--model", str(models["bert"]), "--corpus", str(src),
                     "--output", str(folder / "ix")]) == 0
    return folder / "ix"


@pytest.fixture(autouse=True)
def configured(models, monkeypatch, tmp_path):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(models["bert"].parent))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))


# -- L2: every JSON the CLI writes is strict JSON ------------------------------------------
# each command that writes JSON: (its arguments, "stdout" or the file it writes, one JSON
# object or one a line); {bert}, {gpt2}, {silent}, {out} and {index} are filled in
JSON_RUNS = {
    "predict": (["predict", "--model", "{bert}", "--text", MASKED], "stdout"),
    "predict-next": (["predict", "--model", "{silent}", "--next", PREFIX], "stdout"),
    "predict-input": (["predict", "--model", "{bert}", "--input", "{texts}", "--output",
                       "{out}"], "file"),
    "attribute-ig": (["attribute", "--model", "{silent}", "--next", PREFIX, "--target",
                      "water"], "stdout"),
    "attribute-occlusion": (["attribute", "--model", "{bert}", "--text", MASKED, "--target",
                             "bank", "--contrast", "river", "--method", "occlusion",
                             "--ablate", "1.*"], "stdout"),
    "generate": (["generate", "--model", "{silent}", "--text", PREFIX, "--tokens", "3"],
                 "stdout"),
    "generate-sample": (["generate", "--model", "{gpt2}", "--text", PREFIX, "--tokens", "3",
                         "--sample", "--seed", "7", "--output", "{out}"], "file"),
    "heads": (["heads", "--model", "{silent}", "--text", PREFIX, "--target", "water",
               "--kind", "next"], "stdout"),
    "heads-file": (["heads", "--model", "{bert}", "--text", MASKED, "--target", "bank",
                    "--output", "{out}"], "file"),
    "components": (["components", "--model", "{silent}", "--text", PREFIX, "--target",
                    "water", "--output", "{out}"], "file"),
    "patch": (["patch", "--model", "{gpt2}", "--clean", PREFIX, "--corrupt", CORRUPT,
               "--target", "water", "--output", "{out}"], "file"),
    "patch-nothing-to-restore": (["patch", "--model", "{silent}", "--clean", PREFIX,
                                  "--corrupt", PREFIX, "--target", "water", "--output",
                                  "{out}"], "file"),
    "neighbours": (["neighbours", "--index", "{index}", "--text", "the bank of the river .",
                    "--word", "bank", "--layer", "1", "-k", "3", "--json"], "stdout"),
    "stats": (["stats", "--index", "{index}", "--json"], "stdout"),
}


@pytest.mark.parametrize("name", JSON_RUNS)
def test_every_json_the_cli_writes_is_strict_json(name, models, index, capsys, tmp_path):
    args, where = JSON_RUNS[name]
    texts = tmp_path / "texts.txt"
    texts.write_text(MASKED + "\nThe [MASK] barked .\n")
    out = tmp_path / ("out.jsonl" if name == "predict-input" else "out.json")
    fill = {"bert": models["bert"], "gpt2": models["gpt2"], "silent": models["silent"],
            "out": out, "index": index, "texts": texts}
    code, stdout, err = run(capsys, *(a.format(**fill) for a in args))
    assert code == 0, err
    text = stdout if where == "stdout" else out.read_text(encoding="utf-8")
    lines = text.strip().splitlines()
    assert lines
    rows = [strict_json(line) for line in lines]
    assert all(isinstance(r, (dict, list)) for r in rows)


def test_the_index_manifest_is_strict_json(index):
    """`ctxlens index` writes the index's manifest (engine.corpus.index) as JSON too."""
    assert strict_json((index / "manifest.json").read_text(encoding="utf-8"))["model"]


def test_heads_writes_null_for_a_spearman_that_is_undefined(models, capsys):
    """Heads that write nothing are all alike: no rank correlation, said as null and in
    words, not NaN."""
    code, out, err = run(capsys, "heads", "--model", str(models["silent"]), "--text", PREFIX,
                          "--target", "water", "--kind", "next")
    assert code == 0, err
    got = strict_json(out)
    # nothing changes when a silent head goes: each drop is 0 up to float32 rounding (the
    # knocked-out rows run batched, f alone; their sums round in another order)
    drops = [v for row in got["knocked"] for v in row]
    assert drops and all(abs(v) < 1e-5 for v in drops), drops
    assert got["spearman"] is None
    assert "nan" not in err.lower()
    assert "Spearman ρ between knocked-out drop and gradient: none" in err


def test_stats_writes_null_for_a_self_similarity_no_word_gives(index, capsys):
    code, out, err = run(capsys, "stats", "--index", str(index), "--json")
    assert code == 0, err
    rows = [strict_json(line) for line in out.splitlines()]
    assert rows and all(r["self_similarity"] == [None, None, None] for r in rows)
    assert all(None not in r["anisotropy"] for r in rows)       # the defined ones stay numbers


def test_to_json_writes_null_for_numpy_and_python_non_finite_floats():
    import numpy as np

    from engine.cli.report import to_json

    got = to_json({"a": float("nan"), "b": [np.float32("inf"), np.float64(-np.inf), 1.5],
                   "c": (np.float32(0.25), None, "NaN"), "d": {"e": -float("inf")}})
    assert strict_json(got) == {"a": None, "b": [None, None, 1.5], "c": [0.25, None, "NaN"],
                                "d": {"e": None}}


# -- L6: generate's temperature and seed are bounded as in the app --------------------------
@pytest.mark.parametrize("flags, said", [
    (["--temperature", "1e-45"], "--temperature is from 0.05 to 5 (got 1e-45)"),
    (["--temperature", "0"], "--temperature is from 0.05 to 5 (got 0)"),
    (["--temperature", "-1"], "--temperature is from 0.05 to 5 (got -1)"),
    (["--temperature", "nan"], "--temperature is from 0.05 to 5 (got nan)"),
    (["--temperature", "inf"], "--temperature is from 0.05 to 5 (got inf)"),
    (["--temperature", "5.01"], "--temperature is from 0.05 to 5 (got 5.01)"),
    (["--seed", "99999999999999999999999"],
     "--seed is a whole number from 0 to 9223372036854775807 (got 99999999999999999999999)"),
    (["--seed", "-1"], "--seed is a whole number from 0 to 9223372036854775807 (got -1)"),
])
def test_generate_refuses_a_temperature_or_seed_out_of_bounds_in_one_line(
        models, capsys, flags, said):
    code, out, err = run(capsys, "generate", "--model", str(models["gpt2"]), "--text", PREFIX,
                          "--tokens", "2", "--sample", *flags)
    assert (code, out) == (EXIT_USAGE, "")
    assert err.strip().splitlines() == [f"ctxlens: error: {said}"]


def test_generate_takes_the_bounds_themselves_and_repeats_a_seed_it_drew(models, capsys):
    from engine.generation import MAX_SEED, TEMPERATURES

    gpt2 = str(models["gpt2"])
    base = ["generate", "--model", gpt2, "--text", PREFIX, "--tokens", "3", "--sample"]
    for flags in (["--temperature", str(TEMPERATURES[0]), "--seed", "0"],
                  ["--temperature", str(TEMPERATURES[1]), "--seed", str(MAX_SEED)]):
        code, out, err = run(capsys, *base, *flags)
        assert code == 0, err
        assert strict_json(out)["decoding"]["seed"] == int(flags[-1])
    code, out, err = run(capsys, *base)           # a seed of its own, written to the JSON ...
    assert code == 0, err
    drawn = strict_json(out)
    assert 0 <= drawn["decoding"]["seed"] <= MAX_SEED
    seed = str(drawn["decoding"]["seed"])
    code, again, err = run(capsys, *base, "--seed", seed)                # ... repeats its draw
    assert code == 0, err
    assert strict_json(again)["tokens"] == drawn["tokens"]


def test_greedy_generation_reads_no_temperature_or_seed(models, capsys):
    """Without --sample they are not used, so not checked (as the engine ignores them)."""
    code, out, err = run(capsys, "generate", "--model", str(models["gpt2"]), "--text", PREFIX,
                          "--tokens", "2", "--temperature", "0", "--seed", "-1")
    assert code == 0, err
    assert strict_json(out)["decoding"] == {"method": "greedy"}


# -- L7: a long word or text is cut where an error says it back -----------------------------
CUT = f"{'a' * 60 + '…'!r} ({len(LONG):,} characters)"
ECHOES = {
    "attribute-target": ["attribute", "--model", "{bert}", "--text", MASKED, "--target", LONG],
    "attribute-contrast": ["attribute", "--model", "{bert}", "--text", MASKED, "--target",
                           "bank", "--contrast", LONG],
    "heads-target": ["heads", "--model", "{bert}", "--text", MASKED, "--target", LONG],
    "patch-noise": ["patch", "--model", "{gpt2}", "--clean", PREFIX, "--noise", LONG,
                    "--target", "water", "--output", "{out}"],
    "patch-noise-second-word": ["patch", "--model", "{gpt2}", "--clean", PREFIX, "--noise",
                                "river " + LONG, "--target", "water", "--output", "{out}"],
    "components-target": ["components", "--model", "{gpt2}", "--text", PREFIX, "--target",
                          LONG, "--contrast", LONG + "b", "--output", "{out}"],
    "predict-ablate": ["predict", "--model", "{bert}", "--text", MASKED, "--ablate",
                       "1.1," + LONG],
    "neighbours-word": ["neighbours", "--index", "{index}", "--text", "the bank of the river .",
                        "--word", LONG, "--layer", "1"],
}


@pytest.mark.parametrize("name", ECHOES)
def test_a_long_word_is_cut_where_an_error_says_it_back(name, models, index, capsys,
                                                        tmp_path):
    fill = {"bert": models["bert"], "gpt2": models["gpt2"], "out": tmp_path / "o.json",
            "index": index}
    code, out, err = run(capsys, *(a.format(**fill) for a in ECHOES[name]))
    assert (code, out) == (EXIT_USAGE, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxlens: error: "), err
    assert CUT in lines[0]
    assert len(lines[0]) < 400, lines[0]


def test_a_long_clean_text_is_cut_where_patch_lists_its_words(models, capsys, tmp_path):
    clean = PREFIX + " the birds and then " + PREFIX.lower()
    code, out, err = run(capsys, "patch", "--model", str(models["gpt2"]), "--clean", clean,
                          "--noise", "water", "--target", "water", "--output",
                          str(tmp_path / "o.json"))
    assert (code, out) == (EXIT_USAGE, "")
    lines = err.strip().splitlines()
    assert lines == [f"ctxlens: error: 'water' is not a word of the clean text (its words: "
                     f"{clean[:60]}… ({len(clean):,} characters))"]


def test_a_short_word_is_said_back_whole(models, capsys):
    code, _, err = run(capsys, "attribute", "--model", str(models["bert"]), "--text", MASKED,
                       "--target", "a b")
    assert code == EXIT_USAGE
    assert err.strip().splitlines() == ["ctxlens: error: the target must be one word "
                                        "(got 'a b')"]
