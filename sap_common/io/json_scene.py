"""The JSON scene format of the Drake anchors (``tests/data/drake/README.md``).

``load_json(path)`` reads a scene written by the anchor generator (or by hand in the same
format) into a :class:`~sap_common.io.scene.LoadedScene`:

* bodies with mass, ``com_B`` and ``inertia_about_com_B``; body 0 is the world;
* joints ``quaternion_floating`` → FREE, ``revolute``, ``prismatic``, ``ball_rpy`` → our
  quaternion BALL joint, ``weld`` → FIXED; per-v damping; 1-DOF position limits with Drake's
  limit constraint (k = 1e12, τ = h, docs/formulation.md § Limits);
* actuators: reflected inertia (rotor inertia · gear ratio²) → armature; PD gains → drives
  (``target_ke``/``target_kd``) with the effort limit; desired state → control targets;
  feed-forward → ``joint_act``;
* geometries ``sphere``, ``box``, ``half_space`` with per-geometry stiffness, relaxation
  time and dynamic friction; ``collision_candidate_pairs`` become exactly our candidate pairs;
* gravity, time step, number of steps, and ``solver_kwargs`` for Drake's solver settings.

Our joints are ordered by Drake's ``v_start``, so 1-DOF chains keep Drake's q/v order.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from .. import spatial
from ..builder import ModelBuilder
from ..model import JointType
from .scene import DrakeJoint, LoadedScene

__all__ = ["load_json", "DRAKE_LIMIT_STIFFNESS"]

# Drake's SapLimitConstraint: k = 1e12 and τ = h (docs/formulation.md § Limits).
DRAKE_LIMIT_STIFFNESS = 1e12
# A scene file without a recording runs this many steps unless it says otherwise.
DEFAULT_NUM_STEPS = 1000

_JOINT_TYPES = ("quaternion_floating", "revolute", "prismatic", "ball_rpy", "weld")
_SHAPES = ("sphere", "box", "half_space")


def _get(d: dict, key: str, where: str):
    try:
        return d[key]
    except (KeyError, TypeError):
        raise ValueError(f"{where}: missing required key {key!r}") from None


def _num(x) -> float:
    """JSON number or the strings "inf"/"-inf" (strict JSON has no infinities)."""
    return float(x)


def _pose(d: dict, where: str) -> np.ndarray:
    return spatial.transform(np.asarray(_get(d, "p", where), float),
                             np.asarray(_get(d, "quat_xyzw", where), float))


def load_json(path_or_dict, num_worlds: int = 1) -> LoadedScene:
    """Load a JSON scene file (or an already parsed dict) with ``num_worlds`` worlds."""
    if isinstance(path_or_dict, (str, os.PathLike)):
        source = os.fspath(path_or_dict)
        try:
            with open(source) as f:
                spec = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source}: not valid JSON ({e})") from None
    elif isinstance(path_or_dict, dict):
        source, spec = None, path_or_dict
    else:
        raise ValueError(f"path_or_dict: expected a path or a dict, got {type(path_or_dict).__name__}")
    name = str(spec.get("scene", os.path.splitext(os.path.basename(source or "scene"))[0]))
    where = f"scene {name!r}"

    plant = _get(spec, "plant", where)
    dt = _num(_get(plant, "time_step", f"{where} plant"))
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"{where}: plant.time_step must be > 0 s, got {dt}")
    gravity = np.asarray(plant.get("gravity_W", [0.0, 0.0, -9.81]), float)

    b = ModelBuilder(gravity=gravity)
    json_body = {}  # JSON body index -> our body index (world = -1)
    body_name_to_json = {}
    for bd in _get(spec, "bodies", where):
        idx = int(_get(bd, "index", f"{where} body"))
        body_name_to_json[_get(bd, "name", f"{where} body {idx}")] = idx
        if idx == 0:
            json_body[0] = -1
            continue
        bw = f"{where} body {bd['name']!r}"
        json_body[idx] = b.add_body(
            mass=_num(_get(bd, "mass", bw)), com=_get(bd, "com_B", bw),
            inertia=_get(bd, "inertia_about_com_B", bw), name=bd["name"],
        )

    def body_of(body_name: str, w: str) -> int:
        if body_name not in body_name_to_json:
            raise ValueError(f"{w}: unknown body {body_name!r}; bodies: {', '.join(body_name_to_json)}")
        return json_body[body_name_to_json[body_name]]

    # Actuators first: their reflected inertia and PD gains are joint parameters.
    actuation = spec.get("actuation", {}) or {}
    actuators = list(actuation.get("actuators", []))
    act_by_joint = {}
    for a in actuators:
        act_by_joint.setdefault(_get(a, "joint", f"{where} actuator"), []).append(a)

    joints = sorted(_get(spec, "joints", where), key=lambda j: (int(j.get("v_start", 0)), int(j.get("q_start", 0))))
    state = spec.get("state", {})
    q_drake = np.asarray(state.get("q0", np.concatenate([j.get("initial_q", []) for j in joints] or [[]])), float)
    v_drake = np.asarray(state.get("v0", np.concatenate([j.get("initial_v", []) for j in joints] or [[]])), float)

    drake_joints, q_init, qd_init_sap = [], [], []
    for jd in joints:
        jname = _get(jd, "name", f"{where} joint")
        jw = f"{where} joint {jname!r}"
        jtype = _get(jd, "type", jw)
        if jtype not in _JOINT_TYPES:
            raise ValueError(f"{jw}: joint type {jtype!r} is not supported; valid: {', '.join(_JOINT_TYPES)}")
        parent, child = body_of(_get(jd, "parent_body", jw), jw), body_of(_get(jd, "child_body", jw), jw)
        X_PF = _pose(_get(_get(jd, "frame_on_parent_F", jw), "X_PF", jw), jw)
        X_CM = _pose(_get(_get(jd, "frame_on_child_M", jw), "X_CM", jw), jw)
        qs, nq, vs, nv = (int(_get(jd, k, jw)) for k in ("q_start", "nq", "v_start", "nv"))
        q, v = q_drake[qs:qs + nq], v_drake[vs:vs + nv]
        damping = np.asarray(jd.get("damping", [0.0] * nv), float)
        lower = np.array([_num(x) for x in jd.get("position_lower_limits", ["-inf"] * nq)])
        upper = np.array([_num(x) for x in jd.get("position_upper_limits", ["inf"] * nq)])
        armature = np.zeros(nv)
        drive = dict(target_ke=0.0, target_kd=0.0, effort_limit=math.inf)
        for a in act_by_joint.get(jname, []):
            if nv != 1:
                raise ValueError(f"{jw}: actuators are supported on 1-DOF joints only")
            armature[0] += _num(a.get("rotor_inertia", 0.0)) * _num(a.get("gear_ratio", 1.0)) ** 2
            drive["effort_limit"] = _num(a.get("effort_limit", "inf"))
            if a.get("pd_controlled", False):
                gains = _get(a, "pd_gains", f"{jw} actuator")
                drive["target_ke"], drive["target_kd"] = _num(gains["p"]), _num(gains["d"])

        if jtype == "quaternion_floating":
            if parent != -1 or np.any(X_PF != spatial.transform_identity()) or np.any(X_CM != spatial.transform_identity()):
                raise ValueError(f"{jw}: quaternion_floating joints must connect the world frame to the body frame")
            j = b.add_joint_free(-1, child, damping=damping, name=jname)
            q_init.append(np.concatenate([q[4:7], q[1:4], q[0:1]]))  # wxyz,p -> p,xyzw
            qd_init_sap.append(v)  # Drake's [w_WB_W, v_WBo_W] is exactly our SAP order
        elif jtype in ("revolute", "prismatic"):
            axis = _get(jd, "axis", jw)
            add = b.add_joint_revolute if jtype == "revolute" else b.add_joint_prismatic
            j = add(parent, child, X_PF, X_CM, axis, limit_lower=lower[0], limit_upper=upper[0],
                    limit_ke=DRAKE_LIMIT_STIFFNESS, limit_kd=DRAKE_LIMIT_STIFFNESS * dt,
                    armature=armature[0], damping=damping[0], name=jname, **drive)
            q_init.append(q)
            qd_init_sap.append(v)
        elif jtype == "ball_rpy":
            if np.any(np.isfinite(lower)) or np.any(np.isfinite(upper)):
                raise ValueError(f"{jw}: position limits on a ball joint are not supported")
            j = b.add_joint_ball(parent, child, X_PF, X_CM, damping=damping, name=jname)
            q_init.append(spatial.quat_from_rpy(q))
            qd_init_sap.append(v)  # w_FM in F, as our ball joint
        else:  # weld
            j = b.add_joint_fixed(parent, child, X_PF, X_CM, name=jname)
        drake_joints.append(DrakeJoint(j, jtype, qs, nq, vs, nv))

    shape_of_geom = {}
    for g in spec.get("geometries", []):
        gw = f"{where} geometry {g.get('name', g.get('index'))!r}"
        shape = _get(g, "shape", gw)
        kind = _get(shape, "type", gw)
        body = json_body[int(_get(g, "body_index", gw))]
        X = _pose(_get(g, "X_BG", gw), gw)
        material = dict(mu=_num(_get(g, "dynamic_friction", gw)), ke=_num(_get(g, "point_contact_stiffness", gw)),
                        tau=_num(_get(g, "relaxation_time", gw)), name=g.get("name"))
        if kind == "sphere":
            s = b.add_shape_sphere(body, X, radius=_num(_get(shape, "radius", gw)), **material)
        elif kind == "box":
            he = shape.get("half_extents") or [0.5 * _num(x) for x in _get(shape, "size", gw)]
            s = b.add_shape_box(body, X, *map(_num, he), **material)
        elif kind == "half_space":
            s = b.add_shape_plane(body, X, **material)
        else:
            raise ValueError(f"{gw}: shape {kind!r} is not supported; valid: {', '.join(_SHAPES)}")
        shape_of_geom[int(_get(g, "index", gw))] = s

    candidates = spec.get("collision_candidate_pairs")
    if candidates is not None:
        wanted = set()
        for c in candidates:
            ga, gb = _get(c, "geometries", f"{where} collision_candidate_pairs")
            wanted.add(tuple(sorted((shape_of_geom[int(ga)], shape_of_geom[int(gb)]))))
        S = b.shape_count
        for a in range(S):
            for c in range(a + 1, S):
                if (a, c) not in wanted:
                    b.add_collision_filter_pair(a, c)

    model = b.replicate(num_worlds).finalize()
    if candidates is not None:
        got = {tuple(p) for p in model.shape_pair.tolist()}
        if got != wanted:
            raise ValueError(
                f"{where}: collision_candidate_pairs lists pairs our filters exclude: {sorted(wanted - got)}"
            )
    q_init = np.concatenate(q_init) if q_init else np.zeros(0)
    qd_init = np.concatenate(qd_init_sap) if qd_init_sap else np.zeros(0)
    model = model.with_initial_state(q_init, qd_init, joint_qd_order="sap")

    control = model.control()
    xd = np.asarray(actuation.get("desired_state_input", {}).get("xd", []), float)
    u_ff = np.asarray(actuation.get("feedforward_actuation_u_ff", []), float)
    n_act = len(actuators)
    for i, a in enumerate(actuators):
        jname = a["joint"]
        j = model.joint_index(jname)
        dof = int(model.joint_qd_start[j])
        if a.get("pd_controlled", False) and len(xd) == 2 * n_act:
            control.joint_target_pos[:, dof] = xd[i]
            control.joint_target_vel[:, dof] = xd[n_act + i]
        k = int(a.get("input_start", i))
        if k < len(u_ff):
            control.joint_act[:, dof] = u_ff[k]

    recording = spec.get("recording", {})
    num_steps = int(recording.get("num_steps", spec.get("num_steps", DEFAULT_NUM_STEPS)))
    max_contacts = max(int(recording.get("max_contacts_C", 0)), len(model.shape_pair))
    return LoadedScene(
        name=name, sap_model=model, state=model.state(), control=control, dt=dt,
        num_steps=num_steps, max_rigid_contact=max_contacts, solver_kwargs=_solver_kwargs(spec),
        body_names=model.body_name, description=str(spec.get("description", "")), source=source,
        drake_joints=tuple(drake_joints),
    )


def _solver_kwargs(spec: dict) -> dict:
    """SolverSAP settings that reproduce Drake's run: the drake preset and SAP's defaults."""
    internals = spec.get("sap_internals", {})
    sp = internals.get("solver_parameters", {})
    ls = {"exact": "exact_root", "backtracking": "armijo_decay"}.get(sp.get("line_search_type", "exact"))
    if ls is None:
        raise ValueError(f"sap_internals.solver_parameters.line_search_type: {sp['line_search_type']!r} "
                         "is not supported; valid: exact, backtracking")
    contact = next((v for k, v in internals.items() if k.startswith("contact_constraint")), {})
    kwargs = dict(
        contact_preset_variant="drake",
        line_search_variant=ls,
        max_iterations=int(sp.get("max_iterations", 100)),
        optimality_abs_tol=float(sp.get("abs_tolerance", 1e-14)),
        optimality_rel_tol=float(sp.get("rel_tolerance", 1e-6)),
        cost_abs_tol=float(sp.get("cost_abs_tolerance", 1e-30)),
        cost_rel_tol=float(sp.get("cost_rel_tolerance", 1e-15)),
        contact_beta=float(spec.get("plant", {}).get("sap_near_rigid_threshold", 1.0)),
        contact_sigma=float(contact.get("sigma", 1e-3)),
    )
    if ls == "exact_root":
        kwargs["line_search_max_iterations"] = int(sp.get("exact_line_search", {}).get("max_iterations", 100))
    return kwargs
