"""Solver configuration: presets, aliases, defaults and validation (docs/presets.md).

A :class:`SapConfig` is frozen and validated: a config that constructs always runs. Every
knob left unset (``None``) is filled in from the preset (the eight knobs of the preset table)
or from a line-search-dependent default; explicit values always win::

    cfg = SapConfig.from_preset("drake", line_search_variant="exact_root")
    cfg.line_search_max_iterations      # 100: exact_root's default, since it was not given
    cfg.replace(contact_preset_variant="approx32")   # re-expands the preset, keeps overrides

The knobs are grouped by the code that reads them (:data:`GROUPS`); each group is a read-only
property holding the resolved values under short names, and ``from_preset`` and ``replace`` take
a group object as a keyword too::

    cfg.line_search.max_iterations      # the same 100, as LineSearchSettings.max_iterations
    SapConfig.from_preset("drake", line_search=LineSearchSettings(variant="exact_root"))  # == cfg

Names are normalized before validation: case and ``-``/``_`` are ignored
(``approx-32`` → ``approx32``), and precisions accept ``fp32``/``f32``/``float32``/``single``
and the NumPy dtypes. Bad values raise ``ValueError`` naming the field and the valid values.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from .constants import (
    DEFAULT_FUSED_CHOLESKY,
    DEFAULT_FUSED_HESSIAN,
    DEFAULT_NEWTON_PATH,
    FUSED_CHOLESKYS,
    FUSED_HESSIANS,
    FUSED_MAX_REGISTERS_AUTO,
    FUSED_MAX_REGISTERS_NONE,
    FUSED_MAX_REGISTERS_RANGE,
    NEWTON_PATHS,
)

__all__ = [
    "SapConfig",
    "collision_pipeline_args",
    "PRESETS",
    "PRESET_KNOBS",
    "PRECISIONS",
    "CONTACT_WEIGHT_MODES",
    "CONTACT_POINT_MODES",
    "POSITION_INTEGRATIONS",
    "LINE_SEARCH_VARIANTS",
    "DEFAULT_LINE_SEARCH",
    "LINEAR_SOLVERS",
    "NEWTON_PATHS",
    "FUSED_HESSIANS",
    "FUSED_CHOLESKYS",
    "CONTACT_APPROXIMATIONS",
    "DEFAULT_CONTACT_APPROXIMATION",
    "precision_dtype",
    "normalize_preset",
    "SapConfigWarning",
    "GROUPS",
    "GROUP_SETTINGS",
    "NewtonSettings",
    "LineSearchSettings",
    "LinearSolveSettings",
    "ContactModelSettings",
    "GpuKernelSettings",
    "TimeStepSettings",
]

PRECISIONS = ("fp32", "fp64")
CONTACT_WEIGHT_MODES = ("body_inertia", "diag_delassus")
CONTACT_POINT_MODES = ("witness_point", "contact_midpoint")
POSITION_INTEGRATIONS = ("midpoint", "sap_euler")
LINE_SEARCH_VARIANTS = ("monotone_decay", "armijo_decay", "exact_root")
# exact_root stops at the minimiser in the fewest Newton iterations of the three (docs/presets.md
# § Accuracy and work of the line searches); monotone_decay's cost criterion can stop far from it.
DEFAULT_LINE_SEARCH = "exact_root"
LINEAR_SOLVERS = ("cholesky", "pcr")
# The contact constraint (docs/formulation.md § Contact approximations; docs/presets.md § Contact
# approximation): "sap" is SAP's compliant friction cone (linear Kelvin–Voigt normal law with the
# time scale τ_d), "lagged" and "similar" the Hunt–Crossley constraint (normal force
# (k·x)(1 + d·ẋ) with the dissipation d, smooth Coulomb friction) in Drake's two variants.
# Orthogonal to the presets: every preset defaults to "sap" (the approximation of the committed
# anchors); Drake's own plant default is "lagged".
CONTACT_APPROXIMATIONS = ("sap", "lagged", "similar")
DEFAULT_CONTACT_APPROXIMATION = "sap"

# The preset table of docs/presets.md. Only these eight knobs depend on the preset.
PRESETS = MappingProxyType({
    "approx32": MappingProxyType(dict(
        use_f64_boundary_pose=False,
        free_motion_solve_precision="fp32",
        contact_solve_precision="fp64",
        contact_linear_solve_precision="fp32",
        sap_contact_weight_precision="fp32",
        contact_weight_mode="body_inertia",
        contact_point_mode="witness_point",
        position_integration="midpoint",
    )),
    "approx64": MappingProxyType(dict(
        use_f64_boundary_pose=True,
        free_motion_solve_precision="fp64",
        contact_solve_precision="fp64",
        contact_linear_solve_precision="fp64",
        sap_contact_weight_precision="fp64",
        contact_weight_mode="body_inertia",
        contact_point_mode="witness_point",
        position_integration="midpoint",
    )),
    "drake": MappingProxyType(dict(
        use_f64_boundary_pose=True,
        free_motion_solve_precision="fp64",
        contact_solve_precision="fp64",
        contact_linear_solve_precision="fp64",
        sap_contact_weight_precision="fp64",
        contact_weight_mode="diag_delassus",
        contact_point_mode="contact_midpoint",
        position_integration="sap_euler",
    )),
})
PRESET_KNOBS = tuple(PRESETS["approx32"])

_PRESET_ALIASES = {"approx32": "approx32", "approx64": "approx64", "drake": "drake"}
_PRECISION_ALIASES = {
    "fp32": "fp32", "f32": "fp32", "float32": "fp32", "single": "fp32",
    "fp64": "fp64", "f64": "fp64", "float64": "fp64", "double": "fp64",
}
# Drake's names for its line searches (kExact, kBackTracking) are accepted too.
_LINE_SEARCH_ALIASES = {
    "monotone_decay": "monotone_decay", "monotone": "monotone_decay",
    "armijo_decay": "armijo_decay", "armijo": "armijo_decay", "backtracking": "armijo_decay",
    "exact_root": "exact_root", "exact": "exact_root",
}

# Drake's names (DiscreteContactApproximation::kSap, kLagged, kSimilar) are accepted too.
_APPROXIMATION_ALIASES = {"sap": "sap", "ksap": "sap", "lagged": "lagged", "klagged": "lagged",
                          "similar": "similar", "ksimilar": "similar"}

# Line-search-dependent defaults (docs/presets.md).
LINE_SEARCH_MAX_ITERATIONS_DEFAULT = 40
EXACT_ROOT_MAX_ITERATIONS_DEFAULT = 100  # Drake's exact line search allows 100 evaluations
COST_TOL_DEFAULTS = MappingProxyType({
    # monotone_decay stops once the cost stalls to 0.5 %: a decay search cannot refine α.
    "monotone_decay": (0.0, 5e-3),
    # Drake's SapSolverParameters (docs/formulation.md § Stopping criteria): the cost criterion almost never fires.
    "armijo_decay": (1e-30, 1e-15),
    "exact_root": (1e-30, 1e-15),
})
RELATIVE_SLOP_FACTOR = 1000.0  # Drake: relative_slop = 1000 · machine epsilon

# PCR defaults. The relative tolerance follows contact_linear_solve_precision: 1e-10 in float64
# leaves the solve ~6 orders below the Newton optimality tolerance (1e-6); in float32 the
# residual cannot drop far below κ·ε₃₂, so 1e-6 (≈ 8 ε₃₂) is the tightest useful target.
PCR_MAX_ITERATIONS_DEFAULT = 200  # CR ends in ≤ n steps in exact arithmetic; 2n slack at nv ≈ 100
PCR_RTOL_DEFAULTS = MappingProxyType({"fp64": 1e-10, "fp32": 1e-6})


def _key(value) -> str:
    return str(value).strip().lower().replace("-", "_")


class SapConfigWarning(UserWarning):
    """A knob was set explicitly that the rest of the configuration never reads (it has no effect)."""


def _reads_line_search_decay(c) -> bool:
    return c.line_search_variant == "armijo_decay"


def _reads_pcr(c) -> bool:
    return c.contact_linear_solver == "pcr" or c.matrixfree_representation


def _reads_hunt_crossley(c) -> bool:
    return c.discrete_contact_approximation != "sap"


def _reads_sap_contact(c) -> bool:
    return c.discrete_contact_approximation == "sap"


def _reads_fused_kernel(c) -> bool:
    return c.newton_path == "fused" and c.contact_linear_solver == "cholesky"


# Knobs that only some configurations read: knob -> (does this config read it?, the setting that does).
_CONDITIONAL_KNOBS = MappingProxyType({
    "rho": (_reads_line_search_decay, "line_search_variant='armijo_decay'"),
    "armijo_c": (_reads_line_search_decay, "line_search_variant='armijo_decay'"),
    **{k: (_reads_pcr, "contact_linear_solver='pcr' or matrixfree_representation=True")
       for k in ("pcr_max_iterations", "pcr_rtol", "pcr_atol", "pcr_regularization")},
    **{k: (_reads_hunt_crossley, "discrete_contact_approximation='lagged' or 'similar'")
       for k in ("stiction_tolerance", "fallback_hc_dissipation")},
    **{k: (_reads_sap_contact, "discrete_contact_approximation='sap'") for k in ("contact_tau_d", "contact_beta")},
    "fused_max_registers": (_reads_fused_kernel, "newton_path='fused' with contact_linear_solver='cholesky'"),
    "fused_hessian": (_reads_fused_kernel, "newton_path='fused' with contact_linear_solver='cholesky'"),
    "fused_cholesky": (_reads_fused_kernel, "newton_path='fused' with contact_linear_solver='cholesky'"),
})
_WARNED: set = set()  # (knob, reader): each unused-knob warning once per process


def _warn_unused_knobs(config) -> None:
    """Warn once per knob and process when an explicitly set knob has no effect in ``config``."""
    for knob in sorted(config._explicit & _CONDITIONAL_KNOBS.keys()):
        reads, reader = _CONDITIONAL_KNOBS[knob]
        if reads(config) or (knob, reader) in _WARNED:
            continue
        _WARNED.add((knob, reader))
        warnings.warn(f"SapConfig: {knob}={getattr(config, knob)!r} has no effect: only {reader} reads it",
                      SapConfigWarning, stacklevel=_caller_stacklevel())


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the sap packages (and dataclass ``__init__``),
    so a warning points at the user's line whichever constructor or solver they called."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == "<string>"
                                 or frame.f_code.co_filename.startswith(_PACKAGES_ROOT)):
        level, frame = level + 1, frame.f_back
    return level


_PACKAGES_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sap_")


def _choice(field_name: str, value, aliases: dict, valid: tuple) -> str:
    if isinstance(value, str):
        k = _key(value)
        if k in aliases:
            return aliases[k]
        if k.replace("_", "") in aliases:  # approx_32 → approx32
            return aliases[k.replace("_", "")]
    raise ValueError(f"{field_name}: {value!r} is not valid; valid: {', '.join(valid)}")


def normalize_preset(name) -> str:
    """Canonical preset name (``approx32``, ``approx64``, ``drake``) or ``ValueError``."""
    return _choice("contact_preset_variant", name, _PRESET_ALIASES, tuple(PRESETS))


def _precision(field_name: str, value) -> str:
    if not isinstance(value, str):
        try:
            dt = np.dtype(value)
        except TypeError:
            dt = None
        if dt is not None and dt in (np.float32, np.float64):
            return "fp32" if dt == np.float32 else "fp64"
    return _choice(field_name, value, _PRECISION_ALIASES, PRECISIONS)


def precision_dtype(precision: str):
    """``np.float32`` for ``"fp32"``, ``np.float64`` for ``"fp64"`` (aliases accepted)."""
    return np.float32 if _precision("precision", precision) == "fp32" else np.float64


def _int(field_name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{field_name}: must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{field_name}: must be an integer >= {minimum}, got {value}")
    return int(value)


def _real(field_name: str, value, *, low: float, low_open: bool, high: float = math.inf,
          high_open: bool = True, note: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{field_name}: must be a real number, got {value!r}")
    x = float(value)
    ok = math.isfinite(x) and (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
    if not ok:
        lo = f"({low}" if low_open else f"[{low}"
        hi = "inf)" if high == math.inf else (f"{high})" if high_open else f"{high}]")
        raise ValueError(f"{field_name}: must be finite and in {lo}, {hi}{note}, got {value!r}")
    return x


# ----------------------------------------------------------------------------- groups

def _knob(flat: str):
    """A group field standing for the SapConfig knob ``flat``; ``None`` means "not set"."""
    return field(default=None, metadata={"knob": flat})


class _Group:
    """What every settings group shares: the map from its attributes to SapConfig's knobs."""

    @classmethod
    def knobs(cls) -> dict[str, str]:
        """``{group attribute: SapConfig knob}``, in field order."""
        return {f.name: f.metadata["knob"] for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class NewtonSettings(_Group):
    """When Newton's method on the SAP cost stops (``cfg.newton``; Newton's method, not the Newton
    physics engine of ``sap_newton``). Read by the Newton loop: ``sap_ref.contact_solve`` (its
    ``solve`` and ``stopping_criterion``) and sap_ref's line search ``exact_root``, which stops at
    once where the slope is below the cost criterion; in sap_gpu, its Newton loop and line searches.

    Attributes:
        max_iterations: Newton iteration cap (``max_iterations``).
        optimality_abs_tol / optimality_rel_tol: ε_a and ε_r of the optimality criterion
            (``optimality_abs_tol`` / ``optimality_rel_tol``).
        cost_abs_tol / cost_rel_tol: the cost criterion (``cost_abs_tol`` / ``cost_rel_tol``;
            line-search-dependent defaults).
    """

    max_iterations: int | None = _knob("max_iterations")
    optimality_abs_tol: float | None = _knob("optimality_abs_tol")
    optimality_rel_tol: float | None = _knob("optimality_rel_tol")
    cost_abs_tol: float | None = _knob("cost_abs_tol")
    cost_rel_tol: float | None = _knob("cost_rel_tol")


@dataclass(frozen=True)
class LineSearchSettings(_Group):
    """The line search along each Newton direction (``cfg.line_search``). Read by
    ``sap_ref.line_search`` (every search takes this group; ``exact_root`` also takes the cost
    tolerances of :class:`NewtonSettings`) and, in sap_gpu, by the line-search kernels.

    Attributes:
        variant: ``monotone_decay``, ``armijo_decay`` or ``exact_root`` (``line_search_variant``).
        max_iterations: probes per line search (``line_search_max_iterations``; 40, or 100 for
            ``exact_root``).
        rho: ``armijo_decay``'s decay factor (``rho``).
        armijo_c: ``armijo_decay``'s sufficient-decrease constant (``armijo_c``).
        relative_slop: the cost slop relative to the local cost (``line_search_relative_slop``).
    """

    variant: str | None = _knob("line_search_variant")
    max_iterations: int | None = _knob("line_search_max_iterations")
    rho: float | None = _knob("rho")
    armijo_c: float | None = _knob("armijo_c")
    relative_slop: float | None = _knob("line_search_relative_slop")


@dataclass(frozen=True)
class LinearSolveSettings(_Group):
    """The linear solves (``cfg.linear_solve``): the Newton system H Δv = −∇ℓ and, with
    ``matrixfree_representation``, the free motion's A (v* − v₀) = h k. Read by
    ``sap_ref.contact_solve.newton_direction``, ``sap_ref.linear_solve.PcrSettings.from_config``
    and the free motion; in sap_gpu, by the Cholesky and PCR kernels.

    Attributes:
        solver: ``cholesky`` or ``pcr`` (``contact_linear_solver``).
        precision: ``fp32``/``fp64`` of the Newton system's solve (``contact_linear_solve_precision``).
        pcr_max_iterations / pcr_rtol / pcr_atol / pcr_regularization: PCR's cap, stopping rule
            and Jacobi regularization (the ``pcr_*`` knobs).
        matrixfree_representation: the free motion by PCR too (``matrixfree_representation``).
    """

    solver: str | None = _knob("contact_linear_solver")
    precision: str | None = _knob("contact_linear_solve_precision")
    pcr_max_iterations: int | None = _knob("pcr_max_iterations")
    pcr_rtol: float | None = _knob("pcr_rtol")
    pcr_atol: float | None = _knob("pcr_atol")
    pcr_regularization: float | None = _knob("pcr_regularization")
    matrixfree_representation: bool | None = _knob("matrixfree_representation")


@dataclass(frozen=True)
class ContactModelSettings(_Group):
    """The contact constraints (``cfg.contact_model``): which approximation, the material values of
    shapes that set none, the contact weights and points, and the contact slots. Read by the
    collision (slots, fallback materials) and the constraint stage (``sap_ref.contact_jacobian``,
    ``sap_ref.constraints``, the solver's contact parameters) of either backend.

    Attributes:
        approximation: ``sap``, ``lagged`` or ``similar`` (``discrete_contact_approximation``).
        tau_d: τ_d of a shape that sets none (``contact_tau_d``; ``sap`` only).
        beta: near-rigid threshold β (``contact_beta``; ``sap`` only).
        sigma: friction regularization σ (``contact_sigma``).
        fallback_stiffness / fallback_mu: k and μ of a shape that sets none.
        stiction_tolerance: v_s of the Hunt–Crossley friction (``lagged``, ``similar``).
        fallback_hc_dissipation: Hunt–Crossley d of a shape that sets none (``lagged``, ``similar``).
        weight_mode: ``body_inertia`` or ``diag_delassus`` (``contact_weight_mode``).
        point_mode: ``witness_point`` or ``contact_midpoint`` (``contact_point_mode``).
        weight_precision: ``fp32``/``fp64`` of w, R, v̂ (``sap_contact_weight_precision``).
        max_rigid_contact: contact slots per world (``max_rigid_contact``).
    """

    approximation: str | None = _knob("discrete_contact_approximation")
    tau_d: float | None = _knob("contact_tau_d")
    beta: float | None = _knob("contact_beta")
    sigma: float | None = _knob("contact_sigma")
    fallback_stiffness: float | None = _knob("fallback_stiffness")
    fallback_mu: float | None = _knob("fallback_mu")
    stiction_tolerance: float | None = _knob("stiction_tolerance")
    fallback_hc_dissipation: float | None = _knob("fallback_hc_dissipation")
    weight_mode: str | None = _knob("contact_weight_mode")
    point_mode: str | None = _knob("contact_point_mode")
    weight_precision: str | None = _knob("sap_contact_weight_precision")
    max_rigid_contact: int | None = _knob("max_rigid_contact")


@dataclass(frozen=True)
class GpuKernelSettings(_Group):
    """How sap_gpu lays its Newton loop on the device (``cfg.gpu_kernel``): read by sap_gpu's
    solver when it builds its kernels; sap_ref reads none of it. None of it changes an iterate
    beyond the last bits (the choices of ``fused_hessian`` and ``fused_cholesky``).

    Attributes:
        newton_path: ``fused`` or ``staged`` (``newton_path``).
        fused_max_registers: the fused kernel's register cap (``fused_max_registers``).
        fused_hessian: ``rows`` or ``tiles`` (``fused_hessian``).
        fused_cholesky: ``auto``, ``tile`` or ``lanes`` (``fused_cholesky``).
    """

    newton_path: str | None = _knob("newton_path")
    fused_max_registers: int | str | None = _knob("fused_max_registers")
    fused_hessian: str | None = _knob("fused_hessian")
    fused_cholesky: str | None = _knob("fused_cholesky")


@dataclass(frozen=True)
class TimeStepSettings(_Group):
    """The preset and what the time step's stages read outside the contact model, the Newton loop
    and the linear solves (``cfg.time_step``; not the step length h, which ``step`` takes): the
    boundary's pose precision, the free motion's precision, the precision of ℓ, ∇ℓ and H, and the
    position update. Read by the solver's step (``sap_ref.solver``, ``sap_gpu.solver``) and its
    stages: ``sap_ref.boundary``, ``sap_ref.free_motion``, ``sap_ref.contact_solve``,
    ``sap_ref.integration``.

    Attributes:
        preset: ``approx32``, ``approx64`` or ``drake`` (``contact_preset_variant``).
        f64_boundary_pose: the boundary pose in float64 (``use_f64_boundary_pose``).
        free_motion_precision: ``fp32``/``fp64`` of the free motion solve (``free_motion_solve_precision``).
        contact_solve_precision: ``fp32``/``fp64`` of ℓ, ∇ℓ, H (``contact_solve_precision``).
        position_integration: ``midpoint`` or ``sap_euler`` (``position_integration``).
    """

    preset: str | None = _knob("contact_preset_variant")
    f64_boundary_pose: bool | None = _knob("use_f64_boundary_pose")
    free_motion_precision: str | None = _knob("free_motion_solve_precision")
    contact_solve_precision: str | None = _knob("contact_solve_precision")
    position_integration: str | None = _knob("position_integration")


# SapConfig's attribute for each group -> its settings class.
GROUP_SETTINGS = MappingProxyType({
    "newton": NewtonSettings,
    "line_search": LineSearchSettings,
    "linear_solve": LinearSolveSettings,
    "contact_model": ContactModelSettings,
    "gpu_kernel": GpuKernelSettings,
    "time_step": TimeStepSettings,
})
# Group -> the SapConfig knobs it holds: every knob in exactly one group (tests/test_config.py).
GROUPS = MappingProxyType({name: tuple(cls.knobs().values()) for name, cls in GROUP_SETTINGS.items()})


class _GroupView:
    """A read-only attribute of SapConfig: its group ``cls`` holding the config's resolved knobs.
    Computed on each read, so the flat fields stay the one source of equality, hashing and replace."""

    def __init__(self, cls, what: str):
        self.cls = cls
        self.__doc__ = f"{what}, resolved (:class:`{cls.__name__}`)."

    def __get__(self, config, owner=None):
        if config is None:
            return self
        return self.cls(**{attr: getattr(config, knob) for attr, knob in self.cls.knobs().items()})


def _flatten_groups(kwargs: dict) -> dict:
    """``kwargs`` with each group object replaced by the knobs it sets, under their flat names.

    ``ValueError`` for a group of the wrong class, or for a knob given both flat and in a group
    with different values (naming both)."""
    flat = {k: v for k, v in kwargs.items() if k not in GROUP_SETTINGS}
    for name, group in kwargs.items():
        if name not in GROUP_SETTINGS or group is None:
            continue
        cls = GROUP_SETTINGS[name]
        if not isinstance(group, cls):
            raise ValueError(f"{name}: expected a {cls.__name__}, got {type(group).__name__}")
        for attr, knob in cls.knobs().items():
            value = getattr(group, attr)
            if value is None:
                continue
            if flat.get(knob) is not None and flat[knob] != value:
                raise ValueError(f"{knob}={flat[knob]!r} conflicts with {name}.{attr}={value!r}: give one of them")
            flat[knob] = value
    return flat


class _PresetDefault(str):
    """The type of ``from_preset``'s default preset: equal to "approx32", but told apart from an
    explicit "approx32" so that a ``time_step`` group's preset does not conflict with the default."""


_PRESET_DEFAULT = _PresetDefault("approx32")


@dataclass(frozen=True)
class SapConfig:
    """Every knob of the SAP time step (docs/presets.md). ``None`` = preset / dependent default.

    The flat fields below are the configuration; the groups ``newton``, ``line_search``,
    ``linear_solve``, ``contact_model``, ``gpu_kernel`` and ``time_step`` are read-only views of
    them (:data:`GROUPS`), so equality, hashing and ``replace`` see the flat fields only. The
    constructor takes flat fields only; ``from_preset`` and ``replace`` also take groups.

    Attributes:
        contact_preset_variant: ``approx32`` (default), ``approx64`` or ``drake``.
        use_f64_boundary_pose: compute the boundary pose (public↔SAP conversion, kinematics
            at the boundary) in float64; False rounds it through float32.
        free_motion_solve_precision: ``fp32``/``fp64`` for the A (v* − v₀) = h k solve.
        contact_solve_precision: ``fp32``/``fp64`` for the ℓ, ∇ℓ, H buffers.
        contact_linear_solve_precision: ``fp32``/``fp64`` for H d = −∇ℓ.
        sap_contact_weight_precision: ``fp32``/``fp64`` for the weights w, R, v̂.
        contact_weight_mode: ``body_inertia`` or ``diag_delassus`` (Drake's w = ‖J diag(A)⁻¹Jᵀ‖_F/3).
        contact_point_mode: ``witness_point`` or ``contact_midpoint`` (Drake's stiffness-weighted point).
        position_integration: ``midpoint`` ((v₀+v₁)/2, normalized quaternions) or
            ``sap_euler`` (Drake: q₁ = q₀ + h N(q₀) v₁).
        line_search_variant: ``exact_root`` (default), ``monotone_decay``, ``armijo_decay``.
        line_search_max_iterations: probes per line search; 40, or 100 for ``exact_root``.
        rho: ``armijo_decay`` decay factor in (0, 1) (0.8).
        armijo_c: Armijo sufficient-decrease constant in (0, 1) (1e-4).
        line_search_relative_slop: cost slop relative to the local cost; default
            1000·ε of the ``contact_solve_precision`` dtype.
        max_iterations: Newton iteration cap (100, Drake's default).
        optimality_abs_tol: ε_a of the optimality criterion [√J] (1e-14, docs/formulation.md § Defaults).
        optimality_rel_tol: ε_r of the optimality criterion (1e-6, docs/formulation.md § Defaults).
        cost_abs_tol / cost_rel_tol: cost criterion; monotone_decay 0.0 / 5e-3,
            armijo_decay and exact_root 1e-30 / 1e-15.
        contact_tau_d: dissipation time scale τ_d [s] of a shape that sets none (0.1 s,
            SceneGraph's per-geometry default; a pair of such shapes gets 0.2 s).
        contact_beta: near-rigid threshold β of the contact constraint (1.0).
        contact_sigma: friction regularization σ (1e-3).
        fallback_stiffness: point-contact stiffness [N/m] of a shape that sets none (1e6).
        fallback_mu: friction coefficient of a shape that sets none (0.5).
        max_rigid_contact: contact slots per world (≥ 0).
        contact_linear_solver: ``cholesky`` (default: dense factorization of H) or ``pcr``
            (matrix-free preconditioned conjugate residual, H·p = A·p + Jᵀ(G(J·p))).
        pcr_max_iterations: PCR iteration cap per linear solve (200).
        pcr_rtol / pcr_atol: PCR stops when ‖r‖ ≤ max(atol, rtol·‖b‖); rtol defaults to 1e-10
            with an fp64 ``contact_linear_solve_precision``, 1e-6 with fp32; atol 0.
        pcr_regularization: ε_reg ≥ 0 added to diag(H) in the Jacobi preconditioner (0).
        matrixfree_representation: solve the free motion A (v* − v₀) = h k with PCR on A·p
            products too (no factorization of A); defaults to ``contact_linear_solver == "pcr"``.
        newton_path: how sap_gpu lays the Newton loop on the device: ``fused`` (default: one
            block of threads per world runs its whole loop in one launch) or ``staged`` (one
            batched kernel per stage and Newton iteration). Both compute the same iterates;
            PCR always runs staged. sap_ref's single host loop is the same for either.
        fused_max_registers: a cap on the registers per thread of the fused Newton kernel on a
            CUDA device: ``"auto"`` (default: sap_gpu's cap per kernel, 128 with an fp32 and 168
            with an fp64 ``contact_linear_solve_precision`` for a world of up to 32 DOFs whose H
            is factored in the lanes' registers, none for the other fused kernels), ``"none"``
            (the compiler's choice) or an integer from 32 to 255 (CUDA's ``__maxnreg__``).
            Fewer registers let more worlds run at once on a multiprocessor; what does not fit
            is spilled to local memory. A tuning knob for speed only: it changes no result.
            docs/benchmarks.md gives what it measured. No effect on the CPU device, the staged
            path or sap_ref.
        fused_hessian: how the fused Newton kernel forms H = A + JᵀGJ: ``rows`` (default: the
            block's lanes build H row by row in global memory, then the tile factorization loads
            it) or ``tiles`` (H and −∇ℓ are assembled in the block's shared memory by tile
            products of J's rows, slab by slab, and factored and solved there). ``tiles`` applies
            to worlds of one tile (nv ≤ 32); larger worlds form H by rows. The two give H up to
            the order of its sums (last bits), so iterates agree to the solver's tolerance, not
            bit for bit. ``rows`` is the faster on a GPU (on an H100 ``tiles`` ran 0.83× its
            throughput, docs/benchmarks.md). Not read by the staged path, PCR or sap_ref.
        fused_cholesky: how the fused Newton kernel factors H and solves for Δv: ``lanes`` (one
            row of H per lane of the world's warp, held in registers and eliminated with warp
            shuffles; no shared memory), ``tile`` (Warp's tile Cholesky, cuSolverDx on CUDA, on a
            shared-memory tile loaded from H's rows) or ``auto`` (default: ``lanes`` on a GPU,
            ``tile`` on Warp's CPU device, the faster of the two on each). ``lanes`` applies to
            worlds of one tile (nv ≤ 32) with ``fused_hessian="rows"``; elsewhere the tile
            factorization runs. The two solve the same system to rounding (last bits), so
            iterates agree to the solver's tolerance, not bit for bit. On an H100 with humanoid
            worlds ``lanes`` ran 1.02–1.12× (approx32) and 1.08–1.15× (drake) the throughput of
            ``tile`` from 1024 to 8192 worlds; on the CPU device, where a block is one lane that
            eliminates all 32 rows itself, ``tile`` ran 1.25× (approx32) and 1.39× (drake) faster
            (docs/benchmarks.md § The factorization on the CPU device).
            Not read by the staged path, PCR or sap_ref.
        discrete_contact_approximation: the contact constraint, ``sap`` (default: SAP's
            compliant friction cone, reads k, τ_d, β, σ), ``lagged`` or ``similar`` (the
            Hunt–Crossley constraint, reads k, d, σ and the stiction tolerance; Drake's plant
            default is ``lagged``). Drake's names ``kSap``, ``kLagged``, ``kSimilar`` are accepted.
            Independent of the preset (docs/presets.md § Contact approximation).
        stiction_tolerance: v_s [m/s] of the Hunt–Crossley friction (> 0; Drake's
            ``MultibodyPlantConfig::stiction_tolerance``, 1e-4). ``sap`` does not read it.
        fallback_hc_dissipation: Hunt–Crossley dissipation d [s/m] of a shape that sets none
            (≥ 0; 50, SceneGraph's default ``hunt_crossley_dissipation``). ``sap`` does not read it.
    """

    contact_preset_variant: str = "approx32"
    use_f64_boundary_pose: bool | None = None
    free_motion_solve_precision: str | None = None
    contact_solve_precision: str | None = None
    contact_linear_solve_precision: str | None = None
    sap_contact_weight_precision: str | None = None
    contact_weight_mode: str | None = None
    contact_point_mode: str | None = None
    position_integration: str | None = None
    line_search_variant: str = DEFAULT_LINE_SEARCH
    line_search_max_iterations: int | None = None
    rho: float = 0.8
    armijo_c: float = 1e-4
    line_search_relative_slop: float | None = None
    max_iterations: int = 100
    optimality_abs_tol: float = 1e-14
    optimality_rel_tol: float = 1e-6
    cost_abs_tol: float | None = None
    cost_rel_tol: float | None = None
    contact_tau_d: float = 0.1
    contact_beta: float = 1.0
    contact_sigma: float = 1e-3
    fallback_stiffness: float = 1e6
    fallback_mu: float = 0.5
    max_rigid_contact: int = 64
    contact_linear_solver: str = "cholesky"
    pcr_max_iterations: int = PCR_MAX_ITERATIONS_DEFAULT
    pcr_rtol: float | None = None
    pcr_atol: float = 0.0
    pcr_regularization: float = 0.0
    matrixfree_representation: bool | None = None
    newton_path: str = DEFAULT_NEWTON_PATH
    fused_max_registers: int | str | None = FUSED_MAX_REGISTERS_AUTO
    fused_hessian: str = DEFAULT_FUSED_HESSIAN
    fused_cholesky: str = DEFAULT_FUSED_CHOLESKY
    discrete_contact_approximation: str = DEFAULT_CONTACT_APPROXIMATION
    stiction_tolerance: float = 1e-4
    fallback_hc_dissipation: float = 50.0
    # Fields the user set explicitly (kept so replace() can re-expand a preset).
    _explicit: frozenset = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name != "_explicit"}
        if not self._explicit:
            set_("_explicit", frozenset(
                k for k, d in defaults.items()
                if getattr(self, k) is not None and (d is None or getattr(self, k) != d)
            ))

        preset = normalize_preset(self.contact_preset_variant)
        set_("contact_preset_variant", preset)
        for knob, value in PRESETS[preset].items():
            if getattr(self, knob) is None:
                set_(knob, value)

        if not isinstance(self.use_f64_boundary_pose, (bool, np.bool_)):
            raise ValueError(f"use_f64_boundary_pose: must be True or False, got {self.use_f64_boundary_pose!r}")
        set_("use_f64_boundary_pose", bool(self.use_f64_boundary_pose))
        for knob in ("free_motion_solve_precision", "contact_solve_precision",
                     "contact_linear_solve_precision", "sap_contact_weight_precision"):
            set_(knob, _precision(knob, getattr(self, knob)))
        set_("contact_weight_mode", _choice("contact_weight_mode", self.contact_weight_mode,
                                            {k: k for k in CONTACT_WEIGHT_MODES}, CONTACT_WEIGHT_MODES))
        set_("contact_point_mode", _choice("contact_point_mode", self.contact_point_mode,
                                           {k: k for k in CONTACT_POINT_MODES}, CONTACT_POINT_MODES))
        set_("position_integration", _choice("position_integration", self.position_integration,
                                             {k: k for k in POSITION_INTEGRATIONS}, POSITION_INTEGRATIONS))
        ls = _choice("line_search_variant", self.line_search_variant, _LINE_SEARCH_ALIASES,
                     LINE_SEARCH_VARIANTS)
        set_("line_search_variant", ls)

        if self.line_search_max_iterations is None:
            set_("line_search_max_iterations", EXACT_ROOT_MAX_ITERATIONS_DEFAULT if ls == "exact_root"
                 else LINE_SEARCH_MAX_ITERATIONS_DEFAULT)
        set_("line_search_max_iterations", _int("line_search_max_iterations", self.line_search_max_iterations, 1))
        set_("max_iterations", _int("max_iterations", self.max_iterations, 1))
        set_("max_rigid_contact", _int("max_rigid_contact", self.max_rigid_contact, 0))
        solver = _choice("contact_linear_solver", self.contact_linear_solver, {k: k for k in LINEAR_SOLVERS},
                         LINEAR_SOLVERS)
        set_("contact_linear_solver", solver)
        set_("pcr_max_iterations", _int("pcr_max_iterations", self.pcr_max_iterations, 1))
        if self.pcr_rtol is None:
            set_("pcr_rtol", PCR_RTOL_DEFAULTS[self.contact_linear_solve_precision])
        set_("pcr_rtol", _real("pcr_rtol", self.pcr_rtol, low=0.0, low_open=False))
        set_("pcr_atol", _real("pcr_atol", self.pcr_atol, low=0.0, low_open=False))
        set_("pcr_regularization", _real("pcr_regularization", self.pcr_regularization, low=0.0, low_open=False))
        if self.matrixfree_representation is None:
            set_("matrixfree_representation", solver == "pcr")
        if not isinstance(self.matrixfree_representation, (bool, np.bool_)):
            raise ValueError(f"matrixfree_representation: must be True or False, got "
                             f"{self.matrixfree_representation!r}")
        set_("matrixfree_representation", bool(self.matrixfree_representation))
        set_("newton_path", _choice("newton_path", self.newton_path, {k: k for k in NEWTON_PATHS}, NEWTON_PATHS))
        cap = self.fused_max_registers
        word = cap.strip().lower() if isinstance(cap, str) else None
        if cap is None or word == FUSED_MAX_REGISTERS_AUTO:  # None: not set
            set_("fused_max_registers", FUSED_MAX_REGISTERS_AUTO)
        elif word == FUSED_MAX_REGISTERS_NONE:
            set_("fused_max_registers", FUSED_MAX_REGISTERS_NONE)
        else:
            if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or not (
                    FUSED_MAX_REGISTERS_RANGE[0] <= cap <= FUSED_MAX_REGISTERS_RANGE[1]):
                raise ValueError(f"fused_max_registers: must be {FUSED_MAX_REGISTERS_AUTO!r} (the default: sap_gpu's "
                                 f"cap per kernel), {FUSED_MAX_REGISTERS_NONE!r} (the compiler's choice) or an integer "
                                 f"from {FUSED_MAX_REGISTERS_RANGE[0]} to {FUSED_MAX_REGISTERS_RANGE[1]}, got {cap!r}")
            set_("fused_max_registers", int(cap))
        set_("fused_hessian", _choice("fused_hessian", self.fused_hessian, {k: k for k in FUSED_HESSIANS},
                                      FUSED_HESSIANS))
        set_("fused_cholesky", _choice("fused_cholesky", self.fused_cholesky, {k: k for k in FUSED_CHOLESKYS},
                                       FUSED_CHOLESKYS))
        set_("discrete_contact_approximation", _choice("discrete_contact_approximation",
                                                       self.discrete_contact_approximation, _APPROXIMATION_ALIASES,
                                                       CONTACT_APPROXIMATIONS))

        abs_default, rel_default = COST_TOL_DEFAULTS[ls]
        if self.cost_abs_tol is None:
            set_("cost_abs_tol", abs_default)
        if self.cost_rel_tol is None:
            set_("cost_rel_tol", rel_default)
        if self.line_search_relative_slop is None:
            eps = np.finfo(precision_dtype(self.contact_solve_precision)).eps
            set_("line_search_relative_slop", RELATIVE_SLOP_FACTOR * float(eps))

        # Absolute tolerances may be 0 (relative test only: monotone_decay's own default);
        # relative tolerances must be > 0 or the criterion could never be met in floating point.
        set_("rho", _real("rho", self.rho, low=0.0, low_open=True, high=1.0))
        set_("armijo_c", _real("armijo_c", self.armijo_c, low=0.0, low_open=True, high=1.0))
        set_("line_search_relative_slop", _real("line_search_relative_slop", self.line_search_relative_slop,
                                                low=0.0, low_open=False))
        set_("optimality_abs_tol", _real("optimality_abs_tol", self.optimality_abs_tol, low=0.0, low_open=False))
        set_("optimality_rel_tol", _real("optimality_rel_tol", self.optimality_rel_tol, low=0.0, low_open=True))
        set_("cost_abs_tol", _real("cost_abs_tol", self.cost_abs_tol, low=0.0, low_open=False))
        set_("cost_rel_tol", _real("cost_rel_tol", self.cost_rel_tol, low=0.0, low_open=True))
        set_("contact_tau_d", _real("contact_tau_d", self.contact_tau_d, low=0.0, low_open=False, note=" s"))
        set_("contact_beta", _real("contact_beta", self.contact_beta, low=0.0, low_open=True))
        set_("contact_sigma", _real("contact_sigma", self.contact_sigma, low=0.0, low_open=True))
        set_("fallback_stiffness", _real("fallback_stiffness", self.fallback_stiffness, low=0.0, low_open=True,
                                         note=" N/m"))
        set_("fallback_mu", _real("fallback_mu", self.fallback_mu, low=0.0, low_open=False))
        set_("stiction_tolerance", _real("stiction_tolerance", self.stiction_tolerance, low=0.0, low_open=True,
                                         note=" m/s"))
        set_("fallback_hc_dissipation", _real("fallback_hc_dissipation", self.fallback_hc_dissipation, low=0.0,
                                              low_open=False, note=" s/m"))
        _warn_unused_knobs(self)

    # ------------------------------------------------------------------ groups

    newton = _GroupView(NewtonSettings, "The Newton loop's stopping rules")
    line_search = _GroupView(LineSearchSettings, "The line search")
    linear_solve = _GroupView(LinearSolveSettings, "The linear solves")
    contact_model = _GroupView(ContactModelSettings, "The contact constraints")
    gpu_kernel = _GroupView(GpuKernelSettings, "How sap_gpu lays its Newton loop on the device")
    time_step = _GroupView(TimeStepSettings, "The preset and the time step's other stages")

    # ------------------------------------------------------------------ constructors

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        """Names of every configurable knob."""
        return tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))

    @classmethod
    def from_preset(cls, contact_preset_variant: str = _PRESET_DEFAULT, **overrides) -> "SapConfig":
        """Expand preset ``contact_preset_variant``, then apply ``overrides`` (each wins).

        ``SapConfig.from_preset("drake", line_search_variant="exact_root")`` and
        ``SapConfig.from_preset(**scene.solver_kwargs)`` both work. ``None`` values mean
        "not set". Unknown override names raise ``ValueError`` listing the valid knobs.

        An override may also be a group (``line_search=LineSearchSettings(variant="exact_root")``):
        the knobs it sets (its fields that are not ``None``) apply as if given flat, so a resolved
        group such as ``cfg.line_search`` sets all of its knobs explicitly. A knob given both flat
        (or as ``contact_preset_variant``) and in a group with a different value raises ``ValueError``.
        """
        valid = cls.knob_names()
        unknown = sorted(set(overrides) - set(valid) - set(GROUP_SETTINGS))
        if unknown:
            raise ValueError(f"unknown SapConfig knob(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
        if type(contact_preset_variant) is not _PresetDefault:
            overrides["contact_preset_variant"] = contact_preset_variant
        overrides = _flatten_groups(overrides)
        preset = overrides.pop("contact_preset_variant", "approx32")
        overrides = {k: v for k, v in overrides.items() if v is not None}
        return cls(contact_preset_variant=preset, **overrides)

    def replace(self, **overrides) -> "SapConfig":
        """A new config: this one's explicit choices plus ``overrides``, re-expanded.

        Changing ``contact_preset_variant`` or ``line_search_variant`` refreshes every knob
        that was never set explicitly. Groups are accepted as in :meth:`from_preset`; what they
        set wins over this config's explicit choices like a flat override.
        """
        overrides = _flatten_groups(overrides)
        kept = {k: getattr(self, k) for k in self._explicit if k != "contact_preset_variant"}
        preset = overrides.pop("contact_preset_variant", self.contact_preset_variant)
        return SapConfig.from_preset(preset, **{**kept, **overrides})

    def dtype(self, knob: str):
        """NumPy dtype of a precision knob, e.g. ``cfg.dtype("contact_linear_solve_precision")``."""
        if knob not in ("free_motion_solve_precision", "contact_solve_precision",
                        "contact_linear_solve_precision", "sap_contact_weight_precision"):
            raise ValueError(f"knob: {knob!r} is not a precision knob")
        return precision_dtype(getattr(self, knob))

    def as_dict(self) -> dict:
        """Every knob and its resolved value."""
        return {k: getattr(self, k) for k in self.knob_names()}


def collision_pipeline_args(model, max_rigid_contact, config) -> tuple[int, SapConfig]:
    """``(max_rigid_contact, config)`` of a collision pipeline (either backend), validated:
    ``ValueError`` naming the argument for a non-model, a capacity that is not an integer ≥ 0,
    or a config that is not a :class:`SapConfig` (``None`` gives ``SapConfig()``)."""
    from .model import SapModel

    if not isinstance(model, SapModel):
        raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
    if isinstance(max_rigid_contact, bool) or not isinstance(max_rigid_contact, (int, np.integer)) \
            or max_rigid_contact < 0:
        raise ValueError(f"max_rigid_contact: must be an integer >= 0, got {max_rigid_contact!r}")
    if config is not None and not isinstance(config, SapConfig):
        raise ValueError(f"config: expected a SapConfig or None, got {type(config).__name__}")
    return int(max_rigid_contact), SapConfig() if config is None else config
