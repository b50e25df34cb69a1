"""MJCF and URDF import through the ``mujoco`` package (compiled ``MjModel`` → ``SapModel``).

Everything is read from the compiled model, so MuJoCo's defaults, classes, ``fromto`` geoms
and inertia inference apply. Mapping (MuJoCo → ours):

* body i ≥ 1 → a body with MuJoCo's mass, COM (``body_ipos``) and full inertia
  ``R(iquat) diag(inertia) R(iquat)ᵀ``; world → −1. Quaternions are converted wxyz → xyzw.
* joints of a body, applied by MuJoCo in order, each hinge about its own anchor:
  none → FIXED; ``free`` → FREE; one hinge/slide/ball → REVOLUTE/PRISMATIC/BALL with
  ``X_PF = X_PB₀ ∘ (anchor)``, ``X_CM = (anchor)``; several hinges/slides with the slides first,
  one common anchor and independent axes → one D6; anything else → a chain of joints through
  massless intermediate bodies named ``"<body>/<joint>"`` whose frames are the body frame after
  the preceding joints. Hinge/slide coordinates are relative to ``qpos0`` (``ref``).
* armature and damping per DOF (FREE reordered from MuJoCo's [v, ω] to our [ω, v]);
  ``limited`` ranges → position limits; ball cone limits and joint stiffness have no
  counterpart and are dropped with a warning.
* geoms plane/sphere/capsule/box with sliding friction, margin, contype/conaffinity;
  others are skipped with a warning; a geom on a static body is attached to the world.
  MuJoCo's contact stiffness (solref/solimp) is not mapped: shapes keep the solver fallbacks.
* candidate pairs = MuJoCo's (same weld body, parent filter, bitmasks, ``<exclude>``).
* joint actuators without dynamics: ``motor`` → feed-forward ``joint_act`` (gear·ctrl) with
  the effort limit from ctrlrange/forcerange; ``position`` → drive with ke = kp·gear², kd = kv·gear²;
  ``velocity`` → drive with kd = kv·gear²; others are skipped with a warning.

``mujoco_qpos_to_joint_q`` and ``mujoco_qvel_to_joint_qd`` are the one place where MuJoCo's
coordinates are converted: MuJoCo's free joint has a body-frame ω and its ball joint a
child-frame ω; ours have ω in the parent (world) frame.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from .. import spatial
from ..builder import ModelBuilder
from .scene import LoadedScene

__all__ = ["MujocoJoint", "MujocoActuator", "MujocoMap", "load_mjcf", "mujoco_qpos_to_joint_q",
           "mujoco_qvel_to_joint_qd", "joint_qd_to_mujoco_qvel", "mujoco_ctrl_to_control", "MJCF_NUM_STEPS"]

MJCF_NUM_STEPS = 1000  # steps a loaded scene runs by default
MAX_RIGID_CONTACT_CAP = 64  # default contact slots per world: the candidate pairs, capped here
D6_AXIS_TOL = 1e-6  # hinge anchors closer than this [m] coincide; axes independent beyond it

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3  # mujoco.mjtJoint
_GEOM_PLANE, _GEOM_SPHERE, _GEOM_CAPSULE, _GEOM_BOX = 0, 2, 3, 6  # mujoco.mjtGeom
_FILTERPARENT = 1024  # mujoco.mjtDisableBit.mjDSBL_FILTERPARENT


@dataclass(frozen=True)
class MujocoJoint:
    """Where MuJoCo joint ``mj_joint`` lives in our coordinates.

    Attributes:
        mj_joint: MuJoCo joint id; mj_type: its ``mjtJoint`` value.
        qposadr / dofadr: its slices' starts in MuJoCo's qpos / qvel.
        joint: our joint index; q_index / qd_index: its start in our joint_q / joint_qd.
        qpos0: MuJoCo's reference coordinate (hinge/slide ``ref``), subtracted from qpos.
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
    """A mapped actuator: ``kind`` (motor, position, velocity), our DOF, gear and qpos0."""

    mj_actuator: int
    kind: str
    dof: int
    gear: float
    qpos0: float


@dataclass(frozen=True)
class MujocoMap:
    """MuJoCo ↔ ours: joints, bodies (MuJoCo body id → our body, −1 world) and actuators."""

    joints: tuple
    body: tuple
    actuators: tuple
    nq: int
    nv: int
    nu: int


def _quat(wxyz) -> np.ndarray:
    w, x, y, z = (float(v) for v in wxyz)
    return np.array([x, y, z, w])


def _name(m, kind, i, prefix):
    import mujoco

    n = mujoco.mj_id2name(m, kind, i)
    return n if n else f"{prefix}{i}"


def _compile(path_or_xml):
    import mujoco

    if isinstance(path_or_xml, (str, os.PathLike)) and not str(path_or_xml).lstrip().startswith("<"):
        path = os.fspath(path_or_xml)
        if not os.path.exists(path):
            raise ValueError(f"path_or_xml: no such file {path!r}")
        try:
            return mujoco.MjModel.from_xml_path(path), path
        except ValueError as e:
            raise ValueError(f"{path}: MuJoCo could not compile it ({e})") from None
    if isinstance(path_or_xml, str):
        try:
            return mujoco.MjModel.from_xml_string(path_or_xml), None
        except ValueError as e:
            raise ValueError(f"path_or_xml: MuJoCo could not compile the XML ({e})") from None
    raise ValueError(f"path_or_xml: expected a file path or an XML string, got {type(path_or_xml).__name__}")


def load_mjcf(path_or_xml, num_worlds: int = 1) -> LoadedScene:
    """Load an MJCF or URDF file (or XML string) through MuJoCo into a :class:`LoadedScene`."""
    import mujoco

    m, source = _compile(path_or_xml)
    b = ModelBuilder(gravity=np.array(m.opt.gravity, dtype=np.float64))
    drive_of_joint, actuators = _actuator_params(m)
    body_of = [-1] * m.nbody  # MuJoCo body -> our (real) body
    joints, dropped_limits, stiff = [], [], []
    for i in range(1, m.nbody):
        name = _name(m, mujoco.mjtObj.mjOBJ_BODY, i, "body")
        mass = float(m.body_mass[i])
        R = spatial.quat_to_matrix(_quat(m.body_iquat[i]))
        inertia = R @ np.diag(m.body_inertia[i]) @ R.T
        parent = body_of[int(m.body_parentid[i])]
        X_PB0 = spatial.transform(np.array(m.body_pos[i], float), _quat(m.body_quat[i]))
        jids = list(range(int(m.body_jntadr[i]), int(m.body_jntadr[i]) + int(m.body_jntnum[i])))
        for j in jids:
            if m.jnt_stiffness[j] != 0.0:
                stiff.append(_name(m, mujoco.mjtObj.mjOBJ_JOINT, j, "joint"))
        body_of[i] = _add_body_joints(b, m, name, mass, np.array(m.body_ipos[i], float), inertia, parent, X_PB0,
                                      jids, joints, dropped_limits, drive_of_joint)
    if dropped_limits:
        warnings.warn(f"load_mjcf: ball-joint cone limits are not supported and were dropped: {dropped_limits}",
                      stacklevel=2)
    if stiff:
        warnings.warn(f"load_mjcf: joint stiffness (passive springs) has no counterpart and is ignored: {stiff}",
                      stacklevel=2)

    data = mujoco.MjData(m)
    mujoco.mj_kinematics(m, data)
    shape_of_geom, skipped = {}, []
    for g in range(m.ngeom):
        gtype, body = int(m.geom_type[g]), int(m.geom_bodyid[g])
        gname = _name(m, mujoco.mjtObj.mjOBJ_GEOM, g, "geom")
        static = int(m.body_weldid[body]) == 0
        if static:  # attach to the world at its (fixed) world pose
            X = spatial.transform(np.array(data.geom_xpos[g], float),
                                  spatial.quat_from_matrix(np.array(data.geom_xmat[g], float).reshape(3, 3)))
            ours = -1
        else:
            X = spatial.transform(np.array(m.geom_pos[g], float), _quat(m.geom_quat[g]))
            ours = body_of[body]
        mat = dict(mu=float(m.geom_friction[g, 0]), margin=float(m.geom_margin[g]),
                   contype=int(m.geom_contype[g]), conaffinity=int(m.geom_conaffinity[g]), name=gname)
        size = m.geom_size[g]
        if gtype == _GEOM_PLANE:  # MuJoCo itself allows planes on static bodies only
            s = b.add_shape_plane(-1, X, **mat)
        elif gtype == _GEOM_SPHERE:
            s = b.add_shape_sphere(ours, X, radius=float(size[0]), **mat)
        elif gtype == _GEOM_CAPSULE:
            s = b.add_shape_capsule(ours, X, radius=float(size[0]), half_length=float(size[1]), **mat)
        elif gtype == _GEOM_BOX:
            s = b.add_shape_box(ours, X, *map(float, size[:3]), **mat)
        else:
            skipped.append(gname)
            continue
        shape_of_geom[g] = s
    if skipped:
        warnings.warn(f"load_mjcf: geom types other than plane/sphere/capsule/box are skipped: {skipped}",
                      stacklevel=2)
    _match_mujoco_pairs(b, m, shape_of_geom)

    model = b.replicate(num_worlds).finalize()
    dof_of_joint = {mj.mj_joint: mj.qd_index for mj in joints}
    actuators = tuple(MujocoActuator(a, kind, dof_of_joint[j], gear, float(m.qpos0[m.jnt_qposadr[j]]))
                      for a, kind, j, gear in actuators)
    mapping = MujocoMap(joints=tuple(joints), body=tuple(body_of), actuators=actuators, nq=int(m.nq),
                        nv=int(m.nv), nu=int(m.nu))
    probe = LoadedScene(name="", sap_model=model, state=None, control=None, dt=0.0, num_steps=0,
                        max_rigid_contact=0, mujoco_map=mapping)
    q0 = mujoco_qpos_to_joint_q(probe, np.array(m.qpos0, float))
    model = model.with_initial_state(q0, np.zeros(model.joint_dof_count), joint_qd_order="sap")
    name = os.path.splitext(os.path.basename(source))[0] if source else "mjcf"
    pairs = len(model.shape_pair)
    return LoadedScene(
        name=name, sap_model=model, state=model.state(), control=model.control(), dt=float(m.opt.timestep),
        num_steps=MJCF_NUM_STEPS, max_rigid_contact=max(8, min(pairs, MAX_RIGID_CONTACT_CAP)), solver_kwargs={},
        body_names=model.body_name, description=f"MJCF/URDF model {name!r} imported through MuJoCo",
        source=source, mj_model=m, mujoco_map=mapping,
    )


def _joint_params(m, j, drive_of_joint):
    """Limits, armature, damping and drive of a 1-DOF MuJoCo joint, in our coordinates."""
    adr, q0 = int(m.jnt_dofadr[j]), float(m.qpos0[m.jnt_qposadr[j]])
    lo, hi = (float(m.jnt_range[j, 0]) - q0, float(m.jnt_range[j, 1]) - q0) if m.jnt_limited[j] else (-math.inf, math.inf)
    return dict(limit_lower=lo, limit_upper=hi, armature=float(m.dof_armature[adr]),
                damping=float(m.dof_damping[adr]), **drive_of_joint.get(j, {}))


def _add_body_joints(b, m, name, mass, com, inertia, parent, X_PB0, jids, joints, dropped_limits, drive_of_joint):
    """Our body (and joints) for one MuJoCo body; returns our index of the body itself."""
    import mujoco

    jname = lambda j: _name(m, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")  # noqa: E731
    types = [int(m.jnt_type[j]) for j in jids]
    cursor_q, cursor_qd = b_sizes(b)
    if not jids:
        body = b.add_body(mass, com, inertia, name=name)
        b.add_joint_fixed(parent, body, X_PB0, name=f"{name}/weld")
        return body
    if _FREE in types:
        j = jids[0]
        if len(jids) > 1 or parent != -1:
            raise ValueError(f"body {name!r}: a free joint must be the only joint of a top-level body")
        body = b.add_body(mass, com, inertia, name=name)
        adr = int(m.jnt_dofadr[j])
        reorder = lambda x: np.concatenate([x[adr + 3:adr + 6], x[adr:adr + 3]])  # noqa: E731 [v, ω] -> [ω, v]
        b.add_joint_free(-1, body, armature=reorder(m.dof_armature), damping=reorder(m.dof_damping), name=jname(j))
        joints.append(MujocoJoint(j, _FREE, int(m.jnt_qposadr[j]), adr, b.joint_count - 1, cursor_q, cursor_qd, 0.0))
        return body
    anchors = [np.array(m.jnt_pos[j], float) for j in jids]
    axes = [np.array(m.jnt_axis[j], float) for j in jids]
    hinge = [k for k, t in enumerate(types) if t == _HINGE]
    slide = [k for k, t in enumerate(types) if t == _SLIDE]
    one_d6 = (len(jids) > 1 and _BALL not in types and slide == list(range(len(slide)))
              and all(np.linalg.norm(anchors[k] - anchors[hinge[0]]) < D6_AXIS_TOL for k in hinge)
              and all(len(g) < 2 or np.linalg.matrix_rank(np.array([axes[k] for k in g]), tol=D6_AXIS_TOL) == len(g)
                      for g in (hinge, slide)))
    if one_d6:
        anchor = anchors[hinge[0]] if hinge else anchors[0]
        body = b.add_body(mass, com, inertia, name=name)
        params = [_joint_params(m, j, drive_of_joint) for j in jids]
        per_dof = {k: [p.get(k, d) for p in params] for k, d in (
            ("limit_lower", -math.inf), ("limit_upper", math.inf), ("armature", 0.0), ("damping", 0.0),
            ("target_ke", 0.0), ("target_kd", 0.0), ("effort_limit", math.inf))}
        b.add_joint_d6(parent, body, spatial.transform_compose(X_PB0, spatial.transform(anchor)),
                       spatial.transform(anchor), linear_axes=[axes[k] for k in slide],
                       angular_axes=[axes[k] for k in hinge], name="+".join(jname(j) for j in jids), **per_dof)
        for k, j in enumerate(jids):
            joints.append(MujocoJoint(j, types[k], int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j]), b.joint_count - 1,
                                      cursor_q + k, cursor_qd + k, float(m.qpos0[m.jnt_qposadr[j]])))
        return body
    # One of our joints per MuJoCo joint; the intermediate bodies are massless frames.
    prev = parent
    for k, j in enumerate(jids):
        last = k == len(jids) - 1
        body = b.add_body(mass, com, inertia, name=name) if last else \
            b.add_body(0.0, inertia=np.zeros((3, 3)), name=f"{name}/{jname(j)}")
        Xp = spatial.transform_compose(X_PB0, spatial.transform(anchors[k])) if k == 0 else spatial.transform(anchors[k])
        Xc = spatial.transform(anchors[k])
        if types[k] == _BALL:
            adr = int(m.jnt_dofadr[j])
            if m.jnt_limited[j]:
                dropped_limits.append(jname(j))
            b.add_joint_ball(prev, body, Xp, Xc, armature=m.dof_armature[adr:adr + 3],
                             damping=m.dof_damping[adr:adr + 3], name=jname(j))
        else:
            add = b.add_joint_revolute if types[k] == _HINGE else b.add_joint_prismatic
            add(prev, body, Xp, Xc, axes[k], name=jname(j), **_joint_params(m, j, drive_of_joint))
        q_i, qd_i = b_sizes(b)
        n_q, n_qd = (4, 3) if types[k] == _BALL else (1, 1)
        joints.append(MujocoJoint(j, types[k], int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j]), b.joint_count - 1,
                                  q_i - n_q, qd_i - n_qd, float(m.qpos0[m.jnt_qposadr[j]]) if n_q == 1 else 0.0))
        prev = body
    return prev


def b_sizes(b: ModelBuilder) -> tuple[int, int]:
    """(nq, nv) of the joints a builder holds so far."""
    return b.coord_count, b.dof_count


def _actuator_params(m):
    """Drive parameters per MuJoCo joint and the mapped actuators ``(id, kind, joint, scale)``."""
    drive, actuators, skipped = {}, [], []
    for a in range(m.nu):
        j, gear = int(m.actuator_trnid[a, 0]), float(m.actuator_gear[a, 0])
        gain, bias = m.actuator_gainprm[a], m.actuator_biasprm[a]
        ok = (m.actuator_trntype[a] == 0 and m.actuator_dyntype[a] == 0 and m.actuator_gaintype[a] == 0
              and int(m.jnt_type[j]) in (_HINGE, _SLIDE) and j not in drive)
        kind = None
        if ok and m.actuator_biastype[a] == 0:
            kind = "motor"
        elif ok and m.actuator_biastype[a] == 1 and bias[0] == 0.0 and gain[0] > 0 and bias[1] == -gain[0]:
            kind = "position"
        elif ok and m.actuator_biastype[a] == 1 and bias[0] == 0.0 and bias[1] == 0.0 and bias[2] == -gain[0]:
            kind = "velocity"
        if kind is None:
            skipped.append(a)
            continue
        limits = []
        if m.actuator_forcelimited[a]:
            limits.append(np.max(np.abs(m.actuator_forcerange[a])) * abs(gear))
        if kind == "motor" and m.actuator_ctrllimited[a]:
            limits.append(np.max(np.abs(m.actuator_ctrlrange[a])) * abs(gear * gain[0]))
        effort = float(min(limits)) if limits else math.inf
        if kind == "motor":
            drive[j] = dict(effort_limit=effort)
            actuators.append((a, kind, j, gear * float(gain[0])))
        elif kind == "position":
            drive[j] = dict(target_ke=float(gain[0]) * gear**2, target_kd=float(-bias[2]) * gear**2, effort_limit=effort)
            actuators.append((a, kind, j, gear))
        else:
            drive[j] = dict(target_kd=float(gain[0]) * gear**2, effort_limit=effort)
            actuators.append((a, kind, j, gear))
    if skipped:
        warnings.warn(f"load_mjcf: actuators other than joint motor/position/velocity (or a second actuator on "
                      f"one joint) are skipped: ids {skipped}", stacklevel=3)
    return drive, actuators


def _mujoco_keeps(m, g1: int, g2: int) -> bool:
    """MuJoCo's own filter for a geom pair: weld bodies, parent filter, bitmasks, <exclude>."""
    b1, b2 = int(m.geom_bodyid[g1]), int(m.geom_bodyid[g2])
    w1, w2 = int(m.body_weldid[b1]), int(m.body_weldid[b2])
    if w1 == w2:
        return False
    if not (m.opt.disableflags & _FILTERPARENT) and w1 and w2:
        p1, p2 = int(m.body_weldid[m.body_parentid[w1]]), int(m.body_weldid[m.body_parentid[w2]])
        if w1 == p2 or w2 == p1:
            return False
    if not ((m.geom_contype[g1] & m.geom_conaffinity[g2]) or (m.geom_contype[g2] & m.geom_conaffinity[g1])):
        return False
    signatures = set(int(s) for s in m.exclude_signature[:m.nexclude])
    return ((min(b1, b2) << 16) + max(b1, b2)) not in signatures


def _match_mujoco_pairs(b: ModelBuilder, m, shape_of_geom: dict) -> None:
    """Filter every candidate pair MuJoCo would not test; warn about pairs our rules drop."""
    geom_of_shape = {s: g for g, s in shape_of_geom.items()}
    ours = {tuple(p) for p in b.finalize().shape_pair.tolist()}
    for a, c in sorted(ours):
        if not _mujoco_keeps(m, geom_of_shape[a], geom_of_shape[c]):
            b.add_collision_filter_pair(a, c)
    static = lambda s: int(m.body_weldid[m.geom_bodyid[geom_of_shape[s]]]) == 0  # noqa: E731
    missing = [(a, c) for a in geom_of_shape for c in geom_of_shape if a < c and (a, c) not in ours
               and not (static(a) and static(c)) and _mujoco_keeps(m, geom_of_shape[a], geom_of_shape[c])]
    if missing:
        warnings.warn(f"load_mjcf: shape pairs MuJoCo tests but our filters drop: {missing}", stacklevel=3)


# ----------------------------------------------------------------------------- coordinate maps


def _map(loaded: LoadedScene) -> MujocoMap:
    if loaded.mujoco_map is None:
        raise ValueError(f"scene {loaded.name!r}: no MuJoCo map (not loaded by load_mjcf)")
    return loaded.mujoco_map


def mujoco_qpos_to_joint_q(loaded: LoadedScene, qpos) -> np.ndarray:
    """MuJoCo ``qpos (…, nq_mj)`` → our ``joint_q (…, nq)`` (hinge/slide minus qpos0, wxyz → xyzw)."""
    mp, model = _map(loaded), loaded.sap_model
    qpos = np.asarray(qpos, dtype=np.float64)
    q = np.zeros(qpos.shape[:-1] + (model.joint_coord_count,))
    wxyz_to_xyzw = lambda x: np.concatenate([x[..., 1:4], x[..., 0:1]], -1)  # noqa: E731
    for mj in mp.joints:
        a, i = mj.qposadr, mj.q_index
        if mj.mj_type in (_HINGE, _SLIDE):
            q[..., i] = qpos[..., a] - mj.qpos0
        elif mj.mj_type == _BALL:
            q[..., i:i + 4] = wxyz_to_xyzw(qpos[..., a:a + 4])
        else:
            q[..., i:i + 3] = qpos[..., a:a + 3]
            q[..., i + 3:i + 7] = wxyz_to_xyzw(qpos[..., a + 3:a + 7])
    return q


def _rotation(qpos, a):
    return spatial.quat_to_matrix(np.concatenate([qpos[..., a + 1:a + 4], qpos[..., a:a + 1]], -1))


def mujoco_qvel_to_joint_qd(loaded: LoadedScene, qpos, qvel) -> np.ndarray:
    """MuJoCo ``qvel`` → our ``joint_qd`` in SAP order.

    Ball: ω_F = R(q_FM) ω_M (MuJoCo's ω is in the child frame). Free: ``[R_WB ω_B; v_O]``
    (MuJoCo's free joint is ``[v_O; ω_B]`` with ω in the body frame). Hinge/slide: copied.
    """
    mp, model = _map(loaded), loaded.sap_model
    qpos, qvel = np.asarray(qpos, dtype=np.float64), np.asarray(qvel, dtype=np.float64)
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
    return qd


def joint_qd_to_mujoco_qvel(loaded: LoadedScene, qpos, joint_qd) -> np.ndarray:
    """Inverse of :func:`mujoco_qvel_to_joint_qd` (``joint_qd`` in SAP order)."""
    mp = _map(loaded)
    qpos, qd = np.asarray(qpos, dtype=np.float64), np.asarray(joint_qd, dtype=np.float64)
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


def mujoco_ctrl_to_control(loaded: LoadedScene, ctrl, control) -> None:
    """Write MuJoCo ``ctrl (num_worlds, nu)`` into our control: motors → ``joint_act`` (gear·gain·ctrl),
    position actuators → ``joint_target_pos`` (ctrl/gear − qpos0), velocity → ``joint_target_vel``."""
    mp = _map(loaded)
    ctrl = np.asarray(ctrl, dtype=np.float64).reshape(-1, mp.nu)
    for act in mp.actuators:
        u = ctrl[:, act.mj_actuator]
        if act.kind == "motor":
            control.joint_act[:, act.dof] = act.gear * u
        elif act.kind == "position":
            control.joint_target_pos[:, act.dof] = u / act.gear - act.qpos0
        else:
            control.joint_target_vel[:, act.dof] = u / act.gear
