"""The source tree's shape: ``hw/`` and ``sw/`` hold sub-packages, and no module imports one that
imports it back (through any chain, counting imports inside functions)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: What may stay at the top of ``sw/`` and ``hw/``: what every sub-package shares (the configuration, the
#: default operating point that generate, the frontier and the testbenches all read), and the command path
#: the docs keep (``python sw/export_trace.py``).
TOP_MODULES = {"sw": {"__init__", "config", "operating_point", "atomic", "jsonio", "budget", "export_trace"},
               "hw": {"__init__"}}


def modules(root: Path = REPO) -> dict[str, Path]:
    out = {}
    for top in ("sw", "hw", "tb"):
        for p in (root / top).rglob("*.py"):
            parts = p.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from a.b import c`` counts ``a.b`` and, where it is a
    module, ``a.b.c``)."""
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    found = cycles(import_graph(modules()))
    assert not found, "modules that import each other (through a chain): " + "; ".join(
        map(" <-> ".join, found))


def test_cycle_check_sees_a_planted_circle():
    graph = import_graph(modules())
    graph["sw.golden.quant"] = graph["sw.golden.quant"] | {"sw.trace.store"}  # store imports quant
    assert any({"sw.golden.quant", "sw.trace.store"} <= set(c) for c in cycles(graph))


def test_hw_and_sw_are_split_into_sub_packages():
    for top, allowed in TOP_MODULES.items():
        flat = sorted(p.stem for p in (REPO / top).glob("*.py"))
        outside = sorted(set(flat) - allowed)
        assert not outside, f"{top}/ holds modules outside its sub-packages: {outside}"
        packages = sorted(p.name for p in (REPO / top).iterdir() if (p / "__init__.py").exists())
        assert len(packages) >= 4, packages


#: What ``hw/accel`` may hold besides the blocks the accelerator is built of: what those blocks and
#: the host share (layouts, the weight order) and the host's payload packing.
ACCEL_SHARED = {"hw.accel", "hw.accel.layouts", "hw.accel.mv_layout", "hw.accel.payload"}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo += graph.get(v, ())
    return seen


def unbuilt_accel_modules(mods: dict[str, Path]) -> list[str]:
    """Modules of ``hw/accel`` that the shipped accelerator (``hw.accel.accelerator``) does not import,
    directly or through others, and that are not shared helpers."""
    used = reachable(import_graph(mods), "hw.accel.accelerator")
    return sorted(n for n in mods if n.startswith("hw.accel") and n not in used and n not in ACCEL_SHARED)


def test_hw_accel_holds_only_the_shipped_datapath():
    """Every module of ``hw/accel`` is a block the accelerator is built of (or a shared helper): a
    retired datapath's blocks cannot stay beside it."""
    assert unbuilt_accel_modules(modules()) == []


def test_unbuilt_accel_module_check_sees_a_planted_block(tmp_path):
    """The check finds a block nothing of the accelerator imports."""
    import shutil

    root = tmp_path / "repo"
    for top in ("sw", "hw", "tb"):
        shutil.copytree(REPO / top, root / top)
    (root / "hw" / "accel" / "tas_unit.py").write_text("from hw.accel.layouts import tas_row_layout\n")
    assert unbuilt_accel_modules(modules(root)) == ["hw.accel.tas_unit"]
