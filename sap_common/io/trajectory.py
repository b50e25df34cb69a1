"""Trajectory files: the minimal format any implementation can write, for ``sap-validate``.

A trajectory file records one world of a scene, step by step. Its required fields are

============  ==========  =================================================================
field         shape       meaning
============  ==========  =================================================================
format        –           the string ``"sap-trajectory"``
version       –           ``1``
scene         –           a built-in scene name, or the path of a scene file (JSON scene, or
                          MJCF/URDF for ``convention="mujoco"``), relative to the trajectory
                          file's directory
dt            –           the time step [s] every recorded step took
convention    –           how q and v are written: ``public`` (our ``joint_q`` and public
                          ``joint_qd``), ``sap`` (our ``joint_q`` and SAP-order ``joint_qd``),
                          ``drake`` (Drake's q and v of a Drake scene file), ``mujoco``
                          (MuJoCo's qpos and qvel of an MJCF scene)
q             (N+1, nq)   positions; row 0 the initial state, row n the state after step n
v             (N+1, nv)   velocities, rows as q
============  ==========  =================================================================

**Batched files.** ``q`` of shape ``(W, N+1, nq)`` and ``v`` of shape ``(W, N+1, nv)`` hold W
worlds of the same scene (a batch of environments, a parameter sweep), each world its own
trajectory from its own initial state with the same ``dt``; contact fields then carry the world
axis first too (``contact_count (W, N+1)``, ``contact_shape0 (W, N+1, C)``, …).
``Trajectory.num_worlds`` is W (1 for a plain file) and ``Trajectory.world(w)`` one world as a
plain trajectory; ``sap-validate`` reports each world and names the failing ones.

and it may carry ``engine`` (who wrote it: ``"drake"``, ``"mujoco"``, the user's name),
``integrator`` (the engine's time-stepping scheme: for MuJoCo ``"Euler"`` or ``"implicitfast"``,
which ``sap-validate`` needs to judge a MuJoCo recording's contact-free steps) and per-step
contacts, rows as the Drake recordings (row n ≥ 1 describes the step n−1 → n: geometry at
q_{n−1}; row 0 is empty): ``contact_count (N+1,)``, ``contact_shape0``,
``contact_shape1 (N+1, C)`` (our shape indices, −1 = padding), ``contact_phi (N+1, C)``
(signed distance [m], < 0 in penetration), and optionally ``contact_point (N+1, C, 3)``
(the point the constraint acts at, world [m]), ``contact_normal (N+1, C, 3)`` (unit, from
shape 0 into shape 1), ``contact_force (N+1, C, 3)`` (force on shape 1's body, world [N]),
``contact_mu``, ``contact_ke`` [N/m], ``contact_tau_d`` [s], ``contact_hcd`` [s/m] (combined
parameters, (N+1, C); ``contact_hcd`` is the Hunt–Crossley dissipation).

Files are ``.npz`` (``np.savez`` with the strings as 0-d arrays) or ``.json`` (one object,
arrays as nested lists). :func:`write_trajectory` writes either; :func:`load_trajectory` reads
them and also reads a Drake recording (``tests/data/drake/<scene>.json`` with its NPZ) as a
trajectory in the ``drake`` convention, with Drake's contacts converted to the fields above and
its other per-step arrays kept in ``Trajectory.extra`` (a ``kLagged``/``kSimilar`` recording's
per-contact Hunt–Crossley data ``contact_hc_fe0``, ``contact_hc_vn0``, ``contact_hc_n0``,
``contact_hc_eps`` among them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TRAJECTORY_FORMAT", "TRAJECTORY_VERSION", "TRAJECTORY_CONVENTIONS", "CONTACT_FIELDS", "Trajectory",
           "write_trajectory", "load_trajectory", "load_trajectory_scene", "trajectory_states"]

TRAJECTORY_FORMAT = "sap-trajectory"
TRAJECTORY_VERSION = 1
TRAJECTORY_CONVENTIONS = ("public", "sap", "drake", "mujoco")
# Optional per-step contact fields: name -> (trailing shape after (N+1, C), dtype).
CONTACT_FIELDS = {
    "contact_shape0": ((), np.int64), "contact_shape1": ((), np.int64), "contact_phi": ((), np.float64),
    "contact_point": ((3,), np.float64), "contact_normal": ((3,), np.float64), "contact_force": ((3,), np.float64),
    "contact_mu": ((), np.float64), "contact_ke": ((), np.float64), "contact_tau_d": ((), np.float64),
    "contact_hcd": ((), np.float64),
}
_REQUIRED_CONTACT = ("contact_shape0", "contact_shape1", "contact_phi")


@dataclass
class Trajectory:
    """One recorded world.

    Attributes:
        scene: the scene as written in the file (built-in name or path).
        scene_path: the scene file it resolves to (None for a built-in scene).
        dt: time step [s].
        convention: one of :data:`TRAJECTORY_CONVENTIONS`.
        q: positions, (N+1, nq) in ``convention``.  v: velocities, (N+1, nv) in ``convention``.
        engine: who wrote it.
        integrator: the engine's integrator (MuJoCo: ``"Euler"``, ``"implicitfast"``, …), or None.
        contacts: the per-step contact fields present (``contact_count`` and :data:`CONTACT_FIELDS`).
        extra: other per-step arrays (a Drake recording's forces, actuation, residuals, speeds).
        source: the file it was read from.
    """

    scene: str
    scene_path: str | None
    dt: float
    convention: str
    q: np.ndarray
    v: np.ndarray
    engine: str = "unknown"
    integrator: str | None = None
    contacts: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    source: str | None = None

    @property
    def batched(self) -> bool:
        """Whether the file holds several worlds (``q`` of shape ``(W, N+1, nq)``)."""
        return self.q.ndim == 3

    @property
    def num_worlds(self) -> int:
        """Worlds W of a batched file; 1 for a plain one."""
        return int(self.q.shape[0]) if self.batched else 1

    @property
    def num_steps(self) -> int:
        """Recorded steps N (rows − 1)."""
        return int(self.q.shape[-2]) - 1

    def world(self, w: int) -> Trajectory:
        """World ``w`` of a batched trajectory as a plain one (``self`` for a plain file and w = 0)."""
        if not self.batched:
            if w != 0:
                raise ValueError(f"world: a plain trajectory has world 0 only, got {w}")
            return self
        if not 0 <= w < self.num_worlds:
            raise ValueError(f"world: must lie in [0, {self.num_worlds}), got {w}")
        return dataclasses.replace(self, q=self.q[w], v=self.v[w], contacts={k: a[w] for k, a in self.contacts.items()},
                                   extra={k: a[w] for k, a in self.extra.items()})


def _where(path) -> str:
    return os.fspath(path) if path is not None else "trajectory"


def _check(traj: Trajectory) -> Trajectory:
    """``ValueError`` naming the field (and the world of a batched file) when the trajectory is malformed."""
    w = _where(traj.source)
    if traj.convention not in TRAJECTORY_CONVENTIONS:
        raise ValueError(f"{w}: convention: {traj.convention!r} is not one of {', '.join(TRAJECTORY_CONVENTIONS)}")
    if not (isinstance(traj.dt, float) and math.isfinite(traj.dt) and traj.dt > 0):
        raise ValueError(f"{w}: dt: expected a finite time step > 0 [s], got {traj.dt!r}")
    batched = traj.q.ndim == 3
    for name in ("q", "v"):
        a = getattr(traj, name)
        if a.ndim not in (2, 3) or a.shape[-2] < 2 or (a.ndim == 3 and a.shape[0] < 1):
            raise ValueError(f"{w}: {name}: expected shape (N+1, n) with N >= 1 recorded steps (or (W, N+1, n) for "
                             f"W worlds), got {a.shape}")
        if a.ndim != traj.q.ndim:
            raise ValueError(f"{w}: q and v: shapes {traj.q.shape} and {traj.v.shape}; both plain (N+1, n) or both "
                             "batched (W, N+1, n)")
        bad = ~np.isfinite(a).all(axis=-1)
        if np.any(bad):
            where = np.argwhere(bad)[0]
            at = f"world {where[0]}, row {where[1]}" if batched else f"row {where[0]}"
            raise ValueError(f"{w}: {name}: {at} is not finite")
    if traj.q.shape[:-1] != traj.v.shape[:-1]:
        if batched:
            raise ValueError(f"{w}: q and v: {traj.q.shape[:-1]} and {traj.v.shape[:-1]} worlds and rows; they must "
                             "match")
        raise ValueError(f"{w}: q and v: {traj.q.shape[0]} and {traj.v.shape[0]} rows; they must match")
    c = traj.contacts
    if c:
        lead = traj.q.shape[:-1]  # (N+1,) or (W, N+1)
        missing = [k for k in ("contact_count",) + _REQUIRED_CONTACT if k not in c]
        if missing:
            raise ValueError(f"{w}: contacts: {', '.join(missing)} missing (contacts need contact_count, "
                             f"{', '.join(_REQUIRED_CONTACT)})")
        if c["contact_count"].shape != lead:
            raise ValueError(f"{w}: contact_count: expected shape {lead}, got {c['contact_count'].shape}")
        s0 = c["contact_shape0"]
        C = s0.shape[len(lead)] if s0.ndim == len(lead) + 1 else -1
        for k, (trail, _) in CONTACT_FIELDS.items():
            if k in c and c[k].shape != lead + (C,) + trail:
                raise ValueError(f"{w}: {k}: expected shape {lead + (C,) + trail}, got {c[k].shape}")
        if np.any(c["contact_count"] < 0) or np.any(c["contact_count"] > C):
            raise ValueError(f"{w}: contact_count: entries must lie in [0, {C}]")
    return traj


def write_trajectory(path, *, scene: str, dt: float, q, v, convention: str = "public", engine: str = "user",
                     contacts: dict | None = None, integrator: str | None = None) -> str:
    """Write a trajectory file (``.npz`` or ``.json`` by the extension of ``path``); returns the path.

    ``scene`` is stored as given: a built-in scene name, or a scene file path relative to the
    directory of ``path``. ``q``/``v`` are ``(N+1, n)``, or ``(W, N+1, n)`` for W worlds (a batched
    file, contact fields then with the world axis first too). ``contacts`` holds
    ``contact_count`` and fields of :data:`CONTACT_FIELDS` (optional); ``integrator`` names the
    engine's scheme (optional).
    """
    path = os.fspath(path)
    traj = _check(Trajectory(scene=str(scene), scene_path=None, dt=float(dt), convention=str(convention),
                             q=np.asarray(q, np.float64), v=np.asarray(v, np.float64), engine=str(engine),
                             contacts={k: np.asarray(a) for k, a in (contacts or {}).items()}, source=path))
    fields = {"format": TRAJECTORY_FORMAT, "version": TRAJECTORY_VERSION, "scene": traj.scene, "dt": traj.dt,
              "convention": traj.convention, "engine": traj.engine, "q": traj.q, "v": traj.v, **traj.contacts}
    if integrator is not None:
        fields["integrator"] = str(integrator)
    if path.endswith(".json"):
        with open(path, "w") as f:
            json.dump({k: (a.tolist() if isinstance(a, np.ndarray) else a) for k, a in fields.items()}, f)
            f.write("\n")
    elif path.endswith(".npz"):
        np.savez_compressed(path, **{k: np.asarray(a) for k, a in fields.items()})
    else:
        raise ValueError(f"path: {path!r}: a trajectory file ends in .npz or .json")
    return path


def _drake_recording(path: str, spec: dict) -> Trajectory:
    """A Drake recording (JSON + NPZ beside it) as a trajectory in the ``drake`` convention."""
    from .drake import load_recording

    rec = load_recording(path)
    geoms = spec.get("geometries", [])
    shape_of = {int(g["index"]): i for i, g in enumerate(geoms)}  # load_json adds shapes in list order
    pairs = {tuple(sorted(map(int, p["geometries"]))): p for p in spec.get("collision_candidate_pairs", [])}
    count = rec["contact_count"].astype(np.int64)
    rows, C = rec["contact_geom_A"].shape
    # Drake's pair (A, B) is ordered by GeometryId; ours by shape index: shape 0 = the lower index.
    gA, gB = rec["contact_geom_A"], rec["contact_geom_B"]
    swap = np.zeros((rows, C), bool)
    s0, s1 = np.full((rows, C), -1, np.int64), np.full((rows, C), -1, np.int64)
    mu, ke, tau, hcd = (np.zeros((rows, C)) for _ in range(4))
    for n in range(rows):
        for c in range(int(count[n])):
            a, b = shape_of[int(gA[n, c])], shape_of[int(gB[n, c])]
            swap[n, c] = a < b  # then A is shape 0 and B shape 1, the reverse of Drake's nhat_BA
            s0[n, c], s1[n, c] = min(a, b), max(a, b)
            p = pairs.get(tuple(sorted((int(gA[n, c]), int(gB[n, c])))), {})
            mu[n, c] = float(p.get("mu_dynamic_combined", math.nan))
            ke[n, c] = float(p.get("k_combined", math.nan))
            tau[n, c] = float(p.get("tau_d_combined", math.nan))
            hcd[n, c] = float(p.get("hunt_crossley_dissipation_combined", math.nan))
    sign = np.where(swap, -1.0, 1.0)[..., None]  # +1: shape 0 = B, shape 1 = A
    contacts = {
        "contact_count": count, "contact_shape0": s0, "contact_shape1": s1, "contact_phi": -rec["contact_depth"],
        "contact_point": rec["contact_p_WC"], "contact_normal": sign * rec["contact_nhat_BA_W"],
        "contact_force": -sign * rec["contact_f_Bc_W"], "contact_mu": mu, "contact_ke": ke, "contact_tau_d": tau,
    }
    if spec.get("plant", {}).get("discrete_contact_approximation", "kSap") != "kSap":
        contacts["contact_hcd"] = hcd
    extra = {k: rec[k] for k in ("generalized_contact_forces", "net_actuation", "dynamics_residual",
                                 "contact_separation_speed", "contact_slip_speed", "contact_hc_fe0",
                                 "contact_hc_vn0", "contact_hc_n0", "contact_hc_eps") if k in rec}
    h = float(spec["plant"]["time_step"])
    return Trajectory(scene=os.path.basename(path), scene_path=path, dt=h, convention="drake",
                      q=rec["q"].astype(np.float64), v=rec["v"].astype(np.float64), engine="drake",
                      contacts=contacts, extra=extra, source=path)


def _string(fields: dict, key: str, w: str, default=None) -> str:
    if key not in fields:
        if default is None:
            raise ValueError(f"{w}: missing required field {key!r}")
        return default
    x = fields[key]
    x = x.item() if isinstance(x, np.ndarray) else x
    if not isinstance(x, str):
        raise ValueError(f"{w}: {key}: expected a string, got {type(x).__name__}")
    return x


def load_trajectory(path) -> Trajectory:
    """Read a trajectory file (``.npz``/``.json``) or a Drake recording (its ``.json``).

    Raises ``ValueError`` naming the file and the field when it is missing, of the wrong shape,
    not finite, or not a trajectory.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such trajectory file")
    if path.endswith(".json"):
        try:
            with open(path, encoding="utf-8") as f:
                fields = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(fields, dict):
            raise ValueError(f"{path}: expected a JSON object")
        if "recording" in fields and "plant" in fields and "format" not in fields:
            arrays = path[:-len(".json")] + ".npz"
            if not os.path.isfile(arrays):
                raise ValueError(f"{path}: a Drake recording's scene file without its recording: the arrays are "
                                 f"read from {arrays}, which does not exist (sap-record writes both files)")
            return _check(_drake_recording(path, fields))
        if "plant" in fields and "bodies" in fields and "format" not in fields:
            raise ValueError(f"{path}: a scene file, not a recording: record it first (sap-record {path}) and "
                             f"validate the recording it writes")
    elif path.endswith(".npz"):
        from .npz import read_npz

        fields = read_npz(path)
    else:
        raise ValueError(f"{path}: a trajectory file ends in .npz or .json")
    fmt = _string(fields, "format", path)
    if fmt != TRAJECTORY_FORMAT:
        raise ValueError(f"{path}: format: expected {TRAJECTORY_FORMAT!r}, got {fmt!r}")
    version = int(np.asarray(fields.get("version", -1)))
    if version != TRAJECTORY_VERSION:
        raise ValueError(f"{path}: version: this reader knows version {TRAJECTORY_VERSION}, got {version}")
    scene = _string(fields, "scene", path)
    looks_like_file = scene.lower().endswith((".json", ".xml", ".urdf")) or "/" in scene or os.sep in scene
    scene_path = os.path.join(os.path.dirname(os.path.abspath(path)), scene) if looks_like_file else None
    if scene_path is not None and not os.path.isfile(scene_path):
        raise ValueError(f"{path}: scene: the scene file {scene!r} does not exist (looked for {scene_path})")
    try:
        dt = float(np.asarray(fields["dt"]))
    except KeyError:
        raise ValueError(f"{path}: missing required field 'dt'") from None
    except (TypeError, ValueError):
        raise ValueError(f"{path}: dt: expected a number [s]") from None
    arrays = {}
    for key in ("q", "v"):
        if key not in fields:
            raise ValueError(f"{path}: missing required field {key!r}")
        try:
            arrays[key] = np.asarray(fields[key], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: {key}: expected a numeric (N+1, n) array") from None
    contacts = {}
    for key in ("contact_count",) + tuple(CONTACT_FIELDS):
        if key in fields:
            dtype = np.int64 if key == "contact_count" else CONTACT_FIELDS[key][1]
            try:
                contacts[key] = np.asarray(fields[key], dtype=dtype)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: {key}: expected a numeric array") from None
    return _check(Trajectory(scene=scene, scene_path=scene_path, dt=dt,
                             convention=_string(fields, "convention", path), q=arrays["q"], v=arrays["v"],
                             engine=_string(fields, "engine", path, default="unknown"),
                             integrator=_string(fields, "integrator", path, default="") or None, contacts=contacts,
                             source=path))


def load_trajectory_scene(traj: Trajectory):
    """The :class:`~sap_common.io.scene.LoadedScene` a trajectory was recorded on (one world)."""
    from .. import scenes
    from .json_scene import load_json

    if traj.scene_path is None:
        return scenes.get(traj.scene, num_worlds=1)
    if traj.scene_path.lower().endswith((".xml", ".urdf")):
        from .mjcf import load_mjcf

        return load_mjcf(traj.scene_path, num_worlds=1)
    return load_json(traj.scene_path, num_worlds=1)


def trajectory_states(traj: Trajectory, scene) -> tuple[np.ndarray, np.ndarray]:
    """``(joint_q (N+1, nq), joint_qd (N+1, nv) in SAP order)`` of every recorded row (of one world:
    pass ``traj.world(w)`` for a batched file)."""
    from ..conventions import joint_qd_public_to_sap

    model = scene.sap_model
    w = _where(traj.source)
    if traj.batched:
        raise ValueError(f"{w}: a batched trajectory ({traj.num_worlds} worlds): take one world with .world(w)")
    if traj.convention == "drake":
        from .drake import drake_qv_to_joint

        q, qd = drake_qv_to_joint(scene, traj.q, traj.v, joint_qd_order="sap")
    elif traj.convention == "mujoco":
        from .mjcf import mujoco_qpos_to_joint_q, mujoco_qvel_to_joint_qd

        if scene.mujoco_map is None:
            raise ValueError(f"{w}: convention 'mujoco' needs an MJCF/URDF scene, got {traj.scene!r}")
        q, qd = mujoco_qpos_to_joint_q(scene, traj.q), mujoco_qvel_to_joint_qd(scene, traj.q, traj.v, "sap")
    else:
        q, qd = traj.q, traj.v
    if q.shape[1] != model.joint_coord_count or qd.shape[1] != model.joint_dof_count:
        raise ValueError(f"{w}: q, v: {traj.q.shape[1]} and {traj.v.shape[1]} columns do not match scene "
                         f"{scene.name!r} (nq {model.joint_coord_count}, nv {model.joint_dof_count}) in the "
                         f"{traj.convention!r} convention")
    if traj.convention == "public":
        qd = joint_qd_public_to_sap(model, q, qd)
    return np.asarray(q, np.float64), np.asarray(qd, np.float64)
