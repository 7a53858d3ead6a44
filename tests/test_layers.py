"""The package tree is its architecture: layers import only layers below them, and no module
imports itself back through others. The graph is built from the source (every import
statement, inside functions too), so a lazy import that would close a cycle counts.

The layer order is written once, here; docs/layout.md draws the same tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mmidx_builder"
ROOT = "mmidx_builder"

# Lowest first. A top-level module or subpackage of mmidx_builder belongs to one layer; it may
# import its own layer's modules of the same group and anything in a lower layer, never a
# higher layer nor a sibling group of its own layer.
# Root modules every layer may import.
FOUNDATION = {"errors", "checks", "dtypes", "extras", "progress", "warnings_once", "parallel"}
LAYERS = [
    ("foundation", {"foundation"}),
    ("bytes", {"storage"}),
    ("token sources", {"sources"}),
    ("indices and pairs", {"megatron", "fairseq", "mosaic"}),
    ("conversion", {"convert"}),
    ("datasets builders", {"hf"}),
    ("consumers", {"training", "publishing"}),
    ("command line", {"cli"}),
    ("public surface", {"__init__", "old_paths"}),
]
RANK = {group: rank for rank, (_, groups) in enumerate(LAYERS) for group in groups}
# Names a module is never given: a name should say what the module holds.
VAGUE_NAMES = {"common", "utils", "util", "helpers", "misc", "shared", "base_utils"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (the module itself, not its parents)."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    base = name.split(".") if is_package(path) else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - node.level + 1]
                module = ".".join(anchor + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # "from package import submodule" imports the submodule
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # "import a.b.c" of a non-module attribute path
                target = target.rpartition(".")[0]
            if target.startswith(ROOT) and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def group_of(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "__init__"
    return "foundation" if parts[1] in FOUNDATION else parts[1]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_every_module_has_a_layer():
    unplaced = sorted({group_of(name) for name in modules()} - set(RANK))
    assert not unplaced, f"modules or folders with no layer in LAYERS: {unplaced}"


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_from_a_lower_layer_into_a_higher_one_or_a_sibling():
    wrong = []
    for source, targets in graph().items():
        for target in targets:
            a, b = group_of(source), group_of(target)
            if RANK[a] < RANK[b] or (RANK[a] == RANK[b] and a != b and a != "__init__"):
                wrong.append(f"{source} ({a}) imports {target} ({b})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


def test_no_module_family_at_the_root_and_no_vague_module_names():
    root = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    by_prefix = {}
    for m in root:
        if "_" in m:
            by_prefix.setdefault(m.split("_")[0], []).append(m)
    families = sorted(prefix for prefix, members in by_prefix.items() if len(members) > 1 or prefix in root)
    assert not families, f"modules sharing a name prefix at the package root: {families}; give them a folder"
    vague = sorted(name for name in modules() if name.rpartition(".")[2] in VAGUE_NAMES)
    assert not vague, f"modules named for being shared rather than for what they hold: {vague}"


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path):
    """The graph is read the way the tests above read it: a lazy import inside a function that
    closes a cycle, and an import from a lower layer, are both seen."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    pkg = tmp_path / "mmidx_builder"
    (pkg / "storage").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "storage" / "__init__.py").write_text("")
    (pkg / "hf.py").write_text("")
    (pkg / "storage" / "x.py").write_text("def f():\n    from ..hf import thing\n")
    known = {"mmidx_builder", "mmidx_builder.storage", "mmidx_builder.hf", "mmidx_builder.storage.x"}
    found = imports_of("mmidx_builder.storage.x", pkg / "storage" / "x.py", known)
    assert found == {"mmidx_builder.hf"}
    assert RANK[group_of("mmidx_builder.storage.x")] < RANK[group_of("mmidx_builder.hf")]


@pytest.mark.parametrize("doc", ["docs/layout.md"])
def test_layout_doc_names_every_folder_and_root_module(doc):
    """docs/layout.md draws the tree: every folder of the package and every module at its root
    is named there."""
    text = (PACKAGE.parent / doc).read_text()
    names = [p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [p.name for p in PACKAGE.glob("*.py")]
    missing = [n for n in names if not re.search(r"(?<![\w/])" + re.escape(n), text)]
    assert not missing, f"{doc} does not name: {missing}"


@pytest.mark.parametrize("old, new", sorted(__import__("mmidx_builder.old_paths", fromlist=["MOVED"]).MOVED.items()))
def test_old_module_paths_import_the_new_module_and_say_where_it_moved(old, new):
    """Release 0.1's module paths keep working for one release: the old name is the new module
    itself, and importing it says where it moved."""
    import importlib
    import subprocess
    import sys

    code = (f"import warnings, importlib, sys\n"
            f"warnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    importlib.import_module('mmidx_builder.{old}')\n"
            f"except DeprecationWarning as w:\n    print(w)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert f"mmidx_builder.{old} moved to mmidx_builder.{new}" in done.stdout, done.stderr[-2000:]
    with pytest.warns(DeprecationWarning):
        sys.modules.pop(f"mmidx_builder.{old}", None)
        aliased = importlib.import_module(f"mmidx_builder.{old}")
    assert aliased is importlib.import_module(f"mmidx_builder.{new}")


def test_documented_imports_of_release_0_1_still_work():
    """What the 0.1 README and docs imported by module path."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mmidx_builder.card import CardSettings, write_card  # noqa: F401
        from mmidx_builder.fairseq import Dictionary, LanguagePairs, find_language_pairs  # noqa: F401
        from mmidx_builder.fairseq_preprocess import build_dictionary, preprocess  # noqa: F401
        from mmidx_builder.format import IndexedFile, write_documents
        from mmidx_builder.rawfiles import RawFiles  # noqa: F401
        from mmidx_builder.sampling import SamplingIndices  # noqa: F401
    from mmidx_builder import IndexedFile as public, numpy_batches  # noqa: F401
    from mmidx_builder.convert import convert, merge  # noqa: F401

    assert IndexedFile is public and callable(write_documents)
