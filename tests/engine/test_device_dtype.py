"""Device and dtype selection, checked on the CPU: half precision is a CUDA option (the CPU
keeps float32 so results stay comparable), and asking for a missing device is one clear error."""
from __future__ import annotations

import pytest
import torch

from engine.api import Engine
from engine.errors import EngineError
from engine.families.base import resolve_device, resolve_dtype
from tests.tiny_models import save_bert


def test_auto_picks_cuda_only_when_present():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(EngineError, match="unknown device 'tpu'"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_one_line():
    with pytest.raises(EngineError, match="no CUDA device is available"):
        resolve_device("cuda")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_stays_float32_on_the_cpu_and_is_kept_on_cuda(dtype):
    assert resolve_dtype(dtype, "cpu") is torch.float32
    assert resolve_dtype(dtype, "cuda") is getattr(torch, dtype)
    with pytest.raises(EngineError, match="unknown dtype 'int4'"):
        resolve_dtype("int4", "cpu")


def test_an_engine_asked_for_bfloat16_on_the_cpu_runs_float32(tmp_path, monkeypatch):
    path = save_bert(tmp_path / "bert", masked_lm=False)
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    engine = Engine(device="cpu", dtype="bfloat16")
    adapter = engine.adapter(str(path))
    assert next(adapter.model.parameters()).dtype == torch.float32
    enc = engine.encode(str(path), ["the cat sat"])[0]
    assert enc.hidden_states.dtype.name == "float32"
