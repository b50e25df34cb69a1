"""Package shape: sap_gpu stands without sap_ref, sap_ref reads no files (sap_common.io is the
tools'), sap_common's modules import each other without a cycle, and sap_ref and sap_gpu export
the same top-level names (switching backends is one import)."""

from __future__ import annotations

import ast
import inspect
import pathlib
import subprocess
import sys

import pytest

import sap_common
import sap_gpu
import sap_ref

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking_block(node) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _runtime_imports(path: pathlib.Path) -> list[str]:
    """Every module a file imports at run time (module level or inside functions), absolute names.

    ``if TYPE_CHECKING:`` blocks are skipped: they never run. ``from pkg import name`` yields
    ``pkg.name`` when that is a module of the package, else ``pkg``.
    """
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []

    def visit(node):
        if _is_type_checking_block(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            found.extend(f"{base}.{a.name}" for a in node.names)
            found.append(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _package_modules(package: str) -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in (ROOT / package).rglob("*.py")}


def import_graph(package: str) -> dict[str, set[str]]:
    """Module → the package's modules it imports at run time (package ``__init__`` files excluded:
    importing any submodule runs its package's ``__init__`` first, which is not a dependency edge)."""
    modules = {n: p for n, p in _package_modules(package).items() if p.name != "__init__.py"}
    return {n: {m for m in _runtime_imports(p) if m in modules and m != n} for n, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle ``[a, b, …, a]`` of ``graph`` or None (depth-first search)."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                cycle = visit(m)
                if cycle:
                    return cycle
        stack.pop()
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            cycle = visit(n)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_sap_common_module_graph_is_what_the_cycle_test_reads():
    graph = import_graph("sap_common")
    assert {"sap_common.model", "sap_common.conventions", "sap_common.kinematics", "sap_common.state"} <= set(graph)
    assert "sap_common.kinematics" in graph["sap_common.model"]  # the graph sees function-level imports too


# Every package of the distribution: a cycle hidden by a function-level import is a cycle too (the
# graph reads those), and it breaks as soon as someone moves that import to the top of the file.
PACKAGES = ("sap_common", "sap_ref", "sap_gpu", "sap_newton", "sap_tools")


def test_every_package_is_checked():
    on_disk = {p.parent.name for p in ROOT.glob("sap_*/__init__.py")}
    assert on_disk == set(PACKAGES), f"packages on disk {sorted(on_disk)} but the cycle test reads {PACKAGES}"


@pytest.mark.parametrize("package", PACKAGES)
def test_module_imports_are_acyclic(package):
    graph = import_graph(package)
    assert len(graph) > 1
    cycle = find_cycle(graph)
    assert cycle is None, f"{package} imports in a circle: " + " -> ".join(cycle)


def test_the_cycle_test_sees_a_function_level_cycle(tmp_path, monkeypatch):
    """A loop closed only inside a function (the way sap_gpu's once was) is found."""
    pkg = tmp_path / "sap_gpu"
    pkg.mkdir()
    (pkg / "a.py").write_text("from .b import g\n")
    (pkg / "b.py").write_text("def g():\n    from .a import f\n    return f\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert find_cycle(import_graph("sap_gpu")) in (["sap_gpu.a", "sap_gpu.b", "sap_gpu.a"],
                                                   ["sap_gpu.b", "sap_gpu.a", "sap_gpu.b"])


# The layering: what each package may not import (at run time, anywhere in its modules). The
# core packages sap_common, sap_ref and sap_gpu never reach the adapter (sap_newton) or the
# command-line tools (sap_tools); sap_common imports no backend (and no Warp: it is NumPy only);
# the two backends never import each other.
ADAPTERS_AND_TOOLS = ("sap_newton", "sap_tools")
FORBIDDEN_IMPORTS = {
    "sap_common": ("sap_ref", "sap_gpu", "warp") + ADAPTERS_AND_TOOLS,
    "sap_ref": ("sap_gpu", "warp") + ADAPTERS_AND_TOOLS,
    "sap_gpu": ("sap_ref",) + ADAPTERS_AND_TOOLS,
    "sap_newton": ("sap_ref", "sap_tools"),
}


def _offenders(package: str, forbidden) -> list[str]:
    return [f"{n}: {m}" for n, p in sorted(_package_modules(package).items()) for m in _runtime_imports(p)
            if any(m == f or m.startswith(f + ".") for f in forbidden)]


@pytest.mark.parametrize("package", sorted(FORBIDDEN_IMPORTS))
def test_layering(package):
    offenders = _offenders(package, FORBIDDEN_IMPORTS[package])
    assert not offenders, f"{package} imports what its layer may not: " + "; ".join(offenders)


def test_the_layering_check_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The rule above fails on a planted violation (a function-level import), so it can fail."""
    pkg = tmp_path / "sap_common"
    pkg.mkdir()
    (pkg / "planted.py").write_text("def f():\n    from sap_tools import cli\n    return cli\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _offenders("sap_common", FORBIDDEN_IMPORTS["sap_common"]) == ["sap_common.planted: sap_tools.cli",
                                                                        "sap_common.planted: sap_tools"]


def test_sap_newton_uses_only_sap_gpus_public_names():
    """The adapter is a client of sap_gpu: it imports the package itself (no submodule) and uses
    only the names sap_gpu exports, so sap_gpu's insides can change without breaking it."""
    public = set(sap_gpu.__all__)
    for name, path in sorted(_package_modules("sap_newton").items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.startswith("sap_gpu.")]
                assert not bad, f"{name} imports sap_gpu's insides: {bad}"
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sap_gpu":
                assert node.module == "sap_gpu" and {a.name for a in node.names} <= public, \
                    f"{name}: from {node.module} import {[a.name for a in node.names]}"
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "sap_gpu":
                assert node.attr in public, f"{name} uses sap_gpu.{node.attr}, which sap_gpu does not export"


def test_no_sap_ref_module_imports_sap_common_io():
    """sap_ref steps models and states; reading scene files and recordings is for the tools."""
    offenders = [f"{n}: {m}" for n, p in _package_modules("sap_ref").items() for m in _runtime_imports(p)
                 if m == "sap_common.io" or m.startswith("sap_common.io.")]
    assert not offenders, "sap_ref imports sap_common.io: " + "; ".join(offenders)


def test_importing_sap_gpu_loads_no_sap_ref_module():
    code = ("import sys, sap_gpu, sap_gpu.solver, sap_gpu.collision\n"
            "bad = sorted(m for m in sys.modules if m == 'sap_ref' or m.startswith('sap_ref.'))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "", f"importing sap_gpu loaded {out.stdout.strip()}"


def test_shared_thresholds_are_the_same_objects_in_both_backends():
    from sap_common import constants
    from sap_gpu import collision as gpu_collision
    from sap_gpu import constraints as gpu_constraints
    from sap_ref import collision as ref_collision
    from sap_ref import constraints as ref_constraints
    for name in ("COINCIDENT_DISTANCE", "GOLDEN_TIE", "PARALLEL_TOL", "INTERIOR_DEPTH_MARGIN"):
        assert getattr(ref_collision, name) is getattr(constants, name) is getattr(gpu_collision, name)
    for name in ("SOFT_NORM_EPS", "LIMIT_BETA", "DRIVE_BETA", "LIMIT_WINDOW_FACTOR", "DISTANCE_EPS"):
        assert getattr(ref_constraints, name) is getattr(constants, name) is getattr(gpu_constraints, name)


# Names of sap_gpu's top level that sap_ref deliberately lacks, with the reason.
GPU_ONLY = {
    "GpuModel": "the model's arrays on a Warp device; sap_ref reads the SapModel's NumPy arrays directly",
    "ContactSlots": "the per-slot contact arrays as one kernel argument; sap_ref's helpers take the SapContacts",
    "contact_slots": "makes a ContactSlots; sap_ref's helpers take the SapContacts",
    "write_contact_point": "write_contact's point half, for kernels: one call keeps every loaded value live at once",
    "write_contact_pair": "write_contact's pair half, for kernels: one call keeps every loaded value live at once",
    "pair_material": "the combination rules as a Warp function for kernels; sap_ref calls sap_common.collision_rules",
    "world_view": "a (num_worlds, …) device view of one row, world stride 0; NumPy broadcasting does it on the host",
}


def test_sap_ref_exports_the_same_top_level_names_as_sap_gpu():
    ref, gpu = set(sap_ref.__all__), set(sap_gpu.__all__)
    assert gpu - ref == set(GPU_ONLY), f"sap_gpu names missing from sap_ref: {sorted(gpu - ref - set(GPU_ONLY))}"
    assert ref <= gpu, f"sap_ref names missing from sap_gpu: {sorted(ref - gpu)}"
    for name in ref:
        assert getattr(sap_ref, name) is not None and getattr(sap_gpu, name) is not None


@pytest.mark.parametrize("name", sorted(set(sap_ref.__all__) & set(sap_gpu.__all__)))
def test_shared_top_level_names_take_the_same_arguments(name):
    """``backend.X(...)`` works whichever backend ``backend`` is: same parameter names, same order."""
    def params(obj):
        sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD]

    assert params(getattr(sap_ref, name)) == params(getattr(sap_gpu, name))


def test_sap_common_top_level_is_numpy_only():
    code = "import sys, sap_common, sap_common.scenes, sap_common.io\nprint('warp' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
    assert sap_common.__all__


def test_readme_example_uses_only_top_level_backend_names():
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert "sap_ref.SolverSAP(" in example and "sap_gpu.SolverSAP(" in example
    submodule_use = re.findall(r"\b(?:from|import)\s+(sap_(?:ref|gpu)\.\w+)", example)
    assert not submodule_use, f"README example reaches into backend modules: {submodule_use}"


@pytest.mark.parametrize("bad", ["graph", "fuse", 1])
def test_newton_path_is_a_config_knob_both_backends_check_alike(bad, device):
    """``newton_path`` is a SapConfig knob, so calls port between backends; a bad value fails alike."""
    from sap_common import scenes
    model = scenes.get("sphere_drop").sap_model
    for backend, kw in ((sap_ref, {}), (sap_gpu, {"device": device})):
        with pytest.raises(ValueError, match=r"newton_path: .* is not valid; valid: fused, staged"):
            backend.SolverSAP(model, max_rigid_contact=4, newton_path=bad, **kw)
        for path in ("fused", "Staged"):
            assert backend.SolverSAP(model, max_rigid_contact=4, newton_path=path, **kw).config.newton_path \
                == path.lower()


def test_importing_sap_gpu_changes_no_warp_setting():
    """A library import leaves Warp's global settings to the application (the command-line tools
    quiet Warp's module-load lines for themselves, sap_tools.cli.quiet_warp)."""
    code = ("import warp as wp\n"
            "snap = lambda: {k: repr(getattr(wp.config, k)) for k in dir(wp.config) if not k.startswith('_')}\n"
            "before = snap()\nimport sap_gpu, sap_gpu.solver, sap_gpu.collision\nprint(before == snap())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "True", out.stderr
