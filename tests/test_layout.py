"""The source tree's shape: ``hw/`` and ``sw/`` hold sub-packages, and no module imports one that
imports it back (through any chain, counting imports inside functions)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: What may stay at the top of ``sw/`` and ``hw/``: what every sub-package shares (the configuration, the
#: default operating point that generate, the frontier and the testbenches all read, the job runner the
#: long runs share), and the command path the docs keep (``python sw/export_trace.py``).
TOP_MODULES = {"sw": {"__init__", "config", "operating_point", "atomic", "jsonio", "jobs", "budget",
                      "export_trace"},
               "hw": {"__init__"}}

#: The project's floors, bottom first. A module may import modules of its own floor and of the floors
#: below it, never of one above; a module's floor is the longest entry that names it or its package.
#: The spec is at the bottom (it imports nothing of the project); the trace files' format sits below
#: the model and the golden model, which both read traces, and the exports above them; the gateware
#: builds on sw's spec and configuration, its kit (``hw.lib``) below both datapaths; the testbenches
#: are on top.
FLOORS = ("sw", "sw.spec", "sw.atomic", "sw.jsonio", "sw.jobs", "sw.config", "sw.budget",
          "sw.operating_point", "sw.trace.format", "sw.trace.store", "sw.trace.decode", "sw.model",
          "sw.golden", "sw.trace", "sw.perf", "sw.evidence", "sw.export_trace",
          "hw", "hw.lib", "hw.accel", "hw.step", "hw.board", "hw.formal", "hw.flow", "tb")


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
    assert "sw.spec.quant" in graph["sw.trace.decode"]
    graph["sw.spec.quant"] = graph["sw.spec.quant"] | {"sw.trace.decode"}
    assert any({"sw.spec.quant", "sw.trace.decode"} <= set(c) for c in cycles(graph))


def floor(module: str) -> int:
    """The index in :data:`FLOORS` of the longest entry that is ``module`` or a package above it."""
    hits = [i for i, f in enumerate(FLOORS) if module == f or module.startswith(f + ".")]
    assert hits, f"{module}: on no floor of FLOORS"
    return max(hits, key=lambda i: len(FLOORS[i]))


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a higher floor, as ``a -> b``."""
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps if floor(b) > floor(a))


def test_no_module_imports_a_floor_above_it():
    found = upward_imports(import_graph(modules()))
    assert not found, "imports that point up (tests/test_layout.py FLOORS): " + "; ".join(found)


def test_floor_check_sees_a_planted_upward_import(tmp_path):
    """The spec importing the golden model, or the kit importing a datapath, is caught."""
    import shutil

    root = tmp_path / "repo"
    for top in ("sw", "hw", "tb"):
        shutil.copytree(REPO / top, root / top)
    quant = root / "sw" / "spec" / "quant.py"
    quant.write_text(quant.read_text() + "\n\ndef _planted():\n    from sw.golden import int8  # noqa\n")
    widths = root / "hw" / "lib" / "widths.py"
    widths.write_text(widths.read_text() + "\nfrom hw.accel.layouts import tas_row_layout  # noqa\n")
    assert upward_imports(import_graph(modules(root))) == [
        "hw.lib.widths -> hw.accel.layouts", "sw.spec.quant -> sw.golden", "sw.spec.quant -> sw.golden.int8"]


def test_spec_imports_nothing_of_the_project():
    graph = import_graph(modules())
    assert graph["sw.spec.quant"] == set() and graph["sw.spec"] == set()


#: What ``hw/step`` may take from ``hw/accel``: the whole MLP engine (its top and its configuration
#: words); the blocks both datapaths need are in ``hw/lib``.
STEP_FROM_ACCEL = {"hw.accel.accelerator"}


def step_borrowings(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in graph.items() if a.startswith("hw.step")
                  for b in deps if b.startswith("hw.accel") and b not in STEP_FROM_ACCEL)


def test_the_step_takes_only_the_mlp_engine_from_the_accelerator():
    graph = import_graph(modules())
    assert not step_borrowings(graph), step_borrowings(graph)
    graph["hw.step.projection"] = graph["hw.step.projection"] | {"hw.accel.mv_core"}     # planted
    assert step_borrowings(graph) == ["hw.step.projection -> hw.accel.mv_core"]


def test_imports(root: Path = REPO) -> list[str]:
    """Modules that are not tests (the conftest files included) but import a ``test_*`` module."""
    files = {n: p for n, p in modules(root).items() if not n.rsplit(".", 1)[-1].startswith("test_")}
    files.update({str(p.relative_to(root)): p for p in root.rglob("conftest.py") if "build" not in p.parts})
    out = []
    for name, path in sorted(files.items()):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            out += [f"{name} -> {m}" for m in mods if m.rsplit(".", 1)[-1].startswith("test_")]
    return out


test_imports.__test__ = False      # a helper, not a test


def test_no_tool_imports_a_test_module(tmp_path):
    """Runners live in modules that the tests, the benches and the tools import; a planted import of
    a test module from a tool is found."""
    assert test_imports() == []
    import shutil

    root = tmp_path / "repo"
    for top in ("sw", "hw", "tb"):
        shutil.copytree(REPO / top, root / top)
    bench = root / "tb" / "bench.py"
    bench.write_text(bench.read_text() + "\nfrom tb.step.test_step import step_trace  # noqa\n")
    assert test_imports(root) == ["tb.bench -> tb.step.test_step"]


def test_hw_and_sw_are_split_into_sub_packages():
    for top, allowed in TOP_MODULES.items():
        flat = sorted(p.stem for p in (REPO / top).glob("*.py"))
        outside = sorted(set(flat) - allowed)
        assert not outside, f"{top}/ holds modules outside its sub-packages: {outside}"
        packages = sorted(p.name for p in (REPO / top).iterdir() if (p / "__init__.py").exists())
        assert len(packages) >= 4, packages


#: What ``hw/accel`` may hold besides the blocks the accelerator is built of: what those blocks and
#: the host share (layouts, the weight order) and the host's payload packing.
ACCEL_SHARED = {"hw.accel", "hw.accel.layouts", "hw.accel.mv_layout"}


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
