"""Whether a Drake recording may replace the one already in ``--out``: the same recording only.

``sap-record`` writes ``<scene>.json`` and ``<scene>.npz``. Before any simulation it compares
what it is about to record with what those files already hold, and refuses to replace a
*different* recording unless ``--force`` is given (:func:`check_overwrite`). Two recordings are
the same when their scenes are (:func:`recording_identity`): the name, the description, the
plant (time step, gravity, contact approximation and, under lagged/similar, the stiction
tolerance), the number of steps, and every body, joint, actuator, geometry (with its effective
contact properties: an absent or ``scene_graph_default`` one is SceneGraph's default),
candidate pair and constraint — the scene's content as the recording describes it, read back
from Drake, not the run's fields (generator, versions, timing). Numbers compare within
1e-12·max(1, |x|) (a value written by hand and the same value read back from Drake differ in
their last bits at most); everything else exactly. So re-recording a scene into its own folder
(``sap-record --reference`` regenerating tests/data/drake, the same command run twice) needs no
``--force``, and a different scene with the same name (two files ``a/box.json`` and
``b/box.json``, or other ``--steps``) is refused with the first field that differs.
NumPy only (no pydrake).
"""

from __future__ import annotations

import json
import math
import os

from sap_tools.record.scene_file import JOINT_SIZES, SCENE_GRAPH_DEFAULTS, spec_num_steps

__all__ = ["IDENTITY_RTOL", "recording_identity", "first_difference", "check_overwrite", "recording_paths"]

# Same tolerance as compare_recordings' recomputed summaries (sap_tools.record.cli.CHECK_RTOL).
IDENTITY_RTOL = 1e-12
DEFAULT_GRAVITY = [0.0, 0.0, -9.81]
DEFAULT_STICTION_TOLERANCE = 1e-4
_PROPS = (("point_contact_stiffness", "point_contact_stiffness"), ("relaxation_time", "relaxation_time"),
          ("dynamic_friction", "coulomb_friction"))


def recording_paths(out_dir: str, name: str) -> tuple[str, str]:
    """``(json, npz)`` paths of recording ``name`` in ``out_dir``."""
    return os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, f"{name}.npz")


def _num(x) -> float:
    return float(x)  # "inf" / "-inf" strings too


def _vec(xs) -> list:
    return [_num(x) for x in xs]


def _pose(pose: dict) -> dict:
    """A pose with its quaternion unit and of canonical sign (qw >= 0): equal rotations compare equal."""
    q = _vec(pose["quat_xyzw"])
    n = math.sqrt(sum(c * c for c in q)) or 1.0
    q = [c / n for c in q]
    if q[3] < 0 or (q[3] == 0 and next((c for c in q if c != 0), 0) < 0):
        q = [-c for c in q]
    return {"p": _vec(pose["p"]), "quat_xyzw": [c + 0.0 for c in q]}


def _unit(v) -> list:
    v = _vec(v)
    n = math.sqrt(sum(c * c for c in v)) or 1.0
    return [c / n for c in v]


def _joint(j: dict) -> dict:
    jtype = j["type"]
    nq, nv = JOINT_SIZES.get(jtype, (0, 0))
    d = {"type": jtype, "parent_body": j["parent_body"], "child_body": j["child_body"]}
    if jtype != "quaternion_floating":  # its frames are the world's and the body's
        for key, pose_key in (("frame_on_parent_F", "X_PF"), ("frame_on_child_M", "X_CM")):
            d[key] = {"name": j[key].get("name"), pose_key: _pose(j[key][pose_key])}
    if "axis" in j:
        d["axis"] = _unit(j["axis"])  # Drake keeps the unit axis
    damping = _vec(j.get("damping", [0.0] * nv))
    d["damping"] = damping[:1] * nv if jtype == "ball_rpy" else damping  # one coefficient
    d["position_lower_limits"] = _vec(j.get("position_lower_limits", [-math.inf] * nq))
    d["position_upper_limits"] = _vec(j.get("position_upper_limits", [math.inf] * nq))
    default_q = [1.0] + [0.0] * 6 if jtype == "quaternion_floating" else [0.0] * nq  # Drake's default state
    d["initial_q"] = _vec(j.get("initial_q", default_q))
    d["initial_v"] = _vec(j.get("initial_v", [0.0] * nv))
    return d


def _geometry(g: dict, hunt_crossley: bool) -> dict:
    source = g.get("property_source") or {}
    explicit = lambda key, prop: key in g and source.get(prop, "explicit") == "explicit"  # noqa: E731
    shape = {k: v for k, v in g["shape"].items() if k != "note"}
    if "radius" in shape:
        shape["radius"] = _num(shape["radius"])
    if "length" in shape:
        shape["length"] = _num(shape["length"])
    if "vertices" in shape:
        shape["vertices"] = [_vec(v) for v in shape["vertices"]]
    shape.pop("half_extents", None)
    d = {"index": int(g["index"]), "body_index": int(g["body_index"]), "shape": shape, "X_BG": _pose(g["X_BG"])}
    for key, prop in _PROPS:
        d[key] = _num(g[key]) if explicit(key, prop) else SCENE_GRAPH_DEFAULTS[key]
    friction = explicit("dynamic_friction", "coulomb_friction")
    d["static_friction"] = _num(g.get("static_friction", d["dynamic_friction"])) if friction \
        else SCENE_GRAPH_DEFAULTS["static_friction"]
    if hunt_crossley:  # ignored by SAP
        key = "hunt_crossley_dissipation"
        d[key] = _num(g[key]) if explicit(key, key) else SCENE_GRAPH_DEFAULTS[key]
    return d


def _constraint(c: dict) -> dict:
    d = {}
    for key, value in c.items():
        if key in ("X_AP", "X_BQ"):
            d[key] = _pose(value)
        elif key in ("p_AP", "p_BQ"):
            d[key] = _vec(value)
        elif key in ("distance", "stiffness", "damping", "gear_ratio", "offset"):
            d[key] = _num(value)
        else:
            d[key] = value
    if c.get("type") == "distance":
        d.setdefault("stiffness", math.inf)
        d.setdefault("damping", 0.0)
    if c.get("type") == "coupler":
        d.setdefault("offset", 0.0)
    return d


def recording_identity(doc: dict, steps: int | None = None) -> dict:
    """What a recording of the scene specification or recorded file ``doc`` describes (module
    docstring), with ``steps`` steps (None: the file's). Fields written out with their defaults, so
    a hand-written scene and its recording give the same identity."""
    plant = doc["plant"]
    approximation = plant.get("discrete_contact_approximation", "kSap")
    hunt_crossley = approximation != "kSap"
    out = {"scene": doc.get("scene"), "description": doc.get("description", ""),
           "plant": {"time_step": _num(plant["time_step"]), "gravity_W": _vec(plant.get("gravity_W", DEFAULT_GRAVITY)),
                     "discrete_contact_approximation": approximation},
           "num_steps": spec_num_steps(doc, steps)}
    if hunt_crossley:
        out["plant"]["stiction_tolerance"] = _num(plant.get("stiction_tolerance", DEFAULT_STICTION_TOLERANCE))
    out["bodies"] = {b["name"]: {"index": int(b["index"]), "mass": _num(b["mass"]), "com_B": _vec(b["com_B"]),
                                 "inertia_about_com_B": [_vec(r) for r in b["inertia_about_com_B"]]}
                     for b in doc["bodies"] if int(b["index"]) != 0}
    out["joints"] = {j["name"]: _joint(j) for j in doc["joints"]}
    actuation = doc.get("actuation") or {}
    actuators = actuation.get("actuators", [])
    out["actuators"] = {a["name"]: {"joint": a["joint"], "effort_limit": _num(a.get("effort_limit", math.inf)),
                                    "rotor_inertia": _num(a.get("rotor_inertia", 0.0)),
                                    "gear_ratio": _num(a.get("gear_ratio", 1.0)),
                                    "pd_gains": ({k: _num(v) for k, v in a["pd_gains"].items()}
                                                 if a.get("pd_controlled", False) else None)}
                        for a in actuators}
    if any(a.get("pd_controlled", False) for a in actuators):
        xd = (actuation.get("desired_state_input") or {}).get("xd")
        out["desired_state_xd"] = _vec(xd) if xd is not None else [0.0] * (2 * len(actuators))
    out["feedforward_actuation_u_ff"] = _vec(actuation.get("feedforward_actuation_u_ff", [0.0] * len(actuators)))
    out["geometries"] = {g["name"]: _geometry(g, hunt_crossley) for g in doc.get("geometries", [])}
    if "collision_candidate_pairs" in doc:
        out["collision_candidate_pairs"] = sorted(sorted(map(int, c["geometries"]))
                                                  for c in doc["collision_candidate_pairs"])
    out["constraints"] = [_constraint(c) for c in doc.get("constraints", [])]
    return out


def _show(x) -> str:
    text = json.dumps(x) if not isinstance(x, float) else repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(new, old, path: str = "") -> str | None:
    """The first field in which two identities differ, as ``"path: <new> here, <old> there"``;
    None when they agree (numbers within IDENTITY_RTOL·max(1, |x|))."""
    if isinstance(new, dict) and isinstance(old, dict):
        for k in list(new) + [k for k in old if k not in new]:
            p = f"{path}.{k}" if path else str(k)
            if k not in old:
                return f"{p}: only here"
            if k not in new:
                return f"{p}: only there"
            d = first_difference(new[k], old[k], p)
            if d:
                return d
        return None
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return f"{path}: {len(new)} entries here, {len(old)} there"
        for i, (a, b) in enumerate(zip(new, old)):
            d = first_difference(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (new, old))
    if numbers:
        a, b = float(new), float(old)
        if a == b or (math.isfinite(a) and math.isfinite(b)
                      and abs(a - b) <= IDENTITY_RTOL * max(1.0, abs(a), abs(b))):
            return None
    elif new == old:
        return None
    return f"{path}: {_show(new)} here, {_show(old)} there"


def check_overwrite(spec: dict, out_dir: str, steps: int | None = None, force: bool = False) -> None:
    """``ValueError`` naming ``--out`` when recording ``spec`` (with ``steps``) into ``out_dir``
    would replace files that are not the same recording (module docstring): a JSON or NPZ of
    that name without the other, one that cannot be read, or a recording of another scene.
    ``force`` allows it."""
    if force:
        return
    name = spec.get("scene", "scene")
    json_path, npz_path = recording_paths(out_dir, name)
    have_json, have_npz = os.path.exists(json_path), os.path.exists(npz_path)
    if not (have_json or have_npz):
        return
    hint = "--force overwrites it; or record into another --out, or under another name"
    if not (have_json and have_npz):
        present, absent = (json_path, npz_path) if have_json else (npz_path, json_path)
        raise ValueError(f"--out: {present!r} exists without {os.path.basename(absent)!r} beside it, so it is not a "
                         f"recording that recording {name!r} would replace; {hint}")
    try:
        with open(json_path) as f:
            old = json.load(f)
        old_identity = recording_identity(old)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"--out: {json_path!r} exists and is not a readable recording ({type(e).__name__}: {e}); "
                         f"{hint}") from None
    difference = first_difference(recording_identity(spec, steps), old_identity)
    if difference:
        raise ValueError(f"--out: {json_path!r} holds a different recording of {name!r} ({difference}); {hint}")
