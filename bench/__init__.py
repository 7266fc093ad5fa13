"""Reproductions and benchmarks: `python -m bench` (make bench) writes results/."""
