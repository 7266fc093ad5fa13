"""Training the bundled models (GPT, BERT masked LM, ELMo biLM, MiniLM-L6's MLM head) on the
Brown corpus, and writing their model cards. See lab/training/README.md to rebuild each one.
"""
