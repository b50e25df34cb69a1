"""The quaternion policy, identical in sap_ref and sap_gpu (docs/conventions.md).

A quaternion read from a state (``joint_q`` of BALL and FREE/DISTANCE joints; ``body_q`` in
collision) is accepted when finite with QUAT_NORM_MIN ≤ |q| ≤ QUAT_NORM_MAX and normalized on
read. Any other quaternion flags its world INVALID_QUATERNION (plus NON_FINITE when NaN/inf);
that world is left unchanged bit for bit and every other world is bit-identical to a clean run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st

import sap_gpu
import sap_ref
from sap_common import ModelBuilder, spatial
from sap_common.builder import solid_box_inertia, solid_capsule_inertia
from sap_common.constants import QUAT_NORM_MAX, QUAT_NORM_MIN
from sap_common.conventions import joint_quaternions_ok, quaternion_coords, quaternion_norm_ok
from sap_common.kinematics import body_state
from sap_common.model import JointType
from sap_common.state import StepStatus
from sap_gpu.kinematics import quat_norm_ok

W = 4
BAD = 2  # the world that gets the bad quaternion
FIELDS = ("joint_q", "joint_qd", "body_q", "body_qd")
# Bad quaternions and the flags they must raise.
INVALID = StepStatus.INVALID_QUATERNION
REJECTED = {
    "zero": ([0.0, 0.0, 0.0, 0.0], INVALID),
    "tiny": ([0.0, 0.0, 0.0, 1e-200], INVALID),  # |q|² underflows to 0 in float64
    "below_min": ([0.0, 0.0, 0.5 * QUAT_NORM_MIN, 0.0], INVALID),
    "above_max": ([2.0 * QUAT_NORM_MAX, 0.0, 0.0, 0.0], INVALID),
    "overflow": ([1e200, 0.0, 0.0, 1e200], INVALID),  # |q|² overflows to inf
    "nan": ([np.nan, 0.0, 0.0, 1.0], INVALID | StepStatus.NON_FINITE),
    "inf": ([0.0, np.inf, 0.0, 1.0], INVALID | StepStatus.NON_FINITE),
}


def _model():
    """A free box on the ground (COM off its origin, so the public↔SAP map is not trivial) and a
    capsule pendulum on a ball joint beside it: both kinds of joint quaternion."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.6, name="ground")
    box = b.add_body(2.0, com=(0.02, -0.01, 0.01), inertia=solid_box_inertia(2.0, 0.1, 0.1, 0.1), name="box")
    q_box = spatial.quat_from_axis_angle((0.3, 1.0, 0.2), 0.2)
    b.add_joint_free(-1, box, q0=(0.0, 0.0, 0.098, *q_box), qd0=(0.1, 0.0, -0.2, 0.5, -0.3, 1.0), name="box")
    b.add_shape_box(box, hx=0.1, hy=0.1, hz=0.1, name="box_shape")
    link = b.add_body(1.0, com=(0, 0, -0.3), inertia=solid_capsule_inertia(1.0, 0.04, 0.2), name="link")
    b.add_joint_ball(-1, link, spatial.transform((1.0, 0.0, 1.5)), q0=spatial.quat_from_axis_angle((1, 0, 0), 0.6),
                     qd0=(0.0, 0.4, 3.0), name="ball")
    b.add_shape_capsule(link, spatial.transform((0, 0, -0.3)), radius=0.04, half_length=0.2, name="link_capsule")
    return b.replicate(W).finalize()


MODEL = _model()
DT = 2e-3
FREE_QUAT = slice(3, 7)  # the box's quaternion in joint_q
BALL_QUAT = slice(7, 11)  # the pendulum's quaternion in joint_q


def _clean_state(seed=0):
    """Every world a little different (velocities), body_q/body_qd consistent with joint_q."""
    rng = np.random.default_rng(seed)
    state = MODEL.state()
    state.joint_qd[:] += 0.2 * rng.standard_normal(state.joint_qd.shape)
    state.body_q[:], state.body_qd[:] = body_state(MODEL, state.joint_q, state.joint_qd, "public")
    return state


class Backend:
    """Collide + step one step on sap_ref or sap_gpu; returns host state, step and collision status."""

    def __init__(self, package, device, preset):
        self.package, self.device = package, device
        self.solver = package.SolverSAP(MODEL, max_rigid_contact=16, contact_preset_variant=preset, device=device)
        self.pipeline = package.CollisionPipeline(MODEL, 16, self.solver.config, device=device)
        self.contacts = self.pipeline.contacts()

    def step(self, state_in, state_out_order=None):
        p = self.package
        s_in = p.to_device(state_in, self.device)
        s_out = s_in
        if state_out_order is not None:
            s_out = p.to_device(dataclasses.replace(state_in.copy(), joint_qd_order=state_out_order), self.device)
        self.pipeline.collide(s_in, self.contacts)
        self.solver.step(s_in, s_out, p.to_device(MODEL.control(), self.device), self.contacts, DT)
        collision = self.pipeline.last_status
        collision = collision.numpy() if isinstance(collision, wp.array) else collision
        return p.to_host(s_out), self.solver.diagnostics()["status"], np.array(collision), p.to_host(self.contacts)


@pytest.fixture(scope="module", params=["approx32", "drake"])
def backends(request, device):
    return {"ref": Backend(sap_ref, None, request.param), "gpu": Backend(sap_gpu, device, request.param)}


# ----------------------------------------------------------------------------- the accepted range


def test_accepted_range_on_the_host():
    q = np.array([[0, 0, 0, 1], [0, 0, 0, 2], [0.5, 0.5, 0.5, 0.5], [0, 0, 0, QUAT_NORM_MIN],
                  [0, 0, 0, QUAT_NORM_MAX], *[v for v, _ in REJECTED.values()]], dtype=np.float64)
    assert quaternion_norm_ok(q).tolist() == [True] * 5 + [False] * len(REJECTED)


@wp.kernel
def _quat_ok_kernel(q: wp.array(dtype=wp.quatd), out: wp.array(dtype=int)):
    i = wp.tid()
    out[i] = quat_norm_ok(q[i])


magnitudes = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                       st.sampled_from([0.0, 1e-200, QUAT_NORM_MIN, QUAT_NORM_MAX, 1e200]),
                       st.floats(-1e10, 1e10))


@settings(max_examples=60)
@given(st.lists(st.tuples(magnitudes, magnitudes, magnitudes, magnitudes), min_size=1, max_size=16))
def test_both_backends_accept_the_same_quaternions(device, quats):
    q = np.array(quats, dtype=np.float64)
    out = wp.zeros(len(q), dtype=int, device=device)
    wp.launch(_quat_ok_kernel, len(q), inputs=[wp.array(q, dtype=wp.quatd, device=device)], outputs=[out],
              device=device)
    np.testing.assert_array_equal(out.numpy().astype(bool), quaternion_norm_ok(q))


def test_quaternion_coordinates_of_every_joint_kind():
    assert quaternion_coords(MODEL).tolist() == [3, 7]  # FREE coordinates 3:7, then the BALL joint
    b = ModelBuilder()
    a = b.add_body(1.0, inertia=np.eye(3))
    c = b.add_body(1.0, inertia=np.eye(3))
    b.add_joint_revolute(-1, a)
    b.add_joint_distance(a, c, limit_upper=1.0)
    m = b.finalize()
    assert [JointType(int(t)) for t in m.joint_type] == [JointType.REVOLUTE, JointType.DISTANCE]
    assert quaternion_coords(m).tolist() == [1 + 3]
    q = m.state().joint_q.copy()
    q[0, 4:8] = 0.0
    assert joint_quaternions_ok(m, q).tolist() == [False]


# ----------------------------------------------------------------------------- rejected worlds


def _assert_rejected_world(out, clean, bad_in, status, expected, what):
    assert int(status[BAD]) == int(expected), f"{what}: status {StepStatus(int(status[BAD]))!r}"
    others = [w for w in range(W) if w != BAD]
    for f in FIELDS:
        assert np.array_equal(getattr(out, f)[others], getattr(clean, f)[others]), f"{what}: other worlds' {f}"
        assert np.array_equal(getattr(out, f)[BAD], getattr(bad_in, f)[BAD], equal_nan=True), \
            f"{what}: the rejected world's {f} changed"


@pytest.mark.parametrize("where", ["free", "ball"])
@pytest.mark.parametrize("kind", list(REJECTED))
def test_a_bad_joint_quaternion_rejects_only_its_world_on_both_backends(backends, kind, where):
    clean_in = _clean_state()
    bad_in = clean_in.copy()
    value, expected = REJECTED[kind]
    bad_in.joint_q[BAD, FREE_QUAT if where == "free" else BALL_QUAT] = value
    statuses = {}
    for name, backend in backends.items():
        clean, clean_status, _, _ = backend.step(clean_in)
        assert np.all(clean_status & StepStatus.CONVERGED)
        out, status, _, _ = backend.step(bad_in)
        _assert_rejected_world(out, clean, bad_in, status, expected, f"{name}, {kind} {where} quaternion")
        statuses[name] = status
    np.testing.assert_array_equal(statuses["ref"], statuses["gpu"])


@settings(max_examples=12)
@given(world=st.integers(0, W - 1), kind=st.sampled_from(sorted(REJECTED)),
       where=st.sampled_from([FREE_QUAT, BALL_QUAT]), seed=st.integers(0, 2**16))
def test_any_world_any_bad_quaternion_same_flags_and_untouched_neighbours(device, world, kind, where, seed):
    backends = _drake_backends(device)
    clean_in = _clean_state(seed)
    bad_in = clean_in.copy()
    bad_in.joint_q[world, where] = REJECTED[kind][0]
    results = {}
    for name, backend in backends.items():
        clean, _, _, _ = backend.step(clean_in)
        out, status, _, _ = backend.step(bad_in)
        assert status[world] & StepStatus.INVALID_QUATERNION
        others = [w for w in range(W) if w != world]
        for f in FIELDS:
            assert np.array_equal(getattr(out, f)[others], getattr(clean, f)[others]), f"{name}: {f}"
            assert np.array_equal(getattr(out, f)[world], getattr(bad_in, f)[world], equal_nan=True), f"{name}: {f}"
        results[name] = status
    np.testing.assert_array_equal(results["ref"], results["gpu"])


_BACKENDS: dict = {}


def _drake_backends(device):
    if str(device) not in _BACKENDS:
        _BACKENDS[str(device)] = {"ref": Backend(sap_ref, None, "drake"), "gpu": Backend(sap_gpu, device, "drake")}
    return _BACKENDS[str(device)]


@pytest.mark.parametrize("out_order", ["sap", "public"])
def test_a_rejected_world_keeps_its_velocities_across_orders(backends, out_order):
    """state_in public → state_out of the other order: a rejected quaternion gives no rotation to
    convert with, so the FREE segment is NaN; the ball joint's DOFs (same in both orders) are copied."""
    bad_in = _clean_state()
    bad_in.joint_q[BAD, FREE_QUAT] = 0.0
    qd = {}
    for name, backend in backends.items():
        out, status, _, _ = backend.step(bad_in, state_out_order=out_order)
        assert status[BAD] == StepStatus.INVALID_QUATERNION and out.joint_qd_order == out_order
        assert np.array_equal(out.joint_q[BAD], bad_in.joint_q[BAD])
        if out_order == "public":
            assert np.array_equal(out.joint_qd[BAD], bad_in.joint_qd[BAD]), name
        else:
            assert np.all(np.isnan(out.joint_qd[BAD, :6])), name
            assert np.array_equal(out.joint_qd[BAD, 6:], bad_in.joint_qd[BAD, 6:]), name
        qd[name] = out.joint_qd[BAD]
    np.testing.assert_array_equal(qd["ref"], qd["gpu"])  # the rejected world, NaNs included


# ----------------------------------------------------------------------------- accepted, non-unit

# How far a step from s·q may land from the step from q, relative to the largest velocity (keyed by
# use_f64_boundary_pose). float64 poses: q/|q| and the unit q differ by a few ulps (1e-16),
# carried through one step: 1e-12 leaves a wide margin. approx32 rounds the pose to float32 at the
# boundary and for the contact stage, where q/|q| and q may round to neighbouring float32 values
# (ε₃₂ = 1.2e-7 apart) and a few operations follow: 16 ε₃₂.
NORMALIZED_READ_TOL = {True: 1e-12, False: 16 * float(np.finfo(np.float32).eps)}


@pytest.mark.parametrize("scale", [0.5, 3.0, 1e-6, 1e6])
def test_a_non_unit_quaternion_is_normalized_on_read(backends, scale):
    """Scaling both quaternions by s changes nothing but the scale: the same poses, velocities and
    contacts as the unit quaternions (midpoint renormalizes q₁; sap_euler's q₁ is s times the unit one)."""
    unit_in = _clean_state()
    scaled_in = unit_in.copy()
    scaled_in.joint_q[:, FREE_QUAT] *= scale
    scaled_in.joint_q[:, BALL_QUAT] *= scale
    for name, backend in backends.items():
        unit, s_unit, _, c_unit = backend.step(unit_in)
        scaled, s_scaled, _, c_scaled = backend.step(scaled_in)
        assert np.array_equal(s_unit, s_scaled) and np.all(s_scaled & StepStatus.CONVERGED), name
        np.testing.assert_array_equal(c_unit.count, c_scaled.count)
        tol = NORMALIZED_READ_TOL[backend.solver.config.use_f64_boundary_pose] * (1.0 + np.abs(unit.joint_qd).max())
        np.testing.assert_allclose(scaled.body_q, unit.body_q, rtol=0, atol=tol, err_msg=name)
        np.testing.assert_allclose(scaled.joint_qd, unit.joint_qd, rtol=0, atol=tol, err_msg=name)
        for sl in (FREE_QUAT, BALL_QUAT):
            q_unit, q_scaled = unit.joint_q[:, sl], scaled.joint_q[:, sl]
            q_scaled = q_scaled / np.linalg.norm(q_scaled, axis=1, keepdims=True)
            q_unit = q_unit / np.linalg.norm(q_unit, axis=1, keepdims=True)
            np.testing.assert_allclose(q_scaled, q_unit, rtol=0, atol=tol, err_msg=name)


def test_drift_past_the_upper_bound_rejects_the_step(device):
    """sap_euler never renormalizes: a quaternion just under QUAT_NORM_MAX that the step carries
    past it flags the world INVALID_QUATERNION and leaves it unchanged, on both backends."""
    backends = _drake_backends(device)
    clean_in = _clean_state()
    near = clean_in.copy()
    q = near.joint_q[BAD, BALL_QUAT]
    near.joint_q[BAD, BALL_QUAT] = q / np.linalg.norm(q) * QUAT_NORM_MAX * (1.0 - 1e-9)
    statuses = {}
    for name, backend in backends.items():
        clean, _, _, _ = backend.step(clean_in)
        out, status, _, _ = backend.step(near)
        _assert_rejected_world(out, clean, near, status, INVALID | StepStatus.CONVERGED, f"{name} drift")
        statuses[name] = status
    np.testing.assert_array_equal(statuses["ref"], statuses["gpu"])


# ----------------------------------------------------------------------------- collision reads body_q


@pytest.mark.parametrize("kind", ["zero", "tiny", "nan", "above_max"])
def test_a_bad_body_quaternion_gives_its_world_no_contacts(backends, kind):
    clean_in = _clean_state()
    bad_in = clean_in.copy()
    bad_in.body_q[BAD, 0, 3:] = REJECTED[kind][0]  # the box's pose (joint_q untouched)
    found = {}
    for name, backend in backends.items():
        _, _, clean_status, clean_contacts = backend.step(clean_in)
        assert not np.any(clean_status) and clean_contacts.count[BAD] > 0
        _, _, status, contacts = backend.step(bad_in)
        assert status.tolist() == [0, 0, int(INVALID), 0], name
        assert contacts.count[BAD] == 0 and contacts.overflow[BAD] == 0
        for f in ("count", "shape0", "shape1", "phi0", "x0", "x1", "normal"):
            others = [w for w in range(W) if w != BAD]
            assert np.array_equal(getattr(contacts, f)[others], getattr(clean_contacts, f)[others]), f
        found[name] = contacts.count
    np.testing.assert_array_equal(found["ref"], found["gpu"])
