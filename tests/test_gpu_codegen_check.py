"""No kernel of the project reads a constant where Warp's generated code may have left it unset
(sap_gpu/codegen_check.py says how Warp 1.19 does that, and the rule kernel code follows).

The generated C++ is read, not compiled, so the whole check takes seconds: every Warp module that
sap_gpu, sap_newton and the benchmark define at import, plus the modules that steps of the scenes
below build (the fused Newton kernel of each preset, line search, contact approximation and way of
forming and factoring H, the staged loop's kernels, the factorizations, the contact weights), with
the options a GPU builds them with (a dry run, ``sap_gpu.precompile.step_variants``). The slow run
adds every combination of the fused kernel's options.
"""

import importlib
import importlib.util
import itertools
import pkgutil

import pytest
import warp as wp
from variants import DEFAULT_PAIRS, LINE_SEARCHES, PRESETS

import sap_gpu
from sap_common import scenes
from sap_gpu.codegen_check import check_modules, module_source, unset_constant_reads
from sap_gpu.precompile import step_variants

APPROXIMATIONS = ("sap", "lagged", "similar")

# Each value of each option at least once, on scenes with every kind of constraint and collision
# family: (scene, config).
STEPS = [
    ("humanoid", dict(contact_preset_variant=preset, line_search_variant=ls, discrete_contact_approximation=ap))
    for (preset, ls), ap in zip(DEFAULT_PAIRS, APPROXIMATIONS)
] + [
    ("humanoid", dict(fused_cholesky="tile")),
    ("humanoid", dict(fused_hessian="tiles", contact_preset_variant="drake")),
    ("humanoid", dict(newton_path="staged", contact_linear_solver="cholesky")),
    ("humanoid", dict(newton_path="staged", contact_linear_solver="pcr", contact_preset_variant="drake")),
    ("humanoid3", dict()),
    ("humanoid3", dict(contact_preset_variant="drake")),
    ("box_stack", dict()),
    ("mesh_quadruped", dict(contact_preset_variant="drake")),
    ("fourbar", dict()),
    ("prismatic_pd", dict()),
    ("geared_pair", dict(contact_preset_variant="drake")),
    ("weld_drop", dict()),
]
# The slow run: every combination of the fused kernel's options on the humanoid and on humanoid3.
EVERY_FUSED = [
    (scene, dict(contact_preset_variant=p, line_search_variant=ls, discrete_contact_approximation=ap,
                 fused_hessian=h, fused_cholesky=c))
    for scene in ("humanoid", "humanoid3")
    for p, ls, ap, (h, c) in itertools.product(PRESETS, LINE_SEARCHES, APPROXIMATIONS,
                                               [("rows", "tile"), ("rows", "lanes"), ("tiles", "tile")])
]


# The project's other Warp kernels: the Newton integration's transfers and solver (with the
# [newton] extra, which README's test install has) and the benchmark's noise and statistics.
OTHER_KERNEL_MODULES = ("sap_newton.transfer", "sap_newton.solver", "sap_tools.benchmark.runs")
KERNEL_PACKAGES = ("sap_gpu", "sap_newton", "sap_tools")


def _import_every_kernel_module():
    for info in pkgutil.walk_packages(sap_gpu.__path__, "sap_gpu."):
        importlib.import_module(info.name)
    for name in OTHER_KERNEL_MODULES:
        if name.startswith("sap_newton") and importlib.util.find_spec("newton") is None:
            continue  # without the [newton] extra there is no sap_newton to run
        importlib.import_module(name)


def _defined_at_import():
    """(module, CPU block size) for each Warp module holding a kernel written in the project."""
    from warp._src.context import user_modules  # Warp's registry of the modules kernels were put in

    return [(m, 1) for m in list(user_modules.values())
            if any(getattr(k.func, "__module__", "").startswith(KERNEL_PACKAGES) for k in m.kernels.values())]


def _built_by_steps(steps):
    variants = {}
    for name, config in steps:
        scene = scenes.get(name, num_worlds=2)
        record = step_variants(scene.sap_model, scene.max_rigid_contact, **config)
        for (module_name, block_dim), module in record.variants.items():
            variants.setdefault((module_name, block_dim), module)
    return [(module, block_dim) for (_, block_dim), module in variants.items()]


def _report(problems):
    return "\n".join(f"{name}:\n  " + "\n  ".join(map(str, reads)) for name, reads in problems.items())


# A named constant first used inside a branch and again after it: the pattern the check finds.
UNSET_TOL = 1e-9


@wp.kernel(enable_backward=False, module="unique")
def _constant_first_named_in_a_branch(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64)):
    i = wp.tid()
    v = x[i]
    if v > wp.float64(1.0):
        v = v - wp.float64(UNSET_TOL)
    y[i] = v + wp.float64(UNSET_TOL)


@wp.kernel(enable_backward=False, module="unique")
def _constant_read_into_a_local_first(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64)):
    i = wp.tid()
    tol = wp.float64(UNSET_TOL)
    v = x[i]
    if v > wp.float64(1.0):
        v = v - tol
    y[i] = v + tol


def test_the_check_finds_a_constant_read_outside_the_branch_that_set_it():
    (read,) = unset_constant_reads(module_source(_constant_first_named_in_a_branch.module))
    assert "_constant_first_named_in_a_branch" in read.function and read.set_line < read.line
    assert unset_constant_reads(module_source(_constant_read_into_a_local_first.module)) == []


def test_the_check_follows_loops_branches_and_phis():
    """Warp's layout: a loop between labels, an else as ``if (!c) {``, a phi after a branch."""
    source = "\n".join([
        "static CUDA_CALLABLE void f(int n)", "{",
        "    start_for_0:;", "        var_1 = 1e-12;", "    end_for_0:;",   # set in a loop's body,
        "    var_2 = wp::float64(var_1);",                                # read after the loop (6)
        "    if (var_3) {", "        var_4 = 2.0;", "    }",              # set in the if branch,
        "    if (!var_3) {", "        var_5 = wp::float64(var_4);", "    }",  # read in the else (11)
        "    var_6 = wp::where(var_3, var_4, var_5);",                    # the branch's own phi: fine
        "    if (var_7) {", "        if (var_8) {", "            var_9 = 3.0;", "        }",
        "        var_10 = wp::where(var_8, var_9, var_0);",               # its own phi: fine
        "    }",
        "    var_11 = wp::where(var_7, var_9, var_0);",                   # an outer phi passes it on,
        "    var_12 = wp::float64(var_11);",                              # and this read counts (21)
        "}",
        "static CUDA_CALLABLE void g()", "{", "    var_2 = wp::float64(var_1);", "}",  # another function
    ])
    reads = unset_constant_reads(source)
    assert [(r.function, r.variable, r.line) for r in reads] == [("f", "var_1", 6), ("f", "var_4", 11),
                                                                 ("f", "var_11", 21)]


def test_no_kernel_of_the_project_reads_an_unset_constant():
    _import_every_kernel_module()
    modules = _built_by_steps(STEPS)
    names = {m.name for m, _ in modules}
    modules += [(m, block_dim) for m, block_dim in _defined_at_import() if m.name not in names]  # not launched above
    names = {m.name for m, _ in modules}
    # The step's families are all there: the checked set is not empty or partial by accident.
    for part in ("fused_newton", "solve_single", "solve_blocked", "_collide_convex", "_collide_heightfield",
                 "evaluate", "line_search", "sap_gpu.holonomic", "contact_weights", "sap_tools.benchmark.runs"):
        assert any(part in n for n in names), (part, sorted(names))
    problems = check_modules(modules)
    assert not problems, "constants read where they may be unset:\n" + _report(problems)


@pytest.mark.slow
def test_no_combination_of_the_fused_kernels_options_reads_an_unset_constant():
    problems = check_modules(_built_by_steps(EVERY_FUSED))
    assert not problems, "constants read where they may be unset:\n" + _report(problems)
