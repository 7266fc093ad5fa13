"""A model id that is a path (issue 52, items 1 and 8): resolved once, to the spelling every page
shows and every cache uses; a path that climbs back with `..` through names that do not exist
is no model; every refusal of a path says the same line, naming no directory of the server; a
Hugging Face cache's ref must be a commit hash."""
from __future__ import annotations

import os
import shutil

import pytest

from engine import cli, hub
from engine.api import Engine
from engine.errors import ModelUnavailable
from engine.registry import ASSETS, canonical_id, model_dirs, resolve
from tests.zoo import into_hub_cache

GPT_BROWN = ASSETS / "models" / "gpt-brown"
# the link: a markdown image inside a path that climbs back to the bundled model
IMAGE_CLIMB = f"{GPT_BROWN}/![x](https://evil.example/p.png)/../../.."
LINK_CLIMB = f"{GPT_BROWN}/[click here](https://evil.example/phish)/../../.."
REFUSED = "is not a model folder inside the configured model directories"


@pytest.mark.parametrize("model_id", [IMAGE_CLIMB, LINK_CLIMB])
def test_a_path_that_climbs_back_through_names_not_there_is_no_model(model_id):
    """Both resolved to assets/models/gpt-brown, and the pages drew the id as markdown."""
    with pytest.raises(ModelUnavailable, match=REFUSED) as err:
        resolve(model_id)
    assert "evil.example" in str(err.value)      # quoted as given, for the user to see
    with pytest.raises(ModelUnavailable, match=REFUSED):
        canonical_id(model_id)


def test_a_path_through_folders_that_exist_is_named_by_its_resolved_path():
    climbing = f"{GPT_BROWN}/../gpt-brown/./"
    entry = resolve(climbing)
    assert entry.id == str(GPT_BROWN) == entry.folder
    assert ".." not in entry.id and canonical_id(climbing) == str(GPT_BROWN)
    assert canonical_id("gpt-brown") == "gpt-brown"               # a registry id as it is
    assert canonical_id("org/some-model") == "org/some-model"     # a hub id as it is


def test_every_refused_path_says_the_same_line_and_names_no_server_directory(
        tmp_path, model_dir):
    """"is not a model directory", "no such directory" and "outside ... (allowed: <dirs>)"
    told a visitor what exists on the server and where its models live."""
    (model_dir / "a-file").write_text("x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    messages = set()
    for model_id in (str(model_dir / "a-file"), str(model_dir / "not-there"), str(outside),
                     "/etc", "/no/such/folder", "../../../../etc"):
        with pytest.raises(ModelUnavailable) as err:
            resolve(model_id)
        messages.add(str(err.value).replace(hub.shown(model_id), "<id>"))
    assert len(messages) == 1, messages
    (message,) = messages
    assert REFUSED in message
    for d in model_dirs():
        assert str(d) not in message


def test_an_empty_model_id_is_said_as_such(capsys):
    """`--model ""` answered "<cwd> is outside the configured model directories"."""
    assert cli.main(["embed", "--model", "", "--input", __file__,
                     "--output", "/tmp/never.npz"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no model id given" in err and os.getcwd() not in err


def test_ctxlens_models_lists_the_model_directories(capsys, model_dir):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("Model directories: "))
    assert str(model_dir) in line and str(ASSETS / "models") in line


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.mark.parametrize("ref", ["../../../outside", "main", "0" * 39, "0" * 40 + "/.."])
def test_a_hub_cache_ref_that_is_no_commit_hash_is_not_followed(zoo, tmp_path, hub_cache, ref):
    """A refs/main holding '../../../../outside' loaded (and listed) a folder outside the
    cache and the model directories as the hub model."""
    good = into_hub_cache(zoo.path("arch:gpt2"), hub_cache, "org/tiny")
    assert hub.cached_snapshot("org/tiny") == good and "org/tiny" in hub.cached_repos()
    outside = tmp_path / "outside"
    zoo.copy("arch:gpt2", outside)
    repo = hub_cache / "models--org--tiny"
    (repo / "refs" / "main").write_text(ref)
    if ref.startswith("../"):       # the ref, followed from snapshots/, reaches `outside`
        assert (repo / "snapshots" / ref).resolve() == outside.resolve()
    assert hub.cached_snapshot("org/tiny") is None
    assert "org/tiny" not in hub.cached_repos()
    with pytest.raises(ModelUnavailable):
        Engine(device="cpu").encode("org/tiny", ["a b"])


def test_a_snapshot_linked_out_of_the_cache_is_not_followed(zoo, tmp_path, hub_cache):
    good = into_hub_cache(zoo.path("arch:gpt2"), hub_cache, "org/tiny")
    outside = tmp_path / "outside"
    shutil.copytree(good, outside, symlinks=False)
    shutil.rmtree(good)
    good.symlink_to(outside, target_is_directory=True)
    assert hub.cached_snapshot("org/tiny") is None


def test_the_models_that_can_hint_names_the_users_own_folders(zoo, model_dir):
    """"models that can: ..." listed registry models only: a user with a masked LM of their own
    in a model directory was never pointed at it."""
    from engine.errors import UnsupportedPrediction

    mine = zoo.copy("arch:roberta", model_dir / "my-roberta")   # a *ForMaskedLM of the user's
    gpt = zoo.copy("arch:gpt2", model_dir / "my-gpt2")
    engine = Engine(device="cpu")
    with pytest.raises(UnsupportedPrediction, match="models that have one: ") as err:
        engine.predict_masked(str(gpt), "The [MASK] raised rates.", rescore=True)
    named = str(err.value).split("models that have one: ")[1].split(", ")
    assert str(mine) in named and str(gpt) not in named
    assert "bert-brown-mlm" in named                      # the registry's are still there
