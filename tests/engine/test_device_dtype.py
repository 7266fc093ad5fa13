"""Device and dtype selection, checked on the CPU: half precision is a CUDA option (the CPU
keeps float32 so results stay comparable), and asking for a missing device is one clear error."""
from __future__ import annotations

import pytest
import torch

from engine.api import Engine
from engine.errors import EngineError
from engine.families.base import resolve_device, resolve_dtype


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


def test_an_engine_asked_for_bfloat16_on_the_cpu_runs_float32(zoo, tmp_path, monkeypatch):
    path = zoo.copy("bert", tmp_path / "bert", masked_lm=False)
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    engine = Engine(device="cpu", dtype="bfloat16")
    adapter = engine.adapter(str(path))
    assert next(adapter.model.parameters()).dtype == torch.float32
    enc = engine.encode(str(path), ["the cat sat"])[0]
    assert enc.hidden_states.dtype.name == "float32"


def test_batch_attention_choice_survives_two_chunks_in_flight():
    # the GPU batch path narrows SDPA's kernels with process-wide flags, and ctxlens embed
    # runs two chunks at once: the narrowing must hold while either runs and be undone when
    # both are done, whatever order they finish in (enter A, enter B, leave A, leave B)
    import threading

    import torch

    from engine.families.hf.pooling import batch_attention

    cuda = torch.device("cuda")        # only its type is read; no GPU is needed for the flags
    assert torch.backends.cuda.cudnn_sdp_enabled()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with batch_attention(cuda):
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with batch_attention(cuda):
            b_in.set()
            a_out.wait(5)
            seen["cudnn while B runs"] = torch.backends.cuda.cudnn_sdp_enabled()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"cudnn while B runs": False}
    assert torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    with batch_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled()


def test_float32_on_cuda_turns_off_tf32_convolutions():
    # ELMo's char CNN on a lent H200 came out up to 6e-4 off the CPU with cuDNN's default TF32
    before = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        resolve_dtype("float16", "cuda")
        assert torch.backends.cudnn.allow_tf32          # half precision: not ours to change
        assert resolve_dtype("float32", "cuda") is torch.float32
        assert not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32 = before
