"""Holonomic constraints (coupler, distance, ball, weld, axis alignment): the builder's and the
model's checks, the constraint functions and Jacobians against finite differences, Drake's
regularization, the scene-file round trip and sap_ref steps on the built-in scenes
(docs/formulation.md § Holonomic constraints)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import random_constrained_models

from sap_common import scenes, spatial
from sap_common.builder import ModelBuilder, solid_sphere_inertia
from sap_common.constants import HOLONOMIC_BETA
from sap_common.io.json_scene import load_json
from sap_common.io.scene import LoadedScene
from sap_common.model import ConstraintType, SapModel
from sap_common.rows import RowKind
from sap_ref.collision import CollisionPipeline
from sap_ref.free_motion import free_motion
from sap_ref.holonomic import constraint_kinematics, holonomic_constraints, rotation_vector
from sap_ref.integration import sap_euler
from sap_ref.kinematics import body_jacobians, forward_kinematics, motion_subspaces
from sap_ref.solver import SolverSAP
from sap_tools.record.spec import scene_to_spec

# Central differences of g along v with step EPS: truncation O(EPS²·|g'''|) and rounding
# O(1e-16/EPS) stay below FD_TOL relative to max(1, |J v|).
EPS = 1e-6
FD_TOL = 1e-6


def _two_links() -> ModelBuilder:
    """World → hinge → link0 → hinge → link1, a free body, and a body welded to the world."""
    b = ModelBuilder()
    for i in range(3):
        b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1), name=f"link{i}")
    b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1), name="anchor")
    b.add_joint_revolute(-1, 0, spatial.transform((0, 0, 1)), axis=(0, 1, 0), name="hinge0")
    b.add_joint_revolute(0, 1, spatial.transform((0.3, 0, 0)), axis=(0, 1, 0), name="hinge1")
    b.add_joint_free(-1, 2, name="free")
    b.add_joint_fixed(-1, 3, spatial.transform((1, 0, 1)), name="anchor_weld")
    return b


# ----------------------------------------------------------------------------- builder and model

BUILDER_ERRORS = {
    "coupler joint out of range": (lambda b: b.add_coupler(0, 9, 2.0), r"joint1 must be a joint index in \[0, 4\)"),
    "coupler free joint": (lambda b: b.add_coupler(0, 2, 2.0),
                           r"joint1 'free' is a FREE joint with 6 DOFs; a coupler needs single-DOF joints"),
    "coupler weld joint": (lambda b: b.add_coupler(3, 0, 2.0), r"joint0 'anchor_weld' is a FIXED joint"),
    "coupler same joint": (lambda b: b.add_coupler(1, 1, 2.0), r"joint0 and joint1 must differ"),
    "coupler ratio nan": (lambda b: b.add_coupler(0, 1, float("nan")), r"gear_ratio must be a finite number"),
    "coupler offset string": (lambda b: b.add_coupler(0, 1, 1.0, "0"), r"offset must be a finite number"),
    "distance unknown body": (lambda b: b.add_distance(0, (0, 0, 0), 7, (0, 0, 0), 0.5),
                              r"body_b must be -1 \(world\) or a body index in \[0, 4\), got 7"),
    "distance same body": (lambda b: b.add_distance(1, (0, 0, 0), 1, (0, 0, 0), 0.5), r"body_a and body_b must differ"),
    "distance negative stiffness": (lambda b: b.add_distance(0, (0, 0, 0), 1, (0, 0, 0), 0.5, -3.0),
                                    r"stiffness must be > 0 N/m \(inf = rigid\), got -3\.0"),
    "distance zero stiffness": (lambda b: b.add_distance(0, (0, 0, 0), 1, (0, 0, 0), 0.5, 0.0),
                                r"stiffness must be > 0 N/m"),
    "distance negative damping": (lambda b: b.add_distance(0, (0, 0, 0), 1, (0, 0, 0), 0.5, 10.0, -1.0),
                                  r"damping must be finite and >= 0"),
    "distance zero length": (lambda b: b.add_distance(0, (0, 0, 0), 1, (0, 0, 0), 0.0),
                             r"distance must be finite and > 0 m"),
    "distance point of 2": (lambda b: b.add_distance(0, (0, 0), 1, (0, 0, 0), 0.5), r"p_ap must be a finite 3-vector"),
    "ball point nan": (lambda b: b.add_ball(0, (0, 0, 0), 1, (0, np.nan, 0)), r"p_bq must be a finite 3-vector"),
    "ball body bool": (lambda b: b.add_ball(True, (0, 0, 0), 1), r"body_a must be -1 \(world\) or a body index"),
    "weld bad pose": (lambda b: b.add_weld(0, (0, 0, 0), 1, None), r"X_ap must be a transform"),
    "weld zero quaternion": (lambda b: b.add_weld(0, None, 1, (0, 0, 0, 0, 0, 0, 0)),
                             r"X_bq quaternion .* must be non-zero"),
    "axis zero": (lambda b: b.add_axis_alignment(0, None, 1, None, (0, 0, 0)), r"axis must be a non-zero finite"),
}


@pytest.mark.parametrize("case", sorted(BUILDER_ERRORS))
def test_builder_refuses_bad_constraints(case):
    make, message = BUILDER_ERRORS[case]
    with pytest.raises(ValueError, match=message):
        make(_two_links())


@pytest.mark.parametrize("add", [
    lambda b: b.add_ball(-1, (0, 0, 0), 3, (0, 0, 0)),
    lambda b: b.add_weld(3, None, -1, None),
    lambda b: b.add_distance(3, (0, 0, 0), -1, (0, 0, 1), 1.0),
])
def test_a_constraint_between_static_bodies_is_refused_at_finalize(add):
    b = _two_links()
    add(b)
    with pytest.raises(ValueError, match=r"both bodies are the world or welded to it"):
        b.finalize()


def test_model_checks_the_raw_fields():
    m = _two_links().finalize()
    kwargs = {f.name: getattr(m, f.name) for f in m.__dataclass_fields__.values()
              if f.init and not f.name.startswith("constraint_")}
    with pytest.raises(ValueError, match=r"constraint_type\[0\] \(constraint_0\): 9 is not a ConstraintType; "
                                         r"valid: COUPLER=0, DISTANCE=1, BALL=2, WELD=3, AXIS_ALIGN=4"):
        SapModel(**{**kwargs, "constraint_type": [9]})
    with pytest.raises(ValueError, match=r"constraint_joint1\[0\] \(constraint_0\): joint 'free' is a FREE joint"):
        SapModel(**{**kwargs, "constraint_type": [0], "constraint_joint0": [0], "constraint_joint1": [2]})
    with pytest.raises(ValueError, match=r"constraint_length\[0\] \(constraint_0\): the free length must be finite"):
        SapModel(**{**kwargs, "constraint_type": [1], "constraint_body_a": [0], "constraint_body_b": [1]})
    with pytest.raises(ValueError, match=r"constraint_body_b\[0\] \(constraint_0\): 4 is not a body index"):
        SapModel(**{**kwargs, "constraint_type": [2], "constraint_body_a": [0], "constraint_body_b": [4]})


def test_rows_and_the_initial_state_ball_anchor():
    b = _two_links()
    b.add_coupler(1, 0, -2.0, 0.1, name="gear")
    b.add_distance(0, (0.3, 0, 0), 3, (0, 0, 0), 0.5, 1e3, 5.0, name="spring")
    ball = b.add_ball(1, (0.2, 0, 0), 2, name="pin")
    b.add_weld(2, None, 3, spatial.transform((0, 0.1, 0)), name="glue")
    b.add_axis_alignment(0, None, 2, None, (0, 0, 2), name="hinge")
    m = b.finalize()
    assert m.constraint_count == 5 and m.constraint_row_start.tolist() == [0, 1, 2, 5, 11, 13]
    assert m.constraint_index("pin") == ball and m.constraint_axis[4].tolist() == [0, 0, 1]
    # p_BQ of "pin": the free body's point at P's initial position (hinges at 0: P at (0.5, 0, 1)).
    poses = forward_kinematics(m, m.joint_q_init)
    p_WQ = spatial.transform_point(poses[2], m.constraint_X_b[ball, :3])
    np.testing.assert_allclose(p_WQ, [0.5, 0.0, 1.0], atol=1e-15)
    assert "constraint 0 'gear': COUPLER hinge1 = -2·hinge0 + 0.1 (rows 0:1)" in m.summary()


# ----------------------------------------------------------------------------- g and J


def _kinematics(model, q, k):
    body_q = forward_kinematics(model, q)
    J_b = body_jacobians(model, q, body_q, motion_subspaces(model, q, body_q))
    return constraint_kinematics(model, k, q, body_q, J_b)


def _aligned(model: SapModel, q) -> SapModel:
    """The model with every weld's and axis alignment's frame Q moved onto frame P at q (θ = 0,
    where the rotation rows' rate is exactly the relative angular velocity)."""
    body_q = forward_kinematics(model, q)
    X_b = model.constraint_X_b.copy()
    for k in range(model.constraint_count):
        if ConstraintType(int(model.constraint_type[k])) in (ConstraintType.WELD, ConstraintType.AXIS_ALIGN):
            a, b = model.constraint_body_a[k], model.constraint_body_b[k]
            X_WA = spatial.transform_identity() if a < 0 else body_q[a]
            X_WB = spatial.transform_identity() if b < 0 else body_q[b]
            X_WP = spatial.transform_compose(X_WA, model.constraint_X_a[k])
            X_b[k] = spatial.transform_compose(spatial.transform_inverse(X_WB), X_WP)
    kwargs = {f.name: getattr(model, f.name) for f in model.__dataclass_fields__.values() if f.init}
    return SapModel(**{**kwargs, "constraint_X_b": X_b})


@settings(max_examples=60, deadline=None)
@given(random_constrained_models(max_bodies=4, holonomic=True))
def test_jacobian_is_the_rate_of_g(case):
    """J v = d/dε g(q ⊕ εv) by central differences, for every type (welds and axis alignments at
    aligned frames, where their rotation rows are exact rates)."""
    model, q, _ = case
    model = _aligned(model.replicate(1), q)
    v = np.random.default_rng(0).normal(size=model.joint_dof_count)
    for k in range(model.constraint_count):
        g, J, ok = _kinematics(model, q, k)
        if not ok:
            continue
        g_plus = _kinematics(model, sap_euler(model, q, v, EPS), k)[0]
        g_minus = _kinematics(model, sap_euler(model, q, v, -EPS), k)[0]
        fd = (g_plus - g_minus) / (2 * EPS)
        np.testing.assert_allclose(J @ v, fd, atol=FD_TOL * max(1.0, np.abs(J @ v).max()),
                                   err_msg=ConstraintType(int(model.constraint_type[k])).name)


@pytest.mark.parametrize("hinge", [(1.0, 2.0, 0.5), (2.0, 1.0, 0.5), (1.0, -1.0, 0.0)])
def test_axis_alignment_rows_are_smooth_where_the_axes_lie_along_a_world_axis(hinge):
    """Axes aligned along world z: their bisector m̂ = z has two tied smallest components, where a
    tangent basis built from m̂ would turn by 90° between q and q ± εv. The rows' basis is frame P's
    (R_WP times the tangents of â) and moves with the poses, so J v is still the rate of g (found by
    the random search: an axis alignment of a hinged body to the world at identity frames)."""
    b = ModelBuilder()
    b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1), name="link")
    b.add_joint_revolute(-1, 0, axis=np.asarray(hinge) / np.linalg.norm(hinge), name="hinge")
    b.add_axis_alignment(0, None, -1, None, axis=(0, 0, 1))
    m = b.finalize()
    q, v = m.joint_q_init.copy(), np.array([0.7])
    g, J, ok = _kinematics(m, q, 0)
    assert ok and np.all(g == 0.0)
    fd = (_kinematics(m, sap_euler(m, q, v, EPS), 0)[0] - _kinematics(m, sap_euler(m, q, v, -EPS), 0)[0]) / (2 * EPS)
    np.testing.assert_allclose(J @ v, fd, atol=FD_TOL * max(1.0, np.abs(J @ v).max()))
    # Away from alignment the rows stay a smooth function too: g at ±ε about a tilted pose.
    q1 = sap_euler(m, q, v, 0.3)
    g0 = _kinematics(m, q1, 0)[0]
    gp, gm = (_kinematics(m, sap_euler(m, q1, v, e), 0)[0] for e in (EPS, -EPS))
    np.testing.assert_allclose(0.5 * (gp + gm), g0, atol=FD_TOL)


def test_exactly_opposite_axes_are_half_a_turn_out_in_both_backends():
    """a_P = −a_Q exactly (a frame turned by π about x, its z against the world's): a_P × a_Q is
    exactly 0, which once read as aligned (g = 0). The swing is π along t̂₁ instead, |g| = π, the
    same in sap_gpu (found by the random search)."""
    import sap_gpu

    b = ModelBuilder()
    b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1))
    b.add_joint_revolute(-1, 0, axis=(0.0, 1.0, 0.0))
    b.add_axis_alignment(0, np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]), -1, None, axis=(0, 0, 1))
    m = b.finalize()
    q = m.joint_q_init.copy()
    g, J, ok = _kinematics(m, q, 0)
    assert ok and np.linalg.norm(g) == pytest.approx(math.pi, abs=1e-15)
    state, control = m.state(), m.control()
    gpu = sap_gpu.SolverSAP(m, max_rigid_contact=4, device="cpu")
    pipeline = sap_gpu.CollisionPipeline(m, 4, gpu.config, device="cpu")
    contacts, s = pipeline.contacts(), sap_gpu.to_device(state, "cpu")
    pipeline.collide(s, contacts)
    gpu.step(s, s, sap_gpu.to_device(control, "cpu"), contacts, 1e-3)
    np.testing.assert_allclose(gpu.work.holonomic_g0.numpy()[0], g, atol=1e-15)


def test_weld_function_is_drakes_angle_axis_and_offset():
    b = _two_links()
    X_AP = spatial.transform((0.1, 0.2, 0.0), spatial.quat_from_axis_angle((0, 0, 1), 0.3))
    b.add_weld(0, X_AP, 2, None)
    m = b.finalize()
    q = m.joint_q_init.copy()
    g, J, _ = _kinematics(m, q, 0)
    body_q = forward_kinematics(m, q)
    X_WP = spatial.transform_compose(body_q[0], X_AP)
    # R_PQ = R_WPᵀ R_WQ is a −0.3 rad turn about P's z (Q is the free body's frame, world-aligned).
    np.testing.assert_allclose(g[:3], spatial.quat_rotate(X_WP[3:], [0, 0, -0.3]), atol=1e-15)
    np.testing.assert_allclose(g[3:], body_q[2, :3] - X_WP[:3], atol=1e-15)
    np.testing.assert_allclose(rotation_vector(X_WP[3:], X_WP[3:]), 0.0, atol=0)
    # Past π the angle wraps as Eigen's AngleAxis does: θ ∈ [0, π].
    turn = spatial.quat_from_axis_angle((1, 0, 0), 1.5 * math.pi)
    np.testing.assert_allclose(rotation_vector(np.array([0, 0, 0, 1.0]), turn), [-0.5 * math.pi, 0, 0], atol=1e-14)


# ----------------------------------------------------------------------------- regularization


def test_drakes_regularization_near_rigid_and_compliant():
    """Rigid rows: R = β²/(4π²)·w with one w = ‖J diag(A)⁻¹ Jᵀ‖_F/n per constraint and v̂ = −g/(2h)
    (τ = h); a compliant distance: R = 1/(h(h + τ)k) with τ = c/k and v̂ = −g/(h + τ)."""
    b = _two_links()
    b.add_ball(1, (0.2, 0, 0), 2, (0.05, 0, 0))
    b.add_distance(0, (0.3, 0, 0), 3, (0, 0, 0.4), 0.5, 2e3, 10.0)
    b.add_weld(2, None, 3, spatial.transform((0, 0.1, 0)))
    m = b.finalize()
    q, v = m.joint_q_init.copy(), np.zeros(m.joint_dof_count)
    h = 1e-3
    fm = free_motion(m, q, v, h)
    body_q = forward_kinematics(m, q)
    J_b = body_jacobians(m, q, body_q, motion_subspaces(m, q, body_q))
    rows = holonomic_constraints(m, q, fm.A, h, body_q, J_b)
    Ainv = 1.0 / np.diag(fm.A)
    for k, (r0, r1) in enumerate(zip(m.constraint_row_start[:-1], m.constraint_row_start[1:])):
        J = rows.J[r0:r1]
        w = np.linalg.norm(J @ np.diag(Ainv) @ J.T) / (r1 - r0)
        np.testing.assert_allclose(rows.w[r0:r1], w, rtol=1e-15)
        if k == 1:  # the spring: compliant (R_comp = 5e-2 ≫ R_nr)
            tau = 10.0 / 2e3
            np.testing.assert_allclose(rows.R[r0], 1.0 / (h * (h + tau) * 2e3), rtol=1e-15)
            np.testing.assert_allclose(rows.v_hat[r0], -rows.g0[r0] / (h + tau), rtol=1e-15)
            assert not rows.near_rigid[r0]
        else:
            np.testing.assert_allclose(rows.R[r0:r1], HOLONOMIC_BETA**2 / (4 * math.pi**2) * w, rtol=1e-15)
            np.testing.assert_allclose(rows.v_hat[r0:r1], -rows.g0[r0:r1] / (2 * h), rtol=1e-15)
            assert rows.near_rigid[r0:r1].all()


def test_a_distance_too_short_for_a_direction_is_left_out():
    b = _two_links()
    b.add_distance(1, (0.0, 0, 0), 2, (0, 0, 0), 0.5)
    m = b.finalize()
    q = m.joint_q_init.copy()
    body_q = forward_kinematics(m, q)
    q[2:5] = spatial.transform_point(body_q[1], (0, 0, 0))  # the free body's origin onto P
    g, J, ok = _kinematics(m, q, 0)
    assert not ok and np.all(J == 0) and np.all(g == 0)


# ----------------------------------------------------------------------------- scene files


@pytest.mark.parametrize("name", ["geared_pair", "rope_box", "fourbar", "weld_drop"])
def test_scene_spec_round_trip(name):
    """The scene writer's ``constraints`` list, read back by load_json, gives the same constraints."""
    scene = scenes.get(name)
    spec = json.loads(json.dumps(scene_to_spec(scene)))
    assert [c["type"] for c in spec["constraints"]] == [
        ConstraintType(int(t)).name.lower() for t in scene.sap_model.constraint_type]
    # The spec lacks what a recording adds (q_start, v_start, nq, nv): add them in Drake's order.
    qs = vs = 0
    sizes = {"quaternion_floating": (7, 6), "revolute": (1, 1), "prismatic": (1, 1), "weld": (0, 0)}
    for j in spec["joints"]:
        nq, nv = sizes[j["type"]]
        j.update(q_start=qs, v_start=vs, nq=nq, nv=nv)
        j.setdefault("frame_on_parent_F", {"X_PF": {"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 1]}})
        j.setdefault("frame_on_child_M", {"X_CM": {"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 1]}})
        qs, vs = qs + nq, vs + nv
    back = load_json(spec).sap_model
    m = scene.sap_model
    for f in ("constraint_type", "constraint_name", "constraint_body_a", "constraint_body_b", "constraint_X_a",
              "constraint_X_b", "constraint_gear_ratio", "constraint_offset", "constraint_length",
              "constraint_stiffness", "constraint_damping"):
        assert np.array_equal(getattr(m, f), getattr(back, f)), f
    joint_names = lambda mm, js: [mm.joint_name[j] if j >= 0 else None for j in js]  # noqa: E731
    assert joint_names(m, m.constraint_joint0) == joint_names(back, back.constraint_joint0)
    assert joint_names(m, m.constraint_joint1) == joint_names(back, back.constraint_joint1)


@pytest.mark.parametrize("add, feature", [
    (lambda b: b.add_axis_alignment(0, None, 2, None), "AXIS_ALIGN constraint"),
    (lambda b: b.add_ball(-1, (0, 0, 1), 2), "constraint on the world body"),
])
def test_scene_writer_refuses_what_drake_cannot_record(add, feature):
    b = _two_links()
    add(b)
    m = b.finalize()
    scene = LoadedScene(name="s", sap_model=m, state=m.state(), control=m.control(), dt=1e-3, num_steps=1,
                        max_rigid_contact=0, solver_kwargs={}, body_names=m.body_name, description="")
    with pytest.raises(ValueError, match=f"{feature} has no Drake counterpart"):
        scene_to_spec(scene)


# ----------------------------------------------------------------------------- sap_ref steps

# How far each built-in scene's constraint may drift over its first steps with sap_ref (drake
# preset), max over the rows of |g| [m or rad]: near-rigid rows close an error over a few steps
# (geared_pair starts 0.02 rad off) and then hold a steady error of the near-rigid compliance
# times the load (1.5e-7 rad for geared_pair under its lifted mass); the rope is a 5e3 N/m spring
# carrying a 1 kg box, so it stretches by about m·g/k ≈ 2 mm plus the swing's centripetal load.
SCENE_G_MAX = {"geared_pair": 1e-6, "rope_box": 5e-3, "fourbar": 1e-4, "weld_drop": 1e-4}


@pytest.mark.parametrize("name", sorted(SCENE_G_MAX))
def test_builtin_scene_keeps_its_constraint(name):
    scene = scenes.get(name)
    m, g_max = scene.sap_model, SCENE_G_MAX[name]
    solver = SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant="drake")
    pipe = CollisionPipeline(m, scene.max_rigid_contact, solver.config)
    state, contacts = scene.state.copy(), pipe.contacts()
    worst = 0.0
    for n in range(150):
        pipe.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        assert solver.last_status[0] & 1, f"step {n}: {solver.last_status[0]}"
        if n >= 50:
            q = state.joint_q[0]
            worst = max(worst, max(np.abs(_kinematics(m, q, k)[0]).max() for k in range(m.constraint_count)))
    assert worst <= g_max, worst
    r = solver.last_results[0]
    assert r.holonomic is not None and len(r.holonomic.R) == m.constraint_row_count
    # The constraint carries load: its impulses are not zero.
    gamma = r.solve.evaluation.row_gamma[r.problem.rows.rows(RowKind.HOLONOMIC)]
    assert len(gamma) == m.constraint_row_count and np.abs(gamma).max() > 0.0


@pytest.mark.parametrize("preset", ["drake", "approx64", "approx32"])
def test_ball_pendulum_in_every_preset(preset):
    """A free body hung from a welded anchor by a ball constraint swings on a circle (its distance
    to the anchor point stays put) in every preset."""
    b = ModelBuilder()
    anchor = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.05), name="anchor")
    bob = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.05), name="bob")
    b.add_joint_fixed(-1, anchor, spatial.transform((0, 0, 1)))
    b.add_joint_free(-1, bob, q0=(0.5, 0, 1, 0, 0, 0, 1))
    b.add_ball(anchor, (0, 0, 0), bob, (-0.5, 0, 0))
    m = b.finalize()
    solver = SolverSAP(m, max_rigid_contact=0, contact_preset_variant=preset)
    state = m.state()
    for _ in range(300):
        solver.step(state, state, m.control(), None, 1e-3)
    p = state.body_q[0, bob, :3]
    R = spatial.quat_to_matrix(state.body_q[0, bob, 3:])
    np.testing.assert_allclose(p + R @ np.array([-0.5, 0, 0]), [0, 0, 1], atol=2e-4)
    assert p[2] < 0.9  # it fell


# ----------------------------------------------------------------------------- MJCF <equality>

_MJCF_EQ = """<mujoco><worldbody>
  <body name="base" pos="0 0 1"><geom size="0.05"/>
    <body name="arm" pos="0.2 0 0"><joint name="hinge_a" type="hinge" axis="0 1 0" ref="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/></body>
    <body name="arm2" pos="-0.2 0 0"><joint name="hinge_b" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 -0.3 0 0" size="0.02"/></body></body>
  <body name="a" pos="0.3 0.1 0.5" quat="0.9 0.1 0.3 0.2"><freejoint/><geom size="0.1"/></body>
  <body name="b" pos="0.5 0.2 0.8" quat="0.7 -0.2 0.1 0.4"><freejoint/><geom size="0.1"/></body>
</worldbody>
<equality>
  <connect name="pin" body1="a" body2="arm" anchor="0.1 0.2 0.3"/>
  <weld name="glue" body1="a" body2="b" anchor="0.05 0 0.1"/>
  <joint name="gear" joint1="hinge_b" joint2="hinge_a" polycoef="0.2 -0.5 0 0 0"/>
  <weld name="off" body1="b" body2="arm2" active="false"/>
  EXTRA
</equality></mujoco>"""


def test_mjcf_equalities_map_to_ball_weld_and_coupler():
    from sap_common.io.mjcf import load_mjcf

    with pytest.warns(UserWarning, match=r"inactive equality constraints .* left out: \['off'\]"):
        scene = load_mjcf(_MJCF_EQ.replace("EXTRA", ""))
    m = scene.sap_model
    assert m.constraint_name == ("pin", "glue", "gear")
    assert [ConstraintType(int(t)) for t in m.constraint_type] == [ConstraintType.BALL, ConstraintType.WELD,
                                                                   ConstraintType.COUPLER]
    assert m.constraint_gear_ratio[2] == -0.5 and m.constraint_offset[2] == 0.2
    assert m.joint_name[m.constraint_joint0[2]] == "hinge_b" and m.joint_name[m.constraint_joint1[2]] == "hinge_a"
    # MuJoCo compiled the connect's and the weld's partners at qpos0: both hold there.
    q = scene.state.joint_q[0]
    for k in (0, 1):
        np.testing.assert_allclose(_kinematics(m, q, k)[0], 0.0, atol=1e-12)


@pytest.mark.parametrize("extra, message", [
    ('<joint joint1="hinge_a" joint2="hinge_b" polycoef="0 1 0.3 0 0"/>', r"\(joint\): polycoef .* is not linear"),
    ('<joint joint1="hinge_a"/>', r"\(joint\): a joint equality with one joint"),
])
def test_mjcf_equalities_without_a_mapping_are_refused(extra, message):
    from sap_common.io.mjcf import load_mjcf

    xml = _MJCF_EQ.replace("EXTRA", extra).replace('<geom size="0.1"/></body>\n  <body name="b"',
                                                   '<geom size="0.1"/><site name="s1"/></body>\n  <body name="b"')
    xml = xml.replace('<body name="b" pos="0.5 0.2 0.8" quat="0.7 -0.2 0.1 0.4"><freejoint/>',
                      '<body name="b" pos="0.5 0.2 0.8" quat="0.7 -0.2 0.1 0.4"><freejoint/><site name="s2"/>')
    with pytest.raises(ValueError, match=r"load_mjcf: equality '.*' " + message):
        load_mjcf(xml)


# The geared_pair scene written as MJCF: the same bodies, hinges, motor (a velocity actuator,
# kv = 5 N·m·s, force range ±2 N·m) and the gear as a joint equality y = 0.1 − 0.5·x.
_GEARED_PAIR_MJCF = """<mujoco><option timestep="0.002"/><worldbody>
  <body name="motor_gear" pos="0 0 1"><inertial pos="0 0 0" mass="0.3" diaginertia="0.00075 0.0015 0.00075"/>
    <joint name="motor" type="hinge" axis="0 1 0" damping="0.01" armature="0.002"/></body>
  <body name="output_gear" pos="0.3 0 1"><inertial pos="0.05 0 0" mass="1.5" diaginertia="0.01 0.0275 0.0175"/>
    <joint name="output" type="hinge" axis="0 1 0" damping="0.01"/></body>
</worldbody>
<actuator><velocity joint="motor" kv="5" forcelimited="true" forcerange="-2 2"/></actuator>
<equality><joint name="gear_mesh" joint1="output" joint2="motor" polycoef="0.1 -0.5 0 0 0"/></equality>
</mujoco>"""


def test_mjcf_twin_of_geared_pair_gives_the_same_model():
    """The built-in geared_pair and its MJCF twin (MuJoCo compiles the inertias in float64 from
    the same numbers) describe the same model, coupler included."""
    from sap_common.io.mjcf import load_mjcf

    a, b = scenes.get("geared_pair").sap_model, load_mjcf(_GEARED_PAIR_MJCF).sap_model
    for f in ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child", "joint_X_p",
              "joint_X_c", "joint_axis", "joint_armature", "joint_damping", "joint_target_kd", "joint_effort_limit",
              "constraint_type", "constraint_joint0", "constraint_joint1", "constraint_gear_ratio",
              "constraint_offset", "constraint_stiffness", "constraint_row_start"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-15, atol=1e-15, err_msg=f)
    assert a.constraint_name == b.constraint_name == ("gear_mesh",)


# Site-based connect and weld on bodies at general poses (sites turned in their bodies).
_MJCF_SITE_EQ = """<mujoco><worldbody>
  <body name="base" pos="0 0 1"><geom size="0.05"/>
    <body name="arm" pos="0.2 0 0"><joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/>
      <site name="arm_tip" pos="0.3 0.01 -0.02" quat="0.9 0.1 -0.2 0.3"/></body></body>
  <body name="a" pos="0.5 0.1 0.9" quat="0.9 0.1 0.3 0.2"><freejoint/><geom size="0.1"/>
    <site name="a_pin" pos="-0.1 0.05 0.02"/><site name="a_glue" pos="0.05 0 0.1" quat="0.8 0.2 0.1 -0.3"/></body>
  <body name="b" pos="0.6 0.2 0.8" quat="0.7 -0.2 0.1 0.4"><freejoint/><geom size="0.1"/>
    <site name="b_glue" pos="-0.05 0.02 0" quat="0.6 0.3 -0.1 0.2"/></body>
</worldbody>
<equality><connect name="pin" site1="arm_tip" site2="a_pin"/><weld name="glue" site1="a_glue" site2="b_glue"/>
</equality></mujoco>"""
# g and MuJoCo's residuals are the same float64 kinematics in another operation order.
SITE_G_ATOL = 1e-12


def test_mjcf_site_equalities_are_mujocos_constraints():
    """A site-based connect is a ball and a site-based weld a weld between the two sites' frames:
    at random poses the ball's g and the weld's position rows are minus MuJoCo's residuals
    (site1 − site2), and the weld's rotation rows are the rotation vector from site1's frame to
    site2's, in world."""
    import mujoco
    from scipy.spatial.transform import Rotation

    from sap_common.io.mjcf import load_mjcf, mujoco_qpos_to_joint_q

    scene = load_mjcf(_MJCF_SITE_EQ)
    m = scene.sap_model
    assert [ConstraintType(int(t)) for t in m.constraint_type] == [ConstraintType.BALL, ConstraintType.WELD]
    mj = mujoco.MjModel.from_xml_string(_MJCF_SITE_EQ)
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(3)
    for _ in range(5):
        qpos = mj.qpos0 + rng.normal(scale=0.3, size=mj.nq)
        for a in (mj.jnt_qposadr[1] + 3, mj.jnt_qposadr[2] + 3):
            qpos[a:a + 4] /= np.linalg.norm(qpos[a:a + 4])
        d.qpos[:] = qpos
        mujoco.mj_forward(mj, d)
        eq_rows = np.asarray(d.efc_pos)[np.asarray(d.efc_type) == mujoco.mjtConstraint.mjCNSTR_EQUALITY]
        q = mujoco_qpos_to_joint_q(scene, qpos)
        g_ball, g_weld = (_kinematics(m, q, k)[0] for k in (0, 1))
        assert np.abs(g_ball).max() > 1e-2  # the poses really pull the sites apart
        np.testing.assert_allclose(g_ball, -eq_rows[0:3], atol=SITE_G_ATOL)
        np.testing.assert_allclose(g_weld[3:], -eq_rows[3:6], atol=SITE_G_ATOL)
        R1, R2 = (np.asarray(d.site_xmat[mj.site(name).id]).reshape(3, 3) for name in ("a_glue", "b_glue"))
        np.testing.assert_allclose(g_weld[:3], R1 @ Rotation.from_matrix(R1.T @ R2).as_rotvec(), atol=SITE_G_ATOL)


def _fourbar_mjcf() -> str:
    """The fourbar scene as MJCF: the same rods, hinges (damping 0.02 N·m·s), the rocker's range
    [−2.1, π] rad, and the loop as a site-based connect between the coupler's far end and the
    rocker's tip. The bodies sit at zero joint angles (MJCF's qpos0; the loop is open there)."""
    from sap_common.builder import rod_inertia

    def rod(name, m, length, pos, joint, extra=""):
        i = " ".join(repr(float(x)) for x in np.diag(rod_inertia(m, length, axis=0)))
        return (f'<body name="{name}" pos="{pos}">'
                f'<joint name="{joint}" type="hinge" axis="0 1 0" damping="0.02"{extra}/>'
                f'<inertial pos="{length / 2!r} 0 0" mass="{m!r}" diaginertia="{i}"/>')

    return ('<mujoco><compiler angle="radian"/><option timestep="0.002"/><worldbody>'
            + rod("crank", 0.5, 0.2, "0 0 1", "crank_hinge")
            + rod("coupler", 1.0, 0.45, "0.2 0 0", "coupler_hinge") + '<site name="coupler_end" pos="0.45 0 0"/>'
            + '</body></body>'
            + rod("rocker", 0.7, 0.35, "0.4 0 1", "rocker_hinge", f' range="-2.1 {math.pi!r}"')
            + '<site name="rocker_tip" pos="0.35 0 0"/></body>'
            + '</worldbody><equality><connect name="loop" site1="coupler_end" site2="rocker_tip"/></equality>'
            + '</mujoco>')


def _weld_drop_mjcf() -> str:
    """The weld_drop scene as MJCF: the two spheres' bodies at the scene's initial poses, the
    weld as a site-based weld between sites at the scene's frames P (on left) and Q (on right),
    the pair excluded from collision, a ground plane."""
    ra, rb, ma, mb = 0.05, 0.04, 0.5, 0.3
    X_AP = spatial.transform((0.1, 0.0, 0.0), spatial.quat_from_rpy((0.3, 0.0, 0.2)))
    X_BQ = spatial.transform((-0.1, 0.0, 0.0), spatial.quat_from_rpy((0.0, -0.4, 0.1)))
    X_WA = spatial.transform((0.0, 0.0, 0.4), spatial.quat_from_rpy((0.2, 0.5, -0.3)))
    X_WB = spatial.transform_compose(spatial.transform_compose(X_WA, X_AP), spatial.transform_inverse(X_BQ))
    pose = lambda X: (f'pos="{" ".join(repr(float(x)) for x in X[:3])}" '  # noqa: E731
                      f'quat="{" ".join(repr(float(x)) for x in (X[6], *X[3:6]))}"')
    ia = " ".join(repr(c * ma * ra * ra) for c in (0.4, 0.45, 0.5))
    ib = " ".join([repr(0.4 * mb * rb * rb)] * 3)
    return ('<mujoco><worldbody><geom name="ground" type="plane" size="0 0 1" friction="0.6"/>'
            f'<body name="left" {pose(X_WA)}><freejoint name="left"/><inertial pos="0 0 0" mass="{ma!r}" '
            f'diaginertia="{ia}"/><geom name="left_sphere" size="{ra!r}" friction="0.6"/>'
            f'<site name="P" {pose(X_AP)}/></body>'
            f'<body name="right" {pose(X_WB)}><freejoint name="right"/><inertial pos="0 0 0" mass="{mb!r}" '
            f'diaginertia="{ib}"/><geom name="right_sphere" size="{rb!r}" friction="0.6"/>'
            f'<site name="Q" {pose(X_BQ)}/></body>'
            '</worldbody><contact><exclude body1="left" body2="right"/></contact>'
            '<equality><weld name="weld" site1="P" site2="Q"/></equality></mujoco>')


# MuJoCo compiles the MJCF numbers in float64 and normalizes quaternions: a few ulps.
MJCF_TWIN_TOL = 1e-15


def _same_fields(a: SapModel, b: SapModel, fields) -> None:
    for f in fields:
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=MJCF_TWIN_TOL, atol=MJCF_TWIN_TOL, err_msg=f)


def test_mjcf_twin_of_fourbar_gives_the_same_model():
    """The built-in fourbar and its MJCF twin (the loop a site-based connect) describe the same
    model, the ball constraint and the rocker's limit stiffness included. Not compared: the
    initial angles (MJCF starts at qpos0 = 0, where the loop is open) and the limit's damping
    (load_mjcf gives every limit Drake's τ = 1 ms; the scene uses τ = h = 2 ms)."""
    from sap_common.io.mjcf import load_mjcf

    a, b = scenes.get("fourbar").sap_model, load_mjcf(_fourbar_mjcf()).sap_model
    _same_fields(a, b, ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child",
                        "joint_X_p", "joint_X_c", "joint_axis", "joint_damping", "joint_limit_lower",
                        "joint_limit_upper", "joint_limit_ke", "gravity", "constraint_type", "constraint_body_a",
                        "constraint_body_b", "constraint_X_a", "constraint_X_b", "constraint_row_start"))
    assert a.joint_name == b.joint_name and a.constraint_name == b.constraint_name == ("loop",)


def test_mjcf_twin_of_weld_drop_gives_the_same_model():
    """The built-in weld_drop and its MJCF twin (a site-based weld) describe the same model: bodies,
    free joints at the same initial poses, the weld's two frames, the spheres, the candidate pairs.
    Not compared: initial velocities (MJCF has none outside keyframes) and contact stiffness and
    damping (load_mjcf leaves them at the solver fallbacks)."""
    from sap_common.io.mjcf import load_mjcf

    a, b = scenes.get("weld_drop").sap_model, load_mjcf(_weld_drop_mjcf()).sap_model
    _same_fields(a, b, ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child",
                        "joint_X_p", "joint_X_c", "joint_q_init", "gravity", "constraint_type", "constraint_body_a",
                        "constraint_body_b", "constraint_X_a", "constraint_X_b", "constraint_row_start",
                        "shape_type", "shape_body", "shape_material_mu", "shape_pair"))
    np.testing.assert_allclose(a.shape_size[1:, 0], b.shape_size[1:, 0], rtol=0, atol=0)  # sphere radii
