"""MJCF and URDF import through the ``mujoco`` package (compiled ``MjModel`` → ``SapModel``).

Everything is read from the compiled model, so MuJoCo's defaults, classes, ``fromto`` geoms,
inertia inference and URDF parsing apply. Mapping (MuJoCo → ours):

* **Bodies.** Body i ≥ 1 → one of our bodies with MuJoCo's mass, COM (``body_ipos``) and
  full inertia ``R(iquat) diag(inertia) R(iquat)ᵀ``; the world (0) → −1. Quaternions are
  converted wxyz → xyzw.
* **Joints** of a body, applied by MuJoCo in order, each hinge about its own anchor
  ``jnt_pos`` and each axis in the body frame as already moved by the previous joints:
  none → FIXED at ``(body_pos, body_quat)``; ``free`` → FREE; one hinge/slide/ball →
  REVOLUTE/PRISMATIC/BALL with ``X_PF = X_PB₀ ∘ (anchor)``, ``X_CM = (anchor)``; several
  hinges/slides with the slides first, one common hinge anchor and independent axes → one
  D6 (linear axes = slides, angular axes = hinges, in order: our D6 also rotates about axes in
  the moved frame); anything else → a chain, one of our joints per MuJoCo joint, through
  massless intermediate bodies named ``"<body>/<joint>"`` whose frames are the body frame
  after the preceding joints, the real body last. Hinge/slide coordinates are relative to
  ``qpos0`` (``ref``).
* **Joint parameters.** Armature and damping per DOF (FREE reordered from MuJoCo's [v, ω] to
  our [ω, v]); a joint-transmission actuator adds gear²·armature and gear²·damping (MuJoCo 4's
  actuator ``armature``/``damping``). ``limited`` ranges → position limits (minus ``qpos0``)
  with the builder's default limit stiffness. Ball cone limits and joint stiffness (passive
  springs) have no counterpart: dropped with a warning naming the joints.
* **Geoms.** plane, sphere, capsule, box, cylinder, ellipsoid, mesh and height field, with sliding
  friction ``friction[0]``, ``margin`` and ``contype``/``conaffinity``; SDF geoms are skipped
  with a warning. A mesh becomes a CONVEX_MESH of MuJoCo's compiled vertices (``mesh_vert``, in
  the geom frame MuJoCo recentred the mesh to; MuJoCo, like us, collides a mesh as its convex
  hull); a height field takes MuJoCo's heights ``hfield_data·size[2]`` over ±``size[0:2]`` with its
  base ``size[3]`` (planes and height fields must be static). Geoms of static bodies (welded to
  the world) are attached to the world at their world pose. MuJoCo's
  contact stiffness and damping (``solref``/``solimp``), ``condim``, ``gap`` and its friction
  combination (max of the two geoms) are not mapped: shapes keep the solver fallbacks for k
  and τ_d and our combination rule (docs/formulation.md § Material combination).
* **Hunt–Crossley dissipation d** (read by the ``lagged`` and ``similar`` contact
  approximations). MJCF has no such parameter: MuJoCo's contact damping (``solref``'s time
  constant and damping ratio) is a damper of its own soft-constraint model, not a dissipation
  per unit penetration rate, so nothing of a geom maps to d and a geom keeps the solver's
  ``fallback_hc_dissipation`` (50 s/m, what Drake gives a geometry its MuJoCo parser reads). A
  model states d with MJCF's ``<custom>`` numeric data, which MuJoCo compiles and ignores:
  ``<numeric name="hunt_crossley_dissipation" data="d"/>`` for every geom, and
  ``<numeric name="hunt_crossley_dissipation:GEOM" data="d"/>`` for the geom named GEOM (it wins);
  d must be finite and ≥ 0 [s/m], and GEOM a geom's name (``ValueError`` otherwise).
* **Candidate pairs** = MuJoCo's: weld bodies, parent filter, bitmasks, ``<exclude>``
  (explicit filter pairs make up the difference to our own rules; ``<pair>`` is ignored).
* **Actuators** with a joint transmission on a hinge/slide and no activation dynamics:
  ``motor`` (fixed gain, no bias) → feed-forward ``joint_act = gear·gain·ctrl`` with the effort
  limit from ctrlrange/forcerange; ``position`` → drive with ke = kp·gear², kd = kv·gear²;
  ``velocity`` → drive with kd = kv·gear²; anything else is skipped with a warning.
* **Equality constraints** (``<equality>``, docs/formulation.md § Holonomic constraints):
  ``connect`` → a ball constraint (MuJoCo's anchor on body1 and its compiled partner point on
  body2); ``weld`` → a weld constraint, frame P on body1 at ``relpose`` (MuJoCo's compiled
  pose of body2's anchor in body1) and frame Q on body2 at ``anchor`` with body2's axes;
  site-based ``connect``/``weld`` (``site1``, ``site2``) → a ball or weld between the two
  sites' points or frames (MuJoCo then reads neither ``anchor`` nor ``relpose``);
  ``joint`` with a linear polynomial (``polycoef`` a0 a1 0 0 0) → a coupler
  q₁ = a1·q₂ + a0 in our coordinates (MuJoCo's y − y₀ = a0 + a1·(x − x₀), both relative to
  ``qpos0`` as ours are). ``active="false"`` leaves the equality out (our constraints are always
  on; a note names it). ``solref``/``solimp`` are not mapped: every constraint takes Drake's
  near-rigid regularization; a weld's ``torquescale`` other than 1 is ignored with a note.
  Anything else (``tendon``, ``flex``, a joint equality with one joint or a nonlinear
  polynomial) raises a ``ValueError`` naming it.
* **Options.** ``timestep`` → dt; ``gravity`` (zero if MuJoCo's gravity flag is disabled);
  disabled contact/limit/damper/actuation flags remove pairs, limits, damping, actuators.
  Other features with no counterpart (tendons, joint friction loss,
  gravity compensation, fluid forces, mocap motion) are ignored with one warning.

:func:`mujoco_qpos_to_joint_q` and :func:`mujoco_qvel_to_joint_qd` are the one place where
MuJoCo's coordinates are converted: MuJoCo's free joint has a body-frame ω and its ball joint
a child-frame ω; ours have ω in the parent (world) frame.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from .. import conventions, spatial
from ..builder import ModelBuilder
from ..conventions import check_num_worlds
from ..model import D6_AXIS_INDEPENDENCE_TOL
from .scene import LoadedScene

__all__ = ["MujocoJoint", "MujocoActuator", "MujocoMap", "load_mjcf", "mujoco_qpos_to_joint_q",
           "mujoco_qvel_to_joint_qd", "joint_qd_to_mujoco_qvel", "mujoco_ctrl_to_control", "mujoco_pair_filter",
           "MJCF_NUM_STEPS", "MAX_RIGID_CONTACT_MIN", "MAX_RIGID_CONTACT_CAP"]

MJCF_NUM_STEPS = 1000  # steps a loaded scene runs by default
# Contact slots per world: one per candidate shape pair, at least this many and at most the cap
# (a robot standing or walking touches far fewer pairs than it has candidates).
MAX_RIGID_CONTACT_MIN = 8
MAX_RIGID_CONTACT_CAP = 64
# Hinge anchors closer than this [m] are merged into one D6 anchor: the FK error of merging is
# at most twice this, far below the 1e-10 m the tests hold FK to.
ANCHOR_TOL = 1e-12

# mujoco enums, as ints so that this module imports without mujoco.
_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3  # mjtJoint
_GEOM_PLANE, _GEOM_HFIELD, _GEOM_SPHERE, _GEOM_CAPSULE, _GEOM_ELLIPSOID, _GEOM_CYLINDER, _GEOM_BOX, _GEOM_MESH = \
    0, 1, 2, 3, 4, 5, 6, 7  # mjtGeom
_GEOM_NAMES = {8: "sdf"}
_TRN_JOINT, _DYN_NONE, _GAIN_FIXED, _BIAS_NONE, _BIAS_AFFINE = 0, 0, 0, 0, 1  # mjtTrn/Dyn/Gain/Bias
_OBJ_BODY, _OBJ_JOINT, _OBJ_GEOM, _OBJ_TENDON, _OBJ_ACTUATOR, _OBJ_EQUALITY = 1, 3, 5, 18, 19, 17  # mjtObj
_OBJ_NUMERIC = 21  # mjtObj
# The <custom><numeric> names that state the Hunt–Crossley dissipation (module docstring).
HC_NUMERIC = "hunt_crossley_dissipation"
# mjtDisableBit
_DSBL_CONSTRAINT, _DSBL_LIMIT, _DSBL_CONTACT, _DSBL_SPRING, _DSBL_DAMPER = 1, 8, 16, 32, 64
_DSBL_GRAVITY, _DSBL_CLAMPCTRL, _DSBL_FILTERPARENT, _DSBL_ACTUATION = 128, 256, 1024, 2048


@dataclass(frozen=True)
class MujocoJoint:
    """Where MuJoCo joint ``mj_joint`` lives in our coordinates.

    Attributes:
        mj_joint: MuJoCo joint id.
        mj_type: its ``mjtJoint`` value (0 free, 1 ball, 2 slide, 3 hinge).
        qposadr, dofadr: its slices' starts in MuJoCo's qpos / qvel.
        joint: our joint index (a D6 holds several MuJoCo joints).
        q_index, qd_index: its start in our joint_q / joint_qd (SAP order).
        qpos0: MuJoCo's reference coordinate (hinge/slide ``ref``), subtracted from qpos; 0 for
            ball and free joints.
    """

    mj_joint: int
    mj_type: int
    qposadr: int
    dofadr: int
    joint: int
    q_index: int
    qd_index: int
    qpos0: float


@dataclass(frozen=True)
class MujocoActuator:
    """A mapped MuJoCo actuator.

    Attributes:
        mj_actuator: MuJoCo actuator id (its column of ``ctrl``).
        kind: ``"motor"`` (→ ``joint_act``), ``"position"`` (→ ``joint_target_pos``) or
            ``"velocity"`` (→ ``joint_target_vel``).
        dof: our DOF index (same in public and SAP order: hinge/slide).
        gear: ``gear[0]``; gain: ``gainprm[0]`` (motor force = gear·gain·ctrl).
        qpos0: the joint's reference coordinate (position targets are ``ctrl/gear − qpos0``).
        ctrl_lower, ctrl_upper: MuJoCo's ctrl clamp (±inf when not ``ctrllimited`` or when
            MuJoCo's clampctrl flag is disabled).
    """

    mj_actuator: int
    kind: str
    dof: int
    gear: float
    gain: float
    qpos0: float
    ctrl_lower: float
    ctrl_upper: float


@dataclass(frozen=True)
class MujocoMap:
    """MuJoCo ↔ ours for one loaded model.

    Attributes:
        joints: one :class:`MujocoJoint` per MuJoCo joint, in MuJoCo order.
        body: MuJoCo body id → our body index (−1 for the world), length nbody.
        shape: MuJoCo geom id → our shape index (−1 for skipped geom types), length ngeom.
        actuators: one :class:`MujocoActuator` per mapped actuator.
        nq, nv, nu: MuJoCo's sizes.
    """

    joints: tuple
    body: tuple
    shape: tuple
    actuators: tuple
    nq: int
    nv: int
    nu: int


def _mujoco():
    try:
        import mujoco
    except ImportError:
        raise ImportError("load_mjcf needs the 'mujoco' package (pip install mujoco, or the [mujoco] extra)") from None
    return mujoco


def _field(m, name: str, n: int) -> np.ndarray:
    """``m.<name>`` as a float array, or n zeros where this MuJoCo version predates the field."""
    return np.asarray(getattr(m, name), dtype=np.float64) if hasattr(m, name) else np.zeros(n)


def _quat(wxyz) -> np.ndarray:
    w, x, y, z = (float(v) for v in wxyz)
    return np.array([x, y, z, w])


def _name(m, kind: int, i: int, prefix: str) -> str:
    n = _mujoco().mj_id2name(m, kind, i)
    return n if n else f"{prefix}{i}"


def _compile(path_or_xml):
    mujoco = _mujoco()

    if isinstance(path_or_xml, (str, os.PathLike)) and not str(path_or_xml).lstrip().startswith("<"):
        path = os.fspath(path_or_xml)
        if not os.path.exists(path):
            raise ValueError(f"path_or_xml: no such file {path!r}")
        try:
            return mujoco.MjModel.from_xml_path(path), path
        except ValueError as e:
            raise ValueError(f"path_or_xml: MuJoCo could not compile {path} ({e})") from None
    if isinstance(path_or_xml, str):
        try:
            return mujoco.MjModel.from_xml_string(path_or_xml), None
        except ValueError as e:
            raise ValueError(f"path_or_xml: MuJoCo could not compile the XML ({e})") from None
    raise ValueError(f"path_or_xml: expected a file path or an XML string, got {type(path_or_xml).__name__}")


def load_mjcf(path_or_xml, num_worlds: int = 1) -> LoadedScene:
    """Load an MJCF or URDF model (a file or an XML string) through MuJoCo.

    MuJoCo compiles the model; every quantity is then read from the compiled ``MjModel``
    following the mapping in the module docstring. Each group of dropped features gives one
    ``UserWarning`` whose message starts with ``"load_mjcf: "`` and names the elements.

    Conventions: the initial state is MuJoCo's ``qpos0`` with zero velocity; the control is
    what MuJoCo's initial ``ctrl = 0`` means (:func:`mujoco_ctrl_to_control`: a position
    actuator's target is ``−qpos0`` where a joint's ``ref`` is not 0, a ctrl clamped into a
    ``ctrlrange`` without 0); hinge/slide coordinates are ``qpos − qpos0``;
    ``max_rigid_contact = max(8, min(P, 64))`` with P the number of candidate shape pairs (one
    slot per pair, capped: raise it for scenes where many pairs touch at once or where box pairs
    make several contacts each).

    Args:
        path_or_xml: path of a ``.xml`` (MJCF) or ``.urdf`` file, or an XML string (detected
            by its first non-blank character ``<``).
        num_worlds: number of identical worlds in the returned model, ≥ 1.

    Returns:
        LoadedScene with ``mj_model`` (the compiled ``mujoco.MjModel``), ``mujoco_map``
        (:class:`MujocoMap`), ``dt = opt.timestep``, ``num_steps = 1000``, empty
        ``solver_kwargs``, the body names and ``source`` (the path, or None for a string).

    Raises:
        ValueError: a missing file, XML that MuJoCo rejects (MuJoCo's message included), or
            a construct with no safe mapping (named in the message).
    """
    num_worlds = check_num_worlds(num_worlds)
    mujoco = _mujoco()
    m, source = _compile(path_or_xml)
    dt = float(m.opt.timestep)
    if not (math.isfinite(dt) and dt > 0.0):  # MuJoCo compiles timestep="0"; no step can run with it
        raise ValueError(f"path_or_xml: {source or 'the XML'}: option timestep: must be a finite time step > 0 s, "
                         f"got {dt:g}")
    flags = int(m.opt.disableflags)
    notes: list[str] = []
    gravity = np.zeros(3) if flags & _DSBL_GRAVITY else np.array(m.opt.gravity, dtype=np.float64)
    b = ModelBuilder(gravity=gravity)
    drive, mapped = _actuator_params(m, notes)
    params = _JointParams(m, drive)
    body_of, joints = _add_bodies(b, m, params, notes)
    data = mujoco.MjData(m)
    mujoco.mj_kinematics(m, data)  # world poses of static geoms (qpos = qpos0)
    shape_of = _add_geoms(b, m, data, body_of, notes)
    _match_mujoco_pairs(b, m, shape_of, notes)
    _add_equalities(b, m, body_of, joints, notes)
    notes += _unmapped_features(m)
    for note in notes:
        warnings.warn(f"load_mjcf: {note}", stacklevel=2)

    model = b.replicate(num_worlds).finalize()
    qd_of_joint = {mj.mj_joint: mj.qd_index for mj in joints}
    clamp = not flags & _DSBL_CLAMPCTRL
    actuators = []
    for a, kind, j, gear, gain in mapped:
        lo, hi = (float(v) for v in m.actuator_ctrlrange[a]) if clamp and m.actuator_ctrllimited[a] else (
            -math.inf, math.inf)
        actuators.append(MujocoActuator(a, kind, qd_of_joint[j], gear, gain, float(m.qpos0[m.jnt_qposadr[j]]), lo, hi))
    mapping = MujocoMap(joints=tuple(joints), body=tuple(body_of), shape=tuple(shape_of), actuators=tuple(actuators),
                        nq=int(m.nq), nv=int(m.nv), nu=int(m.nu))
    q0 = _qpos_to_q(mapping, model, np.array(m.qpos0, dtype=np.float64))
    model = model.with_initial_state(q0, np.zeros(model.joint_dof_count), joint_qd_order="sap")
    name = os.path.splitext(os.path.basename(source))[0] if source else "mjcf"
    pairs = len(model.shape_pair)
    scene = LoadedScene(
        name=name, sap_model=model, state=model.state(), control=model.control(), dt=float(m.opt.timestep),
        num_steps=MJCF_NUM_STEPS, max_rigid_contact=max(MAX_RIGID_CONTACT_MIN, min(pairs, MAX_RIGID_CONTACT_CAP)),
        solver_kwargs={}, body_names=model.body_name,
        description=(f"{'URDF' if source and source.lower().endswith('.urdf') else 'MJCF'} model {name!r} "
                     f"imported through MuJoCo: {model.body_count} bodies, {model.joint_dof_count} DOFs, "
                     f"{model.shape_count} shapes, {len(actuators)} actuators."),
        source=source, mj_model=m, mujoco_map=mapping,
    )
    mujoco_ctrl_to_control(scene, np.zeros(m.nu), scene.control)  # MuJoCo starts with ctrl = 0
    return scene


# ----------------------------------------------------------------------------- bodies and joints


class _JointParams:
    """Per-DOF armature/damping and per-joint limits and drives, as our builder takes them."""

    def __init__(self, m, drive: dict):
        flags = int(m.opt.disableflags)
        self.m, self.drive = m, drive
        self.armature = np.array(m.dof_armature, dtype=np.float64)
        self.damping = np.array(m.dof_damping, dtype=np.float64)
        act_armature, act_damping = _field(m, "actuator_armature", m.nu), _field(m, "actuator_damping", m.nu)
        for a in range(m.nu):  # MuJoCo 4 actuator armature/damping act through the transmission
            j = int(m.actuator_trnid[a, 0])
            if m.actuator_trntype[a] == _TRN_JOINT and int(m.jnt_type[j]) in (_HINGE, _SLIDE):
                g2, d = float(m.actuator_gear[a, 0]) ** 2, int(m.jnt_dofadr[j])
                self.armature[d] += g2 * float(act_armature[a])
                self.damping[d] += g2 * float(act_damping[a])
        if flags & _DSBL_DAMPER:
            self.damping[:] = 0.0
        self.limits_on = not flags & (_DSBL_LIMIT | _DSBL_CONSTRAINT)

    def axis(self, j: int) -> dict:
        """Builder keywords of 1-DOF joint ``j``: limits (minus qpos0), armature, damping, drive."""
        m = self.m
        d, q0 = int(m.jnt_dofadr[j]), float(m.qpos0[m.jnt_qposadr[j]])
        lo, hi = -math.inf, math.inf
        if self.limits_on and m.jnt_limited[j]:
            lo, hi = float(m.jnt_range[j, 0]) - q0, float(m.jnt_range[j, 1]) - q0
        return dict(limit_lower=lo, limit_upper=hi, armature=float(self.armature[d]), damping=float(self.damping[d]),
                    **self.drive.get(j, {}))

    def dofs(self, j: int, n: int):
        d = int(self.m.jnt_dofadr[j])
        return self.armature[d:d + n], self.damping[d:d + n]


def _add_bodies(b: ModelBuilder, m, params: _JointParams, notes: list):
    """Our bodies and joints for every MuJoCo body; returns (body_of, joints)."""
    body_of, joints, ball_limits, stiff = [-1] * m.nbody, [], [], []
    flags = int(m.opt.disableflags)
    for i in range(1, m.nbody):
        jids = list(range(int(m.body_jntadr[i]), int(m.body_jntadr[i]) + int(m.body_jntnum[i])))
        for j in jids:
            if m.jnt_stiffness[j] != 0.0 and not flags & _DSBL_SPRING:
                stiff.append(_name(m, _OBJ_JOINT, j, "joint"))
            if m.jnt_type[j] == _BALL and m.jnt_limited[j] and params.limits_on:
                ball_limits.append(_name(m, _OBJ_JOINT, j, "joint"))
        body_of[i] = _add_body(b, m, i, body_of[int(m.body_parentid[i])], jids, params, joints)
    if ball_limits:
        notes.append(f"ball-joint cone limits are not supported and were dropped: {ball_limits}")
    if stiff:
        notes.append(f"joint stiffness (passive springs) has no counterpart and is ignored: {stiff}")
    return body_of, joints


def _add_body(b: ModelBuilder, m, i: int, parent: int, jids: list, params: _JointParams, joints: list) -> int:
    """Our body (and joints) for MuJoCo body ``i``; returns our index of the body itself."""
    name = _name(m, _OBJ_BODY, i, "body")
    jname = lambda j: _name(m, _OBJ_JOINT, j, "joint")  # noqa: E731
    R = spatial.quat_to_matrix(_quat(m.body_iquat[i]))
    inertial = (float(m.body_mass[i]), np.array(m.body_ipos[i], dtype=np.float64), R @ np.diag(m.body_inertia[i]) @ R.T)
    X_PB0 = spatial.transform(np.array(m.body_pos[i], dtype=np.float64), _quat(m.body_quat[i]))
    types = [int(m.jnt_type[j]) for j in jids]
    record = lambda j, t, q_i, qd_i: joints.append(MujocoJoint(  # noqa: E731
        j, t, int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j]), b.joint_count - 1, q_i, qd_i,
        float(m.qpos0[m.jnt_qposadr[j]]) if t in (_HINGE, _SLIDE) else 0.0))
    if not jids:
        body = b.add_body(*inertial, name=name)
        b.add_joint_fixed(parent, body, X_PB0, name=f"{name}/weld")
        return body
    if _FREE in types:
        if len(jids) > 1 or parent != -1:
            raise ValueError(f"jnt_type: body {name!r}: a free joint must be the only joint of a top-level body")
        body = b.add_body(*inertial, name=name)
        q_i, qd_i = b.coord_count, b.dof_count
        arm, damp = params.dofs(jids[0], 6)
        swap = lambda x: np.concatenate([x[3:6], x[0:3]])  # noqa: E731  MuJoCo [v, ω] -> ours [ω, v]
        b.add_joint_free(-1, body, armature=swap(arm), damping=swap(damp), name=jname(jids[0]))
        record(jids[0], _FREE, q_i, qd_i)
        return body
    anchors = [np.array(m.jnt_pos[j], dtype=np.float64) for j in jids]
    axes = [np.array(m.jnt_axis[j], dtype=np.float64) for j in jids]
    if _is_d6(types, anchors, axes):
        hinge = [k for k, t in enumerate(types) if t == _HINGE]
        anchor = anchors[hinge[0]] if hinge else anchors[0]  # slides translate the same everywhere
        body = b.add_body(*inertial, name=name)
        per_joint = [params.axis(j) for j in jids]
        per_dof = {k: [p.get(k, default) for p in per_joint] for k, default in (
            ("limit_lower", -math.inf), ("limit_upper", math.inf), ("armature", 0.0), ("damping", 0.0),
            ("target_ke", 0.0), ("target_kd", 0.0), ("effort_limit", math.inf))}
        q_i, qd_i = b.coord_count, b.dof_count
        b.add_joint_d6(parent, body, spatial.transform_compose(X_PB0, spatial.transform(anchor)),
                       spatial.transform(anchor), linear_axes=[a for a, t in zip(axes, types) if t == _SLIDE],
                       angular_axes=[axes[k] for k in hinge], name="+".join(jname(j) for j in jids), **per_dof)
        for k, j in enumerate(jids):
            record(j, types[k], q_i + k, qd_i + k)
        return body
    # A chain: joint k moves the body frame as MuJoCo has left it after joints 0..k−1, which
    # is the frame of the k-th intermediate (massless) body.
    prev = parent
    for k, j in enumerate(jids):
        last = k == len(jids) - 1
        body = b.add_body(*inertial, name=name) if last else b.add_body(0.0, inertia=np.zeros((3, 3)),
                                                                        name=f"{name}/{jname(j)}")
        X_p = spatial.transform(anchors[k])
        if k == 0:
            X_p = spatial.transform_compose(X_PB0, X_p)
        q_i, qd_i = b.coord_count, b.dof_count
        if types[k] == _BALL:
            arm, damp = params.dofs(j, 3)
            b.add_joint_ball(prev, body, X_p, spatial.transform(anchors[k]), armature=arm, damping=damp, name=jname(j))
        else:
            add = b.add_joint_revolute if types[k] == _HINGE else b.add_joint_prismatic
            add(prev, body, X_p, spatial.transform(anchors[k]), axes[k], name=jname(j), **params.axis(j))
        record(j, types[k], q_i, qd_i)
        prev = body
    return prev


def _is_d6(types: list, anchors: list, axes: list) -> bool:
    """Several hinges/slides, slides first, one hinge anchor, independent axes of each kind."""
    if len(types) < 2 or _BALL in types:
        return False
    slide = [k for k, t in enumerate(types) if t == _SLIDE]
    hinge = [k for k, t in enumerate(types) if t == _HINGE]
    if slide != list(range(len(slide))):
        return False
    if any(np.abs(anchors[k] - anchors[hinge[0]]).max() > ANCHOR_TOL for k in hinge):
        return False
    return all(len(g) < 2 or np.linalg.matrix_rank(np.array([axes[k] for k in g]), tol=D6_AXIS_INDEPENDENCE_TOL)
               == len(g) for g in (slide, hinge))


# ----------------------------------------------------------------------------- actuators


def _actuator_params(m, notes: list):
    """Drive keywords per MuJoCo joint and the mapped actuators ``(id, kind, joint, gear, gain)``."""
    flags = int(m.opt.disableflags)
    drive, mapped, skipped = {}, [], []
    clamp = not flags & _DSBL_CLAMPCTRL
    if flags & _DSBL_ACTUATION and m.nu:
        notes.append(f"actuation is disabled in the model (MuJoCo's actuation flag): all {m.nu} actuators skipped")
    delay = _field(m, "actuator_delay", m.nu)
    for a in range(m.nu if not flags & _DSBL_ACTUATION else 0):
        j, gear = int(m.actuator_trnid[a, 0]), float(m.actuator_gear[a, 0])
        gain, bias, group = m.actuator_gainprm[a], m.actuator_biasprm[a], int(m.actuator_group[a])
        ok = (m.actuator_trntype[a] == _TRN_JOINT and m.actuator_dyntype[a] == _DYN_NONE
              and m.actuator_gaintype[a] == _GAIN_FIXED and gear != 0.0 and delay[a] == 0.0
              and int(m.jnt_type[j]) in (_HINGE, _SLIDE) and j not in drive
              and not (0 <= group < 31 and (int(m.opt.disableactuator) >> group) & 1))
        kind = None
        if ok and m.actuator_biastype[a] == _BIAS_NONE:
            kind = "motor"
        elif ok and m.actuator_biastype[a] == _BIAS_AFFINE and bias[0] == 0.0 and gain[0] > 0 and bias[1] == -gain[0]:
            kind = "position"
        elif ok and m.actuator_biastype[a] == _BIAS_AFFINE and bias[0] == 0.0 and bias[1] == 0.0 \
                and gain[0] > 0 and bias[2] == -gain[0]:
            kind = "velocity"
        if kind is None:
            skipped.append(_name(m, _OBJ_ACTUATOR, a, "actuator"))
            continue
        limits = []  # on the generalized force gear·(actuator force)
        if m.actuator_forcelimited[a]:
            limits.append(np.max(np.abs(m.actuator_forcerange[a])) * abs(gear))
        if kind == "motor" and clamp and m.actuator_ctrllimited[a]:
            limits.append(np.max(np.abs(m.actuator_ctrlrange[a])) * abs(gear * gain[0]))
        if m.jnt_actfrclimited[j]:  # MuJoCo also clamps the joint's total actuator force
            limits.append(np.max(np.abs(m.jnt_actfrcrange[j])))
        effort = float(min(limits)) if limits else math.inf
        if not effort > 0.0:  # a zero force range: the actuator never acts
            skipped.append(_name(m, _OBJ_ACTUATOR, a, "actuator"))
            continue
        if kind == "motor":
            drive[j] = dict(effort_limit=effort)
        elif kind == "position":
            drive[j] = dict(target_ke=float(gain[0]) * gear**2, target_kd=float(-bias[2]) * gear**2,
                            effort_limit=effort)
        else:
            drive[j] = dict(target_kd=float(gain[0]) * gear**2, effort_limit=effort)
        mapped.append((a, kind, j, gear, float(gain[0])))
    if skipped:
        notes.append(f"actuators other than a joint motor/position/velocity without dynamics or delay (or a "
                     f"second actuator on one joint, or one with a zero force range) are skipped: {skipped}")
    return drive, mapped


# ----------------------------------------------------------------------------- geoms and pairs


def _hunt_crossley_dissipations(m) -> dict:
    """``{geom index or None (every geom): d}`` from the model's ``hunt_crossley_dissipation``
    numeric custom data (module docstring); ``ValueError`` naming the element when d is not a
    single finite number ≥ 0 or the geom does not exist."""
    out = {}
    for i in range(int(m.nnumeric)):
        name = _mujoco().mj_id2name(m, _OBJ_NUMERIC, i) or ""
        if name != HC_NUMERIC and not name.startswith(HC_NUMERIC + ":"):
            continue
        adr, size = int(m.numeric_adr[i]), int(m.numeric_size[i])
        values = [float(x) for x in m.numeric_data[adr:adr + size]]
        if len(values) != 1 or not (math.isfinite(values[0]) and values[0] >= 0):
            raise ValueError(f"custom numeric {name!r}: data must be one finite number >= 0 [s/m] (the Hunt–Crossley "
                             f"dissipation), got {values}")
        geom = None
        if name != HC_NUMERIC:
            geom_name = name[len(HC_NUMERIC) + 1:]
            geom = _mujoco().mj_name2id(m, _OBJ_GEOM, geom_name)
            if geom < 0:
                raise ValueError(f"custom numeric {name!r}: no geom named {geom_name!r}")
        out[geom] = values[0]
    return out


def _add_geoms(b: ModelBuilder, m, data, body_of: list, notes: list) -> list:
    """Our shape for every supported geom; returns MuJoCo geom → our shape (−1 skipped)."""
    shape_of, skipped = [-1] * m.ngeom, []
    hcd = _hunt_crossley_dissipations(m)
    for g in range(m.ngeom):
        gtype, body = int(m.geom_type[g]), int(m.geom_bodyid[g])
        gname = _name(m, _OBJ_GEOM, g, "geom")
        X_BG = spatial.transform(np.array(m.geom_pos[g], dtype=np.float64), _quat(m.geom_quat[g]))
        if int(m.body_weldid[body]) == 0:  # static: attach to the world at its (fixed) world pose
            X_WB = spatial.transform(np.array(data.xpos[body], dtype=np.float64), _quat(data.xquat[body]))
            X, ours = spatial.transform_compose(X_WB, X_BG), -1
        elif gtype in (_GEOM_PLANE, _GEOM_HFIELD):
            kind = "plane" if gtype == _GEOM_PLANE else "height field"
            raise ValueError(f"geom_type: {kind} geom {gname!r} sits on a moving body; planes (half-spaces) and "
                             "height fields must be static (welded to the world)")
        else:
            X, ours = X_BG, body_of[body]
        mat = dict(mu=float(m.geom_friction[g, 0]), margin=float(m.geom_margin[g]),
                   contype=int(m.geom_contype[g]), conaffinity=int(m.geom_conaffinity[g]), name=gname,
                   hcd=hcd.get(g, hcd.get(None)))
        size = [float(s) for s in m.geom_size[g]]
        if gtype == _GEOM_PLANE:
            shape_of[g] = b.add_shape_plane(-1, X, **mat)
        elif gtype == _GEOM_SPHERE:
            shape_of[g] = b.add_shape_sphere(ours, X, radius=size[0], **mat)
        elif gtype == _GEOM_CAPSULE:
            shape_of[g] = b.add_shape_capsule(ours, X, radius=size[0], half_length=size[1], **mat)
        elif gtype == _GEOM_BOX:
            shape_of[g] = b.add_shape_box(ours, X, *size, **mat)
        elif gtype == _GEOM_CYLINDER:
            shape_of[g] = b.add_shape_cylinder(ours, X, radius=size[0], half_length=size[1], **mat)
        elif gtype == _GEOM_ELLIPSOID:
            shape_of[g] = b.add_shape_ellipsoid(ours, X, *size, **mat)
        elif gtype == _GEOM_MESH:
            mesh = int(m.geom_dataid[g])
            adr, n = int(m.mesh_vertadr[mesh]), int(m.mesh_vertnum[mesh])
            vertices = np.array(m.mesh_vert[adr:adr + n], dtype=np.float64)  # in the geom frame (recentred)
            shape_of[g] = b.add_shape_convex_mesh(ours, X, vertices=vertices, **mat)
        elif gtype == _GEOM_HFIELD:
            hf = int(m.geom_dataid[g])
            nrow, ncol, adr = int(m.hfield_nrow[hf]), int(m.hfield_ncol[hf]), int(m.hfield_adr[hf])
            hx, hy, top, base = (float(v) for v in m.hfield_size[hf])
            heights = np.array(m.hfield_data[adr:adr + nrow * ncol], dtype=np.float64).reshape(nrow, ncol) * top
            shape_of[g] = b.add_shape_heightfield(heights, X, hx=hx, hy=hy, base=base, **mat)
        else:
            skipped.append(f"{gname} ({_GEOM_NAMES.get(gtype, gtype)})")
    if skipped:
        notes.append(f"geom types other than plane/height field/sphere/capsule/ellipsoid/cylinder/box/mesh are "
                     f"skipped: {skipped}")
    return shape_of


def mujoco_pair_filter(m, geoms) -> np.ndarray:
    """MuJoCo's own broad-phase filter for every pair of ``geoms``, ``(n, n)`` bool.

    A pair is a candidate unless: both geoms are on one weld body (``body_weldid``); the parent
    filter is on and one weld body is the weld of the other's parent (the world is exempt);
    no ``contype``/``conaffinity`` bit matches; the body pair is in ``<exclude>``; or contacts
    are disabled. Explicit ``<pair>`` elements are not included. The diagonal is False.
    """
    flags = int(m.opt.disableflags)
    g = np.asarray(geoms, dtype=np.int64)
    body = np.asarray(m.geom_bodyid, dtype=np.int64)[g]
    weld = np.asarray(m.body_weldid, dtype=np.int64)[body]
    parent_weld = np.asarray(m.body_weldid, dtype=np.int64)[np.asarray(m.body_parentid)[weld]]
    keep = weld[:, None] != weld[None, :]
    if not flags & _DSBL_FILTERPARENT:
        moving = (weld[:, None] != 0) & (weld[None, :] != 0)
        keep &= ~(moving & ((weld[:, None] == parent_weld[None, :]) | (parent_weld[:, None] == weld[None, :])))
    ct, ca = np.asarray(m.geom_contype, dtype=np.int64)[g], np.asarray(m.geom_conaffinity, dtype=np.int64)[g]
    keep &= ((ct[:, None] & ca[None, :]) | (ca[:, None] & ct[None, :])) != 0
    signature = (np.minimum(body[:, None], body[None, :]) << 16) + np.maximum(body[:, None], body[None, :])
    keep &= ~np.isin(signature, np.asarray(m.exclude_signature, dtype=np.int64)[:m.nexclude])
    if flags & (_DSBL_CONTACT | _DSBL_CONSTRAINT):
        keep[:] = False
    return keep


def _match_mujoco_pairs(b: ModelBuilder, m, shape_of: list, notes: list) -> None:
    """Filter every candidate pair MuJoCo would not test; note pairs MuJoCo tests that we drop."""
    geoms = [g for g in range(m.ngeom) if shape_of[g] >= 0]  # shape index order = this order
    keep = mujoco_pair_filter(m, geoms)
    probe = b.finalize()
    ours = {tuple(p) for p in probe.shape_pair.tolist()}
    for s, t in sorted(ours):
        if not keep[s, t]:
            b.add_collision_filter_pair(s, t)
    static = [int(m.body_weldid[m.geom_bodyid[g]]) == 0 for g in geoms]
    missing = [(probe.shape_name[s], probe.shape_name[t]) for s in range(len(geoms)) for t in range(s + 1, len(geoms))
               if keep[s, t] and (s, t) not in ours and not (static[s] and static[t])]
    if missing:
        notes.append(f"shape pairs MuJoCo tests but our filters drop (e.g. parent-child pairs with MuJoCo's "
                     f"filterparent flag disabled): {missing}")
    if m.npair:
        notes.append(f"explicit <contact><pair> elements are ignored ({m.npair}); candidate pairs follow "
                     "MuJoCo's automatic filter only")


_EQ_NAMES = {0: "connect", 1: "weld", 2: "joint", 3: "tendon", 4: "flex", 5: "flexvert", 6: "flexstrain",
             7: "distance"}
_OBJ_SITE = 6  # mjtObj


def _add_equalities(b: ModelBuilder, m, body_of: list, joints: list, notes: list) -> None:
    """MuJoCo's ``<equality>`` elements as our holonomic constraints (module docstring)."""
    our_joint = {mj.mj_joint: mj.joint for mj in joints}
    inactive, torquescale = [], []
    objtype = _field(m, "eq_objtype", m.neq)
    for e in range(m.neq):
        name = _name(m, _OBJ_EQUALITY, e, "equality")
        kind = int(m.eq_type[e])
        what = f"equality {name!r} ({_EQ_NAMES.get(kind, kind)})"
        if kind not in (0, 1, 2):
            raise ValueError(f"load_mjcf: {what}: not supported; supported: connect (→ ball constraint), weld "
                             "(→ weld constraint), joint with a linear polynomial (→ coupler)")
        if not m.eq_active0[e]:
            inactive.append(name)
            continue
        data = np.array(m.eq_data[e], dtype=np.float64)
        o1, o2 = int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
        try:
            if kind == 2:
                if o2 < 0:
                    raise ValueError("a joint equality with one joint fixes its coordinate; no coupler")
                if np.any(data[2:5] != 0.0):
                    raise ValueError(f"polycoef {data[:5].tolist()} is not linear (a2..a4 must be 0)")
                b.add_coupler(our_joint[o1], our_joint[o2], float(data[1]), float(data[0]), name=name)
                continue
            if int(objtype[e]) == _OBJ_SITE:
                _add_site_equality(b, m, kind, o1, o2, body_of, name)
            elif kind == 0:
                b.add_ball(body_of[o1], data[0:3], body_of[o2], data[3:6], name=name)
            else:
                X_AP = spatial.transform(data[3:6], _quat(data[6:10]))
                b.add_weld(body_of[o1], X_AP, body_of[o2], spatial.transform(data[0:3]), name=name)
            if kind == 1 and data[10] != 1.0:
                torquescale.append(name)
        except ValueError as err:
            raise ValueError(f"load_mjcf: {what}: {err}") from None
    if inactive:
        notes.append(f"inactive equality constraints (active=\"false\") are left out: {inactive}")
    if torquescale:
        notes.append(f"weld torquescale other than 1 is ignored (the weld is Drake's): {torquescale}")


def _add_site_equality(b: ModelBuilder, m, kind: int, s1: int, s2: int, body_of: list, name: str) -> None:
    """A site-based connect (kind 0) or weld (1): MuJoCo holds site1's point (connect) or frame
    (weld) on site2's, reading the sites' poses in their bodies and neither ``anchor`` nor
    ``relpose``; a ball or weld between the two site frames is the same constraint."""
    X = [spatial.transform(np.array(m.site_pos[s], dtype=np.float64), _quat(m.site_quat[s])) for s in (s1, s2)]
    body_a, body_b = (body_of[int(m.site_bodyid[s])] for s in (s1, s2))
    if kind == 0:
        b.add_ball(body_a, X[0][:3], body_b, X[1][:3], name=name)
    else:
        b.add_weld(body_a, X[0], body_b, X[1], name=name)


def _unmapped_features(m) -> list:
    """Notes on MuJoCo features the model uses and ours has no counterpart for."""
    notes = []
    named = lambda kind, ids, prefix: [_name(m, kind, int(i), prefix) for i in ids]  # noqa: E731
    if m.ntendon:
        notes.append(f"tendons are ignored: {named(_OBJ_TENDON, range(m.ntendon), 'tendon')}")
    if np.any(m.dof_frictionloss != 0):
        joints = sorted({int(m.dof_jntid[d]) for d in np.flatnonzero(m.dof_frictionloss)})
        notes.append(f"joint friction loss is ignored: {named(_OBJ_JOINT, joints, 'joint')}")
    if any(np.any(_field(m, f, 0) != 0) for f in ("dof_dampingpoly", "jnt_stiffnesspoly", "actuator_dampingpoly")):
        notes.append("nonlinear (polynomial) damping/stiffness terms are ignored")
    if np.any(m.body_gravcomp != 0):
        notes.append(f"gravity compensation is ignored: {named(_OBJ_BODY, np.flatnonzero(m.body_gravcomp), 'body')}")
    if m.nmocap:
        notes.append(f"mocap bodies are imported as static at their initial pose: "
                     f"{named(_OBJ_BODY, np.flatnonzero(m.body_mocapid >= 0), 'body')}")
    if m.opt.density or m.opt.viscosity or np.any(m.opt.wind != 0):
        notes.append("fluid forces (density, viscosity, wind) are ignored")
    if np.any(m.geom_gap != 0):
        notes.append(f"geom gap is ignored: {named(_OBJ_GEOM, np.flatnonzero(m.geom_gap), 'geom')}")
    return notes


# ----------------------------------------------------------------------------- coordinate maps


def _map(loaded: LoadedScene) -> MujocoMap:
    if getattr(loaded, "mujoco_map", None) is None:
        raise ValueError(f"loaded: scene {getattr(loaded, 'name', loaded)!r} has no MuJoCo map (not from load_mjcf)")
    return loaded.mujoco_map


def _last_axis(name: str, a, n: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim < 1 or a.shape[-1] != n:
        raise ValueError(f"{name}: expected shape (..., {n}), got {a.shape}")
    return a


def _wxyz_to_xyzw(x):
    return np.concatenate([x[..., 1:4], x[..., 0:1]], -1)


def _rotation(qpos, a):
    return spatial.quat_to_matrix(_wxyz_to_xyzw(qpos[..., a:a + 4]))


def _qpos_to_q(mp: MujocoMap, model, qpos) -> np.ndarray:
    q = np.zeros(qpos.shape[:-1] + (model.joint_coord_count,))
    for mj in mp.joints:
        a, i = mj.qposadr, mj.q_index
        if mj.mj_type in (_HINGE, _SLIDE):
            q[..., i] = qpos[..., a] - mj.qpos0
        elif mj.mj_type == _BALL:
            q[..., i:i + 4] = _wxyz_to_xyzw(qpos[..., a:a + 4])
        else:
            q[..., i:i + 3] = qpos[..., a:a + 3]
            q[..., i + 3:i + 7] = _wxyz_to_xyzw(qpos[..., a + 3:a + 7])
    return q


def mujoco_qpos_to_joint_q(loaded: LoadedScene, qpos) -> np.ndarray:
    """MuJoCo ``qpos`` → our ``joint_q``.

    Hinge/slide: ``q = qpos − qpos0``. Ball: wxyz → xyzw (q_FM). Free: ``[p_WB, quat_WB]``
    with the quaternion wxyz → xyzw. Intermediate chain bodies need no coordinates of their own.

    Args:
        loaded: a scene from :func:`load_mjcf`.
        qpos: ``(..., nq_mujoco)``, any leading batch dimensions.

    Returns:
        joint_q ``(..., nq)``.
    """
    mp = _map(loaded)
    return _qpos_to_q(mp, loaded.sap_model, _last_axis("qpos", qpos, mp.nq))


def mujoco_qvel_to_joint_qd(loaded: LoadedScene, qpos, qvel, order: str = "sap") -> np.ndarray:
    """MuJoCo ``qvel`` → our ``joint_qd``.

    Hinge/slide: copied. Ball: ``ω_F = R(q_FM) ω_M`` (MuJoCo's ω is in the child frame).
    Free: MuJoCo ``[v_O; ω_B]`` (origin velocity in world, ω in the body frame) → SAP
    ``[R_WB ω_B; v_O]``; ``order="public"`` then converts to ``[v_C; ω]`` through
    :func:`sap_common.conventions.joint_qd_sap_to_public`.

    Args:
        loaded: a scene from :func:`load_mjcf`.
        qpos: ``(..., nq_mujoco)``.
        qvel: ``(..., nv)`` with the same leading dimensions as ``qpos`` (at most one for
            ``order="public"``).
        order: ``"sap"`` or ``"public"``.

    Returns:
        joint_qd ``(..., nv)`` in the requested order.
    """
    conventions.check_order("order", order)
    mp, model = _map(loaded), loaded.sap_model
    qpos, qvel = _last_axis("qpos", qpos, mp.nq), _last_axis("qvel", qvel, mp.nv)
    qd = np.zeros(qvel.shape[:-1] + (model.joint_dof_count,))
    for mj in mp.joints:
        a, d, i = mj.qposadr, mj.dofadr, mj.qd_index
        if mj.mj_type in (_HINGE, _SLIDE):
            qd[..., i] = qvel[..., d]
        elif mj.mj_type == _BALL:
            qd[..., i:i + 3] = np.einsum("...ij,...j->...i", _rotation(qpos, a), qvel[..., d:d + 3])
        else:
            qd[..., i:i + 3] = np.einsum("...ij,...j->...i", _rotation(qpos, a + 3), qvel[..., d + 3:d + 6])
            qd[..., i + 3:i + 6] = qvel[..., d:d + 3]
    if order == "public":
        qd = conventions.joint_qd_sap_to_public(model, _qpos_to_q(mp, model, qpos), qd)
    return qd


def joint_qd_to_mujoco_qvel(loaded: LoadedScene, qpos, joint_qd, order: str = "sap") -> np.ndarray:
    """Our ``joint_qd`` (``order`` ``"sap"`` or ``"public"``) → MuJoCo ``qvel``: the inverse of
    :func:`mujoco_qvel_to_joint_qd`, with the same shapes."""
    conventions.check_order("order", order)
    mp, model = _map(loaded), loaded.sap_model
    qpos, qd = _last_axis("qpos", qpos, mp.nq), _last_axis("joint_qd", joint_qd, model.joint_dof_count)
    if order == "public":
        qd = conventions.joint_qd_public_to_sap(model, _qpos_to_q(mp, model, qpos), qd)
    qvel = np.zeros(qd.shape[:-1] + (mp.nv,))
    for mj in mp.joints:
        a, d, i = mj.qposadr, mj.dofadr, mj.qd_index
        if mj.mj_type in (_HINGE, _SLIDE):
            qvel[..., d] = qd[..., i]
        elif mj.mj_type == _BALL:
            qvel[..., d:d + 3] = np.einsum("...ji,...j->...i", _rotation(qpos, a), qd[..., i:i + 3])
        else:
            qvel[..., d:d + 3] = qd[..., i + 3:i + 6]
            qvel[..., d + 3:d + 6] = np.einsum("...ji,...j->...i", _rotation(qpos, a + 3), qd[..., i:i + 3])
    return qvel


def mujoco_ctrl_to_control(loaded: LoadedScene, ctrl, control):
    """Write MuJoCo controls into our control, world by world.

    ctrl is first clamped to ``ctrlrange`` where MuJoCo clamps it. Motors → ``joint_act =
    gear·gain·ctrl``; position actuators → ``joint_target_pos = ctrl/gear − qpos0``; velocity
    actuators → ``joint_target_vel = ctrl/gear``. Other DOFs are left as they are.

    Args:
        loaded: a scene from :func:`load_mjcf`.
        ctrl: ``(nu,)`` (every world) or ``(num_worlds, nu)``.
        control: a :class:`~sap_common.state.SapControl` with ``(num_worlds, nv)`` arrays
            (hinge/slide entries are the same in public and SAP order).

    Returns:
        ``control`` (modified in place).
    """
    mp = _map(loaded)
    W = control.joint_act.shape[0]
    u_all = _last_axis("ctrl", ctrl, mp.nu)
    if u_all.shape not in ((mp.nu,), (W, mp.nu)):
        raise ValueError(f"ctrl: expected shape ({mp.nu},) or ({W}, {mp.nu}), got {u_all.shape}")
    u_all = np.broadcast_to(u_all, (W, mp.nu))
    for act in mp.actuators:
        u = np.clip(u_all[:, act.mj_actuator], act.ctrl_lower, act.ctrl_upper)
        if act.kind == "motor":
            control.joint_act[:, act.dof] = act.gear * act.gain * u
        elif act.kind == "position":
            control.joint_target_pos[:, act.dof] = u / act.gear - act.qpos0
        else:
            control.joint_target_vel[:, act.dof] = u / act.gear
    return control
