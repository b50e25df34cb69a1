"""``sap-validate``: hold an implementation of SAP against a recorded trajectory, with a verdict.

    sap-validate tests/data/drake/sphere_slide.json
    sap-validate tests/data/drake --backend both --every 10 --junit validate.xml
    sap-validate my_kernels.npz --mode both --json
    sap-validate tests/data/drake --ray --junit validate.xml    # one Ray task per recording

A recording is a Drake recording (``tests/data/drake/<scene>.json``, written by ``sap-record``)
or a trajectory file of the minimal format (``sap_common.io.trajectory``) written by any
implementation. Two modes (``--mode``):

* one-step (teacher-forced): every step starts from the recording's own state n and must
  reproduce row n+1 to round-off, ``|Δv| ≤ ONE_STEP_RTOL·max(1, |v|)`` and the same for q;
  errors cannot compound, so this is the sharp test of an implementation. A step that misses
  the bar is diagnosed (sap_tools/validate/diagnose.py): a contact-set tie, a Newton iterate within
  tolerance, or — on a pair Drake computes with FCL's MPR — Drake's contact point, when the step
  with the recording's contact geometry reproduces the recorded row to the bar, explains it (it
  passes unless ``--strict``); anything else fails, with the stage where the step departs.
* rollout: the free trajectory from the recorded initial state. Its bar is the scene's own
  sensitivity: sap_ref is rolled out twice, once from a state whose velocities are nudged by
  ``--epsilon``, and the drift between the two (running maximum) bounds the rollout's
  distance from the recording at each step (never below the accumulated one-step bar).

A MuJoCo recording (``engine: mujoco``) follows MuJoCo's own contact model, so it is judged by
statistics: steps without contact must agree to :data:`MUJOCO_FREE_RTOL`, the contact pairs
must agree on :data:`MUJOCO_CONTACT_AGREEMENT` of the steps, and the velocity errors of contact
steps are reported. Exit status: 0 when every recording passes, 1 when one fails, 2 for a
usage error. ``--json`` prints one JSON object as the last line, ``--junit FILE`` writes a JUnit
XML report (one test case per recording, backend and mode).

``--one-batch`` validates recordings of one scene with different parameters (``sap-record --set``)
as the worlds of one batched run with one ``WorldParameters``: every world against its own
recording with the bars above, every step one step of the whole batch
(:mod:`sap_tools.validate.batch`).

``--ray [ADDRESS]`` runs each recording × backend as a task on a Ray cluster (or a local Ray
instance) and gathers the reports in the local run's order: the same verdicts, numbers, text,
JSON and JUnit as without it, only the wall-clock times differ (:mod:`sap_tools.fanout`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

from sap_common.io.trajectory import load_trajectory, load_trajectory_scene
from sap_common.state import StepStatus
from sap_tools.cli import (
    LINE_SEARCH_CHOICES,
    PRESET_CHOICES,
    atomic_output,
    check_flags,
    check_out,
    entry_point,
    fail,
    parser,
    scene_solver_kwargs,
    warp_device,
)
from sap_tools.fanout import RAY_LOCAL, map_tasks, ray_resources, ray_session, task_device
from sap_tools.progress import Progress
from sap_tools.validate.backends import RefBackend, make_backend
from sap_tools.validate.batch import batch_text, load_batch, validate_batch
from sap_tools.validate.diagnose import diagnose
from sap_tools.validate.modes import ONE_STEP_RTOL, ROLLOUT_EPSILON, Context, position_error, rollout
from sap_tools.validate.modes import world_context as _world_context

__all__ = ["ONE_STEP_RTOL", "ROLLOUT_EPSILON", "MAX_DIAGNOSES", "MUJOCO_FREE_RTOL", "MUJOCO_CONTACT_AGREEMENT",
           "Context", "make_context", "expand", "position_error", "one_step", "rollout", "validate", "junit_xml",
           "main"]

# Unexplained failing steps diagnosed before the rest are reported as undiagnosed (each costs a few
# solves and a stage table). Explained steps (a tie, a Newton iterate, an FCL-MPR contact point)
# do not count: a recording whose every step is explained is diagnosed throughout.
MAX_DIAGNOSES = 50
# MuJoCo recordings: contact-free steps follow the same Newton–Euler equations and semi-implicit
# Euler; MuJoCo's mass matrix and bias come from its own recursions (agreeing with ours to
# ~1e-12, tests/test_ref_dynamics_mujoco.py), so 1e-9 relative to max(1, |v|) holds them.
MUJOCO_FREE_RTOL = 1e-9
# Share of contact steps whose contact pairs (shape pairs) must agree with MuJoCo's: both report a
# pair while φ < margin; ties at the threshold and MuJoCo's multi-contact box pairs make a few differ.
MUJOCO_CONTACT_AGREEMENT = 0.95
MODES = ("one-step", "rollout", "both")
# Failing steps listed by step number in the text report (--json lists every one).
LISTED_STEPS = 10
_CAUSES = {"step": "the step differs", "contact_set": "contact set differs",
           "constraint_rows": "constraint rows differ", "tie": "tie", "newton_tolerance": "Newton tolerance",
           "mpr_contact_point": "FCL-MPR contact point", "undiagnosed": "undiagnosed"}
_MODE_KEYS = ("one_step", "statistics", "rollout", "rollout_statistics")  # report keys of the modes


# ----------------------------------------------------------------------------- one-step mode


def one_step(ctx: Context, steps, *, strict=False, max_diagnoses=MAX_DIAGNOSES, progress=None) -> dict:
    """Teacher-forced steps from the rows ``steps`` (row n → n+1): errors against the bar, diagnoses
    of failures. The report numbers steps as every report does: the step from row n is step n + 1."""
    worst = {"dv": 0.0, "dq": 0.0, "ratio": 0.0, "step": None}
    failing, diagnoses, counts, nonconverged = [], [], {"tie": 0, "newton_tolerance": 0, "mpr_contact_point": 0}, 0
    undiagnosed = 0
    for i, n in enumerate(steps):
        state = ctx.state(n)
        contacts = ctx.backend.collide(state)
        v1, q1, status = ctx.backend.step(state, contacts, ctx.dt)
        nonconverged += not status & StepStatus.CONVERGED
        ev, bv, eq, bq = ctx.errors(n, v1, q1)
        ratio = max(ev / bv, eq / bq)
        worst["dv"], worst["dq"] = max(worst["dv"], ev), max(worst["dq"], eq)
        if ratio > worst["ratio"]:
            worst["ratio"], worst["step"] = ratio, int(n) + 1
        if ratio > 1.0:
            entry = {"step": int(n) + 1, "error_over_bar": float(ratio), "dv": ev, "dq": eq}
            if sum(not d.explained for d in diagnoses) < max_diagnoses:
                d = diagnose(ctx, int(n))
                diagnoses.append(d)
                if d.explained:
                    counts[d.explanation] += 1
                entry["cause"] = d.explanation if d.explained else d.cause
                entry["explained"] = bool(d.explained)
            else:
                undiagnosed += 1
                entry["cause"], entry["explained"] = "undiagnosed", False
            failing.append(entry)
        if progress:
            progress(i + 1)
    unexplained = [d for d in diagnoses if not d.explained or strict]
    ok = not unexplained and undiagnosed == 0
    first = next((d for d in diagnoses if not d.explained), diagnoses[0] if diagnoses else None)
    return {"steps_checked": len(steps), "max_dv": worst["dv"], "max_dq": worst["dq"],
            "worst_error_over_bar": worst["ratio"], "worst_step": worst["step"], "bar_rtol": ctx.one_step_rtol,
            "failing_steps": len(failing), "failing": failing,
            "first_failing_step": failing[0]["step"] if failing else None,
            "explained": counts, "undiagnosed": undiagnosed,
            "mpr_forced_worst_over_bar": max((d.forced_over_bar for d in diagnoses
                                              if d.explanation == "mpr_contact_point"), default=None),
            "not_converged_steps": int(nonconverged), "verdict": "pass" if ok else "FAIL",
            "diagnosis": None if first is None else first.as_dict(),
            "first_explained": next((d.as_dict() for d in diagnoses if d.explained), None)}


# ----------------------------------------------------------------------------- MuJoCo statistics


def mujoco_integrator_of(ctx: Context) -> str:
    """The MuJoCo integrator a MuJoCo recording was made with: the file's ``integrator`` field, or
    (a file written before sap-record stored it) the scene model's own option, which it then used.
    ``ValueError`` naming the file for one whose step is not derived here."""
    from sap_tools.record.cli import MUJOCO_INTEGRATORS, MUJOCO_JUDGED_INTEGRATORS

    name = ctx.traj.integrator
    if name is None and getattr(ctx.scene, "mj_model", None) is not None:
        name = MUJOCO_INTEGRATORS[int(ctx.scene.mj_model.opt.integrator)]
    if name not in MUJOCO_JUDGED_INTEGRATORS:
        raise ValueError(f"{ctx.traj.source}: integrator: {name!r}: sap-validate derives MuJoCo's "
                         f"{' and '.join(MUJOCO_JUDGED_INTEGRATORS)} steps only (record with sap-record --integrator)")
    return name


def mujoco_free_step(ctx: Context, n: int, integrator: str, eulerdamp: bool = True) -> np.ndarray:
    """v_{n+1} as MuJoCo's ``integrator`` takes a contact-free step from row n, computed from this
    project's dynamics (SAP order). Call right after ``ctx.reference`` stepped from row n.

    SAP's step (docs/formulation.md) is (A + h·c·e eᵀ) v₁ = A v* + h·(−Kp(q₀ − q_d) + Kd v_d + u₀) on each
    drive, c = h·Kp + Kd: the drive implicit in position and velocity. MuJoCo takes the actuator
    force at (q₀, v₀), τ = clamp(−Kp(q₀ − q_d) − Kd(v₀ − v_d) + u₀), and steps
    (M + h·D̃ + h·K̃)(v₁ − v₀) = h·(k + τ): k the same forces as SAP's free motion (gravity, bias,
    −D v₀), D̃ = D where joint damping is implicit (Euler with its eulerdamp flag, implicitfast) and
    K̃ = Kd on unclamped drives for implicitfast (its velocity derivatives), 0 for Euler. The raw
    gains are MuJoCo's (the near-rigid clamp of SAP's drives is SAP's own)."""
    r = ctx.reference.solver.last_results[0]
    fm, d, model, h = r.free_motion, r.drives, ctx.scene.sap_model, ctx.dt
    v0 = ctx.v_rows[n]
    tau, K = np.zeros_like(v0), np.zeros_like(v0)
    if d is not None and len(d.dof):
        Kp, Kd = model.joint_target_ke[d.dof], model.joint_target_kd[d.dof]
        y = -Kp * (d.q0 - d.q_target) - Kd * (v0[d.dof] - d.v_target) + d.u0
        tau[d.dof] = np.clip(y, -d.effort, d.effort)
        if integrator == "implicitfast":  # MuJoCo leaves a clamped actuator's derivative out
            K[d.dof] = np.where(np.abs(y) < d.effort, Kd, 0.0)
    damping = np.diag(fm.A - fm.M) / h
    A = fm.M + h * np.diag((damping if integrator == "implicitfast" or eulerdamp else 0.0) + K)
    return v0 + h * np.linalg.solve(A, fm.k + tau)


def mujoco_statistics(ctx: Context, steps, progress=None) -> dict:
    """One-step comparison of a MuJoCo recording by statistics (module docstring). Contact-free
    steps are judged after the difference of the two schemes is taken out: SAP's drives are
    implicit, MuJoCo's actuator forces explicit (Euler) or implicit in velocity only
    (implicitfast), so the judged residual of step n is (v_impl − v_rec) − (v_sap_ref − v_mujoco),
    v_mujoco MuJoCo's step computed from this project's dynamics (:func:`mujoco_free_step`); the
    raw difference and the derived one are reported. Also judged: the share of contact steps
    whose contact pairs agree; reported: |Δv| of contact steps and the mean φ₀ of both sides."""
    integrator = mujoco_integrator_of(ctx)
    mj, eulerdamp = getattr(ctx.scene, "mj_model", None), True
    if mj is not None:  # MuJoCo's flag that makes Euler's joint damping explicit
        import mujoco

        eulerdamp = not int(mj.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    raw, expected, residual = 0.0, 0.0, 0.0
    agree, contact_steps, dv, phi_ours, phi_theirs = 0, 0, [], [], []
    c = ctx.traj.contacts
    for i, n in enumerate(steps):
        state = ctx.state(n)
        contacts = ctx.backend.collide(state)
        v1, q1, _ = ctx.backend.step(state, contacts, ctx.dt)
        k_ours = int(contacts.count[0])
        ours = {tuple(sorted((int(contacts.shape0[0, k]), int(contacts.shape1[0, k])))) for k in range(k_ours)}
        theirs = set()
        if c:
            k_theirs = int(c["contact_count"][n + 1])
            theirs = {tuple(sorted((int(c["contact_shape0"][n + 1, k]), int(c["contact_shape1"][n + 1, k]))))
                      for k in range(k_theirs)}
            phi_theirs += c["contact_phi"][n + 1, :k_theirs].tolist()
        phi_ours += contacts.phi0[0, :k_ours].tolist()
        v_rec = ctx.v_rows[n + 1]
        ev = float(np.abs(v1 - v_rec).max(initial=0.0))
        if not ours and not theirs:
            scale = max(1.0, float(np.abs(v_rec).max(initial=0.0)))
            if ctx.backend is ctx.reference:
                v_sap = v1
            else:
                v_sap, _, _ = ctx.reference.step(state, ctx.reference.collide(state), ctx.dt)
            v_mj = mujoco_free_step(ctx, n, integrator, eulerdamp)
            raw = max(raw, ev / scale)
            expected = max(expected, float(np.abs(v_sap - v_mj).max(initial=0.0)) / scale)
            residual = max(residual, float(np.abs((v1 - v_rec) - (v_sap - v_mj)).max(initial=0.0)) / scale)
        else:
            contact_steps += 1
            agree += ours == theirs
            dv.append(ev)
        if progress:
            progress(i + 1)
    share = agree / contact_steps if contact_steps else 1.0
    free = len(steps) - contact_steps
    # With no contact-free step the dynamics were not judged at all (contact steps are not: two
    # contact models), so the mode cannot pass, whatever the contact pairs say.
    ok = free > 0 and residual <= MUJOCO_FREE_RTOL and share >= MUJOCO_CONTACT_AGREEMENT
    dv = np.array(dv) if dv else np.zeros(1)
    mean = lambda x: float(np.mean(x)) if x else None  # noqa: E731
    judged_nothing = {} if free else {"message": (
        f"judged nothing of the dynamics: none of the {len(steps)} steps checked is free of contact, and steps "
        f"with contact are not judged against MuJoCo (two contact models; here their |Δv| has median "
        f"{float(np.median(dv)):.3g} m/s); record a run that has contact-free steps (bodies released above the "
        f"ground), or validate against a Drake recording")}
    return {**judged_nothing, "steps_checked": len(steps), "integrator": integrator, "contact_free_steps": free,
            "contact_free_max_rel_dv": raw, "contact_free_expected_rel_dv": expected,
            "contact_free_max_rel_residual": residual, "contact_free_bar": MUJOCO_FREE_RTOL,
            "contact_steps": contact_steps, "contact_pairs_agree_share": share,
            "contact_agreement_bar": MUJOCO_CONTACT_AGREEMENT,
            "contact_step_dv": {"median": float(np.median(dv)), "p95": float(np.percentile(dv, 95)),
                                "max": float(dv.max())},
            "mean_phi0": {"recorded": mean(phi_theirs), "ours": mean(phi_ours)},
            "verdict": "pass" if ok else "FAIL"}


def rollout_statistics(ctx: Context, steps: int, progress=None) -> dict:
    """A MuJoCo recording's free run against ours: distances only (two contact models part ways)."""
    q_imp, v_imp, _ = ctx.backend.rollout(ctx.state(0), steps, ctx.dt, progress)
    err_q = [position_error(ctx.scene.sap_model, a, b) for a, b in zip(q_imp, ctx.q_rows[:steps + 1])]
    err_v = np.abs(v_imp - ctx.v_rows[:steps + 1]).max(axis=1, initial=0.0)
    return {"steps": int(steps), "max_dq": float(max(err_q)), "final_dq": float(err_q[-1]),
            "max_dv": float(err_v.max()), "verdict": "not judged"}


# ----------------------------------------------------------------------------- one recording


def make_context(path, *, backend="ref", device="cpu", preset=None, line_search=None, world: int = 0
                 ) -> tuple[Context, str]:
    """``(Context, solver settings line)`` for validating the recording at ``path`` with ``backend``
    (world ``world`` of a batched trajectory file)."""
    traj = load_trajectory(path)
    scene = load_trajectory_scene(traj)
    kwargs, settings = scene_solver_kwargs(scene, preset, line_search, default_preset="drake")
    reference = RefBackend(scene, kwargs)
    impl = reference if backend == "ref" else make_backend(backend, scene, kwargs, device)
    return _world_context(traj.world(world), scene, impl, reference), settings


def _run_modes(ctx: Context, modes, N: int, every: int, epsilon, strict, max_diagnoses, quiet, label: str) -> dict:
    """The reports of ``modes`` for one world (``one_step``, ``statistics``, ``rollout``, …) and its verdict."""
    out = {}
    for m in modes:
        idx = list(range(0, N, every))
        total = len(idx) if not m.startswith("rollout") else N
        with Progress(total, f"{label} {m} [{ctx.backend.name}]", enabled=not quiet) as bar:
            if m == "one-step":
                out["one_step"] = one_step(ctx, idx, strict=strict, max_diagnoses=max_diagnoses, progress=bar.update)
            elif m == "statistics":
                out["statistics"] = mujoco_statistics(ctx, idx, progress=bar.update)
            elif m == "rollout statistics":
                out["rollout_statistics"] = rollout_statistics(ctx, N, progress=bar.update)
            else:
                out["rollout"] = rollout(ctx, N, epsilon=epsilon, progress=bar.update)
    parts = [out[k]["verdict"] for k in ("one_step", "statistics", "rollout") if k in out]  # judged modes
    out["verdict"] = "pass" if all(p == "pass" for p in parts) else "FAIL"
    return out


def _first_failure(world_report: dict) -> tuple[str, int] | None:
    """``(mode, step)`` of a world's earliest failing step (one-step before rollout at equal steps)."""
    found = [(world_report[k]["first_failing_step"], k.replace("_", "-")) for k in ("one_step", "rollout")
             if k in world_report and world_report[k].get("first_failing_step") is not None]
    if not found:
        return None
    step, mode = min(found)
    return mode, int(step)


def validate(path, *, backend="ref", mode="one-step", device="cpu", preset=None, line_search=None, every=1,
             steps=None, epsilon=ROLLOUT_EPSILON, strict=False, max_diagnoses=MAX_DIAGNOSES, quiet=True) -> dict:
    """Validate one recording with one backend; the report as a dict (``verdict`` "pass" or "FAIL").

    A batched trajectory file (W worlds) is validated world by world with the same solvers: the
    report then holds ``num_worlds``, ``worlds`` (one entry per world: ``world`` and its mode
    reports and verdict), ``failing_worlds`` and ``first_failure`` (the lowest failing world, the
    mode and the step where it first fails), and its verdict passes only if every world passes.
    """
    t0 = time.perf_counter()
    traj = load_trajectory(path)
    scene = load_trajectory_scene(traj)
    kwargs, settings = scene_solver_kwargs(scene, preset, line_search, default_preset="drake")
    reference = RefBackend(scene, kwargs)
    impl = reference if backend == "ref" else make_backend(backend, scene, kwargs, device)
    N = traj.num_steps if steps is None else min(int(steps), traj.num_steps)
    report = {"recording": os.fspath(path), "scene": scene.name, "engine": traj.engine, "convention": traj.convention,
              "backend": impl.name, "device": str(getattr(impl, "device", "cpu")) if backend == "gpu" else "host",
              "solver": settings, "dt": traj.dt, "recorded_steps": traj.num_steps}
    modes = ("one-step", "rollout") if mode == "both" else (mode,)
    if traj.engine == "mujoco":  # MuJoCo's contact model: statistics, and a rollout that is not judged
        modes = ("statistics",) + tuple("rollout statistics" for m in modes if m == "rollout")
    run = lambda ctx, label: _run_modes(ctx, modes, N, every, epsilon, strict, max_diagnoses, quiet, label)  # noqa: E731
    if not traj.batched:
        report.update(run(_world_context(traj, scene, impl, reference), scene.name))
    else:
        worlds = []
        for w in range(traj.num_worlds):
            ctx = _world_context(traj.world(w), scene, impl, reference)
            worlds.append({"world": w, **run(ctx, f"{scene.name} world {w}")})
        failing = [r["world"] for r in worlds if r["verdict"] != "pass"]
        first = next((r for r in worlds if r["verdict"] != "pass"), None)
        where = None if first is None else _first_failure(first)
        report.update(num_worlds=traj.num_worlds, worlds=worlds, failing_worlds=failing,
                      first_failure=None if first is None else {
                          "world": first["world"], "mode": None if where is None else where[0],
                          "step": None if where is None else where[1]},
                      verdict="FAIL" if failing else "pass")
    report["wall_s"] = time.perf_counter() - t0
    return report


# ----------------------------------------------------------------------------- reports


def _text(r: dict) -> str:
    if "worlds" in r:
        return _batched_text(r)
    lines = [f"{r['scene']} ({r['recording']}, {r['engine']}, {r['convention']} convention, {r['recorded_steps']} "
             f"steps of {r['dt']:g} s) with {r['backend']}", f"  {r['solver']}"]
    if "one_step" in r:
        o = r["one_step"]
        ex = o["explained"]
        forced = o.get("mpr_forced_worst_over_bar")
        mpr = "" if forced is None else f" (with the recorded contact geometry ≤ {forced:.2g} of the bar)"
        lines.append(f"  one-step: {o['steps_checked']} steps, max |Δv| {o['max_dv']:.3g}, max |Δq| {o['max_dq']:.3g} "
                     f"(bar {o['bar_rtol']:g}·max(1, |x|), reached up to {o['worst_error_over_bar']:.3g} of it, "
                     f"at step {o['worst_step']}); {o['failing_steps']} over the bar ({ex['tie']} ties, "
                     f"{ex['newton_tolerance']} Newton tolerance, {ex['mpr_contact_point']} FCL-MPR contact point"
                     f"{mpr}, "
                     f"{o['undiagnosed']} undiagnosed) → {o['verdict']}")
        if o["failing"]:
            lines.append("    " + _listed(o["failing"], lambda f: f"{f['step']} ({_CAUSES.get(f['cause'], f['cause'])}"
                                                              f", {f['error_over_bar']:.3g}× the bar)"))
        for key in ("diagnosis", "first_explained"):
            d = o.get(key)
            if d and (key == "diagnosis" or d != o.get("diagnosis")):
                lines.append(f"    {d['message']}")
                for s in d["stages"]:
                    mark = "ok" if s["ok"] else "DIFFERS"
                    lines.append(f"      {s['stage']:<66} {s['max_abs_diff']:11.3e} (allowed {s['tolerance']:9.2e}, "
                                 f"scale {s['scale']:9.2e}) {mark}{' ' + s['note'] if s['note'] else ''}")
    if "statistics" in r:
        s = r["statistics"]
        st, ph = s["contact_step_dv"], s["mean_phi0"]
        phi = lambda x: "none" if x is None else f"{x:.3g} m"  # noqa: E731
        lines.append(f"  statistics (MuJoCo's contact model, {s['integrator']} integrator): {s['contact_free_steps']} "
                     f"contact-free steps, max |Δv|/max(1,|v|) {s['contact_free_max_rel_dv']:.3g}, of which the two "
                     f"schemes' difference (SAP's drives implicit, MuJoCo's actuators not) is "
                     f"{s['contact_free_expected_rel_dv']:.3g}: residual {s['contact_free_max_rel_residual']:.3g} "
                     f"(bar {s['contact_free_bar']:g}); contact pairs agree on "
                     f"{100 * s['contact_pairs_agree_share']:.1f} % of {s['contact_steps']} contact steps (bar "
                     f"{100 * s['contact_agreement_bar']:.0f} %); contact steps |Δv| median {st['median']:.3g}, 95th "
                     f"percentile {st['p95']:.3g}, max {st['max']:.3g} m/s; mean φ₀ recorded {phi(ph['recorded'])}, "
                     f"here {phi(ph['ours'])} → {s['verdict']}")
        if "message" in s:
            lines.append(f"    {s['message']}")
    if "rollout_statistics" in r:
        o = r["rollout_statistics"]
        lines.append(f"  rollout (not judged: two contact models): {o['steps']} steps, max |Δq| {o['max_dq']:.3g}, "
                     f"final |Δq| {o['final_dq']:.3g}, max |Δv| {o['max_dv']:.3g}")
    if "rollout" in r:
        o = r["rollout"]
        lines.append(f"  rollout: {o['steps']} steps, max |Δq| {o['max_dq']:.3g}, max |Δv| {o['max_dv']:.3g}; "
                     f"sensitivity (ε = {o['epsilon']:g} on every velocity) drifts {o['sensitivity_drift_q']:.3g} "
                     f"in q, {o['sensitivity_drift_v']:.3g} in v → {o['verdict']}")
        if "message" in o:
            lines.append(f"    {o['message']}")
        if o["failing"]:
            lines.append("    " + _listed(o["failing"], lambda f: str(f["step"]), "outside the envelope"))
    lines.append(f"  verdict: {r['verdict']}")
    return "\n".join(lines)


def _batched_text(r: dict) -> str:
    """A batched file's report: each world's lines under its number, then the failing worlds."""
    head = {k: v for k, v in r.items() if k not in ("worlds", "failing_worlds", "first_failure", "num_worlds")}
    lines = _text({**head, "verdict": r["verdict"]}).splitlines()[:2]
    lines[0] += f", {r['num_worlds']} worlds"
    for w in r["worlds"]:
        lines.append(f"  world {w['world']}: {w['verdict']}")
        lines += ["  " + ln for ln in _text({**head, **w}).splitlines()[2:-1]]
    f = r["first_failure"]
    if f is not None:
        at = "" if f["step"] is None else f" at step {f['step']} ({f['mode']})"
        lines.append(f"  failing worlds ({len(r['failing_worlds'])} of {r['num_worlds']}): "
                     f"{', '.join(map(str, r['failing_worlds']))}; world {f['world']} fails first{at}")
    lines.append(f"  verdict: {r['verdict']}")
    return "\n".join(lines)


def _listed(failing: list, describe, what: str = "over the bar") -> str:
    """``failing steps (n over the bar): a, b, … and k more (all in --json)``: at most
    :data:`LISTED_STEPS` of them."""
    shown = ", ".join(describe(f) for f in failing[:LISTED_STEPS])
    more = len(failing) - LISTED_STEPS
    return (f"failing steps ({len(failing)} {what}): {shown}"
            + (f" and {more} more (--json lists every one)" if more > 0 else ""))


def junit_xml(reports: list) -> str:
    """A JUnit XML report: one ``testsuite`` per recording, one ``testcase`` per backend and mode."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="sap-validate")
    total = failures = 0
    for r in reports:
        suite = ET.SubElement(root, "testsuite", name=r["recording"])
        head = {k: v for k, v in r.items() if k not in _MODE_KEYS + ("worlds", "failing_worlds", "first_failure")}
        per_world = r["worlds"] if "worlds" in r else [r]
        cases = [(k, w[k], "" if "worlds" not in r else f" world {w['world']}") for w in per_world
                 for k in _MODE_KEYS if k in w]
        for key, res, world in cases:
            case = ET.SubElement(suite, "testcase", classname=f"sap-validate.{r['scene']}",
                                 name=f"{key.replace('_', '-')} [{r['backend']}]{world}",
                                 time=f"{r['wall_s'] / len(cases):.3f}")
            text = _text({**head, key: res})
            if res["verdict"] == "FAIL":
                msg = (res.get("diagnosis") or {}).get("message") or res.get("message") or "over the bar"
                ET.SubElement(case, "failure", message=msg, type="ValidationFailure").text = text
                failures += 1
            ET.SubElement(case, "system-out").text = text
            total += 1
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(res["verdict"] == "FAIL" for _, res, _ in cases)))
    root.set("tests", str(total))
    root.set("failures", str(failures))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def expand(args) -> list[str]:
    """Recording arguments → files: a folder gives its Drake recordings (``*.json`` but
    ``index.json``) and its trajectory files (``*.npz`` that are not a Drake recording's arrays);
    hidden files (a tool's temporary ``.name.partial.npz``) are not recordings."""
    out = []
    for a in args:
        if not os.path.isdir(a):
            out.append(a)
            continue
        names = sorted(n for n in os.listdir(a) if not n.startswith("."))
        jsons = [n for n in names if n.endswith(".json") and n != "index.json"]
        stems = {n[:-5] for n in jsons}
        out += [os.path.join(a, n) for n in jsons]
        out += [os.path.join(a, n) for n in names if n.endswith(".npz") and n[:-4] not in stems]
        if not jsons and not any(n.endswith(".npz") for n in names):
            raise ValueError(f"recordings: the folder {a!r} holds no recording")
    return out


@entry_point("sap-validate")
def main(argv=None) -> int:
    p = parser("sap-validate", __doc__)
    p.add_argument("recordings", nargs="+", help="Drake recordings (tests/data/drake/<scene>.json), trajectory files "
                                                 "(.npz, .json) or folders of them")
    p.add_argument("--backend", default="ref", choices=("ref", "gpu", "both"), help="implementation: sap_ref, sap_gpu "
                   "or both (default ref)")
    p.add_argument("--mode", default="one-step", choices=MODES, help="one-step, rollout or both (default one-step)")
    p.add_argument("--device", default="cpu", help="Warp device of sap_gpu (default cpu)")
    p.add_argument("--preset", default=None, help=f"one of {PRESET_CHOICES} (default: the scene file's, else drake)")
    p.add_argument("--line-search", default=None, help=f"one of {LINE_SEARCH_CHOICES} (default: the scene file's)")
    p.add_argument("--every", type=int, default=None, help="one-step mode: check every N-th step (default 1)")
    p.add_argument("--steps", type=int, default=None, help="validate the first N steps (default: all)")
    p.add_argument("--epsilon", type=float, default=None,
                   help=f"rollout: velocity nudge of the sensitivity run [m/s, rad/s] (default {ROLLOUT_EPSILON:g})")
    p.add_argument("--strict", action="store_true", help="one-step mode: ties and Newton-tolerance differences fail "
                                                         "too")
    p.add_argument("--max-diagnoses", type=int, default=None,
                   help=f"one-step mode: failing steps diagnosed per recording (default {MAX_DIAGNOSES})")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--junit", default=None, metavar="FILE", help="write a JUnit XML report to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--one-batch", action="store_true",
                   help="the recordings are one scene with different per-world parameters (sap-record --set): "
                        "validate them as the worlds of one batched run with one WorldParameters")
    p.add_argument("--ray", nargs="?", const=RAY_LOCAL, default=None, metavar="ADDRESS",
                   help="run each recording × backend as a Ray task: on the cluster at ADDRESS, or (no address) "
                        "the one RAY_ADDRESS names, else a local Ray instance; needs pip install ray "
                        "(docs/scaling.md)")
    args = p.parse_args(argv)
    try:
        check_flags(args.preset, args.line_search)
        _check_mode_flags(args)
        if args.every < 1:
            raise ValueError(f"--every: must be >= 1, got {args.every}")
        if args.steps is not None and args.steps < 1:
            raise ValueError(f"--steps: must be >= 1, got {args.steps}")
        if not (math.isfinite(args.epsilon) and args.epsilon > 0):
            raise ValueError(f"--epsilon: must be a finite number > 0, got {args.epsilon}")
        if args.max_diagnoses < 0:
            raise ValueError(f"--max-diagnoses: must be >= 0, got {args.max_diagnoses}")
        if args.junit:
            check_out("--junit", args.junit)
        device = warp_device(args.device) if args.backend != "ref" else "cpu"
        paths = expand(args.recordings)
        for path in paths:
            load_trajectory(path)  # every file readable before any work
        if args.one_batch:
            given = [f for f, on in (("--junit", args.junit), ("--ray", args.ray is not None),
                                     ("--strict", args.strict),
                                     ("--max-diagnoses", args.max_diagnoses != MAX_DIAGNOSES)) if on]
            if given:
                raise ValueError(f"{given[0]}: not with --one-batch (a step over the bar is reported, and "
                                 "sap-validate <recording> diagnoses it alone)")
            load_batch(paths, preset=args.preset, line_search=args.line_search)  # the same scene, before any step
    except ValueError as e:
        return fail("sap-validate", e)
    if args.one_batch:
        return _one_batch(paths, args, device)
    backends = ("ref", "gpu") if args.backend == "both" else (args.backend,)
    jobs = [(path, b) for path in paths for b in backends]
    options = dict(mode=args.mode, preset=args.preset, line_search=args.line_search, every=args.every,
                   steps=args.steps, epsilon=args.epsilon, strict=args.strict, max_diagnoses=args.max_diagnoses)
    reports = []
    if args.ray is not None:
        try:
            reports = _validate_on_ray(jobs, options, str(device), args.ray)
        except ValueError as e:
            return fail("sap-validate", e)
        for r in reports:
            print(_text(r), flush=True)
    for path, b in ([] if args.ray is not None else jobs):
        try:
            r = validate(path, backend=b, device=device, quiet=args.quiet, **options)
        except ValueError as e:
            return fail("sap-validate", f"{path}: {e}")
        print(_text(r), flush=True)
        reports.append(r)
    ok = all(r["verdict"] == "pass" for r in reports)
    print(f"sap-validate: {sum(r['verdict'] == 'pass' for r in reports)} of {len(reports)} passed → "
          f"{'PASS' if ok else 'FAIL'}")
    if args.junit:
        text = junit_xml(reports)
        with atomic_output(args.junit) as tmp, open(tmp, "w") as f:
            f.write(text)
    if args.json:
        print(json.dumps({"verdict": "pass" if ok else "FAIL", "reports": reports}, default=_json_default))
    return 0 if ok else 1


def _one_batch(paths: list, args, device) -> int:
    """``--one-batch``: one report per backend (:func:`sap_tools.validate.batch.validate_batch`)."""
    reports = []
    for b in (("ref", "gpu") if args.backend == "both" else (args.backend,)):
        try:
            r = validate_batch(paths, backend=b, mode=args.mode, device=device, preset=args.preset,
                               line_search=args.line_search, every=args.every, steps=args.steps, epsilon=args.epsilon,
                               quiet=args.quiet)
        except ValueError as e:
            return fail("sap-validate", e)
        print(batch_text(r), flush=True)
        reports.append(r)
    ok = all(r["verdict"] == "pass" for r in reports)
    print(f"sap-validate: {sum(r['verdict'] == 'pass' for r in reports)} of {len(reports)} batches passed → "
          f"{'PASS' if ok else 'FAIL'}")
    if args.json:
        print(json.dumps({"verdict": "pass" if ok else "FAIL", "reports": reports}, default=_json_default))
    return 0 if ok else 1


def _validate_task(path: str, backend: str, device: str, options: dict) -> dict:
    """One recording × backend, in a Ray worker: the report, or ``{"error": message}``."""
    from sap_tools.cli import quiet_warp

    quiet_warp()
    try:
        return validate(path, backend=backend, device=task_device(device) if backend == "gpu" else "cpu", quiet=True,
                        **options)
    except ValueError as e:
        return {"error": f"{path}: {e}"}


def _validate_on_ray(jobs: list, options: dict, device: str, address: str) -> list:
    """Every (recording, backend) of ``jobs`` as a Ray task; the reports in the order of ``jobs``
    (``ValueError`` with the first task's error, as the local run would stop there)."""
    with ray_session(address) as ray:
        arguments = [(os.path.abspath(path), b, device, options) for path, b in jobs]
        resources = [ray_resources(device if b == "gpu" else "cpu") for _, b in jobs]
        reports = map_tasks(ray, _validate_task, arguments, resources)
    for (path, _), r in zip(jobs, reports):
        if "error" in r:
            raise ValueError(r["error"])
        r["recording"] = os.fspath(path)  # as given on the command line, like the local run's report
    return reports


def _check_mode_flags(args) -> None:
    """``ValueError`` for a flag of the mode not run (it would be ignored), then the defaults of
    the flags left out."""
    one_step_only = [f for f, given in (("--every", args.every is not None), ("--strict", args.strict),
                                        ("--max-diagnoses", args.max_diagnoses is not None)) if given]
    if args.mode == "rollout" and one_step_only:
        raise ValueError(f"{one_step_only[0]}: applies to one-step mode, and --mode rollout runs the rollout only "
                         "(every step; use --mode both for both)")
    if args.mode == "one-step" and args.epsilon is not None:
        raise ValueError("--epsilon: the sensitivity nudge of rollout mode, and --mode one-step runs no rollout "
                         "(use --mode rollout or both)")
    args.every = 1 if args.every is None else args.every
    args.epsilon = ROLLOUT_EPSILON if args.epsilon is None else args.epsilon
    args.max_diagnoses = MAX_DIAGNOSES if args.max_diagnoses is None else args.max_diagnoses


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


if __name__ == "__main__":
    sys.exit(main())
