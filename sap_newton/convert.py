"""A ``newton.Model`` (every world) → :class:`~sap_common.model.SapModel` templates and index maps.

Newton keeps all worlds in one flat model (bodies, joints, coordinates, DOFs and shapes carry a
world index; −1 = global). A :class:`SapModel` is one world's template replicated
``num_worlds`` times, so the conversion extracts each Newton world, and worlds whose templates
are identical (same parameters, not only the same topology) share one :class:`WorldGroup`.
Worlds that differ — per-world masses, gains, gravity, geometry — land in separate groups, so
every world keeps its own parameters; the solver then runs one batched SAP solver per group.

Conventions (checked against Newton 1.8's source): Newton's ``JointType`` values, quaternion
order ``[x, y, z, w]``, transforms ``[p, q]``, ``body_qd = [v_COM, ω]`` in world,
``body_f = [f, τ_COM]`` in world, and FREE-joint ``joint_qd = [v_COM, ω]`` / ``joint_f =
[f, τ_COM]`` are exactly this project's *public* order, so coordinates, velocities and forces
copy one to one (index maps below) — only the per-DOF *parameters* of FREE joints (armature,
damping) are reordered, because SAP indexes them in its own ``[ω, v_O]`` order.

Mapping (Newton → SAP):

* **Bodies**: mass, COM, inertia (Newton float32 values, widened to float64).
* **Joints**: FREE (parent = world, identity joint frames), REVOLUTE, PRISMATIC, BALL, FIXED,
  D6 (two angular axes only when orthonormal: Newton orthonormalizes such a pair). DISTANCE
  and ROD joints are refused with a ``ValueError`` naming the joint.
* **Joint parameters**: armature, damping, limits (±``newton.MAXVAL`` → ±inf) with Newton's
  ``joint_limit_ke/kd`` (``joint_limits="newton"``) or Drake's near-rigid limit
  (``"drake"``), drives by ``joint_target_mode`` as Newton's MuJoCo solver reads them
  (POSITION: ke, kd toward ``(target_q, 0)``; VELOCITY: kd toward ``target_qd``;
  POSITION_VELOCITY: both; NONE/EFFORT: no drive), ``joint_effort_limit`` (≥ MAXVAL → inf) as
  the clamp of the drive. ``Control.joint_act`` is the feed-forward input of Newton's
  ``Actuator`` objects (which write ``Control.joint_f``); no Newton solver reads it, and neither
  does this one (SAP's ``joint_act`` stays 0): ``joint_f`` is applied unclamped.
  Passive joint stiffness, joint friction, drives on BALL/FREE DOFs, ball/free limits and
  MuJoCo-specific actuators have no SAP counterpart: dropped, each listed in ``notes`` and
  warned about once.
* **Shapes** with ``ShapeFlags.COLLIDE_SHAPES``: PLANE (static, a half-space; finite extents
  are noted), SPHERE, CAPSULE (along z), BOX. Newton's surface ``margin`` inflates spheres and
  capsules (radius + margin) and shifts planes; a box with margin > 0 (a rounded box) is
  refused. Newton's ``gap`` becomes SAP's detection ``shape_margin``. Other geometry types
  are refused with a ``ValueError`` naming the shape (``skip_unsupported_shapes=True`` drops
  them instead). Visual-only shapes and sites are not converted.
* **Materials** (``contact_material="newton"``): μ, stiffness ke [N/m] and the dissipation
  time scale τ_d = kd/ke [s] from Newton's ke [N/m] and kd [N·s/m]; ``"sap"`` keeps μ and
  leaves ke and τ_d unset, so the solver's fallbacks (``fallback_stiffness``,
  ``contact_tau_d``) apply.
* **Collision filtering**: the candidate pairs are Newton's own ``model.shape_contact_pairs``
  (groups, filter pairs, parent filtering, worlds): every shape gets group −1 and mask 1 and
  the pairs SAP's rules would add are written as explicit filter pairs. Newton pairs between
  bodies adjacent through a joint cannot be kept (SAP always filters them): noted.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import newton

from sap_common.builder import DEFAULT_LIMIT_KD, DEFAULT_LIMIT_KE
from sap_common.model import JointType, SapModel, ShapeType

__all__ = ["CONTACT_MATERIALS", "JOINT_LIMIT_MODELS", "WorldGroup", "NewtonConversion", "convert_model",
           "to_sap_model"]

CONTACT_MATERIALS = ("newton", "sap")
JOINT_LIMIT_MODELS = ("newton", "drake")

# Newton's "no limit" value (limits at or beyond it are infinite; effort limits too).
MAXVAL = float(getattr(newton, "MAXVAL", 1e10))
# A FREE joint frame counts as the identity when every entry of [p, q] is within this of
# [0, 0, 0, 0, 0, 0, 1]: Newton stores transforms in float32 (ulp ~6e-8 near 1).
IDENTITY_TOL = 1e-6
# Two D6 angular axes count as orthonormal within this (float32 axes, normalized by Newton).
ORTHONORMAL_TOL = 1e-5

_NEWTON_JOINTS = {int(newton.JointType.PRISMATIC): JointType.PRISMATIC,
                  int(newton.JointType.REVOLUTE): JointType.REVOLUTE,
                  int(newton.JointType.BALL): JointType.BALL,
                  int(newton.JointType.FIXED): JointType.FIXED,
                  int(newton.JointType.FREE): JointType.FREE,
                  int(newton.JointType.D6): JointType.D6}
_NEWTON_SHAPES = {int(newton.GeoType.PLANE): ShapeType.PLANE,
                  int(newton.GeoType.SPHERE): ShapeType.SPHERE,
                  int(newton.GeoType.CAPSULE): ShapeType.CAPSULE,
                  int(newton.GeoType.BOX): ShapeType.BOX}
_COLLIDE_SHAPES = int(newton.ShapeFlags.COLLIDE_SHAPES)
_KINEMATIC = int(newton.BodyFlags.KINEMATIC)
_MODE = newton.JointTargetMode
_POSITION_MODES = (int(_MODE.POSITION), int(_MODE.POSITION_VELOCITY))
_DAMPED_MODES = (int(_MODE.POSITION), int(_MODE.VELOCITY), int(_MODE.POSITION_VELOCITY))
_VELOCITY_MODES = (int(_MODE.VELOCITY), int(_MODE.POSITION_VELOCITY))
# Newton orders FREE-joint DOFs [linear, angular]; SAP's per-DOF parameters are [angular, linear].
_FREE_TO_SAP = np.array([3, 4, 5, 0, 1, 2])


@dataclass(frozen=True, eq=False)
class WorldGroup:
    """Newton worlds that share one SAP template, and where their data live in Newton's arrays.

    Attributes:
        sap_model: the template, ``num_worlds = len(worlds)``.
        worlds: the Newton world index of each world of the group, (Wg,).
        body_index: Newton body index of each template body, per world, (Wg, B).
        coord_index: Newton ``joint_q`` index of each template coordinate, (Wg, nq).
        dof_index: Newton ``joint_qd``/``joint_f`` index of each template DOF, (Wg, nv).
        target_q_index: Newton ``joint_target_q`` index feeding each DOF's drive position
            target, −1 where the DOF has no position drive (target 0), (Wg, nv).
        target_qd_index: Newton ``joint_target_qd`` index feeding each DOF's drive velocity
            target, −1 where the mode has no velocity target (target 0), (Wg, nv).
        shape_index: Newton shape index of each template shape, (Wg, S).
    """

    sap_model: SapModel
    worlds: np.ndarray
    body_index: np.ndarray
    coord_index: np.ndarray
    dof_index: np.ndarray
    target_q_index: np.ndarray
    target_qd_index: np.ndarray
    shape_index: np.ndarray


@dataclass(frozen=True, eq=False)
class NewtonConversion:
    """A converted ``newton.Model``: SAP templates per group of identical worlds, and routing.

    Attributes:
        groups: the world groups (one when every world is the same).
        world_group / world_slot: group of each Newton world and its index inside it,
            (world_count,).
        shape_group / shape_slot: for each Newton shape, the group and world slot of the world
            that owns it; −1 for global shapes (present in every world) and unconverted ones,
            (shape_count,).
        shape_local: template index of each Newton shape (global shapes have the same index
            in every template), −1 where not converted, (shape_count,).
        notes: Newton features with no SAP counterpart that were dropped (also warned about).
    """

    groups: tuple
    world_group: np.ndarray
    world_slot: np.ndarray
    shape_group: np.ndarray
    shape_slot: np.ndarray
    shape_local: np.ndarray
    notes: tuple

    @property
    def world_count(self) -> int:
        return len(self.world_group)

    @property
    def sap_model(self) -> SapModel:
        """The single template when every world is the same (``ValueError`` otherwise)."""
        if len(self.groups) != 1:
            raise ValueError(f"sap_model: the Newton worlds differ and form {len(self.groups)} templates; "
                             "use .groups[i].sap_model")
        return self.groups[0].sap_model


def _check_choice(name: str, value, valid) -> str:
    if value not in valid:
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, valid))}, got {value!r}")
    return value


def _host(model) -> dict:
    """The Newton arrays the conversion reads, copied to NumPy once."""
    names = ("body_mass", "body_com", "body_inertia", "body_flags", "body_world", "joint_type", "joint_parent",
             "joint_child", "joint_X_p", "joint_X_c", "joint_axis", "joint_dof_dim", "joint_q_start",
             "joint_qd_start", "joint_world", "joint_armature", "joint_damping", "joint_stiffness",
             "joint_friction", "joint_target_ke", "joint_target_kd", "joint_target_mode", "joint_effort_limit",
             "joint_limit_lower", "joint_limit_upper", "joint_limit_ke", "joint_limit_kd", "joint_enabled",
             "joint_mimic_joint", "joint_q", "joint_qd", "shape_type", "shape_body", "shape_transform",
             "shape_scale", "shape_margin", "shape_gap", "shape_flags", "shape_world", "shape_material_mu",
             "shape_material_ke", "shape_material_kd", "gravity")
    out = {}
    for name in names:
        a = getattr(model, name, None)
        if a is None:
            out[name] = None
            continue
        v = a.numpy()
        out[name] = v.astype(np.float64) if v.dtype.kind == "f" else v
    pairs = model.shape_contact_pairs
    out["pairs"] = np.zeros((0, 2), np.int64) if pairs is None else pairs.numpy().reshape(-1, 2).astype(np.int64)
    return out


def _refuse_unsupported(model, n: dict) -> None:
    """``ValueError`` for what SAP cannot represent at all (naming the first offender)."""
    if int(model.particle_count) > 0:
        raise ValueError(f"model: {model.particle_count} particles; SAP simulates rigid bodies only "
                         "(particles, cloth and soft bodies are not supported)")
    if int(model.constraint_mimic_count) > 0 or (n["joint_mimic_joint"] is not None
                                                 and np.any(n["joint_mimic_joint"] >= 0)):
        raise ValueError("model: mimic joints couple coordinates; SAP has no mimic constraint")
    if int(getattr(model, "tendon_count", 0)) > 0:
        raise ValueError(f"model: {model.tendon_count} tendons; SAP has no tendon model")
    for b in np.flatnonzero(n["body_flags"].astype(np.int64) & _KINEMATIC):
        raise ValueError(f"body {model.body_label[b]!r} (index {b}) is KINEMATIC; SAP simulates dynamic bodies only")
    for j, t in enumerate(n["joint_type"].astype(int)):
        label = f"joint {model.joint_label[j]!r} (index {j})"
        if t not in _NEWTON_JOINTS:
            name = newton.JointType(t).name if t in set(int(x) for x in newton.JointType) else str(t)
            raise ValueError(f"{label} is a {name} joint; SAP supports FREE, REVOLUTE, PRISMATIC, BALL, FIXED "
                             "and D6 joints")
        if not n["joint_enabled"][j]:
            raise ValueError(f"{label} is disabled (joint_enabled False); SAP has no disabled joints")
        if t == int(newton.JointType.FREE):
            ident = np.array([0, 0, 0, 0, 0, 0, 1.0])
            if n["joint_parent"][j] != -1:
                raise ValueError(f"{label}: a FREE joint must connect a body to the world (parent -1), got "
                                 f"parent body {int(n['joint_parent'][j])}")
            for frame in ("joint_X_p", "joint_X_c"):
                if np.max(np.abs(n[frame][j] - ident)) > IDENTITY_TOL:
                    raise ValueError(f"{label}: a FREE joint with a non-identity {frame} ({n[frame][j].tolist()}) "
                                     "has other coordinates than SAP's world pose of the body; put the pose in "
                                     "joint_q instead")
        if t == int(newton.JointType.D6) and int(n["joint_dof_dim"][j, 1]) == 2:
            d = int(n["joint_qd_start"][j] + n["joint_dof_dim"][j, 0])
            a0, a1 = n["joint_axis"][d], n["joint_axis"][d + 1]
            if max(abs(np.linalg.norm(a0) - 1), abs(np.linalg.norm(a1) - 1), abs(a0 @ a1)) > ORTHONORMAL_TOL:
                raise ValueError(f"{label}: a D6 joint with two angular axes {a0.tolist()}, {a1.tolist()} that are "
                                 "not orthonormal (Newton orthonormalizes such a pair, SAP rotates about the "
                                 "axes as given)")


def _effective_worlds(model, n: dict):
    """World of each body / joint / shape; a legacy single-world model's globals go to world 0."""
    W = int(model.world_count)
    single = W <= 1
    body_w = n["body_world"].astype(np.int64)
    joint_w = n["joint_world"].astype(np.int64)
    if single:
        body_w, joint_w = np.zeros_like(body_w), np.zeros_like(joint_w)
    for b in np.flatnonzero(body_w < 0):
        raise ValueError(f"body {model.body_label[b]!r} (index {b}) is global (world -1) in a model with {W} "
                         "worlds; SAP worlds cannot share a dynamic body")
    shape_body = n["shape_body"].astype(np.int64)
    shape_w = np.where(shape_body >= 0, body_w[np.maximum(shape_body, 0)] if len(body_w) else -1,
                       n["shape_world"].astype(np.int64))
    return max(W, 1), body_w, joint_w, shape_w


def _unique(names) -> tuple:
    seen, out = {}, []
    for s in names:
        s = str(s) or "unnamed"
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.append(s if k == 0 else f"{s}#{k}")
    return tuple(out)


class _Notes:
    def __init__(self):
        self.items: dict[str, list[str]] = {}

    def add(self, what: str, who: str) -> None:
        self.items.setdefault(what, [])
        if who not in self.items[what]:
            self.items[what].append(who)

    def lines(self) -> tuple:
        return tuple(f"{what}: {', '.join(who[:8])}{' …' if len(who) > 8 else ''} ({len(who)})"
                     for what, who in self.items.items())


def _shape_geometry(model, n, s, notes, skip):
    """``(ShapeType, size, X_BS)`` of Newton shape ``s``, or None to skip it."""
    t = int(n["shape_type"][s])
    label = f"shape {model.shape_label[s]!r} (index {s})"
    if t not in _NEWTON_SHAPES:
        name = newton.GeoType(t).name if t in set(int(x) for x in newton.GeoType) else str(t)
        if skip:
            notes.add(f"unsupported collision shapes skipped (SAP has plane, sphere, capsule, box)", label)
            return None
        raise ValueError(f"{label} is a {name} collision shape; SAP supports PLANE, SPHERE, CAPSULE and BOX "
                         "(pass skip_unsupported_shapes=True to drop such shapes)")
    st = _NEWTON_SHAPES[t]
    scale, margin, X = n["shape_scale"][s], float(n["shape_margin"][s]), n["shape_transform"][s].copy()
    if st == ShapeType.PLANE:
        if int(n["shape_body"][s]) != -1:
            raise ValueError(f"{label}: a plane on a body; SAP's planes are static half-spaces on the world")
        if scale[0] > 0 or scale[1] > 0:
            notes.add("finite planes treated as infinite half-spaces", label)
        if margin > 0:  # the inflated surface of a half-space is the same half-space, shifted
            R = _quat_to_matrix(X[3:])
            X[:3] = X[:3] + R[:, 2] * margin
        return st, np.zeros(3), X
    if st == ShapeType.SPHERE:
        return st, np.array([scale[0] + margin, 0.0, 0.0]), X
    if st == ShapeType.CAPSULE:
        return st, np.array([scale[0] + margin, scale[1], 0.0]), X
    if margin > 0:
        raise ValueError(f"{label}: a box with margin {margin} m is a rounded box, which SAP's box does not "
                         "model; set the shape's margin to 0")
    return st, np.array(scale[:3]), X


def _quat_to_matrix(q) -> np.ndarray:
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def _material(n, s, contact_material, notes, label):
    mu = float(n["shape_material_mu"][s])
    if contact_material == "sap":
        return mu, math.nan, math.nan
    ke, kd = float(n["shape_material_ke"][s]), float(n["shape_material_kd"][s])
    if not ke > 0:
        notes.add("shapes with ke <= 0 take the solver's fallback_stiffness and contact_tau_d", label)
        return mu, math.nan, math.nan
    return mu, ke, max(kd, 0.0) / ke


def _world_template(model, n, w, body_w, joint_w, shape_w, global_shapes, opts, notes):
    """SapModel keyword arguments and index maps of Newton world ``w``."""
    contact_material, joint_limits, skip = opts
    bodies = np.flatnonzero(body_w == w)
    joints = np.flatnonzero(joint_w == w)
    local_body = {int(b): i for i, b in enumerate(bodies)}
    for b in bodies:
        if not np.any(n["joint_child"][joints] == b):
            raise ValueError(f"body {model.body_label[b]!r} (index {b}) has no joint; SAP needs every body to be "
                             "the child of one joint (add_joint_free for a floating body)")
    q_start, qd_start = n["joint_q_start"].astype(np.int64), n["joint_qd_start"].astype(np.int64)
    coords, dofs, tq, tqd = [], [], [], []
    per_dof = {k: [] for k in ("armature", "damping", "target_ke", "target_kd", "effort", "lower", "upper",
                               "limit_ke", "limit_kd", "axis")}
    jt_out, parent, child, Xp, Xc, dof_dim, q_init, qd_init = [], [], [], [], [], [], [], []
    for J in joints:
        jt = _NEWTON_JOINTS[int(n["joint_type"][J])]
        label = f"{model.joint_label[J]!r}"
        p = int(n["joint_parent"][J])
        if p >= 0 and p not in local_body:
            raise ValueError(f"joint {label} (index {J}) connects bodies of different worlds")
        jt_out.append(int(jt))
        parent.append(local_body.get(p, -1))
        child.append(local_body[int(n["joint_child"][J])])
        Xp.append(n["joint_X_p"][J])
        Xc.append(n["joint_X_c"][J])
        dof_dim.append(n["joint_dof_dim"][J])
        cq = np.arange(q_start[J], q_start[J + 1])
        cd = np.arange(qd_start[J], qd_start[J + 1])
        coords.append(cq)
        dofs.append(cd)
        q_init.append(n["joint_q"][cq])
        qd_init.append(n["joint_qd"][cd])
        mode = n["joint_target_mode"][cd].astype(int)
        ke, kd = n["joint_target_ke"][cd], n["joint_target_kd"][cd]
        ke = np.where(np.isin(mode, _POSITION_MODES), ke, 0.0)
        kd = np.where(np.isin(mode, _DAMPED_MODES), kd, 0.0)
        lo, hi = n["joint_limit_lower"][cd].copy(), n["joint_limit_upper"][cd].copy()
        lo[lo <= -MAXVAL], hi[hi >= MAXVAL] = -math.inf, math.inf
        effort = n["joint_effort_limit"][cd].copy()
        effort[effort >= MAXVAL] = math.inf
        if np.any(~(effort > 0)):
            raise ValueError(f"joint {label} (index {J}): joint_effort_limit must be > 0, got {effort.tolist()}")
        armature, damping = n["joint_armature"][cd], n["joint_damping"][cd]
        if joint_limits == "newton":
            lke, lkd = n["joint_limit_ke"][cd], n["joint_limit_kd"][cd]
        else:
            lke, lkd = np.full(len(cd), DEFAULT_LIMIT_KE), np.full(len(cd), DEFAULT_LIMIT_KD)
        if n["joint_stiffness"] is not None and np.any(n["joint_stiffness"][cd] != 0):
            notes.add("passive joint stiffness (springs) dropped", label)
        if n["joint_friction"] is not None and np.any(n["joint_friction"][cd] != 0):
            notes.add("joint friction dropped", label)
        axis_joint = jt in (JointType.PRISMATIC, JointType.REVOLUTE, JointType.D6)
        pos_target = np.where(ke > 0, q_start[J] + np.arange(len(cd)), -1) if axis_joint else np.full(len(cd), -1)
        vel_target = np.where(np.isin(mode, _VELOCITY_MODES) & (kd > 0), cd, -1) if axis_joint \
            else np.full(len(cd), -1)
        if not axis_joint:
            if np.any(ke > 0) or np.any(kd > 0):
                notes.add("drives on BALL/FREE joints dropped", label)
            ke, kd = np.zeros(len(cd)), np.zeros(len(cd))
            if np.any(np.isfinite(lo)) or np.any(np.isfinite(hi)):
                notes.add("limits on BALL/FREE joints dropped", label)
            lo, hi = np.full(len(cd), -math.inf), np.full(len(cd), math.inf)
            effort = np.full(len(cd), math.inf)  # no drive to clamp
        if jt == JointType.FREE:
            if np.any(armature != 0) or np.any(damping != 0):
                notes.add("FREE-joint armature/damping applied in SAP's [ω, v_origin] coordinates", label)
            armature, damping = armature[_FREE_TO_SAP], damping[_FREE_TO_SAP]
            ke, kd, effort, lo, hi, lke, lkd = (a[_FREE_TO_SAP] for a in (ke, kd, effort, lo, hi, lke, lkd))
        tq.append(pos_target)
        tqd.append(vel_target)
        for k, v in (("armature", armature), ("damping", damping), ("target_ke", ke), ("target_kd", kd),
                     ("effort", effort), ("lower", lo), ("upper", hi), ("limit_ke", lke), ("limit_kd", lkd),
                     ("axis", n["joint_axis"][cd])):
            per_dof[k].append(np.asarray(v, dtype=np.float64))

    own_shapes = [s for s in np.flatnonzero(shape_w == w) if int(n["shape_flags"][s]) & _COLLIDE_SHAPES]
    shapes, shape_rows = [], []
    for s in list(global_shapes) + own_shapes:
        geom = _shape_geometry(model, n, int(s), notes, skip)
        if geom is None:
            continue
        st, size, X = geom
        b = int(n["shape_body"][s])
        label = f"{model.shape_label[s]!r}"
        mu, ke, tau = _material(n, int(s), contact_material, notes, label)
        shapes.append(int(s))
        shape_rows.append((int(st), local_body.get(b, -1), X, size, float(n["shape_gap"][s]), mu, ke, tau))

    cat = lambda key: np.concatenate(per_dof[key]) if per_dof[key] else np.zeros(0)  # noqa: E731
    g = n["gravity"]
    kwargs = dict(
        body_mass=n["body_mass"][bodies], body_com=n["body_com"][bodies].reshape(-1, 3),
        body_inertia=n["body_inertia"][bodies].reshape(-1, 3, 3),
        body_name=_unique(model.body_label[b] for b in bodies),
        joint_type=np.array(jt_out, np.int32), joint_parent=np.array(parent, np.int32),
        joint_child=np.array(child, np.int32), joint_X_p=np.array(Xp).reshape(-1, 7),
        joint_X_c=np.array(Xc).reshape(-1, 7), joint_dof_dim=np.array(dof_dim, np.int32).reshape(-1, 2),
        joint_name=_unique(model.joint_label[j] for j in joints),
        joint_axis=cat("axis").reshape(-1, 3), joint_armature=cat("armature"), joint_damping=cat("damping"),
        joint_target_ke=cat("target_ke"), joint_target_kd=cat("target_kd"), joint_effort_limit=cat("effort"),
        joint_limit_lower=cat("lower"), joint_limit_upper=cat("upper"), joint_limit_ke=cat("limit_ke"),
        joint_limit_kd=cat("limit_kd"),
        joint_q_init=np.concatenate(q_init) if q_init else np.zeros(0),
        joint_qd_init=np.concatenate(qd_init) if qd_init else np.zeros(0),
        shape_type=np.array([r[0] for r in shape_rows], np.int32),
        shape_body=np.array([r[1] for r in shape_rows], np.int32),
        shape_transform=np.array([r[2] for r in shape_rows]).reshape(-1, 7),
        shape_size=np.array([r[3] for r in shape_rows]).reshape(-1, 3),
        shape_margin=np.array([r[4] for r in shape_rows]),
        shape_material_mu=np.array([r[5] for r in shape_rows]),
        shape_material_ke=np.array([r[6] for r in shape_rows]),
        shape_material_tau=np.array([r[7] for r in shape_rows]),
        shape_collision_group=np.full(len(shape_rows), -1, np.int32),
        shape_contype=np.ones(len(shape_rows), np.int64), shape_conaffinity=np.ones(len(shape_rows), np.int64),
        shape_filter_pair=np.zeros((0, 2), np.int32),
        shape_name=_unique(model.shape_label[s] for s in shapes),
        gravity=g[w] if len(g) > w else g[0],
    )
    maps = dict(body_index=bodies, coord_index=np.concatenate(coords) if coords else np.zeros(0, np.int64),
                dof_index=np.concatenate(dofs) if dofs else np.zeros(0, np.int64),
                target_q_index=np.concatenate(tq) if tq else np.zeros(0, np.int64),
                target_qd_index=np.concatenate(tqd) if tqd else np.zeros(0, np.int64),
                shape_index=np.array(shapes, np.int64))
    return kwargs, maps


def _local_pairs(maps, newton_pairs) -> set:
    """Newton's candidate pairs among this world's template shapes, as sorted local index pairs."""
    local = np.full(int(newton_pairs.max(initial=-1)) + 1, -1, np.int64)
    known = maps["shape_index"][maps["shape_index"] < len(local)]
    local[known] = np.flatnonzero(maps["shape_index"] < len(local))
    a, b = local[newton_pairs[:, 0]], local[newton_pairs[:, 1]]
    keep = (a >= 0) & (b >= 0)
    return {(int(min(x, y)), int(max(x, y))) for x, y in zip(a[keep], b[keep])}


def _newton_filters(kwargs, wanted, notes, world_label):
    """Explicit filter pairs that make SAP's candidate pairs equal Newton's (``wanted``) for a world."""
    probe = SapModel(num_worlds=1, **kwargs)
    ours = {tuple(int(x) for x in p) for p in probe.shape_pair}
    for a, b in sorted(wanted - ours):
        notes.add("Newton shape pairs SAP never tests (same or jointed bodies, or both static)",
                  f"{world_label}: {probe.shape_name[a]!r}-{probe.shape_name[b]!r}")
    return np.array(sorted(ours - wanted), np.int32).reshape(-1, 2)


_KEY_SKIP = ("body_name", "joint_name", "shape_name", "joint_q_init", "joint_qd_init")


def _template_key(kwargs) -> bytes:
    parts = []
    for k in sorted(kwargs):
        if k in _KEY_SKIP:
            continue
        parts.append(k.encode() + np.ascontiguousarray(kwargs[k]).tobytes() + str(np.shape(kwargs[k])).encode())
    return b"|".join(parts)


def convert_model(model, *, contact_material: str = "newton", joint_limits: str = "newton",
                  skip_unsupported_shapes: bool = False) -> NewtonConversion:
    """Convert every world of ``model`` (a finalized ``newton.Model``); see the module docstring.

    Args:
        model: the Newton model (any device; read once on the host).
        contact_material: ``"newton"`` (ke, kd → stiffness and τ_d = kd/ke) or ``"sap"`` (the
            solver's fallback stiffness and τ_d); μ always comes from Newton.
        joint_limits: ``"newton"`` (limit stiffness/damping ``joint_limit_ke/kd``) or
            ``"drake"`` (Drake's near-rigid 1e12 with a 1 ms time scale).
        skip_unsupported_shapes: drop colliding shapes of types SAP does not have (noted)
            instead of raising.

    Raises:
        ValueError: naming the joint, shape, body or feature SAP cannot represent.
    """
    if not isinstance(model, newton.Model):
        raise ValueError(f"model: expected a newton.Model, got {type(model).__name__}")
    _check_choice("contact_material", contact_material, CONTACT_MATERIALS)
    _check_choice("joint_limits", joint_limits, JOINT_LIMIT_MODELS)
    if not isinstance(skip_unsupported_shapes, bool):
        raise ValueError(f"skip_unsupported_shapes: must be True or False, got {skip_unsupported_shapes!r}")
    if int(model.body_count) == 0 or int(model.joint_dof_count) == 0:
        raise ValueError("model: no articulated DOF (SAP needs at least one joint with a degree of freedom)")
    n = _host(model)
    _refuse_unsupported(model, n)
    W, body_w, joint_w, shape_w = _effective_worlds(model, n)
    global_shapes = [s for s in np.flatnonzero((n["shape_body"] < 0) & (shape_w < 0))
                     if int(n["shape_flags"][s]) & _COLLIDE_SHAPES]
    notes = _Notes()
    counts = getattr(model, "custom_frequency_counts", {}) or {}
    for key, what in (("mujoco:actuator", "MuJoCo actuators (control.mujoco.ctrl) not mapped; drive through "
                                          "joint_target_q/qd or joint_f"),
                      ("mujoco:equality_constraint", "MuJoCo equality constraints ignored")):
        if int(counts.get(key, 0)) > 0:
            notes.add(what, f"{int(counts[key])} in the model")
    opts = (contact_material, joint_limits, skip_unsupported_shapes)
    templates, order, filters = {}, [], {}
    for w in range(W):
        kwargs, maps = _world_template(model, n, w, body_w, joint_w, shape_w, global_shapes, opts, notes)
        wanted = _local_pairs(maps, n["pairs"])
        probe_key = _template_key(kwargs) + repr(sorted(wanted)).encode()
        if probe_key not in filters:  # one probe model per distinct world, not per world
            filters[probe_key] = _newton_filters(kwargs, wanted, notes, f"world {w}")
        kwargs["shape_filter_pair"] = filters[probe_key]
        key = _template_key(kwargs)
        if key not in templates:
            templates[key] = (kwargs, [])
            order.append(key)
        templates[key][1].append((w, maps))

    S_newton = len(n["shape_type"])
    world_group, world_slot = np.zeros(W, np.int32), np.zeros(W, np.int32)
    shape_group, shape_slot = np.full(S_newton, -1, np.int32), np.full(S_newton, -1, np.int32)
    shape_local = np.full(S_newton, -1, np.int32)
    groups = []
    for g, key in enumerate(order):
        kwargs, members = templates[key]
        sap_model = SapModel(num_worlds=len(members), **kwargs)
        stack = lambda k: np.stack([m[k] for _, m in members]).astype(np.int32).reshape(len(members), -1)  # noqa
        for slot, (w, maps) in enumerate(members):
            world_group[w], world_slot[w] = g, slot
            for i, s in enumerate(maps["shape_index"]):
                shape_local[s] = i
                if s not in global_shapes:
                    shape_group[s], shape_slot[s] = g, slot
        groups.append(WorldGroup(
            sap_model=sap_model, worlds=np.array([w for w, _ in members], np.int32),
            body_index=stack("body_index"), coord_index=stack("coord_index"), dof_index=stack("dof_index"),
            target_q_index=stack("target_q_index"), target_qd_index=stack("target_qd_index"),
            shape_index=stack("shape_index")))
    lines = notes.lines()
    for line in lines:
        warnings.warn(f"sap_newton: {line}", stacklevel=3)
    return NewtonConversion(groups=tuple(groups), world_group=world_group, world_slot=world_slot,
                            shape_group=shape_group, shape_slot=shape_slot, shape_local=shape_local, notes=lines)


def to_sap_model(model, **kwargs) -> SapModel:
    """The SAP model of a ``newton.Model`` whose worlds are all the same (``convert_model`` options).

    ``ValueError`` if the worlds differ (use :func:`convert_model` and its groups then).
    """
    return convert_model(model, **kwargs).sap_model
