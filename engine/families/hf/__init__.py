"""What the Hugging Face families (bert.py, gpt.py) share, a module per idea:

loading.py   a model folder's config, fast tokenizer and model, safetensors only
guards.py    a loaded model holds its checkpoint's own tensors, none made up by transformers
tokens.py    a text's tokens aligned to the shared words; readable tokens; the token checks
parts.py     where an architecture keeps its blocks, attention projections and norms; the
             hooks that read or rewrite them (`hooked`)
transformer.py  what the adapters give the component views (base.Transformer)
forward.py   running the layers over padded batches: hidden states, attention maps, Encodings
pooling.py   word vectors pooled on the device for batch work
qk.py        the neuron view's queries and keys, read from the model's attention call
"""
