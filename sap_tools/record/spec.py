"""Scenes as Drake scene specifications: what ``sap-record`` builds a Drake plant from.

A *scene specification* is the input part of the JSON scene format of
``tests/data/drake/README.md``: ``plant`` (time step, gravity, the discrete contact
approximation and the stiction tolerance), ``bodies`` (mass, COM,
inertia), ``joints`` (type, frames, axis, damping, limits, initial q and v in Drake's
coordinates), ``actuation`` (actuators, PD gains, desired state, feed-forward), ``geometries``
(shape, pose, contact properties — stiffness, relaxation time, Hunt–Crossley dissipation,
friction — or none for SceneGraph's defaults) and
``collision_candidate_pairs``. A recorded scene file is itself a specification, so
``sap-record`` re-records it from its own file; a built-in scene is converted by
:func:`scene_to_spec`.

Scene features with no Drake counterpart (pydrake 1.51.1, SAP, point contact) are refused by
:func:`scene_to_spec` and :func:`check_spec` with a ``ValueError`` that names them
(:data:`NO_DRAKE_COUNTERPART`). This module needs NumPy only (no pydrake).
"""

from __future__ import annotations

import math

import numpy as np

from sap_common import spatial
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.io.json_scene import DRAKE_LIMIT_STIFFNESS
from sap_common.io.scene import LoadedScene
from sap_common.model import ConstraintType, JointType, ShapeType

__all__ = ["NO_DRAKE_COUNTERPART", "SPEC_JOINT_TYPES", "SPEC_SHAPES", "APPROXIMATION_NAMES", "scene_to_spec",
           "check_spec", "recording_name", "with_approximation"]

# What a scene may contain that pydrake 1.51.1 (SAP, point contact) cannot express, and why.
NO_DRAKE_COUNTERPART = {
    "BALL joint": "pydrake 1.51 has no quaternion ball joint; its BallRpyJoint integrates roll-pitch-yaw "
                  "angles, a different position update (a scene file may still use type 'ball_rpy')",
    "D6 joint": "Drake has no joint with an arbitrary list of linear and angular axes",
    "DISTANCE joint": "Drake has no free joint with limits on the distance between two anchors",
    "FREE joint with a parent body": "Drake's free bodies float in the world frame (a QuaternionFloatingJoint "
                                     "added for every body without a joint)",
    "FREE joint with armature or damping": "Drake's floating joints added for free bodies have neither",
    "CAPSULE shape": "the JSON scene format has no capsule, so the recording could not be loaded back",
    "ELLIPSOID shape": "Drake's point contact has no ellipsoid–half-space or ellipsoid–mesh query of its own "
                       "(the recorder builds spheres, half spaces, cylinders and convex meshes only)",
    "HEIGHTFIELD shape": "Drake has no height-field shape",
    "BOX shape contact": ("Drake's point contact reports one point per geometry pair (the deepest), this project's box "
                  "collision one per touching corner: the contact sets would differ (put spheres at the corners, as "
                  "box_corners_slide does)"),
    "shape margin": "Drake's point contact reports a pair only in penetration (no margin)",
    "rounded shape": "Drake's shapes have no rounding radius (a box or cylinder swept by a ball); the scene "
                     "format's 'rounding' key is this project's extension",
    "rigid contact (ke = inf)": "Drake's point contact needs a finite point_contact_stiffness",
    "joint limit gains other than Drake's": "Drake's limit constraint has k = 1e12 and τ = h, fixed",
    "joint_f / body_f": "the recorder applies no external generalized forces or body wrenches",
    "joint_act beyond the effort limit on an undriven DOF": "Drake does not clamp a plain actuation input",
    "AXIS_ALIGN constraint": "Drake has no constraint that keeps two axes parallel (it closes a revolute loop "
                             "joint here; Drake's constraints are the coupler, distance, ball and weld)",
    "kinematic body": "the recorder's MultibodyPlant simulates every body under its dynamics (none whose velocity "
                      "the state prescribes)",
    "constraint on the world body": "pydrake 1.51.1 crashes on the first step when a ball, distance or weld "
                                    "constraint attaches to the world body (attach it to a body welded to the world)",
}
SPEC_JOINT_TYPES = ("quaternion_floating", "revolute", "prismatic", "ball_rpy", "weld")
# Boxes: see NO_DRAKE_COUNTERPART. Cylinders and convex meshes are recorded, but Drake's point
# contact gives a pair ONE point (the deepest) where this project gives a face or a line several
# (docs/validation.md): a scene with them matches Drake only while each pair touches in one point
# (a wheel on its rim, a mesh on a sphere or on a vertex), which the recording's contact counts
# then show step by step.
SPEC_SHAPES = ("sphere", "half_space", "cylinder", "convex")
# A limit time scale τ = kd/ke equal to h within this relative difference is Drake's τ = h
# (kd is stored as ke·h, one rounding).
LIMIT_TAU_RTOL = 1e-12
# sap-record's --approximation → Drake's DiscreteContactApproximation name in the scene file.
APPROXIMATION_NAMES = {"sap": "kSap", "lagged": "kLagged", "similar": "kSimilar"}
_SUFFIXES = tuple(f"_{a}" for a in APPROXIMATION_NAMES if a != "sap")


def recording_name(scene: str, approximation: str) -> str:
    """The recording's name: the scene's for ``sap`` (the first recordings' names), else the scene's
    with ``_lagged`` / ``_similar`` (a suffix of another approximation replaced), so that one folder
    holds a scene under every approximation."""
    base = next((scene[:-len(s)] for s in _SUFFIXES if scene.endswith(s)), scene)
    return base if approximation == "sap" else f"{base}_{approximation}"


def with_approximation(spec: dict, approximation: str) -> dict:
    """``spec`` recorded under ``approximation`` (``sap``, ``lagged``, ``similar``): the plant's
    ``discrete_contact_approximation`` and the recording's name (:func:`recording_name`)."""
    if approximation not in APPROXIMATION_NAMES:
        raise ValueError(f"--approximation: {approximation!r} is not valid; valid: {', '.join(APPROXIMATION_NAMES)}")
    name = APPROXIMATION_NAMES[approximation]
    out = {**spec, "plant": {**spec["plant"], "discrete_contact_approximation": name}}
    out["scene"] = recording_name(spec.get("scene", "scene"), approximation)
    if out["scene"] != spec.get("scene") and approximation != "sap":
        note = f"Recorded under Drake's {name} contact approximation (Hunt–Crossley)."
        out["description"] = f"{spec.get('description', '')} {note}".strip()
    return out


def _refuse(scene: str, feature: str, what: str) -> ValueError:
    return ValueError(f"scene {scene!r}: {what}: {feature} has no Drake counterpart "
                      f"({NO_DRAKE_COUNTERPART[feature]})")


def _pose(X) -> dict:
    X = np.asarray(X, float)
    return {"p": X[:3].tolist(), "quat_xyzw": X[3:].tolist()}


def _is_identity(X) -> bool:
    return bool(np.array_equal(np.asarray(X, float), spatial.transform_identity()))


def _convex_shape(m, mesh: int) -> dict:
    """The ``convex`` shape of mesh ``mesh``: its hull's vertices in the shape frame and its faces
    (vertex indices, counter-clockwise seen from outside), which Drake reads as an OBJ mesh."""
    v0, v1 = int(m.mesh_vertex_start[mesh]), int(m.mesh_vertex_start[mesh + 1])
    faces = []
    for f in range(int(m.mesh_face_start[mesh]), int(m.mesh_face_start[mesh + 1])):
        a, b = int(m.mesh_face_vertex_start[f]), int(m.mesh_face_vertex_start[f + 1])
        faces.append([int(k) - v0 for k in m.mesh_face_vertex[a:b]])
    return {"type": "convex", "vertices": m.mesh_vertex[v0:v1].tolist(), "faces": faces}


def scene_to_spec(scene: LoadedScene) -> dict:
    """The Drake scene specification of a :class:`LoadedScene` (world 0), or ``ValueError``
    naming the first feature Drake cannot express.

    Materials left unset (NaN) are left out, so SceneGraph fills in its defaults (the same
    numbers as this project's solver fallbacks). Joint armature becomes an actuator's rotor
    inertia (gear ratio 1); a drive becomes a PD-controlled actuator.
    """
    m, name = scene.sap_model, scene.name
    if np.any(scene.control.joint_f[0] != 0) or np.any(scene.state.body_f[0] != 0):
        raise _refuse(name, "joint_f / body_f", "control")
    bodies = [{"index": 0, "name": "world"}]
    for b in np.flatnonzero(m.body_kinematic):
        raise _refuse(name, "kinematic body", f"body {m.body_name[b]!r}")
    for b in range(m.body_count):
        bodies.append({"index": b + 1, "name": m.body_name[b], "mass": float(m.body_mass[b]),
                       "com_B": m.body_com[b].tolist(), "inertia_about_com_B": m.body_inertia[b].tolist()})
    body_name = lambda b: "world" if b < 0 else m.body_name[b]  # noqa: E731
    q0, qd0_pub = scene.state.joint_q[:1], scene.state.joint_qd[:1]
    qd0 = joint_qd_public_to_sap(m, q0, qd0_pub)[0]
    q0 = q0[0]
    joints, actuators, xd_q, xd_v, u_ff = [], [], [], [], []
    for j in range(m.joint_count):
        jt, jname = JointType(int(m.joint_type[j])), m.joint_name[j]
        where = f"joint {jname!r}"
        qs, ds = m.joint_q_slice(j), m.joint_qd_slice(j)
        q, v = q0[qs], qd0[ds]
        parent, child = int(m.joint_parent[j]), int(m.joint_child[j])
        if jt in (JointType.BALL, JointType.D6, JointType.DISTANCE):
            raise _refuse(name, f"{jt.name} joint", where)
        if jt == JointType.FREE:
            if parent != -1 or not _is_identity(m.joint_X_p[j]) or not _is_identity(m.joint_X_c[j]):
                raise _refuse(name, "FREE joint with a parent body", where)
            if np.any(m.joint_armature[ds] != 0) or np.any(m.joint_damping[ds] != 0):
                raise _refuse(name, "FREE joint with armature or damping", where)
            joints.append({"name": m.body_name[child], "type": "quaternion_floating",
                           "auto_added_for_free_body": True, "parent_body": "world",
                           "child_body": m.body_name[child],
                           "initial_q": [float(q[6]), *map(float, q[3:6]), *map(float, q[:3])],
                           "initial_v": v.tolist()})
            continue
        jd = {"name": jname, "type": {JointType.REVOLUTE: "revolute", JointType.PRISMATIC: "prismatic",
                                      JointType.FIXED: "weld"}[jt],
              "auto_added_for_free_body": False, "parent_body": body_name(parent), "child_body": body_name(child),
              "frame_on_parent_F": {"name": body_name(parent) if _is_identity(m.joint_X_p[j]) else f"{jname}_parent",
                                    "X_PF": _pose(m.joint_X_p[j])},
              "frame_on_child_M": {"name": body_name(child) if _is_identity(m.joint_X_c[j]) else f"{jname}_child",
                                   "X_CM": _pose(m.joint_X_c[j])},
              "initial_q": q.tolist(), "initial_v": v.tolist()}
        if jt != JointType.FIXED:
            d = ds.start
            lo, hi = float(m.joint_limit_lower[d]), float(m.joint_limit_upper[d])
            if math.isfinite(lo) or math.isfinite(hi):
                ke, kd = float(m.joint_limit_ke[d]), float(m.joint_limit_kd[d])
                if ke != DRAKE_LIMIT_STIFFNESS or abs(kd / ke - scene.dt) > LIMIT_TAU_RTOL * scene.dt:
                    raise _refuse(name, "joint limit gains other than Drake's", f"{where} (ke {ke}, kd {kd})")
            jd.update(axis=m.joint_axis[d].tolist(), damping=[float(m.joint_damping[d])],
                      position_lower_limits=[lo], position_upper_limits=[hi])
            ke, kd, effort = float(m.joint_target_ke[d]), float(m.joint_target_kd[d]), float(m.joint_effort_limit[d])
            act, arm = float(scene.control.joint_act[0, d]), float(m.joint_armature[d])
            driven = ke > 0 or kd > 0
            if not driven and abs(act) > effort:
                raise _refuse(name, "joint_act beyond the effort limit on an undriven DOF", where)
            if driven or arm != 0 or act != 0 or math.isfinite(effort):
                a = {"name": f"{jname}_actuator", "joint": jname, "effort_limit": effort, "rotor_inertia": arm,
                     "gear_ratio": 1.0, "pd_controlled": driven}
                if driven:
                    a["pd_gains"] = {"p": ke, "d": kd}
                # Drake's desired state has an entry per actuator (ignored for one without gains).
                xd_q.append(float(scene.control.joint_target_pos[0, d]) if driven else 0.0)
                xd_v.append(float(scene.control.joint_target_vel[0, d]) if driven else 0.0)
                actuators.append(a)
                u_ff.append(act)
        joints.append(jd)
    geometries = []
    for s in range(m.shape_count):
        st, where = ShapeType(int(m.shape_type[s])), f"shape {m.shape_name[s]!r}"
        if st in (ShapeType.CAPSULE, ShapeType.BOX, ShapeType.ELLIPSOID, ShapeType.HEIGHTFIELD):
            raise _refuse(name, "BOX shape contact" if st == ShapeType.BOX else f"{st.name} shape", where)
        if m.shape_margin[s] != 0:
            raise _refuse(name, "shape margin", where)
        if m.shape_material_ke[s] == np.inf:
            raise _refuse(name, "rigid contact (ke = inf)", where)
        size = m.shape_size[s]
        if st == ShapeType.SPHERE:
            shape = {"type": "sphere", "radius": float(size[0])}
        elif st == ShapeType.CYLINDER:
            shape = {"type": "cylinder", "radius": float(size[0]), "length": float(2.0 * size[1])}
        elif st == ShapeType.CONVEX_MESH:
            shape = _convex_shape(m, int(m.shape_source[s]))
        else:
            shape = {"type": "half_space"}
        if m.shape_rounding[s] != 0:
            shape["rounding"] = float(m.shape_rounding[s])  # refused by check_spec below, named
        g = {"index": s, "name": m.shape_name[s], "body": body_name(int(m.shape_body[s])),
             "body_index": int(m.shape_body[s]) + 1, "shape": shape, "X_BG": _pose(m.shape_transform[s])}
        for key, value in (("point_contact_stiffness", m.shape_material_ke[s]),
                           ("relaxation_time", m.shape_material_tau[s]), ("dynamic_friction", m.shape_material_mu[s]),
                           ("hunt_crossley_dissipation", m.shape_material_hcd[s])):
            if not np.isnan(value):
                g[key] = float(value)
        if "dynamic_friction" in g:  # SAP uses only the dynamic coefficient; Drake needs static ≥ dynamic
            g["static_friction"] = g["dynamic_friction"]
        geometries.append(g)
    constraints = _constraints(m, name)
    spec = {
        "scene": name, "description": scene.description,
        "plant": {"time_step": float(scene.dt), "gravity_W": m.gravity.tolist()},
        "bodies": bodies, "joints": joints,
        "actuation": {"actuators": actuators},
        "geometries": geometries,
        "collision_candidate_pairs": [{"geometries": [int(a), int(b)]} for a, b in m.shape_pair],
        "recording": {"num_steps": int(scene.num_steps)},
    }
    if constraints:
        spec["constraints"] = constraints
    if actuators:
        spec["actuation"]["desired_state_input"] = {"xd": xd_q + xd_v}
        spec["actuation"]["feedforward_actuation_u_ff"] = u_ff
    check_spec(spec)
    return spec


def _constraints(m, name: str) -> list:
    """The model's holonomic constraints as the scene format's ``constraints`` list (by name)."""
    out = []
    for k in range(m.constraint_count):
        ct, where = ConstraintType(int(m.constraint_type[k])), f"constraint {m.constraint_name[k]!r}"
        if ct == ConstraintType.AXIS_ALIGN:
            raise _refuse(name, "AXIS_ALIGN constraint", where)
        c = {"name": m.constraint_name[k], "type": ct.name.lower()}
        if ct == ConstraintType.COUPLER:
            c.update(joint0=m.joint_name[m.constraint_joint0[k]], joint1=m.joint_name[m.constraint_joint1[k]],
                     gear_ratio=float(m.constraint_gear_ratio[k]), offset=float(m.constraint_offset[k]))
            out.append(c)
            continue
        a, b = int(m.constraint_body_a[k]), int(m.constraint_body_b[k])
        if a < 0 or b < 0:
            raise _refuse(name, "constraint on the world body", where)
        c.update(body_A=m.body_name[a], body_B=m.body_name[b])
        X_a, X_b = m.constraint_X_a[k], m.constraint_X_b[k]
        if ct == ConstraintType.WELD:
            c.update(X_AP=_pose(X_a), X_BQ=_pose(X_b))
        else:
            c.update(p_AP=X_a[:3].tolist(), p_BQ=X_b[:3].tolist())
        if ct == ConstraintType.DISTANCE:
            stiffness = float(m.constraint_stiffness[k])
            c.update(distance=float(m.constraint_length[k]),
                     stiffness=stiffness if math.isfinite(stiffness) else "inf",
                     damping=float(m.constraint_damping[k]))
        out.append(c)
    return out


def check_spec(spec: dict) -> None:
    """``ValueError`` naming the field when a scene specification asks for something the
    recorder does not build (joint types other than :data:`SPEC_JOINT_TYPES`, shapes other than
    :data:`SPEC_SHAPES`, a floating joint that Drake would not add by itself)."""
    name = spec.get("scene", "scene")
    for key in ("plant", "bodies", "joints"):
        if key not in spec:
            raise ValueError(f"scene {name!r}: missing required key {key!r}")
    h = float(spec["plant"].get("time_step", 0))
    if not (math.isfinite(h) and h > 0):
        raise ValueError(f"scene {name!r}: plant.time_step must be > 0 s, got {h}")
    approximation = spec["plant"].get("discrete_contact_approximation", "kSap")
    if approximation not in APPROXIMATION_NAMES.values():
        raise ValueError(f"scene {name!r}: plant.discrete_contact_approximation: {approximation!r} is not valid; "
                         f"valid: {', '.join(APPROXIMATION_NAMES.values())}")
    contact_model = spec["plant"].get("contact_model", "kPoint")
    if contact_model != "kPoint":
        from sap_common.io.json_scene import HYDROELASTIC_LIMITATION

        raise ValueError(f"scene {name!r}: plant.contact_model: {contact_model!r} is not supported; valid: kPoint "
                         f"({HYDROELASTIC_LIMITATION})")
    for j in spec["joints"]:
        if j.get("type") not in SPEC_JOINT_TYPES:
            raise ValueError(f"scene {name!r}: joint {j.get('name')!r}: type {j.get('type')!r} is not supported; "
                             f"valid: {', '.join(SPEC_JOINT_TYPES)}")
        if j["type"] == "quaternion_floating" and not j.get("auto_added_for_free_body", False):
            raise ValueError(f"scene {name!r}: joint {j.get('name')!r}: quaternion_floating joints must be "
                             "auto_added_for_free_body (Drake adds one for every body without a joint)")
    for g in spec.get("geometries", []):
        kind = g.get("shape", {}).get("type")
        if kind == "box":
            raise _refuse(name, "BOX shape contact", f"geometry {g.get('name')!r}")
        if g.get("shape", {}).get("rounding", 0) != 0:
            raise _refuse(name, "rounded shape", f"geometry {g.get('name')!r}")
        if kind not in SPEC_SHAPES:
            raise ValueError(f"scene {name!r}: geometry {g.get('name')!r}: shape {kind!r} is not supported; "
                             f"valid: {', '.join(SPEC_SHAPES)}")
