"""sap-validate: the committed Drake recordings pass one-step mode to round-off on both backends;
broken implementations are caught and diagnosed at the right stage; ties are reported as ties;
reports (text, JSON, JUnit) are well-formed; a user's own trajectory file validates.

Every step of every recording on both backends: tests/test_long_rollouts.py (``pytest -m slow``).
"""

import dataclasses
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from conftest import DATA, DRAKE_ANCHORS

import sap_ref.collision
import sap_ref.solver
from sap_common import scenes
from sap_common.io import load_mjcf
from sap_common.io.trajectory import write_trajectory
from sap_ref.collision import CollisionPipeline
from sap_ref.solver import SolverSAP
from sap_tools.validate import cli as V
from sap_tools.validate.backends import recorded_state
from sap_tools.validate.diagnose import STAGE_RTOL

# Recordings with a shape pair Drake computes with FCL's MPR (sap_tools.validate.diagnose.drake_uses_mpr): Drake's
# contact point there is MPR's barycentric estimate, not a witness point, so their steps pass as
# explained (the step with the recording's contact geometry within the bar), not within the bar.
RECORDINGS = [p.stem for p in DRAKE_ANCHORS]
MPR_RECORDINGS = tuple(n for n in RECORDINGS if n == "mesh_rock" or n.startswith("mesh_rock_"))  # every approximation
EVERY = 20  # one-step checks per recording: every EVERY-th step, plus the onsets below


def _steps(ctx):
    """Every EVERY-th step and the five steps after each onset (first contact, actuation at its
    limit, a limit impulse in the momentum residual): where the constraint rows appear."""
    N = ctx.traj.num_steps
    steps = set(range(0, N, EVERY))
    c, x = ctx.traj.contacts, ctx.traj.extra
    onsets = []
    if c and c["contact_count"].any():
        onsets.append(int(np.argmax(c["contact_count"] > 0)) - 1)
    if "dynamics_residual" in x and (np.abs(x["dynamics_residual"]) > 1e-4).any():
        onsets.append(int(np.argmax((np.abs(x["dynamics_residual"]) > 1e-4).any(axis=1))) - 1)
    for n in onsets:
        steps |= set(range(max(n, 0), min(n + 5, N)))
    return sorted(steps)


def assert_one_step_passes(name, r):
    """The one-step verdict of a committed recording: every step within the bar ("to round-off":
    |Δv| ≤ ONE_STEP_RTOL·max(1, |v|), |Δq| ≤ ONE_STEP_RTOL·max(1, |q|)), or, for the recordings
    with an FCL-MPR pair, every step over it explained by Drake's MPR contact point and within the
    bar once stepped with the recording's contact geometry."""
    assert r["verdict"] == "pass" and r["not_converged_steps"] == 0, r["diagnosis"]
    ex = r["explained"]
    assert ex["tie"] == ex["newton_tolerance"] == 0 and r["undiagnosed"] == 0
    if name in MPR_RECORDINGS:
        assert r["failing_steps"] == ex["mpr_contact_point"] > 0
        assert r["mpr_forced_worst_over_bar"] <= 1.0
    else:
        assert r["failing_steps"] == 0 and r["worst_error_over_bar"] <= 1.0


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("name", RECORDINGS)
def test_committed_recordings_pass_one_step_to_round_off(name, backend, device):
    ctx, _ = V.make_context(DATA / "drake" / f"{name}.json", backend=backend, device=device)
    assert_one_step_passes(name, V.one_step(ctx, _steps(ctx)))


def test_mpr_recordings_are_those_with_a_pair_drake_computes_by_mpr():
    from sap_tools.validate.diagnose import drake_uses_mpr

    for name in RECORDINGS:
        m = V.make_context(DATA / "drake" / f"{name}.json")[0].scene.sap_model
        uses = any(drake_uses_mpr(m.shape_type[a], m.shape_type[b]) for a, b in m.shape_pair)
        assert uses == (name in MPR_RECORDINGS), name


def test_drake_uses_mpr_for_the_pairs_without_a_closed_form():
    from sap_common.enums import ShapeType as T
    from sap_tools.validate.diagnose import drake_uses_mpr

    closed = [(T.SPHERE, T.SPHERE), (T.SPHERE, T.BOX), (T.CYLINDER, T.SPHERE), (T.SPHERE, T.CAPSULE),
              (T.PLANE, T.CONVEX_MESH), (T.ELLIPSOID, T.PLANE), (T.BOX, T.BOX), (T.PLANE, T.CYLINDER)]
    mpr = [(T.SPHERE, T.CONVEX_MESH), (T.ELLIPSOID, T.SPHERE), (T.BOX, T.CAPSULE), (T.CYLINDER, T.BOX),
           (T.CAPSULE, T.CAPSULE), (T.CONVEX_MESH, T.CONVEX_MESH), (T.ELLIPSOID, T.CYLINDER)]
    assert not any(drake_uses_mpr(a, b) or drake_uses_mpr(b, a) for a, b in closed)
    assert all(drake_uses_mpr(a, b) and drake_uses_mpr(b, a) for a, b in mpr)


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_mesh_rock_differs_from_drake_only_in_the_mpr_contact_point(backend, device):
    """Same φ₀ and normal as Drake; Drake's contact point is MPR's: with a sphere (centre c, radius
    R) against a flat face, MPR's final portal has one sphere point s and the contact point is the
    origin's barycentric image b₀·c + (1 − b₀)·s, b₀ = depth / (R + h) with h the cube's half size:
    (R/(R + h) − 1/2)·depth = 9/22·depth from the midpoint of the witness points toward c. The
    diagnosis names that, and the step with Drake's contact geometry is within the bar."""
    ctx, _ = V.make_context(DATA / "drake" / "mesh_rock.json", backend=backend, device=device)
    r = V.one_step(ctx, [0])
    d = r["diagnosis"]
    assert r["verdict"] == "pass" and d["cause"] == "constraint_rows" and d["explanation"] == "mpr_contact_point"
    assert d["explained"] and d["forced_over_bar"] <= 1.0 and all(s["ok"] for s in d["stages"])
    assert [s["stage"] for s in d["stages"]][:3] == [f"contacts, FCL-MPR pairs: {x}" for x in (
        "φ₀ [m]", "normals", "recorded point outside either shape [m]")]
    ours = ctx.backend.collide(ctx.state(0))
    depth = -float(ctx.traj.contacts["contact_phi"][1, 0])  # Drake's depth in step 0
    R, h = 0.5, 0.05
    offset = (ctx.traj.contacts["contact_point"][1, 0] - 0.5 * (ours.x0[0, 0] + ours.x1[0, 0])) @ ours.normal[0, 0]
    assert depth > 0 and offset == pytest.approx(-(R / (R + h) - 0.5) * depth, rel=1e-6)
    assert V.one_step(ctx, [0], strict=True)["verdict"] == "FAIL"


def test_a_solver_bug_is_not_excused_by_the_mpr_contact_point(monkeypatch):
    original = sap_ref.solver.contact_geometry

    def flipped(*args, **kwargs):
        geometry = original(*args, **kwargs)
        geometry.J[:, 2, :] *= -1.0  # the normal row's sign (a tangent row's sign is only another frame)
        return geometry

    monkeypatch.setattr(sap_ref.solver, "contact_geometry", flipped)
    ctx, _ = V.make_context(DATA / "drake" / "mesh_rock.json")
    r = V.one_step(ctx, [40])
    d = r["diagnosis"]
    assert r["verdict"] == "FAIL" and not d["explained"] and d["cause"] == "step"
    assert "with the recording's contact geometry on its FCL-MPR pairs the step is still" in d["message"]


def test_a_recorded_mpr_point_outside_the_shapes_is_not_excused():
    ctx, _ = V.make_context(DATA / "drake" / "mesh_rock.json")
    ctx.traj.contacts["contact_point"][1, 0, 0] += 0.2  # 20 cm sideways: off the 10 cm cube
    d = V.one_step(ctx, [0])["diagnosis"]
    assert d["cause"] == "constraint_rows" and not d["explained"]
    assert [s["stage"] for s in d["stages"] if not s["ok"]] == [
        "contacts, FCL-MPR pairs: recorded point outside either shape [m]"]


def test_wrong_friction_on_an_mpr_pair_is_diagnosed_at_the_constraint_rows(half_friction):
    ctx, _ = V.make_context(DATA / "drake" / "mesh_rock.json")
    d = V.one_step(ctx, [0])["diagnosis"]
    assert d["cause"] == "constraint_rows" and not d["explained"]
    assert [s["stage"] for s in d["stages"] if not s["ok"]] == ["contact μ"]


# ----------------------------------------------------------------------------- broken implementations


@pytest.fixture
def half_friction(monkeypatch):
    """sap_ref with every combined friction coefficient halved (a wrong μ)."""
    original = sap_ref.collision.combine_materials

    def wrong(model, a, b, config):
        mu, ke, k0, k1, tau = original(model, a, b, config)
        return 0.5 * mu, ke, k0, k1, tau

    monkeypatch.setattr(sap_ref.collision, "combine_materials", wrong)


def test_wrong_friction_coefficient_is_diagnosed_at_the_constraint_rows(half_friction):
    ctx, _ = V.make_context(DATA / "drake" / "sphere_slide.json")
    r = V.one_step(ctx, [0, 1, 2])  # step 1 (from row 0) slides in contact (μ matters); then the hop
    d = r["diagnosis"]
    assert r["verdict"] == "FAIL" and r["failing_steps"] == 1
    assert d["step"] == 1 and d["cause"] == "constraint_rows" and not d["explained"]
    bad = [s["stage"] for s in d["stages"] if not s["ok"]]
    assert bad == ["contact μ"], d["stages"]  # geometry, k, τ_d and J all agree


def test_wrong_friction_in_sap_gpu_is_diagnosed(monkeypatch, device):
    import sap_gpu.collision

    original = sap_gpu.collision.CollisionPipeline._combine_materials

    def half_mu(self, rows):  # sap_gpu combines the pairs' materials on the device: halve its μ after
        original(self, rows)
        mu = self._pair_rows[0]
        mu.assign(0.5 * mu.numpy())

    monkeypatch.setattr(sap_gpu.collision.CollisionPipeline, "_combine_materials", half_mu)
    ctx, _ = V.make_context(DATA / "drake" / "sphere_slide.json", backend="gpu", device=device)
    d = V.one_step(ctx, [0])["diagnosis"]
    assert d["cause"] == "constraint_rows" and [s["stage"] for s in d["stages"] if not s["ok"]] == ["contact μ"]


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_arithmetic_mean_dissipation_is_diagnosed_at_the_constraint_rows(monkeypatch, backend, device):
    """The plain mean of two d's instead of Drake's stiffness-weighted rule (incline_stick_slip: 12.5
    instead of 8 s/m): caught as the contact's d, before any solve, on both backends."""
    import sap_gpu.collision

    def mean(model, a, b, config):
        return 0.5 * (model.shape_material_hcd[a] + model.shape_material_hcd[b])

    original = sap_gpu.collision.CollisionPipeline._combine_materials

    def mean_on_device(self, rows):  # sap_gpu combines on the device: overwrite its d with the mean
        original(self, rows)
        pairs = self.model.shape_pair
        d = np.array([mean(self.model, int(a), int(b), self.config) for a, b in pairs])
        self._pair_rows[5].assign(np.broadcast_to(d, self._pair_rows[5].shape).copy())

    monkeypatch.setattr(sap_ref.collision, "combine_hc_dissipation", mean)
    monkeypatch.setattr(sap_gpu.collision.CollisionPipeline, "_combine_materials", mean_on_device)
    ctx, _ = V.make_context(DATA / "drake" / "incline_stick_slip_lagged.json", backend=backend, device=device)
    r = V.one_step(ctx, [0])
    d = r["diagnosis"]
    assert r["verdict"] == "FAIL" and d["cause"] == "constraint_rows", d
    bad = [s["stage"] for s in d["stages"] if not s["ok"]]
    assert bad[0] == "contact Hunt–Crossley d [s/m]", d["stages"]
    rows = {s["stage"]: s for s in d["stages"]}
    assert rows["Hunt–Crossley fₑ₀ [N]"]["ok"] and rows["Hunt–Crossley vₙ₀ [m/s]"]["ok"]  # fₑ₀, vₙ₀ do not read d


def test_mutated_jacobian_sign_is_diagnosed_at_the_constraint_rows(monkeypatch):
    original = sap_ref.solver.contact_geometry

    def flipped(*args, **kwargs):
        geometry = original(*args, **kwargs)
        geometry.J[:, 2, :] *= -1.0  # the normal row's sign
        return geometry

    monkeypatch.setattr(sap_ref.solver, "contact_geometry", flipped)
    ctx, _ = V.make_context(DATA / "drake" / "sphere_drop.json")
    first = int(np.argmax(ctx.traj.contacts["contact_count"] > 0)) - 1  # the row the first contact steps from
    r = V.one_step(ctx, [first - 1, first])
    d = r["diagnosis"]
    assert r["failing_steps"] == 1 and d["step"] == first + 1 and d["cause"] == "constraint_rows"
    assert [s["stage"] for s in d["stages"] if not s["ok"]] == ["contact J: J·v₁ normal vs recorded separation speed"]


def test_wrong_free_motion_is_diagnosed_as_a_step_difference_at_the_free_motion(monkeypatch):
    original = sap_ref.solver.free_motion

    def wrong(model, q0, v0, dt, **kwargs):  # 1 % too much damping
        fm = original(model, q0, v0, dt, **kwargs)
        A = fm.A + 0.01 * dt * np.diag(model.joint_damping)
        return dataclasses.replace(fm, A=A, v_star=v0 + np.linalg.solve(A, fm.A @ (fm.v_star - v0)))

    monkeypatch.setattr(sap_ref.solver, "free_motion", wrong)
    ctx, _ = V.make_context(DATA / "drake" / "pendulum_limit.json")
    d = V.one_step(ctx, [100])["diagnosis"]
    assert d["cause"] == "step" and not d["explained"]
    first_bad = next(s for s in d["stages"] if not s["ok"])
    assert first_bad["stage"].startswith("free motion")
    assert first_bad["max_abs_diff"] > 1e3 * first_bad["tolerance"] * STAGE_RTOL


def test_correct_steps_leave_every_stage_within_its_tolerance():
    """The stage table of passing steps: every stage compared, none departs."""
    from sap_tools.validate.diagnose import stage_table

    for name, step, expected in (("sphere_slide", 0, "contact force on shape 1's body [N]"),
                                 ("prismatic_pd", 3, "actuation: drive force [N, N·m]"),
                                 ("box_corners_slide", 300, "contact J: J·v₁ normal vs recorded separation speed")):
        ctx, _ = V.make_context(DATA / "drake" / f"{name}.json")
        stages = stage_table(ctx, step)
        assert expected in [s.name for s in stages]
        assert all(s.ok for s in stages), (name, [s for s in stages if not s.ok])


# ----------------------------------------------------------------------------- ties, Newton tolerance


def _sphere_recording(tmp_path, *, z, margin, with_contacts, name="rec.npz", **solver):
    """One step of sphere_drop's ball at height ``z`` by "another implementation": sap_ref whose
    ball has contact margin ``margin`` (so it reports the ground contact while φ₀ < margin)."""
    scene = scenes.get("sphere_drop")
    model = dataclasses.replace(scene.sap_model, shape_margin=np.array([0.0, margin]))
    other = dataclasses.replace(scene, sap_model=model)
    state = recorded_state(other, [0, 0, z, 0, 0, 0, 1], np.zeros(6))
    solver = SolverSAP(model, max_rigid_contact=1, contact_preset_variant="drake", line_search_variant="exact_root",
                       **solver)
    pipeline = CollisionPipeline(model, 1, solver.config)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    out = state.copy()
    solver.step(state, out, scene.control, contacts, 1e-3)
    k = int(contacts.count[0])
    c = None
    if with_contacts:
        c = {"contact_count": np.array([0, k]), "contact_shape0": np.array([[-1], [0]]),
             "contact_shape1": np.array([[-1], [1]]), "contact_phi": np.array([[0.0], [contacts.phi0[0, 0]]])}
    return write_trajectory(tmp_path / name, scene="sphere_drop", dt=1e-3, q=np.vstack([state.joint_q, out.joint_q]),
                            v=np.vstack([state.joint_qd, out.joint_qd]), convention="sap", engine="test", contacts=c), k


@pytest.mark.parametrize("with_contacts", [True, False])
def test_touching_contact_decided_the_other_way_is_reported_as_a_tie(tmp_path, with_contacts):
    # The ball rests exactly on the ground: φ₀ = 0. The recording included the contact, we do not
    # (we report φ₀ < 0 only): a tie, found from the recorded contacts or, without them, by
    # including the near-threshold pair and reproducing the recorded step.
    path, k = _sphere_recording(tmp_path, z=0.1, margin=1e-9, with_contacts=with_contacts)
    assert k == 1
    r = V.validate(path)
    d = r["one_step"]["diagnosis"]
    assert r["one_step"]["failing_steps"] == 1 and d["cause"] == "contact_set" and d["tie"] and d["explained"]
    assert r["verdict"] == "pass" and r["one_step"]["explained"]["tie"] == 1
    assert V.validate(path, strict=True)["verdict"] == "FAIL"


@pytest.mark.parametrize("with_contacts", [True, False])
def test_contact_set_difference_beyond_round_off_is_not_a_tie(tmp_path, with_contacts):
    # 0.5 mm above the ground with a 1 mm margin: the recording has a contact at φ₀ = +5e-4 m.
    path, k = _sphere_recording(tmp_path, z=0.1005, margin=1e-3, with_contacts=with_contacts)
    assert k == 1
    r = V.validate(path)
    d = r["one_step"]["diagnosis"]
    assert r["verdict"] == "FAIL" and not d["explained"]
    if with_contacts:
        assert d["cause"] == "contact_set" and not d["tie"] and "not a tie" in d["message"]
    else:  # nothing near the threshold: the step itself differs
        assert d["cause"] == "step"


def test_a_solve_to_a_tighter_tolerance_is_a_different_newton_iterate(tmp_path):
    # The recording converged further (rel 1e-12) than our drake preset stops (1e-6): both satisfy
    # our stopping criterion, but they are different iterates (step 196 of box_corners_slide, while
    # the box comes to rest on its four corners: they differ by 2.6e-7·|v|).
    ctx, _ = V.make_context(DATA / "drake" / "box_corners_slide.json")
    q, v = ctx.q_rows[196], ctx.v_rows[196]
    scene = ctx.scene
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact,
                       **{**scene.solver_kwargs, "optimality_rel_tol": 1e-12, "cost_rel_tol": 1e-300,
                          "cost_abs_tol": 1e-300})
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    state = recorded_state(scene, q, v)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    out = state.copy()
    solver.step(state, out, scene.control, contacts, ctx.dt)
    (tmp_path / "box_corners_slide.json").write_text((DATA / "drake" / "box_corners_slide.json").read_text())
    path = write_trajectory(tmp_path / "tight.npz", scene="box_corners_slide.json", dt=ctx.dt,
                            q=np.vstack([q, out.joint_q[0]]), v=np.vstack([v, out.joint_qd[0]]), convention="sap")
    r = V.validate(path)
    d = r["one_step"]["diagnosis"]
    assert d is not None and d["cause"] == "newton_tolerance" and d["explained"], d
    assert r["verdict"] == "pass" and r["one_step"]["explained"]["newton_tolerance"] == 1


# ----------------------------------------------------------------------------- rollout mode


def test_rollout_passes_within_the_sensitivity_bar():
    r = V.validate(DATA / "drake" / "sphere_slide.json", mode="rollout", steps=300)
    o = r["rollout"]
    assert r["verdict"] == "pass" and o["max_dq"] < 1e-12 < o["sensitivity_drift_q"]


def test_rollout_of_a_broken_implementation_leaves_the_envelope(half_friction):
    o = V.validate(DATA / "drake" / "sphere_slide.json", mode="rollout", steps=50)["rollout"]
    assert o["verdict"] == "FAIL" and o["first_failing_step"] == 1 and "FCL's MPR" not in o["message"]


def test_rollout_on_an_mpr_pair_follows_another_contact_point_and_says_so():
    # No allowance in rollout mode: mesh_rock's free trajectory leaves the envelope at once, and the
    # message names the FCL-MPR pair as the reason to look at.
    o = V.validate(DATA / "drake" / "mesh_rock.json", mode="rollout", steps=5)["rollout"]
    assert o["verdict"] == "FAIL" and o["first_failing_step"] == 1
    assert "a pair Drake computes with FCL's MPR" in o["message"]


# ----------------------------------------------------------------------------- reports


def test_json_and_junit_reports_are_well_formed(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    q, v = V.make_context(DATA / "drake" / "prismatic_pd.json")[0].q_rows[:6], None
    ctx = V.make_context(DATA / "drake" / "prismatic_pd.json")[0]
    v = ctx.v_rows[:6].copy()
    v[3] += 1e-6  # a wrong velocity in row 3
    (tmp_path / "prismatic_pd.json").write_text((DATA / "drake" / "prismatic_pd.json").read_text())
    write_trajectory(bad, scene="prismatic_pd.json", dt=ctx.dt, q=q, v=v, convention="sap", engine="broken")
    junit = tmp_path / "report.xml"
    code = V.main([str(DATA / "drake" / "prismatic_pd.json"), str(bad), "--steps", "5", "--quiet", "--json",
                   "--junit", str(junit)])
    assert code == 1
    out = capsys.readouterr().out.strip().splitlines()
    report = json.loads(out[-1])
    assert report["verdict"] == "FAIL" and [r["verdict"] for r in report["reports"]] == ["pass", "FAIL"]
    assert report["reports"][1]["one_step"]["diagnosis"]["step"] == 3  # row 3 is the result of step 3
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    suites = root.findall("testsuite")
    assert [s.get("failures") for s in suites] == ["0", "1"]
    failure = suites[1].find("testcase/failure")
    assert failure is not None and "step 3" in failure.get("message")
    assert suites[0].find("testcase").get("name") == "one-step [sap_ref]"


def test_usage_errors_are_one_line(capsys, tmp_path):
    assert V.main([str(DATA / "drake" / "prismatic_pd.json"), "--every", "0"]) == 2
    assert V.main([str(tmp_path / "missing.npz")]) == 2
    assert V.main([str(DATA / "drake" / "prismatic_pd.json"), "--junit", str(tmp_path / "no" / "r.xml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("sap-validate: error: ") for line in err)
    assert "--every" in err[0] and "no such trajectory file" in err[1] and "--junit" in err[2]


# ----------------------------------------------------------------------------- other writers


def test_the_user_trajectory_example_validates(tmp_path):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "examples" / "user_trajectory.py"
    spec = importlib.util.spec_from_file_location("user_trajectory", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = example.write(str(tmp_path / "pendulum.npz"))  # what example.main writes, then validates
    r = V.validate(out, mode="both")
    assert r["verdict"] == "pass" and r["one_step"]["max_dv"] <= 1e-15


def _record_mujoco_ball(tmp_path, height: float, steps: int) -> str:
    """A MuJoCo recording of a 0.1 m ball released at ``height`` above a ground plane."""
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco

    xml = tmp_path / "ball.xml"
    xml.write_text('<mujoco><option timestep="0.001"/><worldbody><geom name="ground" type="plane" size="2 2 .1"/>'
                   f'<body name="ball" pos="0 0 {height}"><freejoint/><geom type="sphere" size="0.1" mass="1"/>'
                   '</body></worldbody></mujoco>')
    return record_mujoco(str(xml), str(tmp_path), steps=steps)


def test_mujoco_recording_is_judged_by_statistics(tmp_path):
    path = _record_mujoco_ball(tmp_path, 0.2, steps=300)
    r = V.validate(path, mode="both")
    s = r["statistics"]
    assert r["engine"] == "mujoco" and r["verdict"] == "pass" and "one_step" not in r
    assert s["contact_free_max_rel_residual"] <= V.MUJOCO_FREE_RTOL and s["contact_steps"] > 100
    assert s["contact_free_max_rel_dv"] <= V.MUJOCO_FREE_RTOL  # no actuator: the two schemes are one
    assert s["contact_pairs_agree_share"] >= V.MUJOCO_CONTACT_AGREEMENT
    assert r["rollout_statistics"]["verdict"] == "not judged"


def test_a_mujoco_recording_without_a_contact_free_step_judges_nothing_and_does_not_pass(tmp_path, capsys):
    """A ball resting on the ground from the first step: every step has contact, so the dynamics are
    not judged at all; the verdict says so and is not a pass, whatever the contact pairs say."""
    path = _record_mujoco_ball(tmp_path, 0.099, steps=40)  # resting on the ground: in contact from step 0
    r = V.validate(path, mode="both")
    s = r["statistics"]
    assert s["contact_free_steps"] == 0 and s["contact_steps"] == s["steps_checked"] > 0
    assert s["verdict"] == "FAIL" and r["verdict"] == "FAIL"
    assert s["message"].startswith(f"judged nothing of the dynamics: none of the {s['steps_checked']} steps")
    assert V.main([path, "--quiet"]) == 1  # the command's status and its report say the same
    out = capsys.readouterr().out
    assert s["message"] in out and "0 of 1 passed" in out


def test_sap_gpu_stage_table_compares_it_with_sap_ref_first(device):
    from sap_tools.validate.diagnose import stage_table

    ctx, _ = V.make_context(DATA / "drake" / "box_corners_slide.json", backend="gpu", device=device)
    stages = stage_table(ctx, 300)
    names = [s.name for s in stages]
    gpu_rows = [n for n in names if n.startswith("sap_gpu vs sap_ref: ")]
    assert {"sap_gpu vs sap_ref: contact J", "sap_gpu vs sap_ref: v₁ [m/s, rad/s]"} <= set(gpu_rows)
    assert names.index(gpu_rows[-1]) < names.index("free motion: A(v₁ − v*) − h(τ_c + Bu) vs recorded momentum "
                                                   "residual [N·s]")
    assert all(s.ok for s in stages), [s for s in stages if not s.ok]


# ----------------------------------------------------------------------------- numbering, every failing step


def _prismatic_copy(tmp_path, rows=40, q_rows=(), v_rows=(), delta=1e-6):
    """prismatic_pd's first ``rows`` rows as a trajectory file, with the given rows of q or v moved by ``delta``."""
    ctx = V.make_context(DATA / "drake" / "prismatic_pd.json")[0]
    q, v = ctx.q_rows[:rows].copy(), ctx.v_rows[:rows].copy()
    for n in q_rows:
        q[n] += delta
    for n in v_rows:
        v[n] += delta
    (tmp_path / "prismatic_pd.json").write_text((DATA / "drake" / "prismatic_pd.json").read_text())
    return write_trajectory(tmp_path / "changed.npz", scene="prismatic_pd.json", dt=ctx.dt, q=q, v=v, convention="sap")


def test_one_step_numbering_in_both_modes(tmp_path, capsys):
    """A changed row 10 is step 10 in one-step mode and in rollout mode (row n is the state after
    step n); a q that differs on its own is not excused as a different Newton iterate."""
    path = _prismatic_copy(tmp_path, q_rows=[10])
    r = V.validate(path, mode="both")
    o, ro = r["one_step"], r["rollout"]
    assert o["first_failing_step"] == o["diagnosis"]["step"] == ro["first_failing_step"] == 10
    assert [f["step"] for f in o["failing"]] == [10, 11]  # into the changed row, and out of it
    assert [f["step"] for f in ro["failing"]] == [10]
    assert o["verdict"] == "FAIL" and o["explained"]["newton_tolerance"] == 0 and o["diagnosis"]["cause"] == "step"
    text = V._text(r)
    assert "differs at step 10" in text and "leaves the sensitivity envelope at step 10" in text
    assert "failing steps (2 over the bar): 10 (the step differs" in text


def test_every_failing_step_is_reported(tmp_path):
    rows = [3, 8, 12, 15, 18, 21, 24, 27, 30, 33, 36]  # a changed velocity fails the steps into and out of its row
    steps = sorted({n for r in rows for n in (r, r + 1)})
    path = _prismatic_copy(tmp_path, v_rows=rows, delta=1e-3)
    r = V.validate(path, max_diagnoses=4)
    o = r["one_step"]
    assert [f["step"] for f in o["failing"]] == steps and o["failing_steps"] == len(steps) == 22
    assert [f["cause"] for f in o["failing"]][4:] == ["undiagnosed"] * (len(steps) - 4)
    assert o["undiagnosed"] == len(steps) - 4 and o["verdict"] == "FAIL"
    line = next(ln for ln in V._text(r).splitlines() if "failing steps" in ln)
    assert line.strip().startswith(f"failing steps ({len(steps)} over the bar): 3 (")
    assert line.count("× the bar)") == V.LISTED_STEPS and line.endswith("and 12 more (--json lists every one)")


@pytest.mark.parametrize("damage", ["empty", "truncated", "a damaged array", "not a zip"])
def test_an_unreadable_npz_is_a_one_line_error_naming_it(tmp_path, capsys, damage):
    good = _prismatic_copy(tmp_path, rows=5)
    data = open(good, "rb").read()
    bad = tmp_path / "bad.npz"
    if damage == "empty":
        bad.write_bytes(b"")
    elif damage == "truncated":
        bad.write_bytes(data[:len(data) // 2])
    elif damage == "a damaged array":  # the zip directory intact, a compressed member's bytes not
        i = data.index(b"q.npy") + 200
        bad.write_bytes(data[:i] + bytes(b ^ 0xFF for b in data[i:i + 64]) + data[i + 64:])
    else:
        bad.write_text("q, v\n1, 2\n")
    assert V.main([str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sap-validate: error: {bad}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_a_drake_recording_with_a_truncated_npz_names_the_npz(tmp_path, capsys):
    for ext in ("json", "npz"):
        (tmp_path / f"sphere_drop.{ext}").write_bytes((DATA / "drake" / f"sphere_drop.{ext}").read_bytes())
    npz = tmp_path / "sphere_drop.npz"
    npz.write_bytes(npz.read_bytes()[:1000])
    assert V.main([str(tmp_path / "sphere_drop.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sap-validate: error: {npz}: not an .npz archive") and err.count("\n") == 1


# ----------------------------------------------------------------------------- MuJoCo recordings with drives

QUADRUPED = DATA.parent.parent / "sap_common" / "data" / "mesh_quadruped.xml"


def _moving_quadruped(tmp_path, kv="1"):
    """The shipped quadruped high in the air (no contact for 0.2 s) with two joints whose ``ref`` puts
    them away from the actuators' target, so the drives move the legs in every contact-free step."""
    text = QUADRUPED.read_text().replace('<body name="torso" pos="0 0 0.295">', '<body name="torso" pos="0 0 3">')
    text = text.replace('name="fl_hip" type="hinge" axis="0 1 0" range="-1 1"',
                        'name="fl_hip" type="hinge" axis="0 1 0" range="-1 1" ref="0.4"')
    text = text.replace('name="hr_knee" type="hinge" axis="0 1 0" range="-2 0.2"',
                        'name="hr_knee" type="hinge" axis="0 1 0" range="-2 0.2" ref="-0.5"')
    path = tmp_path / "moving.xml"
    path.write_text(text.replace('kv="1"', f'kv="{kv}"'))
    return path


def test_the_shipped_quadruped_recorded_with_mujocos_euler_validates(tmp_path):
    """MuJoCo's Euler applies the position actuators' kv explicitly: its velocity update of this
    model has a mode growing ×3.85 per step, so the recording's joint velocities grow from round-off
    to ~1e-7 in free fall, where SAP's implicit drives keep them at round-off. The raw difference is
    over the 1e-9 bar; MuJoCo's step computed from this project's dynamics matches to round-off."""
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import explicit_damping_growth, record_mujoco

    path = record_mujoco(str(QUADRUPED), str(tmp_path), steps=20)  # the model's own integrator: Euler
    r = V.validate(path)
    s = r["statistics"]
    assert s["integrator"] == "Euler" and s["contact_free_steps"] >= 15
    assert s["contact_free_max_rel_dv"] > 100 * V.MUJOCO_FREE_RTOL  # the measured 4.1e-7 of free fall
    assert s["contact_free_expected_rel_dv"] == pytest.approx(s["contact_free_max_rel_dv"], rel=1e-6)
    assert s["contact_free_max_rel_residual"] <= 1e-3 * V.MUJOCO_FREE_RTOL and r["verdict"] == "pass"
    scene = load_mjcf(str(QUADRUPED))
    assert explicit_damping_growth(scene.mj_model, "Euler") == pytest.approx(3.85, abs=0.01)
    assert explicit_damping_growth(scene.mj_model, "implicitfast") == 0.0
    # A file without the integrator field (an older sap-record) takes the model's own: Euler.
    fields = dict(np.load(path))
    del fields["integrator"]
    np.savez(tmp_path / "old.npz", **fields)
    assert V.validate(tmp_path / "old.npz")["statistics"]["integrator"] == "Euler"


def test_the_shipped_quadruped_recorded_with_implicitfast_agrees_to_the_bar(tmp_path):
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco

    path = record_mujoco(str(QUADRUPED), str(tmp_path), steps=20, integrator="implicitfast")
    s = V.validate(path)["statistics"]
    assert s["integrator"] == "implicitfast" and s["contact_free_max_rel_dv"] <= 1e-3 * V.MUJOCO_FREE_RTOL


@pytest.mark.parametrize("integrator, steps", [("implicitfast", 30), ("euler", 8)])
def test_moving_drives_differ_by_the_derived_scheme_difference_only(tmp_path, integrator, steps):
    """With the legs driven through every step the schemes part by far more than the bar (SAP's drive
    is implicit in q and v, MuJoCo's not, or in v only); taken out, round-off is left."""
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco

    path = record_mujoco(str(_moving_quadruped(tmp_path)), str(tmp_path), steps=steps, integrator=integrator)
    s = V.validate(path)["statistics"]
    assert s["contact_free_steps"] == steps and s["contact_free_max_rel_dv"] > 1e-3
    assert s["contact_free_max_rel_residual"] <= 1e-3 * V.MUJOCO_FREE_RTOL


def test_a_wrong_drive_gain_still_fails_the_mujoco_bar(tmp_path):
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco

    path = record_mujoco(str(_moving_quadruped(tmp_path)), str(tmp_path), steps=10, integrator="implicitfast")
    _moving_quadruped(tmp_path, kv="1.01")  # the scene the file names now has other gains than MuJoCo ran
    r = V.validate(path)
    assert r["verdict"] == "FAIL" and r["statistics"]["contact_free_max_rel_residual"] > 1e3 * V.MUJOCO_FREE_RTOL


def test_an_unstable_mujoco_run_is_not_recorded(tmp_path):
    """Left to Euler, the driven legs blow up and MuJoCo resets the simulation: no trajectory."""
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco

    with pytest.raises(ValueError, match=r"MuJoCo found the simulation unstable in step \d+ .* not written"):
        record_mujoco(str(_moving_quadruped(tmp_path)), str(tmp_path), steps=40, integrator="euler")
    assert not list(tmp_path.glob("*.npz"))


def test_a_mujoco_integrator_without_a_derived_step_is_refused(tmp_path):
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco

    path = record_mujoco(str(QUADRUPED), str(tmp_path), steps=5)
    fields = dict(np.load(path))
    fields["integrator"] = np.array("RK4")
    np.savez(path, **fields)
    with pytest.raises(ValueError, match=r"integrator: 'RK4': sap-validate derives MuJoCo's Euler and implicitfast"):
        V.validate(path)
    rk4 = tmp_path / "rk4.xml"
    rk4.write_text(QUADRUPED.read_text().replace('<option timestep="0.002"/>',
                                                  '<option timestep="0.002" integrator="RK4"/>'))
    with pytest.raises(ValueError, match=r"--integrator: the model's integrator is RK4"):
        record_mujoco(str(rk4), str(tmp_path))
