"""The JSON scene format of the Drake anchors (``tests/data/drake/README.md``).

``load_json(path)`` reads a scene written by the anchor generator (or by hand in the same
format) into a :class:`~sap_common.io.scene.LoadedScene`:

* bodies with mass, ``com_B`` and ``inertia_about_com_B`` and an optional ``kinematic`` (true
  or false, default false: ``SapModel.body_kinematic``); body 0 is the world;
* joints ``quaternion_floating`` → FREE, ``revolute``, ``prismatic``, ``ball_rpy`` → our
  quaternion BALL joint, ``weld`` → FIXED; per-v damping; 1-DOF position limits with Drake's
  limit constraint (k = 1e12, τ = h, docs/formulation.md § Limits);
* actuators: reflected inertia (rotor inertia · gear ratio²) → armature; PD gains → drives
  (``target_ke``/``target_kd``) with the effort limit; desired state → control targets;
  feed-forward → ``joint_act``;
* geometries ``sphere``, ``box``, ``half_space``, ``cylinder`` (``radius``, ``length`` along
  the geometry's z axis, as Drake's ``Cylinder``) and ``convex`` (``vertices``, a list of
  points whose convex hull is the shape, as Drake's ``Convex``; ``faces``, if present, is
  read by the recorder only) with per-geometry stiffness, relaxation time, Hunt–Crossley
  dissipation (``hunt_crossley_dissipation``) and dynamic friction; ``collision_candidate_pairs``
  become exactly our candidate pairs. A shape other than ``half_space`` may carry ``rounding``
  (a radius [m], default 0), this project's extension with no Drake counterpart: the shape swept
  by a ball of that radius (``SapModel.shape_rounding``);
* ``constraints`` (optional), Drake's holonomic constraints by body and joint name
  (docs/formulation.md § Holonomic constraints): ``{"type": "coupler", "joint0", "joint1",
  "gear_ratio", "offset"}``, ``{"type": "distance", "body_A", "p_AP", "body_B", "p_BQ",
  "distance", "stiffness" (a number or "inf"), "damping"}``, ``{"type": "ball", "body_A",
  "p_AP", "body_B", "p_BQ"}``, ``{"type": "weld", "body_A", "X_AP", "body_B", "X_BQ"}``, each
  with an optional ``name``;
* gravity, time step, number of steps, and ``solver_kwargs`` for Drake's solver settings,
  including the plant's ``discrete_contact_approximation`` (``kSap``, ``kLagged``, ``kSimilar``;
  ``kSap`` when absent) and ``stiction_tolerance``.

Point contact only: a ``plant.contact_model`` other than ``kPoint`` (Drake's hydroelastic
models, its default ``kHydroelasticWithFallback`` included) is refused with a ``ValueError``
naming the field (docs/formulation.md § What is not implemented).

Our joints are ordered by Drake's ``v_start``, so 1-DOF chains keep Drake's q/v order.

Every field the loader reads is checked for presence, type, length and range before it is used:
a malformed file raises one ``ValueError`` that names the file, the path of the offending value
inside it (``bodies[2].mass``) and what was expected there, e.g.
``box.json: bodies[2].mass: expected a finite number >= 0 [kg], got the string 'heavy'``.
Keys the loader does not read (``versions``, ``checks``, ``performance``, …) are not checked.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from .. import spatial
from ..builder import ModelBuilder
from ..config import SapConfig
from ..conventions import check_num_worlds
from .scene import DrakeJoint, LoadedScene

__all__ = ["load_json", "DRAKE_LIMIT_STIFFNESS"]

# Drake's SapLimitConstraint: k = 1e12 and τ = h (docs/formulation.md § Limits).
DRAKE_LIMIT_STIFFNESS = 1e12
# A scene file without a recording runs this many steps unless it says otherwise.
DEFAULT_NUM_STEPS = 1000

# Drake joint type -> (nq, nv) of its coordinates (tests/data/drake/README.md).
_JOINT_SIZES = {"quaternion_floating": (7, 6), "revolute": (1, 1), "prismatic": (1, 1), "ball_rpy": (3, 3),
                "weld": (0, 0)}
_JOINT_TYPES = tuple(_JOINT_SIZES)
_SHAPES = ("sphere", "box", "half_space", "cylinder", "convex")
_CONSTRAINTS = ("coupler", "distance", "ball", "weld")
_LINE_SEARCHES = {"exact": "exact_root", "backtracking": "armijo_decay"}
# Drake's DiscreteContactApproximation names → SapConfig.discrete_contact_approximation.
_APPROXIMATIONS = {"kSap": "sap", "kLagged": "lagged", "kSimilar": "similar"}
# Drake's ContactModel names; only point contact is implemented (docs/formulation.md § What is not implemented).
_CONTACT_MODELS = ("kPoint",)
HYDROELASTIC_LIMITATION = (
    "this project implements point contact only: Drake's hydroelastic contact (its default contact model, "
    "kHydroelasticWithFallback, and kHydroelastic) replaces a compliant geometry's point pair by a contact surface "
    "with one Hunt–Crossley or friction-cone constraint per surface face (pressure field, face areas), which neither "
    "backend computes; record the scene with contact_model kPoint (sap-record does)")


# ----------------------------------------------------------------------------- typed reads
#
# Each reader takes the containing object (dict or list), the key (str or index) and the
# container's path, and returns the value converted, or raises _SceneError(path, message).
# ``default`` makes a key optional.


class _SceneError(ValueError):
    """A malformed value at ``path`` of a scene file; :func:`load_json` adds the file name."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")


_MISSING = object()


def _join(path: str, key) -> str:
    """``path.key``, ``path[3]``, or ``path["odd key"]`` for a key that is not an identifier."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not key.isidentifier():
        return f"{path}[{json.dumps(key)}]"
    return f"{path}.{key}" if path else key


def _got(x) -> str:
    """What a JSON value is, for an error message."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"the boolean {str(x).lower()}"
    if isinstance(x, str):
        return f"the string {x[:40]!r}"
    if isinstance(x, (int, float)):
        return f"the number {x!r}"
    if isinstance(x, list):
        return f"a list of {len(x)}"
    if isinstance(x, dict):
        return "an object"
    return type(x).__name__


def _fetch(c, key, path: str, default, expected: str):
    """``(value, path)`` of ``c[key]``; missing: ``default``, or an error saying what was expected."""
    p = _join(path, key)
    present = key in c if isinstance(c, dict) else 0 <= key < len(c)
    if present:
        return c[key], p
    if default is _MISSING:
        raise _SceneError(p, f"missing; expected {expected}")
    return default, p


def _number_of(x, p: str, expected: str, lo=None, lo_open=False, allow_inf=False) -> float:
    """A JSON number (or the strings "inf"/"-inf" where ``allow_inf``) as a float, range-checked."""
    if allow_inf and isinstance(x, str) and x in ("inf", "-inf"):
        v = float(x)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        v = float(x)
        if not math.isfinite(v) and not (allow_inf and math.isinf(v)):
            raise _SceneError(p, f"expected {expected}, got {v}")
    else:
        raise _SceneError(p, f"expected {expected}, got {_got(x)}")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise _SceneError(p, f"expected {expected}, got {v!r}")
    return v


def _describe_number(lo, lo_open, allow_inf, unit) -> str:
    s = "a number" if allow_inf else "a finite number"
    if lo is not None:
        s += f" {'>' if lo_open else '>='} {lo:g}"
    if allow_inf:
        s += ' (or "inf"/"-inf")'
    return s + (f" [{unit}]" if unit else "")


def _num(c, key, path, *, default=_MISSING, lo=None, lo_open=False, allow_inf=False, unit="") -> float:
    expected = _describe_number(lo, lo_open, allow_inf, unit)
    x, p = _fetch(c, key, path, default, expected)
    return x if x is default else _number_of(x, p, expected, lo, lo_open, allow_inf)


def _int(c, key, path, *, default=_MISSING, lo=None) -> int:
    expected = "an integer" + (f" >= {lo}" if lo is not None else "")
    x, p = _fetch(c, key, path, default, expected)
    if x is default:
        return x
    if isinstance(x, bool) or not isinstance(x, int) or (lo is not None and x < lo):
        raise _SceneError(p, f"expected {expected}, got {_got(x)}")
    return x


def _str(c, key, path, *, default=_MISSING, choices=None) -> str:
    expected = f"one of {', '.join(choices)}" if choices else "a string"
    x, p = _fetch(c, key, path, default, expected)
    if x is default:
        return x
    if not isinstance(x, str) or (choices and x not in choices):
        raise _SceneError(p, f"expected {expected}, got {_got(x)}")
    return x


def _bool(c, key, path, *, default=_MISSING) -> bool:
    x, p = _fetch(c, key, path, default, "true or false")
    if x is not default and not isinstance(x, bool):
        raise _SceneError(p, f"expected true or false, got {_got(x)}")
    return x


def _obj(c, key, path, *, default=_MISSING, expected="an object") -> tuple[dict, str]:
    x, p = _fetch(c, key, path, default, expected)
    if x is not default and not isinstance(x, dict):
        raise _SceneError(p, f"expected {expected}, got {_got(x)}")
    return x, p


def _list(c, key, path, *, default=_MISSING, expected="a list", nonempty=False) -> tuple[list, str]:
    x, p = _fetch(c, key, path, default, expected)
    if x is not default and (not isinstance(x, list) or (nonempty and not x)):
        raise _SceneError(p, f"expected {expected}, got {_got(x)}")
    return x, p


def _vec(c, key, path, n: int | None, *, default=_MISSING, lo=None, allow_inf=False, unit="") -> np.ndarray:
    """A list of ``n`` numbers (any length if ``n`` is None) as a float64 array."""
    entry = _describe_number(lo, False, allow_inf, unit)
    expected = f"a list of {n} numbers" if n is not None else "a list of numbers"
    x, p = _fetch(c, key, path, default, expected)
    if x is default:
        return x
    if not isinstance(x, list) or (n is not None and len(x) != n):
        raise _SceneError(p, f"expected {expected}, got {_got(x)}")
    return np.array([_number_of(v, _join(p, i), entry, lo, False, allow_inf) for i, v in enumerate(x)],
                    dtype=np.float64)


def _mat3(c, key, path) -> np.ndarray:
    rows, p = _list(c, key, path, expected="a 3x3 matrix (a list of 3 lists of 3 numbers)")
    if len(rows) != 3:
        raise _SceneError(p, f"expected a 3x3 matrix (a list of 3 lists of 3 numbers), got {_got(rows)}")
    return np.stack([_vec(rows, i, p, 3) for i in range(3)])


def _pose(c, key, path) -> np.ndarray:
    """``{p, quat_xyzw}`` → ``[p, q]`` (7,); the quaternion must be non-zero (normalized on use)."""
    d, p = _obj(c, key, path, expected="a pose {p: [x, y, z], quat_xyzw: [qx, qy, qz, qw]}")
    q = _vec(d, "quat_xyzw", p, 4)
    if not np.linalg.norm(q) > 0.0:
        raise _SceneError(_join(p, "quat_xyzw"), f"expected a non-zero quaternion, got {q.tolist()}")
    return spatial.transform(_vec(d, "p", p, 3, unit="m"), q)


class _Builder:
    """Calls into the ModelBuilder whose ``ValueError`` gets the JSON path of what was being built."""

    def __init__(self, builder: ModelBuilder):
        self.b = builder

    def __call__(self, path: str, method: str, *args, **kwargs):
        try:
            return getattr(self.b, method)(*args, **kwargs)
        except ValueError as e:
            raise _SceneError(path, str(e)) from None


# ----------------------------------------------------------------------------- the loader


def load_json(path_or_dict, num_worlds: int = 1) -> LoadedScene:
    """Load a JSON scene file (or an already parsed dict) with ``num_worlds`` worlds.

    Raises ``ValueError`` naming the file, the path inside it and what was expected for a file
    that is not JSON or is malformed (a missing key, a wrong type, a wrong length, a value out of
    range, a non-finite number, a reference to a body, joint or geometry that does not exist).
    A file that does not exist or cannot be read raises ``OSError`` (``FileNotFoundError``).
    """
    num_worlds = check_num_worlds(num_worlds)
    if isinstance(path_or_dict, (str, os.PathLike)):
        source = os.fspath(path_or_dict)
        label = source
        with open(source) as f:
            try:
                spec = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{source}: not valid JSON ({e})") from None
            except UnicodeDecodeError as e:
                raise ValueError(f"{source}: not a text file ({e})") from None
    elif isinstance(path_or_dict, dict):
        source, spec, label = None, path_or_dict, "scene dict"
    else:
        raise ValueError(f"path_or_dict: expected a path or a dict, got {type(path_or_dict).__name__}")
    try:
        return _load(spec, source, num_worlds)
    except _SceneError as e:
        raise ValueError(f"{label}: {e}") from None


def _load(spec, source: str | None, num_worlds: int) -> LoadedScene:
    if not isinstance(spec, dict):
        raise _SceneError("top level", f"expected an object with keys plant, bodies, joints, ...; got {_got(spec)}")
    default_name = os.path.splitext(os.path.basename(source or "scene"))[0]
    name = _str(spec, "scene", "", default=default_name)
    description = _str(spec, "description", "", default="")

    plant, pp = _obj(spec, "plant", "")
    dt = _num(plant, "time_step", pp, lo=0.0, lo_open=True, unit="s")
    contact_model = _str(plant, "contact_model", pp, default="kPoint")
    if contact_model not in _CONTACT_MODELS:
        raise _SceneError(_join(pp, "contact_model"), f"{contact_model!r} is not supported; valid: "
                                                      f"{', '.join(_CONTACT_MODELS)} ({HYDROELASTIC_LIMITATION})")
    gravity = _vec(plant, "gravity_W", pp, 3, default=np.array([0.0, 0.0, -9.81]), unit="m/s²")
    b = ModelBuilder(gravity=gravity)
    build = _Builder(b)

    # Bodies: JSON index -> our body index (world = -1); names -> JSON index.
    bodies, bp = _list(spec, "bodies", "", expected="a non-empty list of bodies (body 0 is the world)",
                       nonempty=True)
    json_body, body_name_to_json = {}, {}
    for i in range(len(bodies)):
        bd, bw = _obj(bodies, i, bp, expected="a body object {index, name, mass, com_B, inertia_about_com_B}")
        idx, name_i = _int(bd, "index", bw, lo=0), _str(bd, "name", bw)
        if idx in json_body:
            raise _SceneError(_join(bw, "index"), f"body index {idx} is used twice")
        if name_i in body_name_to_json:
            raise _SceneError(_join(bw, "name"), f"body name {name_i!r} is used twice")
        body_name_to_json[name_i] = idx
        if idx == 0:
            json_body[0] = -1
            continue
        mass = _num(bd, "mass", bw, lo=0.0, unit="kg")
        json_body[idx] = build(bw, "add_body", mass=mass, com=_vec(bd, "com_B", bw, 3, unit="m"),
                               inertia=_mat3(bd, "inertia_about_com_B", bw), name=name_i,
                               kinematic=_bool(bd, "kinematic", bw, default=False))
    if 0 not in json_body:
        raise _SceneError(bp, "no body with index 0 (the world body)")

    def body_of(c, key, path) -> int:
        body_name = _str(c, key, path)
        if body_name not in body_name_to_json:
            raise _SceneError(_join(path, key), f"unknown body {body_name!r}; bodies: {', '.join(body_name_to_json)}")
        return json_body[body_name_to_json[body_name]]

    # Joints (read and checked first, then built in Drake's v order).
    joint_list, jp = _list(spec, "joints", "")
    joints = []
    for i in range(len(joint_list)):
        jd, jw = _obj(joint_list, i, jp, expected="a joint object {name, type, parent_body, child_body, ...}")
        jtype = _str(jd, "type", jw, choices=_JOINT_TYPES)
        nq_type, nv_type = _JOINT_SIZES[jtype]
        qs, vs = _int(jd, "q_start", jw, lo=0), _int(jd, "v_start", jw, lo=0)
        nq, nv = _int(jd, "nq", jw, lo=0), _int(jd, "nv", jw, lo=0)
        if (nq, nv) != (nq_type, nv_type):
            raise _SceneError(jw, f"a {jtype} joint has nq = {nq_type} and nv = {nv_type}, got nq = {nq}, nv = {nv}")
        joints.append((jd, jw, jtype, qs, nq, vs, nv))
    joints.sort(key=lambda j: (j[5], j[3]))
    joint_names = set()
    for jd, jw, *_ in joints:
        jname = _str(jd, "name", jw)
        if jname in joint_names:
            raise _SceneError(_join(jw, "name"), f"joint name {jname!r} is used twice")
        joint_names.add(jname)

    # Actuators: their reflected inertia and PD gains are joint parameters.
    actuation, ap = _obj(spec, "actuation", "", default={})
    actuator_list, alp = _list(actuation, "actuators", ap, default=[])
    actuators, act_by_joint = [], {}
    for i in range(len(actuator_list)):
        a, aw = _obj(actuator_list, i, alp, expected="an actuator object {joint, ...}")
        jname = _str(a, "joint", aw)
        if jname not in joint_names:
            raise _SceneError(_join(aw, "joint"), f"unknown joint {jname!r}; joints: {', '.join(sorted(joint_names))}")
        act = dict(joint=jname, path=aw,
                   rotor_inertia=_num(a, "rotor_inertia", aw, default=0.0, lo=0.0, unit="kg·m²"),
                   gear_ratio=_num(a, "gear_ratio", aw, default=1.0),
                   effort_limit=_num(a, "effort_limit", aw, default=math.inf, lo=0.0, lo_open=True, allow_inf=True),
                   pd=_bool(a, "pd_controlled", aw, default=False),
                   input_start=_int(a, "input_start", aw, default=i, lo=0))
        if act["pd"]:
            gains, gp = _obj(a, "pd_gains", aw, expected="an object {p, d} of PD gains")
            act["p"], act["d"] = _num(gains, "p", gp, lo=0.0), _num(gains, "d", gp, lo=0.0)
        actuators.append(act)
        act_by_joint.setdefault(jname, []).append(act)

    # Drake's initial q and v: the state's, or the joints' own initial values in order.
    state, sp = _obj(spec, "state", "", default={})
    q_drake = _vec(state, "q0", sp, None, default=None)
    v_drake = _vec(state, "v0", sp, None, default=None)
    if q_drake is None:
        q_drake = np.concatenate([_vec(jd, "initial_q", jw, nq, default=np.zeros(nq))
                                  for jd, jw, _, _, nq, _, _ in joints] or [np.zeros(0)])
    if v_drake is None:
        v_drake = np.concatenate([_vec(jd, "initial_v", jw, nv, default=np.zeros(nv))
                                  for jd, jw, _, _, _, _, nv in joints] or [np.zeros(0)])
    nq_total = max((qs + nq for _, _, _, qs, nq, _, _ in joints), default=0)
    nv_total = max((vs + nv for _, _, _, _, _, vs, nv in joints), default=0)
    for vec, total, key in ((q_drake, nq_total, "q0"), (v_drake, nv_total, "v0")):
        if len(vec) < total:
            raise _SceneError(_join(sp, key), f"expected at least {total} numbers (the joints' q_start + nq, "
                                              f"v_start + nv), got {len(vec)}")

    drake_joints, q_init, qd_init_sap, joint_index = [], [], [], {}
    for jd, jw, jtype, qs, nq, vs, nv in joints:
        jname = jd["name"]
        parent, child = body_of(jd, "parent_body", jw), body_of(jd, "child_body", jw)
        fp, fpp = _obj(jd, "frame_on_parent_F", jw, expected="an object {X_PF: pose}")
        fc, fcp = _obj(jd, "frame_on_child_M", jw, expected="an object {X_CM: pose}")
        X_PF, X_CM = _pose(fp, "X_PF", fpp), _pose(fc, "X_CM", fcp)
        q, v = q_drake[qs:qs + nq], v_drake[vs:vs + nv]
        damping = _vec(jd, "damping", jw, nv, default=np.zeros(nv), lo=0.0)
        lower = _vec(jd, "position_lower_limits", jw, nq, default=np.full(nq, -np.inf), allow_inf=True)
        upper = _vec(jd, "position_upper_limits", jw, nq, default=np.full(nq, np.inf), allow_inf=True)
        armature = np.zeros(nv)
        drive = dict(target_ke=0.0, target_kd=0.0, effort_limit=math.inf)
        for a in act_by_joint.get(jname, []):
            if nv != 1:
                raise _SceneError(_join(a["path"], "joint"),
                                  f"actuators are supported on 1-DOF joints only; {jname!r} is a {jtype} joint")
            armature[0] += a["rotor_inertia"] * a["gear_ratio"] ** 2
            drive["effort_limit"] = a["effort_limit"]
            if a["pd"]:
                drive["target_ke"], drive["target_kd"] = a["p"], a["d"]

        if jtype == "quaternion_floating":
            if (parent != -1 or np.any(X_PF != spatial.transform_identity())
                    or np.any(X_CM != spatial.transform_identity())):
                raise _SceneError(jw, "a quaternion_floating joint must connect the world frame to the body frame "
                                      "(parent_body world, identity X_PF and X_CM)")
            j = build(jw, "add_joint_free", -1, child, damping=damping, name=jname)
            q_init.append(np.concatenate([q[4:7], q[1:4], q[0:1]]))  # wxyz,p -> p,xyzw
            qd_init_sap.append(v)  # Drake's [w_WB_W, v_WBo_W] is exactly our SAP order
        elif jtype in ("revolute", "prismatic"):
            axis = _vec(jd, "axis", jw, 3)
            add = "add_joint_revolute" if jtype == "revolute" else "add_joint_prismatic"
            j = build(jw, add, parent, child, X_PF, X_CM, axis, limit_lower=lower[0], limit_upper=upper[0],
                      limit_ke=DRAKE_LIMIT_STIFFNESS, limit_kd=DRAKE_LIMIT_STIFFNESS * dt,
                      armature=armature[0], damping=damping[0], name=jname, **drive)
            q_init.append(q)
            qd_init_sap.append(v)
        elif jtype == "ball_rpy":
            if np.any(np.isfinite(lower)) or np.any(np.isfinite(upper)):
                raise _SceneError(jw, "position limits on a ball_rpy joint are not supported (use -inf/inf)")
            j = build(jw, "add_joint_ball", parent, child, X_PF, X_CM, damping=damping, name=jname)
            q_init.append(spatial.quat_from_rpy(q))
            qd_init_sap.append(v)  # w_FM in F, as our ball joint
        else:  # weld
            j = build(jw, "add_joint_fixed", parent, child, X_PF, X_CM, name=jname)
        drake_joints.append(DrakeJoint(j, jtype, qs, nq, vs, nv))
        joint_index[jname] = j
    jointed = {child for child in (body_of(jd, "child_body", jw) for jd, jw, *_ in joints)}
    for i, bd in enumerate(bodies):
        if bd["index"] != 0 and json_body[bd["index"]] not in jointed:
            raise _SceneError(_join(bp, i), f"body {bd['name']!r} is the child of no joint; expected a joint "
                                            "with this child_body (quaternion_floating for a free body, "
                                            "weld to fix it)")

    # Geometries.
    geometries, gp = _list(spec, "geometries", "", default=[])
    shape_of_geom = {}
    for i in range(len(geometries)):
        g, gw = _obj(geometries, i, gp, expected="a geometry object {index, shape, body_index, X_BG, ...}")
        gidx = _int(g, "index", gw, lo=0)
        if gidx in shape_of_geom:
            raise _SceneError(_join(gw, "index"), f"geometry index {gidx} is used twice")
        shape, shp = _obj(g, "shape", gw, expected="a shape object {type, ...}")
        kind = _str(shape, "type", shp, choices=_SHAPES)
        body_index = _int(g, "body_index", gw, lo=0)
        if body_index not in json_body:
            raise _SceneError(_join(gw, "body_index"), f"unknown body index {body_index}; "
                                                       f"bodies: {', '.join(map(str, sorted(json_body)))}")
        body = json_body[body_index]
        X = _pose(g, "X_BG", gw)
        for key in ("hydroelastic_modulus", "compliance_type"):
            if key in g:
                raise _SceneError(_join(gw, key),
                                  f"hydroelastic properties are not supported ({HYDROELASTIC_LIMITATION})")
        material = dict(mu=_num(g, "dynamic_friction", gw, lo=0.0),
                        ke=_num(g, "point_contact_stiffness", gw, lo=0.0, lo_open=True, unit="N/m"),
                        tau=_num(g, "relaxation_time", gw, lo=0.0, unit="s"),
                        hcd=_num(g, "hunt_crossley_dissipation", gw, default=None, lo=0.0, unit="s/m"),
                        name=_str(g, "name", gw, default=None))
        if kind != "half_space":  # this project's extension: a rounded shape (SapModel.shape_rounding)
            material["rounding"] = _num(shape, "rounding", shp, default=0.0, lo=0.0, unit="m")
        if kind == "sphere":
            s = build(gw, "add_shape_sphere", body, X,
                      radius=_num(shape, "radius", shp, lo=0.0, lo_open=True, unit="m"), **material)
        elif kind == "box":
            if "half_extents" in shape or "size" not in shape:
                he = _vec(shape, "half_extents", shp, 3, lo=0.0, unit="m")
            else:
                he = 0.5 * _vec(shape, "size", shp, 3, lo=0.0, unit="m")
            s = build(gw, "add_shape_box", body, X, *he, **material)
        elif kind == "cylinder":
            s = build(gw, "add_shape_cylinder", body, X,
                      radius=_num(shape, "radius", shp, lo=0.0, lo_open=True, unit="m"),
                      half_length=0.5 * _num(shape, "length", shp, lo=0.0, lo_open=True, unit="m"), **material)
        elif kind == "convex":
            points, vp = _list(shape, "vertices", shp, expected="a list of at least 4 points [x, y, z] [m]")
            if len(points) < 4:
                raise _SceneError(vp, f"expected a list of at least 4 points [x, y, z] [m], got {_got(points)}")
            vertices = np.stack([_vec(points, i, vp, 3, unit="m") for i in range(len(points))])
            s = build(gw, "add_shape_convex_mesh", body, X, vertices=vertices, **material)
        else:  # half_space
            s = build(gw, "add_shape_plane", body, X, **material)
        shape_of_geom[gidx] = s

    # Candidate pairs: exactly the listed ones collide.
    candidates, cp = _list(spec, "collision_candidate_pairs", "", default=None)
    wanted = set()
    if candidates is not None:
        for i in range(len(candidates)):
            c, cw = _obj(candidates, i, cp, expected="an object {geometries: [index, index]}")
            pair, pw = _list(c, "geometries", cw, expected="a list of 2 geometry indices")
            if len(pair) != 2:
                raise _SceneError(pw, f"expected a list of 2 geometry indices, got {_got(pair)}")
            for k in range(2):
                gi = _int(pair, k, pw, lo=0)
                if gi not in shape_of_geom:
                    raise _SceneError(_join(pw, k), f"unknown geometry index {gi}; geometries: "
                                                    f"{', '.join(map(str, sorted(shape_of_geom))) or '(none)'}")
            if pair[0] == pair[1]:
                raise _SceneError(pw, f"a geometry cannot collide with itself, got {pair}")
            wanted.add(tuple(sorted((shape_of_geom[pair[0]], shape_of_geom[pair[1]]))))
        S = b.shape_count
        for a in range(S):
            for c in range(a + 1, S):
                if (a, c) not in wanted:
                    b.add_collision_filter_pair(a, c)

    _constraints(spec, build, body_of, joint_index)

    recording, rp = _obj(spec, "recording", "", default={})
    solver_kwargs = _solver_kwargs(spec)
    try:
        model = b.replicate(num_worlds).finalize()
    except ValueError as e:  # a property of the whole tree (the bodies and the joints between them)
        raise _SceneError("bodies", f"the model built from the bodies and joints is invalid: {e}") from None
    if candidates is not None:
        got = {tuple(p) for p in model.shape_pair.tolist()}
        if got != wanted:
            raise _SceneError(cp, f"lists pairs that never collide (same body, or both on the world): "
                                  f"{sorted(wanted - got)}")
    q_init = np.concatenate(q_init) if q_init else np.zeros(0)
    qd_init = np.concatenate(qd_init_sap) if qd_init_sap else np.zeros(0)
    try:
        model = model.with_initial_state(q_init, qd_init, joint_qd_order="sap")
    except ValueError as e:
        raise _SceneError(sp if state else jp, f"initial state: {e}") from None

    control = model.control()
    desired, dp = _obj(actuation, "desired_state_input", ap, default={})
    xd = _vec(desired, "xd", dp, None, default=np.zeros(0))
    u_ff = _vec(actuation, "feedforward_actuation_u_ff", ap, None, default=np.zeros(0))
    n_act = len(actuators)
    for i, a in enumerate(actuators):
        dof = int(model.joint_qd_start[model.joint_index(a["joint"])])
        if a["pd"] and len(xd) == 2 * n_act:
            control.joint_target_pos[:, dof] = xd[i]
            control.joint_target_vel[:, dof] = xd[n_act + i]
        if a["input_start"] < len(u_ff):
            control.joint_act[:, dof] = u_ff[a["input_start"]]

    num_steps = _int(recording, "num_steps", rp, default=None, lo=1)
    if num_steps is None:
        num_steps = _int(spec, "num_steps", "", default=DEFAULT_NUM_STEPS, lo=1)
    max_contacts = max(_int(recording, "max_contacts_C", rp, default=0, lo=0), len(model.shape_pair))
    return LoadedScene(
        name=name, sap_model=model, state=model.state(), control=control, dt=dt,
        num_steps=num_steps, max_rigid_contact=max_contacts, solver_kwargs=solver_kwargs,
        body_names=model.body_name, description=description, source=source,
        drake_joints=tuple(drake_joints),
    )


def _constraints(spec: dict, build: _Builder, body_of, joint_index: dict) -> None:
    """The ``constraints`` list (module docstring) into the builder; bodies and joints by name."""
    items, cp = _list(spec, "constraints", "", default=[])

    def joint_of(c, key, path) -> int:
        jname = _str(c, key, path)
        if jname not in joint_index:
            raise _SceneError(_join(path, key),
                              f"unknown joint {jname!r}; joints: {', '.join(joint_index) or '(none)'}")
        return joint_index[jname]

    for i in range(len(items)):
        c, cw = _obj(items, i, cp, expected="a constraint object {type, ...}")
        kind = _str(c, "type", cw, choices=_CONSTRAINTS)
        name = _str(c, "name", cw, default=None)
        if kind == "coupler":
            build(cw, "add_coupler", joint_of(c, "joint0", cw), joint_of(c, "joint1", cw),
                  _num(c, "gear_ratio", cw), _num(c, "offset", cw, default=0.0), name=name)
            continue
        body_a, body_b = body_of(c, "body_A", cw), body_of(c, "body_B", cw)
        if kind == "weld":
            build(cw, "add_weld", body_a, _pose(c, "X_AP", cw), body_b, _pose(c, "X_BQ", cw), name=name)
            continue
        p_ap, p_bq = _vec(c, "p_AP", cw, 3, unit="m"), _vec(c, "p_BQ", cw, 3, unit="m")
        if kind == "ball":
            build(cw, "add_ball", body_a, p_ap, body_b, p_bq, name=name)
            continue
        stiffness = _num(c, "stiffness", cw, default=math.inf, lo=0.0, lo_open=True, allow_inf=True, unit="N/m")
        build(cw, "add_distance", body_a, p_ap, body_b, p_bq, _num(c, "distance", cw, lo=0.0, lo_open=True, unit="m"),
              stiffness, _num(c, "damping", cw, default=0.0, lo=0.0, unit="N·s/m"), name=name)


def _solver_kwargs(spec: dict) -> dict:
    """SolverSAP settings that reproduce Drake's run: the drake preset and SAP's defaults."""
    internals, ip = _obj(spec, "sap_internals", "", default={})
    sp, spp = _obj(internals, "solver_parameters", ip, default={})
    ls = _LINE_SEARCHES[_str(sp, "line_search_type", spp, default="exact", choices=tuple(_LINE_SEARCHES))]
    contact_key = next((k for k in internals if k.startswith("contact_constraint")), None)
    contact, cp = _obj(internals, contact_key, ip, default={}) if contact_key else ({}, "")
    plant, pp = _obj(spec, "plant", "")
    kwargs = dict(
        contact_preset_variant="drake",
        line_search_variant=ls,
        max_iterations=_int(sp, "max_iterations", spp, default=100, lo=1),
        optimality_abs_tol=_num(sp, "abs_tolerance", spp, default=1e-14, lo=0.0),
        optimality_rel_tol=_num(sp, "rel_tolerance", spp, default=1e-6, lo=0.0),
        cost_abs_tol=_num(sp, "cost_abs_tolerance", spp, default=1e-30, lo=0.0),
        cost_rel_tol=_num(sp, "cost_rel_tolerance", spp, default=1e-15, lo=0.0),
        contact_beta=_num(plant, "sap_near_rigid_threshold", pp, default=1.0, lo=0.0, lo_open=True),
        contact_sigma=_num(contact, "sigma", cp, default=1e-3, lo=0.0, lo_open=True),
        discrete_contact_approximation=_APPROXIMATIONS[_str(plant, "discrete_contact_approximation", pp,
                                                            default="kSap", choices=tuple(_APPROXIMATIONS))],
    )
    if kwargs["discrete_contact_approximation"] != "sap":
        kwargs["stiction_tolerance"] = _num(plant, "stiction_tolerance", pp, default=1e-4, lo=0.0, lo_open=True,
                                            unit="m/s")
    if ls == "exact_root":
        exact, ep = _obj(sp, "exact_line_search", spp, default={})
        kwargs["line_search_max_iterations"] = _int(exact, "max_iterations", ep, default=100, lo=1)
    try:  # every setting is range-checked above; this catches combinations SapConfig rejects
        SapConfig.from_preset(**kwargs)
    except ValueError as e:
        raise _SceneError(ip or "sap_internals", str(e)) from None
    return kwargs
