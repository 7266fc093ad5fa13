"""Any model id: hub ids out of the local Hugging Face cache, folders, the user's registry file,
`ctxlens models`; and what is refused before anything loads (pickles, remote code, a model too
big for the free memory, a download offline, ids of no known shape), each in one line."""
from __future__ import annotations

import json
import pickle
import struct
import time
from pathlib import Path

import pytest

from engine import cli
from engine.api import Engine
from engine.errors import EngineError, ModelUnavailable, NeedsDownload
from tests.zoo import into_hub_cache


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "ctxlens-cache"))
    monkeypatch.setenv("CTXLENS_REGISTRY", str(tmp_path / "no-user-registry.toml"))
    return cache


def test_a_cached_hub_id_works_offline_and_an_uncached_one_fails_fast(zoo, hub_cache):
    into_hub_cache(zoo.path("arch:roberta"), hub_cache, "someone/tiny-roberta")
    engine = Engine(device="cpu")
    enc = engine.encode("someone/tiny-roberta", ["The bank raised its rates ."])[0]
    assert enc.words[1] == "bank" and enc.hidden_states.shape[0] == 3
    assert "masked_lm" in engine.resolved("someone/tiny-roberta").capabilities
    start = time.monotonic()
    with pytest.raises(NeedsDownload, match="needs a download") as err:    # a ModelUnavailable
        engine.encode("Qwen/Qwen2.5-0.5B", ["a b"])
    assert time.monotonic() - start < 5
    assert "\n" not in str(err.value) and "Qwen/Qwen2.5-0.5B" in str(err.value)


def test_a_user_registry_entry_needs_only_family_and_hub(zoo, tmp_path, hub_cache, monkeypatch):
    into_hub_cache(zoo.path("arch:gpt2"), hub_cache, "me/tiny-gpt")
    user = tmp_path / "models.toml"
    user.write_text('[models.mine]\nfamily = "gpt"\nhub = "me/tiny-gpt"\n')
    monkeypatch.setenv("CTXLENS_REGISTRY", str(user))
    engine = Engine(device="cpu")
    assert engine.entry("mine").name == "" and engine.family_name("mine") == "gpt"
    assert engine.predict_next("mine", "The bank", top_k=2).candidates
    user.write_text('[models.bad]\nhub = "me/tiny-gpt"\n')
    with pytest.raises(EngineError, match="no `family`"):
        Engine(device="cpu")


def test_ctxlens_models_lists_folders_and_cached_hub_models(zoo, tmp_path, hub_cache,
                                                            monkeypatch, capsys):
    folders = tmp_path / "mine"
    zoo.copy("arch:distilbert", folders / "my-distilbert")
    into_hub_cache(zoo.path("arch:llama"), hub_cache, "org/tiny-llama")
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(folders))
    assert cli.main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    folder_line = next(ln for ln in lines if "my-distilbert" in ln)
    hub_line = next(ln for ln in lines if ln.startswith("org/tiny-llama"))
    assert " bert " in folder_line and "folder" in folder_line and "masked word" in folder_line
    assert " gpt " in hub_line and "Hugging Face cache" in hub_line and "logit lens" in hub_line


def arch_config(folder: Path, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(fields))
    return folder


class _Payload:
    """A pickle whose loading creates a file: proof that unpickling ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_checkpoint_is_refused_and_its_code_never_runs(tmp_path, model_dir):
    marker = tmp_path / "pwned"
    folder = arch_config(model_dir / "evil", architectures=["BertForMaskedLM"], model_type="bert",
                     vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=8)
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload(marker)}))
    with pytest.raises(ModelUnavailable, match="pickled weights only") as err:
        Engine(device="cpu").encode(str(folder), ["a b"])
    assert "\n" not in str(err.value)
    assert not marker.exists()


def test_a_checkpoint_that_needs_its_own_code_is_refused(tmp_path, model_dir):
    marker = tmp_path / "ran"
    folder = arch_config(model_dir / "custom", architectures=["MyModelForCausalLM"],
                     model_type="my_model", auto_map={"AutoModelForCausalLM": "modeling.M"})
    (folder / "modeling.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(ModelUnavailable, match="own modelling code.*never runs"):
        Engine(device="cpu").family_name(str(folder))
    assert not marker.exists()


def test_kinds_ctxlens_does_not_show_are_said(model_dir):
    t5 = arch_config(model_dir / "t5", architectures=["T5ForConditionalGeneration"],
                 model_type="t5", is_encoder_decoder=True)
    with pytest.raises(ModelUnavailable, match="encoder-decoder"):
        Engine(device="cpu").family_name(str(t5))
    cls = arch_config(model_dir / "cls", architectures=["LlamaForSequenceClassification"],
                  model_type="llama")
    with pytest.raises(ModelUnavailable, match="decoder without its LM head"):
        Engine(device="cpu").family_name(str(cls))


def _sparse_safetensors(path: Path, shape: tuple[int, int]) -> None:
    """A valid safetensors header for one float32 tensor of `shape`, the data a hole in a sparse
    file: a model too big for this machine that costs no disk."""
    n_bytes = 4 * shape[0] * shape[1]
    header = json.dumps({"w": {"dtype": "F32", "shape": list(shape),
                               "data_offsets": [0, n_bytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + n_bytes)


def test_a_model_too_big_for_the_free_memory_is_refused_before_it_loads(zoo, model_dir):
    folder = zoo.copy("arch:gpt2", model_dir / "huge")
    _sparse_safetensors(folder / "model-00002-of-00002.safetensors", (400_000, 100_000))
    with pytest.raises(ModelUnavailable) as err:
        Engine(device="cpu").encode(str(folder), ["a b"])
    msg = str(err.value)
    # the CLI's path too (a traced graph and its cache key hash the files: 149 GB of zeros,
    # read before the guard, took minutes); refused at once
    start = time.monotonic()
    assert cli.main(["embed", "--model", str(folder), "--input", __file__,
                     "--output", str(model_dir / "v.npz")]) == 2
    assert time.monotonic() - start < 20
    assert "40.00B parameters" in msg and "149.0 GB in float32" in msg and "free" in msg
    assert "bfloat16" in msg and "\n" not in msg


@pytest.mark.parametrize("model_id, message", [
    ("not a model id!", "not a folder under the model directories and not a Hugging Face"),
    ("x" * 5000, "unknown model"),
    ("/etc", "is not a model folder inside the configured model directories"),
    ("", "no model id given"),
])
def test_bad_model_ids_get_one_short_line(model_id, message, hub_cache, capsys):
    assert cli.main(["embed", "--model", model_id, "--input", __file__,
                     "--output", "/tmp/never.npz"]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and len(err) < 400


def test_ctxlens_embed_takes_a_hub_id_from_the_offline_cache(zoo, tmp_path, hub_cache):
    import numpy as np

    into_hub_cache(zoo.path("arch:qwen2"), hub_cache, "org/tiny-qwen")
    src = tmp_path / "in.txt"
    src.write_text("The bank raised its rates .\nShe sat on the river bank .\n")
    out = tmp_path / "v.npz"
    assert cli.main(["embed", "--model", "org/tiny-qwen", "--input", str(src), "--output",
                     str(out), "--layers", "0,2"]) == 0
    z = np.load(out, allow_pickle=False)
    assert str(z["model"]) == "org/tiny-qwen" and list(z["layers"]) == [0, 2]
    assert z["vectors"].shape == (13, 2, 32)      # words x the two layers asked x dims
