"""A Drake scene file as ``sap-record``'s input: checked before Drake builds anything.

A Drake scene file (the JSON format of ``tests/data/drake/README.md``, a recording or one written
by hand) is recordable when

1. ``sap_common.io.load_json`` loads it: every check of the loader (a missing key, a wrong type
   or length, a value out of range such as a negative mass, a reference to a body, joint or
   geometry that does not exist, an invalid model);
2. and it holds what Drake needs beyond what the loader reads (:func:`check_recordable`): bodies
   numbered 0, 1, …, n−1, body 0 named ``world``, the others with positive masses; every quaternion_floating joint
   ``auto_added_for_free_body`` and named after its body (Drake adds and names those joints
   itself); every other joint's two frames named (the body's own name with an identity pose for
   its body frame, else a name no other frame has); a ball_rpy joint's three damping values
   equal (Drake's BallRpyJoint has one); a named actuator per actuated joint, numbered in list
   order, with a desired state of 2·nu numbers when PD-controlled and nu feed-forward numbers;
   geometries numbered in list order, each named, its ``body`` (optional) the name of its
   ``body_index``, static friction ≥ dynamic friction, a convex shape's ``faces``, no box shape
   in contact, and a property marked ``scene_graph_default`` holding SceneGraph's default value;
   no ball, distance or weld constraint on the world body; joints' ``initial_q`` /
   ``initial_v`` equal to ``state.q0`` / ``state.v0`` where both are given.

:func:`read_scene_file` does both and returns the scene specification, named after the file
(``load_json``'s name: the ``scene`` key, else the file's stem) and with the joints' initial q
and v taken from ``state`` where they leave them out (the loader starts from ``state``, the
recorder from the joints). A file that fails raises one ``ValueError`` naming the file, the path
of the value inside it and what was expected there. NumPy only (no pydrake).
"""

from __future__ import annotations

import copy
import json
import math
import os

from sap_common.io.json_scene import DEFAULT_NUM_STEPS
from sap_tools.record.document import SAP_INTERNALS
from sap_tools.record.spec import NO_DRAKE_COUNTERPART, SPEC_SHAPES

__all__ = ["read_scene_file", "check_recordable", "spec_num_steps", "SCENE_GRAPH_DEFAULTS", "JOINT_SIZES",
           "is_identity_pose"]

# SceneGraph's DefaultProximityProperties, filled into a geometry that sets none (README).
SCENE_GRAPH_DEFAULTS = {k: v for k, v in SAP_INTERNALS["scene_graph_default_proximity_properties"].items()
                        if k != "note"}
# property_source keys -> the geometry keys they cover.
_SOURCE_KEYS = {"point_contact_stiffness": ("point_contact_stiffness",), "relaxation_time": ("relaxation_time",),
                "coulomb_friction": ("static_friction", "dynamic_friction"),
                "hunt_crossley_dissipation": ("hunt_crossley_dissipation",)}
JOINT_SIZES = {"quaternion_floating": (7, 6), "revolute": (1, 1), "prismatic": (1, 1), "ball_rpy": (3, 3),
               "weld": (0, 0)}
# File names sap-record writes into --out beside the recordings.
_RESERVED_NAMES = ("index",)


def spec_num_steps(spec: dict, steps: int | None = None) -> int:
    """The steps a recording of ``spec`` holds: ``steps`` (``--steps``), else the file's
    ``recording.num_steps``, else its top-level ``num_steps``, else the loader's default (as
    ``load_json`` reads them)."""
    if steps is not None:
        return int(steps)
    recording = spec.get("recording") if isinstance(spec.get("recording"), dict) else {}
    if recording.get("num_steps") is not None:
        return int(recording["num_steps"])
    return int(spec.get("num_steps", DEFAULT_NUM_STEPS))


def is_identity_pose(pose: dict) -> bool:
    """The recorder's test for a body frame (sap_tools.record.drake): ``p`` zero and ``quat_xyzw``
    exactly ``[0, 0, 0, 1]``."""
    return (list(map(float, pose["p"])) == [0.0, 0.0, 0.0]
            and list(map(float, pose["quat_xyzw"])) == [0.0, 0.0, 0.0, 1.0])


def read_scene_file(path: str) -> dict:
    """The scene specification of the Drake scene file ``path``, checked (module docstring):
    ``ValueError`` ``"<path>: <field>: <what is wrong>"`` for a file that ``load_json`` refuses or
    that Drake could not build as written."""
    from sap_common.io import load_json

    if not os.path.exists(path):
        raise ValueError(f"scene file: {path!r} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"scene file: {path!r} is a directory")
    try:
        loaded = load_json(path)  # the loader's checks, with the file's name in every message
        with open(path) as f:
            spec = json.load(f)
    except OSError as e:
        raise ValueError(f"scene file: cannot read {path!r} ({e.strerror or e})") from None
    spec = check_recordable(spec, path)
    if "scene" not in spec:
        _check_name(loaded.name, path, "scene (the file's name)")
    spec["scene"] = loaded.name  # the "scene" key, else the file's stem, as load_json names it
    return spec


def _check_name(name: str, label: str, where: str = "scene") -> None:
    if not name or name in (".", "..") or any(c in name for c in "/\\" + os.sep) or name in _RESERVED_NAMES:
        raise _fail(label, where, f"{name!r} names the recording's files <scene>.json and <scene>.npz; expected a "
                                  f"file name without a folder, other than {', '.join(_RESERVED_NAMES)} (the folder's "
                                  "index.json)")


def _fail(label: str, path: str, message: str) -> ValueError:
    return ValueError(f"{label}: {path}: {message}")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_recordable(spec: dict, label: str) -> dict:
    """What Drake needs of a scene that ``load_json`` has accepted (module docstring, item 2):
    ``ValueError`` ``"<label>: <field>: <what is wrong>"`` for the first thing missing, else a copy
    of ``spec`` with each geometry's ``body`` and the joints' missing initial q and v filled in."""
    spec = copy.deepcopy(spec)
    if spec.get("scene") is not None:
        _check_name(spec["scene"], label)
    bodies = spec["bodies"]
    names = {int(b["index"]): b["name"] for b in bodies}
    if sorted(names) != list(range(len(bodies))):
        raise _fail(label, "bodies", f"Drake numbers bodies in the order it adds them; expected the indices 0 to "
                                     f"{len(bodies) - 1} (world = 0), got {sorted(names)}")
    if names[0] != "world":
        world = next(i for i, b in enumerate(bodies) if int(b["index"]) == 0)
        raise _fail(label, f"bodies[{world}].name", f"Drake's world body (index 0) is named 'world', got {names[0]!r}")
    for i, b in enumerate(bodies):
        if int(b["index"]) != 0 and not float(b["mass"]) > 0:
            raise _fail(label, f"bodies[{i}].mass", f"Drake needs a mass > 0 kg for every body but the world, got "
                                                    f"{b['mass']}")
    body_names = set(names.values())
    _check_joints(spec, label, body_names)
    _check_actuation(spec, label)
    _check_geometries(spec, label, names)
    for i, c in enumerate(spec.get("constraints", [])):
        if c["type"] in ("ball", "distance", "weld"):
            for key in ("body_A", "body_B"):
                if c[key] == names[0]:
                    raise _fail(label, f"constraints[{i}].{key}", f"the world body: "
                                f"{NO_DRAKE_COUNTERPART['constraint on the world body']}")
    return spec


def _check_joints(spec: dict, label: str, body_names: set) -> None:
    state = spec.get("state") if isinstance(spec.get("state"), dict) else {}
    frames = {}  # offset frame name -> where it was given
    for i, j in enumerate(spec["joints"]):
        where, jtype = f"joints[{i}]", j["type"]
        if jtype == "quaternion_floating":
            if j.get("auto_added_for_free_body") is not True:
                raise _fail(label, f"{where}.auto_added_for_free_body", "expected true: Drake adds a "
                            "quaternion_floating joint by itself for every body without a joint (a scene cannot add "
                            f"one), got {j.get('auto_added_for_free_body')!r}")
            if j["name"] != j["child_body"]:
                raise _fail(label, f"{where}.name", f"Drake names the floating joint of a free body after the body; "
                                                    f"expected {j['child_body']!r}, got {j['name']!r}")
        else:
            for key, pose_key, body_key in (("frame_on_parent_F", "X_PF", "parent_body"),
                                            ("frame_on_child_M", "X_CM", "child_body")):
                fd, p = j[key], f"{where}.{key}.name"
                body = j[body_key]
                fname = fd.get("name")
                if not isinstance(fname, str) or not fname:
                    got = "missing" if fname is None else f"got {fname!r}"
                    raise _fail(label, p, f"{got}; expected the frame's name: {body!r} for the body frame of {body!r} "
                                          f"(an identity {pose_key}), else a name of its own")
                if fname in body_names:
                    if fname != body or not is_identity_pose(fd[pose_key]):
                        raise _fail(label, p, f"{fname!r} names the body frame of {fname!r}, which is this frame only "
                                              f"on body {fname!r} with an identity {pose_key} (p [0, 0, 0], quat_xyzw "
                                              f"[0, 0, 0, 1]); give this frame a name of its own")
                    continue
                if fname in frames:
                    raise _fail(label, p, f"frame name {fname!r} is used twice (also {frames[fname]}); Drake needs a "
                                          "name of its own for every frame")
                frames[fname] = p
            if jtype == "ball_rpy" and "damping" in j and len(set(map(float, j["damping"]))) > 1:
                raise _fail(label, f"{where}.damping", "Drake's BallRpyJoint has one damping coefficient for its 3 "
                                                       f"velocities; expected 3 equal numbers, got {j['damping']}")
        nq, nv = JOINT_SIZES[jtype]
        for key, state_key, start, n in (("initial_q", "q0", "q_start", nq), ("initial_v", "v0", "v_start", nv)):
            p = f"{where}.{key}"
            given = j.get(key)
            if given is not None and not (isinstance(given, list) and len(given) == n
                                          and all(_is_number(x) for x in given)):
                raise _fail(label, p, f"expected a list of {n} finite numbers (a {jtype} joint's), got {given!r}")
            if state.get(state_key) is None:
                continue
            s = [float(x) for x in state[state_key][int(j[start]):int(j[start]) + n]]
            if given is None:
                j[key] = s  # the loader's initial state, which the recorder sets joint by joint
            elif [float(x) for x in given] != s:
                raise _fail(label, p, f"{given} differs from state.{state_key}[{j[start]}:{int(j[start]) + n}] = {s} "
                                      "(the loader starts from state, Drake from the joints); give equal values or "
                                      "one of the two")


def _check_actuation(spec: dict, label: str) -> None:
    actuation = spec.get("actuation") or {}
    actuators = actuation.get("actuators", [])
    seen = {}
    for i, a in enumerate(actuators):
        p = f"actuation.actuators[{i}]"
        aname = a.get("name")
        if not isinstance(aname, str) or not aname:
            got = "missing" if aname is None else f"got {aname!r}"
            raise _fail(label, f"{p}.name", f"{got}; expected the actuator's name (Drake names every actuator)")
        if aname in seen:
            raise _fail(label, f"{p}.name", f"actuator name {aname!r} is used twice (also {seen[aname]})")
        seen[aname] = p
        if a.get("input_start", i) != i:
            raise _fail(label, f"{p}.input_start", f"Drake numbers actuator inputs in list order; expected {i}, got "
                                                   f"{a['input_start']!r}")
    nu = len(actuators)
    if any(a.get("pd_controlled", False) for a in actuators):
        desired = actuation.get("desired_state_input")
        if desired is None:
            actuation["desired_state_input"] = {"xd": [0.0] * (2 * nu)}  # the loader's zero targets
        else:
            xd = desired.get("xd") if isinstance(desired, dict) else None
            if not (isinstance(xd, list) and len(xd) == 2 * nu and all(_is_number(x) for x in xd)):
                raise _fail(label, "actuation.desired_state_input.xd", f"expected 2·nu = {2 * nu} finite numbers "
                            f"(qd of every actuator in list order, then vd), got {xd!r}")
    u_ff = actuation.get("feedforward_actuation_u_ff")
    if u_ff is not None and len(u_ff) != nu:
        raise _fail(label, "actuation.feedforward_actuation_u_ff", f"expected nu = {nu} numbers (one per actuator, in "
                                                                   f"list order), got {len(u_ff)}")


def _check_geometries(spec: dict, label: str, body_names: dict) -> None:
    for i, g in enumerate(spec.get("geometries", [])):
        p = f"geometries[{i}]"
        if int(g["index"]) != i:
            raise _fail(label, f"{p}.index", f"the recorder registers geometries in list order and "
                                             f"collision_candidate_pairs count them so; expected {i}, got {g['index']}")
        gname = g.get("name")
        if not isinstance(gname, str) or not gname:
            got = "missing" if gname is None else f"got {gname!r}"
            raise _fail(label, f"{p}.name", f"{got}; expected the geometry's name (SceneGraph names every geometry)")
        body = body_names[int(g["body_index"])]
        if g.get("body", body) != body:
            raise _fail(label, f"{p}.body", f"{g['body']!r} is not body_index {g['body_index']}'s name {body!r}; "
                                            "give the body's name or leave it out")
        g["body"] = body
        shape = g["shape"]
        if shape["type"] == "box":
            raise _fail(label, f"{p}.shape.type", f"'box' is not recorded: BOX shape contact has no Drake counterpart "
                                                  f"({NO_DRAKE_COUNTERPART['BOX shape contact']}); valid: "
                                                  f"{', '.join(SPEC_SHAPES)}")
        if shape["type"] == "convex":
            faces, n = shape.get("faces"), len(shape["vertices"])
            ok = isinstance(faces, list) and faces and all(
                isinstance(f, list) and len(f) >= 3 and all(isinstance(k, int) and not isinstance(k, bool)
                                                            and 0 <= k < n for k in f) for f in faces)
            if not ok:
                got = "missing" if faces is None else f"got {faces!r}"[:200]
                raise _fail(label, f"{p}.shape.faces", f"{got}; expected the hull's faces, lists of >= 3 vertex "
                                                       f"indices (0 to {n - 1}, counter-clockwise seen from "
                                                       "outside), from which Drake builds its mesh")
        source = g.get("property_source") or {}
        if not isinstance(source, dict):
            raise _fail(label, f"{p}.property_source", f"expected an object {{property: explicit or "
                                                       f"scene_graph_default}}, got {source!r}")
        for prop, keys in _SOURCE_KEYS.items():
            if source.get(prop, "explicit") not in ("explicit", "scene_graph_default"):
                raise _fail(label, f"{p}.property_source.{prop}", f"{source[prop]!r} is not valid; valid: explicit, "
                                                                  "scene_graph_default")
            if source.get(prop) == "scene_graph_default":  # the recorder leaves the property to SceneGraph
                for key in keys:
                    if key in g and g[key] != SCENE_GRAPH_DEFAULTS[key]:
                        raise _fail(label, f"{p}.{key}", f"{g[key]} is not SceneGraph's default "
                                    f"{SCENE_GRAPH_DEFAULTS[key]} (property_source.{prop} is scene_graph_default, so "
                                    "Drake would use the default and the loader this value); mark it explicit")
        if "static_friction" in g:
            mu_s = g["static_friction"]
            if not (_is_number(mu_s) and mu_s >= g["dynamic_friction"]):
                raise _fail(label, f"{p}.static_friction", f"Drake needs a static friction >= the dynamic friction "
                                                           f"{g['dynamic_friction']}, got {mu_s!r}")
