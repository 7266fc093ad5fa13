"""A checkpoint is checked before it loads (issue 52, items 2, 3, 5, 6): its parameter count comes
from its config (counted on the meta device) and must nearly be in the weights and fit in memory;
a tensor the weights lack is an error, never a random initialisation; a corrupt safetensors file
is exit 2 and one line naming it; a model of images or audio, or a folder without a tokenizer,
is refused by what it is before any load; `ctxlens models` and the app's model lists mark broken
folders with why."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import checkpoint
from engine.api import Engine
from engine.cli import main
from engine.errors import EngineError, ModelUnavailable
from engine.families import bert as bert_family
from engine.families.hf import loading
from engine.families.base import LoadOptions

CPU = LoadOptions(device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def tiny(zoo) -> Path:
    """The zoo's tiny BERT masked LM; each test copies it into its model directory."""
    return zoo.path("bert")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    # traced graphs and converted files go to the test's own cache, never a shared one
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))


def copy(tiny: Path, model_dir: Path, name: str) -> Path:
    return Path(shutil.copytree(tiny, model_dir / name))


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def write_safetensors(path: Path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def no_model_built(monkeypatch) -> None:
    """Make building a model with weights fail the test: the refusal must come before."""
    def built(*args, **kwargs):
        raise AssertionError("a model was built from the weights")
    for name in ("AutoModel", "AutoModelForMaskedLM", "AutoModelForCausalLM"):
        import transformers
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", built)


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


# -- 2. the parameter count comes from the config ----------------------------------------------
def test_an_empty_weights_file_is_refused_from_the_configs_count(tiny, model_dir, monkeypatch):
    """Was: 0 parameters passed the guard and transformers built the model at random (exit 0,
    random "embeddings")."""
    folder = copy(tiny, model_dir, "empty")
    save_file({}, str(folder / "model.safetensors"))
    no_model_built(monkeypatch)
    with pytest.raises(ModelUnavailable, match=r"hold 0 of the [\d,]+ parameters its config"):
        Engine(device="cpu").adapter(str(folder), progress=False)


def test_a_70b_config_over_empty_weights_is_counted_without_allocating(tiny, model_dir,
                                                                       monkeypatch):
    """Was: the guard passed a 70B-shaped config with no weights, and the load died allocating."""
    folder = model_dir / "llama-70b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
        "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
        "num_key_value_heads": 8, "vocab_size": 128256}))
    save_file({}, str(folder / "model.safetensors"))
    shutil.copy(tiny / "tokenizer.json", folder)
    no_model_built(monkeypatch)
    with pytest.raises(ModelUnavailable, match=r"hold 0 of the 70,\d{3},\d{3},\d{3} parameters"):
        Engine(device="cpu").adapter(str(folder), progress=False)


def test_the_memory_check_counts_what_the_config_describes(tiny, model_dir, monkeypatch):
    """Weights holding most of a model pass the header's estimate; the estimate from the config
    (all of it, as transformers would build it) is what must fit."""
    folder = copy(tiny, model_dir, "most")
    tensors = load_file(str(folder / "model.safetensors"))
    dropped = "bert.encoder.layer.1.output.dense.weight"
    save_file({k: v for k, v in tensors.items() if k != dropped}, str(folder / "model.safetensors"))
    stored, _ = checkpoint.parameter_bytes(folder)
    described = stored + tensors[dropped].numel()
    assert stored >= checkpoint.PRESENT_SHARE * described     # the count check lets it by
    # free memory between the two estimates: the header's fits, the config's does not
    free = (stored + described) * 4 / 2 / checkpoint.MEMORY_SHARE
    monkeypatch.setattr(checkpoint, "free_memory_bytes", lambda device: int(free))
    no_model_built(monkeypatch)
    with pytest.raises(ModelUnavailable, match=f"{described / 1e9:.2f}B parameters"):
        Engine(device="cpu").adapter(str(folder), progress=False)


# -- 3. missing tensors are an error ----------------------------------------------------------
def test_a_tensor_the_weights_lack_is_named_not_made_up(tiny, model_dir):
    """Was: loaded with that tensor at random, exit 0."""
    folder = copy(tiny, model_dir, "one-missing")
    tensors = load_file(str(folder / "model.safetensors"))
    dropped = "bert.encoder.layer.1.output.dense.weight"
    save_file({k: v for k, v in tensors.items() if k != dropped}, str(folder / "model.safetensors"))
    with pytest.raises(ModelUnavailable, match=f"lack '{dropped}'.*random"):
        Engine(device="cpu").adapter(str(folder), progress=False)


def test_a_pickle_beside_an_empty_safetensors_is_refused(tiny, model_dir, monkeypatch):
    """Was: the pickle was (rightly) never read, and the model loaded at random, exit 0."""
    folder = copy(tiny, model_dir, "bin-beside-empty")
    torch.save({"x": torch.zeros(1)}, folder / "pytorch_model.bin")
    save_file({}, str(folder / "model.safetensors"))
    no_model_built(monkeypatch)
    with pytest.raises(ModelUnavailable, match="hold 0 of the"):
        Engine(device="cpu").adapter(str(folder), progress=False)


def test_a_masked_lm_config_over_weights_without_the_head_is_refused(zoo, model_dir):
    """A config that names the MLM head over an encoder's weights: the head would be random."""
    folder = zoo.copy("bert", model_dir / "headless", masked_lm=False)
    edit_config(folder, architectures=["BertForMaskedLM"])
    with pytest.raises(ModelUnavailable, match=r"lack 'cls\.predictions"):
        Engine(device="cpu").adapter(str(folder), progress=False)


def test_tied_heads_a_missing_pooler_and_an_overlays_head_still_load(zoo, model_dir):
    """What the weights may lack: a head tied to the embeddings (GPT-2's lm_head; an overlay's
    decoder bias), the pooler, which ctxlens never reads (a token classifier has none), and the
    tensors an overlay puts in right after the load."""
    from transformers import BertConfig, BertModel

    from tests.zoo import wordpiece_tokenizer

    tok = wordpiece_tokenizer()
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(model_dir / "no-pooler")
    tok.save_pretrained(model_dir / "no-pooler")
    edit_config(model_dir / "no-pooler", architectures=["BertForTokenClassification"])
    assert Engine(device="cpu").encode(str(model_dir / "no-pooler"), ["The bank."])

    base = zoo.copy("bert", model_dir / "base", masked_lm=False)
    head = model_dir / "head"
    head.mkdir()
    from transformers import AutoConfig, BertForMaskedLM

    config = AutoConfig.from_pretrained(str(base))
    config.architectures = ["BertForMaskedLM"]
    config.save_pretrained(head)
    full = BertForMaskedLM(config).state_dict()
    save_file({k: v.contiguous() for k, v in full.items()
               if k.startswith("cls.") and k != "cls.predictions.decoder.weight"
               and k != "cls.predictions.decoder.bias"},
              str(head / "mlm_overlay.safetensors"))
    adapter = bert_family.load("with-head", base, CPU, progress=False, overlay=head)
    assert adapter.has_mlm
    with pytest.raises(ModelUnavailable, match=r"lack 'cls\.predictions"):
        loading.load_hf_model(type(adapter.model), base, CPU, progress=False, config=config)


# -- 5. corrupt files: exit 2, one line naming the file ----------------------------------------
def _truncated(f: Path) -> None:
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) // 2])


def _five_bytes(f: Path) -> None:
    f.write_bytes(f.read_bytes()[:5])


def _junk_header(f: Path) -> None:
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    f.write_bytes(raw[:8] + b"\xff\xfe" * (n // 2) + raw[8 + n:])


def _shape_not_integers(f: Path) -> None:
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"] = ["x", 3]
    write_safetensors(f, header, raw[8 + n:])


@pytest.mark.parametrize("damage, says", [
    (_truncated, "cut short"),
    (_five_bytes, "5 bytes, too short"),
    (_junk_header, "not UTF-8 JSON"),
    (_shape_not_integers, "not a list of non-negative integers"),
])
def test_a_corrupt_weights_file_is_exit_2_and_one_line_naming_it(tiny, model_dir, tmp_path,
                                                                 capsys, damage, says):
    """Was: exit 1, "internal error" and the library's own text."""
    folder = copy(tiny, model_dir, "corrupt")
    damage(folder / "model.safetensors")
    (tmp_path / "in.txt").write_text("The bank.\n")
    code, err = run_cli(capsys, "embed", "--model", str(folder), "--input",
                        str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.npz"))
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("ctxlens: error:"), err
    assert str(folder / "model.safetensors") in err and says in err and "again" in err


def test_shapes_that_do_not_match_the_config_are_exit_2_naming_a_tensor(tiny, model_dir,
                                                                        tmp_path, capsys):
    """Was: exit 1, "internal error: ... look at the above report!" (no report shown)."""
    folder = copy(tiny, model_dir, "mismatched")
    edit_config(folder, intermediate_size=48)
    (tmp_path / "in.txt").write_text("The bank.\n")
    code, err = run_cli(capsys, "embed", "--model", str(folder), "--input",
                        str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.npz"))
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "intermediate.dense" in err and "[64" in err and "[48" in err and "config" in err


@pytest.mark.parametrize("header, data, says", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 12,
     "4 bytes follow its last tensor"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8,
     "starts at byte 4"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8,
     "takes 12 bytes, its offsets 8"),
    ({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "'F33'"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8,
     "non-negative"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "cut short"),
    ([1, 2], b"", "not a JSON object"),
])
def test_every_header_is_checked_as_the_library_checks_it(tmp_path, header, data, says):
    """The header reader (which the memory estimate and the lists read) refuses what the
    safetensors library would refuse at load time, in one line naming the file."""
    from safetensors import safe_open

    f = tmp_path / "model.safetensors"
    write_safetensors(f, header, data)
    with pytest.raises(Exception):          # the library refuses each of these too
        with safe_open(str(f), "pt") as fh:
            list(fh.keys())
    with pytest.raises(ModelUnavailable, match=says) as err:
        checkpoint.parameter_bytes(tmp_path)
    assert str(f) in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_header_longer_than_the_file_and_a_missing_shard_are_named(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(struct.pack("<Q", 4096) + b"{}")
    with pytest.raises(ModelUnavailable, match="claims 4,096 bytes"):
        checkpoint.parameter_bytes(tmp_path)
    f.unlink()
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors",
                        "b": "model-00002-of-00002.safetensors"}}))
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {}, b"")
    with pytest.raises(ModelUnavailable, match="lacks model-00002-of-00002.safetensors"):
        checkpoint.parameter_bytes(tmp_path)


# -- 6. not a text model, no tokenizer, broken folders listed ----------------------------------
def test_an_image_model_is_refused_by_what_it_is_before_any_load(model_dir, monkeypatch):
    """Was: listed as a BERT-like encoder ("every layer, attention"), then failed after 12 s
    blaming sentencepiece/tiktoken."""
    from transformers import ViTConfig, ViTModel

    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=64, image_size=32, patch_size=8)
             ).save_pretrained(model_dir / "vit")
    no_model_built(monkeypatch)
    with pytest.raises(ModelUnavailable, match="is not a text model.*ViTModel"):
        Engine(device="cpu").resolved(str(model_dir / "vit"))


@pytest.mark.parametrize("cfg", [
    {"model_type": "wav2vec2", "architectures": ["Wav2Vec2ForCTC"], "vocab_size": 32},
    {"model_type": "clip", "architectures": ["CLIPModel"]},
    {"model_type": "vit", "architectures": ["ViTForImageClassification"]},
])
def test_audio_and_image_configs_are_no_text_models(cfg):
    with pytest.raises(ModelUnavailable, match="not a text model"):
        checkpoint.kind_of(cfg)


def test_text_encoders_without_a_head_still_count_as_text():
    for cfg in ({"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 30522},
                {"model_type": "dpr", "architectures": ["DPRQuestionEncoder"],
                 "vocab_size": 30522},
                {"model_type": "roberta", "architectures": ["RobertaForSequenceClassification"],
                 "vocab_size": 50265}):
        assert checkpoint.kind_of(cfg).family == "bert"


def test_a_folder_without_tokenizer_files_is_refused_before_the_model_loads(tiny, model_dir,
                                                                           monkeypatch):
    """Was: transformers built an empty tokenizer from the config alone (every word unknown)
    after loading the model; the issue saw "this model's tokenizer drops the word 'The'"."""
    folder = copy(tiny, model_dir, "no-tokenizer")
    for f in folder.glob("tokenizer*"):
        f.unlink()
    no_model_built(monkeypatch)
    with pytest.raises(ModelUnavailable, match="holds no tokenizer"):
        Engine(device="cpu").adapter(str(folder), progress=False)
    with pytest.raises(ModelUnavailable, match="holds no tokenizer"):
        loading.load_tokenizer(folder)


@pytest.fixture
def broken_folders(tiny, model_dir) -> dict[str, Path]:
    good = copy(tiny, model_dir, "good")
    empty = copy(tiny, model_dir, "empty-weights")
    save_file({}, str(empty / "model.safetensors"))
    cut = copy(tiny, model_dir, "truncated")
    _truncated(cut / "model.safetensors")
    notok = copy(tiny, model_dir, "no-tokenizer")
    for f in notok.glob("tokenizer*"):
        f.unlink()
    pickled = copy(tiny, model_dir, "pickled")
    (pickled / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, pickled / "pytorch_model.bin")
    return {"good": good, "empty-weights": empty, "truncated": cut, "no-tokenizer": notok,
            "pickled": pickled}


WHY = {"empty-weights": "hold no tensor", "truncated": "cut short",
       "no-tokenizer": "no tokenizer files", "pickled": "pickled weights only"}


def test_problems_reads_headers_only_and_says_why(broken_folders):
    assert checkpoint.problems(broken_folders["good"]) is None
    for name, why in WHY.items():
        said = checkpoint.problems(broken_folders[name])
        assert said is not None and why in said, (name, said)
        assert not said.startswith(str(broken_folders[name]))


def test_ctxlens_models_marks_broken_folders_with_why(broken_folders, capsys):
    """Was: each listed as "folder" with what a BERT can do."""
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()

    def row(name: str) -> str:      # a long id is shown by its end
        return next(ln for ln in lines if ln and ln.split()[0].endswith(f"/{name}"))
    good = row("good")
    assert good.split()[2] == "folder" and "every layer" in good
    for name, why in WHY.items():
        row_ = row(name)
        assert row_.split()[2] == "broken" and why in row_ and "every layer" not in row_, row_


def test_the_apps_lists_leave_broken_folders_out_and_say_why(broken_folders):
    from app import engine_access

    listed = engine_access.available_models("bert")
    assert str(broken_folders["good"]) in listed
    for name, why in WHY.items():
        assert str(broken_folders[name]) not in listed
        said = engine_access.model_problem(str(broken_folders[name]), "bert")
        assert said is not None and why in said.why and not said.download, (name, said)


def test_a_pickled_only_repo_in_the_hub_cache_says_why_in_the_app(tiny, tmp_path, monkeypatch):
    """Was: "this model needs a download" with no reason and no button, also offline."""
    from app import engine_access
    from tests.zoo import into_hub_cache

    folder = tmp_path / "bin-only"
    shutil.copytree(tiny, folder)
    (folder / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, folder / "pytorch_model.bin")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    into_hub_cache(folder, tmp_path / "hub", "someone/bin-only")
    engine_access.get_engine.clear()
    try:
        said = engine_access.model_problem("someone/bin-only", "bert")
    finally:
        engine_access.get_engine.clear()
    assert said is not None and "pickled weights only (pytorch_model.bin)" in said.why, said
    assert not said.download


def test_errors_are_engine_errors_of_one_line(tiny, model_dir):
    folder = copy(tiny, model_dir, "cut")
    _truncated(folder / "model.safetensors")
    with pytest.raises(EngineError) as err:
        checkpoint.parameter_bytes(folder)
    assert len(str(err.value).splitlines()) == 1
