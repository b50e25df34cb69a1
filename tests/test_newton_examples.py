"""Newton 1.8's own examples (``newton.examples``) with the one-line swap to ``sap_newton.SolverSAP``.

Each example's script runs as ``python -m newton.examples.<name> --viewer null --test --device cpu``
does (Newton's own test of its examples, with that test's arguments), and where it hands its example
to ``newton.examples.run`` the example's solver is replaced by ``sap_newton.SolverSAP(example.model)``
and nothing else. ``newton.examples.run`` then steps it and ends with the example's own
``test_final()`` (and its ``test_post_step()`` after every frame, where it has one) and Newton's check
that no state, model, control or contact array holds a NaN.

Examples build and capture a graph of their step in the constructor (Warp 1.19 records graphs on the
CPU too, replayed by ``wp.capture_launch``): a captured graph holds the native solver's launches, so
the runner captures the step again after the swap (``example.capture()``, or a capture of its
``simulate()``), as a program that swapped the line constructing its solver would have captured SAP's
step.

Run one by hand (``--native`` keeps the example's own solver)::

    python tests/test_newton_examples.py basic.example_basic_urdf --num-frames 200 --world-count 16
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

pytest.importorskip("newton")
import newton.examples  # noqa: E402

# Newton's examples that run offline on a CPU and pass their own test_final with their native solver, and
# pass it with the literal swap: (module under newton.examples, arguments), the arguments those of Newton's
# own test of the example (newton/tests/test_examples.py; its CPU variant where it has one), the solver the
# example's default. The docs list them with times, and the others with what keeps them from running here or
# from passing (docs/newton.md § Newton's examples with the swap).
SWAP_PASSES = [
    ("basic.example_basic_conveyor", ["--num-frames", "100"]),  # XPBD; a KINEMATIC belt, non-convex MESH hulls
    ("basic.example_basic_dzhanibekov", ["--num-frames", "230"]),  # native: VBD
    ("basic.example_basic_heightfield", ["--num-frames", "120"]),  # XPBD; an HFIELD terrain
    ("basic.example_basic_joints", []),  # XPBD
    ("basic.example_basic_mimic_joint", ["--num-frames", "120"]),  # XPBD
    ("basic.example_basic_pendulum", []),  # XPBD
    ("basic.example_basic_urdf", ["--num-frames", "200", "--world-count", "16"]),  # XPBD
    ("basic.example_recording", ["--num-frames", "120", "--world-count", "8"]),  # MuJoCo, contacts=None
    ("contacts.example_balance_bird", ["--num-frames", "60"]),  # XPBD; a MESH pedestal (convex)
    ("contacts.example_domino_spiral", ["--num-frames", "60"]),  # XPBD
    ("contacts.example_newton_cradle", ["--num-frames", "60"]),  # XPBD
    ("contacts.example_pyramid", ["--num-frames", "120", "--num-pyramids", "3", "--pyramid-size", "5"]),  # XPBD
    ("controllers.example_controller_joint_impedance_heterogeneous", ["--num-frames", "120"]),  # MuJoCo
    ("multiphysics.example_kamino_mujoco_admm_solver", ["--num-frames", "30", "--world-count", "4"]),  # coupled
    ("selection.example_selection_articulations", ["--num-frames", "10"]),  # MuJoCo
    ("selection.example_selection_materials", ["--num-frames", "10"]),  # MuJoCo, notify_model_changed
    ("selection.example_selection_multiple", ["--num-frames", "10"]),  # MuJoCo
]

# Examples that run offline on a CPU and pass with their native solver, but not with the swap: the
# message their run ends with (the measured reasons: docs/newton.md § Newton's examples with the swap).
SWAP_FAILS = [
    # Plots SolverMuJoCo's own data (solver.mj_data): no other solver has it.
    ("basic.example_basic_plotting", ["--num-frames", "200"], "has no attribute 'mj_data'"),
    # The projectile's 100 m/s is in builder.body_qd only (maximal coordinates, what XPBD reads); SAP, like
    # Newton's MuJoCo and Featherstone solvers, integrates joint_qd, where it is 0: the projectile stays put.
    ("contacts.example_adaptive_collision", ["--num-frames", "45"], "did not disrupt the brick wall"),
    # The boxes on the turn stall: SAP's Kelvin-Voigt normal law pushes on Newton's speculative contacts
    # (phi0 > 0, within the 0.1 m gap) with the pieces ahead, capping the approach at phi0 / (h + tau_d).
    ("basic.example_basic_conveyor_forces", ["--num-frames", "100"], "was never carried off its start pose"),
    # The ballbot's rollers are barrel cylinders (a revolved arc for a side): no SAP shape, refused by name
    # (converted as straight cylinders they sank 3 cm into the ball under approx32's body-inertia weights).
    ("robot.example_robot_omniwheel", ["--num-frames", "500"], "a barrel cylinder"),
]


def recapture(example) -> None:
    """Capture the example's step again where its constructor captured one (its ``capture()``, or a
    capture of its ``simulate()`` as the constructors without ``capture()`` make)."""
    import warp as wp

    if getattr(example, "graph", None) is None:
        return
    if callable(getattr(example, "capture", None)):
        example.capture()
    elif callable(getattr(example, "simulate", None)):
        with wp.ScopedCapture() as capture:
            example.simulate()
        example.graph = capture.graph
    else:
        raise RuntimeError(f"{type(example).__module__}: a captured graph, and neither capture() nor simulate() to "
                           "capture SAP's step again")


def reallocate_observables(example, old_solver) -> None:
    """Allocate again, from the example's (swapped) solver, each observables container its constructor
    allocated from ``old_solver`` (same kinds, same contacts), as a constructor whose solver line was
    swapped would have: a container belongs to the solver that allocated it (Newton's
    ``SolverBase.validate_observables``)."""
    import newton.solvers

    for name, value in list(vars(example).items()):
        if isinstance(value, newton.solvers.SolverBase.Observables) and value._solver is old_solver:
            contacts = next((c for c in (value.contacts_for_kind(k) for k in value.kinds) if c is not None), None)
            setattr(example, name, example.solver.observables(value.kinds, contacts=contacts))


def run_example(module: str, argv: list[str], *, swap: bool = True) -> dict:
    """Run ``python -m newton.examples.<module> argv --viewer null --test --device cpu`` in this process,
    with the example's solver swapped for ``sap_newton.SolverSAP(example.model)`` (``swap``) where the
    script hands its example to ``newton.examples.run`` (which steps it, then calls ``test_final``).
    Returns timings [s] (and the solver's diagnostics); raises what the example raises."""
    import runpy

    import warp as wp

    out = {}
    original = newton.examples.run

    def run(example, args):
        t0 = time.perf_counter()
        out["build"] = t0 - out.pop("start")
        if swap:
            import sap_newton

            native = example.solver
            example.solver = sap_newton.SolverSAP(example.model)
            reallocate_observables(example, native)
            recapture(example)
        t1 = time.perf_counter()
        original(example, args)
        wp.synchronize()
        out.update(swap=t1 - t0, run=time.perf_counter() - t1)
        if swap:
            diag = example.solver.diagnostics()
            out.update(contacts=int(diag["contact_count"].max()), slots=[s.config.max_rigid_contact
                                                                        for s in example.solver.solvers],
                       truncated=int(diag["truncated_contact_count"].max()), failed=int(diag["failed"].max()))

    saved = sys.argv
    sys.argv = [module, *argv, "--viewer", "null", "--test", "--device", "cpu", "--quiet"]
    newton.examples.run = run
    try:
        out["start"] = time.perf_counter()
        runpy.run_module(f"newton.examples.{module}", run_name="__main__")
    except SystemExit as e:  # a script that exits after its run
        if e.code not in (None, 0):
            raise
    finally:
        newton.examples.run = original
        sys.argv = saved
    if "run" not in out:
        raise RuntimeError(f"newton.examples.{module} never called newton.examples.run")
    return out


def _run(tmp_path, module: str, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    """This file as a command (one example per process, as Newton's own test runs them)."""
    return subprocess.run([sys.executable, __file__, module, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def test_the_quadruped_passes_with_the_swap(tmp_path):
    """Newton's quadruped (two worlds) with the literal swap: its own test_final (base at 0.46 ± 0.01 m,
    links at rest) passes on the default slots (52: no contact dropped) and default materials."""
    run = _run(tmp_path, "basic.example_basic_urdf", ["--num-frames", "200", "--world-count", "2"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = [x for x in run.stdout.splitlines() if x.startswith("PASS ")][-1]
    assert "'slots': [52]" in line and "'truncated': 0" in line and "'failed': 0" in line, line


@pytest.mark.slow  # 17 examples: 112 s with -n 2 on two cores (with 3 of the failing 4), a process each
@pytest.mark.parametrize("module, args", SWAP_PASSES, ids=[m for m, _ in SWAP_PASSES])
def test_newton_s_example_passes_its_own_test_with_the_swap(tmp_path, module, args):
    run = _run(tmp_path, module, args)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = [x for x in run.stdout.splitlines() if x.startswith("PASS ")][-1]
    assert "'truncated': 0" in line and "'failed': 0" in line, line  # no contact dropped, no step failed


@pytest.mark.slow
@pytest.mark.parametrize("module, args, message", SWAP_FAILS, ids=[m for m, _, _ in SWAP_FAILS])
def test_newton_s_example_fails_with_the_swap_for_the_documented_reason(tmp_path, module, args, message):
    run = _run(tmp_path, module, args)
    assert run.returncode != 0 and message in run.stdout + run.stderr, run.stdout[-3000:] + run.stderr[-3000:]


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("module", help="example module under newton.examples, e.g. basic.example_basic_urdf")
    p.add_argument("--native", action="store_true", help="keep the example's own solver")
    ours, rest = p.parse_known_args(argv)
    t = time.perf_counter()
    out = run_example(ours.module, rest, swap=not ours.native)
    print(f"PASS {ours.module} {'native' if ours.native else 'sap'} total {time.perf_counter() - t:.1f} s {out}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
