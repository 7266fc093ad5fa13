"""Training the bundled models (GPT, BERT masked LM, ELMo biLM) on the Brown corpus.

See engine/training/README.md for the corpus files, the trainers and how to rebuild everything.
"""
