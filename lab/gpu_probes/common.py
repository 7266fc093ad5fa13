"""What both probes start from: bench.gpu on CUDA, the folder for their files (argv[1]), the
bench's model and its 16,384 Brown sentences."""
import os
import sys
import tempfile
from pathlib import Path

import bench.gpu as g


def setup():
    """CTXLENS_PROBE_DEVICE=cpu and CTXLENS_PROBE_SENTENCES=N: a dry run here before a lent GPU."""
    g.DEVICE = os.environ.get("CTXLENS_PROBE_DEVICE", "cuda")
    n = int(os.environ.get("CTXLENS_PROBE_SENTENCES", "16384"))
    return g, Path(sys.argv[1]), g.bench_model(Path(tempfile.mkdtemp()))[0], g.texts_for(n)


def mfu(params: int, tokens: int, seconds: float) -> float:
    """Model FLOP utilisation as bench.gpu counts it (2 x matmul parameters x real tokens) against
    the H100's and H200's dense peak."""
    return 2 * params * tokens / seconds / g.NOMINAL_PEAK["H100"]
