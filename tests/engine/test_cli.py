"""The `ctxlens` CLI: each command, and each bad input ends in one line and a non-zero exit."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from engine.cli import main

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def _environ(changes: dict[str, str]):
    before = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in this process, as `python -m engine` runs it: its exit code, stdout and stderr
    (a process of its own costs a Python and torch start, ~6 s each; a traceback propagates
    and fails the test). The tests of what needs a real process (a shell's pipe, argv bytes
    that are not UTF-8) start one."""
    out, err = io.StringIO(), io.StringIO()
    with _environ(env or {}), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:                  # argparse's usage errors, as the shell sees
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess(["ctxlens", *args], code, out.getvalue(), err.getvalue())


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ctxlens: error:")
    for f in fragments:
        assert f in err, err


def embed(folder: Path, model: str, text: str, *flags: str):
    """Run `ctxlens embed` in-process on `text` (one sentence per line); the NPZ it wrote."""
    src, out = folder / "in.txt", folder / "o.npz"
    src.write_text(text)
    assert main(["embed", "--model", model, "--input", str(src), "--output", str(out),
                 *flags]) == 0
    return np.load(out)


def test_models_lists_every_registry_entry_with_availability(capsys):
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    by_id = {ln.split()[0]: ln for ln in lines}
    for mid in ("bert-base-uncased", "gpt2", "elmo-original", "elmo-small", "minilm-l6",
                "smollm2-135m"):
        assert mid in by_id
    assert by_id["minilm-l6"].split()[2] == "bundled"
    assert by_id["minilm-l6"].split()[1] == "bert"
    assert by_id["smollm2-135m"].split()[1] == "gpt"
    assert by_id["elmo-original"].split()[1] == "elmo"


@pytest.mark.parametrize("model", ["bert-base-uncased", "gpt2", "elmo-small"])
def test_hub_model_offline_fails_fast_with_a_clear_message(tmp_path, model):
    src = tmp_path / "in.txt"
    src.write_text("The bank was closed .\n")
    start = time.monotonic()
    proc = run_cli("embed", "--model", model, "--input", str(src), "--output",
                   str(tmp_path / "o.npz"), env={"CTXLENS_CACHE": str(tmp_path / "cache"),
                                                 "HF_HOME": str(tmp_path / "hf")})
    assert time.monotonic() - start < 15  # process start + imports; the check itself is ~0 s
    assert_one_line_error(proc, model, "cannot be reached")
    assert not (tmp_path / "o.npz").exists()


def test_the_reachability_probe_connects_and_says_what_it_found(monkeypatch):
    """No HF_HUB_OFFLINE: the probe opens a connection, bounded by CONNECT_TIMEOUT_S, to the
    host and port it is given, and says whether one was made: a port listening on this machine
    is reachable, a closed one is not (nothing here leaves the machine). With HF_HUB_OFFLINE it
    attempts nothing."""
    import socket

    from engine import fetch, hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CTXLENS_OFFLINE", raising=False)
    attempted = []
    real = socket.create_connection

    def recorded(address, timeout=None, *args, **kwargs):
        attempted.append((address, timeout))
        return real(address, timeout, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", recorded)
    with socket.socket() as closed:           # a port no one listens on once it is closed
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        assert fetch._reachable("127.0.0.1", open_port) is True
        assert fetch._reachable("127.0.0.1", closed_port) is False
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert fetch._reachable("127.0.0.1", open_port) is False
    assert attempted == [(("127.0.0.1", open_port), hub.CONNECT_TIMEOUT_S),
                         (("127.0.0.1", closed_port), hub.CONNECT_TIMEOUT_S)]


def test_unknown_model_is_one_line(tmp_path):
    """An id that is not in the registry is a hub id: offline and not cached, it needs a
    download; an id of no model shape at all is unknown."""
    src = tmp_path / "in.txt"
    src.write_text("A sentence .\n")
    proc = run_cli("embed", "--model", "no-such-model", "--input", str(src), "--output",
                   str(tmp_path / "o.npz"), env={"HF_HOME": str(tmp_path / "hf")})
    assert_one_line_error(proc, "needs a download")
    proc = run_cli("embed", "--model", "no such model", "--input", str(src), "--output",
                   str(tmp_path / "o.npz"))
    assert_one_line_error(proc, "unknown model")


def test_missing_and_empty_input_files(tmp_path):
    proc = run_cli("embed", "--model", "minilm-l6", "--input", str(tmp_path / "nope.txt"),
                   "--output", str(tmp_path / "o.npz"))
    assert_one_line_error(proc, "does not exist")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    proc = run_cli("embed", "--model", "minilm-l6", "--input", str(empty), "--output",
                   str(tmp_path / "o.npz"))
    assert_one_line_error(proc, "no sentences")


def test_overlong_sentence_names_its_line(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("fine .\n" + "word " * 300 + "\n")
    proc = run_cli("embed", "--model", "minilm-l6", "--input", str(src), "--output",
                   str(tmp_path / "o.npz"))
    assert_one_line_error(proc, "sentence 2", "cap")


def test_path_outside_model_dirs_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    proc = run_cli("attention", "--model", str(tmp_path / "m"), "--text", "hi",
                   "--output", str(tmp_path / "a.npz"), env={"CTXLENS_MODEL_DIRS": ""})
    assert_one_line_error(proc, "is not a model folder inside the configured model directories")


@pytest.mark.slow
def test_embed_minilm_writes_every_layer_for_every_word(tmp_path):
    z = embed(tmp_path, "minilm-l6",
              "I deposited cash at the bank .\n\nWe fished from the river bank .\n",
              "--pool", "first")
    assert z["vectors"].dtype == np.float32
    assert z["vectors"].shape == (14, 7, 384)  # 7 + 7 words, embeddings + 6 layers
    assert z["sentence_index"].tolist() == [0] * 7 + [1] * 7
    assert z["word_index"].tolist() == list(range(7)) * 2
    assert z["words"][5] == "bank" and z["words"][12] == "bank"
    assert z["sentences"].tolist()[1] == "We fished from the river bank ."
    assert str(z["model"]) == "minilm-l6" and str(z["pooling"]) == "first"
    # contextual: the two "bank" vectors differ above the embedding layer
    assert not np.allclose(z["vectors"][5, -1], z["vectors"][12, -1])


def test_embed_layers_keeps_only_those_layers_with_the_same_numbers(tmp_path):
    text = "I deposited cash at the bank .\nWe fished from the river bank .\n"
    (tmp_path / "full").mkdir()
    (tmp_path / "some").mkdir()
    full = embed(tmp_path / "full", "minilm-l6", text)
    some = embed(tmp_path / "some", "minilm-l6", text, "--layers", "3,0")
    assert some["vectors"].shape == (14, 2, 384)
    assert some["layers"].tolist() == [3, 0] and full["layers"].tolist() == list(range(7))
    np.testing.assert_allclose(some["vectors"], full["vectors"][:, [3, 0]], atol=1e-5)


@pytest.mark.slow
@pytest.mark.slow_by_nature      # torch.compile of minilm-l6, ~60 s (test_layer_subset keeps one)
def test_embed_compile_writes_the_same_vectors(tmp_path):
    # --compile runs the model through torch.compile (inductor on this CPU): the file must be
    # the eager one's, to float rounding
    text = "I deposited cash at the bank .\nWe fished from the river bank .\nYes .\n"
    (tmp_path / "eager").mkdir()
    (tmp_path / "compiled").mkdir()
    eager = embed(tmp_path / "eager", "minilm-l6", text, "--device", "cpu")
    compiled = embed(tmp_path / "compiled", "minilm-l6", text, "--device", "cpu", "--compile")
    assert compiled["vectors"].shape == eager["vectors"].shape == (16, 7, 384)
    np.testing.assert_allclose(compiled["vectors"], eager["vectors"], rtol=1e-4, atol=1e-4)
    assert compiled["words"].tolist() == eager["words"].tolist()


@pytest.mark.slow
def test_embed_bad_layers_are_one_line(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("The cat sat .\n")
    for bad, says in (("1,x", "comma-separated"), ("2,2", "distinct"), ("9", "between 0 and 6")):
        proc = run_cli("embed", "--model", "minilm-l6", "--input", str(src), "--output",
                       str(tmp_path / "o.npz"), "--layers", bad)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert says in proc.stderr, proc.stderr


@pytest.mark.slow
def test_embed_pretokenized_keeps_whitespace_tokens(tmp_path):
    z = embed(tmp_path, "minilm-l6", "don't stop-me now!\n", "--pretokenized")
    assert z["words"].tolist() == ["don't", "stop-me", "now!"]


@pytest.mark.slow
def test_attention_writes_row_stochastic_maps(tmp_path):
    out = tmp_path / "a.npz"
    assert main(["attention", "--model", "minilm-l6", "--text", "The cat sat .",
                 "--output", str(out)]) == 0
    z = np.load(out)
    att = z["attentions"]
    assert att.shape[:2] == (6, 12) and att.shape[2] == att.shape[3] == len(z["tokens"])
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-4)
    assert z["tokens"][0] == "[CLS]" and z["token_to_word"][0] == -1
    # which layer each map is, as the app names it (the file said nothing: 0-based or 1-based?)
    assert z["layers"].tolist() == [1, 2, 3, 4, 5, 6]
    assert z["layer_names"].tolist() == [f"layer {i}" for i in range(1, 7)]


@pytest.mark.slow
def test_predict_without_mlm_head_and_without_mask_are_one_line():
    proc = run_cli("predict", "--model", "minilm-l6", "--text", "The [MASK] barked .")
    assert_one_line_error(proc, "no masked-LM head")
    proc = run_cli("predict", "--model", "minilm-l6", "--text", "The dog barked .")
    assert_one_line_error(proc, "[MASK]")


@pytest.mark.slow
def test_predict_next_or_previous_with_a_model_that_cannot_names_those_that_can():
    proc = run_cli("predict", "--model", "minilm-l6", "--next", "The dog")
    assert_one_line_error(proc, "cannot predict the next word", "models that can:",
                          "smollm2-135m", "elmo-brown")
    proc = run_cli("predict", "--model", "gpt-brown", "--previous", "barked .")
    assert_one_line_error(proc, "cannot predict the previous word", "models that can:",
                          "elmo-brown")


@pytest.mark.slow
def test_predict_next_is_json_best_first(capsys):
    assert main(["predict", "--model", "smollm2-135m", "--next", "The capital of France is",
                 "--top-k", "5"]) == 0
    preds = json.loads(capsys.readouterr().out)
    assert len(preds) == 5 and set(preds[0]) == {"token", "prob"}
    probs = [p["prob"] for p in preds]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6
    assert "Paris" in [p["token"].strip() for p in preds]


def test_embed_allennlp_directory_gives_three_elmo_layers(zoo, model_dir, capsys):
    from tests.zoo import ELMO_OPTIONS

    elmo = zoo.copy("elmo", model_dir / "tiny-elmo", seed=3)
    z = embed(model_dir, str(elmo), "the bank of the river .\nthe money is a bank\n",
              "--device", "cpu")
    dim = 2 * ELMO_OPTIONS["lstm"]["projection_dim"]
    assert z["vectors"].shape == (11, 3, dim)
    bank = [i for i, w in enumerate(z["words"]) if w == "bank"]
    # layer 0 (char CNN) ignores context; the biLSTM layers do not
    np.testing.assert_array_equal(z["vectors"][bank[0], 0], z["vectors"][bank[1], 0])
    assert not np.allclose(z["vectors"][bank[0], 2], z["vectors"][bank[1], 2])


def test_attention_of_a_model_without_maps_says_which_families_have_them(zoo, model_dir,
                                                                         tmp_path, capsys):
    from engine.cli import main

    elmo = zoo.copy("elmo", model_dir / "tiny-elmo", seed=3)
    assert main(["attention", "--model", str(elmo), "--text", "the bank .", "--output",
                 str(tmp_path / "a.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "is an ELMo model: it has no attention maps (models that have: GPT, BERT)" in err


def test_predict_masked_on_an_elmo_fills_from_both_sides(zoo, model_dir):
    from tests.zoo import ELMO_VOCAB

    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    proc = run_cli("predict", "--model", str(elmo), "--text", "the [MASK] of the river",
                   "--top-k", "20", env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # every real word of the tiny vocabulary, never a sentence marker, probabilities summing to 1
    assert {c["token"] for c in got} == set(ELMO_VOCAB) - {"<S>", "</S>", "<UNK>"}
    assert sum(c["prob"] for c in got) == pytest.approx(1.0, abs=1e-6)


def test_predict_masked_on_a_model_without_a_head_names_the_models_that_can(zoo, model_dir):
    plain = zoo.copy("bert", model_dir / "plain-bert", masked_lm=False)
    proc = run_cli("predict", "--model", str(plain), "--text", "the [MASK] of the river",
                   env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert_one_line_error(proc, "cannot fill a blank", "bert-base-uncased")


def test_predict_input_file_writes_one_json_line_per_text(zoo, model_dir, tmp_path):
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    src = tmp_path / "blanks.txt"
    src.write_text("the [MASK] of the river\n\nno blank here\nthe bank [MASK] money .\n")
    out = tmp_path / "out.jsonl"
    proc = run_cli("predict", "--model", str(elmo), "--input", str(src), "--top-k", "3",
                   "--output", str(out), env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 3, 4]            # blank lines skipped, order kept
    assert "exactly one [MASK]" in rows[1]["error"] and "candidates" not in rows[1]
    single = json.loads(run_cli("predict", "--model", str(elmo), "--text", rows[0]["text"],
                                "--top-k", "3",
                                env={"CTXLENS_MODEL_DIRS": str(model_dir)}).stdout)
    assert rows[0]["candidates"] == single and len(rows[2]["candidates"]) == 3
    assert "2 of 3 texts predicted, 1 with an error" in proc.stderr


def test_predict_input_kind_next_and_bad_file(zoo, model_dir, tmp_path):
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    src = tmp_path / "prefixes.txt"
    src.write_text("the bank of\nthe river\n")
    proc = run_cli("predict", "--model", str(elmo), "--input", str(src), "--kind", "next",
                   env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [r["kind"] for r in rows] == ["next", "next"]
    assert rows[0]["method"].startswith("forward LM")    # and says what <UNK> is, if listed
    missing = run_cli("predict", "--model", str(elmo), "--input", str(tmp_path / "nope.txt"),
                      env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert_one_line_error(missing, "does not exist")
    folder = run_cli("predict", "--model", str(elmo), "--input", str(tmp_path),
                     env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert_one_line_error(folder, "is a folder; give a text file")     # was "does not exist"
    # every line failing is a failure for a script (exit 0 said all was well)
    src.write_text("no blank here\nnor here\n")
    failed = run_cli("predict", "--model", str(elmo), "--input", str(src),
                     env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert failed.returncode == 2 and "0 of 2 texts predicted, 2 with an error" in failed.stderr


def test_a_reader_that_stops_early_ends_the_output_quietly(zoo, model_dir, tmp_path):
    """`ctxlens predict --input big.txt | head -1` ended with 'internal error: BrokenPipeError'."""
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    src = tmp_path / "prefixes.txt"
    src.write_text("the bank of\n" * 400)
    full_env = {**os.environ, "CTXLENS_MODEL_DIRS": str(model_dir)}
    proc = subprocess.run(f"{sys.executable} -m engine predict --model {elmo} --input {src} "
                          "--kind next | head -1", shell=True, cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout)["line"] == 1
    assert "Error" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_embed_smollm2_aligns_bpe_tokens_to_words(tmp_path):
    z = embed(tmp_path, "smollm2-135m", "Unbelievably, the fisherman sat on the bank.\n",
              "--pool", "last")
    assert z["words"].tolist() == ["Unbelievably", ",", "the", "fisherman", "sat", "on", "the",
                                   "bank", "."]
    assert z["vectors"].shape == (9, 31, 576)  # embeddings + 30 blocks


@pytest.mark.slow
def test_predict_masked_and_previous_word_with_trained_models(capsys):
    assert main(["predict", "--model", "bert-brown-mlm", "--text", "The [MASK] barked .",
                 "--top-k", "3"]) == 0
    masked = json.loads(capsys.readouterr().out)
    assert len(masked) == 3 and masked[0]["prob"] >= masked[-1]["prob"]
    assert main(["predict", "--model", "elmo-brown", "--previous", "river flooded the town",
                 "--top-k", "4"]) == 0
    previous = json.loads(capsys.readouterr().out)
    assert len(previous) == 4 and all(0 < p["prob"] < 1 for p in previous)


def test_reachability_probe_is_bounded_even_when_dns_stalls(monkeypatch):
    """A lookup that stalls does not hold the probe: it says unreachable while the lookup is
    still running (the stand-in lookup ends only when the test lets it, or after 5 s)."""
    import socket
    import threading

    from engine import fetch, hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CTXLENS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "CONNECT_TIMEOUT_S", 0.1)
    release, ended = threading.Event(), threading.Event()

    def stalled_lookup(*args, **kwargs):
        release.wait(5)
        ended.set()
        raise OSError("name resolution timed out")

    monkeypatch.setattr(socket, "create_connection", stalled_lookup)
    try:
        assert fetch._reachable("huggingface.co") is False
        assert not ended.is_set()             # it answered without waiting for the lookup
    finally:
        release.set()


def test_predict_rescore_fills_a_blank_and_refuses_a_next_word(zoo, model_dir):
    mlm = zoo.copy("bert", model_dir / "mlm-bert")
    env = {"CTXLENS_MODEL_DIRS": str(model_dir)}
    proc = run_cli("predict", "--model", str(mlm), "--text", "the [MASK] of the river",
                   "--rescore", "--top-k", "3", env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert len(got) == 3 and all(c["token"].isalpha() for c in got)
    # more than the method ranks: it lists those it has and says why it is fewer
    proc = run_cli("predict", "--model", str(mlm), "--text", "the [MASK] of the river",
                   "--rescore", "--top-k", "40", env=env)
    got = json.loads(proc.stdout)
    assert proc.returncode == 0 and 3 < len(got) < 40
    assert f"ctxlens: {len(got)} candidates, not 40" in proc.stderr
    proc = run_cli("predict", "--model", str(mlm), "--next", "the bank of", "--rescore", env=env)
    assert_one_line_error(proc, "--rescore", "masked LM")


def test_a_single_prediction_says_how_it_was_made(zoo, model_dir):
    """The app explains "<UNK>" under ELMo's guesses; the CLI listed it first with no word."""
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    proc = run_cli("predict", "--model", str(elmo), "--next", "the bank of",
                   env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert proc.returncode == 0 and json.loads(proc.stdout)
    note = proc.stderr.strip().splitlines()
    assert len(note) == 1 and note[0].startswith("ctxlens: forward LM") and "<UNK>" in note[0]


def test_a_half_precision_dtype_on_the_cpu_is_said_not_silently_dropped(zoo, model_dir,
                                                                        tmp_path):
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    src = tmp_path / "s.txt"
    src.write_text("the bank of the river .\n")
    proc = run_cli("embed", "--model", str(elmo), "--input", str(src), "--output",
                   str(tmp_path / "e.npz"), "--device", "cpu", "--dtype", "float16",
                   env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    assert proc.returncode == 0, proc.stderr
    assert "--dtype float16 applies on a GPU; on the CPU this runs in float32" in proc.stderr
    assert np.load(tmp_path / "e.npz")["vectors"].dtype == np.float32


# "riverbank" is two pieces for the tiny BERT (river ##bank); BPE and SentencePiece split words
# of their own
SPLIT_TEXT = "They were playing near the riverbank all day."


@pytest.fixture(scope="module")
def attention_models(zoo, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("att-models")
    return {"root": str(root), "bert": str(zoo.copy("bert", root / "bert", masked_lm=False)),
            "gpt2": str(zoo.copy("causal:gpt2", root / "gpt2")),
            "llama": str(zoo.copy("causal:llama", root / "llama"))}


def attention_npz(models, monkeypatch, tmp_path, kind: str, *flags: str):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", models["root"])
    out = tmp_path / f"{kind}.npz"
    assert main(["attention", "--model", models[kind], "--text", SPLIT_TEXT, "--output",
                 str(out), *flags]) == 0
    return np.load(out)


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_attention_words_writes_the_word_maps_of_the_token_maps(attention_models, monkeypatch,
                                                                tmp_path, kind):
    from engine.analysis.attention import word_attention

    z = attention_npz(attention_models, monkeypatch, tmp_path, kind, "--words")
    expected = word_attention(z["attentions"], z["token_to_word"], len(z["words"]))
    np.testing.assert_allclose(z["word_attentions"], expected, atol=1e-7)
    np.testing.assert_allclose(z["word_attentions"].sum(-1), 1.0, atol=1e-5)
    labels = z["word_labels"].tolist()
    assert [w for w, s in zip(labels, z["word_special"]) if not s] == z["words"].tolist()
    assert "riverbank" in labels
    if kind == "bert":
        assert labels[0] == "[CLS]" and labels[-1] == "[SEP]"
        assert "##bank" in z["tokens"].tolist()


def test_attention_without_flags_writes_token_maps_only(attention_models, monkeypatch,
                                                        tmp_path):
    z = attention_npz(attention_models, monkeypatch, tmp_path, "bert")
    assert not {"word_attentions", "word_labels", "query", "key", "scale"} & set(z.files)


@pytest.mark.parametrize("kind", ["bert", "gpt2", "llama"])
def test_attention_query_key_rebuilds_the_maps_by_softmax(attention_models, monkeypatch,
                                                          tmp_path, kind):
    z = attention_npz(attention_models, monkeypatch, tmp_path, kind, "--query-key")
    att, q, k = z["attentions"], z["query"], z["key"]
    assert q.shape == k.shape and q.shape[:3] == att.shape[:3] and q.ndim == 4
    scores = (q.astype(np.float64) @ k.transpose(0, 1, 3, 2)) * z["scale"][:, None, None, None]
    assert bool(z["causal"]) == (kind != "bert")
    if z["causal"]:
        scores = np.where(np.tril(np.ones(att.shape[-2:], bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(-1, keepdims=True), att, atol=1e-4)


def test_attention_query_key_a_layer_without_vectors_is_one_line(attention_models, monkeypatch,
                                                                 tmp_path, capsys):
    from engine.api import Engine
    from engine.errors import UnsupportedPrediction

    real = Engine.query_key

    def refuse_layer_2(self, model_id, text, layer):
        if layer == 2:
            raise UnsupportedPrediction("this architecture's query and key vectors are not "
                                        "exposed")
        return real(self, model_id, text, layer)

    monkeypatch.setattr(Engine, "query_key", refuse_layer_2)
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", attention_models["root"])
    out = tmp_path / "a.npz"
    assert main(["attention", "--model", attention_models["gpt2"], "--text", SPLIT_TEXT,
                 "--output", str(out), "--query-key"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ctxlens: error: --query-key: layer 2")
    assert "not exposed" in err and not out.exists()


@pytest.mark.parametrize("command,output", [
    ("embed", "/proc/x.npz"), ("embed", "DIR.npz"), ("attention", "/sys/x.npz"),
    ("predict", "/proc/x.jsonl"), ("predict", "DIR.npz"), ("index", "/proc/x"),
    ("index", "FILE/sub"),
])
def test_an_unwritable_output_is_refused_before_the_model_loads(tmp_path, capsys, command,
                                                                 output):
    """'/proc/x.npz' or a folder failed at the very end, as an internal error: a long embed
    lost all its work. The model here does not exist: the output is refused first."""
    src = tmp_path / "in.txt"
    src.write_text("the [MASK] of the river .\n")
    (tmp_path / "DIR.npz").mkdir()
    (tmp_path / "FILE").write_text("x")
    out = output.replace("DIR", str(tmp_path / "DIR")).replace("FILE", str(tmp_path / "FILE"))
    what = {"embed": ["--input", str(src)], "attention": ["--text", "the bank ."],
            "predict": ["--input", str(src)], "index": ["--corpus", str(src)]}[command]
    assert main([command, "--model", "no-such-model", *what, "--output", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"ctxlens: error: --output {out} ")
    assert "no-such-model" not in err


def test_a_writable_output_is_left_as_it_was_by_the_check(tmp_path, capsys):
    kept = tmp_path / "old.npz"
    kept.write_bytes(b"old")
    for out in (kept, tmp_path / "new.npz"):
        assert main(["attention", "--model", "no-such-model", "--text", "the bank .",
                     "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert "no-such-model" in err and "--output" not in err
    assert kept.read_bytes() == b"old" and not (tmp_path / "new.npz").exists()


LINE_BREAKS_IN_LINES = ("the bank\u2028of the river .\r\n"
                        "a bank\u2029that lends\x0bmoney\x0c.\n"
                        "\n"
                        "the\x85bank [MASK] money .\n")


def test_input_lines_split_at_newlines_only(zoo, model_dir, capsys):
    """U+2028, U+2029, U+0085, VT and FF split a line: this file gave 8 sentences, not 3."""
    bert = zoo.copy("bert", model_dir / "bert", masked_lm=False)
    z = embed(model_dir, str(bert), LINE_BREAKS_IN_LINES)
    assert len(z["sentences"]) == 3 and z["sentences"][0] == "the bank\u2028of the river ."
    assert z["words"].tolist()[:6] == ["the", "bank", "of", "the", "river", "."]


def test_predict_input_numbers_lines_as_an_editor_does(zoo, model_dir, tmp_path):
    """Text on line 1 holding U+2028 was reported as line 2."""
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    src = tmp_path / "blanks.txt"
    src.write_text(LINE_BREAKS_IN_LINES.replace("river .", "[MASK] ."), encoding="utf-8")
    proc = run_cli("predict", "--model", str(elmo), "--input", str(src), "--top-k", "2",
                   env={"CTXLENS_MODEL_DIRS": str(model_dir)})
    rows = [json.loads(x) for x in proc.stdout.split("\n") if x]      # JSON lines: at \n only
    assert [r["line"] for r in rows] == [1, 2, 4]
    assert rows[0]["text"] == "the bank\u2028of the [MASK] ." and "candidates" in rows[0]
    assert "exactly one [MASK]" in rows[1]["error"] and "candidates" in rows[2]


@pytest.mark.parametrize("command", [
    ["attention", "--output", "a.npz", "--text"], ["predict", "--text"], ["predict", "--next"],
])
def test_text_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path, command):
    """Invalid UTF-8 in --text ended as 'internal error: TypeError: TextEncodeInput must be…'.
    A separate process: the bytes reach argv as a shell passes them."""
    argv = [sys.executable, "-m", "engine", command[0], "--model", "no-such-model",
            *command[1:]]
    proc = subprocess.run([os.fsencode(a) for a in argv] + [b"caf\xe9 [MASK] ."], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert_one_line_error(proc, f"{command[-1]} is not UTF-8 text: the byte 0xe9 at character 4")


@pytest.mark.parametrize("model", ["/" + "x" * 5000, "./" + "x" * 300, "x" * 5000])
def test_an_overlong_model_id_is_one_short_line(capsys, model):
    """A 5,000-character path as --model gave a 5,069-byte internal error quoting all of it."""
    assert main(["predict", "--model", model, "--text", "a [MASK] ."]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 300, err
    assert err.startswith("ctxlens: error: unknown model") and "…" in err


def test_a_library_error_is_one_short_line(monkeypatch, capsys):
    from engine.api import Engine

    def fail(*a, **k):
        raise ValueError("bad\n" + "y" * 5000)

    monkeypatch.setattr(Engine, "__init__", fail)
    assert main(["predict", "--model", "minilm-l6", "--text", "a [MASK] ."]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 400
    assert err.startswith("ctxlens: internal error: ValueError: bad yyy")


def test_a_long_embed_prints_progress_lines_without_a_terminal(zoo, model_dir, monkeypatch,
                                                               capsys):
    """With stderr not a terminal tqdm draws nothing: 10,000 sentences ran in silence."""
    import engine.cli.embed as cli_embed

    monkeypatch.setattr(cli_embed, "EMBED_CHUNK", 20)
    bert = zoo.copy("bert", model_dir / "bert", masked_lm=False)
    z = embed(model_dir, str(bert), "the bank of the river .\n" * 100)
    assert len(z["sentences"]) == 100
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "embedded" in ln]
    assert lines == [f"ctxlens: embedded {n}/100 sentences" for n in (20, 40, 60, 80, 100)]


def test_a_text_in_a_script_without_spaces_gets_one_note(zoo, model_dir, tmp_path, capsys):
    bert = zoo.copy("bert", model_dir / "bert", masked_lm=False)
    embed(model_dir, str(bert), "ภาษาไทย ง่าย .\nภาษาไทย .\nthe bank .\n")
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "without spaces" in ln]
    assert notes == ["ctxlens: Thai is written without spaces: ctxlens takes each run of it "
                     "between spaces or punctuation as one word; put spaces between words to "
                     "choose the split yourself"]


COMPARE_TEXT = ("the bank of the river .\nthe money is in the bank\nwe sat by the river bank\n"
                "the bank raised its rates .\n")


def compare(model_dir: Path, models: str, text: str = COMPARE_TEXT, *flags: str) -> int:
    src = model_dir / "compare.txt"
    src.write_text(text)
    return main(["compare", "--models", models, "--input", str(src), "--output",
                 str(model_dir / "cka.npz"), "--resamples", "200", *flags])


def test_compare_writes_cka_between_two_models_with_intervals_as_csv_and_npz(zoo, model_dir,
                                                                             capsys):
    """#45 item 4: ELMo's layers x a BERT's, one CSV row per pair, the NPZ as matrices."""
    import pandas as pd

    from engine.analysis.model_cka import compare_models
    from engine.api import Engine

    elmo = str(zoo.copy("elmo", model_dir / "elmo"))
    bert = str(zoo.copy("bert", model_dir / "bert"))
    assert compare(model_dir, f"{elmo},{bert}") == 0
    assert "debiased linear CKA over 24 words of 4 sentences" in capsys.readouterr().err
    z = np.load(model_dir / "cka.npz")
    assert z["cka"].shape == z["ci_low"].shape == z["ci_high"].shape == (3, 3)
    assert len(z["layer_names_a"]) == 3 and str(z["model_b"]) == bert
    assert int(z["n_sentences"]) == 4 and int(z["n_resamples"]) == 200
    table = pd.read_csv(model_dir / "cka.csv")
    assert list(table.columns) == ["model_a", "layer_a", "layer_a_name", "model_b", "layer_b",
                                   "layer_b_name", "cka", "ci_low", "ci_high", "n_words",
                                   "n_sentences"]
    assert len(table) == 9 and (table.ci_low <= table.cka + 1e-6).all()
    assert (table.cka <= table.ci_high + 1e-6).all()
    engine = Engine()
    encs = [engine.encode(m, COMPARE_TEXT.splitlines()) for m in (elmo, bert)]
    expected = compare_models(*encs, n_resamples=200)
    np.testing.assert_allclose(z["cka"], expected.cka, atol=1e-5)
    np.testing.assert_allclose(z["ci_high"], expected.high, atol=1e-5)


def test_compare_csv_goes_where_asked(zoo, model_dir):
    bert = str(zoo.copy("bert", model_dir / "bert"))
    assert compare(model_dir, f"{bert},{bert}", COMPARE_TEXT, "--csv",
                   str(model_dir / "table.csv")) == 0
    assert (model_dir / "table.csv").exists() and not (model_dir / "cka.csv").exists()
    # a model with itself: 1 on the diagonal, as the Compare layers page's own heatmap
    np.testing.assert_allclose(np.diag(np.load(model_dir / "cka.npz")["cka"]), 1.0, atol=1e-5)


@pytest.mark.parametrize("models,text,said", [
    ("minilm-l6", COMPARE_TEXT, "--models takes two model ids"),
    ("minilm-l6,elmo-brown,gpt-brown", COMPARE_TEXT, "--models takes two model ids"),
    ("minilm-l6,no-such-model", COMPARE_TEXT, "no-such-model"),
    ("minilm-l6,elmo-brown", "the bank of the river .\n", "at least 2 sentences"),
    ("minilm-l6,elmo-brown", "bank\nriver\n", "4 words"),
])
def test_compare_bad_input_is_one_line(model_dir, capsys, models, text, said):
    assert compare(model_dir, models, text) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ctxlens: error:") and said in err
    assert not (model_dir / "cka.npz").exists()


def test_compare_refuses_an_unwritable_default_csv_before_the_models_load(model_dir, capsys):
    """Without --csv the table goes beside --output (cka.csv); a folder of that name failed
    only after both models had run, as an internal error. The model here does not exist: the
    path is refused first."""
    (model_dir / "cka.csv").mkdir()
    assert compare(model_dir, "minilm-l6,no-such-model") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ctxlens: error:"), err
    assert str(model_dir / "cka.csv") in err and "no-such-model" not in err
    assert not (model_dir / "cka.npz").exists()


def test_index_notes_a_script_without_spaces_once(zoo, model_dir, tmp_path, capsys):
    """embed, predict and compare say how a script without spaces is split; index said
    nothing about its corpus."""
    bert = zoo.copy("bert", model_dir / "bert", masked_lm=False)
    src = tmp_path / "corpus.txt"
    src.write_text("ภาษาไทย ง่าย .\nภาษาไทย .\nthe bank of the river .\n", encoding="utf-8")
    assert main(["index", "--model", str(bert), "--corpus", str(src), "--output",
                 str(tmp_path / "ix")]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "without spaces" in ln]
    assert notes == ["ctxlens: Thai is written without spaces: ctxlens takes each run of it "
                     "between spaces or punctuation as one word; put spaces between words to "
                     "choose the split yourself"]


def test_json_output_escapes_line_and_paragraph_separators(zoo, model_dir, tmp_path):
    """U+2028 and U+2029 are line ends in JavaScript source: JSON lines holding them raw break
    when pasted into a script or an HTML page. They are written as \\u2028 and \\u2029."""
    elmo = zoo.copy("elmo", model_dir / "tiny-elmo")
    src, out = tmp_path / "blanks.txt", tmp_path / "out.jsonl"
    src.write_text("the bank\u2028of the [MASK] .\nthe\u2029[MASK] é .\n", encoding="utf-8")
    assert main(["predict", "--model", str(elmo), "--input", str(src), "--top-k", "2",
                 "--output", str(out)]) == 0
    raw = out.read_text(encoding="utf-8")
    assert "\u2028" not in raw and "\u2029" not in raw
    assert "\\u2028" in raw and "\\u2029" in raw and "é" in raw      # the rest stays readable
    rows = [json.loads(x) for x in raw.splitlines()]
    assert [r["text"] for r in rows] == ["the bank\u2028of the [MASK] .", "the\u2029[MASK] é ."]


def test_embed_and_index_read_layers_the_same_way(capsys):
    """One reading of --layers (engine.families.base.parse_layers) for `embed` and `index`:
    'all' or distinct numbers from 0 up, in the order given; the index then stores them
    ascending, checked against the model."""
    from engine.cli import _parser
    from engine.corpus.embed import chosen_layers
    from engine.errors import EngineError
    from engine.families.base import parse_layers

    assert parse_layers("all") is None and parse_layers("3,0") == (3, 0)
    for command in (["embed", "--input", "I", "--output", "O"], ["index", "--corpus", "C"]):
        args = _parser().parse_args([*command, "--model", "m", "--layers", "3,0"])
        assert args.layers == (3, 0)
        assert _parser().parse_args([*command, "--model", "m", "--layers", "all"]).layers is None
        for bad in ("1,x", "2,2", "-1"):
            with pytest.raises(SystemExit):
                _parser().parse_args([*command, "--model", "m", "--layers", bad])
            assert "--layers takes 'all' or" in capsys.readouterr().err
    assert chosen_layers((3, 0), 7) == [0, 3] and chosen_layers("all", 3) == [0, 1, 2]
    with pytest.raises(EngineError, match="between 0 and 6"):
        chosen_layers("0,9", 7)
