"""A ``newton.Model`` (every world) → :class:`~sap_common.model.SapModel` templates and index maps.

Newton keeps all worlds in one flat model (bodies, joints, coordinates, DOFs and shapes carry a
world index; −1 = global). A :class:`SapModel` is one world's template replicated
``num_worlds`` times, so the conversion extracts each Newton world, and worlds whose templates
that share topology and geometry share one :class:`WorldGroup`, their differences in physical
parameters (masses, gains, limits, friction, gravity: ``sap_common.parameters.PARAMETER_FIELDS``)
kept as the group's per-world ``parameters``. Worlds that differ in anything else — topology,
geometry, which limits and drives exist — land in separate groups; the solver then runs one
batched SAP solver per group, reading the group's parameters per world.

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
* **Closed chains and mimics** (docs/formulation.md § Holonomic constraints): a loop joint (a
  body's second parent joint, the one outside Newton's articulations) becomes a ball constraint
  (BALL), a weld (FIXED) or a ball plus an axis alignment about the hinge axis (REVOLUTE)
  between the joint's frames on its parent and child; its own coordinates are not simulated;
  a disabled loop joint leaves its loop open (noted). A mimic relation (``joint_mimic_*``,
  enabled ``constraint_mimic_*``), q_follower = c₀ + c₁·q_reference, becomes a coupler between
  single-DOF joints. MuJoCo equality rows (``model.mujoco.equality_constraint_*``) are mapped
  through what Newton's MJCF importer projects them onto (connect → BALL loop joint, weld →
  FIXED loop joint, joint equality → mimic); of the rows without a projection, a connect
  becomes a ball and a weld a weld (body2's point or body1's frame placed where Newton's
  MuJoCo solver places them, at the reference pose) and a linear joint equality between scalar
  joints a coupler; the others (tendon, multi-DOF or nonlinear joint equalities, welds with
  torquescale 0) are ignored (noted). No row's ``solref``/``solimp`` is read, nor a weld's
  ``torquescale`` (SAP's constraints take Drake's near-rigid regularization).
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
  are noted), SPHERE, CAPSULE and CYLINDER (along z), BOX, ELLIPSOID; CONVEX_MESH as a convex
  mesh (the hull of its vertices times the shape scale), MESH as the convex hull of its vertices
  (Newton collides its triangles: the same solid where the surface is its hull, and a noted
  approximation otherwise, :func:`_mesh_points`), HFIELD as a height field with Newton's grid and
  triangles (:func:`_hfield`). Newton's surface ``margin`` offsets a shape's surface outward: it
  inflates spheres and capsules (radius + margin), shifts planes, and rounds a box, cylinder,
  ellipsoid or mesh (SAP's ``shape_rounding``: the shape swept by a ball of that radius); a height
  field with a margin is refused. A barrel cylinder (``shape_scale[2]`` > 0, its side a revolved
  arc, not a swept cylinder) is refused by name.
  Newton's ``gap`` becomes SAP's detection ``shape_margin``. Other geometry types are refused
  with a ``ValueError`` naming the shape (``skip_unsupported_shapes=True`` drops them instead).
  Visual-only shapes and sites are not converted.
* **Materials** (``contact_material="newton"``): μ, stiffness ke [N/m] and the dissipation
  time scale τ_d = kd/ke [s] from Newton's ke [N/m] and kd [N·s/m]; a shape whose ke is Newton's
  builder default (:data:`NEWTON_DEFAULT_KE`, 2.5e3: MuJoCo's default ``solref`` as Newton reads
  it, not a stiffness in N/m) has chosen none, and takes the solver's fallbacks
  (``fallback_stiffness``, ``contact_tau_d``) for k and τ_d, whatever its kd. ``"sap"`` keeps μ
  and leaves ke and τ_d unset on every shape.
* **Collision filtering**: the candidate pairs are Newton's own ``model.shape_contact_pairs``
  (groups, filter pairs, parent filtering, worlds): every shape gets group −1 and mask 1 and
  the pairs SAP's rules would add are written as explicit filter pairs. Newton pairs between
  bodies adjacent through a joint cannot be kept (SAP always filters them): noted.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass

import newton
import numpy as np
import warp as wp

from sap_common.builder import DEFAULT_LIMIT_KD, DEFAULT_LIMIT_KE
from sap_common.geometry import convex_hull
from sap_common.model import ConstraintType, JointType, SapModel, ShapeType
from sap_common.parameters import PARAMETER_FIELDS

__all__ = ["CONTACT_MATERIALS", "NEWTON_DEFAULT_KE", "NEWTON_DEFAULT_KD", "JOINT_LIMIT_MODELS", "WorldGroup",
           "NewtonConversion", "convert_model", "to_sap_model"]

wp.set_module_options({"enable_backward": False})

CONTACT_MATERIALS = ("newton", "sap")
# Newton's ModelBuilder.ShapeConfig defaults of the contact stiffness ke and damping kd (2.5e3 and
# 100 in Newton 1.8), as the float32 the model stores. They are MuJoCo's default solref (0.02 s,
# damping ratio 1) as Newton's MJCF importer converts it (ke = 1/(timeconst·dampratio)², kd =
# 2/timeconst): a stiffness per unit mass for Newton's MuJoCo solver, ignored by its XPBD solver,
# a penalty gain only for its semi-implicit ones. Read as N/m, ke = 2.5e3 lets a robot sink by
# centimetres where Newton's rigid solvers rest on the surface, so a shape whose ke is the default
# (unset: every shape of a builder that never set one, and every MJCF geom without a solref) takes
# the solver's fallback stiffness and τ_d (SapConfig.fallback_stiffness, contact_tau_d).
NEWTON_DEFAULT_KE = float(np.float32(newton.ModelBuilder.ShapeConfig().ke))
NEWTON_DEFAULT_KD = float(np.float32(newton.ModelBuilder.ShapeConfig().kd))
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
                  int(newton.GeoType.BOX): ShapeType.BOX,
                  int(newton.GeoType.CYLINDER): ShapeType.CYLINDER,
                  int(newton.GeoType.ELLIPSOID): ShapeType.ELLIPSOID,
                  int(newton.GeoType.MESH): ShapeType.CONVEX_MESH,  # by its convex hull (noted when not convex)
                  int(newton.GeoType.CONVEX_MESH): ShapeType.CONVEX_MESH,
                  int(newton.GeoType.HFIELD): ShapeType.HEIGHTFIELD}
_MESH = int(newton.GeoType.MESH)
_CONVEX_MESH = int(newton.GeoType.CONVEX_MESH)
_HFIELD = int(newton.GeoType.HFIELD)
# Newton 1.8 collides a height field's triangles as prisms extruded this far down [m] (its support
# function's TRIANGLE_PRISM_EXTRUSION): the terrain is solid 1 m below its surface. SAP's height field is
# solid down to a flat base; the conversion puts it this far below the field's lowest point.
NEWTON_HFIELD_EXTRUSION = 1.0
# A MESH collides as its convex hull; it *is* its hull (no warning) when every triangle lies on a face
# plane of the hull within this, relative to the mesh's size (Newton stores vertices in float32, whose
# rounding, ~6e-8 relative, must not make a convex mesh count as non-convex), and the triangles' area
# is the hull's within the same relative tolerance (an open mesh, or one folded inside, is not).
MESH_CONVEX_TOL = 1e-6
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
        param_index: Newton DOF whose parameters (armature, damping, gains, limits) each template
            DOF holds, (Wg, nv): ``dof_index`` but for FREE joints, whose parameters SAP keeps in
            its own ``[ω, v]`` order.
        target_q_index: Newton ``joint_target_q`` index feeding each DOF's drive position
            target, −1 where the DOF has no position drive (target 0), (Wg, nv).
        target_qd_index: Newton ``joint_target_qd`` index feeding each DOF's drive velocity
            target, −1 where the mode has no velocity target (target 0), (Wg, nv).
        shape_index: Newton shape index of each template shape, (Wg, S).
        parameters: the per-world parameters (``sap_common.parameters.PARAMETER_FIELDS``) whose values
            differ between the group's worlds: field → (Wg, *shape) values; the template holds the
            first world's. Empty when every world is the template.
    """

    sap_model: SapModel
    worlds: np.ndarray
    body_index: np.ndarray
    coord_index: np.ndarray
    dof_index: np.ndarray
    param_index: np.ndarray
    target_q_index: np.ndarray
    target_qd_index: np.ndarray
    shape_index: np.ndarray
    parameters: dict = dataclasses.field(default_factory=dict)


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
             "joint_articulation", "joint_mimic_joint", "joint_mimic_coeffs", "constraint_mimic_joint0",
             "constraint_mimic_joint1", "constraint_mimic_coef0", "constraint_mimic_coef1", "constraint_mimic_enabled",
             "joint_q", "joint_qd", "shape_type", "shape_body", "shape_transform", "shape_scale", "shape_margin",
             "shape_gap", "shape_flags", "shape_world", "shape_material_mu", "shape_material_ke", "shape_material_kd",
             "gravity")
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
    for follower, reference, _, _ in _mimics(model, n):
        for j in (follower, reference):
            t, dims = int(n["joint_type"][j]), n["joint_dof_dim"][j]
            if t not in (int(newton.JointType.REVOLUTE), int(newton.JointType.PRISMATIC)) and not (
                    t == int(newton.JointType.D6) and int(dims[0]) + int(dims[1]) == 1):
                raise ValueError(f"joint {model.joint_label[j]!r} (index {j}): a mimic joint maps to SAP's coupler, "
                                 "which couples single-DOF joints (REVOLUTE, PRISMATIC, a one-axis D6)")
    if int(getattr(model, "tendon_count", 0)) > 0:
        raise ValueError(f"model: {model.tendon_count} tendons; SAP has no tendon model")
    loops = set(int(j) for j in _loop_joints(n, np.arange(len(n["joint_type"])))[1])
    for j, t in enumerate(n["joint_type"].astype(int)):
        label = f"joint {model.joint_label[j]!r} (index {j})"
        if t not in _NEWTON_JOINTS:
            name = newton.JointType(t).name if t in set(int(x) for x in newton.JointType) else str(t)
            raise ValueError(f"{label} is a {name} joint; SAP supports FREE, REVOLUTE, PRISMATIC, BALL, FIXED "
                             "and D6 joints")
        if not n["joint_enabled"][j] and j not in loops:
            raise ValueError(f"{label} is disabled (joint_enabled False); SAP has no disabled tree joints")
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


def _mimics(model, n: dict) -> list:
    """``(follower, reference, offset, ratio)`` of every mimic relation (Newton joint indices):
    ``joint_mimic_joint``/``joint_mimic_coeffs`` and the enabled ``constraint_mimic_*`` entries,
    each meaning q_follower = offset + ratio·q_reference (a coupler, docs/formulation.md
    § Holonomic constraints)."""
    out = []
    if n["joint_mimic_joint"] is not None:
        for j in np.flatnonzero(n["joint_mimic_joint"] >= 0):
            c = n["joint_mimic_coeffs"][j]
            out.append((int(j), int(n["joint_mimic_joint"][j]), float(c[0]), float(c[1])))
    if int(getattr(model, "constraint_mimic_count", 0)) > 0:
        for i in np.flatnonzero(n["constraint_mimic_enabled"]):
            out.append((int(n["constraint_mimic_joint0"][i]), int(n["constraint_mimic_joint1"][i]),
                        float(n["constraint_mimic_coef0"][i]), float(n["constraint_mimic_coef1"][i])))
    return out


def _equality_rows(model, n: dict, count: int) -> dict:
    """The ``mujoco:equality_constraint`` rows no Newton loop joint or mimic carries, as constraints.

    Newton's MJCF importer projects a ``connect`` onto a BALL loop joint, a ``weld`` onto a FIXED
    one and a scalar ``joint`` equality onto a mimic; those projections are mapped as loop joints
    and mimics, not here. The other rows:

    * ``connect`` (bodies): a ball between ``anchor`` on body1 and the point of body2 that
      coincides with it at the reference pose, as Newton's MuJoCo solver places it (scalar joint
      coordinates 0, BALL joints at identity, FREE joints at ``joint_q``);
    * ``weld`` (bodies, torquescale > 0): a weld between frame P = ``relpose`` on body1 and
      Q = (``anchor``, body2's axes) on body2, MuJoCo's meaning of the two; a zero relpose
      quaternion (MuJoCo's "keep the initial pose") takes body2's frame Q relative to body1 at
      the reference pose;
    * ``joint`` between two scalar joints with a linear polynomial: the coupler
      q₁ = a₀ + a₁·q₂ (MuJoCo's coordinates relative to qpos0 are Newton's ``joint_q``);
    * anything else (tendon equalities, joint equalities on multi-DOF joints or with one joint
      or higher-order terms, welds with torquescale 0) is listed in ``ignored`` by label.

    Returns ``dict(connect=[(label, body1, body2, p_AP, p_BQ)], weld=[(label, body1, body2, X_AP,
    X_BQ)], joint=[(label, j1, j2, a0, a1)], ignored=[label])`` in Newton indices (−1 = world);
    disabled rows are left out."""
    out = dict(connect=[], weld=[], joint=[], ignored=[])
    if count == 0:
        return out
    ns = getattr(model, "mujoco", None)
    col = lambda k: getattr(ns, f"equality_constraint_{k}", None)  # noqa: E731
    host = lambda a, default: default if a is None else (a.numpy() if hasattr(a, "numpy") else np.asarray(a))  # noqa
    kind, target = host(col("target_kind"), np.zeros(count, np.int64)), host(col("target"), np.full(count, -1))
    labels = col("label")
    enabled = host(col("enabled"), np.ones(count, bool))
    eq_type, body1, body2 = host(col("type"), None), host(col("body1"), None), host(col("body2"), None)
    anchor, poly = host(col("anchor"), None), host(col("polycoef"), None)
    relpose, torquescale = host(col("relpose"), None), host(col("torquescale"), None)
    joint1, joint2 = host(col("joint1"), None), host(col("joint2"), None)
    label = lambda i: f"{labels[i]!r}" if labels is not None and len(labels) > i and labels[i] else f"row {i}"  # noqa
    X_ref = None
    for i in range(count):
        if not (kind[i] == 0 or target[i] < 0) or not enabled[i]:
            continue
        t = int(eq_type[i])
        if t == 0 and int(body1[i]) != int(body2[i]):
            if X_ref is None:
                X_ref = _reference_body_poses(model, n)
            a, b = int(body1[i]), int(body2[i])
            X_A, X_B = (np.array([0, 0, 0, 0, 0, 0, 1.0]) if k < 0 else X_ref[k] for k in (a, b))
            p_W = X_A[:3] + _quat_to_matrix(X_A[3:]) @ anchor[i].astype(np.float64)
            p_BQ = _quat_to_matrix(X_B[3:]).T @ (p_W - X_B[:3])
            out["connect"].append((label(i), a, b, anchor[i].astype(np.float64), p_BQ))
            continue
        if t == 1 and int(body1[i]) != int(body2[i]) and float(torquescale[i]) > 0.0:
            if X_ref is None:
                X_ref = _reference_body_poses(model, n)
            a, b = int(body1[i]), int(body2[i])
            X_BQ = np.array([*anchor[i].astype(np.float64), 0, 0, 0, 1.0])
            X_AP = relpose[i].astype(np.float64)
            if not np.any(X_AP[3:]):  # MuJoCo's sentinel: the bodies' relative pose at the reference pose
                X_A, X_B = (np.array([0, 0, 0, 0, 0, 0, 1.0]) if k < 0 else X_ref[k] for k in (a, b))
                X_AP = _compose(_invert(X_A), _compose(X_B, X_BQ))
            out["weld"].append((label(i), a, b, X_AP, X_BQ))
            continue
        if t == 2:
            j1, j2, c = int(joint1[i]), int(joint2[i]), poly[i].astype(np.float64)
            scalar = lambda j: j >= 0 and int(n["joint_dof_dim"][j].sum()) == 1  # noqa: E731
            if scalar(j1) and scalar(j2) and not np.any(c[2:5] != 0.0):
                out["joint"].append((label(i), j1, j2, float(c[0]), float(c[1])))
                continue
        out["ignored"].append(label(i))
    return out


def _compose(X_ab: np.ndarray, X_bc: np.ndarray) -> np.ndarray:
    """X_ac = X_ab · X_bc for transforms [p, q_xyzw]."""
    R = _quat_to_matrix(X_ab[3:])
    x1, y1, z1, w1 = X_ab[3:]
    x2, y2, z2, w2 = X_bc[3:]
    q = np.array([w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2, w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                  w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2, w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2])
    return np.concatenate([X_ab[:3] + R @ X_bc[:3], q])


def _invert(X: np.ndarray) -> np.ndarray:
    """X⁻¹ for a transform [p, q_xyzw] with a unit quaternion."""
    q_inv = np.array([-X[3], -X[4], -X[5], X[6]])
    return np.concatenate([-(_quat_to_matrix(q_inv) @ X[:3]), q_inv])


def _reference_body_poses(model, n: dict) -> np.ndarray:
    """World poses [p, q_xyzw] of Newton's bodies at the reference pose of its MuJoCo solver:
    scalar joint coordinates 0, BALL joints at identity, FREE joints at ``joint_q``, (body_count, 7)."""
    q = n["joint_q"].astype(np.float32).copy()
    qs = n["joint_q_start"].astype(np.int64)
    for j, t in enumerate(n["joint_type"].astype(int)):
        if t == int(newton.JointType.BALL):
            q[qs[j]:qs[j] + 4] = (0.0, 0.0, 0.0, 1.0)
        elif t in (int(newton.JointType.PRISMATIC), int(newton.JointType.REVOLUTE), int(newton.JointType.D6)):
            q[qs[j]:qs[j + 1]] = 0.0
    state = model.state()
    newton.eval_fk(model, wp.array(q, dtype=wp.float32, device=model.device), model.joint_qd, state)
    return state.body_q.numpy().astype(np.float64).reshape(-1, 7)


def _loop_joints(n: dict, joints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(tree, loops)``: a world's joints split into the tree (one joint per child body) and the
    loop joints, each a second joint of a body that already has one (the one outside Newton's
    articulations, else the later one)."""
    art = n.get("joint_articulation")
    by_child: dict = {}
    for j in joints:
        by_child.setdefault(int(n["joint_child"][j]), []).append(int(j))
    loops = set()
    for js in by_child.values():
        if len(js) > 1:
            keep = next((j for j in js if art is not None and art[j] >= 0), js[0])
            loops.update(j for j in js if j != keep)
    tree = np.array([j for j in joints if int(j) not in loops], dtype=joints.dtype)
    return tree, np.array(sorted(loops), dtype=joints.dtype)


def _constraints(model, n: dict, joints: np.ndarray, loops: np.ndarray, body_local: np.ndarray, bodies: np.ndarray,
                 equalities: dict) -> dict:
    """SapModel keyword arguments of a world's holonomic constraints (empty: none): a coupler per
    mimic relation among its ``joints``, per loop joint a ball (BALL), a weld (FIXED) or a ball
    plus an axis alignment about the hinge axis (REVOLUTE) between the joint's frames on its
    parent and its child, and the MuJoCo equality rows of :func:`_equality_rows` that belong to
    the world (docs/formulation.md § Holonomic constraints)."""
    local = {int(j): i for i, j in enumerate(joints)}
    rows = []
    mine = set(int(b) for b in bodies)
    for label, a, b, p_ap, p_bq in equalities["connect"]:
        if (a in mine or a < 0) and (b in mine or b < 0) and max(a, b) in mine:
            rows.append(dict(type=ConstraintType.BALL, name=f"equality:{label.strip(chr(39))}",
                             body_a=int(body_local[a]) if a >= 0 else -1, body_b=int(body_local[b]) if b >= 0 else -1,
                             X_a=np.array([*p_ap, 0, 0, 0, 1.0]), X_b=np.array([*p_bq, 0, 0, 0, 1.0])))
    for label, a, b, X_ap, X_bq in equalities["weld"]:
        if (a in mine or a < 0) and (b in mine or b < 0) and max(a, b) in mine:
            rows.append(dict(type=ConstraintType.WELD, name=f"equality:{label.strip(chr(39))}",
                             body_a=int(body_local[a]) if a >= 0 else -1, body_b=int(body_local[b]) if b >= 0 else -1,
                             X_a=X_ap, X_b=X_bq))
    for label, j1, j2, a0, a1 in equalities["joint"]:
        if j1 in local and j2 in local:
            rows.append(dict(type=ConstraintType.COUPLER, name=f"equality:{label.strip(chr(39))}", joint0=local[j1],
                             joint1=local[j2], gear_ratio=a1, offset=a0))
    for f, r, off, ratio in _mimics(model, n):
        if f not in local:
            continue
        if r not in local:
            raise ValueError(f"joint {model.joint_label[f]!r} (index {f}) mimics joint {model.joint_label[r]!r} of "
                             "another world or a loop joint")
        rows.append(dict(type=ConstraintType.COUPLER, name=f"mimic:{model.joint_label[f]}", joint0=local[f],
                         joint1=local[r], gear_ratio=ratio, offset=off))
    for j in loops:
        if not n["joint_enabled"][j]:
            continue  # a disabled loop joint leaves its loop open (noted by convert_model)
        label, t = model.joint_label[j], int(n["joint_type"][j])
        p, c = int(n["joint_parent"][j]), int(n["joint_child"][j])
        frames = dict(body_a=int(body_local[p]) if p >= 0 else -1, body_b=int(body_local[c]),
                      X_a=n["joint_X_p"][j], X_b=n["joint_X_c"][j])
        if t == int(newton.JointType.FIXED):
            rows.append(dict(type=ConstraintType.WELD, name=f"loop:{label}", **frames))
        elif t in (int(newton.JointType.BALL), int(newton.JointType.REVOLUTE)):
            rows.append(dict(type=ConstraintType.BALL, name=f"loop:{label}", **frames))
            if t == int(newton.JointType.REVOLUTE):
                rows.append(dict(type=ConstraintType.AXIS_ALIGN, name=f"loop:{label}:axis", axis=n["joint_axis"][
                    int(n["joint_qd_start"][j])], **frames))
        else:
            raise ValueError(f"joint {label!r} (index {j}) closes a loop (its child already has a joint) as a "
                             f"{newton.JointType(t).name} joint; SAP closes BALL, FIXED and REVOLUTE loop joints")
    if not rows:
        return {}
    ident = np.array([0, 0, 0, 0, 0, 0, 1.0])
    col = lambda key, default: [r.get(key, default) for r in rows]  # noqa: E731
    return dict(constraint_type=np.array([int(r["type"]) for r in rows], np.int32),
                constraint_name=_unique(r["name"] for r in rows),
                constraint_body_a=np.array(col("body_a", -1), np.int32),
                constraint_body_b=np.array(col("body_b", -1), np.int32),
                constraint_X_a=np.array(col("X_a", ident), np.float64).reshape(-1, 7),
                constraint_X_b=np.array(col("X_b", ident), np.float64).reshape(-1, 7),
                constraint_axis=np.array(col("axis", np.zeros(3)), np.float64).reshape(-1, 3),
                constraint_joint0=np.array(col("joint0", -1), np.int32),
                constraint_joint1=np.array(col("joint1", -1), np.int32),
                constraint_gear_ratio=np.array(col("gear_ratio", 1.0), np.float64),
                constraint_offset=np.array(col("offset", 0.0), np.float64))


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


def _quat_to_matrix(q) -> np.ndarray:
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def _shape_table(model, n, contact_material, skip, notes) -> dict:
    """SAP geometry and material of every Newton shape (``use`` marks the ones converted)."""
    S = len(n["shape_type"])
    t, body = n["shape_type"].astype(np.int64), n["shape_body"].astype(np.int64)
    colliding = (n["shape_flags"].astype(np.int64) & _COLLIDE_SHAPES) != 0
    supported = np.isin(t, list(_NEWTON_SHAPES))
    for s in np.flatnonzero(colliding & ~supported):
        label = f"shape {model.shape_label[s]!r} (index {s})"
        if not skip:
            name = newton.GeoType(int(t[s])).name if int(t[s]) in {int(x) for x in newton.GeoType} else str(t[s])
            raise ValueError(f"{label} is a {name} collision shape; SAP converts PLANE, SPHERE, CAPSULE, BOX, "
                             "CYLINDER, ELLIPSOID, MESH (by its convex hull), CONVEX_MESH and HFIELD "
                             "(pass skip_unsupported_shapes=True to drop such shapes)")
        notes.add("unsupported collision shapes skipped (SAP converts plane, sphere, capsule, box, cylinder, "
                  "ellipsoid, mesh, convex mesh, height field)", label)
    use = colliding & supported
    ours = np.array([int(_NEWTON_SHAPES.get(int(x), -1)) for x in t], np.int64).reshape(S)
    scale, margin, X = n["shape_scale"].reshape(S, 3), n["shape_margin"].reshape(S), n["shape_transform"].copy()
    plane, sphere, capsule, box, cylinder, ellipsoid = (
        use & (ours == int(k)) for k in (ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX,
                                         ShapeType.CYLINDER, ShapeType.ELLIPSOID))
    for s in np.flatnonzero(plane & (body >= 0)):
        raise ValueError(f"shape {model.shape_label[s]!r} (index {s}): a plane on a body; SAP's planes are "
                         "static half-spaces on the world")
    meshes, hfields = use & np.isin(t, (_MESH, _CONVEX_MESH)), use & (t == _HFIELD)
    for s in np.flatnonzero(hfields & (margin > 0)):
        raise ValueError(f"shape {model.shape_label[s]!r} (index {s}): a height field with margin {margin[s]} m is a "
                         "rounded terrain, which SAP's height field does not model; set the shape's margin to 0")
    for s in np.flatnonzero(cylinder & (scale[:, 2] != 0)):  # Newton's support function: barrel unless 0
        raise ValueError(f"shape {model.shape_label[s]!r} (index {s}): a barrel cylinder (shape_scale[2], the "
                         f"barrel radius, {scale[s, 2]} m: its side is a circular arc revolved about its axis), which "
                         "is not a cylinder swept by a ball and has no SAP shape; use a straight-sided cylinder "
                         "(barrel radius 0), with a margin for rounded edges")
    for s in np.flatnonzero(plane):
        if scale[s, 0] > 0 or scale[s, 1] > 0:
            notes.add("finite planes treated as infinite half-spaces", f"{model.shape_label[s]!r}")
        if margin[s] > 0:  # the inflated surface of a half-space is the same half-space, shifted
            X[s, :3] += _quat_to_matrix(X[s, 3:])[:, 2] * margin[s]
    size = np.zeros((S, 3))
    size[sphere, 0] = scale[sphere, 0] + margin[sphere]
    size[capsule, 0], size[capsule, 1] = scale[capsule, 0] + margin[capsule], scale[capsule, 1]
    size[box] = scale[box]
    size[cylinder, 0], size[cylinder, 1] = scale[cylinder, 0], scale[cylinder, 1]  # radius, half height (z)
    size[ellipsoid] = scale[ellipsoid]  # semi-axes along x, y, z
    points = _mesh_points(model, n, np.flatnonzero(meshes), notes)
    heights = {}
    for s in np.flatnonzero(hfields):
        heights[s], size[s], X[s] = _hfield(model, n, s)
    # Newton's surface margin offsets a shape's surface outward: a box, cylinder, ellipsoid or mesh swept
    # by a ball of that radius, SAP's rounding (a sphere's and a capsule's already are radius + margin).
    rounding = np.where(box | cylinder | ellipsoid | meshes, margin, 0.0)
    mu = n["shape_material_mu"].reshape(S).copy()
    ke, tau = np.full(S, math.nan), np.full(S, math.nan)
    if contact_material == "newton":
        k, kd = n["shape_material_ke"].reshape(S), n["shape_material_kd"].reshape(S)
        for s in np.flatnonzero(use & ~(k > 0)):
            notes.add("shapes with ke <= 0 take the solver's fallback_stiffness and contact_tau_d",
                      f"{model.shape_label[s]!r}")
        good = (k > 0) & (k != np.float32(NEWTON_DEFAULT_KE))  # Newton's default ke: unset (SAP's k and τ_d)
        ke[good] = k[good]
        tau[good] = np.maximum(kd[good], 0.0) / k[good]
    return dict(use=use, type=ours, size=size, X=X, margin=n["shape_gap"].reshape(S), mu=mu, ke=ke, tau=tau,
                points=points, heights=heights, rounding=rounding)


def _mesh_points(model, n, shapes, notes) -> dict:
    """The convex-mesh points of Newton's MESH and CONVEX_MESH shapes: shape → (V, 3) [m] in the shape
    frame, the extreme points of the hull of the mesh's vertices times the shape's scale (Newton's
    ``shape_scale``, signed: a negative component mirrors). A CONVEX_MESH is its vertices' hull in Newton
    too; a MESH (a triangle surface, collided triangle by triangle in Newton) becomes its convex hull,
    noted once per model, naming the meshes whose surface is not their hull. Worlds that share a mesh and
    a scale share the work."""
    done, out = {}, {}
    for s in shapes:
        s = int(s)
        label, src = f"shape {model.shape_label[s]!r} (index {s})", model.shape_source[s]
        kind = "MESH" if int(n["shape_type"][s]) == _MESH else "CONVEX_MESH"
        vertices = getattr(src, "vertices", None)
        if vertices is None:
            raise ValueError(f"{label} is a {kind} without a newton.Mesh (model.shape_source[{s}] is {src!r})")
        scale = n["shape_scale"][s].reshape(3)
        key = (id(src), kind, scale.tobytes())
        if key not in done:
            p = np.asarray(vertices, dtype=np.float64).reshape(-1, 3) * scale
            try:
                hull = convex_hull(p, f"{label}: the {kind}'s vertices")
            except ValueError as e:
                raise ValueError(f"{e} (SAP collides a {kind} as the solid convex hull of its vertices)") from None
            convex = kind == "CONVEX_MESH" or _is_its_hull(p, np.asarray(src.indices).reshape(-1, 3), hull)
            done[key] = (hull.vertices, convex)
        out[s], convex = done[key]
        if not convex:
            notes.add("non-convex MESH shapes collide as their convex hulls (a bowl becomes a filled solid, a "
                      "concave part fills in)", f"{model.shape_label[s]!r}")
    return out


def _is_its_hull(points: np.ndarray, triangles: np.ndarray, hull) -> bool:
    """Whether a triangle surface is the surface of its convex hull: the plane of every triangle (of
    non-zero area, either winding) supports the hull, so the triangle lies on a face of it, and the
    triangles' area is the hull's (:data:`MESH_CONVEX_TOL`)."""
    tol = MESH_CONVEX_TOL * float(np.max(np.ptp(points, axis=0)))
    tri = points[triangles]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    twice_area = np.linalg.norm(normal, axis=1)
    keep = twice_area > 0.0
    normal = normal[keep] / twice_area[keep, None]
    offset = np.einsum("ij,ij->i", normal, tri[keep, 0])
    V = hull.vertices
    chunk = max(1, 2 ** 22 // len(V))  # bounded memory: (chunk, hull points) heights, 32 MB at most
    for lo in range(0, len(normal), chunk):
        height = normal[lo:lo + chunk] @ V.T - offset[lo:lo + chunk, None]  # either winding
        if not np.all((height.max(axis=1) <= tol) | (height.min(axis=1) >= -tol)):
            return False
    fan = np.array([(f[0], f[k], f[k + 1]) for f in hull.faces for k in range(1, len(f) - 1)]).reshape(-1, 3)
    h = V[fan]
    hull_area = 0.5 * np.linalg.norm(np.cross(h[:, 1] - h[:, 0], h[:, 2] - h[:, 0]), axis=1).sum()
    return abs(0.5 * twice_area.sum() - hull_area) <= MESH_CONVEX_TOL * hull_area


def _hfield(model, n, s: int):
    """``(heights (nrow, ncol), size (hx, hy, base), X)`` of Newton height-field shape ``s`` as SAP's
    height field, the same surface and triangles as Newton's collision.

    Newton (``model.heightfield_data``, the shape's scale baked in, and ``heightfield_elevations``):
    samples e[r, c] ∈ [0, 1] at x = −hx + 2hx·c/(ncol − 1), y = −hy + 2hy·r/(nrow − 1) of the shape frame,
    height z = min_z + e·(max_z − min_z); cell (r, c) split along its diagonal from (r, c) to
    (r + 1, c + 1), each triangle a prism extruded :data:`NEWTON_HFIELD_EXTRUSION` down. SAP's grid is the
    same (row along y, column along x, the same diagonal: ``sap_common.geometry``), solid down to a flat
    base: its heights are Newton's less the lowest one, z₀, its frame Newton's moved up its z axis by z₀,
    and its base :data:`NEWTON_HFIELD_EXTRUSION` below z₀."""
    label = f"shape {model.shape_label[s]!r} (index {s})"
    if int(n["shape_body"][s]) >= 0:
        raise ValueError(f"{label} is a HFIELD on body {int(n['shape_body'][s])}; SAP's height fields are static "
                         "terrain on the world (body -1)")
    index = getattr(model, "shape_heightfield_index", None)
    k = -1 if index is None else int(index.numpy()[s])
    if k < 0:
        raise ValueError(f"{label} is a HFIELD without height data (model.shape_heightfield_index[{s}] = {k})")
    d = model.heightfield_data.numpy()[k]
    nrow, ncol, start = int(d["nrow"]), int(d["ncol"]), int(d["data_offset"])
    e = model.heightfield_elevations.numpy()[start:start + nrow * ncol].astype(np.float64).reshape(nrow, ncol)
    lo, hi = float(d["min_z"]), float(d["max_z"])
    z = lo + e * (hi - lo)
    if not (np.all(np.isfinite(z)) and float(d["hx"]) > 0 and float(d["hy"]) > 0):
        raise ValueError(f"{label}: a HFIELD needs finite heights and extents hx, hy > 0, got hx = {float(d['hx'])}, "
                         f"hy = {float(d['hy'])}")
    z0 = float(z.min())
    X = n["shape_transform"][s].copy()
    X[:3] += _quat_to_matrix(X[3:])[:, 2] * z0
    return z - z0, np.array([float(d["hx"]), float(d["hy"]), NEWTON_HFIELD_EXTRUSION]), X


def _dof_table(model, n, joint_limits, notes) -> dict:
    """SAP joint parameters of every Newton DOF, in Newton's DOF indexing.

    ``param`` maps each DOF slot to the Newton DOF whose parameters SAP stores there: the
    identity, except FREE segments (Newton [linear, angular] → SAP [angular, linear]).
    """
    jt = n["joint_type"].astype(np.int64)
    qs, ds = n["joint_q_start"].astype(np.int64), n["joint_qd_start"].astype(np.int64)
    nv = int(ds[-1])
    dof_joint = np.repeat(np.arange(len(jt)), np.diff(ds))
    dof_type = jt[dof_joint]
    axis_dof = np.isin(dof_type, [int(newton.JointType.PRISMATIC), int(newton.JointType.REVOLUTE),
                                  int(newton.JointType.D6)])
    mode = n["joint_target_mode"].astype(np.int64)
    ke = np.where(np.isin(mode, _POSITION_MODES), n["joint_target_ke"], 0.0)
    kd = np.where(np.isin(mode, _DAMPED_MODES), n["joint_target_kd"], 0.0)
    lo, hi, effort = n["joint_limit_lower"].copy(), n["joint_limit_upper"].copy(), n["joint_effort_limit"].copy()
    lo[lo <= -MAXVAL], hi[hi >= MAXVAL], effort[effort >= MAXVAL] = -math.inf, math.inf, math.inf
    for d in np.flatnonzero(axis_dof & ~(effort > 0)):
        raise ValueError(f"joint {model.joint_label[dof_joint[d]]!r} (DOF {d}): joint_effort_limit must be > 0, "
                         f"got {effort[d]}")
    if joint_limits == "newton":
        lke, lkd = n["joint_limit_ke"].copy(), n["joint_limit_kd"].copy()
    else:
        lke, lkd = np.full(nv, DEFAULT_LIMIT_KE), np.full(nv, DEFAULT_LIMIT_KD)
    pos_target = np.where(axis_dof & (ke > 0), qs[dof_joint] + (np.arange(nv) - ds[dof_joint]), -1)
    vel_target = np.where(axis_dof & np.isin(mode, _VELOCITY_MODES) & (kd > 0), np.arange(nv), -1)

    def note(what, mask):
        for j in np.unique(dof_joint[mask]):
            notes.add(what, f"{model.joint_label[j]!r}")

    if n["joint_stiffness"] is not None:
        note("passive joint stiffness (springs) dropped", n["joint_stiffness"] != 0)
    if n["joint_friction"] is not None:
        note("joint friction dropped", n["joint_friction"] != 0)
    note("drives on BALL/FREE joints dropped", ~axis_dof & ((ke > 0) | (kd > 0)))
    note("limits on BALL/FREE joints dropped", ~axis_dof & (np.isfinite(lo) | np.isfinite(hi)))
    free = dof_type == int(newton.JointType.FREE)
    note("FREE-joint armature/damping applied in SAP's [ω, v_origin] coordinates",
         free & ((n["joint_armature"] != 0) | (n["joint_damping"] != 0)))
    ke[~axis_dof], kd[~axis_dof], lo[~axis_dof], hi[~axis_dof], effort[~axis_dof] = 0, 0, -math.inf, math.inf, \
        math.inf  # no drive, limit or clamp on ball/free DOFs
    param = np.arange(nv)
    for j in np.flatnonzero(jt == int(newton.JointType.FREE)):
        param[ds[j]:ds[j] + 6] = ds[j] + _FREE_TO_SAP
    return dict(param=param, ke=ke, kd=kd, lo=lo, hi=hi, effort=effort, lke=lke, lkd=lkd,
                armature=n["joint_armature"], damping=n["joint_damping"], axis=n["joint_axis"].reshape(nv, 3),
                pos_target=pos_target, vel_target=vel_target)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, stop)`` for each pair (vectorized)."""
    lengths = stops - starts
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return (offsets + np.arange(int(lengths.sum()))).astype(np.int64)


def _bucket(world_of: np.ndarray, W: int):
    """Indices sorted by world (stable: Newton order within a world) and each world's bounds."""
    order = np.argsort(world_of, kind="stable")
    return order, np.searchsorted(world_of[order], np.arange(-1, W + 1))[1:]


def _world_template(model, n, w, buckets, global_shapes, shapes, dofs, body_local, equalities):
    """SapModel keyword arguments and index maps of Newton world ``w``."""
    (b_order, b_bounds), (j_order, j_bounds), (s_order, s_bounds) = buckets
    bodies = b_order[b_bounds[w]:b_bounds[w + 1]]
    joints, loops = _loop_joints(n, j_order[j_bounds[w]:j_bounds[w + 1]])
    body_local[bodies] = np.arange(len(bodies))
    parent, child = n["joint_parent"][joints].astype(np.int64), n["joint_child"][joints].astype(np.int64)
    for b in np.setdiff1d(bodies, child):
        raise ValueError(f"body {model.body_label[b]!r} (index {b}) has no joint; SAP needs every body to be "
                         "the child of one joint (add_joint_free for a floating body)")
    stray = (parent >= 0) & ~np.isin(parent, bodies)
    for j in joints[stray]:
        raise ValueError(f"joint {model.joint_label[j]!r} (index {j}) connects bodies of different worlds")
    qs, ds = n["joint_q_start"].astype(np.int64), n["joint_qd_start"].astype(np.int64)
    coords, dof = _ranges(qs[joints], qs[joints + 1]), _ranges(ds[joints], ds[joints + 1])
    param = dofs["param"][dof]
    own = s_order[s_bounds[w]:s_bounds[w + 1]]
    shape_ids = np.concatenate([global_shapes, own[shapes["use"][own]]]).astype(np.int64)
    shape_body = n["shape_body"][shape_ids].astype(np.int64)
    g = n["gravity"]
    kwargs = dict(
        body_mass=n["body_mass"][bodies], body_com=n["body_com"][bodies].reshape(-1, 3),
        body_inertia=n["body_inertia"][bodies].reshape(-1, 3, 3),
        body_name=_unique(model.body_label[b] for b in bodies),
        body_kinematic=(n["body_flags"][bodies].astype(np.int64) & _KINEMATIC) != 0,  # BodyFlags.KINEMATIC
        joint_type=np.array([int(_NEWTON_JOINTS[int(t)]) for t in n["joint_type"][joints]], np.int32),
        joint_parent=np.where(parent >= 0, body_local[np.maximum(parent, 0)], -1).astype(np.int32),
        joint_child=body_local[child].astype(np.int32), joint_X_p=n["joint_X_p"][joints].reshape(-1, 7),
        joint_X_c=n["joint_X_c"][joints].reshape(-1, 7),
        joint_dof_dim=n["joint_dof_dim"][joints].astype(np.int32).reshape(-1, 2),
        joint_name=_unique(model.joint_label[j] for j in joints),
        joint_axis=dofs["axis"][dof], joint_armature=dofs["armature"][param], joint_damping=dofs["damping"][param],
        joint_target_ke=dofs["ke"][param], joint_target_kd=dofs["kd"][param],
        joint_effort_limit=dofs["effort"][param], joint_limit_lower=dofs["lo"][param],
        joint_limit_upper=dofs["hi"][param], joint_limit_ke=dofs["lke"][param], joint_limit_kd=dofs["lkd"][param],
        joint_q_init=n["joint_q"][coords], joint_qd_init=n["joint_qd"][dof],
        shape_type=shapes["type"][shape_ids].astype(np.int32),
        shape_body=np.where(shape_body >= 0, body_local[np.maximum(shape_body, 0)], -1).astype(np.int32),
        shape_transform=shapes["X"][shape_ids].reshape(-1, 7), shape_size=shapes["size"][shape_ids].reshape(-1, 3),
        shape_margin=shapes["margin"][shape_ids], shape_material_mu=shapes["mu"][shape_ids],
        shape_material_ke=shapes["ke"][shape_ids], shape_material_tau=shapes["tau"][shape_ids],
        shape_rounding=shapes["rounding"][shape_ids],
        shape_collision_group=np.full(len(shape_ids), -1, np.int32),
        shape_contype=np.ones(len(shape_ids), np.int64), shape_conaffinity=np.ones(len(shape_ids), np.int64),
        shape_filter_pair=np.zeros((0, 2), np.int32),
        shape_name=_unique(model.shape_label[s] for s in shape_ids),
        gravity=g[w] if len(g) > w else g[0],
    )
    kwargs.update(_shape_sources(shapes, shape_ids))
    kwargs.update(_constraints(model, n, joints, loops, body_local, bodies, equalities))
    maps = dict(body_index=bodies, coord_index=coords, dof_index=dof, param_index=param,
                target_q_index=dofs["pos_target"][dof],
                target_qd_index=dofs["vel_target"][dof], shape_index=shape_ids)
    return kwargs, maps


def _shape_sources(shapes: dict, shape_ids: np.ndarray) -> dict:
    """SapModel keyword arguments of a world's convex meshes and height fields (``shape_source`` and the
    ``mesh_*`` / ``hfield_*`` arrays, in the order of its shapes); empty when it has none."""
    points, heights = shapes["points"], shapes["heights"]
    if not points and not heights:
        return {}
    source = np.full(len(shape_ids), -1, np.int32)
    meshes, fields = [], []
    for i, s in enumerate(int(x) for x in shape_ids):
        if s in points:
            source[i] = len(meshes)
            meshes.append(points[s])
        elif s in heights:
            source[i] = len(fields)
            fields.append(heights[s])
    if not meshes and not fields:
        return {}
    return dict(shape_source=source,
                mesh_vertex=np.concatenate(meshes) if meshes else np.zeros((0, 3)),
                mesh_vertex_start=np.concatenate([[0], np.cumsum([len(v) for v in meshes])]).astype(np.int32),
                hfield_height=np.concatenate([h.ravel() for h in fields]) if fields else np.zeros(0),
                hfield_start=np.concatenate([[0], np.cumsum([h.size for h in fields])]).astype(np.int32),
                hfield_shape=np.array([h.shape for h in fields], np.int32).reshape(-1, 2))


def _pairs_by_world(pairs: np.ndarray, shape_w: np.ndarray, W: int):
    """Newton's candidate pairs bucketed by the world of their non-global shape: ``(pairs, bounds)``
    with world ``w``'s pairs at ``pairs[bounds[w]:bounds[w + 1]]`` (global–global pairs dropped:
    both static, never simulated)."""
    w0, w1 = shape_w[pairs[:, 0]], shape_w[pairs[:, 1]]
    pair_w = np.where(w0 >= 0, w0, w1)
    pairs, pair_w = pairs[pair_w >= 0], pair_w[pair_w >= 0]
    order = np.argsort(pair_w, kind="stable")
    return pairs[order], np.searchsorted(pair_w[order], np.arange(W + 1))


def _local_pairs(local_of_shape: np.ndarray, world_pairs: np.ndarray) -> set:
    """A world's Newton pairs among its template shapes, as sorted local index pairs."""
    a, b = local_of_shape[world_pairs[:, 0]], local_of_shape[world_pairs[:, 1]]
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


_KEY_SKIP = ("body_name", "joint_name", "shape_name", "constraint_name", "joint_q_init", "joint_qd_init")


# What of a per-world parameter's values every world of one template shares: which bounds are
# finite and which limit stiffnesses and drive gains are positive (the Newton problem's rows), which
# bodies have mass (the mass-matrix check); the rest may differ freely.
_PATTERN = {"joint_limit_lower": np.isfinite, "joint_limit_upper": np.isfinite,
            "joint_limit_ke": lambda a: a > 0.0, "joint_target_ke": lambda a: a > 0.0,
            "joint_target_kd": lambda a: a > 0.0, "body_mass": lambda a: a > 0.0}


def _template_key(kwargs, values: bool = True) -> bytes:
    """The bytes that tell templates apart. ``values=False`` leaves out the values of the per-world
    parameters (sap_common.parameters.PARAMETER_FIELDS) and keeps only their pattern (which limits,
    drives and masses exist): worlds that differ only there share one template and one solver, with
    per-world parameters."""
    parts = []
    for k in sorted(kwargs):
        if k in _KEY_SKIP:
            continue
        v = kwargs[k]
        if not values and k in PARAMETER_FIELDS:
            a = np.asarray(v, dtype=np.float64) if v is not None else np.zeros(0)
            v = _PATTERN[k](a) if k in _PATTERN else np.zeros(0)
        parts.append(k.encode() + np.ascontiguousarray(v).tobytes() + str(np.shape(v)).encode())
    return b"|".join(parts)


def convert_model(model, *, contact_material: str = "newton", joint_limits: str = "newton",
                  skip_unsupported_shapes: bool = False, per_world_parameters: bool = True) -> NewtonConversion:
    """Convert every world of ``model`` (a finalized ``newton.Model``); see the module docstring.

    Args:
        model: the Newton model (any device; read once on the host).
        contact_material: ``"newton"`` (ke, kd → stiffness and τ_d = kd/ke; a shape whose ke is
            Newton's default, :data:`NEWTON_DEFAULT_KE`, takes the solver's fallbacks) or ``"sap"``
            (the solver's fallback stiffness and τ_d on every shape); μ always comes from Newton.
        joint_limits: ``"newton"`` (limit stiffness/damping ``joint_limit_ke/kd``) or
            ``"drake"`` (Drake's near-rigid 1e12 with a 1 ms time scale).
        skip_unsupported_shapes: drop colliding shapes of types SAP does not have (noted)
            instead of raising.
        per_world_parameters: True (default): worlds that differ only in physical parameters share
            a group and carry them as its ``parameters``; False: every distinct world is a group
            of its own template (one solver each), as before per-world parameters existed.

    Raises:
        ValueError: naming the joint, shape, body or feature SAP cannot represent.
    """
    if not isinstance(model, newton.Model):
        raise ValueError(f"model: expected a newton.Model, got {type(model).__name__}")
    _check_choice("contact_material", contact_material, CONTACT_MATERIALS)
    _check_choice("joint_limits", joint_limits, JOINT_LIMIT_MODELS)
    for flag, value in (("skip_unsupported_shapes", skip_unsupported_shapes),
                        ("per_world_parameters", per_world_parameters)):
        if not isinstance(value, bool):
            raise ValueError(f"{flag}: must be True or False, got {value!r}")
    if int(model.body_count) == 0 or int(model.joint_dof_count) == 0:
        raise ValueError("model: no articulated DOF (SAP needs at least one joint with a degree of freedom)")
    n = _host(model)
    _refuse_unsupported(model, n)
    W, body_w, joint_w, shape_w = _effective_worlds(model, n)
    notes = _Notes()
    counts = getattr(model, "custom_frequency_counts", {}) or {}
    if int(counts.get("mujoco:actuator", 0)) > 0:
        notes.add("MuJoCo actuators (control.mujoco.ctrl) not mapped; drive through joint_target_q/qd or joint_f",
                  f"{int(counts['mujoco:actuator'])} in the model")
    equalities = _equality_rows(model, n, int(counts.get("mujoco:equality_constraint", 0)))
    for label in equalities["ignored"]:
        notes.add("MuJoCo equality constraints SAP has no counterpart for ignored (tendon, multi-DOF or nonlinear "
                  "joint equalities, welds with torquescale 0)", label)
    for j in _loop_joints(n, np.arange(len(n["joint_type"])))[1]:
        if not n["joint_enabled"][j]:
            notes.add("disabled loop joints left open", f"{model.joint_label[j]!r}")
    shapes = _shape_table(model, n, contact_material, skip_unsupported_shapes, notes)
    dofs = _dof_table(model, n, joint_limits, notes)
    global_shapes = np.flatnonzero((n["shape_body"] < 0) & (shape_w < 0) & shapes["use"])
    buckets = (_bucket(body_w, W), _bucket(joint_w, W), _bucket(shape_w, W))
    body_local = np.full(len(n["body_mass"]), -1, np.int64)  # each body lives in one world
    templates, order, filters = {}, [], {}
    pairs, bounds = _pairs_by_world(n["pairs"], shape_w, W)
    local_of_shape = np.full(len(n["shape_type"]), -1, np.int64)  # global shapes: same index everywhere
    for w in range(W):
        kwargs, maps = _world_template(model, n, w, buckets, global_shapes, shapes, dofs, body_local, equalities)
        local_of_shape[maps["shape_index"]] = np.arange(len(maps["shape_index"]))
        wanted = _local_pairs(local_of_shape, pairs[bounds[w]:bounds[w + 1]])
        probe_key = _template_key(kwargs) + repr(sorted(wanted)).encode()
        if probe_key not in filters:  # one probe model per distinct world, not per world
            filters[probe_key] = _newton_filters(kwargs, wanted, notes, f"world {w}")
        kwargs["shape_filter_pair"] = filters[probe_key]
        key = _template_key(kwargs, values=not per_world_parameters)
        if key not in templates:
            templates[key] = (kwargs, [])
            order.append(key)
        templates[key][1].append((w, maps, {k: kwargs.get(k) for k in PARAMETER_FIELDS}))

    S_newton = len(n["shape_type"])
    world_group, world_slot = np.zeros(W, np.int32), np.zeros(W, np.int32)
    shape_group, shape_slot = np.full(S_newton, -1, np.int32), np.full(S_newton, -1, np.int32)
    shape_local = np.full(S_newton, -1, np.int32)
    groups = []
    for g, key in enumerate(order):
        kwargs, members = templates[key]
        sap_model = SapModel(num_worlds=len(members), **kwargs)
        stack = lambda k: np.stack([m[k] for _, m, _ in members]).astype(np.int32).reshape(len(members), -1)  # noqa
        parameters = {}  # the fields whose values differ between the group's worlds, (Wg, *shape)
        for name in PARAMETER_FIELDS:
            values = np.stack([np.broadcast_to(np.asarray(getattr(sap_model, name) if p[name] is None else p[name],
                                                          np.float64), np.shape(getattr(sap_model, name)))
                               for _, _, p in members])
            if not all(np.array_equal(v, values[0], equal_nan=True) for v in values[1:]):
                parameters[name] = values
        for slot, (w, maps, _) in enumerate(members):
            world_group[w], world_slot[w] = g, slot
            own = maps["shape_index"][len(global_shapes):]
            shape_local[maps["shape_index"]] = np.arange(len(maps["shape_index"]))
            shape_group[own], shape_slot[own] = g, slot
        groups.append(WorldGroup(
            sap_model=sap_model, worlds=np.array([w for w, _, _ in members], np.int32),
            body_index=stack("body_index"), coord_index=stack("coord_index"), dof_index=stack("dof_index"),
            param_index=stack("param_index"), target_q_index=stack("target_q_index"),
            target_qd_index=stack("target_qd_index"), shape_index=stack("shape_index"), parameters=parameters))
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


# ------------------------------------------------------------------ the same conversion on the device
#
# SolverSAP.notify_model_changed re-derives the per-world parameters of a group from the Newton
# model's device arrays with the kernels below. Each applies to one (world, element) the operations
# the host tables above apply (_world_template, _shape_table, _dof_table): float32 widened to float64,
# ±MAXVAL to ±inf, gains by drive mode, τ_d = max(kd, 0)/ke, the inertia symmetrized as SapModel
# stores it. No other arithmetic, so a value converted here is the host's, bit for bit. Where a
# value would change what the host conversion builds beyond the values (which limits, drives and
# masses exist, which velocity targets feed a drive, the geometry), a kernel sets ``rebuild[0] = 1``.

_MODE_POSITION = wp.constant(int(_MODE.POSITION))
_MODE_VELOCITY = wp.constant(int(_MODE.VELOCITY))
_MODE_POSITION_VELOCITY = wp.constant(int(_MODE.POSITION_VELOCITY))
# The bits of a DOF's pattern (ParameterGather): what of its values must stay as it was built.
_LOWER, _UPPER, _LIMIT_KE, _TARGET_KE, _TARGET_KD, _VELOCITY_TARGET = (wp.constant(1 << k) for k in range(6))
_AXIS_TYPES = (int(JointType.PRISMATIC), int(JointType.REVOLUTE), int(JointType.D6))


@wp.kernel
def _gather_bodies(index: wp.array2d(dtype=int), mass_in: wp.array(dtype=wp.float32),
                   com_in: wp.array(dtype=wp.vec3f), inertia_in: wp.array(dtype=wp.mat33f),
                   massive: wp.array(dtype=int), mass: wp.array2d(dtype=wp.float64),
                   com: wp.array2d(dtype=wp.vec3d), inertia: wp.array2d(dtype=wp.mat33d),
                   rebuild: wp.array(dtype=wp.int32)):
    """Mass, COM and inertia (symmetrized, (I + Iᵀ)/2, as SapModel and WorldParameters store it);
    a body that gains or loses its mass changes the model's pattern (_PATTERN)."""
    w, b = wp.tid()
    k = index[w, b]
    m = wp.float64(mass_in[k])
    I = wp.mat33d(inertia_in[k])
    mass[w, b] = m
    com[w, b] = wp.vec3d(com_in[k])
    inertia[w, b] = wp.float64(0.5) * (I + wp.transpose(I))
    if (m > wp.float64(0.0)) != (massive[b] != 0):
        rebuild[0] = 1


@wp.func
def _at_most(x: wp.float32, maxval: wp.float64) -> wp.float64:
    """An upper bound or effort limit in float64, inf at or above MAXVAL (_dof_table)."""
    v = wp.float64(x)
    if v >= maxval:
        v = wp.float64(wp.inf)
    return v


@wp.func
def _at_least(x: wp.float32, maxval: wp.float64) -> wp.float64:
    """A lower bound in float64, −inf at or below −MAXVAL (_dof_table)."""
    v = wp.float64(x)
    if v <= -maxval:
        v = -wp.float64(wp.inf)
    return v


@wp.kernel
def _gather_dofs(index: wp.array2d(dtype=int), axis: wp.array(dtype=int), pattern: wp.array2d(dtype=int),
                 armature_in: wp.array(dtype=wp.float32), damping_in: wp.array(dtype=wp.float32),
                 target_ke_in: wp.array(dtype=wp.float32), target_kd_in: wp.array(dtype=wp.float32),
                 mode_in: wp.array(dtype=wp.int32), effort_in: wp.array(dtype=wp.float32),
                 lower_in: wp.array(dtype=wp.float32), upper_in: wp.array(dtype=wp.float32),
                 limit_ke_in: wp.array(dtype=wp.float32), limit_kd_in: wp.array(dtype=wp.float32),
                 newton_limits: int, drake_ke: wp.float64, drake_kd: wp.float64, maxval: wp.float64,
                 armature: wp.array2d(dtype=wp.float64), damping: wp.array2d(dtype=wp.float64),
                 target_ke: wp.array2d(dtype=wp.float64), target_kd: wp.array2d(dtype=wp.float64),
                 effort: wp.array2d(dtype=wp.float64), lower: wp.array2d(dtype=wp.float64),
                 upper: wp.array2d(dtype=wp.float64), limit_ke: wp.array2d(dtype=wp.float64),
                 limit_kd: wp.array2d(dtype=wp.float64), rebuild: wp.array(dtype=wp.int32)):
    """One template DOF of one world from Newton DOF ``index[w, i]`` (_dof_table): gains by drive
    mode, none of drives, limits and clamps on BALL/FREE DOFs. Its pattern — finite bounds, a limit
    stiffness, each gain > 0 and whether a velocity target feeds the drive — must be the build's."""
    w, i = wp.tid()
    k = index[w, i]
    zero = wp.float64(0.0)
    inf = wp.float64(wp.inf)
    mode = mode_in[k]
    ke = zero
    if mode == _MODE_POSITION or mode == _MODE_POSITION_VELOCITY:
        ke = wp.float64(target_ke_in[k])
    kd = zero
    if mode == _MODE_POSITION or mode == _MODE_VELOCITY or mode == _MODE_POSITION_VELOCITY:
        kd = wp.float64(target_kd_in[k])
    lo = _at_least(lower_in[k], maxval)
    hi = _at_most(upper_in[k], maxval)
    e = _at_most(effort_in[k], maxval)
    lke = drake_ke
    lkd = drake_kd
    if newton_limits != 0:
        lke = wp.float64(limit_ke_in[k])
        lkd = wp.float64(limit_kd_in[k])
    velocity_target = int(0)
    if axis[i] != 0:
        if (mode == _MODE_VELOCITY or mode == _MODE_POSITION_VELOCITY) and kd > zero:
            velocity_target = _VELOCITY_TARGET
    else:
        ke = zero
        kd = zero
        lo = -inf
        hi = inf
        e = inf
    armature[w, i] = wp.float64(armature_in[k])
    damping[w, i] = wp.float64(damping_in[k])
    target_ke[w, i] = ke
    target_kd[w, i] = kd
    effort[w, i] = e
    lower[w, i] = lo
    upper[w, i] = hi
    limit_ke[w, i] = lke
    limit_kd[w, i] = lkd
    bits = velocity_target
    if wp.isfinite(lo):
        bits = bits | _LOWER
    if wp.isfinite(hi):
        bits = bits | _UPPER
    if lke > zero:
        bits = bits | _LIMIT_KE
    if ke > zero:
        bits = bits | _TARGET_KE
    if kd > zero:
        bits = bits | _TARGET_KD
    if bits != pattern[w, i]:
        rebuild[0] = 1


@wp.kernel
def _gather_shapes(index: wp.array2d(dtype=int), mu_in: wp.array(dtype=wp.float32),
                   ke_in: wp.array(dtype=wp.float32), kd_in: wp.array(dtype=wp.float32),
                   gap_in: wp.array(dtype=wp.float32), newton_material: int, default_ke: wp.float32,
                   mu: wp.array2d(dtype=wp.float64), ke: wp.array2d(dtype=wp.float64),
                   tau: wp.array2d(dtype=wp.float64), margin: wp.array2d(dtype=wp.float64)):
    """Friction, stiffness, τ_d = max(kd, 0)/ke (NaN, the solver's fallbacks, where ke ≤ 0, where ke
    is Newton's default or with contact_material="sap") and the detection margin (Newton's gap) of one
    template shape (_shape_table)."""
    w, s = wp.tid()
    k = index[w, s]
    nan = wp.float64(wp.nan)
    stiffness = nan
    time_scale = nan
    if newton_material != 0 and ke_in[k] != default_ke:
        K = wp.float64(ke_in[k])
        if K > wp.float64(0.0):
            d = wp.float64(kd_in[k])
            if not (d > wp.float64(0.0) or wp.isnan(d)):  # np.maximum(kd, 0): NaN stays, −0 and below → 0
                d = wp.float64(0.0)
            stiffness = K
            time_scale = d / K
    mu[w, s] = wp.float64(mu_in[k])
    ke[w, s] = stiffness
    tau[w, s] = time_scale
    margin[w, s] = wp.float64(gap_in[k])


@wp.kernel
def _gather_gravity(index: wp.array(dtype=int), gravity_in: wp.array(dtype=wp.vec3f),
                    gravity: wp.array(dtype=wp.vec3d)):
    w = wp.tid()
    gravity[w] = wp.vec3d(gravity_in[index[w]])


@wp.func
def _moved(a: wp.float32, b: wp.float32) -> bool:
    return a != b and not (wp.isnan(a) and wp.isnan(b))


@wp.kernel
def _geometry_moved(shape_local: wp.array(dtype=int), X: wp.array(dtype=wp.transformf),
                    X0: wp.array(dtype=wp.transformf), scale: wp.array(dtype=wp.vec3f),
                    scale0: wp.array(dtype=wp.vec3f), margin: wp.array(dtype=wp.float32),
                    margin0: wp.array(dtype=wp.float32), rebuild: wp.array(dtype=wp.int32)):
    """A converted shape whose pose, size or surface margin (which inflates spheres and capsules and
    moves planes) is not the one it was converted with."""
    s = wp.tid()
    if shape_local[s] < 0:
        return
    p = wp.transform_get_translation(X[s])
    p0 = wp.transform_get_translation(X0[s])
    q = wp.transform_get_rotation(X[s])
    q0 = wp.transform_get_rotation(X0[s])
    moved = _moved(margin[s], margin0[s])
    for c in range(3):
        if _moved(p[c], p0[c]) or _moved(scale[s][c], scale0[s][c]):
            moved = True
    for c in range(4):
        if _moved(q[c], q0[c]):
            moved = True
    if moved:
        rebuild[0] = 1


class ShapeGeometry:
    """The geometry of a Newton model's converted shapes as converted (device copies of
    ``shape_transform``, ``shape_scale``, ``shape_margin``), to tell a change of materials from one of
    geometry under ``ModelFlags.SHAPE_PROPERTIES``, which covers both."""

    def __init__(self, model, shape_local: wp.array):
        self.shape_local = shape_local
        self._arrays = tuple(wp.clone(getattr(model, k), device=shape_local.device)
                             for k in ("shape_transform", "shape_scale", "shape_margin"))

    def moved(self, model, rebuild: wp.array) -> None:
        """Launch: ``rebuild[0] = 1`` if a converted shape's geometry differs from the copies."""
        n = self.shape_local.shape[0]
        if n == 0:
            return
        X0, scale0, margin0 = self._arrays
        wp.launch(_geometry_moved, dim=n, device=self.shape_local.device, inputs=[
            self.shape_local, model.shape_transform, X0, model.shape_scale, scale0, model.shape_margin, margin0],
            outputs=[rebuild])


class ParameterGather:
    """One group's per-world parameters re-derived from the Newton model's device arrays.

    ``values`` holds them, field → ``(Wg, …)`` device array shaped as a per-world
    ``sap_gpu.WorldParameters`` stores it (an empty axis keeps one element), filled by :meth:`gather`
    for the families asked: ``"body"`` (:data:`sap_common.parameters.BODY_FIELDS`), ``"dof"``
    (``DOF_FIELDS``), ``"shape"`` (the materials and margins Newton has: ``shape_material_hcd`` is
    never Newton's) and ``"gravity"``. The group's maps and the build's pattern are uploaded once.
    """

    FAMILIES = {"body": ("body_mass", "body_com", "body_inertia"),
                "dof": ("joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd",
                        "joint_effort_limit", "joint_limit_lower", "joint_limit_upper", "joint_limit_ke",
                        "joint_limit_kd"),
                "shape": ("shape_material_mu", "shape_material_ke", "shape_material_tau", "shape_margin"),
                "gravity": ("gravity",)}

    def __init__(self, group: WorldGroup, model, device, contact_material: str, joint_limits: str):
        m, Wg = group.sap_model, len(group.worlds)
        self.device = d = device
        self.contact_material, self.joint_limits = contact_material, joint_limits
        i32 = lambda a: wp.array(np.ascontiguousarray(a, np.int32), dtype=int, device=d)  # noqa: E731
        pad = lambda a, n: np.zeros((Wg, 1), np.int32) if n == 0 else a  # noqa: E731
        self.body_index = i32(pad(group.body_index, m.body_count))
        self.param_index = i32(pad(group.param_index, m.joint_dof_count))
        self.shape_index = i32(pad(group.shape_index, m.shape_count))
        G = int(model.gravity.shape[0])
        self.gravity_index = i32(np.where(group.worlds < G, group.worlds, 0))
        self.massive = i32(m.body_mass > 0.0 if m.body_count else np.zeros(1))
        axis = np.zeros(max(m.joint_dof_count, 1), np.int32)
        for j in range(m.joint_count):
            if int(m.joint_type[j]) in _AXIS_TYPES:
                axis[int(m.joint_qd_start[j]):int(m.joint_qd_start[j + 1])] = 1
        self.axis = i32(axis)
        bits = (np.isfinite(m.joint_limit_lower) * _LOWER + np.isfinite(m.joint_limit_upper) * _UPPER
                + (m.joint_limit_ke > 0.0) * _LIMIT_KE + (m.joint_target_ke > 0.0) * _TARGET_KE
                + (m.joint_target_kd > 0.0) * _TARGET_KD)
        pattern = bits[None, :] + (group.target_qd_index >= 0) * _VELOCITY_TARGET
        self.pattern = i32(pad(pattern, m.joint_dof_count))
        self.counts = {"body": m.body_count, "dof": m.joint_dof_count, "shape": m.shape_count, "gravity": 1}
        dtype = {"body_com": wp.vec3d, "body_inertia": wp.mat33d, "gravity": wp.vec3d}
        self.values = {}
        for family, names in self.FAMILIES.items():
            for name in names:
                shape = (Wg,) if family == "gravity" else (Wg, max(self.counts[family], 1))
                self.values[name] = wp.zeros(shape, dtype=dtype.get(name, wp.float64), device=d)

    def gather(self, model, families, rebuild: wp.array) -> None:
        """Launch: the fields of ``families`` from ``model`` (the Newton model) into :attr:`values`;
        ``rebuild[0] = 1`` where the pattern of drives, limits and masses is no longer the build's."""
        v, d = self.values, self.device
        dim = lambda family: (self.body_index.shape[0], self.counts[family])  # noqa: E731
        if "body" in families and self.counts["body"]:
            wp.launch(_gather_bodies, dim=dim("body"), device=d, inputs=[
                self.body_index, model.body_mass, model.body_com, model.body_inertia, self.massive],
                outputs=[v["body_mass"], v["body_com"], v["body_inertia"], rebuild])
        if "dof" in families and self.counts["dof"]:
            wp.launch(_gather_dofs, dim=dim("dof"), device=d, inputs=[
                self.param_index, self.axis, self.pattern, model.joint_armature, model.joint_damping,
                model.joint_target_ke, model.joint_target_kd, model.joint_target_mode, model.joint_effort_limit,
                model.joint_limit_lower, model.joint_limit_upper, model.joint_limit_ke, model.joint_limit_kd,
                int(self.joint_limits == "newton"), wp.float64(DEFAULT_LIMIT_KE), wp.float64(DEFAULT_LIMIT_KD),
                wp.float64(MAXVAL)], outputs=[*(v[k] for k in self.FAMILIES["dof"]), rebuild])
        if "shape" in families and self.counts["shape"]:
            wp.launch(_gather_shapes, dim=dim("shape"), device=d, inputs=[
                self.shape_index, model.shape_material_mu, model.shape_material_ke, model.shape_material_kd,
                model.shape_gap, int(self.contact_material == "newton"), wp.float32(NEWTON_DEFAULT_KE)],
                outputs=[*(v[k] for k in self.FAMILIES["shape"])])
        if "gravity" in families:
            wp.launch(_gather_gravity, dim=self.gravity_index.shape[0], device=d,
                      inputs=[self.gravity_index, model.gravity], outputs=[v["gravity"]])
