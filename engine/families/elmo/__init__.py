"""The ELMo family (Peters et al. 2018) in pure PyTorch: loads AllenNLP/bilm-tf checkpoints.

Modules: adapter (the Adapter the engine talks to), chars (character ids), modules (char CNN,
highway, biLM), lstm (LSTM with projection, fast and reference loops), weights (HDF5 and softmax
files), mix (scalar mix, numpy only), reference (the bilm-tf fixture protocol).

This file stays empty: the analysis code (and through it the app, which never imports torch)
reaches engine.families.elmo.mix, and importing a submodule runs this file first. The engine
finds the loader through the family table (engine/families/__init__.py).
"""
