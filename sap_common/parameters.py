"""Per-world parameters: which model fields may differ between the worlds of one batch, and their checks.

Both backends' ``WorldParameters`` (``sap_ref.WorldParameters`` on NumPy arrays,
``sap_gpu.WorldParameters`` on device arrays) hold one value per world of each field in
:data:`PARAMETER_FIELDS`, start at the model's values and are changed with ``set(name, values,
world_mask=None)``. The names are :class:`~sap_common.model.SapModel` field names, the values the
model's per-world shapes with a leading world axis, ``(num_worlds, *shape)``. World ``w`` of a
batch then steps exactly as a one-world model built with ``model.replace(**params.world_fields(w))``
(docs/scaling.md § Per-world parameters).

Host values are checked here, before anything is written, with the model's own rules, world by
world: :func:`check_worlds` raises a ``ValueError`` naming the field, the world, the element and
the valid range. The topology, the geometry and the shape pairs are the model's and are the same in
every world; a change to them is a new model.
"""

from __future__ import annotations

import numpy as np

from .enums import JointType
from .model import INERTIA_SYMMETRY_RTOL, INERTIA_TRIANGLE_RTOL

__all__ = ["PARAMETER_FIELDS", "BODY_FIELDS", "DOF_FIELDS", "SHAPE_FIELDS", "parameter_shape", "check_name",
           "host_values", "world_mask", "check_worlds", "symmetrized"]

BODY_FIELDS = ("body_mass", "body_com", "body_inertia")
DOF_FIELDS = ("joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd", "joint_effort_limit",
              "joint_limit_lower", "joint_limit_upper", "joint_limit_ke", "joint_limit_kd")
SHAPE_FIELDS = ("shape_material_mu", "shape_material_ke", "shape_material_tau", "shape_material_hcd",
                "shape_margin")
#: Every field a world may hold its own value of, in the order ``WorldParameters`` lists them.
PARAMETER_FIELDS = BODY_FIELDS + DOF_FIELDS + SHAPE_FIELDS + ("gravity",)

_AXIS_JOINTS = (int(JointType.PRISMATIC), int(JointType.REVOLUTE), int(JointType.D6))


def check_name(name) -> str:
    """``name`` if it is a per-world field, else a ``ValueError`` listing the valid names."""
    if name not in PARAMETER_FIELDS:
        raise ValueError(f"name: {name!r} is not a per-world parameter; valid: {', '.join(PARAMETER_FIELDS)}")
    return name


def parameter_shape(model, name: str) -> tuple:
    """The shape of one world's value of field ``name`` (the model's array shape)."""
    return tuple(np.shape(getattr(model, check_name(name))))


def world_mask(mask, num_worlds: int) -> np.ndarray:
    """``world_mask`` as a (num_worlds,) bool array (None: every world); a ``ValueError`` otherwise."""
    if mask is None:
        return np.ones(num_worlds, bool)
    a = np.asarray(mask)
    if a.shape != (num_worlds,) or not (a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"world_mask: expected a bool or integer array shaped ({num_worlds},) or None, got "
                         f"{a.dtype} {a.shape}")
    return a != 0


def host_values(model, name: str, values) -> np.ndarray:
    """Host ``values`` of field ``name`` as a (num_worlds, *shape) float64 array: one world's value
    ``(*shape)`` is every world's. A NumPy array or scalar must be float64 (nothing is converted); a Python
    number or list is read as float64. ``ValueError`` naming the field on another shape or dtype."""
    shape = parameter_shape(model, name)
    W = model.num_worlds
    if isinstance(values, (np.ndarray, np.generic)):  # a NumPy scalar (np.float32(1)) too: never converted
        if values.dtype != np.float64:
            raise ValueError(f"{name}: expected float64 values, got {values.dtype}")
        a = values
    else:
        try:
            a = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: expected numbers shaped {shape} or {(W, *shape)}, got "
                             f"{type(values).__name__}") from None
    if a.shape == shape:
        return np.broadcast_to(a, (W, *shape)).copy()
    if a.shape == (W, *shape):
        return np.array(a)
    raise ValueError(f"{name}: expected shape {shape} (every world) or {(W, *shape)} (one value per world), "
                     f"got {a.shape}")


def symmetrized(inertia: np.ndarray) -> np.ndarray:
    """``(I + Iᵀ)/2``: what the model stores of a checked inertia (the same arithmetic, so a world's
    inertia and ``model.replace(body_inertia=…)``'s are equal bit for bit)."""
    return 0.5 * (inertia + np.swapaxes(inertia, -1, -2))


def _fail(name: str, w: int, where: str, rule: str, got) -> None:
    got = got.tolist() if isinstance(got, np.ndarray) else float(got) if isinstance(got, np.floating) else got
    raise ValueError(f"{name}[world {w}{where}]: {rule}, got {got}")


def _first(bad: np.ndarray, worlds: np.ndarray):
    """(world, element index) of the first True of ``bad`` (rows: ``worlds``), or None."""
    hits = np.argwhere(bad)
    if not len(hits):
        return None
    return int(worlds[hits[0][0]]), tuple(int(i) for i in hits[0][1:])


def check_worlds(model, values: dict, worlds, changed, forbid_rigid: bool = False) -> None:
    """``ValueError`` unless the worlds ``worlds`` of ``values`` (every field of
    :data:`PARAMETER_FIELDS`, (num_worlds, *shape) float64 arrays: the candidate after a ``set``)
    obey the model's rules for the fields in ``changed`` and those checked with them (a limit
    against the other limit, an inertia against its mass). ``forbid_rigid``: a Hunt–Crossley
    solver reads these parameters, and an infinite ``shape_material_ke`` on a shape of a pair is
    refused (sap_common.collision_rules.check_hunt_crossley_materials)."""
    worlds = np.asarray(worlds, dtype=np.int64)
    if not len(worlds):
        return
    changed = set(changed)
    m = model
    bname = lambda i: f", body {i} ({m.body_name[i]})"  # noqa: E731
    dname = lambda i: f", DOF {i}"  # noqa: E731
    sname = lambda i: f", shape {i} ({m.shape_name[i]})"  # noqa: E731
    v = {k: values[k][worlds] for k in PARAMETER_FIELDS}
    if changed & {"body_mass", "body_inertia"}:
        hit = _first(~(np.isfinite(v["body_mass"]) & (v["body_mass"] >= 0.0)), worlds)
        if hit:
            w, (b,) = hit
            _fail("body_mass", w, bname(b), "must be finite and >= 0 kg", values["body_mass"][w, b])
        _check_inertia(m, values, v, worlds, bname)
    if "body_com" in changed:
        hit = _first(~np.all(np.isfinite(v["body_com"]), axis=-1), worlds)
        if hit:
            w, (b,) = hit
            _fail("body_com", w, bname(b), "must be finite", values["body_com"][w, b])
    for name in ("joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd", "joint_limit_ke",
                 "joint_limit_kd"):
        if name in changed:
            hit = _first(~(np.isfinite(v[name]) & (v[name] >= 0.0)), worlds)
            if hit:
                w, (i,) = hit
                _fail(name, w, dname(i), "must be finite and >= 0", values[name][w, i])
    if changed & {"joint_target_ke", "joint_target_kd"} and m.joint_dof_count:
        dof_joint = np.repeat(np.arange(m.joint_count), np.diff(m.joint_qd_start))
        no_drive = ~np.isin(m.joint_type[dof_joint], _AXIS_JOINTS)
        for name in ("joint_target_ke", "joint_target_kd"):
            hit = _first((v[name] > 0.0) & no_drive, worlds)
            if hit:
                w, (i,) = hit
                jt = JointType(int(m.joint_type[dof_joint[i]])).name
                _fail(name, w, dname(i), f"drives act on PRISMATIC, REVOLUTE and D6 DOFs only (this DOF is a "
                      f"{jt} joint's), so it must be 0", values[name][w, i])
    if "joint_effort_limit" in changed:
        hit = _first(~(v["joint_effort_limit"] > 0.0), worlds)
        if hit:
            w, (i,) = hit
            _fail("joint_effort_limit", w, dname(i), "must be > 0 (inf = no limit)", values["joint_effort_limit"][w, i])
    if changed & {"joint_limit_lower", "joint_limit_upper"}:
        _check_limits(m, values, v, worlds, dname)
    for name, rule, ok in (
            ("shape_margin", "must be finite and >= 0 m", lambda x: np.isfinite(x) & (x >= 0.0)),
            ("shape_material_mu", "must be >= 0 (NaN = unset)", lambda x: np.isnan(x) | (np.isfinite(x) & (x >= 0.0))),
            ("shape_material_ke", "must be > 0 N/m, inf = rigid (NaN = unset)", lambda x: np.isnan(x) | (x > 0.0)),
            ("shape_material_tau", "must be finite and >= 0 s (NaN = unset)",
             lambda x: np.isnan(x) | (np.isfinite(x) & (x >= 0.0))),
            ("shape_material_hcd", "must be finite and >= 0 s/m (NaN = unset)",
             lambda x: np.isnan(x) | (np.isfinite(x) & (x >= 0.0)))):
        if name in changed:
            hit = _first(~ok(v[name]), worlds)
            if hit:
                w, (s,) = hit
                _fail(name, w, sname(s), rule, values[name][w, s])
    if forbid_rigid and "shape_material_ke" in changed and len(m.shape_pair):
        in_pairs = np.zeros(m.shape_count, bool)
        in_pairs[np.asarray(m.shape_pair).ravel()] = True
        hit = _first(np.isinf(v["shape_material_ke"]) & in_pairs, worlds)
        if hit:
            w, (s,) = hit
            _fail("shape_material_ke", w, sname(s), "inf (rigid) has no Hunt–Crossley counterpart; the solver "
                  "reading these parameters uses a Hunt–Crossley approximation, so give a finite stiffness > 0 "
                  "(or NaN for fallback_stiffness)", values["shape_material_ke"][w, s])
    if "gravity" in changed:
        hit = _first(~np.all(np.isfinite(v["gravity"]), axis=-1, keepdims=True), worlds)
        if hit:
            w, _ = hit
            _fail("gravity", w, "", "must be finite", values["gravity"][w])
    if changed & {"joint_limit_lower", "joint_limit_upper", "joint_limit_ke", "joint_target_ke", "joint_target_kd"}:
        _check_row_pattern(m, values, v, worlds, dname)
    if changed & {"body_mass", "body_inertia", "joint_armature"}:
        _check_mass_matrix(m, values, worlds)


def _check_row_pattern(m, values, v, worlds, dname) -> None:
    """Which limits and drives exist is the model's, in every world (their rows are laid out once,
    sap_common.rows): a bound is finite, a limit stiffness > 0 and a drive gain > 0 exactly where
    the model's are (a DISTANCE joint's lower bound > 0 where the model's is). Their values may
    differ per world; adding or removing a limit or a drive is a new model."""
    from .rows import driven_dofs

    driven = np.zeros(m.joint_dof_count, bool)
    driven[driven_dofs(m)] = True
    w_driven = (v["joint_target_ke"] > 0.0) | (v["joint_target_kd"] > 0.0)
    hit = _first(w_driven != driven, worlds)
    if hit:
        w, (i,) = hit
        has = "has a drive" if driven[i] else "has no drive"
        _fail("joint_target_ke/kd", w, dname(i), f"the model {has} on this DOF, and every world must too (a gain > 0 "
              f"exactly where the model's is; adding or removing a drive is a new model)",
              [float(values["joint_target_ke"][w, i]), float(values["joint_target_kd"][w, i])])
    distance_first = np.zeros(m.joint_dof_count, bool)
    for j in range(m.joint_count):
        if int(m.joint_type[j]) == int(JointType.DISTANCE) and m.joint_qd_start[j + 1] > m.joint_qd_start[j]:
            distance_first[int(m.joint_qd_start[j])] = True
    for name, rule_of in (("joint_limit_ke", lambda a: a > 0.0),
                          ("joint_limit_lower", lambda a: np.where(distance_first, a > 0.0, np.isfinite(a))),
                          ("joint_limit_upper", np.isfinite)):
        model_rule = rule_of(np.asarray(getattr(m, name)))
        hit = _first(rule_of(v[name]) != model_rule, worlds)
        if hit:
            w, (i,) = hit
            what = {"joint_limit_ke": "> 0", "joint_limit_lower": "> 0 (a distance)" if distance_first[i] else "finite",
                    "joint_limit_upper": "finite"}[name]
            state = "is" if model_rule[i] else "is not"
            _fail(name, w, dname(i), f"the model's value {state} {what} here, and every world's must match (which "
                  "limits exist is the model's; adding or removing one is a new model)", values[name][w, i])


def _check_inertia(m, values, v, worlds, bname) -> None:
    """sap_common.model.check_inertia for every (world, body), vectorized."""
    I, mass = v["body_inertia"], v["body_mass"]
    hit = _first(~np.all(np.isfinite(I), axis=(-2, -1)), worlds)
    if hit:
        w, (b,) = hit
        _fail("body_inertia", w, bname(b), "inertia must be finite", values["body_inertia"][w, b])
    scale = np.maximum(np.max(np.abs(I), axis=(-2, -1)), 1e-300)
    hit = _first(np.max(np.abs(I - np.swapaxes(I, -1, -2)), axis=(-2, -1)) > INERTIA_SYMMETRY_RTOL * scale, worlds)
    if hit:
        w, (b,) = hit
        _fail("body_inertia", w, bname(b), "inertia must be symmetric", values["body_inertia"][w, b])
    frame = (mass == 0.0) & ~np.any(I, axis=(-2, -1))  # a massless frame may have a zero inertia
    ev = np.linalg.eigvalsh(symmetrized(I))
    hit = _first(~frame & (ev[..., 0] <= 0.0), worlds)
    if hit:
        w, (b,) = hit
        _fail("body_inertia", w, bname(b), f"inertia must be positive definite (principal moments > 0; principal "
              f"moments {ev[np.flatnonzero(worlds == w)[0], b].tolist()})", values["body_inertia"][w, b])
    hit = _first(~frame & (ev[..., 0] + ev[..., 1] < ev[..., 2] * (1.0 - INERTIA_TRIANGLE_RTOL)), worlds)
    if hit:
        w, (b,) = hit
        _fail("body_inertia", w, bname(b), "principal moments violate the triangle inequality I_a + I_b >= I_c "
              "(no mass distribution has this inertia)", values["body_inertia"][w, b])


def _check_limits(m, values, v, worlds, dname) -> None:
    """The model's limit rules (sap_common.model.SapModel._check_joint_dofs) for every world."""
    lo, hi = v["joint_limit_lower"], v["joint_limit_upper"]
    for name, a in (("joint_limit_lower", lo), ("joint_limit_upper", hi)):
        hit = _first(np.isnan(a), worlds)
        if hit:
            w, (i,) = hit
            _fail(name, w, dname(i), "must not be NaN (use ±inf for no limit)", values[name][w, i])
    hit = _first(lo > hi, worlds)
    if hit:
        w, (i,) = hit
        _fail("joint_limit_lower", w, dname(i),
              f"must be <= joint_limit_upper ({float(values['joint_limit_upper'][w, i])})",
              float(values["joint_limit_lower"][w, i]))
    limited = np.isfinite(lo) | np.isfinite(hi)
    for j in range(m.joint_count):
        jt = int(m.joint_type[j])
        d0, d1 = int(m.joint_qd_start[j]), int(m.joint_qd_start[j + 1])
        if jt in (int(JointType.BALL), int(JointType.FREE)):
            hit = _first(limited[:, d0:d1], worlds)
            if hit:
                w, (k,) = hit
                _fail("joint_limit_lower/upper", w, dname(d0 + k), f"{JointType(jt).name} joints take no position "
                      "limits, so both must be ±inf", [float(values["joint_limit_lower"][w, d0 + k]),
                                                       float(values["joint_limit_upper"][w, d0 + k])])
        elif jt == int(JointType.DISTANCE):
            hit = _first(limited[:, d0 + 1:d1], worlds)
            if hit:
                w, (k,) = hit
                _fail("joint_limit_lower/upper", w, dname(d0 + 1 + k), "a DISTANCE joint keeps its limits in the "
                      "slot of its first DOF; the other slots must be ±inf",
                      [float(values["joint_limit_lower"][w, d0 + 1 + k]),
                       float(values["joint_limit_upper"][w, d0 + 1 + k])])
            hit = _first((lo[:, d0] < 0.0)[:, None], worlds)
            if hit:
                w, _ = hit
                _fail("joint_limit_lower", w, dname(d0), "a distance limit must be >= 0 m",
                      values["joint_limit_lower"][w, d0])


def _check_mass_matrix(m, values, worlds) -> None:
    """The model's mass-matrix check (sap_common.mass_check) for every world: the structural part
    vectorized; a world that needs the numerical part is checked as the one-world model it is."""
    from .mass_check import check_mass_matrix

    mass = values["body_mass"][worlds].copy()
    for j in m.joint_order[::-1]:  # composite masses, children first
        p = int(m.joint_parent[j])
        if int(m.joint_type[j]) == int(JointType.FIXED) and p >= 0:
            mass[:, p] += mass[:, int(m.joint_child[j])]
    arm = values["joint_armature"][worlds]
    suspect = np.zeros(len(worlds), bool)
    for j in range(m.joint_count):
        d0, d1 = int(m.joint_qd_start[j]), int(m.joint_qd_start[j + 1])
        if d1 > d0:
            suspect |= (mass[:, int(m.joint_child[j])] <= 0.0) & ~np.all(arm[:, d0:d1] > 0.0, axis=1)
    for k in np.flatnonzero(suspect):
        w = int(worlds[k])
        try:  # building the one-world model runs check_mass_matrix already; a failure there is this world's too
            check_mass_matrix(m.replace(num_worlds=1, **{name: values[name][w] for name in PARAMETER_FIELDS}))
        except ValueError as e:
            raise ValueError(f"world {w}: {e}") from None
