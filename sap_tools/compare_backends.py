"""``sap-compare-backends``: sap_ref against sap_gpu stage by stage along a rollout, with a verdict.

    sap-compare-backends box_stack --steps 200 --every 20 --preset drake
    sap-compare-backends tests/data/drake/sphere_slide.json --device cuda:0 --json
    sap-compare-backends box_stack --preset approx32 --fused-hessian tiles

The scene is rolled out with sap_ref; every ``--every`` steps both backends take one step from
the same state. Collision runs on each backend's own pipeline; the two contact sets are matched
(same shape pair, nearest witness point) and compared: count, φ₀, witness points, normals. Then
both solvers step with sap_ref's contacts, so the later stages see identical inputs, and their
intermediates are compared: A, v*, contact J, w, R, v̂, the limit and drive rows; γ, ℓ, ∇ℓ and H
at the same v (sap_ref's solution) with sap_ref's objective given sap_gpu's inputs (so each
stage is judged on its own); v₁ by optimality (two solutions of one strongly convex problem are
‖v − v'‖_A ≤ ‖∇ℓ(v)‖_A⁻¹ + ‖∇ℓ(v')‖_A⁻¹ apart, so the Newton tolerance bounds their distance);
q₁ against sap_ref's position update of sap_gpu's v₁.

Each stage has a tolerance (sap_tools/tolerances.py: a named constant with its reason, chosen by the
precision the configuration runs the stage in). The table prints the largest difference seen,
the largest |sap_ref| value (its scale), the share of the tolerance used and pass or FAIL.
Contact sets that differ are a tie when every unmatched contact has |φ₀ − margin| within
round-off of the inclusion threshold (CONTACT_TIE_ULPS): touching faces are decided either way
by the last bit, which is not a bug; any other difference fails. Exit status: 0 when every
stage passes, 1 when one fails, 2 for a usage error.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys

import numpy as np

from sap_common.constants import FUSED_CHOLESKYS, FUSED_HESSIANS, HOLONOMIC_BETA
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.model import JointType
from sap_common.rows import RowKind
from sap_ref.collision import CollisionPipeline
from sap_ref.constraints import friction_cone, hunt_crossley
from sap_ref.contact_solve import evaluate, hessian, hessian_diagonal
from sap_ref.integration import integrate_positions
from sap_ref.solver import SolverSAP
from sap_tools.cli import (
    PRESET_CHOICES,
    check_flags,
    entry_point,
    fail,
    load_rollout,
    rollout_parser,
    scene_solver_kwargs,
    warp_device,
)
from sap_tools.progress import Progress
from sap_tools.tolerances import (
    GEOMETRY_TOL,
    RESIDUAL_GAP_FACTOR,
    TOL,
    fp32_hessian_tol,
    is_contact_tie,
    normal_tol,
)

__all__ = ["STAGES", "COUNT_STAGES", "Check", "stage_differences", "collision_differences", "match_contacts", "verdict",
           "absent_stages", "main"]

# Row order of the report: (key, description).
STAGES = (
    ("contact_count", "contacts: unmatched (count)"),
    ("phi0", "contacts: φ₀ [m]"),
    ("points", "contacts: witness points [m]"),
    ("normal", "contacts: normals"),
    ("A", "A = M + h D + h² K"),
    ("v_star", "v* [m/s, rad/s]"),
    ("J", "contact J"),
    ("w", "contact w"),
    ("R", "contact R"),
    ("v_hat", "contact v̂ [m/s]"),
    ("limit_rows", "limit rows: active set (count differences)"),
    ("limit_J", "limit J"),
    ("limit_R", "limit R"),
    ("limit_v_hat", "limit v̂"),
    ("holonomic_rows", "holonomic constraint rows: taken (count differences)"),
    ("holonomic_g0", "holonomic g₀ [m, rad]"),
    ("holonomic_J", "holonomic J"),
    ("holonomic_R", "holonomic R"),
    ("holonomic_v_hat", "holonomic v̂"),
    ("drive_Kp", "drive Kp"),
    ("drive_Kd", "drive Kd"),
    ("gamma", "γ at v = ref v₁ [N·s]"),
    ("holonomic_gamma", "holonomic γ at v = ref v₁"),
    ("ell", "ℓ at v = ref v₁ [J]"),
    ("grad", "∇ℓ at v = ref v₁"),
    ("H", "H (diag H with PCR) at v = ref v₁"),
    ("v1", "v₁ [m/s, rad/s]"),
    ("q1", "q₁"),
)
# Stages that count differences (unmatched contacts that are not ties, active limit rows): no
# tolerance, any difference fails.
COUNT_STAGES = ("contact_count", "limit_rows", "holonomic_rows")
EPS32 = float(np.finfo(np.float32).eps)


@dataclasses.dataclass(frozen=True)
class Check:
    """One stage compared at one step (or the worst over steps).

    Attributes:
        err: max |ref − gpu| of the stage's entries.
        scale: max |ref|.
        used: the share of the stage's tolerance the difference uses (≤ 1 passes); for the count
            stages (:data:`COUNT_STAGES`) the number of real differences (0 passes).
        ties: unmatched contacts that are ties (``contact_count`` only).
    """

    err: float
    scale: float
    used: float
    ties: int = 0

    def worst(self, other: "Check") -> "Check":
        return Check(max(self.err, other.err), max(self.scale, other.scale), max(self.used, other.used),
                     self.ties + other.ties)


def _arrays(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError(f"shapes differ: {a.shape} vs {b.shape}")
    return a, b


def _close(gpu, ref, rtol, scale=None) -> Check:
    """|gpu − ref| against ``rtol · max(1, scale)`` (scale: max |ref| unless given)."""
    a, b = _arrays(gpu, ref)
    err, big = float(np.abs(a - b).max(initial=0.0)), float(np.abs(b).max(initial=0.0))
    allowed = rtol * max(big if scale is None else scale, 1.0)
    return Check(err, big, err / allowed if allowed > 0 else (0.0 if err == 0 else np.inf))


def _close_rel(gpu, ref, rtol) -> Check:
    """Entrywise |gpu − ref| ≤ rtol·|ref| (w, R: positive, spanning decades)."""
    a, b = _arrays(gpu, ref)
    rel = np.abs(a - b) / np.maximum(np.abs(b), np.finfo(float).tiny)
    return Check(float(np.abs(a - b).max(initial=0.0)), float(np.abs(b).max(initial=0.0)),
                 float(rel.max(initial=0.0)) / rtol)


def _bounded(gpu, ref, allowed) -> Check:
    """Entrywise |gpu − ref| ≤ allowed (an array or a number)."""
    a, b = _arrays(gpu, ref)
    err = np.abs(a - b)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), err.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(allowed > 0, err / allowed, np.where(err == 0, 0.0, np.inf))
    return Check(float(err.max(initial=0.0)), float(np.abs(b).max(initial=0.0)), float(used.max(initial=0.0)))


# ----------------------------------------------------------------------------- collision


def match_contacts(ref_contacts, gpu_contacts, world: int = 0):
    """Pair the two backends' contacts of one world: same shape pair, nearest witness midpoint.

    Returns ``(pairs, ref_only, gpu_only)``: ``pairs`` a list of (ref slot, gpu slot), the others
    the slots found by one backend only.
    """
    def groups(c):
        out = {}
        for k in range(int(c.count[world])):
            out.setdefault((int(c.shape0[world, k]), int(c.shape1[world, k])), []).append(k)
        return out

    gr, gg = groups(ref_contacts), groups(gpu_contacts)
    mid = lambda c, k: 0.5 * (c.x0[world, k] + c.x1[world, k])  # noqa: E731
    pairs, ref_only, gpu_only = [], [], []
    for key in sorted(set(gr) | set(gg)):
        left, right = list(gr.get(key, [])), list(gg.get(key, []))
        while left and right:  # greedy: the closest remaining pair first
            d = np.array([[np.linalg.norm(mid(ref_contacts, i) - mid(gpu_contacts, j)) for j in right] for i in left])
            i, j = np.unravel_index(np.argmin(d), d.shape)
            pairs.append((left.pop(i), right.pop(j)))
        ref_only += left
        gpu_only += right
    return pairs, sorted(ref_only), sorted(gpu_only)


def _is_tie(c, k, world: int = 0) -> bool:
    """Whether contact slot k of ``c`` sits within round-off of the inclusion threshold."""
    scale = max(np.abs(c.x0[world, k]).max(), np.abs(c.x1[world, k]).max())
    return is_contact_tie(c.phi0[world, k], c.margin0[world, k] + c.margin1[world, k], scale)


def collision_differences(ref_contacts, gpu_contacts) -> dict:
    """Matched contacts of one world compared (φ₀, witness points: GEOMETRY_TOL; normals: normal_tol), and the
    unmatched ones counted: ``contact_count`` fails unless every unmatched contact is a tie."""
    pairs, ref_only, gpu_only = match_contacts(ref_contacts, gpu_contacts)
    unmatched = [(ref_contacts, k) for k in ref_only] + [(gpu_contacts, k) for k in gpu_only]
    ties = sum(_is_tie(c, k) for c, k in unmatched)
    real = len(unmatched) - ties
    out = {"contact_count": Check(float(len(unmatched)), float(ref_contacts.count[0]), float(real), ties)}
    i = np.array([p[0] for p in pairs], dtype=int)
    j = np.array([p[1] for p in pairs], dtype=int)
    R, G = ref_contacts, gpu_contacts
    out["phi0"] = _close(G.phi0[0, j], R.phi0[0, i], GEOMETRY_TOL)
    out["points"] = _close(G.x0[0, j], R.x0[0, i], GEOMETRY_TOL).worst(_close(G.x1[0, j], R.x1[0, i], GEOMETRY_TOL))
    out["normal"] = _bounded(G.normal[0, j], R.normal[0, i], normal_tol(R.x0[0, i], R.x1[0, i])[:, None])
    return out


# ----------------------------------------------------------------------------- solver stages


def stage_differences(ref, gpu, state, control, contacts, dt) -> dict:
    """One step of both solvers (one-world model) from the same host inputs; returns
    ``{stage key: Check}`` for the solver stages of :data:`STAGES` (the reasoning per stage is
    that of tests/test_gpu_stages.py, with the same tolerances)."""
    import sap_gpu

    out_gpu = sap_gpu.to_device(state, gpu.device)
    out_gpu.joint_qd_order = "sap"
    gpu.step(sap_gpu.to_device(state, gpu.device), out_gpu, sap_gpu.to_device(control, gpu.device),
             sap_gpu.to_device(contacts, gpu.device), dt)
    out_ref = state.copy()
    out_ref.joint_qd_order = "sap"
    ref.step(state, out_ref, control, contacts, dt)
    r, cfg, model = ref.last_results[0], ref.config, ref.model
    nv = model.joint_dof_count
    q0 = state.joint_q[0]
    v0 = joint_qd_public_to_sap(model, q0, state.joint_qd[0])
    d = {"A": _close(gpu.work.A.numpy()[0, :nv, :nv], r.free_motion.A, TOL["fp64"])}
    # v*: float64, fp32 Cholesky (κ(A)·ε₃₂ relative to Δv), or PCR (its residual over λ_min(A)).
    A = r.free_motion.A
    v_star_gpu, v_star_ref = gpu.work.v_star.numpy()[0], r.free_motion.v_star
    dv_scale = max(1.0, float(np.abs(v_star_ref - v0).max(initial=0.0)))
    if cfg.matrixfree_representation:
        eps = np.finfo(cfg.dtype("free_motion_solve_precision")).eps
        reach = cfg.pcr_rtol + RESIDUAL_GAP_FACTOR * cfg.pcr_max_iterations * eps * np.linalg.cond(A)
        bound = 2 * reach * np.linalg.norm(A @ (v_star_ref - v0)) / np.linalg.eigvalsh(A)[0]
        err = float(np.linalg.norm(v_star_gpu - v_star_ref))
        allowed = bound * (1 + 1e-6) + TOL["fp64"] * dv_scale
        d["v_star"] = Check(float(np.abs(v_star_gpu - v_star_ref).max()), float(np.abs(v_star_ref).max()),
                            err / allowed)
    elif cfg.free_motion_solve_precision == "fp64":
        d["v_star"] = _close(v_star_gpu, v_star_ref, TOL["fp64"])
    else:
        bound = TOL["fp32_solve_factor"] * np.linalg.cond(A) * EPS32
        d["v_star"] = _close(v_star_gpu, v_star_ref, bound * dv_scale, scale=1.0)
    # Contact rows.
    C = int(contacts.count[0])
    jtol = TOL["fp64"] if cfg.use_f64_boundary_pose else TOL["fp32_pose"]
    wtol = TOL["fp64"] if cfg.sap_contact_weight_precision == "fp64" else TOL["fp32_weights"]
    if C:
        d["J"] = _close(gpu.work.contact_J.numpy()[0, :3 * C], r.contacts.J.reshape(3 * C, nv), jtol)
        d["w"] = _close_rel(gpu.work.contact_w.numpy()[0, :C], r.w, wtol)
        d["R"] = _close_rel(gpu.work.contact_R.numpy()[0, :C], r.R, wtol)
        d["v_hat"] = _close(gpu.work.contact_v_hat.numpy()[0, :C], r.v_hat[:, 2], wtol)
    # Limit rows: the same active set, then J, R and v̂.
    L = gpu.work.rows.limit_count  # the limit rows are the first scalar rows
    active = np.zeros(0, dtype=bool)
    if L:
        active = gpu.work.row_active.numpy()[0, :L].astype(bool)
        d["limit_rows"] = Check(float(abs(int(active.sum()) - len(r.limits.R))), float(len(r.limits.R)),
                                float(abs(int(active.sum()) - len(r.limits.R))))
        if active.sum() == len(r.limits.R):
            limit_R = gpu.work.row_R.numpy()[0, :L][active]
            limit_v_hat = gpu.work.row_v_hat.numpy()[0, :L][active]
            d["limit_J"] = _close(gpu.work.row_J.numpy()[0, :L][active], r.limits.J, jtol)
            if cfg.use_f64_boundary_pose:
                d["limit_R"] = _close_rel(limit_R, r.limits.R, TOL["fp64"])
                d["limit_v_hat"] = _close(limit_v_hat, r.limits.v_hat, TOL["fp64"])
            else:  # a distance limit's g₀ comes from float32 poses (see TOL["fp32_pose"])
                first = model.joint_qd_start[r.limits.joint]
                distance = model.joint_type[r.limits.joint] == JointType.DISTANCE
                g0_tol = 2 * EPS32 * max(1.0, float(np.abs(state.body_q[0, :, :3]).max()))
                tau = model.joint_limit_kd[first] / model.joint_limit_ke[first]
                v_scale = max(1.0, float(np.abs(r.limits.v_hat).max(initial=0.0)))
                d["limit_v_hat"] = _bounded(limit_v_hat, r.limits.v_hat,
                                            np.where(distance, g0_tol / (dt + tau), TOL["fp64"] * v_scale))
                d["limit_R"] = _bounded(limit_R, r.limits.R,
                                        np.where(distance, 2 * TOL["fp32_pose"], TOL["fp64"]) * np.abs(r.limits.R))
    else:
        limit_R = limit_v_hat = None
    hol = _holonomic_rows(d, gpu, r, model, state, cfg, jtol, dt) if model.constraint_count else None
    D = gpu.work.rows.drive_count
    if D:
        d["drive_Kp"] = _close_rel(gpu.work.drive_Kp.numpy()[0, :D], r.drives.Kp, TOL["fp64"])
        d["drive_Kd"] = _close_rel(gpu.work.drive_Kd.numpy()[0, :D], r.drives.Kd, TOL["fp64"])
    if r.problem is not None:
        # γ, ℓ, ∇ℓ, H at sap_ref's v₁, with sap_ref's objective given the device's v*, J, R and v̂
        # (under approx32 they differ by float32 ulps; this isolates the Newton stage).
        dofs = r.problem.dofs
        limits = (active, limit_R, limit_v_hat) if L and active.any() and limit_R is not None else None
        p = with_device_setup(r.problem, gpu, C, limits, hol)
        v = r.v1.copy()
        ev_gpu = gpu.evaluate_at(v[None])
        ev_ref = evaluate(p, v[dofs])
        # ∇ℓ = A(v − v*) − Jᵀγ cancels near the solution: judged relative to its two terms.
        terms = max(np.abs(ev_ref.jt_gamma).max(initial=0.0), np.abs(ev_ref.grad + ev_ref.jt_gamma).max(initial=0.0))
        d["grad"] = _close(ev_gpu["grad"][0, dofs], ev_ref.grad, TOL["fp64"], scale=terms)
        # H (or diag H) in float32 is accumulated term by term: A plus one term per row.
        rows = 3 * C + len(p.rows)
        htol = TOL["fp64"] if cfg.contact_linear_solve_precision == "fp64" else fp32_hessian_tol(rows)
        # Plus what the round-off of the device's contact velocities may move G by (a contact at a
        # region boundary of its cone: see _contact_hessian_roundoff).
        moved = _contact_hessian_roundoff(p, ev_ref, float(np.finfo(cfg.dtype("contact_solve_precision")).eps))
        if cfg.contact_linear_solver == "cholesky":
            H_ref = hessian(p, ev_ref)
            d["H"] = _bounded(ev_gpu["H"][0][np.ix_(dofs, dofs)], H_ref,
                              htol * max(float(np.abs(H_ref).max(initial=0.0)), 1.0) + moved)
        else:
            H_ref = hessian_diagonal(p, ev_ref)
            d["H"] = _bounded(ev_gpu["H_diag"][0, dofs], H_ref,
                              htol * max(float(np.abs(H_ref).max(initial=0.0)), 1.0) + np.diagonal(moved))
        ell_err = abs(float(ev_gpu["ell"][0]) - float(ev_ref.ell))
        ell_allowed = max(TOL["fp64"] * abs(float(ev_ref.ell)), TOL["ell_abs"])
        d["ell"] = Check(ell_err, abs(float(ev_ref.ell)), ell_err / ell_allowed)
        if C:
            d["gamma"] = _close(ev_gpu["contact_gamma"][0, :C], ev_ref.contact_gamma, TOL["fp64"])
        if hol is not None:
            hol_gamma = ev_ref.row_gamma[p.rows.rows(RowKind.HOLONOMIC)]
            d["holonomic_gamma"] = _close(ev_gpu["holonomic_gamma"][0], hol_gamma, TOL["fp64"])
        # v₁ by optimality: ‖v − v'‖_A ≤ ‖∇ℓ(v)‖_A⁻¹ + ‖∇ℓ(v')‖_A⁻¹ (ℓ is A-strongly convex).
        v_gpu = out_gpu.joint_qd.numpy()[0]
        ev = evaluate(p, v_gpu[dofs])
        Ap = np.asarray(p.A, np.float64)
        a_inv_norm = lambda g: float(np.sqrt(max(g @ np.linalg.solve(Ap, g), 0.0)))  # noqa: E731
        dv = (v_gpu - v)[dofs]
        bound = a_inv_norm(np.asarray(ev.grad, np.float64)) + a_inv_norm(np.asarray(ev_ref.grad, np.float64))
        v_scale = float(np.sqrt(max(v[dofs] @ Ap @ v[dofs], 0.0)))
        allowed = bound * (1 + 1e-9) + TOL["fp64"] * max(1.0, v_scale)
        rest = np.setdiff1d(np.arange(nv), dofs)  # non-participating DOFs keep v = v*
        off = np.inf if rest.size and np.any(v_gpu[rest] != v_star_gpu[rest]) else 0.0
        d["v1"] = Check(float(np.abs(v_gpu - out_ref.joint_qd[0]).max(initial=0.0)),
                        float(np.abs(out_ref.joint_qd[0]).max(initial=0.0)),
                        max(float(np.sqrt(max(dv @ Ap @ dv, 0.0))) / allowed, off))
    else:  # no constraint: v₁ = v* on both, so v₁ differs exactly as v* does
        v_gpu, v_ref = out_gpu.joint_qd.numpy()[0], out_ref.joint_qd[0]
        same_as_v_star = _close(v_gpu - v_star_gpu, v_ref - v_star_ref, TOL["fp64"])
        d["v1"] = Check(float(np.abs(v_gpu - v_ref).max(initial=0.0)), float(np.abs(v_ref).max(initial=0.0)),
                        max(same_as_v_star.used, d["v_star"].used))
    # q₁: sap_ref's position update applied to sap_gpu's v₁ (float64 arithmetic on both sides).
    q1_expected = integrate_positions(model, q0, v0, out_gpu.joint_qd.numpy()[0], dt, cfg.position_integration)
    d["q1"] = _close(out_gpu.joint_q.numpy()[0], q1_expected, TOL["fp64"])
    return d


def _contact_hessian_roundoff(p, ev, eps: float) -> np.ndarray:
    """The most JᵀGJ may move, entry by entry, when the contact velocities v_c = J v are those of a
    device that rounds differently: each component within γₙ·Σ|J||v| of sap_ref's (γₙ = nε/(1 − nε),
    the bound of an n-term dot product in precision ε), every corner of that box tried per contact,
    and the largest |Jᵀ(G' − G)J| of each contact summed (G of a contact reads its own v_c only).

    Where G is smooth in v_c this is round-off of round-off. At a contact on a boundary of its
    cone's regions (found on an H200: two boxes whose faces touch at rest, φ₀ = −1e-16 m and
    v_c ≈ v̂ ≈ 0), G jumps between regions: two correct evaluations of H may land on either side
    and differ by the whole jump, which the bar must allow. (n, n), zeros without contacts.
    """
    J, vc = np.asarray(p.contact_J, np.float64), np.asarray(ev.contact_vc, np.float64)
    n = J.shape[-1]
    out = np.zeros((n, n))
    if not len(vc):
        return out
    gamma_n = n * eps / (1.0 - n * eps)
    box = gamma_n * np.einsum("cin,n->ci", np.abs(J), np.abs(np.asarray(ev.v, np.float64)))
    G = np.asarray(ev.contact_G, np.float64)
    worst = np.zeros((len(vc), n, n))
    for signs in itertools.product((-1.0, 1.0), repeat=3):
        moved = (vc + np.asarray(signs) * box).astype(p.dtype)
        if p.contact_hc is None:
            G2 = friction_cone(moved, p.contact_R, p.contact_v_hat, p.contact_mu)[1]
        else:
            G2 = hunt_crossley(moved, p.contact_mu, p.contact_hc)[1]
        dG = np.asarray(G2, np.float64) - G
        worst = np.maximum(worst, np.abs(np.einsum("cim,cij,cjn->cmn", J, dG, J)))
    return worst.sum(axis=0)


def with_device_setup(p, gpu, C: int, limits=None, holonomic=None):
    """sap_ref's problem ``p`` of world 0 with the device's stage-1–2 results in place of its own,
    so that stage 3 compares alone (under approx32 they differ by float32 ulps): v*, the ``C``
    contacts' J, R, v̂ and Hunt–Crossley data, and where given the limit rows (``limits``: the
    device's in-use flags of its limit rows, and R, v̂ of those in use) and the holonomic rows
    (``holonomic``: J (E, nv), R, v̂). Used by this tool and by tests/test_gpu_stages.py."""
    dofs, work = p.dofs, gpu.work
    p = dataclasses.replace(p, v_star=work.v_star.numpy()[0, dofs].astype(p.dtype))
    if C:
        v_hat = p.contact_v_hat.copy()
        v_hat[:, 2] = work.contact_v_hat.numpy()[0, :C]
        if gpu.m.has_kinematic:  # the device adds J_kin v₀ to vc, sap_ref takes it off v̂ (the same cost)
            b = work.contact_vc_kin.numpy()[0, :C]
            v_hat = np.stack([-b[:, 0], -b[:, 1], v_hat[:, 2] - b[:, 2]], axis=-1).astype(p.dtype)
        J = work.contact_J.numpy()[0, :3 * C][:, dofs].reshape(C, 3, len(dofs))
        p = dataclasses.replace(p, contact_J=J.astype(p.dtype), contact_R=work.contact_R.numpy()[0, :C].astype(p.dtype),
                                contact_v_hat=v_hat)
        if p.contact_hc is not None:  # the device's Hunt–Crossley data
            data = work.contact_hc.numpy()[0, :C].astype(p.dtype)
            p = dataclasses.replace(p, contact_hc=dataclasses.replace(p.contact_hc, k=data[:, 0], d=data[:, 1],
                                                                      fe0=data[:, 2], n0=data[:, 3], eps=data[:, 4]))
    if limits is not None:
        active, R, v_hat = limits
        J = work.row_J.numpy()[0, :len(active)][active][:, dofs]
        p = dataclasses.replace(p, rows=p.rows.with_rows(RowKind.LIMIT, J=J.astype(p.dtype), R=R.astype(p.dtype),
                                                         v_hat=v_hat.astype(p.dtype)))
    if holonomic is not None:
        J, R, v_hat = holonomic
        p = dataclasses.replace(p, rows=p.rows.with_rows(RowKind.HOLONOMIC, J=J[:, dofs].astype(p.dtype),
                                                         R=R.astype(p.dtype), v_hat=v_hat.astype(p.dtype)))
    return p


def _holonomic_rows(d: dict, gpu, r, model, state, cfg, jtol, dt: float):
    """The holonomic constraint rows (the device's scalar rows of that kind) against sap_ref's, into
    ``d``; returns the device's (J, R, v̂) of every row (a row left out: J = 0, R = 1, v̂ = 0, as
    sap_ref's stand-in), or None when the rows taken differ."""
    L, E, h = gpu.work.rows.holonomic_row0, gpu.work.holonomic.rows, r.holonomic
    active = gpu.work.row_active.numpy()[0, L:L + E].astype(bool)
    differ = float(np.sum(active != h.active))
    d["holonomic_rows"] = Check(differ, float(E), differ)
    if differ:
        return None
    J, R = gpu.work.row_J.numpy()[0, L:L + E], gpu.work.row_R.numpy()[0, L:L + E]
    v_hat, g0 = gpu.work.row_v_hat.numpy()[0, L:L + E], gpu.work.holonomic_g0.numpy()[0, :E]
    d["holonomic_J"] = _close(J[active], h.J[active], jtol)
    if cfg.use_f64_boundary_pose:
        d["holonomic_g0"] = _close(g0, h.g0, TOL["fp64"])
        d["holonomic_R"] = _close_rel(R[active], h.R[active], TOL["fp64"])
        d["holonomic_v_hat"] = _close(v_hat[active], h.v_hat[active], TOL["fp64"])
    else:
        # g₀ from float32 poses (a float32 ulp per coordinate, TOL["fp32_pose"]): |Δg₀| ≤
        # 2ε₃₂·max(1, |position|), |Δv̂| ≤ |Δg₀|/h (τ ≥ 0); R = max(R_c, β²/(4π²)·w) with
        # w = ‖J diag(A)⁻¹Jᵀ‖_F/n moves with J's entries (δ each) by ≤ ‖δ(|J|a1ᵀ + 1aᵀ|J|ᵀ)‖_F/n.
        g0_tol = 2 * EPS32 * max(1.0, float(np.abs(state.body_q[0, :, :3]).max(initial=0.0)))
        d["holonomic_g0"] = _bounded(g0, h.g0, np.full(E, g0_tol))
        d["holonomic_v_hat"] = _bounded(v_hat[active], h.v_hat[active], np.full(int(active.sum()), g0_tol / dt))
        a = 1.0 / np.diag(r.free_motion.A)
        bound = np.zeros(E)
        for k in range(model.constraint_count):
            r0, r1 = model.constraint_row_start[k], model.constraint_row_start[k + 1]
            Jk = np.abs(h.J[r0:r1])
            delta = jtol * max(1.0, Jk.max(initial=0.0))
            dW = delta * ((Jk @ a)[:, None] + (Jk @ a)[None, :])
            bound[r0:r1] = HOLONOMIC_BETA**2 / (4 * np.pi**2) * np.linalg.norm(dW) / (r1 - r0)
        d["holonomic_R"] = _bounded(R[active], h.R[active], (bound + TOL["fp64"] * h.R)[active])
    return (np.where(active[:, None], J, 0.0), np.where(active, R, 1.0), np.where(active, v_hat, 0.0))


# Stages that exist only where a contact, a limit row or any constraint is active at a compared step.
CONTACT_ROW_STAGES = ("J", "w", "R", "v_hat", "gamma")
LIMIT_ROW_STAGES = ("limit_J", "limit_R", "limit_v_hat")
HOLONOMIC_ROW_STAGES = ("holonomic_g0", "holonomic_J", "holonomic_R", "holonomic_v_hat", "holonomic_gamma")
CONSTRAINT_STAGES = ("ell", "grad", "H")


def absent_stages(worst: dict, model, compared_contacts: int, first_contact, steps: int, every: int) -> dict:
    """``{reason: [stage keys]}`` for the stages of :data:`STAGES` that were not compared: those the
    scene cannot have (no contact pairs, no limits, no drives) and those it has but that nothing
    exercised at the compared steps (no contact, no active limit, no active constraint there)."""
    out: dict = {}
    absent = [k for k, _ in STAGES if k not in worst]
    can_touch = len(model.shape_pair) > 0
    for k in absent:
        if k in CONTACT_ROW_STAGES and can_touch and compared_contacts == 0:
            if first_contact is None:
                why = (f"no contact at the compared steps; none in the whole rollout of {steps} steps "
                       "(compare more steps: --steps)")
            else:
                why = (f"no contact at the compared steps; the rollout's first contact is at step {first_contact}, "
                       f"not a compared one (every {every}th step from 0: choose --every or --steps to include it)")
        elif k in LIMIT_ROW_STAGES and "limit_rows" in worst:
            why = "no limit row active at the compared steps"
        elif k in HOLONOMIC_ROW_STAGES and "holonomic_rows" in worst:
            why = "the backends took different holonomic rows (see holonomic_rows)"
        elif k in CONSTRAINT_STAGES:
            why = "no constraint (contact, limit or drive) active at the compared steps"
        else:
            why = "not present in this scene"
        out.setdefault(why, []).append(k)
    return out


def _merge(acc: dict, new: dict) -> None:
    for k, c in new.items():
        acc[k] = acc[k].worst(c) if k in acc else c


def verdict(worst: dict) -> dict:
    """``{stage: "pass" | "tie" | "FAIL"}``: a stage passes when its difference stays within its
    tolerance; ``contact_count`` is a tie when every unmatched contact was a tie."""
    out = {}
    for key, c in worst.items():
        ok = c.used == 0 if key in COUNT_STAGES else c.used <= 1.0
        out[key] = ("tie" if key == "contact_count" and c.ties and ok else "pass") if ok else "FAIL"
    return out


@entry_point("sap-compare-backends")
def main(argv=None) -> int:
    parser = rollout_parser("sap-compare-backends", __doc__, "line_search_variant of both backends")
    parser.add_argument("--preset", default=None,
                        help=f"contact_preset_variant of both backends: one of {PRESET_CHOICES} (default: the scene "
                             "file's, else drake)")
    parser.add_argument("--device", default="cpu", help="Warp device of sap_gpu (default cpu)")
    parser.add_argument("--fused-hessian", default=None, choices=FUSED_HESSIANS,
                        help="SapConfig.fused_hessian of sap_gpu's fused Newton kernel, how it forms H: rows (the "
                             "default) or tiles (tile products in shared memory, nv ≤ 32)")
    parser.add_argument("--fused-cholesky", default=None, choices=FUSED_CHOLESKYS,
                        help="SapConfig.fused_cholesky of sap_gpu's fused Newton kernel, how it factors H: auto (the "
                             "default: lanes on a GPU, tile on the CPU device), lanes (H's rows in the lanes' "
                             "registers, nv ≤ 32) or tile (Warp's tile Cholesky)")
    args = parser.parse_args(argv)
    try:
        import sap_gpu

        check_flags(args.preset, args.line_search)
        device = warp_device(args.device)
        scene, _ = load_rollout(args)
        kwargs, settings = scene_solver_kwargs(scene, args.preset, args.line_search, default_preset="drake")
        kw = dict(max_rigid_contact=scene.max_rigid_contact, **kwargs)
        ref = SolverSAP(scene.sap_model, **kw)
        if args.fused_hessian is not None:  # sap_gpu's only (the reference has no fused kernel)
            settings += f"; sap_gpu fused_hessian {args.fused_hessian} (--fused-hessian)"
            kw["fused_hessian"] = args.fused_hessian
        if args.fused_cholesky is not None:
            settings += f"; sap_gpu fused_cholesky {args.fused_cholesky} (--fused-cholesky)"
            kw["fused_cholesky"] = args.fused_cholesky
        gpu = sap_gpu.SolverSAP(scene.sap_model, device=device, **kw)
        rollout = SolverSAP(scene.sap_model, **kw)
    except ValueError as e:
        return fail("sap-compare-backends", e)
    steps = args.steps or scene.num_steps
    preset = ref.config.contact_preset_variant
    ref_pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config)
    gpu_pipe = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config, device=device)
    contacts, gpu_contacts = ref_pipe.contacts(), gpu_pipe.contacts()
    state = scene.state.copy()
    worst: dict = {}
    compared, compared_contacts, first_contact = 0, 0, None
    print(settings)
    with Progress(steps, f"{scene.name} ({preset}, {device})", enabled=not args.quiet) as bar:
        for n in range(steps):
            ref_pipe.collide(state, contacts)
            if first_contact is None and int(contacts.count[0]) > 0:
                first_contact = n
            if n % args.every == 0:
                gpu_pipe.collide(sap_gpu.to_device(state, device), gpu_contacts)
                _merge(worst, collision_differences(contacts, sap_gpu.to_host(gpu_contacts)))
                _merge(worst, stage_differences(ref, gpu, state, scene.control, contacts, scene.dt))
                compared += 1
                compared_contacts += int(contacts.count[0])
            rollout.step(state, state, scene.control, contacts, scene.dt)
            bar.update(n + 1, f"contacts {int(contacts.count[0])}")
    verdicts = verdict(worst)
    print(f"{scene.name}: {compared} steps compared, preset {preset}, sap_gpu on {device}")
    print(f"{'stage':<44} {'max |ref − gpu|':>16} {'max |ref|':>12} {'tol. used':>10}  verdict")
    for key, label in STAGES:
        if key in worst:
            c = worst[key]
            used = "-" if key in COUNT_STAGES else f"{100 * c.used:9.1f}%"
            note = f" ({c.ties} tie{'s' if c.ties != 1 else ''}: |φ₀| at round-off of the threshold)" if c.ties else ""
            print(f"{label:<44} {c.err:16.3e} {c.scale:12.3e} {used:>10}  {verdicts[key]}{note}")
    not_compared = absent_stages(worst, scene.sap_model, compared_contacts, first_contact, steps, args.every)
    for reason, keys in not_compared.items():
        labels = ", ".join(dict(STAGES)[k].split(" [")[0] for k in keys)
        print(f"not compared: {labels}: {reason}")
    failed = [k for k, v in verdicts.items() if v == "FAIL"]
    no_contact = any(r.startswith("no contact") for r in not_compared)
    print(f"verdict: {'FAIL (' + ', '.join(failed) + ')' if failed else 'pass'}"
          + (" (the contact stages were not compared: no contact at the compared steps)" if no_contact else ""))
    if args.json:
        print(json.dumps(dict(scene=scene.name, preset=preset, device=str(device), steps=steps, compared=compared,
                              compared_contacts=compared_contacts, first_contact_step=first_contact,
                              passed=not failed, stages={k: dict(max_abs_diff=c.err, ref_scale=c.scale,
                                                                tolerance_used=c.used, ties=c.ties,
                                                                verdict=verdicts[k]) for k, c in worst.items()},
                              not_compared={k: reason for reason, keys in not_compared.items() for k in keys})))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
