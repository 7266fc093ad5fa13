"""The import graph: engine/ never reaches the app, the benchmarks or streamlit, the product
(engine/ and app/) never imports the lab or the benchmarks, only the app's three door modules
import engine/ and no app module loads torch, model families never import what sits above
them, and no package has an import cycle."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "app", "bench", "lab")
# what the model families may import from the engine: the bottom of the graph only
# (the objective a family builds for its explained predictions, and the memory rule its
# batches follow, are bottom modules too: they import only engine.errors and engine.text; so
# is what a generation returns, which imports only engine.result)
FAMILY_MAY_IMPORT = ("engine.errors", "engine.families", "engine.result", "engine.text",
                     "engine.checkpoint", "engine.budget", "engine.attribution.objective",
                     "engine.memory", "engine.generation_result", "engine.folders")
# within engine.families: the table (its __init__), the adapter protocol, the hooks every
# family's views put on its modules (for the calling thread only) and the Hugging Face code the
# HF families share; beyond those, a family imports its own module or package only
FAMILIES_SHARED = ("engine.families", "engine.families.base", "engine.families.hooks",
                   "engine.families.hf")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports(path: Path, top_level_only: bool) -> set[str]:
    """Modules `path` imports (`from a import b` counts a.b when a.b is a module)."""
    return imports_in(path.read_text(), top_level_only, modules())


# the calls that import a module named by a string
IMPORT_CALLS = ("importlib.import_module", "import_module", "__import__")


def _named_module(node: ast.AST) -> str | None:
    """The module an import call names: a string, or the fixed part of an f-string up to its
    last dot (f"engine.cli.{name}" imports a module of engine.cli, so engine.cli)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value or None
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        fixed = str(node.values[0].value).rpartition(".")[0]
        return fixed or None
    return None


def imports_in(source: str, top_level_only: bool, known) -> set[str]:
    """Modules `source` imports: import statements (`from a import b` counts a.b when a.b is
    in `known`), and importlib.import_module("x"), import_module("x") and __import__("x")."""
    tree = ast.parse(source)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if f"{node.module}.{a.name}" in known}
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in IMPORT_CALLS
              and node.args and (name := _named_module(node.args[0]))):
            found.add(name)
    return found


def test_the_scanner_reads_imports_made_by_a_string():
    """An import written as a call is still an import: the rules below read it."""
    source = (
        "import importlib\n"
        "from importlib import import_module\n"
        "def lazy(kind):\n"
        "    importlib.import_module('streamlit')\n"
        "    import_module('app.ui')\n"
        "    __import__('bench.gpu')\n"
        "    importlib.import_module(f'lab.training.{kind}')\n"
        "    importlib.import_module(kind)\n"
        "    getattr(importlib, 'reload')\n")
    assert imports_in(source, False, set()) == {"importlib", "streamlit", "app.ui", "bench.gpu",
                                                "lab.training"}
    assert imports_in(source, True, set()) == {"importlib"}        # the calls sit in a function


def test_the_engine_never_imports_the_app_the_benchmarks_or_streamlit():
    """Lazy imports inside functions count: the engine sits below the benchmarks, which
    measure it, below the app and below the lab, which trains its models."""
    bad = {name: sorted(i for i in imports(p, False)
                        if i.split(".")[0] in ("app", "bench", "lab", "streamlit"))
           for name, p in modules().items() if name.startswith("engine")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_product_never_imports_the_lab():
    """The installed package (engine/, app/) leaves lab/ out, so an import of it, even a lazy
    one, would fail wherever ctxlens is installed."""
    product = {name: p for name, p in modules().items() if name.split(".")[0] in ("engine", "app")}
    assert product, "no product modules found"
    bad = {name: sorted(i for i in imports(p, False) if i.split(".")[0] == "lab")
           for name, p in product.items()}
    assert {k: v for k, v in bad.items() if v} == {}
    assert any(name.startswith("lab.training") for name in modules())    # the lab is scanned


def test_the_app_never_imports_the_benchmarks():
    """The installed package leaves bench/ out too: the Benchmarks page reads what the bench
    writes (results/benchmarks.json, through app/benchmark_results.py), never bench/ itself.
    Lazy imports inside functions count."""
    bad = {name: sorted(i for i in imports(p, False) if i.split(".")[0] == "bench")
           for name, p in modules().items() if name.split(".")[0] == "app"}
    assert {k: v for k, v in bad.items() if v} == {}


# the app's doors to the engine: models, encodings and predictions; the results computed from
# them; corpus indexes. No other app module imports engine/.
DOORS = {"app.engine_access", "app.results", "app.corpus_access", "app.explain_access"}


def test_pages_import_nothing_from_the_engine():
    """A page reaches the engine through the app's door modules (results, and the engine's
    text rules and numpy helpers they expose); lazy imports inside functions count."""
    bad = {name: sorted(i for i in imports(p, False) if i.split(".")[0] == "engine")
           for name, p in modules().items() if name.startswith("app.pages")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_only_the_door_modules_import_the_engine():
    """state.py, ui.py, the views and the pages name the door modules, never engine/ itself;
    lazy imports inside functions count."""
    bad = {name: sorted(i for i in imports(p, False) if i.split(".")[0] == "engine")
           for name, p in modules().items()
           if name.split(".")[0] == "app" and name not in DOORS}
    assert {k: v for k, v in bad.items() if v} == {}
    assert all(name in modules() for name in DOORS)


def test_no_app_module_names_torch():
    """The app receives numpy results; torch and transformers stay behind the engine (the
    import check below catches what an engine import pulls in)."""
    bad = {name: sorted(i for i in imports(p, False)
                        if i.split(".")[0] in ("torch", "transformers"))
           for name, p in modules().items() if name.split(".")[0] == "app"}
    assert {k: v for k, v in bad.items() if v} == {}


def test_model_families_import_nothing_above_them():
    bad = {}
    for name, p in modules().items():
        if name.startswith("engine.families"):
            up = sorted(i for i in imports(p, False) if i.startswith("engine")
                        and not i.startswith(FAMILY_MAY_IMPORT))
            if up:
                bad[name] = up
    assert bad == {}


def family_of(module: str) -> str:
    """engine.families.elmo.mix -> engine.families.elmo; engine.families.bert -> itself."""
    return ".".join(module.split(".")[:3])


def test_a_family_imports_no_other_family():
    """A family module imports its own package, the table, the protocol and the shared Hugging
    Face package (engine/families/hf/), never another family's module: bert.py and gpt.py share
    code through hf/, not through each other."""
    bad = {}
    for name, p in modules().items():
        if name.startswith("engine.families."):
            own = family_of(name)
            other = sorted(i for i in imports(p, False) if i.startswith("engine.families.")
                           and not i.startswith(own) and i not in FAMILIES_SHARED
                           and family_of(i) not in FAMILIES_SHARED)
            if other:
                bad[name] = other
    assert bad == {}


def test_the_shared_hugging_face_code_imports_no_family():
    """engine/families/hf/ sits below bert.py and gpt.py: it knows no family by name."""
    bad = {name: sorted(i for i in imports(p, False) if i.startswith("engine.families.")
                        and family_of(i) not in FAMILIES_SHARED)
           for name, p in modules().items() if name.startswith("engine.families.hf")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_no_import_cycles():
    """Counting imports inside functions too: a lazy import still ties two modules together."""
    known = modules()
    graph = {name: {i for i in imports(p, False) if i in known and i != name}
             for name, p in known.items()}
    # importing a.b.c runs a and a.b first: an edge to each package on the way
    for name in list(graph):
        for dep in list(graph[name]):
            parts = dep.split(".")
            graph[name] |= ({".".join(parts[:k]) for k in range(1, len(parts))} & known.keys()) - {name}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


@pytest.mark.parametrize("package", ["app"])
def test_importing_every_app_module_loads_no_torch(package):
    """The door modules import engine/, so what they pull in is checked by importing them:
    no torch or transformers until a model runs (pages are scripts, run by AppTest)."""
    names = sorted(n for n in modules() if n.split(".")[0] == package and ".pages" not in n)
    code = ("import sys\n" + "".join(f"import {n}\n" for n in names)
            + "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_benchmarks_never_import_the_app():
    """bench/ and app/ are independent: the Benchmarks page reads the data the bench writes
    (results/*.json), and the bench measures the engine, never the app's modules (the app
    itself only from outside, through a browser). Lazy imports inside functions count."""
    bad = {name: sorted(i for i in imports(p, False) if i.split(".")[0] == "app")
           for name, p in modules().items() if name.split(".")[0] == "bench"}
    assert {k: v for k, v in bad.items() if v} == {}


# --- what sits above the families knows no family (issue 61, item 1) -------------------------
# Counted in every module of engine/ and bench/ outside engine/families/. The targets are 0:
# each ceiling below is today's count, lowered as a switch or a read moves behind the adapter
# protocol (engine/families/base.py); a count above its ceiling is a new one, and fails.
FAMILY_NAMES = ("elmo", "gpt", "bert")
# family-name switches: a comparison (==, !=, in, not in) with a family name or a literal
# tuple/list/set of them on either side; a dict literal keyed by family names (one per dict:
# a table that is looked up by family is a switch written as data); `isinstance(x, C)` or
# `issubclass(x, C)` with C an adapter class of a family; and an import of such a class
SWITCH_CEILING = {"engine": 0, "bench": 5}
# reads of an adapter's internals: an attribute of an adapter object that the protocol classes
# of engine/families/base.py do not declare (`adapter.model`, `adapter.tokenizer`,
# `adapter._ids`, `adapter.max_tokens`, ...). An adapter object is a name `adapter`, a name
# bound to `<x>.adapter(...)` (the Engine's adapter(), also as one side of a conditional), or
# such a call itself (`engine.adapter(m).tokenizer`)
INTERNALS_CEILING = {"engine": 0, "bench": 31}


def _family_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in FAMILY_NAMES
    return (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and bool(node.elts)
            and all(isinstance(e, ast.Constant) and e.value in FAMILY_NAMES for e in node.elts))


def _adapter_classes() -> set[str]:
    """Classes named ...Adapter that a family module defines (the protocol itself aside)."""
    return {node.name for p in (ROOT / "engine" / "families").rglob("*.py")
            if p.name != "base.py" for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.ClassDef) and node.name.endswith("Adapter")}


def family_switches(source: str, adapter_classes: set[str]) -> list[int]:
    """The line of each family-name switch in `source` (the rule above SWITCH_CEILING)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(map(_family_name, [node.left, *node.comparators])):
                found.append(node.lineno)
        elif isinstance(node, ast.Dict):
            if node.keys and all(k is not None and _family_name(k) for k in node.keys):
                found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(ast.unparse(c).split(".")[-1] in adapter_classes for c in classes):
                found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine.families"):
            found += [node.lineno for a in node.names if a.name in adapter_classes]
    return found


def _protocol_members() -> set[str]:
    """What the Protocol classes of engine/families/base.py declare: fields and methods."""
    members = set()
    for node in ast.parse((ROOT / "engine" / "families" / "base.py").read_text()).body:
        if isinstance(node, ast.ClassDef) and any("Protocol" in ast.unparse(b) for b in node.bases):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
    return members


def _adapter_call(node: ast.AST) -> bool:
    if isinstance(node, ast.IfExp):
        return _adapter_call(node.body) or _adapter_call(node.orelse)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "adapter")


def internals_reads(source: str, protocol: set[str]) -> list[str]:
    """`line attr` for each read of an adapter's internals in `source` (the rule above
    INTERNALS_CEILING)."""
    tree = ast.parse(source)
    names = {"adapter"} | {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                           and _adapter_call(n.value) for t in n.targets if isinstance(t, ast.Name)}
    return [f"{n.lineno} {n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr not in protocol
            and ((isinstance(n.value, ast.Name) and n.value.id in names)
                 or _adapter_call(n.value))]


def test_the_family_scanners_read_every_spelling():
    """The two counts above, on a sample: what counts and what does not."""
    switches = ('if adapter.info.family == "bert": pass\n'          # 2
                'if family not in ("bert", "gpt"): pass\n'          # 3
                'KIND = {"gpt": "next", "bert": "masked"}\n'        # 4
                'from engine.families.gpt import GPTAdapter\n'      # 5
                'isinstance(adapter, gpt.GPTAdapter)\n'             # 6
                'x = TARGETS["elmo"]\n'                             # a key read, no switch
                'y = entry.family == other.family\n'                # no name: no switch
                'z = {"bert": 1, "roberta": 2}\n')                  # not all family names
    assert sorted(family_switches("\n" + switches, {"GPTAdapter"})) == [2, 3, 4, 5, 6]
    reads = ("adapter.model(ids)\n"
             "a = engine.adapter(m)\n"
             "a._ids('x'); a.info.model_id; a.encode([t])\n"
             "engine.adapter(m).tokenizer\n"
             "b = self.adapter(m) if maps else self.traced(m)\n"
             "b.max_tokens; other.model\n")
    assert sorted(internals_reads(reads, {"info", "encode"})) == [
        "1 model", "3 _ids", "4 tokenizer", "6 max_tokens"]


def _above_the_families(package: str) -> list[Path]:
    families = ROOT / "engine" / "families"
    return sorted(p for p in (ROOT / package).rglob("*.py") if families not in p.parents)


@pytest.mark.parametrize("package", ["engine", "bench"])
def test_no_family_name_switches_above_the_families(package):
    """A behaviour that differs by family is the family's own (a method or field of the adapter
    protocol), so that a new family is one module and every view asks it the same way."""
    classes = _adapter_classes()
    assert {"GPTAdapter", "BertAdapter"} <= classes
    found = [f"{p.relative_to(ROOT).as_posix()}:{line}" for p in _above_the_families(package)
             for line in sorted(family_switches(p.read_text(), classes))]
    assert len(found) <= SWITCH_CEILING[package], found


@pytest.mark.parametrize("package", ["engine", "bench"])
def test_no_reads_of_adapter_internals_above_the_families(package):
    """What a view needs of a model it asks through the protocol: a read of an adapter's model,
    tokenizer or private helpers ties the view to one family's insides."""
    protocol = _protocol_members()
    assert {"info", "encode", "anatomy"} <= protocol
    found = [f"{p.relative_to(ROOT).as_posix()}:{r}" for p in _above_the_families(package)
             for r in sorted(internals_reads(p.read_text(), protocol),
                             key=lambda r: int(r.split()[0]))]
    assert len(found) <= INTERNALS_CEILING[package], found
