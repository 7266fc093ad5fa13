"""What both probes start from: bench.gpu on CUDA, the folder for their files (argv[1]), the
bench's model and its 16,384 Brown sentences."""
import sys
import tempfile
from pathlib import Path

import bench.gpu as g


def setup():
    g.DEVICE = "cuda"
    return g, Path(sys.argv[1]), g.bench_model(Path(tempfile.mkdtemp()))[0], g.texts_for(16384)
