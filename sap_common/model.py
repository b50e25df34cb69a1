"""The model: one world's topology and parameters (frozen, NumPy) plus ``num_worlds``.

See docs/design.md § Data model and batching. Field names follow the Newton vocabulary. A model is normally made by
:class:`sap_common.builder.ModelBuilder`, by :func:`sap_common.io.load_json` or by
:mod:`sap_common.scenes`; constructing :class:`SapModel` directly is supported and runs the
same validation. Every array is read-only after construction.

Joint coordinate layouts (``joint_q`` per joint from ``joint_q_start``, ``joint_qd`` per DOF
from ``joint_qd_start``):

============  ====  ====  ====================================================================
type          nq    nv    meaning
============  ====  ====  ====================================================================
PRISMATIC     1     1     d [m] along ``joint_axis`` (same components in F and M); X_FM = (d a, 1)
REVOLUTE      1     1     θ [rad] about ``joint_axis``; X_FM = (0, R(a, θ))
BALL          4     3     q = q_FM ``[x,y,z,w]``; qd = ω_FM expressed in F; q̇ = ½ (ω_F, 0) ⊗ q
FIXED         0     0     X_FM = identity
FREE          7     6     q = [p_WO, q_WB] of the child body origin O (world); qd see below
DISTANCE      7     6     as FREE; the joint frames are anchor points for a distance limit
D6            n     n     one scalar per axis, linear axes first; X_FM = T(Σ d_i l_i) R(a_0,θ_0)…
============  ====  ====  ====================================================================

FREE/DISTANCE velocities differ between the two orders (docs/conventions.md): public ``[v_C, ω]``, SAP
``[ω, v_O]``, all in world coordinates. Per-DOF *parameters* of those joints (armature,
damping) are indexed in SAP order, because A = M + h·diag(D) is diagonal in SAP coordinates.
D6 angular axes are applied in sequence (each expressed in the frame left by the previous
rotations), after all translations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from . import geometry, spatial
from .constants import QUAT_NORM_MAX, QUAT_NORM_MIN, ROUNDING_MAX_RATIO
from .conventions import check_num_worlds, check_order, joint_qd_sap_to_public, quaternion_norm_ok
from .enums import CONSTRAINT_ROWS, ConstraintType, JointType, ShapeType
from .kinematics import body_state
from .mass_check import check_mass_matrix
from .state import SapControl, SapState

__all__ = ["JointType", "ShapeType", "ConstraintType", "SapModel", "joint_coord_count", "joint_dof_count",
           "coupler_joint_ok"]


_FLOATING = (JointType.FREE, JointType.DISTANCE)
_AXIS_JOINTS = (JointType.PRISMATIC, JointType.REVOLUTE, JointType.D6)

# A rotational inertia is accepted as symmetric when |I - Iᵀ| ≤ this times its largest
# entry: inputs come from text files and products of rotations, a few ulps off symmetric.
INERTIA_SYMMETRY_RTOL = 1e-9
# Principal moments must satisfy the triangle inequality I_a + I_b ≥ I_c (a real mass
# distribution); this slack (relative to the largest moment) admits thin rods and disks whose
# moments were rounded when written to a file.
INERTIA_TRIANGLE_RTOL = 1e-6
# Two D6 axes of one kind are "dependent" when |a × b| is below this (unit axes).
D6_AXIS_INDEPENDENCE_TOL = 1e-6


def joint_coord_count(joint_type: int, dof_dim=(0, 0)) -> int:
    """Number of position coordinates of a joint (see the module table)."""
    jt = JointType(joint_type)
    if jt in (JointType.PRISMATIC, JointType.REVOLUTE):
        return 1
    if jt == JointType.BALL:
        return 4
    if jt == JointType.FIXED:
        return 0
    if jt in _FLOATING:
        return 7
    return int(dof_dim[0]) + int(dof_dim[1])


def joint_dof_count(joint_type: int, dof_dim=(0, 0)) -> int:
    """Number of velocity coordinates (DOFs) of a joint."""
    jt = JointType(joint_type)
    if jt == JointType.BALL:
        return 3
    if jt in _FLOATING:
        return 6
    return joint_coord_count(jt, dof_dim)


def coupler_joint_ok(joint_type: int, dof_dim=(0, 0)) -> bool:
    """Whether a joint can take part in a coupler: one position and one velocity with q̇ = v
    (PRISMATIC, REVOLUTE, a D6 with one axis), as Drake's single-DOF joints."""
    jt = JointType(joint_type)
    return jt in _AXIS_JOINTS and joint_coord_count(jt, dof_dim) == 1


def _default_dof_dim(joint_type: JointType) -> tuple[int, int]:
    return {
        JointType.PRISMATIC: (1, 0),
        JointType.REVOLUTE: (0, 1),
        JointType.BALL: (0, 3),
        JointType.FIXED: (0, 0),
        JointType.FREE: (3, 3),
        JointType.DISTANCE: (3, 3),
    }[joint_type]


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.array(a)  # own copy: the model never aliases a caller's buffer
    a.setflags(write=False)
    return a


def _arr(name: str, value, dtype, shape: tuple) -> np.ndarray:
    """Convert ``value`` to ``dtype`` and check its shape (``-1`` = any length)."""
    try:
        a = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: cannot convert to {np.dtype(dtype).name} array ({e})") from None
    if a.ndim != len(shape) or any(s != -1 and s != n for s, n in zip(shape, a.shape)):
        want = "(" + ", ".join("n" if s == -1 else str(s) for s in shape) + ")"
        raise ValueError(f"{name}: expected shape {want}, got {a.shape}")
    return a


def check_rounding(name: str, shape_type: ShapeType, rounding: float, core_bounds: np.ndarray) -> None:
    """Raise ``ValueError`` (naming ``name``) unless ``rounding`` [m] is a valid rounding radius for a
    shape of ``shape_type`` whose core has the local bounds ``core_bounds`` (2, 3): finite, ≥ 0, 0 for
    a plane or a height field (neither is a convex core a ball can sweep), and at most
    ``ROUNDING_MAX_RATIO`` times the core's largest half extent."""
    if not (np.isfinite(rounding) and rounding >= 0.0):
        raise ValueError(f"{name}: must be finite and >= 0 m, got {rounding}")
    if rounding == 0.0:
        return
    if shape_type in (ShapeType.PLANE, ShapeType.HEIGHTFIELD):
        raise ValueError(f"{name}: a {shape_type.name} takes no rounding (0); rounded shapes are SPHERE, CAPSULE, "
                         f"BOX, CYLINDER, ELLIPSOID and CONVEX_MESH, got {rounding}")
    extent = 0.5 * float(np.max(core_bounds[1] - core_bounds[0]))
    if rounding > ROUNDING_MAX_RATIO * extent:
        raise ValueError(f"{name}: at most {ROUNDING_MAX_RATIO:g} times the core's largest half extent "
                         f"({extent:g} m), got {rounding}; a ball that large around the core is a sphere")


def check_inertia(name: str, mass: float, inertia: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``inertia`` (3×3, about the COM) is physical for ``mass``.

    Symmetric positive definite with the triangle inequality on its principal moments; a
    massless body (``mass == 0``) may have a zero inertia (a frame carried by its parent).
    """
    I = np.asarray(inertia, dtype=np.float64)
    if not np.all(np.isfinite(I)):
        raise ValueError(f"{name}: inertia must be finite, got {I.tolist()}")
    scale = max(np.max(np.abs(I)), 1e-300)
    if np.max(np.abs(I - I.T)) > INERTIA_SYMMETRY_RTOL * scale:
        raise ValueError(f"{name}: inertia must be symmetric, got {I.tolist()}")
    if mass == 0.0 and not np.any(I):
        return
    ev = np.linalg.eigvalsh(0.5 * (I + I.T))
    if ev[0] <= 0.0:
        raise ValueError(
            f"{name}: inertia must be positive definite (principal moments > 0), "
            f"got principal moments {ev.tolist()}"
        )
    if ev[0] + ev[1] < ev[2] * (1.0 - INERTIA_TRIANGLE_RTOL):
        raise ValueError(
            f"{name}: principal moments {ev.tolist()} violate the triangle inequality "
            "I_a + I_b >= I_c (no mass distribution has this inertia)"
        )


@dataclass(frozen=True, eq=False)
class SapModel:
    """One world's template (NumPy, frozen) plus the number of worlds.

    Sizes: B = ``body_count``, J = ``joint_count``, nq = ``joint_coord_count``,
    nv = ``joint_dof_count``, S = ``shape_count``. Body index −1 is the world.

    Attributes:
        num_worlds: number of identical worlds simulated together (≥ 1).
        body_mass: mass [kg], (B,), ≥ 0.
        body_com: centre of mass [m] in the body frame, (B, 3).
        body_inertia: rotational inertia about the COM [kg·m²], body-frame axes, (B, 3, 3).
        body_name: unique body names, (B,).
        joint_type: :class:`JointType` value per joint, (J,).
        joint_parent: parent body index, −1 = world, (J,).
        joint_child: child body index, (J,); every body is the child of exactly one joint.
        joint_X_p: pose X_PF of the joint frame F in the parent body [m, quat xyzw], (J, 7).
        joint_X_c: pose X_CM of the joint frame M in the child body [m, quat xyzw], (J, 7).
        joint_dof_dim: (number of linear, number of angular) DOFs per joint, (J, 2).
        joint_name: unique joint names, (J,).
        joint_axis: unit axis per DOF in the joint frame (prismatic, revolute, D6; zero for
            ball/free/distance DOFs), (nv, 3).
        joint_armature: added diagonal inertia per DOF [kg or kg·m²], (nv,).
        joint_damping: viscous damping per DOF [N·s/m or N·m·s/rad], (nv,).
        joint_target_ke: drive stiffness per DOF [N/m or N·m/rad], (nv,); 0 = none.
        joint_target_kd: drive damping per DOF [N·s/m or N·m·s/rad], (nv,); 0 = none.
        joint_effort_limit: bound on |drive + act| per DOF [N or N·m], (nv,), > 0, inf = none.
        joint_limit_lower / joint_limit_upper: position limits per DOF [m or rad], (nv,);
            ±inf = none. For a DISTANCE joint the slot of its first DOF holds the limits on
            the anchor distance [m].
        joint_limit_ke: limit stiffness per DOF, (nv,) (Drake uses 1e12).
        joint_limit_kd: limit damping per DOF, (nv,); the limit time scale is τ = kd/ke.
        joint_q_init: initial joint coordinates, (nq,).
        joint_qd_init: initial joint velocities in public order, (nv,).
        shape_type: :class:`ShapeType` value per shape, (S,).
        shape_body: body index per shape, −1 = world, (S,). Planes only on the world.
        shape_transform: pose X_BS of the shape in its body [m, quat xyzw], (S, 7).
        shape_size: per-type size (see :class:`ShapeType`) [m], (S, 3).
        shape_margin: contact margin [m] (pairs are reported while φ < margin), (S,).
        shape_material_mu: friction coefficient, (S,); NaN = unset (solver's fallback_mu).
        shape_material_ke: point-contact stiffness [N/m], (S,); NaN = unset
            (solver's fallback_stiffness); +inf = rigid.
        shape_material_tau: dissipation time scale τ_d [s], (S,); NaN = unset
            (solver's contact_tau_d).
        shape_collision_group: shapes collide only if their groups are equal or either is
            −1, (S,).
        shape_contype / shape_conaffinity: MuJoCo-style bitmasks; a pair may collide if
            ``(contype_a & conaffinity_b) | (contype_b & conaffinity_a)`` is non-zero, (S,).
        shape_filter_pair: explicitly excluded shape pairs, (F, 2).
        shape_name: unique shape names, (S,).
        gravity: gravitational acceleration [m/s²], world frame, (3,).
        shape_source: per shape, the index of its mesh (CONVEX_MESH) or height field
            (HEIGHTFIELD), −1 for every other type, (S,). Optional (default: all −1).
        mesh_vertex: points of every convex mesh, concatenated, in the shape frame [m], (MV, 3);
            a mesh is the convex hull of its points.
        mesh_vertex_start: start of mesh m's points in ``mesh_vertex``, (M + 1,) (last = MV).
        hfield_height: heights of every height field, concatenated row by row (row i along y,
            column j along x) [m], (H,).
        hfield_start: start of height field h in ``hfield_height``, (NH + 1,) (last = H).
        hfield_shape: (rows, columns) of each height field, ≥ 2 each, (NH, 2).
        shape_material_hcd: Hunt–Crossley dissipation d [s/m], (S,); NaN = unset (solver's
            fallback_hc_dissipation). Read by the ``lagged`` and ``similar`` contact
            approximations only. Optional (default: all unset).
        body_kinematic: True where a body is kinematic, (B,) bool. Optional (default: all False,
            every body dynamic). A kinematic body's joint velocities are prescribed by the state
            (``joint_qd`` in, unchanged by the step) and its pose follows them; it acts on the
            dynamic bodies through contact and constraints as a body of infinite mass. Every body of
            its kinematic tree is kinematic and the tree's root joint has the world as its parent
            (docs/formulation.md § Kinematic bodies).
        shape_rounding: rounding radius [m] per shape, (S,), ≥ 0 (default: all 0): the shape is
            the Minkowski sum of its core (the shape ``shape_type`` and ``shape_size`` describe)
            and a ball of this radius: every surface point moves out along its normal, edges and
            corners become round. Contacts are the cores' with φ reduced by the radii
            (docs/design.md § Rounded shapes). A plane or a height field takes none (0); a radius
            is at most ``ROUNDING_MAX_RATIO`` times the core's size (its bounding box's largest
            half extent), and finite.

    Holonomic constraints, K of them (all optional, default none; docs/formulation.md
    § Holonomic constraints, :class:`ConstraintType` for the types and their rows):
        constraint_type: :class:`ConstraintType` value per constraint, (K,).
        constraint_name: unique names, (K,).
        constraint_body_a / constraint_body_b: bodies A and B (−1 = world) of a DISTANCE,
            BALL, WELD or AXIS_ALIGN constraint, (K,); −1 for a COUPLER. A and B differ and
            are not both welded to the world.
        constraint_X_a / constraint_X_b: the frames X_AP on A and X_BQ on B [m, quat xyzw],
            (K, 7); a DISTANCE or BALL constraint reads the points p_AP, p_BQ only.
        constraint_axis: the unit axis â of an AXIS_ALIGN constraint, components in P and in Q,
            (K, 3); zero for the other types.
        constraint_joint0 / constraint_joint1: the joints of a COUPLER (single-DOF, q̇ = v;
            :func:`coupler_joint_ok`), (K,); −1 for the other types.
        constraint_gear_ratio / constraint_offset: a COUPLER's ρ and Δq [m or rad] in
            q₀ = ρ·q₁ + Δq, (K,).
        constraint_length: a DISTANCE constraint's free length ℓ₀ [m] (> 0), (K,).
        constraint_stiffness: a DISTANCE constraint's stiffness k [N/m] (> 0, inf = rigid), (K,);
            inf for the other types (all rigid).
        constraint_damping: a DISTANCE constraint's damping c [N·s/m] (≥ 0), (K,).

    Derived (computed at construction, not passed in):
        joint_q_start / joint_qd_start: segment starts, (J + 1,) (last entry = nq / nv).
        body_joint: the joint whose child each body is, (B,).
        body_parent: kinematic parent body (−1 for roots: children of the world and of
            FREE/DISTANCE joints), (B,).
        joint_order: joints sorted parents-first (for recursive kinematics), (J,).
        body_tree: kinematic tree (clique) index per body, (B,); ``tree_count`` trees.
        dof_tree: tree index per DOF, (nv,).
        body_static: True where a body is welded to the world (only FIXED joints up to it), (B,).
        dof_kinematic: True where a DOF belongs to a kinematic body's joint, (nv,).
        shape_pair: candidate collision pairs (a < b), sorted, (P, 2).
        mesh_face_start: start of mesh m's faces, (M + 1,); mesh_face_vertex_start: start of
            face f's vertices in ``mesh_face_vertex``, (F + 1,); mesh_face_vertex: indices into
            ``mesh_vertex`` of each face's vertices, counter-clockwise seen from outside, (FV,);
            mesh_face_plane: unit outward normal n and offset d of each face (n·x ≤ d inside),
            (F, 4). Faces are the hull's, coplanar triangles merged (:mod:`sap_common.geometry`).
        shape_local_bounds: each shape's axis-aligned bounds in its own frame (lower, upper)
            [m], (S, 2, 3); a plane's are unbounded except its top z = 0.
        constraint_row_start: first scalar row of each constraint, (K + 1,) (last = the number
            of constraint rows, :attr:`constraint_row_count`).
    """

    num_worlds: int
    body_mass: np.ndarray
    body_com: np.ndarray
    body_inertia: np.ndarray
    body_name: tuple
    joint_type: np.ndarray
    joint_parent: np.ndarray
    joint_child: np.ndarray
    joint_X_p: np.ndarray
    joint_X_c: np.ndarray
    joint_dof_dim: np.ndarray
    joint_name: tuple
    joint_axis: np.ndarray
    joint_armature: np.ndarray
    joint_damping: np.ndarray
    joint_target_ke: np.ndarray
    joint_target_kd: np.ndarray
    joint_effort_limit: np.ndarray
    joint_limit_lower: np.ndarray
    joint_limit_upper: np.ndarray
    joint_limit_ke: np.ndarray
    joint_limit_kd: np.ndarray
    joint_q_init: np.ndarray
    joint_qd_init: np.ndarray
    shape_type: np.ndarray
    shape_body: np.ndarray
    shape_transform: np.ndarray
    shape_size: np.ndarray
    shape_margin: np.ndarray
    shape_material_mu: np.ndarray
    shape_material_ke: np.ndarray
    shape_material_tau: np.ndarray
    shape_collision_group: np.ndarray
    shape_contype: np.ndarray
    shape_conaffinity: np.ndarray
    shape_filter_pair: np.ndarray
    shape_name: tuple
    gravity: np.ndarray
    shape_source: np.ndarray | None = None
    mesh_vertex: np.ndarray | None = None
    mesh_vertex_start: np.ndarray | None = None
    hfield_height: np.ndarray | None = None
    hfield_start: np.ndarray | None = None
    hfield_shape: np.ndarray | None = None
    shape_material_hcd: np.ndarray | None = None
    body_kinematic: np.ndarray | None = None
    shape_rounding: np.ndarray | None = None
    constraint_type: np.ndarray | None = None
    constraint_name: tuple | None = None
    constraint_body_a: np.ndarray | None = None
    constraint_body_b: np.ndarray | None = None
    constraint_X_a: np.ndarray | None = None
    constraint_X_b: np.ndarray | None = None
    constraint_axis: np.ndarray | None = None
    constraint_joint0: np.ndarray | None = None
    constraint_joint1: np.ndarray | None = None
    constraint_gear_ratio: np.ndarray | None = None
    constraint_offset: np.ndarray | None = None
    constraint_length: np.ndarray | None = None
    constraint_stiffness: np.ndarray | None = None
    constraint_damping: np.ndarray | None = None

    joint_q_start: np.ndarray = field(init=False)
    joint_qd_start: np.ndarray = field(init=False)
    body_joint: np.ndarray = field(init=False)
    body_parent: np.ndarray = field(init=False)
    joint_order: np.ndarray = field(init=False)
    body_tree: np.ndarray = field(init=False)
    tree_count: int = field(init=False)
    dof_tree: np.ndarray = field(init=False)
    body_static: np.ndarray = field(init=False)
    dof_kinematic: np.ndarray = field(init=False)
    shape_pair: np.ndarray = field(init=False)
    mesh_face_start: np.ndarray = field(init=False)
    mesh_face_vertex_start: np.ndarray = field(init=False)
    mesh_face_vertex: np.ndarray = field(init=False)
    mesh_face_plane: np.ndarray = field(init=False)
    shape_local_bounds: np.ndarray = field(init=False)
    constraint_row_start: np.ndarray = field(init=False)

    # ------------------------------------------------------------------ construction

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)

        set_("num_worlds", check_num_worlds(self.num_worlds))

        # --- bodies
        mass = _arr("body_mass", self.body_mass, np.float64, (-1,))
        B = mass.shape[0]
        com = _arr("body_com", self.body_com, np.float64, (B, 3))
        inertia = _arr("body_inertia", self.body_inertia, np.float64, (B, 3, 3))
        names = self._names("body_name", self.body_name, B)
        for b in range(B):
            if not (np.isfinite(mass[b]) and mass[b] >= 0.0):
                raise ValueError(f"body_mass[{b}] ({names[b]}): must be finite and >= 0, got {mass[b]}")
            if not np.all(np.isfinite(com[b])):
                raise ValueError(f"body_com[{b}] ({names[b]}): must be finite, got {com[b].tolist()}")
            check_inertia(f"body_inertia[{b}] ({names[b]})", mass[b], inertia[b])
        inertia = 0.5 * (inertia + np.swapaxes(inertia, -1, -2))

        # --- joints
        jtype = _arr("joint_type", self.joint_type, np.int32, (-1,))
        J = jtype.shape[0]
        valid_types = {int(t) for t in JointType}
        for j, t in enumerate(jtype):
            if int(t) not in valid_types:
                raise ValueError(
                    f"joint_type[{j}]: {int(t)} is not a JointType; valid: "
                    + ", ".join(f"{t.name}={t.value}" for t in JointType)
                )
        parent = _arr("joint_parent", self.joint_parent, np.int32, (J,))
        child = _arr("joint_child", self.joint_child, np.int32, (J,))
        X_p = self._transforms("joint_X_p", self.joint_X_p, J)
        X_c = self._transforms("joint_X_c", self.joint_X_c, J)
        dof_dim = _arr("joint_dof_dim", self.joint_dof_dim, np.int32, (J, 2))
        jnames = self._names("joint_name", self.joint_name, J)
        for j in range(J):
            jt = JointType(int(jtype[j]))
            if jt == JointType.D6:
                nl, na = int(dof_dim[j, 0]), int(dof_dim[j, 1])
                if not (0 <= nl <= 3 and 0 <= na <= 3 and nl + na >= 1):
                    raise ValueError(
                        f"joint_dof_dim[{j}] ({jnames[j]}): a D6 joint has 0-3 linear and 0-3 "
                        f"angular axes, at least one in all; got ({nl}, {na})"
                    )
            elif tuple(dof_dim[j]) != _default_dof_dim(jt):
                raise ValueError(
                    f"joint_dof_dim[{j}] ({jnames[j]}): a {jt.name} joint has dof_dim "
                    f"{_default_dof_dim(jt)}, got {tuple(int(x) for x in dof_dim[j])}"
                )
        nq_j = np.array([joint_coord_count(t, d) for t, d in zip(jtype, dof_dim)], dtype=np.int32)
        nv_j = np.array([joint_dof_count(t, d) for t, d in zip(jtype, dof_dim)], dtype=np.int32)
        q_start = np.concatenate([[0], np.cumsum(nq_j)]).astype(np.int32)
        qd_start = np.concatenate([[0], np.cumsum(nv_j)]).astype(np.int32)
        nq, nv = int(q_start[-1]), int(qd_start[-1])

        body_joint, body_parent, order = self._topology(jtype, parent, child, B, jnames, names)

        # --- per-DOF arrays
        dof = lambda n: _arr(n, getattr(self, n), np.float64, (nv,))  # noqa: E731
        axis = _arr("joint_axis", self.joint_axis, np.float64, (nv, 3)).copy()
        armature, damping = dof("joint_armature"), dof("joint_damping")
        ke, kd, effort = dof("joint_target_ke"), dof("joint_target_kd"), dof("joint_effort_limit")
        lo, hi = dof("joint_limit_lower"), dof("joint_limit_upper")
        lke, lkd = dof("joint_limit_ke"), dof("joint_limit_kd")
        for j in range(J):
            self._check_joint_dofs(
                j, JointType(int(jtype[j])), jnames[j], int(qd_start[j]), int(nv_j[j]),
                tuple(dof_dim[j]), axis, armature, damping, ke, kd, effort, lo, hi, lke, lkd,
            )

        q_init = _arr("joint_q_init", self.joint_q_init, np.float64, (nq,)).copy()
        qd_init = _arr("joint_qd_init", self.joint_qd_init, np.float64, (nv,))
        if not np.all(np.isfinite(q_init)):
            raise ValueError("joint_q_init: must be finite")
        if not np.all(np.isfinite(qd_init)):
            raise ValueError("joint_qd_init: must be finite")
        for j in range(J):
            qs = self._quat_slice(JointType(int(jtype[j])), int(q_start[j]))
            if qs is not None:
                if not quaternion_norm_ok(q_init[qs]):
                    raise ValueError(
                        f"joint_q_init[{qs.start}:{qs.stop}] ({jnames[j]}): a quaternion must be finite with "
                        f"{QUAT_NORM_MIN:g} <= |q| <= {QUAT_NORM_MAX:g} (it is normalized), got {q_init[qs].tolist()}"
                    )
                q_init[qs] = spatial.quat_normalize(q_init[qs])

        # --- shapes
        stype = _arr("shape_type", self.shape_type, np.int32, (-1,))
        S = stype.shape[0]
        sbody = _arr("shape_body", self.shape_body, np.int32, (S,))
        X_s = self._transforms("shape_transform", self.shape_transform, S)
        size = _arr("shape_size", self.shape_size, np.float64, (S, 3))
        margin = _arr("shape_margin", self.shape_margin, np.float64, (S,))
        mu = _arr("shape_material_mu", self.shape_material_mu, np.float64, (S,))
        ske = _arr("shape_material_ke", self.shape_material_ke, np.float64, (S,))
        stau = _arr("shape_material_tau", self.shape_material_tau, np.float64, (S,))
        shcd = _arr("shape_material_hcd", np.full(S, np.nan) if self.shape_material_hcd is None
                    else self.shape_material_hcd, np.float64, (S,))
        group = _arr("shape_collision_group", self.shape_collision_group, np.int32, (S,))
        contype = _arr("shape_contype", self.shape_contype, np.int64, (S,))
        conaff = _arr("shape_conaffinity", self.shape_conaffinity, np.int64, (S,))
        rounding = _arr("shape_rounding", np.zeros(S) if self.shape_rounding is None else self.shape_rounding,
                        np.float64, (S,))
        snames = self._names("shape_name", self.shape_name, S)
        for s_, d_ in enumerate(shcd):
            if not (np.isnan(d_) or (np.isfinite(d_) and d_ >= 0)):
                raise ValueError(f"shape_material_hcd[{s_}] ({snames[s_]}): must be finite and >= 0 s/m "
                                 f"(NaN = unset), got {d_}")
        for s in range(S):
            self._check_shape(s, snames[s], int(stype[s]), int(sbody[s]), B, size[s], margin[s],
                              mu[s], ske[s], stau[s], int(group[s]), int(contype[s]), int(conaff[s]))
        source, mesh_v, mesh_vs, hf_h, hf_s, hf_shape = self._shape_sources(stype, size, snames)
        fpair = _arr("shape_filter_pair", np.reshape(self.shape_filter_pair, (-1, 2)), np.int32, (-1, 2))
        for i, (a, b) in enumerate(fpair):
            if not (0 <= a < S and 0 <= b < S) or a == b:
                raise ValueError(
                    f"shape_filter_pair[{i}]: ({a}, {b}) must name two different shapes in [0, {S})"
                )
        gravity = _arr("gravity", self.gravity, np.float64, (3,))
        if not np.all(np.isfinite(gravity)):
            raise ValueError(f"gravity: must be finite, got {gravity.tolist()}")

        for k, v in dict(
            body_mass=mass, body_com=com, body_inertia=inertia, body_name=names,
            joint_type=jtype, joint_parent=parent, joint_child=child, joint_X_p=X_p, joint_X_c=X_c,
            joint_dof_dim=dof_dim, joint_name=jnames, joint_axis=axis, joint_armature=armature,
            joint_damping=damping, joint_target_ke=ke, joint_target_kd=kd,
            joint_effort_limit=effort, joint_limit_lower=lo, joint_limit_upper=hi,
            joint_limit_ke=lke, joint_limit_kd=lkd, joint_q_init=q_init, joint_qd_init=qd_init,
            shape_type=stype, shape_body=sbody, shape_transform=X_s, shape_size=size,
            shape_margin=margin, shape_material_mu=mu, shape_material_ke=ske,
            shape_material_tau=stau, shape_collision_group=group,
            shape_contype=contype.astype(np.uint32), shape_conaffinity=conaff.astype(np.uint32),
            shape_filter_pair=fpair, shape_name=snames, gravity=gravity, shape_source=source,
            mesh_vertex=mesh_v, mesh_vertex_start=mesh_vs, hfield_height=hf_h, hfield_start=hf_s,
            hfield_shape=hf_shape, shape_material_hcd=shcd, shape_rounding=rounding,
        ).items():
            set_(k, v if isinstance(v, tuple) else _ro(v))

        # --- derived topology
        body_tree = np.full(B, -1, dtype=np.int32)
        tree_count = 0
        for j in order:  # parents first: a root opens a new tree, a child joins its parent's
            c = child[j]
            if body_parent[c] < 0:
                body_tree[c] = tree_count
                tree_count += 1
            else:
                body_tree[c] = body_tree[body_parent[c]]
        dof_tree = np.zeros(nv, dtype=np.int32)
        for j in range(J):
            dof_tree[qd_start[j]:qd_start[j + 1]] = body_tree[child[j]]
        body_static = np.zeros(B, dtype=bool)  # welded to the world through FIXED joints only
        for j in order:  # parents first
            c = child[j]
            if jtype[j] == JointType.FIXED:
                body_static[c] = parent[j] < 0 or body_static[parent[j]]

        set_("joint_q_start", _ro(q_start))
        set_("joint_qd_start", _ro(qd_start))
        set_("body_joint", _ro(body_joint))
        set_("body_parent", _ro(body_parent))
        set_("joint_order", _ro(order))
        set_("body_tree", _ro(body_tree))
        set_("tree_count", int(tree_count))
        set_("dof_tree", _ro(dof_tree))
        set_("body_static", _ro(body_static))
        kinematic = self._kinematic(B, names, jnames, parent, child, body_joint, body_tree)
        set_("body_kinematic", _ro(kinematic))
        dof_kinematic = np.zeros(nv, dtype=bool)
        for j in range(J):
            dof_kinematic[qd_start[j]:qd_start[j + 1]] = kinematic[child[j]]
        set_("dof_kinematic", _ro(dof_kinematic))
        set_("shape_pair", _ro(self._candidate_pairs()))
        for k, v in zip(("mesh_face_start", "mesh_face_vertex_start", "mesh_face_vertex", "mesh_face_plane"),
                        geometry.mesh_faces(mesh_v, mesh_vs)):
            set_(k, _ro(v))
        core_bounds = geometry.shape_local_bounds(stype, size, source, mesh_v, mesh_vs, hf_h, hf_s)
        for s in range(S):
            check_rounding(f"shape_rounding[{s}] ({snames[s]})", ShapeType(int(stype[s])), rounding[s], core_bounds[s])
        set_("shape_local_bounds", _ro(geometry.shape_local_bounds(stype, size, source, mesh_v, mesh_vs, hf_h, hf_s,
                                                                   rounding)))
        self._constraints(set_)
        check_mass_matrix(self)

    def _kinematic(self, B, bnames, jnames, parent, child, body_joint, body_tree) -> np.ndarray:
        """``body_kinematic`` checked: (B,) bools; a kinematic body's whole tree is kinematic and the
        tree's root joint is jointed to the world."""
        if self.body_kinematic is None:
            return np.zeros(B, dtype=bool)
        raw = np.asarray(self.body_kinematic)
        if raw.shape != (B,) or not (raw.dtype == np.bool_ or np.issubdtype(raw.dtype, np.integer)):
            raise ValueError(f"body_kinematic: expected {B} booleans (one per body; True = kinematic), "
                             f"got {raw.dtype} {raw.shape}")
        if np.issubdtype(raw.dtype, np.integer) and not np.all((raw == 0) | (raw == 1)):
            raise ValueError("body_kinematic: expected booleans (0 or 1 when integers), got "
                             f"{sorted(set(raw.tolist()) - {0, 1})}")
        kinematic = raw.astype(bool)
        for b in np.flatnonzero(kinematic):
            j = body_joint[b]
            for other in np.flatnonzero(body_tree == body_tree[b]):
                if not kinematic[other]:
                    raise ValueError(
                        f"body_kinematic[{b}] ({bnames[b]}): body {bnames[other]!r} of the same kinematic tree "
                        "is dynamic; every body of a kinematic body's tree must be kinematic (valid: a whole "
                        "tree kinematic, its root jointed to the world, or none of it)")
            root = b
            while self.body_parent[root] >= 0:
                root = self.body_parent[root]
            jr = body_joint[root]
            if parent[jr] >= 0:
                raise ValueError(
                    f"body_kinematic[{b}] ({bnames[b]}): the root joint {jnames[jr]!r} of its tree has body "
                    f"{bnames[parent[jr]]!r} as parent; a kinematic tree's root joint must have the world (-1) as "
                    f"its parent (joint {jnames[j]!r})")
        return kinematic

    @staticmethod
    def _names(field_name: str, names, n: int) -> tuple:
        names = tuple(str(x) for x in names)
        if len(names) != n:
            raise ValueError(f"{field_name}: expected {n} names, got {len(names)}")
        seen = {}
        for i, s in enumerate(names):
            if s in seen:
                raise ValueError(f"{field_name}: name {s!r} is used twice (indices {seen[s]} and {i})")
            seen[s] = i
        return names

    @staticmethod
    def _transforms(field_name: str, X, n: int) -> np.ndarray:
        X = _arr(field_name, X, np.float64, (n, 7)).copy()
        for i in range(n):
            if not np.all(np.isfinite(X[i])):
                raise ValueError(f"{field_name}[{i}]: must be finite, got {X[i].tolist()}")
            if not np.linalg.norm(X[i, 3:]) > 0.0:
                raise ValueError(f"{field_name}[{i}]: quaternion (entries 3:7, xyzw) must be non-zero")
            X[i, 3:] = spatial.quat_normalize(X[i, 3:])
        return X

    @staticmethod
    def _quat_slice(jt: JointType, q0: int):
        if jt == JointType.BALL:
            return slice(q0, q0 + 4)
        if jt in _FLOATING:
            return slice(q0 + 3, q0 + 7)
        return None

    @staticmethod
    def _topology(jtype, parent, child, B, jnames, bnames):
        J = len(jtype)
        body_joint = np.full(B, -1, dtype=np.int32)
        for j in range(J):
            if not -1 <= parent[j] < B:
                raise ValueError(f"joint_parent[{j}] ({jnames[j]}): {parent[j]} is not a body index in [-1, {B})")
            if not 0 <= child[j] < B:
                raise ValueError(f"joint_child[{j}] ({jnames[j]}): {child[j]} is not a body index in [0, {B})")
            if parent[j] == child[j]:
                raise ValueError(f"joint_parent[{j}] ({jnames[j]}): a body cannot be jointed to itself")
            if body_joint[child[j]] >= 0:
                raise ValueError(
                    f"joint_child[{j}] ({jnames[j]}): body {bnames[child[j]]!r} is already the child of "
                    f"joint {jnames[body_joint[child[j]]]!r}; each body has exactly one parent joint"
                )
            body_joint[child[j]] = j
        for b in range(B):
            if body_joint[b] < 0:
                raise ValueError(
                    f"body_name[{b}] ({bnames[b]}): body has no joint; add a FREE joint for a "
                    "floating body or a FIXED joint to weld it"
                )
        floating = np.isin(jtype, [int(t) for t in _FLOATING])
        body_parent = (np.where(floating[body_joint], -1, parent[body_joint]).astype(np.int32) if B
                       else np.zeros(0, np.int32))
        # Depth by walking up; a walk longer than B steps means a cycle.
        depth = np.zeros(B, dtype=np.int64)
        for b in range(B):
            d, p = 0, body_parent[b]
            while p >= 0:
                d += 1
                if d > B:
                    raise ValueError(
                        f"joint_parent: the joints form a cycle through body {bnames[b]!r}; "
                        "joints must form a tree (forest) rooted at the world"
                    )
                p = body_parent[p]
            depth[b] = d
        order = np.array(sorted(range(J), key=lambda j: (depth[child[j]], j)), dtype=np.int32)
        return body_joint, body_parent, order

    @staticmethod
    def _check_joint_dofs(j, jt, name, d0, n, dof_dim, axis, armature, damping, ke, kd,
                          effort, lo, hi, lke, lkd):
        sl = slice(d0, d0 + n)
        where = f"({name}, DOFs {d0}:{d0 + n})"
        for arr_name, arr in (("joint_armature", armature), ("joint_damping", damping),
                              ("joint_target_ke", ke), ("joint_target_kd", kd),
                              ("joint_limit_ke", lke), ("joint_limit_kd", lkd)):
            v = arr[sl]
            if not np.all(np.isfinite(v) & (v >= 0.0)):
                raise ValueError(f"{arr_name}[{d0}:{d0 + n}] {where}: must be finite and >= 0, got {v.tolist()}")
        if not np.all(effort[sl] > 0.0):  # +inf allowed (no limit); NaN fails the comparison
            raise ValueError(f"joint_effort_limit[{d0}:{d0 + n}] {where}: must be > 0 (inf = no limit), "
                             f"got {effort[sl].tolist()}")
        if np.any(np.isnan(lo[sl])) or np.any(np.isnan(hi[sl])):
            raise ValueError(f"joint_limit_lower/upper {where}: must not be NaN (use ±inf for no limit)")
        if np.any(lo[sl] > hi[sl]):
            raise ValueError(
                f"joint_limit_lower/upper {where}: lower {lo[sl].tolist()} must be <= upper {hi[sl].tolist()}"
            )
        limited = np.isfinite(lo[sl]) | np.isfinite(hi[sl])
        if jt in (JointType.BALL, JointType.FREE) and np.any(limited):
            raise ValueError(f"joint_limit_lower/upper {where}: {jt.name} joints take no position limits")
        if jt == JointType.DISTANCE:
            if np.any(limited[1:]):
                raise ValueError(
                    f"joint_limit_lower/upper {where}: a DISTANCE joint keeps its distance limits in "
                    "the slot of its first DOF; the other slots must be ±inf"
                )
            if lo[d0] < 0.0:
                raise ValueError(f"joint_limit_lower[{d0}] {where}: a distance limit must be >= 0, got {lo[d0]}")
        if jt not in _AXIS_JOINTS and (np.any(ke[sl] > 0) or np.any(kd[sl] > 0)):
            raise ValueError(
                f"joint_target_ke/kd {where}: drives act on PRISMATIC, REVOLUTE and D6 DOFs only, "
                f"not on {jt.name} joints"
            )
        if jt in _AXIS_JOINTS:
            for k in range(d0, d0 + n):
                nrm = np.linalg.norm(axis[k])
                if not (np.all(np.isfinite(axis[k])) and nrm > 0.0):
                    raise ValueError(f"joint_axis[{k}] {where}: must be a non-zero finite vector, "
                                     f"got {axis[k].tolist()}")
                axis[k] = axis[k] / nrm
            if jt == JointType.D6:
                nl = dof_dim[0]
                for kind, rows in (("linear", range(d0, d0 + nl)), ("angular", range(d0 + nl, d0 + n))):
                    rows = list(rows)
                    if len(rows) > 1 and np.linalg.matrix_rank(axis[rows], tol=D6_AXIS_INDEPENDENCE_TOL) < len(rows):
                        raise ValueError(f"joint_axis {where}: the D6 {kind} axes must be linearly independent")
        else:
            axis[sl] = 0.0

    @staticmethod
    def _check_shape(s, name, st, body, B, size, margin, mu, ke, tau, group, contype, conaff):
        where = f"[{s}] ({name})"
        valid = {int(t) for t in ShapeType}
        if st not in valid:
            raise ValueError(
                f"shape_type{where}: {st} is not a ShapeType; valid: "
                + ", ".join(f"{t.name}={t.value}" for t in ShapeType)
            )
        st = ShapeType(st)
        if not -1 <= body < B:
            raise ValueError(f"shape_body{where}: {body} is not a body index in [-1, {B})")
        if st == ShapeType.PLANE and body != -1:
            raise ValueError(f"shape_body{where}: planes (half-spaces) must be attached to the world (body -1)")
        if not np.all(np.isfinite(size)):
            raise ValueError(f"shape_size{where}: must be finite, got {size.tolist()}")
        if st == ShapeType.SPHERE and not size[0] > 0:
            raise ValueError(f"shape_size{where}: sphere radius must be > 0, got {size[0]}")
        if st == ShapeType.CAPSULE and not (size[0] > 0 and size[1] >= 0):
            raise ValueError(f"shape_size{where}: capsule radius must be > 0 and half_length >= 0, "
                             f"got {size[:2].tolist()}")
        if st == ShapeType.BOX and not np.all(size > 0):
            raise ValueError(f"shape_size{where}: box half extents must be > 0, got {size.tolist()}")
        if st == ShapeType.CYLINDER and not (size[0] > 0 and size[1] > 0):
            raise ValueError(f"shape_size{where}: cylinder radius and half_length must be > 0, got {size[:2].tolist()}")
        if st == ShapeType.ELLIPSOID and not np.all(size > 0):
            raise ValueError(f"shape_size{where}: ellipsoid semi-axes must be > 0, got {size.tolist()}")
        if st == ShapeType.HEIGHTFIELD and not np.all(size > 0):
            raise ValueError(f"shape_size{where}: height field (hx, hy, base) must be > 0, got {size.tolist()}")
        if st == ShapeType.HEIGHTFIELD and body != -1:
            raise ValueError(f"shape_body{where}: height fields must be attached to the world (body -1)")
        if not (np.isfinite(margin) and margin >= 0):
            raise ValueError(f"shape_margin{where}: must be finite and >= 0, got {margin}")
        if not (np.isnan(mu) or (np.isfinite(mu) and mu >= 0)):
            raise ValueError(f"shape_material_mu{where}: must be >= 0 (NaN = unset), got {mu}")
        if not (np.isnan(ke) or ke > 0):
            raise ValueError(f"shape_material_ke{where}: must be > 0, inf = rigid (NaN = unset), got {ke}")
        if not (np.isnan(tau) or (np.isfinite(tau) and tau >= 0)):
            raise ValueError(f"shape_material_tau{where}: must be finite and >= 0 (NaN = unset), got {tau}")
        if group < -1:
            raise ValueError(f"shape_collision_group{where}: must be >= -1 (-1 collides with every group), got {group}")
        for nm, v in (("shape_contype", contype), ("shape_conaffinity", conaff)):
            if not 0 <= v < 2**32:
                raise ValueError(f"{nm}{where}: must be a 32-bit unsigned bitmask, got {v}")

    def _shape_sources(self, stype, size, snames):
        """Checked ``shape_source`` and mesh / height-field arrays (read-only copies)."""
        S = len(stype)
        mesh_v = _arr("mesh_vertex", np.zeros((0, 3)) if self.mesh_vertex is None else self.mesh_vertex,
                      np.float64, (-1, 3))
        mesh_vs = _arr("mesh_vertex_start", [0] if self.mesh_vertex_start is None else self.mesh_vertex_start,
                       np.int64, (-1,)).astype(np.int32)
        hf_h = _arr("hfield_height", np.zeros(0) if self.hfield_height is None else self.hfield_height,
                    np.float64, (-1,))
        hf_s = _arr("hfield_start", [0] if self.hfield_start is None else self.hfield_start,
                    np.int64, (-1,)).astype(np.int32)
        NH = len(hf_s) - 1
        hf_shape = _arr("hfield_shape", np.zeros((0, 2)) if self.hfield_shape is None else self.hfield_shape,
                        np.int64, (NH, 2)).astype(np.int32)
        source = _arr("shape_source", np.full(S, -1) if self.shape_source is None else self.shape_source,
                      np.int64, (S,)).astype(np.int32)
        for name, starts, total in (("mesh_vertex_start", mesh_vs, len(mesh_v)), ("hfield_start", hf_s, len(hf_h))):
            if len(starts) < 1 or starts[0] != 0 or starts[-1] != total or np.any(np.diff(starts) < 0):
                raise ValueError(f"{name}: must start at 0, never decrease and end at {total} (the number of "
                                 f"entries), got {starts.tolist()}")
        M = len(mesh_vs) - 1
        if not np.all(np.isfinite(mesh_v)):
            raise ValueError("mesh_vertex: must be finite")
        for m in range(M):
            if mesh_vs[m + 1] - mesh_vs[m] < 4:
                raise ValueError(f"mesh_vertex_start: mesh {m} has {mesh_vs[m + 1] - mesh_vs[m]} points; a convex "
                                 "mesh needs at least 4 spanning a volume")
        if not np.all(np.isfinite(hf_h)):
            raise ValueError("hfield_height: must be finite")
        for h in range(NH):
            r, c = (int(x) for x in hf_shape[h])
            if r < 2 or c < 2 or hf_s[h + 1] - hf_s[h] != r * c:
                raise ValueError(f"hfield_shape[{h}]: ({r}, {c}) must be >= 2 each and rows x columns = "
                                 f"{hf_s[h + 1] - hf_s[h]} heights")
        for s in range(S):
            st, where = ShapeType(int(stype[s])), f"shape_source[{s}] ({snames[s]})"
            if st == ShapeType.CONVEX_MESH and not 0 <= source[s] < M:
                raise ValueError(f"{where}: a CONVEX_MESH names its mesh, an index in [0, {M}), got {source[s]}")
            elif st == ShapeType.HEIGHTFIELD:
                if not 0 <= source[s] < NH:
                    raise ValueError(f"{where}: a HEIGHTFIELD names its height field, an index in [0, {NH}), "
                                     f"got {source[s]}")
                lo = float(np.min(hf_h[hf_s[source[s]]:hf_s[source[s] + 1]]))
                if not lo > -size[s, 2]:
                    raise ValueError(f"shape_size[{s}] ({snames[s]}): height field base {size[s, 2]} must reach "
                                     f"below its lowest height {lo} (solid from z = -base up)")
            elif st not in (ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD) and source[s] != -1:
                raise ValueError(f"{where}: must be -1 for a {st.name}, got {source[s]}")
        return source, mesh_v, mesh_vs, hf_h, hf_s, hf_shape

    def _constraints(self, set_) -> None:
        """Check the holonomic constraints (every field optional; none = no constraint) and store
        them read-only, with ``constraint_row_start``."""
        t = self.constraint_type
        K = 0 if t is None else len(np.asarray(t).reshape(-1))
        B, J = self.body_count, self.joint_count

        def get(name, dtype, shape, default):
            v = getattr(self, name)
            return _arr(name, default if v is None else v, dtype, shape)

        ctype = get("constraint_type", np.int64, (K,), np.zeros(K)).astype(np.int32)
        names = self._names("constraint_name", [f"constraint_{k}" for k in range(K)]
                            if self.constraint_name is None else self.constraint_name, K)
        body_a = get("constraint_body_a", np.int64, (K,), np.full(K, -1)).astype(np.int32)
        body_b = get("constraint_body_b", np.int64, (K,), np.full(K, -1)).astype(np.int32)
        identity = np.tile(spatial.transform_identity(), (K, 1))
        X_a = self._transforms("constraint_X_a", identity if self.constraint_X_a is None else self.constraint_X_a, K)
        X_b = self._transforms("constraint_X_b", identity if self.constraint_X_b is None else self.constraint_X_b, K)
        axis = get("constraint_axis", np.float64, (K, 3), np.zeros((K, 3))).copy()
        joint0 = get("constraint_joint0", np.int64, (K,), np.full(K, -1)).astype(np.int32)
        joint1 = get("constraint_joint1", np.int64, (K,), np.full(K, -1)).astype(np.int32)
        ratio = get("constraint_gear_ratio", np.float64, (K,), np.ones(K))
        offset = get("constraint_offset", np.float64, (K,), np.zeros(K))
        length = get("constraint_length", np.float64, (K,), np.zeros(K))
        stiffness = get("constraint_stiffness", np.float64, (K,), np.full(K, np.inf))
        damping = get("constraint_damping", np.float64, (K,), np.zeros(K))
        valid = {int(c) for c in ConstraintType}
        rows = np.zeros(K, dtype=np.int32)
        for k in range(K):
            where = f"[{k}] ({names[k]})"
            if int(ctype[k]) not in valid:
                raise ValueError(f"constraint_type{where}: {int(ctype[k])} is not a ConstraintType; valid: "
                                 + ", ".join(f"{c.name}={c.value}" for c in ConstraintType))
            ct = ConstraintType(int(ctype[k]))
            rows[k] = CONSTRAINT_ROWS[ct]
            if ct == ConstraintType.COUPLER:
                for nm, j in (("constraint_joint0", joint0[k]), ("constraint_joint1", joint1[k])):
                    if not 0 <= j < J:
                        raise ValueError(f"{nm}{where}: {int(j)} is not a joint index in [0, {J})")
                    if self.body_kinematic[self.joint_child[j]]:
                        raise ValueError(f"{nm}{where}: joint {self.joint_name[j]!r} moves the kinematic body "
                                         f"{self.body_name[self.joint_child[j]]!r}; holonomic constraints join "
                                         "dynamic bodies (and the world) only")
                    if not coupler_joint_ok(int(self.joint_type[j]), self.joint_dof_dim[j]):
                        raise ValueError(
                            f"{nm}{where}: joint {self.joint_name[j]!r} is a "
                            f"{JointType(int(self.joint_type[j])).name} joint with "
                            f"{int(self.joint_qd_start[j + 1] - self.joint_qd_start[j])} DOFs; a coupler needs two "
                            "single-DOF joints (PRISMATIC, REVOLUTE, or a D6 with one axis)")
                if joint0[k] == joint1[k]:
                    raise ValueError(f"constraint_joint0/joint1{where}: a coupler needs two different joints, "
                                     f"got {self.joint_name[joint0[k]]!r} twice")
                for nm, v in (("constraint_gear_ratio", ratio[k]), ("constraint_offset", offset[k])):
                    if not np.isfinite(v):
                        raise ValueError(f"{nm}{where}: must be finite, got {v}")
                continue
            for nm, b in (("constraint_body_a", body_a[k]), ("constraint_body_b", body_b[k])):
                if not -1 <= b < B:
                    raise ValueError(f"{nm}{where}: {int(b)} is not a body index in [-1, {B}) (-1 = world)")
            if body_a[k] == body_b[k]:
                raise ValueError(f"constraint_body_a/body_b{where}: a {ct.name} constraint needs two different "
                                 f"bodies, got {int(body_a[k])} twice")
            for nm, b in (("constraint_body_a", body_a[k]), ("constraint_body_b", body_b[k])):
                if b >= 0 and self.body_kinematic[b]:
                    raise ValueError(f"{nm}{where}: body {self.body_name[b]!r} is kinematic; holonomic constraints "
                                     "join dynamic bodies (and the world) only")
            static = [b < 0 or bool(self.body_static[b]) for b in (body_a[k], body_b[k])]
            if all(static):
                raise ValueError(f"constraint_body_a/body_b{where}: both bodies are the world or welded to it; a "
                                 f"{ct.name} constraint needs at least one body that moves")
            if ct == ConstraintType.DISTANCE:
                if not (np.isfinite(length[k]) and length[k] > 0.0):
                    raise ValueError(f"constraint_length{where}: the free length must be finite and > 0 m, "
                                     f"got {length[k]}")
                if not stiffness[k] > 0.0:
                    raise ValueError(f"constraint_stiffness{where}: must be > 0 N/m (inf = rigid), got {stiffness[k]}")
                if not (np.isfinite(damping[k]) and damping[k] >= 0.0):
                    raise ValueError(f"constraint_damping{where}: must be finite and >= 0 N·s/m, got {damping[k]}")
            elif ct == ConstraintType.AXIS_ALIGN:
                n = np.linalg.norm(axis[k])
                if not (np.all(np.isfinite(axis[k])) and n > 0.0):
                    raise ValueError(f"constraint_axis{where}: must be a non-zero finite vector, "
                                     f"got {axis[k].tolist()}")
                axis[k] = axis[k] / n
            if ct != ConstraintType.AXIS_ALIGN:
                axis[k] = 0.0
        for k, v in dict(constraint_type=ctype, constraint_name=names, constraint_body_a=body_a,
                         constraint_body_b=body_b, constraint_X_a=X_a, constraint_X_b=X_b, constraint_axis=axis,
                         constraint_joint0=joint0, constraint_joint1=joint1, constraint_gear_ratio=ratio,
                         constraint_offset=offset, constraint_length=length, constraint_stiffness=stiffness,
                         constraint_damping=damping).items():
            set_(k, v if isinstance(v, tuple) else _ro(v))
        set_("constraint_row_start", _ro(np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)))

    def _candidate_pairs(self) -> np.ndarray:
        """Shape pairs the narrow phase tests (the filters of docs/design.md § Collision), a < b, sorted."""
        S = len(self.shape_type)
        excluded = {tuple(sorted((int(a), int(b)))) for a, b in self.shape_filter_pair}
        pairs = []
        for a in range(S):
            for b in range(a + 1, S):
                ba, bb = int(self.shape_body[a]), int(self.shape_body[b])
                if ba == bb:
                    continue
                # Neither body moves with the solve (world, welded or kinematic): nothing to solve for.
                static_a = ba < 0 or self.body_static[ba] or self.body_kinematic[ba]
                static_b = bb < 0 or self.body_static[bb] or self.body_kinematic[bb]
                if static_a and static_b:
                    continue
                if ba >= 0 and bb >= 0 and (self.body_parent[ba] == bb or self.body_parent[bb] == ba):
                    continue  # bodies adjacent through a joint (the world is exempt)
                ga, gb = int(self.shape_collision_group[a]), int(self.shape_collision_group[b])
                if not (ga == gb or ga == -1 or gb == -1):
                    continue
                if not ((self.shape_contype[a] & self.shape_conaffinity[b])
                        or (self.shape_contype[b] & self.shape_conaffinity[a])):
                    continue
                if (a, b) in excluded:
                    continue
                pairs.append((a, b))
        return np.array(pairs, dtype=np.int32).reshape(-1, 2)

    # ------------------------------------------------------------------ sizes

    @property
    def body_count(self) -> int:
        return len(self.body_mass)

    @property
    def joint_count(self) -> int:
        return len(self.joint_type)

    @property
    def joint_coord_count(self) -> int:
        """nq, the length of ``joint_q`` per world."""
        return int(self.joint_q_start[-1])

    @property
    def joint_dof_count(self) -> int:
        """nv, the length of ``joint_qd`` per world."""
        return int(self.joint_qd_start[-1])

    @property
    def shape_count(self) -> int:
        return len(self.shape_type)

    @property
    def constraint_count(self) -> int:
        """K, the number of holonomic constraints."""
        return len(self.constraint_type)

    @property
    def constraint_row_count(self) -> int:
        """The scalar rows of all holonomic constraints (``constraint_row_start[-1]``)."""
        return int(self.constraint_row_start[-1])

    # ------------------------------------------------------------------ helpers

    def body_index(self, name: str) -> int:
        """Index of the body called ``name`` (``ValueError`` listing the names if absent)."""
        return self._index("body", self.body_name, name)

    def joint_index(self, name: str) -> int:
        return self._index("joint", self.joint_name, name)

    def shape_index(self, name: str) -> int:
        return self._index("shape", self.shape_name, name)

    def constraint_index(self, name: str) -> int:
        return self._index("constraint", self.constraint_name, name)

    @staticmethod
    def _index(kind, names, name):
        try:
            return names.index(name)
        except ValueError:
            raise ValueError(f"{kind} name: {name!r} not found; valid: {', '.join(names)}") from None

    def joint_q_slice(self, j: int) -> slice:
        return slice(int(self.joint_q_start[j]), int(self.joint_q_start[j + 1]))

    def joint_qd_slice(self, j: int) -> slice:
        return slice(int(self.joint_qd_start[j]), int(self.joint_qd_start[j + 1]))

    def replace(self, **fields) -> "SapModel":
        """A copy with ``fields`` (constructor fields: ``body_mass=…``, ``shape_material_mu=…``,
        ``gravity=…``) replaced, validated as a new model is (``ValueError`` naming the field); the
        fields derived from them (``joint_q_start``, the shape pairs, …) are derived again. How a
        world with other parameters than the batch's is built and solved alone."""
        given = {f.name for f in dataclasses.fields(self) if f.init}
        derived = sorted(set(fields) & ({f.name for f in dataclasses.fields(self)} - given))
        if derived:
            raise ValueError(f"{', '.join(derived)}: derived from the constructor fields, not set by replace")
        unknown = sorted(set(fields) - given)
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a SapModel field; valid: {', '.join(sorted(given))}")
        kwargs = {name: getattr(self, name) for name in given}
        kwargs.update(fields)
        return SapModel(**kwargs)

    def replicate(self, num_worlds: int) -> "SapModel":
        """The same world template with ``num_worlds`` worlds."""
        return self.replace(num_worlds=num_worlds)

    def with_initial_state(self, joint_q=None, joint_qd=None, joint_qd_order: str = "public") -> "SapModel":
        """The same model with new ``joint_q_init`` (nq,) and/or ``joint_qd_init`` (nv,).

        ``joint_qd`` is converted to public order first if ``joint_qd_order == "sap"``.
        """
        check_order("joint_qd_order", joint_qd_order)
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        if joint_q is not None:
            kwargs["joint_q_init"] = np.asarray(joint_q, dtype=np.float64)
        if joint_qd is not None:
            qd = np.asarray(joint_qd, dtype=np.float64)
            if joint_qd_order == "sap":
                qd = joint_qd_sap_to_public(self, kwargs["joint_q_init"], qd)
            kwargs["joint_qd_init"] = qd
        return SapModel(**kwargs)

    def state(self):
        """Initial state, public order, arrays shaped ``(num_worlds, …)``.

        ``joint_q``/``joint_qd`` from ``joint_q_init``/``joint_qd_init``; ``body_q`` and
        ``body_qd`` by forward kinematics; ``body_f`` zero.
        """
        W = self.num_worlds
        q = np.tile(self.joint_q_init, (W, 1))
        qd = np.tile(self.joint_qd_init, (W, 1))
        body_q, body_qd = body_state(self, q, qd, joint_qd_order="public")
        return SapState(
            joint_q=q, joint_qd=qd, body_q=body_q, body_qd=body_qd,
            body_f=np.zeros((W, self.body_count, 6)),
            joint_qd_order="public", body_f_order="public",
        )

    def control(self):
        """Zero control, public order, arrays shaped ``(num_worlds, nv)``."""
        z = lambda: np.zeros((self.num_worlds, self.joint_dof_count))  # noqa: E731
        return SapControl(
            joint_f=z(), joint_target_pos=z(), joint_target_vel=z(), joint_act=z(),
            joint_f_order="public",
        )

    def summary(self) -> str:
        """A few lines describing sizes, joints and shapes (for tools and debugging)."""
        lines = [
            f"SapModel: {self.num_worlds} world(s); per world {self.body_count} bodies, "
            f"{self.joint_count} joints (nq={self.joint_coord_count}, nv={self.joint_dof_count}), "
            f"{self.shape_count} shapes, {len(self.shape_pair)} candidate shape pairs, "
            f"{self.tree_count} trees, {self.constraint_count} holonomic constraints; gravity {self.gravity.tolist()}",
        ]
        for j in range(self.joint_count):
            p = self.joint_parent[j]
            lines.append(
                f"  joint {j} {self.joint_name[j]!r}: {JointType(int(self.joint_type[j])).name} "
                f"{'world' if p < 0 else self.body_name[p]} -> {self.body_name[self.joint_child[j]]} "
                f"(q {self.joint_q_start[j]}:{self.joint_q_start[j + 1]}, "
                f"qd {self.joint_qd_start[j]}:{self.joint_qd_start[j + 1]})"
                + (" kinematic" if self.body_kinematic[self.joint_child[j]] else "")
            )
        for k in range(self.constraint_count):
            ct = ConstraintType(int(self.constraint_type[k]))
            if ct == ConstraintType.COUPLER:
                what = (f"{self.joint_name[self.constraint_joint0[k]]} = {self.constraint_gear_ratio[k]:g}·"
                        f"{self.joint_name[self.constraint_joint1[k]]} + {self.constraint_offset[k]:g}")
            else:
                name_of = lambda b: "world" if b < 0 else self.body_name[b]  # noqa: E731
                what = f"{name_of(self.constraint_body_a[k])} - {name_of(self.constraint_body_b[k])}"
                if ct == ConstraintType.DISTANCE:
                    what += f", length {self.constraint_length[k]:g} m, k {self.constraint_stiffness[k]:g} N/m"
            r0, r1 = self.constraint_row_start[k], self.constraint_row_start[k + 1]
            lines.append(f"  constraint {k} {self.constraint_name[k]!r}: {ct.name} {what} (rows {r0}:{r1})")
        for s in range(self.shape_count):
            b = self.shape_body[s]
            lines.append(
                f"  shape {s} {self.shape_name[s]!r}: {ShapeType(int(self.shape_type[s])).name} on "
                f"{'world' if b < 0 else self.body_name[b]}, size {self.shape_size[s].tolist()}"
            )
        return "\n".join(lines)
