"""Trajectories for the viewer: a rollout of a scene (sap_ref or sap_gpu), a recorded Drake run, or
a trajectory file (the format of ``sap_common.io.trajectory``: any implementation's, or a MuJoCo
recording written by ``sap-record --engine mujoco``).

Frame n is the state after n steps (t = n·h); its contact arrays describe the step n−1 → n
(geometry at the start of that step, force from that step's impulse: γ/h), as in the Drake
recordings; frame 0 has none. ``joint_q``/``joint_qd`` are kept per frame so that any step can
be re-run and inspected (``StepCapture``) on demand.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from sap_common.io import LoadedScene, drake_qv_to_joint, load_json, load_recording, recorded_body_indices
from sap_ref.collision import CollisionPipeline
from sap_ref.contact_jacobian import contact_frames
from sap_ref.solver import SolverSAP

__all__ = ["Trajectory", "rollout_trajectory", "recording_trajectory", "trajectory_file_trajectory", "is_recording",
           "recording_kind", "load_recorded"]


@dataclass
class Trajectory:
    """Body poses and contacts of every world at every frame.

    Attributes:
        scene: the scene (model with its shapes, control, dt, solver settings).
        source: what produced it ("sap_ref rollout, preset …", "Drake recording <file>").
        t: time of each frame [s], (T,).
        body_q: body origin poses [x, y, z, qx, qy, qz, qw], (T, W, B, 7).
        joint_q / joint_qd: coordinates and public-order velocities per frame, (T, W, nq) / (T, W, nv).
        contact_count: contacts of the step into each frame, (T, W).
        contact_point: contact points [m], world, (T, W, C, 3).
        contact_force: force on body 1 of each contact (γ/h rotated to world) [N], (T, W, C, 3).
        solver_kwargs: the settings of the run (to re-run a step the same way).
    """

    scene: LoadedScene
    source: str
    t: np.ndarray
    body_q: np.ndarray
    joint_q: np.ndarray
    joint_qd: np.ndarray
    contact_count: np.ndarray
    contact_point: np.ndarray
    contact_force: np.ndarray
    solver_kwargs: dict = field(default_factory=dict)

    @property
    def num_frames(self) -> int:
        return len(self.t)

    @property
    def num_worlds(self) -> int:
        return int(self.body_q.shape[1])

    def state(self, n: int):
        """The scene's state at frame ``n`` (every world), public order, for re-running step n."""
        s = self.scene.state.copy()
        s.joint_q[:], s.joint_qd[:], s.body_q[:] = self.joint_q[n], self.joint_qd[n], self.body_q[n]
        s.joint_qd_order = "public"
        return s


def _empty(T, W, C):
    return np.zeros((T, W), np.int32), np.zeros((T, W, C, 3)), np.zeros((T, W, C, 3))


def rollout_trajectory(scene: LoadedScene, steps: int, backend: str = "ref", device=None, progress=None,
                       **solver_kwargs) -> Trajectory:
    """``steps`` steps of every world of ``scene`` with sap_ref (``backend="ref"``) or sap_gpu (``"gpu"``)."""
    if steps < 0:
        raise ValueError(f"--steps: must be >= 0, got {steps}")
    m, W, C = scene.sap_model, scene.sap_model.num_worlds, scene.max_rigid_contact
    T = steps + 1
    body_q = np.zeros((T, W, m.body_count, 7))
    joint_q, joint_qd = np.zeros((T, W, m.joint_coord_count)), np.zeros((T, W, m.joint_dof_count))
    count, point, force = _empty(T, W, C)
    kw = dict(max_rigid_contact=C, **solver_kwargs)
    state = scene.state.copy()
    body_q[0], joint_q[0], joint_qd[0] = state.body_q, state.joint_q, state.joint_qd
    if backend == "gpu":
        import sap_gpu

        solver = sap_gpu.SolverSAP(m, device=device, **kw)
        pipe = sap_gpu.CollisionPipeline(m, C, solver.config, device=device)
        dev_state, dev_contacts = sap_gpu.to_device(state, device), pipe.contacts()
        dev_control = sap_gpu.to_device(scene.control, device)
    else:
        solver = SolverSAP(m, **kw)
        pipe = CollisionPipeline(m, C, solver.config)
        contacts = pipe.contacts()
    for n in range(1, T):
        if backend == "gpu":
            pipe.collide(dev_state, dev_contacts)
            solver.step(dev_state, dev_state, dev_control, dev_contacts, scene.dt)
            state, contacts = sap_gpu.to_host(dev_state), sap_gpu.to_host(dev_contacts)
            gamma = solver.work.P.gamma.numpy()[:, :3 * C].astype(np.float64).reshape(W, C, 3)
        else:
            pipe.collide(state, contacts)
            solver.step(state, state, scene.control, contacts, scene.dt)
            gamma = np.zeros((W, C, 3))
            for w, r in enumerate(solver.last_results):
                if r.contacts is not None and r.solve is not None and len(r.contacts.phi0):
                    gamma[w, :len(r.contacts.phi0)] = r.contact_impulses
        body_q[n], joint_q[n], joint_qd[n] = state.body_q, state.joint_q, state.joint_qd
        count[n] = contacts.count
        for w in range(W):
            k = int(contacts.count[w])
            if k:
                point[n, w, :k] = 0.5 * (contacts.x0[w, :k] + contacts.x1[w, :k])
                R_WC = contact_frames(contacts.normal[w, :k])
                force[n, w, :k] = np.einsum("cij,cj->ci", R_WC, gamma[w, :k]) / scene.dt
        if progress is not None:
            progress(n)
    preset = solver.config.contact_preset_variant
    return Trajectory(scene=scene, source=f"{'sap_gpu' if backend == 'gpu' else 'sap_ref'} rollout, preset {preset}, "
                      f"{solver.config.line_search_variant}", t=np.arange(T) * scene.dt, body_q=body_q, joint_q=joint_q,
                      joint_qd=joint_qd, contact_count=count, contact_point=point, contact_force=force,
                      solver_kwargs=solver_kwargs)


def recording_kind(path: str) -> str | None:
    """What a file argument holds: ``"trajectory"`` (a trajectory file: ``format`` is
    ``sap-trajectory``), ``"drake"`` (a Drake recording: its ``.npz`` arrays, or its ``.json``
    scene file with a ``recording`` section and the ``.npz`` beside it), or None (a scene file,
    or nothing readable). An ``.npz`` that is neither is taken for a Drake recording, whose
    loader then says what is missing."""
    low = path.lower()
    if low.endswith(".npz"):
        if os.path.isfile(path):
            import zipfile

            try:
                with zipfile.ZipFile(path) as z:
                    if "format.npy" in z.namelist():
                        return "trajectory"
            except (OSError, zipfile.BadZipFile):
                return "trajectory"  # unreadable: the trajectory loader names the file and the problem
        return "drake"
    if low.endswith(".json") and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return None
        if isinstance(doc, dict) and "format" in doc:
            return "trajectory"
        if isinstance(doc, dict) and "recording" in doc and os.path.exists(path[:-5] + ".npz"):
            return "drake"
    return None


def is_recording(path: str) -> bool:
    """True for a recorded run: a Drake recording or a trajectory file (:func:`recording_kind`)."""
    return recording_kind(path) is not None


def load_recorded(path: str, every: int = 1) -> Trajectory:
    """A Drake recording or a trajectory file as a :class:`Trajectory`, every ``every``-th frame."""
    if recording_kind(path) == "trajectory":
        return trajectory_file_trajectory(path, every)
    return recording_trajectory(path, every)


def _check_finite(where: str, field: str, a: np.ndarray, counts=None) -> None:
    """``ValueError`` naming ``where``, the field and the first row holding a NaN or an infinity
    (of a contact field, only the row's first ``counts[row]`` contacts count: the rest is padding)."""
    a = np.asarray(a, np.float64)
    if a.ndim == 0 or a.size == 0:
        return
    if counts is None:
        bad = ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)
    else:
        per_slot = ~np.isfinite(a.reshape(a.shape[0], a.shape[1], -1)).all(axis=2)
        live = np.arange(a.shape[1])[None, :] < np.asarray(counts)[:, None]
        bad = (per_slot & live).any(axis=1)
    rows = np.flatnonzero(bad)
    if rows.size:
        raise ValueError(f"{where}: {field}: row {int(rows[0])} is not finite (NaN or infinity; "
                         f"{rows.size} row{'s' if rows.size > 1 else ''} in all)")


def recording_trajectory(path: str, every: int = 1) -> Trajectory:
    """A Drake recording (``tests/data/drake/<scene>.npz`` beside its ``.json``), every ``every``-th frame."""
    json_path = path[:-4] + ".json" if path.lower().endswith(".npz") else path
    if not os.path.exists(json_path):
        raise ValueError(f"recording: {path!r} needs its scene file {json_path!r} beside it")
    if every < 1:
        raise ValueError(f"--every: must be >= 1, got {every}")
    scene = load_json(json_path)
    with open(json_path, encoding="utf-8") as f:
        spec = json.load(f)
    rec = load_recording(json_path)
    npz_path = json_path[:-5] + ".npz"
    for key in ("t", "q", "v", "body_pose_W"):
        _check_finite(npz_path, key, rec[key])
    for key in ("contact_p_WC", "contact_f_Bc_W"):
        if key in rec and rec[key].size:
            _check_finite(npz_path, key, rec[key], rec["contact_count"])
    frames = np.arange(0, len(rec["t"]), every)
    T, m = len(frames), scene.sap_model
    idx = recorded_body_indices(scene, spec["recording"]["bodies"])
    body_q = np.zeros((T, 1, m.body_count, 7))
    body_q[..., 6] = 1.0
    body_q[:, 0, idx] = rec["body_pose_W"][frames]
    joint_q, joint_qd = drake_qv_to_joint(scene, rec["q"][frames], rec["v"][frames])
    C = max(int(rec["contact_count"].max(initial=0)), 1)
    count, point, force = _empty(T, 1, C)
    Crec = rec["contact_p_WC"].shape[1] if "contact_p_WC" in rec else 0
    if Crec:
        count[:, 0] = rec["contact_count"][frames]
        point[:, 0, :min(C, Crec)] = rec["contact_p_WC"][frames, :C]
        # The recording's force acts on body B with the normal from B into A; our arrows show the
        # force on the contact's second body, whichever it is: the recorded one is drawn as is.
        force[:, 0, :min(C, Crec)] = rec["contact_f_Bc_W"][frames, :C]
    return Trajectory(scene=scene, source=f"Drake recording {os.path.basename(path)}", t=rec["t"][frames],
                      body_q=body_q, joint_q=joint_q[:, None], joint_qd=joint_qd[:, None], contact_count=count,
                      contact_point=point, contact_force=force, solver_kwargs=dict(scene.solver_kwargs))


def trajectory_file_trajectory(path: str, every: int = 1) -> Trajectory:
    """A trajectory file (``sap_common.io.trajectory``; a MuJoCo recording is one), every
    ``every``-th frame: body poses by forward kinematics of the recorded coordinates; contact points
    and forces where the file has them (a MuJoCo recording has points, no forces)."""
    from sap_common.conventions import joint_qd_sap_to_public
    from sap_common.io.trajectory import load_trajectory, load_trajectory_scene, trajectory_states
    from sap_common.kinematics import forward_kinematics

    if every < 1:
        raise ValueError(f"--every: must be >= 1, got {every}")
    traj = load_trajectory(path)  # names the file, the field and the row of anything malformed or not finite
    scene = load_trajectory_scene(traj)
    q, qd = trajectory_states(traj, scene)
    frames = np.arange(0, q.shape[0], every)
    m = scene.sap_model
    q, qd = q[frames], qd[frames]
    body_q = forward_kinematics(m, q)[:, None]
    qd_public = joint_qd_sap_to_public(m, q, qd)
    c = traj.contacts
    C = max(int(c["contact_count"].max(initial=0)) if c else 0, 1)
    count, point, force = _empty(len(frames), 1, C)
    if c:
        count[:, 0] = c["contact_count"][frames]
        for key, out in (("contact_point", point), ("contact_force", force)):
            if key in c:
                _check_finite(path, key, c[key], c["contact_count"])
                out[:, 0] = c[key][frames, :C]
    return Trajectory(scene=scene, source=f"{traj.engine} trajectory {os.path.basename(path)} ({traj.convention} "
                      "convention)", t=frames * traj.dt, body_q=body_q, joint_q=q[:, None], joint_qd=qd_public[:, None],
                      contact_count=count, contact_point=point, contact_force=force,
                      solver_kwargs=dict(scene.solver_kwargs))
