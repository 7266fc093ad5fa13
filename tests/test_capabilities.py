"""What a model can do has one owner: its entry's `capabilities` (engine.registry.ModelEntry),
made once from what its checkpoint gives (engine.families.Gives) within its family's row. No
other module decides it again, and a new capability is one change in engine/families."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine import families
from engine.api import Engine
from engine.registry import ModelEntry

ROOT = Path(__file__).resolve().parents[1]
CODE = ("engine", "app", "bench", "lab")
# helpers that asked "can this model ...?" again, each its own way
ASKING_AGAIN = {"can", "model_can", "fills_blank", "blank_fillers", "lm_predictors",
                "masked_lms", "families_that", "fills_blank_of_dir"}
# the class names whose suffix says which head a Hugging Face checkpoint ships
HEAD_SUFFIXES = ("ForMaskedLM", "ForCausalLM", "LMHeadModel")


def sources() -> dict[str, ast.AST]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(), str(p))
            for pkg in CODE for p in sorted((ROOT / pkg).rglob("*.py"))}


def test_no_module_asks_what_a_model_can_do_again():
    """No helper of the old names is defined or called, and `fills_blank` (the registry file's
    word for what a checkpoint fills with) is read in engine/registry.py only."""
    found = []
    for name, tree in sources().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.name in ASKING_AGAIN:
                found.append(f"{name}:{node.lineno} defines {node.name}")
            elif isinstance(node, ast.Attribute) and node.attr in ASKING_AGAIN:
                found.append(f"{name}:{node.lineno} reads .{node.attr}")
            elif isinstance(node, ast.Name) and node.id == "NEEDS_HEAD":
                found.append(f"{name}:{node.lineno} names NEEDS_HEAD")
            elif isinstance(node, ast.Constant) and node.value == "fills_blank" and \
                    name != "engine/registry.py":
                found.append(f"{name}:{node.lineno} reads fills_blank")
    assert found == []


def test_only_the_checkpoint_reader_decides_which_head_a_config_names():
    """"Has an MLM head" is read from a config's architectures in engine/checkpoint.py only
    (bert.py and the folder probes ask it)."""
    found = []
    for name, tree in sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "endswith" and name != "engine/checkpoint.py":
                words = [c.value for a in node.args for c in ast.walk(a)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any(w.endswith(HEAD_SUFFIXES) for w in words):
                    found.append(f"{name}:{node.lineno}")
    assert found == []


def test_the_app_tells_a_download_by_its_type_not_its_words():
    for p in (ROOT / "app").rglob("*.py"):
        if p.name != "engine_access.py":
            assert "needs a download" not in p.read_text(), p


def test_a_new_capability_is_one_change_in_the_family_table(monkeypatch, tmp_path):
    """Declared in the vocabulary, given by the checkpoints that ship it and put in a family's
    row (all three in engine/families/__init__.py): every model of that family has it, the
    engine lists who can, and no other file changes."""
    monkeypatch.setattr(families, "CAPABILITIES", families.CAPABILITIES | {"rationale"})
    monkeypatch.setattr(families, "ENCODER", families.ENCODER | {"rationale"})
    row = families.Family("toy", "Toy", "tests.toy_family",
                          frozenset({"hidden_states", "rationale"}))
    families.register(row)
    try:
        engine = Engine(device="cpu")
        engine.registry["toy-1"] = ModelEntry(id="toy-1", family="toy",
                                              capabilities=families.ENCODER)
        assert engine.resolved("toy-1").capabilities == {"hidden_states", "rationale"}
        assert engine.models_that("rationale") == ["toy-1"]
        # a family whose row lacks it: none of its models has it
        assert "rationale" not in ModelEntry(id="b", family="bert",
                                                capabilities=families.ENCODER).capabilities
    finally:
        families.unregister("toy")


def test_what_an_architecture_rules_out_is_known_with_its_reason_before_it_loads():
    """DeBERTa's scores carry relative-position terms, so no neuron view: its config says so
    (engine.checkpoint.kind_of), not a run of the model."""
    from engine.checkpoint import kind_of

    kind = kind_of({"architectures": ["DebertaV2ForMaskedLM"], "model_type": "deberta-v2"})
    entry = ModelEntry(id="d", family=kind.family, capabilities=kind.gives.capabilities,
                       cannot=kind.gives.cannot)
    assert "query_key" not in entry.capabilities and "masked_lm" in entry.capabilities
    assert "relative-position" in entry.cannot["query_key"]
    assert "query_key" in ModelEntry(id="b", family="bert").capabilities


@pytest.mark.parametrize("word, can", [("masked-lm", "masked_lm"), ("both-sides", "next_word")])
def test_the_registrys_own_models_keep_what_they_could_do(word, can):
    """assets/models.toml still says `fills_blank`: each entry's set holds what the word meant."""
    import tomllib

    from engine.registry import REGISTRY_FILE, load_registry

    raw = tomllib.loads(REGISTRY_FILE.read_text())["models"]
    registry = load_registry(REGISTRY_FILE, user=Path("/nonexistent"))
    said = [m for m, f in raw.items() if f.get("fills_blank") == word]
    assert said and all(can in registry[m].capabilities for m in said)
