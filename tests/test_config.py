"""sap_common.config: the preset table of docs/presets.md, aliases, overrides, defaults and validation."""

import dataclasses
import warnings

import numpy as np
import pytest

from sap_common.config import (
    DEFAULT_LINE_SEARCH,
    GROUP_SETTINGS,
    GROUPS,
    LINE_SEARCH_VARIANTS,
    PRESETS,
    ContactModelSettings,
    GpuKernelSettings,
    LinearSolveSettings,
    LineSearchSettings,
    NewtonSettings,
    SapConfig,
    SapConfigWarning,
    TimeStepSettings,
    normalize_preset,
    precision_dtype,
)

# docs/presets.md § Presets, written out here independently of sap_common.config.PRESETS.
TABLE = {
    "use_f64_boundary_pose": (False, True, True),
    "free_motion_solve_precision": ("fp32", "fp64", "fp64"),
    "contact_solve_precision": ("fp64", "fp64", "fp64"),
    "contact_linear_solve_precision": ("fp32", "fp64", "fp64"),
    "sap_contact_weight_precision": ("fp32", "fp64", "fp64"),
    "contact_weight_mode": ("body_inertia", "body_inertia", "diag_delassus"),
    "contact_point_mode": ("witness_point", "witness_point", "contact_midpoint"),
    "position_integration": ("midpoint", "midpoint", "sap_euler"),
}
PRESET_NAMES = ("approx32", "approx64", "drake")


@pytest.mark.parametrize("knob", TABLE)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_preset_table_row(preset, knob):
    expected = TABLE[knob][PRESET_NAMES.index(preset)]
    assert getattr(SapConfig.from_preset(preset), knob) == expected
    assert getattr(SapConfig(contact_preset_variant=preset), knob) == expected


def test_table_covers_exactly_the_preset_knobs():
    assert set(PRESETS) == set(PRESET_NAMES)
    assert all(set(v) == set(TABLE) for v in PRESETS.values())


def test_default_preset_is_approx32():
    assert SapConfig() == SapConfig.from_preset("approx32")
    assert SapConfig().contact_preset_variant == "approx32"


@pytest.mark.parametrize("alias,name", [
    ("approx32", "approx32"), ("approx_32", "approx32"), ("approx-32", "approx32"), ("APPROX32", "approx32"),
    (" Approx-32 ", "approx32"), ("approx64", "approx64"), ("approx_64", "approx64"), ("approx-64", "approx64"),
    ("drake", "drake"), ("DRAKE", "drake"),
])
def test_preset_aliases(alias, name):
    assert normalize_preset(alias) == name
    assert SapConfig.from_preset(alias).contact_preset_variant == name


@pytest.mark.parametrize("alias,name", [
    ("fp32", "fp32"), ("f32", "fp32"), ("float32", "fp32"), ("FP32", "fp32"), ("single", "fp32"),
    (np.float32, "fp32"), (np.dtype("float32"), "fp32"),
    ("fp64", "fp64"), ("f64", "fp64"), ("float64", "fp64"), ("double", "fp64"), (np.float64, "fp64"),
])
def test_precision_aliases(alias, name):
    cfg = SapConfig.from_preset("approx64", contact_linear_solve_precision=alias)
    assert cfg.contact_linear_solve_precision == name
    assert precision_dtype(alias) == (np.float32 if name == "fp32" else np.float64)


@pytest.mark.parametrize("alias,name", [
    ("monotone_decay", "monotone_decay"), ("monotone-decay", "monotone_decay"), ("monotone", "monotone_decay"),
    ("armijo_decay", "armijo_decay"), ("armijo", "armijo_decay"), ("backtracking", "armijo_decay"),
    ("exact_root", "exact_root"), ("Exact-Root", "exact_root"), ("exact", "exact_root"),
])
def test_line_search_aliases(alias, name):
    assert SapConfig(line_search_variant=alias).line_search_variant == name


def test_mode_names_normalize():
    cfg = SapConfig(contact_weight_mode="Diag-Delassus", contact_point_mode="CONTACT-MIDPOINT",
                    position_integration="sap-euler")
    assert (cfg.contact_weight_mode, cfg.contact_point_mode, cfg.position_integration) == (
        "diag_delassus", "contact_midpoint", "sap_euler")


@pytest.mark.parametrize("knob", TABLE)
def test_override_wins_over_every_preset_knob(knob):
    values = {"use_f64_boundary_pose": (True, False)}
    for k in TABLE:
        if k.endswith("precision"):
            values[k] = ("fp32", "fp64")
    values.update(contact_weight_mode=("body_inertia", "diag_delassus"),
                  contact_point_mode=("witness_point", "contact_midpoint"),
                  position_integration=("midpoint", "sap_euler"))
    for preset in PRESET_NAMES:
        for v in values[knob]:
            assert getattr(SapConfig.from_preset(preset, **{knob: v}), knob) == v


def test_line_search_dependent_defaults():
    assert SapConfig().line_search_variant == DEFAULT_LINE_SEARCH == "exact_root"
    assert SapConfig().line_search_max_iterations == 100
    assert SapConfig(line_search_variant="monotone_decay").line_search_max_iterations == 40
    assert SapConfig(line_search_variant="armijo_decay").line_search_max_iterations == 40
    assert SapConfig(line_search_variant="exact_root").line_search_max_iterations == 100
    # Raised to 100 only when left at the default: an explicit value is kept, even 40.
    assert SapConfig(line_search_variant="exact_root", line_search_max_iterations=40).line_search_max_iterations == 40
    assert SapConfig(line_search_variant="exact_root", line_search_max_iterations=7).line_search_max_iterations == 7
    m = SapConfig(line_search_variant="monotone_decay")
    assert (m.cost_abs_tol, m.cost_rel_tol) == (0.0, 5e-3)
    for ls in ("armijo_decay", "exact_root"):
        c = SapConfig(line_search_variant=ls)
        assert (c.cost_abs_tol, c.cost_rel_tol) == (1e-30, 1e-15)
    assert SapConfig(line_search_variant="exact_root", cost_rel_tol=1e-9).cost_rel_tol == 1e-9


def test_solver_defaults():
    c = SapConfig()
    assert (c.rho, c.armijo_c, c.max_iterations) == (0.8, 1e-4, 100)
    assert (c.optimality_abs_tol, c.optimality_rel_tol) == (1e-14, 1e-6)
    assert (c.contact_beta, c.contact_sigma) == (1.0, 1e-3)
    assert (c.contact_tau_d, c.fallback_stiffness, c.fallback_mu) == (0.1, 1e6, 0.5)
    assert c.line_search_relative_slop == pytest.approx(1000 * np.finfo(np.float64).eps)
    c32 = SapConfig(contact_solve_precision="fp32")
    assert c32.line_search_relative_slop == pytest.approx(1000 * np.finfo(np.float32).eps)
    assert c.dtype("free_motion_solve_precision") == np.float32
    assert SapConfig.from_preset("drake").dtype("free_motion_solve_precision") == np.float64
    assert c.fused_max_registers == "auto"  # sap_gpu's cap per fused kernel
    assert SapConfig(fused_max_registers=" AUTO ").fused_max_registers == "auto"
    assert SapConfig(fused_max_registers=None).fused_max_registers == "auto"  # None: not set
    assert SapConfig(fused_max_registers="None").fused_max_registers == "none"  # the CUDA compiler's choice
    assert SapConfig(fused_max_registers=np.int64(128)).fused_max_registers == 128
    assert type(SapConfig(fused_max_registers=np.int64(128)).fused_max_registers) is int
    assert c.fused_hessian == "rows"  # lanes over H's rows in global memory (the one measured on a GPU)
    assert SapConfig(fused_hessian="Tiles").fused_hessian == "tiles"
    assert c.fused_cholesky == "auto"  # per device: lanes on a GPU, tile on the CPU device (the faster on each)
    assert SapConfig(fused_cholesky="TILE").fused_cholesky == "tile"
    assert SapConfig(fused_cholesky=" Lanes ").fused_cholesky == "lanes"


def test_replace_re_expands_preset_and_keeps_explicit_choices():
    c = SapConfig.from_preset("drake", contact_weight_mode="body_inertia", line_search_variant="exact_root")
    c2 = c.replace(contact_preset_variant="approx32")
    assert c2.contact_preset_variant == "approx32"
    assert c2.free_motion_solve_precision == "fp32"  # from the new preset
    assert c2.contact_weight_mode == "body_inertia"  # explicit choice kept
    assert c2.line_search_max_iterations == 100
    c3 = c2.replace(line_search_variant="monotone_decay")
    assert c3.line_search_max_iterations == 40 and c3.cost_rel_tol == 5e-3  # dependent defaults refresh


def test_config_is_frozen_and_hashable():
    c = SapConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.rho = 0.5
    assert hash(c) == hash(SapConfig())
    assert set(c.as_dict()) == set(SapConfig.knob_names())


BAD = [
    (dict(contact_preset_variant="fast"),
     r"contact_preset_variant: 'fast' is not valid; valid: approx32, approx64, drake"),
    (dict(contact_preset_variant=32), r"contact_preset_variant: 32 is not valid"),
    (dict(free_motion_solve_precision="fp16"), r"free_motion_solve_precision: 'fp16' is not valid; valid: fp32, fp64"),
    (dict(contact_linear_solve_precision=np.float16), r"contact_linear_solve_precision: .* valid: fp32, fp64"),
    (dict(contact_weight_mode="exact"),
     r"contact_weight_mode: 'exact' is not valid; valid: body_inertia, diag_delassus"),
    (dict(contact_point_mode="centroid"),
     r"contact_point_mode: 'centroid' is not valid; valid: witness_point, contact_midpoint"),
    (dict(position_integration="rk4"), r"position_integration: 'rk4' is not valid; valid: midpoint, sap_euler"),
    (dict(line_search_variant="wolfe"),
     r"line_search_variant: 'wolfe' is not valid; valid: monotone_decay, armijo_decay, exact_root"),
    (dict(use_f64_boundary_pose="yes"), r"use_f64_boundary_pose: must be True or False"),
    (dict(rho=0.0), r"rho: must be finite and in \(0.0, 1.0\)"),
    (dict(rho=1.0), r"rho: must be finite and in \(0.0, 1.0\)"),
    (dict(rho=1.5), r"rho: must be finite and in \(0.0, 1.0\)"),
    (dict(rho=float("nan")), r"rho: must be finite"),
    (dict(armijo_c=0.0), r"armijo_c: must be finite and in \(0.0, 1.0\)"),
    (dict(armijo_c=1.0), r"armijo_c: must be finite and in \(0.0, 1.0\)"),
    (dict(line_search_max_iterations=0), r"line_search_max_iterations: must be an integer >= 1"),
    (dict(line_search_max_iterations=2.5), r"line_search_max_iterations: must be an integer >= 1"),
    (dict(max_iterations=0), r"max_iterations: must be an integer >= 1"),
    (dict(max_iterations=-3), r"max_iterations: must be an integer >= 1"),
    (dict(max_iterations=True), r"max_iterations: must be an integer >= 1"),
    (dict(max_rigid_contact=-1), r"max_rigid_contact: must be an integer >= 0"),
    (dict(optimality_abs_tol=-1e-14), r"optimality_abs_tol: must be finite and in \[0.0, inf\)"),
    (dict(optimality_rel_tol=0.0), r"optimality_rel_tol: must be finite and in \(0.0, inf\)"),
    (dict(optimality_rel_tol=-1e-6), r"optimality_rel_tol: must be finite and in \(0.0, inf\)"),
    (dict(cost_abs_tol=-1.0), r"cost_abs_tol: must be finite and in \[0.0, inf\)"),
    (dict(cost_rel_tol=0.0), r"cost_rel_tol: must be finite and in \(0.0, inf\)"),
    (dict(cost_rel_tol=float("inf")), r"cost_rel_tol: must be finite"),
    (dict(line_search_relative_slop=-1e-13), r"line_search_relative_slop: must be finite and in \[0.0, inf\)"),
    (dict(contact_tau_d=-0.1), r"contact_tau_d: must be finite and in \[0.0, inf\) s"),
    (dict(contact_beta=0.0), r"contact_beta: must be finite and in \(0.0, inf\)"),
    (dict(contact_sigma=-1e-3), r"contact_sigma: must be finite and in \(0.0, inf\)"),
    (dict(fallback_stiffness=0.0), r"fallback_stiffness: must be finite and in \(0.0, inf\) N/m"),
    (dict(fallback_mu=-0.5), r"fallback_mu: must be finite and in \[0.0, inf\)"),
    (dict(rho="0.5"), r"rho: must be a real number"),
    (dict(contact_linear_solver="lu"), r"contact_linear_solver: 'lu' is not valid; valid: cholesky, pcr"),
    (dict(pcr_max_iterations=0), r"pcr_max_iterations: must be an integer >= 1"),
    (dict(pcr_max_iterations=10.0), r"pcr_max_iterations: must be an integer >= 1"),
    (dict(pcr_rtol=-1e-8), r"pcr_rtol: must be finite and in \[0.0, inf\)"),
    (dict(pcr_rtol=float("nan")), r"pcr_rtol: must be finite"),
    (dict(pcr_atol=-1.0), r"pcr_atol: must be finite and in \[0.0, inf\)"),
    (dict(pcr_regularization=float("inf")), r"pcr_regularization: must be finite"),
    (dict(pcr_regularization=-1e-9), r"pcr_regularization: must be finite and in \[0.0, inf\)"),
    (dict(matrixfree_representation="yes"), r"matrixfree_representation: must be True or False"),
    (dict(discrete_contact_approximation="tamsi"),
     r"discrete_contact_approximation: 'tamsi' is not valid; valid: sap, lagged, similar"),
    (dict(discrete_contact_approximation=1), r"discrete_contact_approximation: 1 is not valid"),
    (dict(stiction_tolerance=0.0), r"stiction_tolerance: must be finite and in \(0.0, inf\) m/s"),
    (dict(stiction_tolerance=float("inf")), r"stiction_tolerance: must be finite"),
    (dict(fallback_hc_dissipation=-1.0), r"fallback_hc_dissipation: must be finite and in \[0.0, inf\) s/m"),
    (dict(fused_max_registers=31), r"fused_max_registers: must be 'auto' \(the default: sap_gpu's cap per kernel\), "
                                   r"'none' \(the compiler's choice\) or an integer from 32 to 255, got 31"),
    (dict(fused_max_registers="automatic"), r"fused_max_registers: .* from 32 to 255, got 'automatic'"),
    (dict(fused_max_registers=256), r"fused_max_registers: .* from 32 to 255, got 256"),
    (dict(fused_max_registers=True), r"fused_max_registers: .* from 32 to 255, got True"),
    (dict(fused_max_registers=128.0), r"fused_max_registers: .* from 32 to 255, got 128.0"),
    (dict(fused_max_registers="128"), r"fused_max_registers: .* from 32 to 255, got '128'"),
    (dict(fused_hessian="dense"), r"fused_hessian: 'dense' is not valid; valid: rows, tiles"),
    (dict(fused_hessian=None), r"fused_hessian: None is not valid; valid: rows, tiles"),
    (dict(fused_cholesky="ldlt"), r"fused_cholesky: 'ldlt' is not valid; valid: auto, tile, lanes"),
    (dict(fused_cholesky=1), r"fused_cholesky: 1 is not valid; valid: auto, tile, lanes"),
]


@pytest.mark.parametrize("kwargs,match", BAD, ids=lambda x: next(iter(x)) if isinstance(x, dict) else "")
def test_validation_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SapConfig(**kwargs)


def test_unknown_knob_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown SapConfig knob\(s\) tolerance; valid: contact_preset_variant, "):
        SapConfig.from_preset("drake", tolerance=1e-6)
    assert SapConfig.from_preset(contact_preset_variant="drake", rho=0.5).contact_preset_variant == "drake"
    with pytest.raises(ValueError, match=r"knob: 'rho' is not a precision knob"):
        SapConfig().dtype("rho")


def test_zero_absolute_tolerances_are_valid():
    # monotone_decay's own default cost_abs_tol is 0: a relative-only test.
    c = SapConfig(optimality_abs_tol=0.0, cost_abs_tol=0.0, line_search_relative_slop=0.0)
    assert c.optimality_abs_tol == 0.0 and c.cost_abs_tol == 0.0


def test_linear_solver_knobs_and_their_dependent_defaults():
    c = SapConfig()
    assert (c.contact_linear_solver, c.pcr_max_iterations, c.pcr_atol, c.pcr_regularization) == ("cholesky", 200,
                                                                                                   0.0, 0.0)
    assert c.matrixfree_representation is False
    # rtol follows contact_linear_solve_precision (approx32: fp32) unless given.
    assert c.pcr_rtol == 1e-6
    assert SapConfig.from_preset("drake").pcr_rtol == 1e-10
    assert SapConfig.from_preset("approx32", contact_linear_solve_precision="fp64").pcr_rtol == 1e-10
    assert SapConfig.from_preset("drake", pcr_rtol=1e-4).pcr_rtol == 1e-4
    # matrixfree_representation follows the solver choice unless given.
    p = SapConfig(contact_linear_solver="PCR")
    assert p.contact_linear_solver == "pcr" and p.matrixfree_representation is True
    assert SapConfig(contact_linear_solver="pcr", matrixfree_representation=False).matrixfree_representation is False
    assert p.replace(contact_linear_solver="cholesky").matrixfree_representation is False
    assert SapConfig(matrixfree_representation=True).contact_linear_solver == "cholesky"
    assert p.replace(contact_preset_variant="drake").pcr_rtol == 1e-10


@pytest.mark.parametrize("preset", ["approx32", "approx64", "drake"])
def test_contact_approximation_is_orthogonal_to_the_presets(preset):
    """Every preset keeps the anchors' approximation (sap) unless told otherwise; the knob and its
    two Hunt–Crossley parameters change nothing else; Drake's names are accepted."""
    cfg = SapConfig.from_preset(preset)
    assert cfg.discrete_contact_approximation == "sap"
    assert cfg.stiction_tolerance == 1e-4 and cfg.fallback_hc_dissipation == 50.0  # Drake's plant / SceneGraph
    for name, canonical in (("lagged", "lagged"), ("kLagged", "lagged"), ("Similar", "similar"), ("kSap", "sap")):
        hc = SapConfig.from_preset(preset, discrete_contact_approximation=name)
        assert hc.discrete_contact_approximation == canonical
        assert {k: v for k, v in hc.as_dict().items() if k != "discrete_contact_approximation"} == \
            {k: v for k, v in cfg.as_dict().items() if k != "discrete_contact_approximation"}
    assert cfg.replace(contact_preset_variant="drake", discrete_contact_approximation="lagged").replace(
        contact_preset_variant="approx32").discrete_contact_approximation == "lagged"  # an explicit choice is kept


# ----------------------------------------------------------------------------- knobs without effect

@pytest.fixture
def fresh_warnings(monkeypatch):
    """Each test sees every unused-knob warning again (they are once per process otherwise)."""
    import sap_common.config as config_module

    monkeypatch.setattr(config_module, "_WARNED", set())


@pytest.mark.parametrize("kwargs, knob, reader", [
    (dict(rho=0.5), "rho", "armijo_decay"),
    (dict(armijo_c=0.3, line_search_variant="exact_root"), "armijo_c", "armijo_decay"),
    (dict(pcr_rtol=1e-8), "pcr_rtol", "pcr"),
    (dict(pcr_max_iterations=7), "pcr_max_iterations", "pcr"),
    (dict(stiction_tolerance=1e-3), "stiction_tolerance", "lagged"),
    (dict(fallback_hc_dissipation=3.0), "fallback_hc_dissipation", "lagged"),
    (dict(contact_tau_d=0.3, discrete_contact_approximation="lagged"), "contact_tau_d", "'sap'"),
    (dict(contact_beta=0.5, discrete_contact_approximation="similar"), "contact_beta", "'sap'"),
    (dict(fused_max_registers=128, newton_path="staged"), "fused_max_registers", "newton_path='fused'"),
    (dict(fused_max_registers=128, contact_linear_solver="pcr"), "fused_max_registers", "newton_path='fused'"),
    (dict(fused_hessian="tiles", newton_path="staged"), "fused_hessian", "newton_path='fused'"),
    (dict(fused_hessian="tiles", contact_linear_solver="pcr"), "fused_hessian", "newton_path='fused'"),
    (dict(fused_cholesky="tile", newton_path="staged"), "fused_cholesky", "newton_path='fused'"),
    (dict(fused_cholesky="tile", contact_linear_solver="pcr"), "fused_cholesky", "newton_path='fused'"),
])
def test_a_knob_the_configuration_never_reads_warns_once(fresh_warnings, kwargs, knob, reader):
    from sap_common.config import SapConfigWarning

    with pytest.warns(SapConfigWarning, match=rf"{knob}=.* has no effect: only .*{reader}") as record:
        cfg = SapConfig(**kwargs)
    assert len(record) == 1 and record[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg.replace(max_iterations=50)  # once per process: the same knob does not warn again
        SapConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [
    dict(rho=0.5, armijo_c=0.3, line_search_variant="armijo_decay"),
    dict(pcr_rtol=1e-8, pcr_atol=1e-12, pcr_regularization=1e-9, pcr_max_iterations=7, contact_linear_solver="pcr"),
    dict(pcr_rtol=1e-8, matrixfree_representation=True),
    dict(stiction_tolerance=1e-3, fallback_hc_dissipation=3.0, discrete_contact_approximation="lagged"),
    dict(contact_tau_d=0.3, contact_beta=0.5),
    dict(rho=0.8, pcr_atol=0.0),  # the defaults, unchanged, are not "set"
    dict(fused_max_registers=128),
    dict(fused_hessian="tiles"),
    dict(fused_cholesky="tile"),
])
def test_a_knob_the_configuration_reads_does_not_warn(fresh_warnings, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for preset in PRESETS:
            SapConfig.from_preset(preset, **kwargs)


def test_every_preset_and_line_search_with_its_defaults_is_silent(fresh_warnings):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for preset in PRESETS:
            for ls in ("monotone_decay", "armijo_decay", "exact_root"):
                for solver in ("cholesky", "pcr"):
                    for approx in ("sap", "lagged", "similar"):
                        SapConfig.from_preset(preset, line_search_variant=ls, contact_linear_solver=solver,
                                              discrete_contact_approximation=approx)


# ----------------------------------------------------------------------------- groups

# docs/presets.md § Knobs by group: group -> {group attribute: flat knob}, written out here
# independently of the field metadata sap_common.config derives GROUPS from.
GROUP_TABLE = {
    "newton": dict(max_iterations="max_iterations", optimality_abs_tol="optimality_abs_tol",
                   optimality_rel_tol="optimality_rel_tol", cost_abs_tol="cost_abs_tol", cost_rel_tol="cost_rel_tol"),
    "line_search": dict(variant="line_search_variant", max_iterations="line_search_max_iterations", rho="rho",
                        armijo_c="armijo_c", relative_slop="line_search_relative_slop"),
    "linear_solve": dict(solver="contact_linear_solver", precision="contact_linear_solve_precision",
                         pcr_max_iterations="pcr_max_iterations", pcr_rtol="pcr_rtol", pcr_atol="pcr_atol",
                         pcr_regularization="pcr_regularization",
                         matrixfree_representation="matrixfree_representation"),
    "contact_model": dict(approximation="discrete_contact_approximation", tau_d="contact_tau_d",
                          beta="contact_beta", sigma="contact_sigma", fallback_stiffness="fallback_stiffness",
                          fallback_mu="fallback_mu", stiction_tolerance="stiction_tolerance",
                          fallback_hc_dissipation="fallback_hc_dissipation", weight_mode="contact_weight_mode",
                          point_mode="contact_point_mode", weight_precision="sap_contact_weight_precision",
                          max_rigid_contact="max_rigid_contact"),
    "gpu_kernel": dict(newton_path="newton_path", fused_max_registers="fused_max_registers",
                       fused_hessian="fused_hessian", fused_cholesky="fused_cholesky"),
    "time_step": dict(preset="contact_preset_variant", f64_boundary_pose="use_f64_boundary_pose",
                      free_motion_precision="free_motion_solve_precision",
                      contact_solve_precision="contact_solve_precision", position_integration="position_integration"),
}


def test_every_knob_is_in_exactly_one_group():
    knobs = [k for group in GROUPS.values() for k in group]
    fields = [f.name for f in dataclasses.fields(SapConfig) if f.name != "_explicit"]
    assert len(fields) == 38 and sorted(knobs) == sorted(fields)  # each once: no knob left out, none twice
    assert {name: cls.knobs() for name, cls in GROUP_SETTINGS.items()} == GROUP_TABLE
    assert {name: tuple(table.values()) for name, table in GROUP_TABLE.items()} == dict(GROUPS)
    assert set(GROUPS).isdisjoint(SapConfig.knob_names())  # groups are views, not fields: equality ignores them


@pytest.mark.parametrize("ls", LINE_SEARCH_VARIANTS)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_group_properties_hold_the_resolved_knobs(preset, ls):
    for overrides in (dict(), dict(contact_linear_solver="pcr", discrete_contact_approximation="lagged",
                                   newton_path="staged")):
        cfg = SapConfig.from_preset(preset, line_search_variant=ls, **overrides)
        for name, table in GROUP_TABLE.items():
            group = getattr(cfg, name)
            assert type(group) is GROUP_SETTINGS[name]
            for attr, knob in table.items():
                value = getattr(group, attr)
                assert value is not None and value == getattr(cfg, knob) and type(value) is type(getattr(cfg, knob))
    assert SapConfig.from_preset(preset, line_search_variant=ls).line_search.max_iterations == (
        100 if ls == "exact_root" else 40)  # the line-search-dependent default, resolved


# One group object per group, each setting some knobs, and the same knobs given flat.
GROUPED_AND_FLAT = [
    (dict(newton=NewtonSettings(max_iterations=7, cost_rel_tol=1e-9)), dict(max_iterations=7, cost_rel_tol=1e-9)),
    (dict(line_search=LineSearchSettings(variant="exact_root")), dict(line_search_variant="exact_root")),
    (dict(line_search=LineSearchSettings(variant="armijo", rho=0.5, relative_slop=0.0)),
     dict(line_search_variant="armijo", rho=0.5, line_search_relative_slop=0.0)),
    (dict(linear_solve=LinearSolveSettings(solver="pcr", precision="fp64", pcr_rtol=1e-8)),
     dict(contact_linear_solver="pcr", contact_linear_solve_precision="fp64", pcr_rtol=1e-8)),
    (dict(contact_model=ContactModelSettings(approximation="lagged", stiction_tolerance=1e-3, max_rigid_contact=8,
                                             weight_mode="diag_delassus")),
     dict(discrete_contact_approximation="lagged", stiction_tolerance=1e-3, max_rigid_contact=8,
          contact_weight_mode="diag_delassus")),
    (dict(gpu_kernel=GpuKernelSettings(newton_path="staged")), dict(newton_path="staged")),
    (dict(time_step=TimeStepSettings(position_integration="sap_euler", free_motion_precision="fp64")),
     dict(position_integration="sap_euler", free_motion_solve_precision="fp64")),
    (dict(line_search=LineSearchSettings(variant="exact_root"), newton=NewtonSettings(max_iterations=9), rho=0.8),
     dict(line_search_variant="exact_root", max_iterations=9, rho=0.8)),
]


@pytest.mark.parametrize("grouped, flat", GROUPED_AND_FLAT)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_a_group_keyword_equals_its_flat_knobs(preset, grouped, flat):
    g, f = SapConfig.from_preset(preset, **grouped), SapConfig.from_preset(preset, **flat)
    assert g == f and g.as_dict() == f.as_dict()
    assert g._explicit == f._explicit  # what replace() keeps when the preset changes
    base = SapConfig.from_preset(preset, rho=0.6, line_search_variant="armijo_decay", newton_path="staged")
    assert base.replace(**grouped) == base.replace(**flat)  # a group wins over the explicit choices, as flat does
    assert base.replace(**grouped).replace(contact_preset_variant="drake") == \
        base.replace(**flat).replace(contact_preset_variant="drake")


def test_groups_name_the_preset_and_rebuild_a_config():
    assert SapConfig.from_preset(time_step=TimeStepSettings(preset="drake")) == SapConfig.from_preset("drake")
    assert SapConfig().replace(time_step=TimeStepSettings(preset="approx64")).contact_preset_variant == "approx64"
    with warnings.catch_warnings():
        # A resolved group sets every knob it holds, pcr_rtol too, where Cholesky does not read it.
        warnings.simplefilter("ignore", SapConfigWarning)
        for preset in PRESET_NAMES:
            for ls in LINE_SEARCH_VARIANTS:
                cfg = SapConfig.from_preset(preset, line_search_variant=ls, discrete_contact_approximation="similar")
                assert SapConfig.from_preset(**{name: getattr(cfg, name) for name in GROUPS}) == cfg


@pytest.mark.parametrize("call, match", [
    (lambda: SapConfig.from_preset("drake", rho=0.5, line_search=LineSearchSettings(rho=0.6)),
     r"rho=0.5 conflicts with line_search.rho=0.6"),
    (lambda: SapConfig.from_preset(line_search_variant="exact_root", line_search=LineSearchSettings(variant="armijo")),
     r"line_search_variant='exact_root' conflicts with line_search.variant='armijo'"),
    (lambda: SapConfig.from_preset("approx64", time_step=TimeStepSettings(preset="drake")),
     r"contact_preset_variant='approx64' conflicts with time_step.preset='drake'"),
    (lambda: SapConfig.from_preset(contact_sigma=1e-2, contact_model=ContactModelSettings(sigma=1e-3)),
     r"contact_sigma=0.01 conflicts with contact_model.sigma=0.001"),
    (lambda: SapConfig().replace(pcr_rtol=1e-8, linear_solve=LinearSolveSettings(pcr_rtol=1e-9)),
     r"pcr_rtol=1e-08 conflicts with linear_solve.pcr_rtol=1e-09"),
    (lambda: SapConfig.from_preset(line_search=NewtonSettings()),
     r"line_search: expected a LineSearchSettings, got NewtonSettings"),
    (lambda: SapConfig.from_preset(line_search=LineSearchSettings(variant="wolfe")),
     r"line_search_variant: 'wolfe' is not valid"),  # validated as the flat knob, under its flat name
])
def test_a_knob_given_flat_and_grouped_differently_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_knob_given_flat_and_grouped_alike_is_accepted():
    cfg = SapConfig.from_preset("drake", rho=0.5, line_search=LineSearchSettings(variant="armijo_decay", rho=0.5))
    assert (cfg.rho, cfg.line_search_variant) == (0.5, "armijo_decay")
    # replace(): an explicit choice of the config is replaced, not contradicted.
    assert cfg.replace(line_search=LineSearchSettings(rho=0.6)).rho == 0.6


def test_groups_are_frozen_and_hashable():
    cfg = SapConfig()
    for name in GROUPS:
        group = getattr(cfg, name)
        attr = next(iter(GROUP_TABLE[name]))
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(group, attr, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cfg, name, group)
        assert hash(group) == hash(getattr(SapConfig(), name)) and group == getattr(SapConfig(), name)
