"""``sap-validate --one-batch``: recordings of one scene with different parameters, held to their
recordings as the worlds of ONE batched run that reads the differences per world from one
``WorldParameters`` (docs/validation.md § Recordings with other parameters).

World k of the batch is recording k. The recordings must describe the same scene up to the
per-world parameters (``sap_common.parameters.PARAMETER_FIELDS``: masses, centres of mass,
inertias, joint armature, damping, gains, effort and position limits, materials, margins,
gravity), the same time step and the same number of steps; the first recording's model is the
batch's, and every field where another recording's model differs is set per world. What is
checked is what ``sap-validate`` checks of one recording, with the same bars, but every step is
one step of the whole batch:

* one-step: each recorded row n of every world at once, one collision and one step of the batch,
  each world's result against its row n+1 (bar ``ONE_STEP_RTOL·max(1, |x|)``). A step over the
  bar is reported, not diagnosed: ``sap-validate <that recording>`` diagnoses it alone.
* rollout: one batched rollout from the recorded initial states; each world against its
  recording inside that world's own sensitivity envelope (a sap_ref rollout of the world alone,
  nudged by ``--epsilon``).
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from sap_common.io.trajectory import load_trajectory, load_trajectory_scene
from sap_common.kinematics import body_state
from sap_common.parameters import PARAMETER_FIELDS
from sap_common.state import StepStatus
from sap_tools.cli import scene_solver_kwargs
from sap_tools.validate.backends import RefBackend
from sap_tools.validate.modes import ROLLOUT_EPSILON, rollout, world_context

__all__ = ["ParameterBatch", "load_batch", "batch_one_step", "batch_rollout", "validate_batch"]


@dataclasses.dataclass
class ParameterBatch:
    """Recordings of one scene as the worlds of one batched model.

    Attributes:
        paths: the recordings, world k = ``paths[k]``.
        contexts: each world's :class:`~sap_tools.validate.modes.Context` (its scene, rows and bars;
            its backend is sap_ref on that world alone, which rollout mode uses for the envelope).
        model: the batched model (the first recording's, ``len(paths)`` worlds).
        values: ``{field: (W, *shape) float64}`` of every per-world parameter where the recordings
            differ (what the batch's ``WorldParameters`` holds).
        control: the batch's control (world k's row from recording k's scene).
        solver_kwargs, settings: the solver settings (the first scene file's) and their line.
    """

    paths: list
    contexts: list
    model: object
    values: dict
    control: object
    solver_kwargs: dict
    settings: str


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True))
    return bool(np.array_equal(a, b))


def load_batch(paths, *, preset=None, line_search=None) -> ParameterBatch:
    """The :class:`ParameterBatch` of ``paths``; ``ValueError`` naming the recording and the field
    when a recording is not the same scene as the first up to per-world parameters."""
    paths = [os.fspath(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(f"--one-batch: give at least two recordings of one scene, got {len(paths)}")
    trajs = [load_trajectory(p) for p in paths]
    for p, t in zip(paths, trajs):
        if t.batched or t.engine == "mujoco":
            raise ValueError(f"--one-batch: {p}: a {'batched file' if t.batched else 'MuJoCo recording'}; the "
                             "batch is made of one-world recordings simulated by SAP (Drake or trajectory files)")
    scenes = [load_trajectory_scene(t) for t in trajs]
    m0 = scenes[0].sap_model
    fields = [f.name for f in dataclasses.fields(m0) if f.init and f.name not in ("num_worlds", "joint_q_init",
                                                                                  "joint_qd_init")]
    for p, t, s in zip(paths[1:], trajs[1:], scenes[1:]):
        if t.dt != trajs[0].dt or t.num_steps != trajs[0].num_steps:
            raise ValueError(f"--one-batch: {p}: {t.num_steps} steps of {t.dt:g} s, the first recording "
                             f"{trajs[0].num_steps} of {trajs[0].dt:g} s; one batch steps every world alike")
        m = s.sap_model
        for f in fields:
            if f not in PARAMETER_FIELDS and not _same(getattr(m, f), getattr(m0, f)):
                raise ValueError(f"--one-batch: {p}: {f} differs from {paths[0]}'s, and it is not a per-world "
                                 f"parameter (valid: {', '.join(PARAMETER_FIELDS)}); not the same scene")
    kwargs, settings = scene_solver_kwargs(scenes[0], preset, line_search, default_preset="drake")
    for p, s in zip(paths[1:], scenes[1:]):
        if scene_solver_kwargs(s, preset, line_search, default_preset="drake")[0] != kwargs:
            raise ValueError(f"--one-batch: {p}: solver settings differ from {paths[0]}'s (another approximation "
                             "or preset); one batch has one solver")
    W = len(paths)
    values = {}
    for name in PARAMETER_FIELDS:
        per_world = [np.asarray(getattr(s.sap_model, name), np.float64) for s in scenes]
        if not all(_same(v, per_world[0]) for v in per_world[1:]):
            values[name] = np.stack(per_world)
    model = m0.replicate(W)
    control = model.control()
    orders = {s.control.joint_f_order for s in scenes}
    if len(orders) > 1:
        raise ValueError(f"--one-batch: the recordings' controls are in different orders ({sorted(orders)})")
    control.joint_f_order = orders.pop()
    for f in ("joint_target_pos", "joint_target_vel", "joint_act", "joint_f"):
        getattr(control, f)[:] = np.concatenate([getattr(s.control, f) for s in scenes])
    contexts = [world_context(t, s, None, None) for t, s in zip(trajs, scenes)]
    return ParameterBatch(paths, contexts, model, values, control, kwargs, settings)


class _Batch:
    """One solver and one collision pipeline of a backend over the batch, with one WorldParameters."""

    def __init__(self, batch: ParameterBatch, backend: str, device="cpu", values: dict | None = None):
        C = max(c.scene.max_rigid_contact for c in batch.contexts)
        values = batch.values if values is None else values
        if backend == "ref":
            import sap_ref as impl

            self.params = impl.WorldParameters(batch.model)
            self.name, self.device = "sap_ref", "host"
        elif backend == "gpu":
            import sap_gpu as impl

            self.params = impl.WorldParameters(batch.model, device=device)
            self.name, self.device = "sap_gpu", str(device)
        else:
            raise ValueError(f"--backend: {backend!r} is not one of ref, gpu, both")
        for name, v in values.items():
            self.params.set(name, v)
        self.impl, self.gpu = impl, backend == "gpu"
        self.model, self.batch = batch.model, batch
        self.solver = impl.SolverSAP(batch.model, max_rigid_contact=C, parameters=self.params,
                                     **({"device": device} if self.gpu else {}), **batch.solver_kwargs)
        self.pipeline = impl.CollisionPipeline(batch.model, C, self.solver.config, parameters=self.params,
                                               **({"device": device} if self.gpu else {}))
        self.contacts = self.pipeline.contacts()
        self.control = impl.to_device(batch.control, device) if self.gpu else batch.control

    def state(self, q: np.ndarray, v_sap: np.ndarray):
        """The batch at coordinates ``q`` (W, nq) and SAP-order velocities ``v_sap`` (W, nv)."""
        s = self.model.state()
        s.joint_q[:] = q
        s.joint_qd[:] = v_sap
        s.joint_qd_order = "sap"
        s.body_q, s.body_qd = body_state(self.model, s.joint_q, s.joint_qd, "sap")
        return self.impl.to_device(s, self.device) if self.gpu else s

    def host(self, state):
        return self.impl.to_host(state) if self.gpu else state

    def status(self) -> np.ndarray:
        return (self.solver.diagnostics()["status"] if self.gpu else self.solver.last_status).astype(np.int64)

    def step(self, state):
        """One collision and one step of every world, in place."""
        self.pipeline.collide(state, self.contacts)
        self.solver.step(state, state, self.control, self.contacts, self.batch.contexts[0].dt)


def batch_one_step(batch: ParameterBatch, backend="ref", device="cpu", rows=None, values=None,
                   progress=None) -> list:
    """One-step mode of the whole batch: per world, the report of
    :func:`sap_tools.validate.cli.one_step`'s numbers (no diagnoses). ``values`` replaces the
    batch's per-world parameters (a test that the parameters matter)."""
    run = _Batch(batch, backend, device, values)
    N = batch.contexts[0].traj.num_steps
    rows = list(range(N)) if rows is None else list(rows)
    W = len(batch.contexts)
    worst = [{"dv": 0.0, "dq": 0.0, "ratio": 0.0, "step": None, "failing": [], "nonconverged": 0} for _ in range(W)]
    for i, n in enumerate(rows):
        state = run.state(np.stack([c.q_rows[n] for c in batch.contexts]),
                          np.stack([c.v_rows[n] for c in batch.contexts]))
        run.step(state)
        host, status = run.host(state), run.status()
        for w, ctx in enumerate(batch.contexts):
            ev, bv, eq, bq = ctx.errors(n, host.joint_qd[w], host.joint_q[w])
            r, ratio = worst[w], max(ev / bv, eq / bq)
            r["dv"], r["dq"] = max(r["dv"], ev), max(r["dq"], eq)
            r["nonconverged"] += not int(status[w]) & StepStatus.CONVERGED
            if ratio > r["ratio"]:
                r["ratio"], r["step"] = ratio, int(n) + 1
            if ratio > 1.0:
                r["failing"].append({"step": int(n) + 1, "error_over_bar": float(ratio), "dv": ev, "dq": eq})
        if progress:
            progress(i + 1)
    return [{"steps_checked": len(rows), "max_dv": r["dv"], "max_dq": r["dq"], "worst_error_over_bar": r["ratio"],
             "worst_step": r["step"], "bar_rtol": ctx.one_step_rtol, "failing_steps": len(r["failing"]),
             "failing": r["failing"], "first_failing_step": r["failing"][0]["step"] if r["failing"] else None,
             "not_converged_steps": r["nonconverged"], "verdict": "FAIL" if r["failing"] else "pass"}
            for r, ctx in zip(worst, batch.contexts)]


class _Recorded:
    """A backend whose rollout is one world of the batched rollout (for cli.rollout's envelope)."""

    def __init__(self, name, q, v, status):
        self.name, self._run = name, (q, v, status)

    def rollout(self, state, steps, dt, on_step=None):
        q, v, status = self._run
        return q[:steps + 1], v[:steps + 1], status[:steps]


def batch_rollout(batch: ParameterBatch, backend="ref", device="cpu", steps=None, epsilon=None,
                  progress=None) -> list:
    """Rollout mode: one batched rollout from the recorded initial states; per world, the report of
    :func:`sap_tools.validate.modes.rollout` against that world's recording and envelope."""
    run = _Batch(batch, backend, device)
    N = batch.contexts[0].traj.num_steps if steps is None else int(steps)
    state = run.state(np.stack([c.q_rows[0] for c in batch.contexts]), np.stack([c.v_rows[0] for c in batch.contexts]))
    host = run.host(state)
    qs, vs, status = [host.joint_q.copy()], [host.joint_qd.copy()], []
    for n in range(N):
        run.step(state)
        host = run.host(state)
        qs.append(host.joint_q.copy())
        vs.append(host.joint_qd.copy())
        status.append(run.status())
        if progress:
            progress(n + 1)
    q, v, st = np.stack(qs, 1), np.stack(vs, 1), np.stack(status, 1) if status else np.zeros((len(qs[0]), 0), int)
    reports = []
    for w, ctx in enumerate(batch.contexts):
        reference = RefBackend(ctx.scene, batch.solver_kwargs)
        world = dataclasses.replace(ctx, backend=_Recorded(run.name, q[w], v[w], st[w]), reference=reference)
        reports.append(rollout(world, N, epsilon=ROLLOUT_EPSILON if epsilon is None else epsilon))
    return reports


def validate_batch(paths, *, backend="ref", mode="one-step", device="cpu", preset=None, line_search=None, every=1,
                   steps=None, epsilon=None, quiet=True) -> dict:
    """The report of ``sap-validate --one-batch`` for one backend: ``worlds`` (each recording's
    mode reports and verdict), ``parameters`` (the fields set per world) and the verdict (pass
    only if every world passes)."""
    from sap_tools.progress import Progress

    t0 = time.perf_counter()
    batch = load_batch(paths, preset=preset, line_search=line_search)
    N = batch.contexts[0].traj.num_steps if steps is None else min(int(steps), batch.contexts[0].traj.num_steps)
    modes = ("one-step", "rollout") if mode == "both" else (mode,)
    per_mode = {}
    name = "sap_ref" if backend == "ref" else "sap_gpu"
    for m in modes:
        rows = list(range(0, N, every))
        with Progress(len(rows) if m == "one-step" else N, f"one batch {m} [{name}]", enabled=not quiet) as bar:
            if m == "one-step":
                per_mode["one_step"] = batch_one_step(batch, backend, device, rows, progress=bar.update)
            else:
                per_mode["rollout"] = batch_rollout(batch, backend, device, N, epsilon, progress=bar.update)
    worlds = []
    for w, path in enumerate(batch.paths):
        entry = {"world": w, "recording": path, **{k: v[w] for k, v in per_mode.items()}}
        entry["verdict"] = "pass" if all(entry[k]["verdict"] == "pass" for k in per_mode) else "FAIL"
        worlds.append(entry)
    failing = [e["world"] for e in worlds if e["verdict"] != "pass"]
    return {"recordings": batch.paths, "scene": batch.contexts[0].scene.name, "backend": name,
            "device": device if backend == "gpu" else "host", "solver": batch.settings, "dt": batch.contexts[0].dt,
            "steps": N, "num_worlds": len(worlds), "parameters": sorted(batch.values), "worlds": worlds,
            "failing_worlds": failing, "verdict": "FAIL" if failing else "pass", "wall_s": time.perf_counter() - t0}


def batch_text(r: dict) -> str:
    """The report's lines: the batch, then each world's modes and verdict."""
    lines = [f"{r['num_worlds']} recordings of {r['scene']} as one batch ({r['steps']} steps of {r['dt']:g} s) with "
             f"{r['backend']}; per-world parameters: {', '.join(r['parameters']) or 'none'}", f"  {r['solver']}"]
    for w in r["worlds"]:
        lines.append(f"  world {w['world']} ({w['recording']}): {w['verdict']}")
        if "one_step" in w:
            o = w["one_step"]
            lines.append(f"    one-step: {o['steps_checked']} steps, max |Δv| {o['max_dv']:.3g}, max |Δq| "
                         f"{o['max_dq']:.3g} (bar {o['bar_rtol']:g}·max(1, |x|), reached up to "
                         f"{o['worst_error_over_bar']:.3g} of it, at step {o['worst_step']}); "
                         f"{o['failing_steps']} over the bar" + (
                             f", the first at step {o['first_failing_step']} (sap-validate {w['recording']} "
                             "diagnoses it)" if o["failing_steps"] else "") + f" → {o['verdict']}")
        if "rollout" in w:
            o = w["rollout"]
            lines.append(f"    rollout: {o['steps']} steps, max |Δq| {o['max_dq']:.3g}, max |Δv| {o['max_dv']:.3g}; "
                         f"sensitivity drifts {o['sensitivity_drift_q']:.3g} in q, {o['sensitivity_drift_v']:.3g} "
                         f"in v → {o['verdict']}" + (f" ({o['message']})" if o.get("message") else ""))
    if r["failing_worlds"]:
        lines.append(f"  failing worlds: {', '.join(map(str, r['failing_worlds']))}")
    lines.append(f"  verdict: {r['verdict']}")
    return "\n".join(lines)
