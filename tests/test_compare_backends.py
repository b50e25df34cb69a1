"""sap_tools.compare_backends (sap-compare-backends): a verdict per stage, exit status 1 on a failure,
and contact sets that differ only by round-off at the inclusion threshold reported as a tie."""

import json

import numpy as np
import pytest

import sap_gpu
from sap_common import scenes
from sap_common.state import SapContacts
from sap_tools.compare_backends import STAGES, collision_differences, main, match_contacts, verdict
from sap_tools.tolerances import CONTACT_TIE_ULPS, contact_tie_bound


def _run(capsys, argv):
    status = main(argv + ["--quiet", "--json"])
    lines = capsys.readouterr().out.strip().splitlines()
    return status, lines, json.loads(lines[-1])


def test_a_passing_scene_passes_every_stage(capsys, device):
    status, lines, row = _run(capsys, ["box_stack", "--steps", "12", "--every", "11", "--preset", "approx32",
                                       "--device", str(device)])
    assert status == 0 and row["passed"] is True and lines[-2] == "verdict: pass"
    stages = row["stages"]
    assert {"contact_count", "phi0", "A", "v_star", "J", "w", "R", "v_hat", "gamma", "ell", "grad", "H", "v1",
            "q1"} <= set(stages)
    assert all(s["verdict"] == "pass" and s["tolerance_used"] <= 1.0 for s in stages.values())
    assert stages["contact_count"]["tolerance_used"] == 0
    assert stages["contact_count"]["max_abs_diff"] == 0 and stages["contact_count"]["ref_scale"] > 0
    # The table has a pass/fail column, one row per compared stage.
    table = [line for line in lines if not line.startswith("verdict")
             and (line.rstrip().endswith(("pass", "FAIL")) or " tie" in line)]
    assert len(table) == len(stages)


@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_the_tile_hessian_of_the_fused_kernel_passes_every_stage(capsys, device, preset):
    """``--fused-hessian tiles``: sap_gpu's fused kernel forms H by tile products in shared memory
    (box_stack: nv = 18, one tile); H at sap_ref's v₁ and the step stay within their bars."""
    status, lines, row = _run(capsys, ["box_stack", "--steps", "30", "--every", "5", "--preset", preset,
                                       "--fused-hessian", "tiles", "--device", str(device)])
    assert lines[0].endswith("; sap_gpu fused_hessian tiles (--fused-hessian)")
    assert status == 0 and row["passed"] and lines[-2] == "verdict: pass"
    assert {"H", "v1", "gamma"} <= set(row["stages"]) and row["compared_contacts"] > 0


@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_the_factorization_the_device_does_not_default_to_passes_every_stage(capsys, device, preset):
    """``--fused-cholesky``: sap_gpu's fused kernel factors H the way the default (``auto``) does
    not take on this device: in the lanes' registers on the CPU device, by Warp's tile Cholesky on a
    GPU (box_stack: nv = 18, one tile); the step stays within its bars against sap_ref."""
    other = "tile" if device.is_cuda else "lanes"
    status, lines, row = _run(capsys, ["box_stack", "--steps", "30", "--every", "5", "--preset", preset,
                                       "--fused-cholesky", other, "--device", str(device)])
    assert lines[0].endswith(f"; sap_gpu fused_cholesky {other} (--fused-cholesky)")
    assert status == 0 and row["passed"] and lines[-2] == "verdict: pass"
    assert {"H", "v1", "gamma"} <= set(row["stages"]) and row["compared_contacts"] > 0


def test_a_scene_file_with_limits_runs_with_its_own_settings_and_passes(capsys, device):
    status, lines, row = _run(capsys, ["tests/data/drake/pendulum_limit.json", "--steps", "625", "--every", "5",
                                       "--device", str(device)])
    assert status == 0 and row["passed"] and row["preset"] == "drake"
    assert lines[0].startswith("solver: preset drake (scene file); line search exact_root (scene file)")
    assert row["stages"]["limit_rows"]["ref_scale"] == 1.0  # the limit was active in a compared step


def test_a_broken_gpu_stage_fails_with_exit_status_1(capsys, device, monkeypatch):
    """γ of sap_gpu off by 1e-6 N·s (a bug in one stage): that stage fails, the others pass."""
    original = sap_gpu.SolverSAP.evaluate_at

    def broken(self, v):
        out = original(self, v)
        out["contact_gamma"] = out["contact_gamma"] + 1e-6
        return out

    monkeypatch.setattr(sap_gpu.SolverSAP, "evaluate_at", broken)
    status, lines, row = _run(capsys, ["box_stack", "--steps", "3", "--every", "2", "--preset", "approx64",
                                       "--device", str(device)])
    assert status == 1 and row["passed"] is False and lines[-2] == "verdict: FAIL (gamma)"
    assert row["stages"]["gamma"]["verdict"] == "FAIL" and row["stages"]["gamma"]["tolerance_used"] > 1
    assert all(s["verdict"] == "pass" for k, s in row["stages"].items() if k != "gamma")


def _touching_boxes(path):
    """A tilted box resting exactly on another (faces touching at φ = 0 in exact arithmetic): on
    Warp's CPU device sap_ref finds one contact at φ₀ = −1.1e-16 m and sap_gpu none; on an H200
    sap_gpu finds it too (φ₀ = −2.2e-16 m), and the contact, at rest on a boundary of its cone's
    regions, has a G that round-off moves by 2e-8 (the H stage allows for it)."""
    h0 = [0.08810890513400288, 0.20261947261797872, 0.24736480494915264]
    h1 = [0.29019113566814214, 0.07064170421371792, 0.16019734481382086]
    q = [-0.003180900565374475, -0.008668530638609527, 0.008042342600170739, 0.999925026776339]  # xyzw
    p0 = [0.34691977430587784, 0.838177239267645, 0.6536506591134421]
    p1 = [0.3294863033878021, 0.8512878633170059, 1.060897566519801]  # p0 + R(q) (dx, dy, h0z + h1z)
    ident = {"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 1]}

    def body(i, name, h):
        I = np.diag([h[1] ** 2 + h[2] ** 2, h[0] ** 2 + h[2] ** 2, h[0] ** 2 + h[1] ** 2]) / 3.0
        return dict(index=i, name=name, mass=1.0, com_B=[0, 0, 0], inertia_about_com_B=I.tolist())

    def joint(name, qs, vs):
        return dict(name=name, type="quaternion_floating", parent_body="world", child_body=name,
                    frame_on_parent_F={"X_PF": ident}, frame_on_child_M={"X_CM": ident}, q_start=qs, nq=7,
                    v_start=vs, nv=6)

    def geom(i, h):
        return dict(index=i, body_index=i + 1, shape={"type": "box", "half_extents": h}, X_BG=ident,
                    dynamic_friction=0.5, point_contact_stiffness=1e6, relaxation_time=0.1)

    wxyz = [q[3], *q[:3]]
    spec = dict(scene="boxes_touching", plant={"time_step": 1e-3},
                bodies=[{"index": 0, "name": "world"}, body(1, "lower", h0), body(2, "upper", h1)],
                joints=[joint("lower", 0, 0), joint("upper", 7, 6)], geometries=[geom(0, h0), geom(1, h1)],
                state={"q0": [*wxyz, *p0, *wxyz, *p1], "v0": [0.0] * 12})
    path.write_text(json.dumps(spec))
    return str(path)


def test_touching_faces_resolved_by_round_off_are_a_tie(capsys, device, tmp_path):
    scene = _touching_boxes(tmp_path / "touching.json")
    status, lines, row = _run(capsys, [scene, "--steps", "1", "--every", "1", "--device", str(device)])
    count = row["stages"]["contact_count"]
    assert status == 0 and row["passed"]
    if str(device) == "cpu":  # the last bits are the CPU device's; a GPU (FMA) may round the other way
        assert count["max_abs_diff"] == 1 and count["ties"] == 1 and count["verdict"] == "tie"
        assert any("(1 tie: |φ₀| at round-off of the threshold)" in line for line in lines)


def _contacts(rows):
    """One-world host contacts from (shape0, shape1, x0, x1, φ₀) rows; margins 0."""
    c = SapContacts.allocate(1, max(len(rows), 1))
    c.count[0] = len(rows)
    for k, (s0, s1, x0, x1, phi) in enumerate(rows):
        c.shape0[0, k], c.shape1[0, k] = s0, s1
        c.x0[0, k], c.x1[0, k], c.phi0[0, k] = x0, x1, phi
        c.normal[0, k] = (0.0, 0.0, 1.0)
    return c


def test_an_unmatched_contact_is_a_tie_only_within_round_off():
    a = ((0, 1, (0.0, 0.0, 0.1), (0.0, 0.0, 0.1), 0.0), (0, 1, (0.2, 0.0, 0.1), (0.2, 0.0, 0.1), -1e-3))
    extra = lambda phi: (0, 1, (0.1, 0.1, 0.1), (0.1, 0.1, 0.1), phi)  # noqa: E731
    ref = _contacts(list(a))
    for phi, expected in ((-5.2e-18, "tie"), (-0.5 * contact_tie_bound(1.0), "tie"),
                          (-2 * contact_tie_bound(1.0), "FAIL"), (-1e-6, "FAIL")):
        gpu = _contacts([a[1], extra(phi), a[0]])  # another order: matched by pair and position
        pairs, ref_only, gpu_only = match_contacts(ref, gpu)
        assert sorted(pairs) == [(0, 2), (1, 0)] and ref_only == [] and gpu_only == [1]
        d = collision_differences(ref, gpu)
        assert verdict(d)["contact_count"] == expected, phi
        assert verdict(d)["phi0"] == "pass" and d["phi0"].err == 0.0
    # A limit row active on one backend only fails (no tolerance on counts).
    from sap_tools.compare_backends import Check
    assert verdict({"limit_rows": Check(1.0, 1.0, 1.0)})["limit_rows"] == "FAIL"
    assert verdict({"limit_rows": Check(0.0, 1.0, 0.0)})["limit_rows"] == "pass"
    # A contact on another shape pair is never matched to this one.
    assert match_contacts(ref, _contacts([(0, 2, *a[0][2:])]))[1:] == ([0, 1], [0])
    assert CONTACT_TIE_ULPS * np.finfo(float).eps == pytest.approx(contact_tie_bound(0.5))  # 1 m floor


def test_every_stage_key_has_a_row():
    keys = [k for k, _ in STAGES]
    assert len(keys) == len(set(keys)) and keys[0] == "contact_count" and keys[-1] == "q1"


def test_no_contact_at_the_compared_steps_is_said_so(capsys, device):
    """box_stack's first contact comes at step 1: --steps 3 (every 10th: step 0 only) compares none."""
    status, lines, row = _run(capsys, ["box_stack", "--steps", "3", "--device", str(device)])
    assert status == 0 and row["compared"] == 1 and row["compared_contacts"] == 0 and row["first_contact_step"] == 1
    text = "\n".join(lines)
    assert "not present in this scene: contact" not in text
    assert ("not compared: contact J, contact w, contact R, contact v̂, γ at v = ref v₁: no contact at the compared "
            "steps; the rollout's first contact is at step 1, not a compared one") in text
    assert lines[-2] == "verdict: pass (the contact stages were not compared: no contact at the compared steps)"
    assert row["not_compared"]["J"].startswith("no contact at the compared steps")
    assert row["not_compared"]["drive_Kp"] == "not present in this scene"
    status, lines, row = _run(capsys, ["box_stack", "--steps", "3", "--every", "1", "--device", str(device)])
    assert row["compared_contacts"] > 0 and "J" in row["stages"] and lines[-2] == "verdict: pass"


@pytest.mark.parametrize("scene, preset", [("fourbar", "drake"), ("weld_drop", "approx32")])
def test_holonomic_rows_are_compared_stage_by_stage(capsys, device, scene, preset):
    """A constraint scene: the rows taken, g₀, J, R, v̂ and γ of its holonomic constraints are
    compared and pass."""
    status, lines, row = _run(capsys, [scene, "--steps", "20", "--every", "5", "--preset", preset,
                                       "--device", str(device)])
    assert status == 0 and lines[-2].startswith("verdict: pass")
    for key in ("holonomic_rows", "holonomic_g0", "holonomic_J", "holonomic_R", "holonomic_v_hat",
                "holonomic_gamma"):
        assert key in row["stages"], key


# H of the touching boxes evaluated on an H200 differed from sap_ref's by this much (H's own units)
# (sap-compare-backends, drake preset): G of the resting contact jumps at a boundary of its cone's regions.
H200_TOUCHING_H_DIFFERENCE = 2.162e-08


def _ref_problem_at_v1(scene):
    from sap_ref.collision import CollisionPipeline
    from sap_ref.contact_solve import evaluate
    from sap_ref.solver import SolverSAP
    from sap_tools.cli import scene_solver_kwargs

    kwargs, _ = scene_solver_kwargs(scene, "drake", None, default_preset="drake")
    ref = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **kwargs)
    pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config)
    contacts, state = pipe.contacts(), scene.state.copy()
    for _ in range(400):  # until the first step with contacts
        pipe.collide(state, contacts)
        if contacts.count[0]:
            break
        ref.step(state, state, scene.control, contacts, scene.dt)
    out = state.copy()
    ref.step(state, out, scene.control, contacts, scene.dt)
    r = ref.last_results[0]
    return r.problem, evaluate(r.problem, r.v1[r.problem.dofs])


def test_the_hessian_bar_allows_for_g_moved_by_round_off_of_the_contact_velocities(tmp_path):
    """Where G varies smoothly (sliding contacts) the round-off term of the H bar is a few ulps of H;
    at the touching boxes' contact, on a boundary of its cone's regions, it covers what an H200
    measured."""
    from sap_common.io.json_scene import load_json
    from sap_ref.constraints import SLIDING
    from sap_ref.contact_solve import hessian
    from sap_tools.compare_backends import _contact_hessian_roundoff

    eps = float(np.finfo(np.float64).eps)
    p, ev = _ref_problem_at_v1(load_json(_touching_boxes(tmp_path / "touching.json"), 1))
    moved = _contact_hessian_roundoff(p, ev, eps)
    assert moved.shape == (len(ev.v), len(ev.v)) and moved.max() >= H200_TOUCHING_H_DIFFERENCE
    p, ev = _ref_problem_at_v1(scenes.get("box_slide", 1))  # four sliding contacts: G varies smoothly with v_c
    assert len(ev.contact_vc) == 4 and np.all(ev.contact_mode == SLIDING)
    assert 0.0 < _contact_hessian_roundoff(p, ev, eps).max() <= 1e3 * eps * np.abs(hessian(p, ev)).max()
