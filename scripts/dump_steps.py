"""Record rollouts of both backends bit for bit, and compare two such records: the check that a
change meant to leave results alone (a refactoring) did.

    python scripts/dump_steps.py --out before.npz            # on the old tree
    python scripts/dump_steps.py --out after.npz             # on the new one
    python scripts/dump_steps.py --compare before.npz after.npz
    python scripts/dump_steps.py --out x.npz --cpu-blocks    # sap_gpu with 32 cooperative lanes per block
    python scripts/dump_steps.py --out x.npz --line-search monotone_decay   # every case with this search

Each case is a scene (covering every row kind: contacts, limits, drives, couplers, distance, weld,
the humanoid), a preset, a contact approximation, a backend (``ref``; ``gpu`` on Warp's CPU device,
``newton_path`` fused or staged) and a linear solver (Cholesky or PCR). For every step the record
holds joint_q, joint_qd (public order) and the per-world Newton and line-search iteration counts and
status bits. ``--compare`` reports, per case, whether the two records are equal bit for bit
(``np.array_equal``; NaN equal to NaN, 0.0 equal to −0.0), else the first step and field that
differ and the largest difference. Exit status 1 if any case differs or is missing.

``--cpu-blocks`` sets ``wp.config.enable_cpu_blocks`` so the fused kernel's 32 lanes really run
(block reductions in another order than one lane's), as on a GPU.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

# (scene, steps, presets, approximations): every row kind at least once, and both contact models.
CASES = (
    ("box_stack", 100, ("approx32", "drake"), ("sap",)),        # contacts, a stack
    ("arm_push_block", 100, ("approx32", "drake"), ("sap",)),   # contacts, limits, PD drives
    ("geared_pair", 100, ("approx32", "drake"), ("sap",)),      # a coupler and a drive
    ("fourbar", 100, ("drake",), ("sap",)),                     # a distance constraint and a limit
    ("weld_drop", 100, ("drake",), ("sap",)),                   # a weld and contacts
    ("box_slide", 100, ("drake",), ("lagged", "similar")),      # Hunt–Crossley contact
    ("humanoid", 150, ("approx32", "drake"), ("sap",)),         # the benchmark's robot: 21 limits, contacts
)
BACKENDS = (("ref", None), ("gpu", "fused"), ("gpu", "staged"))
SOLVERS = ("cholesky", "pcr")


def case_keys():
    for scene, steps, presets, approximations in CASES:
        for preset in presets:
            for approximation in approximations:
                for backend, path in BACKENDS:
                    for solver in SOLVERS:
                        tag = backend if path is None else f"gpu-{path}"
                        yield scene, steps, preset, approximation, backend, path, solver, \
                            f"{scene}/{preset}/{approximation}/{tag}/{solver}"


def rollout(scene_name, steps, preset, approximation, backend, path, solver_name, line_search=None):
    from sap_common import scenes

    scene = scenes.get(scene_name, num_worlds=2)
    m, C = scene.sap_model, scene.max_rigid_contact
    kw = dict(scene.solver_kwargs, max_rigid_contact=C, contact_preset_variant=preset,
              discrete_contact_approximation=approximation, contact_linear_solver=solver_name)
    if line_search is not None:
        kw["line_search_variant"] = line_search
    state = scene.state.copy()
    # the second world starts moved, so the two worlds of a batch differ
    state.joint_qd[1] = state.joint_qd[1] + 0.05
    out = {k: [] for k in ("joint_q", "joint_qd", "newton", "line_search", "status")}
    if backend == "gpu":
        import sap_gpu

        solver = sap_gpu.SolverSAP(m, device="cpu", newton_path=path, **kw)
        pipe = sap_gpu.CollisionPipeline(m, C, solver.config, device="cpu")
        s, c, u = sap_gpu.to_device(state, "cpu"), pipe.contacts(), sap_gpu.to_device(scene.control, "cpu")
        for _ in range(steps):
            pipe.collide(s, c)
            solver.step(s, s, u, c, scene.dt)
            h, d = sap_gpu.to_host(s), solver.diagnostics()
            out["joint_q"].append(h.joint_q.copy())
            out["joint_qd"].append(h.joint_qd.copy())
            out["newton"].append(d["newton_iterations"])
            out["line_search"].append(d["line_search_iterations"])
            out["status"].append(d["status"])
    else:
        from sap_ref.collision import CollisionPipeline
        from sap_ref.solver import SolverSAP

        solver = SolverSAP(m, **kw)
        pipe = CollisionPipeline(m, C, solver.config)
        c = pipe.contacts()
        for _ in range(steps):
            pipe.collide(state, c)
            solver.step(state, state, scene.control, c, scene.dt)
            out["joint_q"].append(state.joint_q.copy())
            out["joint_qd"].append(state.joint_qd.copy())
            out["newton"].append(solver.last_newton_iterations.copy())
            out["line_search"].append(solver.last_line_search_iterations.copy())
            out["status"].append(solver.last_status.copy())
    return {k: np.asarray(v) for k, v in out.items()}


def record(path: str, cpu_blocks: bool, only: str | None, line_search: str | None = None) -> int:
    import warp as wp

    wp.config.quiet = True
    if cpu_blocks:
        wp.config.enable_cpu_blocks = True
    wp.init()
    arrays = {}
    t0 = time.perf_counter()
    for scene, steps, preset, approximation, backend, p, solver, key in case_keys():
        if only and only not in key:
            continue
        t = time.perf_counter()
        for k, v in rollout(scene, steps, preset, approximation, backend, p, solver, line_search).items():
            arrays[f"{key}/{k}"] = v
        print(f"{key}: {steps} steps, {time.perf_counter() - t:.1f} s", flush=True)
    np.savez_compressed(path, **arrays)
    print(f"wrote {path} ({len(arrays)} arrays, {time.perf_counter() - t0:.0f} s)")
    return 0


def compare(a_path: str, b_path: str) -> int:
    a, b = np.load(a_path), np.load(b_path)
    cases = sorted({k.rsplit("/", 1)[0] for k in list(a.files) + list(b.files)})
    bad = 0
    for case in cases:
        fields = sorted({k.rsplit("/", 1)[1] for k in a.files + b.files if k.rsplit("/", 1)[0] == case})
        msg = "equal bit for bit"
        for f in fields:
            k = f"{case}/{f}"
            if k not in a.files or k not in b.files:
                msg = f"{f}: only in {'the second' if k not in a.files else 'the first'}"
                break
            x, y = a[k], b[k]
            if x.shape != y.shape:
                msg = f"{f}: shapes {x.shape} and {y.shape}"
                break
            if not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
                step = int(np.flatnonzero([not np.array_equal(p, q, equal_nan=x.dtype.kind == "f")
                                           for p, q in zip(x, y)])[0])
                diff = np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64)))
                msg = f"DIFFERS: {f} first at step {step + 1}, largest |difference| {diff:.3e}"
                break
        bad += msg != "equal bit for bit"
        print(f"{case:58s} {msg}")
    print(f"{len(cases) - bad} of {len(cases)} cases equal bit for bit")
    return int(bad > 0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the record here (.npz)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two records")
    p.add_argument("--cpu-blocks", action="store_true", help="wp.config.enable_cpu_blocks = True (32 lanes)")
    p.add_argument("--only", help="only the cases whose key contains this text")
    p.add_argument("--line-search", default=None,
                   help="line_search_variant of every case (default: the library's; monotone_decay for a record "
                        "made before exact_root became the default)")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        p.error("give --out FILE or --compare A B")
    return record(args.out, args.cpu_blocks, args.only, args.line_search)


if __name__ == "__main__":
    sys.exit(main())
