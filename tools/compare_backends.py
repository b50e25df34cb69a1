"""``sap-compare-backends``: per-stage max |sap_ref − sap_gpu| along a rollout of a scene.

    sap-compare-backends box_stack --steps 200 --every 20 --preset drake
    sap-compare-backends tests/data/drake/sphere_slide.json --device cuda:0 --json

The scene is rolled out with sap_ref; every ``--every`` steps both backends take one step from
the same state. Collision runs on each backend's own pipeline and is compared slot by slot
(count, φ₀, witness points, normals); then both solvers step with sap_ref's contacts, so the
later stages see identical inputs, and their intermediates are compared: A, v*, contact J, w, R,
v̂, the limit and drive rows, then γ, ℓ, ∇ℓ and H at the same v (sap_ref's solution), and the
results v₁ and q₁. Each row of the table is the largest absolute difference seen, next to the
largest |sap_ref| value of that quantity (its scale). v₁ may differ by up to the Newton
tolerance: the two backends stop at different iterates of the same convex problem.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from sap_ref.collision import CollisionPipeline
from sap_ref.contact_solve import evaluate, hessian
from sap_ref.solver import SolverSAP
from tools.cli import load_rollout, rollout_parser, warp_device
from tools.progress import Progress

__all__ = ["STAGES", "stage_differences", "collision_differences", "main"]

# Row order of the report: (key, description).
STAGES = (
    ("contact_count", "contacts: count (ref − gpu)"),
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
    ("drive_Kp", "drive Kp"),
    ("drive_Kd", "drive Kd"),
    ("gamma", "γ at v = ref v₁ [N·s]"),
    ("ell", "ℓ at v = ref v₁ [J]"),
    ("grad", "∇ℓ at v = ref v₁"),
    ("H", "H at v = ref v₁"),
    ("v1", "v₁ [m/s, rad/s]"),
    ("q1", "q₁"),
)


def _diff(a, b):
    """(max |a − b|, max |b|) over matching arrays; (0, 0) when empty."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.abs(a - b).max(initial=0.0)), float(np.abs(b).max(initial=0.0))


def collision_differences(ref_contacts, gpu_contacts) -> dict:
    """Slot-by-slot differences of two one-world contact sets (host SapContacts)."""
    cr, cg = int(ref_contacts.count[0]), int(gpu_contacts.count[0])
    n = min(cr, cg)
    out = {"contact_count": (float(abs(cr - cg)), float(cr))}
    out["phi0"] = _diff(gpu_contacts.phi0[0, :n], ref_contacts.phi0[0, :n])
    out["points"] = max(_diff(gpu_contacts.x0[0, :n], ref_contacts.x0[0, :n]),
                        _diff(gpu_contacts.x1[0, :n], ref_contacts.x1[0, :n]))
    out["normal"] = _diff(gpu_contacts.normal[0, :n], ref_contacts.normal[0, :n])
    return out


def stage_differences(ref, gpu, state, control, contacts, dt) -> dict:
    """One step of both solvers (one-world model) from the same host inputs; returns
    ``{stage key: (max |ref − gpu|, max |ref|)}`` for the solver stages of :data:`STAGES`."""
    import sap_gpu

    out_gpu = sap_gpu.to_device(state, gpu.device)
    out_gpu.joint_qd_order = "sap"
    gpu.step(sap_gpu.to_device(state, gpu.device), out_gpu, sap_gpu.to_device(control, gpu.device),
             sap_gpu.to_device(contacts, gpu.device), dt)
    out_ref = state.copy()
    out_ref.joint_qd_order = "sap"
    ref.step(state, out_ref, control, contacts, dt)
    r, nv = ref.last_results[0], ref.model.joint_dof_count
    d = {"A": _diff(gpu.A.numpy()[0, :nv, :nv], r.free_motion.A),
         "v_star": _diff(gpu.v_star.numpy()[0], r.free_motion.v_star)}
    C = int(contacts.count[0])
    if C:
        d["J"] = _diff(gpu.contact_J.numpy()[0, :3 * C], r.contacts.J.reshape(3 * C, nv))
        d["w"] = _diff(gpu.contact_w.numpy()[0, :C], r.w)
        d["R"] = _diff(gpu.contact_R.numpy()[0, :C], r.R)
        d["v_hat"] = _diff(gpu.contact_v_hat.numpy()[0, :C], r.v_hat[:, 2])
    L = gpu.limits.count
    if L:
        active = gpu.limit_active.numpy()[0, :L].astype(bool)
        d["limit_rows"] = (float(abs(int(active.sum()) - len(r.limits.R))), float(len(r.limits.R)))
        if active.sum() == len(r.limits.R):
            d["limit_J"] = _diff(gpu.limit_J.numpy()[0, :L][active], r.limits.J)
            d["limit_R"] = _diff(gpu.limit_R.numpy()[0, :L][active], r.limits.R)
            d["limit_v_hat"] = _diff(gpu.limit_v_hat.numpy()[0, :L][active], r.limits.v_hat)
    if gpu.drive_count:
        d["drive_Kp"] = _diff(gpu.drive_Kp.numpy()[0, :gpu.drive_count], r.drives.Kp)
        d["drive_Kd"] = _diff(gpu.drive_Kd.numpy()[0, :gpu.drive_count], r.drives.Kd)
    if r.problem is not None:
        dofs = r.problem.dofs
        ev_gpu = gpu.evaluate_at(r.v1[None])
        ev_ref = evaluate(r.problem, r.v1[dofs])
        d["ell"] = _diff(ev_gpu["ell"][0], ev_ref.ell)
        d["grad"] = _diff(ev_gpu["grad"][0, dofs], ev_ref.grad)
        d["H"] = _diff(ev_gpu["H"][0][np.ix_(dofs, dofs)], hessian(r.problem, ev_ref))
        if C:
            d["gamma"] = _diff(ev_gpu["contact_gamma"][0, :C], ev_ref.contact_gamma)
    d["v1"] = _diff(out_gpu.joint_qd.numpy()[0], out_ref.joint_qd[0])
    d["q1"] = _diff(out_gpu.joint_q.numpy()[0], out_ref.joint_q[0])
    return d


def _merge(acc: dict, new: dict) -> None:
    for k, (err, scale) in new.items():
        e0, s0 = acc.get(k, (0.0, 0.0))
        acc[k] = (max(e0, err), max(s0, scale))


def main(argv=None) -> int:
    parser = rollout_parser("sap-compare-backends", __doc__, "line_search_variant of both backends")
    parser.add_argument("--preset", default="drake", help="contact_preset_variant of both backends (default drake)")
    parser.add_argument("--device", default="cpu", help="Warp device of sap_gpu (default cpu)")
    args = parser.parse_args(argv)
    try:
        import sap_gpu

        scene, overrides = load_rollout(args)
        device = warp_device(args.device)
        kw = dict(max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=args.preset, **overrides)
        ref = SolverSAP(scene.sap_model, **kw)
        gpu = sap_gpu.SolverSAP(scene.sap_model, device=device, **kw)
        rollout = SolverSAP(scene.sap_model, **kw)
    except ValueError as e:
        print(f"sap-compare-backends: error: {e}", file=sys.stderr)
        return 2
    steps = args.steps or scene.num_steps
    ref_pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config)
    gpu_pipe = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config, device=device)
    contacts, gpu_contacts = ref_pipe.contacts(), gpu_pipe.contacts()
    state = scene.state.copy()
    worst: dict = {}
    compared = 0
    with Progress(steps, f"{scene.name} ({args.preset}, {device})", enabled=not args.quiet) as bar:
        for n in range(steps):
            ref_pipe.collide(state, contacts)
            if n % args.every == 0:
                gpu_pipe.collide(sap_gpu.to_device(state, device), gpu_contacts)
                _merge(worst, collision_differences(contacts, sap_gpu.to_host(gpu_contacts)))
                _merge(worst, stage_differences(ref, gpu, state, scene.control, contacts, scene.dt))
                compared += 1
            rollout.step(state, state, scene.control, contacts, scene.dt)
            bar.update(n + 1, f"contacts {int(contacts.count[0])}")
    print(f"{scene.name}: {compared} steps compared, preset {args.preset}, sap_gpu on {device}")
    print(f"{'stage':<44} {'max |ref − gpu|':>16} {'max |ref|':>12}")
    for key, label in STAGES:
        if key in worst:
            err, scale = worst[key]
            print(f"{label:<44} {err:16.3e} {scale:12.3e}")
    absent = [label for key, label in STAGES if key not in worst]
    if absent:
        print("not present in this scene: " + ", ".join(a.split(" [")[0] for a in absent))
    if args.json:
        print(json.dumps(dict(scene=scene.name, preset=args.preset, device=str(device), steps=steps,
                              compared=compared, stages={k: dict(max_abs_diff=v[0], ref_scale=v[1])
                                                         for k, v in worst.items()})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
