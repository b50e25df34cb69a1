"""One world's time step, captured with every intermediate, and what happened in it in words.

    capture = capture_step(model, state, control, contacts, dt, world=0, contact_preset_variant="drake")
    print(summary(capture))

:func:`capture_step` runs :class:`sap_ref.solver.SolverSAP` on a one-world copy of world ``world``
and keeps its :class:`~sap_ref.solver.WorldResult` (A, v*, J, R, v̂, each Newton iterate, each
line-search probe), plus what the result does not store: ℓ, ∇ℓ, γ and each contact's
friction-cone regime at every Newton iterate, and H with its condition number. The inspector's
report (``sap-inspect``) and the viewer's on-demand figures (``sap-view``) are drawn from it.
:func:`rollout` and :func:`gpu_step` bring a scene to the step to inspect, with ``sap_ref`` or
with ``sap_gpu``; :func:`compare_backends` says how far a ``sap_gpu`` world's solve is from
``sap_ref``'s solve of the same inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from sap_common.config import SapConfig
from sap_common.model import ConstraintType, JointType, SapModel
from sap_common.rows import RowKind
from sap_common.state import SapContacts, SapControl, SapState, StepStatus
from sap_ref.collision import CollisionPipeline
from sap_ref.constraints import NO_CONTACT, SLIDING, STICTION
from sap_ref.contact_solve import evaluate, hessian, stopping_criterion
from sap_ref.solver import SolverSAP, WorldResult

__all__ = ["REGIME_NAMES", "StepCapture", "BackendComparison", "world_slice", "dof_labels", "rollout",
           "capture_step", "gpu_step", "compare_backends", "regime_switches", "summary", "status_text",
           "hunt_crossley_rows", "holonomic_rows"]

# Friction-cone regions of sap_ref.constraints.friction_cone, as the report names them.
REGIME_NAMES = {STICTION: "sticking", SLIDING: "sliding", NO_CONTACT: "separated"}


def world_slice(obj, w: int):
    """A one-world copy of a ``SapState``/``SapControl``/``SapContacts``: every array's row ``w``."""
    return dataclasses.replace(obj, **{f.name: np.array(getattr(obj, f.name)[w:w + 1])
                                       for f in dataclasses.fields(obj)
                                       if isinstance(getattr(obj, f.name), np.ndarray)})


def dof_labels(model: SapModel) -> list[str]:
    """A name per DOF in SAP order: ``joint[k]``, or ``joint.ωx … joint.vz`` for free/distance joints."""
    labels = []
    for j in range(model.joint_count):
        n = int(model.joint_qd_start[j + 1] - model.joint_qd_start[j])
        if JointType(int(model.joint_type[j])) in (JointType.FREE, JointType.DISTANCE):
            labels += [f"{model.joint_name[j]}.{c}" for c in ("ωx", "ωy", "ωz", "vx", "vy", "vz")]
        elif n == 1:
            labels.append(model.joint_name[j])
        else:
            labels += [f"{model.joint_name[j]}[{k}]" for k in range(n)]
    return labels


@dataclass
class StepCapture:
    """One world's step from ``sap_ref`` with every intermediate, for the report and the viewer.

    Attributes:
        scene: scene name.  step: steps taken before this one (the step goes from t = step·dt).
        world: world index in the scene's batch.  dt: time step [s].
        model: the one-world model that was stepped.  config: the solver configuration.
        state: the one-world state before the step (public order).  contacts: its contacts.
        result: sap_ref's :class:`WorldResult` (A, v*, J, R, v̂, Newton history, γ, v₁, q₁).
        evaluations: ℓ, ∇ℓ, γ and regimes at each Newton iterate v₀ … v_K (K = Newton iterations).
        residuals / tolerances: ‖D̃∇ℓ‖ and the optimality threshold ε_a + ε_r·s at each iterate, (K+1,).
        hessians: H at each iterate (participating DOFs), (K+1) × (n, n).
        conditions: 2-norm condition number of each H, (K+1,).
        contact_names: "shape0 ↔ shape1" per contact.  dof_names: one label per DOF (SAP order).
        backends: the sap_gpu comparison, when the step came from sap_gpu.
    """

    scene: str
    step: int
    world: int
    dt: float
    model: SapModel
    config: SapConfig
    state: SapState
    contacts: SapContacts
    result: WorldResult
    evaluations: list = field(default_factory=list)
    residuals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tolerances: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hessians: list = field(default_factory=list)
    conditions: np.ndarray = field(default_factory=lambda: np.zeros(0))
    contact_names: list = field(default_factory=list)
    dof_names: list = field(default_factory=list)
    backends: "BackendComparison | None" = None

    @property
    def t(self) -> float:
        """Time at the start of the step [s]."""
        return self.step * self.dt

    @property
    def contact_count(self) -> int:
        return int(self.contacts.count[0])

    @property
    def modes(self) -> np.ndarray:
        """Friction-cone regime of each contact at each iterate, (K+1, C) (``REGIME_NAMES`` keys)."""
        C = self.contact_count
        return np.array([ev.contact_mode for ev in self.evaluations], dtype=np.int32).reshape(-1, C)

    @property
    def newton_iterations(self) -> int:
        return 0 if self.result.solve is None else self.result.solve.iterations


def rollout(scene, steps: int, progress=None, **solver_kwargs) -> tuple[SapState, SapContacts]:
    """Step every world of ``scene`` ``steps`` times with sap_ref; ``(state, contacts)`` before step ``steps``
    (contacts collided at that state). ``progress(n)`` is called after each step, if given."""
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **solver_kwargs)
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts, state = pipeline.contacts(), scene.state.copy()
    for n in range(steps):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        if progress is not None:
            progress(n + 1)
    pipeline.collide(state, contacts)
    return state, contacts


def capture_step(model: SapModel, state: SapState, control: SapControl, contacts: SapContacts, dt: float,
                 world: int = 0, *, scene: str = "", step: int = 0, **solver_kwargs) -> StepCapture:
    """Step world ``world`` of ``(state, control, contacts)`` once with sap_ref and keep everything.

    ``solver_kwargs`` go to :class:`SolverSAP` (``contact_preset_variant``, ``line_search_variant``,
    …; ``max_rigid_contact`` defaults to the contacts' capacity). ``state`` is not changed.
    """
    if not 0 <= world < model.num_worlds:
        raise ValueError(f"world: must lie in [0, {model.num_worlds}), got {world}")
    one = model.replicate(1)
    state1, control1, contacts1 = world_slice(state, world), world_slice(control, world), world_slice(contacts, world)
    solver_kwargs.setdefault("max_rigid_contact", contacts.capacity)
    solver = SolverSAP(one, **solver_kwargs)
    out = state1.copy()
    solver.step(state1, out, control1, contacts1, dt)
    r = solver.last_results[0]
    cap = StepCapture(scene=scene, step=step, world=world, dt=dt, model=one, config=solver.config, state=state1,
                      contacts=contacts1, result=r, dof_names=dof_labels(one))
    C = int(contacts1.count[0])
    cap.contact_names = [f"{one.shape_name[contacts1.shape0[0, c]]} ↔ {one.shape_name[contacts1.shape1[0, c]]}"
                         for c in range(C)]
    if r.problem is None or r.solve is None:
        return cap
    iterates = [it.v for it in r.solve.history] + [r.solve.v]
    cap.evaluations = [evaluate(r.problem, v) for v in iterates]
    crit = [stopping_criterion(r.problem, ev, solver.config) for ev in cap.evaluations]
    cap.residuals = np.array([c[1] for c in crit])
    cap.tolerances = np.array([solver.config.optimality_abs_tol + solver.config.optimality_rel_tol * c[2]
                               for c in crit])
    cap.hessians = [hessian(r.problem, ev).astype(np.float64) for ev in cap.evaluations]
    cap.conditions = np.array([np.linalg.cond(H) if H.size else 1.0 for H in cap.hessians])
    return cap


# ---------------------------------------------------------------------------------------------
# sap_gpu worlds


@dataclass
class BackendComparison:
    """sap_gpu's solve of one world against sap_ref's solve of the same inputs (state, contacts).

    Attributes:
        device: the Warp device sap_gpu ran on.  num_worlds: the batch it ran in.
        rows: ``(quantity, max |gpu − ref|, max |ref|)`` per compared quantity.
        gpu_newton / ref_newton: Newton iterations.  gpu_status / ref_status: :class:`StepStatus` bits.
        distance_A: ‖v₁(gpu) − v₁(ref)‖_A on the participating DOFs [√J].
        bound_A: ‖∇ℓ(v₁(gpu))‖_A⁻¹ + ‖∇ℓ(v₁(ref))‖_A⁻¹, sap_ref's fp64 gradient at both solutions:
            ℓ is 1-strongly convex in the A-norm, so each solution lies within ‖∇ℓ‖_A⁻¹ of the
            exact minimizer and the two within the sum of both.
    """

    device: str
    num_worlds: int
    rows: list
    gpu_newton: int
    ref_newton: int
    gpu_status: int
    ref_status: int
    distance_A: float
    bound_A: float

    @property
    def within_bound(self) -> bool:
        return self.distance_A <= self.bound_A


def gpu_step(scene, steps: int, world: int, device="cpu", progress=None, **solver_kwargs):
    """Roll ``scene`` (all its worlds) out ``steps`` steps with sap_gpu, then take step ``steps``.

    Returns ``(state, contacts, out)``: the host state and the sap_gpu contacts before the last
    step (every world), and world ``world``'s results of it: ``v1`` (SAP order), ``q1``, ``gamma``
    (C, 3) at the returned velocities, ``newton``, ``status``.
    """
    import sap_gpu

    if not 0 <= world < scene.sap_model.num_worlds:
        raise ValueError(f"--world: must lie in [0, {scene.sap_model.num_worlds}), got {world}")
    kw = dict(max_rigid_contact=scene.max_rigid_contact, **solver_kwargs)
    gpu = sap_gpu.SolverSAP(scene.sap_model, device=device, **kw)
    pipe = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, gpu.config, device=device)
    state, contacts = sap_gpu.to_device(scene.state, device), pipe.contacts()
    control = sap_gpu.to_device(scene.control, device)
    for n in range(steps):
        pipe.collide(state, contacts)
        gpu.step(state, state, control, contacts, scene.dt)
        if progress is not None:
            progress(n + 1)
    pipe.collide(state, contacts)
    host_state, host_contacts = sap_gpu.to_host(state), sap_gpu.to_host(contacts)
    out_state = sap_gpu.to_device(host_state, device)
    out_state.joint_qd_order = "sap"
    gpu.step(state, out_state, control, contacts, scene.dt)
    C = int(host_contacts.count[world])
    d = gpu.diagnostics()
    out = dict(v1=out_state.joint_qd.numpy()[world].astype(np.float64),
               q1=out_state.joint_q.numpy()[world].astype(np.float64),
               gamma=gpu.work.P.gamma.numpy()[world, :3 * C].astype(np.float64).reshape(C, 3),
               newton=int(d["newton_iterations"][world]), status=int(d["status"][world]), device=str(gpu.device))
    return host_state, host_contacts, out


def _row(name, gpu, ref):
    gpu, ref = np.asarray(gpu, float), np.asarray(ref, float)
    return (name, float(np.abs(gpu - ref).max(initial=0.0)), float(np.abs(ref).max(initial=0.0)))


def compare_backends(cap: StepCapture, gpu_out: dict, num_worlds: int) -> BackendComparison:
    """Set ``cap.backends``: sap_gpu's results of the step against ``cap`` (sap_ref, same inputs)."""
    r = cap.result
    rows = [_row("v₁ [m/s, rad/s]", gpu_out["v1"], r.v1), _row("q₁", gpu_out["q1"], r.q1)]
    distance = bound = 0.0
    if r.problem is not None and r.solve is not None:
        p = r.problem
        if cap.contact_count:
            rows.append(_row("γ at each backend's v₁ [N·s]", gpu_out["gamma"], r.contact_impulses))
        ev_gpu = evaluate(p, gpu_out["v1"][p.dofs])
        rows.append(_row("ℓ at each backend's v₁ (sap_ref's fp64 ℓ) [J]", ev_gpu.ell, r.solve.evaluation.ell))
        A = np.asarray(p.A, float)
        dv = gpu_out["v1"][p.dofs] - r.v1[p.dofs]
        distance = float(np.sqrt(max(dv @ A @ dv, 0.0)))
        a_inv = lambda g: float(np.sqrt(max(g @ np.linalg.solve(A, g), 0.0))) if len(g) else 0.0  # noqa: E731
        bound = a_inv(np.asarray(ev_gpu.grad, float)) + a_inv(np.asarray(r.solve.evaluation.grad, float))
    cap.backends = BackendComparison(device=gpu_out["device"], num_worlds=num_worlds, rows=rows,
                                     gpu_newton=gpu_out["newton"], ref_newton=cap.newton_iterations,
                                     gpu_status=gpu_out["status"], ref_status=int(r.status),
                                     distance_A=distance, bound_A=bound)
    return cap.backends


# ---------------------------------------------------------------------------------------------
# Words


def status_text(bits: int) -> str:
    """``"CONVERGED"``, ``"LINE_SEARCH_FAILURE | MAX_ITERATIONS"``, … (``"none"`` for 0)."""
    names = [s.name for s in StepStatus if int(bits) & int(s)]
    return " | ".join(names) if names else "none"


def regime_switches(cap: StepCapture) -> list[tuple[int, int, int, int]]:
    """``(contact, iteration k, regime before, regime at k)`` each time a contact changes region
    between iterate k−1 and iterate k."""
    modes = cap.modes
    out = []
    for k in range(1, len(modes)):
        for c in np.flatnonzero(modes[k] != modes[k - 1]):
            out.append((int(c), k, int(modes[k - 1, c]), int(modes[k, c])))
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def hunt_crossley_rows(cap: StepCapture) -> list[dict]:
    """Each contact's Hunt–Crossley quantities at the solution (``lagged`` / ``similar``; [] under ``sap``).

    The quantities: k, d, fₑ₀, vₙ₀, n₀, ε_s (fixed for the step), v̂ = min(fₑ₀/(hk), 1/d) (where n
    vanishes), vₙ and z at v₁ (z = vₙ − μ‖v_t‖_s under similar), n(z) = γₙ, the friction bound
    μ·n_f (n_f = n₀ lagged, n(z) similar), the normal regime — ``compressing`` (both factors of
    n > 0), ``elastic force spent`` (fₑ₀ − hkz ≤ 0) or ``dissipation spent`` (1 − dz ≤ 0) — and the
    friction regime (``stiction`` while ‖v_t‖ ≤ ε_s, ``sliding``); see
    docs/formulation.md § Hunt–Crossley contact
    """
    r = cap.result
    hc = r.hunt_crossley
    if hc is None or r.solve is None or not cap.contact_count:
        return []
    ev = r.solve.evaluation
    vc = ev.contact_vc.astype(np.float64)
    mu = r.contacts.mu
    rows = []
    for c in range(cap.contact_count):
        k, d, fe0, eps = (float(x[c]) for x in (hc.k, hc.d, hc.fe0, hc.eps))
        vt = float(np.hypot(vc[c, 0], vc[c, 1]))
        soft = float(np.sqrt(vt * vt + eps * eps) - eps)
        z = vc[c, 2] - mu[c] * soft if hc.similar else vc[c, 2]
        elastic, damping = fe0 - hc.h * k * z, 1.0 - d * z
        regime = ("compressing" if elastic > 0 and damping > 0 else
                  "elastic force spent" if elastic <= 0 else "dissipation spent")
        v_x = fe0 / (hc.h * k) if k > 0 else np.inf
        v_d = 1.0 / d if d > 0 else np.inf
        n_friction = float(ev.contact_gamma[c, 2]) if hc.similar else float(hc.n0[c])
        rows.append(dict(contact=c, shapes=cap.contact_names[c], k=k, d=d, fe0=fe0, vn0=float(hc.vn0[c]),
                         n0=float(hc.n0[c]), eps_s=eps, v_hat=float(min(v_x, v_d)), vn=float(vc[c, 2]), z=float(z),
                         n=float(ev.contact_gamma[c, 2]), friction_bound=float(mu[c] * n_friction),
                         normal_regime=regime, friction_regime="stiction" if vt <= eps else "sliding"))
    return rows


def summary(cap: StepCapture) -> list[str]:
    """What happened in the step, one sentence per line."""
    r, cfg = cap.result, cap.config
    approx = cfg.discrete_contact_approximation
    lines = [f"Step {cap.step} of {cap.scene or 'the scene'} (t = {cap.t:.6g} s → {cap.t + cap.dt:.6g} s, "
             f"h = {cap.dt:g} s), world {cap.world}: preset {cfg.contact_preset_variant}, "
             f"{cfg.line_search_variant} line search, {cfg.contact_linear_solver} linear solver, "
             + ("friction-cone (sap) contact." if approx == "sap" else f"Hunt–Crossley ({approx}) contact.")]
    if r.problem is None or r.solve is None:
        lines.append(f"The world's inputs were not finite: nothing was solved (status {status_text(int(r.status))}).")
        return lines
    C, p, sol = cap.contact_count, r.problem, r.solve
    L, E, D = (p.rows.count(k) for k in (RowKind.LIMIT, RowKind.HOLONOMIC, RowKind.DRIVE))
    rows = [_plural(C, "contact")] + ([_plural(L, "joint-limit row")] if L else []) + (
        [_plural(E, "holonomic constraint row")] if E else []) + ([_plural(D, "drive row")] if D else [])
    if p.constraint_count == 0:
        lines.append("No contact, limit, holonomic constraint or drive row: v₁ = v* (the free motion), no Newton "
                     "iteration.")
        return lines
    lines.append(f"{', '.join(rows)} on {_plural(len(p.dofs), 'participating DOF')} of {cap.model.joint_dof_count}.")
    ls_evals = sum(it.line_search.iterations for it in sol.history)
    alphas = ", ".join(f"{it.alpha:.3g}" for it in sol.history)
    lines.append(f"{_plural(sol.iterations, 'Newton iteration')}, {cfg.line_search_variant} line search "
                 f"({_plural(ls_evals, 'cost evaluation')}{'; α = ' + alphas if alphas else ''}); "
                 f"status {status_text(int(r.status))}.")
    tol = cap.tolerances[-1]
    met = "met" if cap.residuals[-1] <= tol else "not met"
    lines.append(f"Optimality ‖D̃∇ℓ‖ went from {cap.residuals[0]:.3e} to {cap.residuals[-1]:.3e} "
                 f"(tolerance {tol:.3e}, {met}); ℓ from {cap.evaluations[0].ell:.6e} "
                 f"to {cap.evaluations[-1].ell:.6e} J.")
    if C:
        final = cap.modes[-1]
        counts = ", ".join(f"{int(np.sum(final == m))} {name}" for m, name in REGIME_NAMES.items()
                           if np.any(final == m))
        lines.append(f"At the solution: {counts}.")
        for c, k, before, after in regime_switches(cap):
            lines.append(f"Contact {c} ({cap.contact_names[c]}) switched from {REGIME_NAMES[before]} to "
                         f"{REGIME_NAMES[after]} at iteration {k}.")
        gamma = r.contact_impulses
        c = int(np.argmax(gamma[:, 2]))
        lines.append(f"Largest normal impulse: contact {c} ({cap.contact_names[c]}), γ_n = {gamma[c, 2]:.4g} N·s "
                     f"(force {gamma[c, 2] / cap.dt:.4g} N).")
        for row in hunt_crossley_rows(cap)[:8]:
            lines.append(f"Contact {row['contact']} (Hunt–Crossley): fₑ₀ = {row['fe0']:.4g} N, "
                         f"n₀ = {row['n0']:.4g} N·s, "
                         f"ε_s = {row['eps_s']:.3g} m/s, vₙ₀ = {row['vn0']:.4g} → vₙ = {row['vn']:.4g} m/s; "
                         f"{row['normal_regime']}, {row['friction_regime']}.")
    lines.append(f"cond(H) = {cap.conditions[0]:.3g} at the first iterate, {cap.conditions[-1]:.3g} at the solution.")
    dv = r.v1 - r.free_motion.v_star
    k = int(np.argmax(np.abs(dv)))
    lines.append(f"The constraints changed the free motion most at DOF {cap.dof_names[k]}: "
                 f"v* = {r.free_motion.v_star[k]:.4g}, v₁ = {r.v1[k]:.4g}.")
    if cap.backends is not None:
        b = cap.backends
        verdict = "within" if b.within_bound else "OUTSIDE"
        lines.append(f"sap_gpu ({b.device}, {b.num_worlds} worlds) vs sap_ref from the same state and contacts: "
                     f"max |Δv₁| = {b.rows[0][1]:.3e}; ‖Δv₁‖_A = {b.distance_A:.3e} is {verdict} the bound "
                     f"{b.bound_A:.3e} set by both solutions' gradients; Newton iterations {b.gpu_newton} (gpu) "
                     f"vs {b.ref_newton} (ref).")
    return lines


def holonomic_rows(cap: StepCapture) -> list[dict]:
    """Per holonomic constraint row of the captured step: the constraint's name and type, the row
    within it, g₀, its rate ġ = J v₁ at the solution, v̂, R, the regime (near-rigid or compliant;
    "left out" for a distance row without a direction) and the impulse γ
    (docs/formulation.md § Holonomic constraints)."""
    r, m = cap.result, cap.model
    h = r.holonomic
    if h is None or r.solve is None or not len(h.R):
        return []
    ev = r.solve.evaluation
    rows = r.problem.rows.rows(RowKind.HOLONOMIC)
    rate, gamma = ev.row_vc[rows], ev.row_gamma[rows]
    out = []
    for i in range(len(h.R)):
        k = int(h.constraint[i])
        regime = "left out" if not h.active[i] else ("near-rigid" if h.near_rigid[i] else "compliant")
        out.append(dict(row=i, constraint=m.constraint_name[k], type=ConstraintType(int(m.constraint_type[k])).name,
                        component=i - int(m.constraint_row_start[k]), g0=float(h.g0[i]), rate=float(rate[i]),
                        v_hat=float(h.v_hat[i]), R=float(h.R[i]), regime=regime, gamma=float(gamma[i])))
    return out
