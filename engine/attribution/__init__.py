"""Why this word: attribution of one prediction over the words of its text (issue #54).

explain.py        attribute(adapter, text, target, contrast, method, kind, steps) -> Attribution
result.py         the Attribution dataclass and its JSON (the keys of the CLI's --output)
objective.py      one prediction as a function of its input embeddings; target checks
elmo.py           ELMo's memory count per row (row_bytes), by the name callers know
methods.py        gradient × input, integrated gradients, occlusion (Captum)
faithfulness.py   ERASER comprehensiveness and sufficiency, against random orders
rollout.py        attention rollout onto words at the explained position, for comparison
engine_why.py     the Engine's attribute() and generate() (a mixin of engine.api.Engine)

Each family builds its own objectives (engine/families/base.py's Explained): a masked LM's
blank, a decoder's next word and filled blank (engine/families/hf/objective.py), ELMo's
forward and backward LM words through the char CNN and the biLSTM
(engine/families/elmo/objective.py).

f is the target's log-probability as the model's own softmax gives it, or its log-odds against
a contrast word. Conventions and why Captum: docs/attribution.md. Caching a warm repeat is the
Engine's (one owner per cache).
"""
