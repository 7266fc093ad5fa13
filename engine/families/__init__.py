"""The model families: one row each, and the only place that lists them.

A row names the module whose `load()` builds the family's Adapter (imported on first use, so
asking what a family can do loads no model code) and what the family's models can do. One
checkpoint may do less than its family (a BERT without an MLM head cannot fill a blank): its
registry entry's `fills_blank` says so, and engine.registry.model_can, which reads this table
and that field, is the one answer to what a model can do. Adding a family is one module plus
one `register()` call; the CLI, the app and the benchmarks read this table.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from engine.errors import EngineError

# What a family's models can give (the app shows a view only where a chosen model can):
CAPABILITIES = frozenset({
    "hidden_states",   # a vector per word at every layer
    "attention",       # attention maps per layer and head
    "masked_lm",       # an MLM head reads both sides of a [MASK] at once
    "fill_blank",      # fills one [MASK] from both sides, by any method
    "next_word",       # a left-to-right LM's guess at the next word
    "previous_word",   # a right-to-left LM's guess at the word before
    "scalar_mix",      # ELMo's learned mix of its layers
    "logit_lens",      # every layer read through the LM head
    "query_key",       # the query and key vectors behind each attention score (neuron view)
})


@dataclass(frozen=True)
class Family:
    name: str                     # the id used in the registry and URLs ("gpt")
    label: str                    # how pages name it ("GPT")
    module: str                   # module with load(model_id, path, options, progress, ...)
    capabilities: frozenset[str]
    reads_gguf: bool = False      # module also has convert_gguf(src_dir, file, dest, progress)
    # its encoders can be traced for batch work (engine/traced.py): the trace is
    # checked against the model before it is kept, so a row says only "worth trying"
    traced_encoder: bool = False
    # module with claims_dir(path) -> bool and fills_blank_of_dir(path) -> str, which say
    # whether a local model folder is this family's and what its checkpoint can fill (a light
    # module: the registry asks every family before any model loads); "" = `module`
    folder: str = ""

    def __post_init__(self):
        unknown = set(self.capabilities) - CAPABILITIES
        if unknown:
            raise ValueError(f"unknown capabilities {sorted(unknown)}")

    def can(self, capability: str) -> bool:
        return capability in self.capabilities

    @property
    def a_label(self) -> str:
        """The label with its article, for messages ("an ELMo", "a GPT")."""
        return ("an " if self.label[0] in "AEIOU" else "a ") + self.label

    @property
    def left_to_right(self) -> bool:
        """Its models read left to right only (a GPT; not ELMo, which reads both ways)."""
        return self.can("next_word") and not self.can("previous_word")

    def folder_probe(self):
        return importlib.import_module(self.folder or self.module)

    def module_object(self):
        return importlib.import_module(self.module)


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    FAMILIES.pop(name, None)


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise EngineError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[name]


register(Family("elmo", "ELMo", "engine.families.elmo.adapter",
                frozenset({"hidden_states", "fill_blank", "next_word", "previous_word",
                           "scalar_mix"}), folder="engine.families.elmo.folder"))
register(Family("gpt", "GPT", "engine.families.gpt",
                frozenset({"hidden_states", "attention", "fill_blank", "next_word",
                           "logit_lens", "query_key"}), reads_gguf=True, traced_encoder=True))
register(Family("bert", "BERT", "engine.families.bert",
                frozenset({"hidden_states", "attention", "masked_lm", "fill_blank",
                           "query_key"}), traced_encoder=True))
