"""Small rules with one owner each (issue 53): a rule written twice drifts (the sentence cap
was 64 in the engine, unused, and 24 in the app), so each is defined in one module and the
others import it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for pkg in ("engine", "app", "bench", "lab")
                 for p in (ROOT / pkg).rglob("*.py"))


def _where_assigned(name: str) -> set[str]:
    """Modules that assign `name` at their top level."""
    found = set()
    for path in SOURCES:
        for node in ast.parse(path.read_text()).body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def test_the_sentence_cap_is_the_apps_alone():
    assert _where_assigned("MAX_SENTENCES") == {"app/state.py"}


def _is_mask(node: ast.AST) -> bool:
    """engine.text.MASK, or a string that spells the blank ("[MASK]", r"\\[MASK\\]")."""
    return ((isinstance(node, ast.Name) and node.id == "MASK")
            or (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and "[MASK]" in node.value.replace("\\", "")))


def _compares_to_mask(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Compare) and any(map(_is_mask, [n.left, *n.comparators]))
               for n in ast.walk(node))


def _counts_masks(node: ast.AST, bound: frozenset[str] = frozenset()) -> bool:
    """A count of the blanks a text has, in any of its spellings: len(x.mask_indices) or
    len(found) of a name `bound` to it, x.words.count(MASK), x.text.count("[MASK]"),
    sum(w == MASK for w in ...), len([i for ... if w == MASK]), len(re.findall(r"\\[MASK\\]",
    ...)). Not a count: `MASK in x.words`, `if x.mask_indices:`, text.split("[MASK]")."""
    if not isinstance(node, ast.Call):
        return False
    func, args = node.func, node.args
    if isinstance(func, ast.Attribute):
        return func.attr == "count" and len(args) == 1 and _is_mask(args[0])
    if not (isinstance(func, ast.Name) and func.id in ("len", "sum") and len(args) == 1):
        return False
    arg = args[0]
    if isinstance(arg, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return _compares_to_mask(arg)
    return func.id == "len" and (
        (isinstance(arg, ast.Attribute) and arg.attr == "mask_indices")
        or (isinstance(arg, ast.Name) and arg.id in bound)
        or (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
            and arg.func.attr == "findall" and any(map(_is_mask, arg.args))))


def _counts_blanks(source: str) -> bool:
    """Whether a module counts blanks (_counts_masks), a name bound to x.mask_indices in it
    counted as that list."""
    tree = ast.parse(source)
    bound = frozenset(t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                      and isinstance(n.value, ast.Attribute) and n.value.attr == "mask_indices"
                      for t in n.targets if isinstance(t, ast.Name))
    return any(_counts_masks(n, bound) for n in ast.walk(tree))


def test_every_spelling_of_a_blank_count_is_recognised():
    counts = ["len(wt.mask_indices) != 1", "found = wt.mask_indices\nif len(found) != 1: pass",
              "wt.words.count(MASK) != 1", "text.count('[MASK]') > 1",
              "sum(w == MASK for w in wt.words)", "sum(1 for w in wt.words if w == MASK)",
              "len([i for i, w in enumerate(wt.words) if w == MASK])",
              "len(re.findall(r'\\[MASK\\]', text))", "len({w for w in words if MASK == w})"]
    others = ["MASK in wt.words", "if wt.mask_indices: pass", "text.split('[MASK]')",
              "len(wt.words)", "i = wt.mask_indices[0]", "words.count('bank')",
              "len([t for t in ids if t == tok.mask_token_id])"]
    assert [c for c in counts if not _counts_blanks(c)] == []
    assert [c for c in others if _counts_blanks(c)] == []


# bert.py and gpt.py move into engine/families/hf/ (issue 53, item 4); they take
# WordText.one_mask there and leave this list
NOT_YET: set[str] = set()


def test_only_wordtext_counts_the_blanks():
    """One [MASK] per fill-in-the-blank: WordText.one_mask (engine/text.py) says so for the
    Engine and every family."""
    from engine.text import TextError, to_word_text

    assert to_word_text("the [MASK] sat").one_mask() == 1
    for text, found in (("the cat sat", 0), ("[MASK] [MASK] sat", 2)):
        try:
            to_word_text(text).one_mask()
        except TextError as err:
            assert str(err) == f"put exactly one [MASK] in the text (found {found})"
        else:
            raise AssertionError(text)
    # WordText itself counts them (one_mask); no other module does, in any spelling
    owners = {p.relative_to(ROOT).as_posix() for p in SOURCES if _counts_blanks(p.read_text())}
    assert owners - NOT_YET == {"engine/text.py"}


def test_the_projection_methods_are_listed_by_the_engine_alone():
    """engine.analysis.projection.METHODS names each method once, with the name a reader
    knows; the pages' radios are built from it (app.results.PROJECTIONS)."""
    from app.results import PROJECTIONS
    from engine.analysis.projection import METHODS

    assert PROJECTIONS == {"PCA": "pca", "UMAP": "umap", "t-SNE": "tsne"}
    assert set(PROJECTIONS.values()) == set(METHODS)
    names = {"pca", "umap", "tsne", "PCA", "UMAP", "t-SNE"}
    listing = set()
    for path in SOURCES:
        if path.parts[len(ROOT.parts)] not in ("engine", "app"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            items = (node.keys + node.values if isinstance(node, ast.Dict) else
                     node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
            if sum(isinstance(i, ast.Constant) and i.value in names for i in items) >= 2:
                listing.add(path.relative_to(ROOT).as_posix())
    assert listing == {"engine/analysis/projection.py"}


def test_every_result_with_layers_names_them_so_no_reader_makes_up_names():
    """A model that names no layers gets engine.result.numbered_layers ('layer 0' is the
    input embedding) in the result itself; nothing reads `x.layer_names or <its own names>`."""
    import numpy as np

    from engine.analysis.geometry import LayerMetrics
    from engine.result import Encoding, LogitLens

    enc = Encoding("m", "bert", "a b", ("a", "b"), ("a", "b"), np.array([0, 1]),
                   np.zeros((3, 2, 4), np.float32))
    assert enc.layer_names == ("layer 0", "layer 1", "layer 2")
    lens = LogitLens("m", ("a",), (("x",), ("y",)), np.zeros((2, 1)))
    assert lens.layer_names == ("layer 0", "layer 1")
    zeros = np.zeros(3)
    assert LayerMetrics(zeros, zeros, zeros, zeros, 0).layer_names == enc.layer_names
    fallbacks = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
                    and isinstance(node.values[0], ast.Attribute)
                    and node.values[0].attr == "layer_names"):
                fallbacks.add(path.relative_to(ROOT).as_posix())
    assert fallbacks == set()


# a library switch whose documented interface is an assignment: cuDNN's TF32 rounding, turned
# off where float32 is asked for on a GPU (engine/families/base.py, resolve_dtype)
LIBRARY_SWITCHES = {"torch.backends.cudnn.allow_tf32"}


def _module_names(tree: ast.AST, project: set[str]) -> set[str]:
    """Names a file binds to a module: every `import x` / `import x.y as z`, and a
    `from a import b` where a.b is one of ours."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {a.asname or a.name for a in node.names
                      if f"{node.module}.{a.name}" in project}
    return names


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _writes_to_modules(path: Path, project: set[str]) -> list[str]:
    """`module.NAME = ...` (+=, del, `a.b.NAME`), `setattr(module, ...)` and
    `mock.patch.object(module, ...)` in one file."""
    tree = ast.parse(path.read_text())
    modules = _module_names(tree, project)
    where = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for t in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if (isinstance(t, ast.Attribute) and _root_name(t) in modules
                        and ast.unparse(t) not in LIBRARY_SWITCHES):
                    found.append(f"{where}:{node.lineno} {ast.unparse(t)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr") and node.args
                and _root_name(node.args[0]) in modules):
            found.append(f"{where}:{node.lineno} {node.func.id}({ast.unparse(node.args[0])}, ...)")
        # unittest.mock's patch.object(module, "NAME", ...) is the same write, for a while
        if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("patch.object")
                and node.args and _root_name(node.args[0]) in modules):
            found.append(f"{where}:{node.lineno} patch.object({ast.unparse(node.args[0])}, ...)")
    return found


def test_no_module_writes_another_modules_globals():
    """Process-wide state has one owner, the module that defines it: the others pass what they
    want as an argument or an option (the Engine's library_bars, not a flag flipped from
    outside). Tests may monkeypatch; the engine, the app and the benchmarks never do."""
    scanned = [p for p in SOURCES if p.relative_to(ROOT).parts[0] in ("engine", "app", "bench")]
    project = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in SOURCES}
    assert "engine.families.base" in project
    assert [w for p in scanned for w in _writes_to_modules(p, project)] == []


# what a module keeps for itself, across runs (not data handed to another module): the heap
# trim's pending timer, kaleido's one browser
OWN_STATE = {"app/engine_access.py": {"_trim_timer"}, "app/export.py": {"_server_started"}}
MUTATORS = {"append", "extend", "insert", "update", "add", "setdefault", "pop", "remove",
            "discard", "clear"}


def _writes_to_own_globals(source: str) -> set[str]:
    """Module-level names a function of `source` writes: declared `global`, or a module-level
    container changed in place (.append, .update, x[k] = ...) from inside a function."""
    tree = ast.parse(source)
    top = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
           for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
           if isinstance(t, ast.Name)}
    found = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        declared = {n for node in ast.walk(fn) if isinstance(node, ast.Global)
                    for n in node.names}
        local = ({a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
                 | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                    and isinstance(n.ctx, ast.Store)}) - declared
        found |= declared
        for node in ast.walk(fn):
            changed = (node.func.value if isinstance(node, ast.Call)
                       and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                       else node.value if isinstance(node, ast.Subscript)
                       and isinstance(node.ctx, (ast.Store, ast.Del)) else None)
            if isinstance(changed, ast.Name) and changed.id in top - local:
                found.add(changed.id)
    return found


def test_the_scanner_finds_a_module_global_written_from_a_function():
    source = ("SHOWN = []\nOFF = None\nKEPT = {}\nCONST = {'a': 1}\n"
              "def draw():\n    SHOWN.append(1)\n"
              "def render():\n    global OFF\n    OFF = 1\n"
              "def keep(k):\n    KEPT[k] = 1\n"
              "def read():\n    shown = []\n    shown.append(CONST['a'])\n"
              "def shadow(SHOWN):\n    SHOWN.append(2)\n")
    assert _writes_to_own_globals(source) == {"SHOWN", "OFF", "KEPT"}


def test_pages_hand_views_their_data_as_arguments():
    """No app module passes what one run computes through its module's globals (the
    Predictions page filled a list and set a flag that its "why" view then read): a view
    receives its data as arguments. Only a module's own process state is written so."""
    found = {p.relative_to(ROOT).as_posix(): names for p in SOURCES
             if p.relative_to(ROOT).parts[0] == "app"
             and (names := _writes_to_own_globals(p.read_text()))}
    assert found == OWN_STATE


# --- a model's anatomy is its family's (issue 61) --------------------------------------------
# The module names transformers gives each architecture's parts live in one module, and one
# module puts hooks on a model's modules (for the calling thread only): a view above the
# families asks the adapter for its parts (base.Transformer.parts) and hooks them through
# engine/families/hf/parts.py `hooked`.
PARTS = ROOT / "engine" / "families" / "hf" / "parts.py"
HOOKS_OWNER = "engine/families/hooks.py"
# code written without the engine on purpose, as another library's users write it: the
# benchmark's nnsight grid (its model.model.layers is nnsight's way to reach a Llama's blocks)
INDEPENDENT = {"bench/patching.py": {"nnsight_grid"}}
HOOK_REGISTRATIONS = ("register_forward_pre_hook", "register_forward_hook",
                      "register_full_backward_hook", "register_full_backward_pre_hook",
                      "register_backward_hook")


def _module_paths() -> set[str]:
    """The names parts.py looks a model's modules up by (its top-level tuples of strings) that
    name nothing but a transformers module: dotted paths ("self_attn.o_proj") and names with an
    underscore ("ln_f"); plain words ("mlp", "norm", "h") are every view's words too."""
    names = set()
    for node in ast.parse(PARTS.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            names |= {e.value for e in node.value.elts
                      if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return {n for n in names if "." in n or "_" in n}


def module_path_mentions(source: str, paths: set[str], skip: set[str] = frozenset()
                         ) -> list[int]:
    """The lines that name one of `paths`: a string that is one, or an attribute chain that
    ends with one (`model.model.layers`, `block.self_attn.o_proj`); none inside the functions
    named in `skip`."""
    tree = ast.parse(source)
    skipped = {line for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and node.name in skip
               for line in range(node.lineno, node.end_lineno + 1)}
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in paths:
            lines.add(node.lineno)
        elif isinstance(node, ast.Attribute):
            chain = ast.unparse(node)
            if any(chain.endswith("." + p) for p in paths):
                lines.add(node.lineno)
    return sorted(lines - skipped)


def hook_registrations(source: str) -> list[int]:
    """The lines that put a hook on a torch module (`m.register_forward_hook(...)`, ...)."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Attribute) and node.attr in HOOK_REGISTRATIONS})


def test_the_anatomy_scanners_read_every_spelling():
    paths = _module_paths()
    assert {"self_attn.o_proj", "transformer.h", "ln_f", "post_attention_layernorm"} <= paths
    assert "mlp" not in paths
    sample = ('names = ("self_attn.o_proj",)\n'               # 1
              'n = len(model.model.layers)\n'                 # 2
              'w = model.transformer.h[0].attn.c_proj\n'      # 3
              'norm = getattr(block, "ln_f", None)\n'         # 4
              'site = "mlp"; x = out.layers; y = "layers"\n')  # none
    assert module_path_mentions(sample, paths) == [1, 2, 3, 4]
    inside = "def grid(model):\n    return model.model.layers\n"
    assert module_path_mentions(inside, paths) == [2]
    assert module_path_mentions(inside, paths, {"grid"}) == []
    assert hook_registrations("m.register_forward_hook(f)\nx = 1\n"
                              "h = m.register_forward_pre_hook(g, with_kwargs=True)\n") == [1, 3]


def test_only_the_hugging_face_family_names_a_models_modules():
    """Where an architecture keeps its blocks, attention projections and norms is
    engine/families/hf/parts.py's to know; the engine, the app and the benchmarks ask it."""
    paths = _module_paths()
    scanned = {p.relative_to(ROOT).as_posix(): p for p in SOURCES if p != PARTS
               and p.relative_to(ROOT).parts[0] in ("engine", "app", "bench")}
    found = [f"{where}:{line}" for where, p in scanned.items()
             for line in module_path_mentions(p.read_text(), paths, INDEPENDENT.get(where, set()))]
    assert found == []


def test_one_module_puts_hooks_on_a_models_modules():
    """Every hook acts for the calling thread only (the app's sessions share a loaded model),
    so one module registers them and the rest go through it (engine/families/hooks.py)."""
    found = {p.relative_to(ROOT).as_posix() for p in SOURCES
             if hook_registrations(p.read_text())}
    assert found == {HOOKS_OWNER}
