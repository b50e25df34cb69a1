"""How a step's launches spread a world's work (docs/pipeline.md § Thread mapping): no launch of a
humanoid step runs one thread per world, and the kernels that reduce over a world's items in a
block of lanes (the input checks, the pose check, the contact selection, the output checks) give
the same bits with one lane as with 32 cooperative lanes, and the values the serial walk defines.

On Warp's CPU device a block runs on one lane unless ``wp.config.enable_cpu_blocks`` is set
(``conftest.cooperative_lanes``); with it the lanes run as fibers that switch at every block
barrier, so a lane-strided loop, a block OR or a prefix sum over the lanes really runs.
"""

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes

import sap_gpu
from sap_common import scenes
from sap_common.config import PRESETS
from sap_common.model import JointType
from sap_common.state import CONTACT_SLOT_FIELDS, StepStatus
from sap_gpu import boundary
from sap_gpu.arrays import GpuModel
from sap_gpu.launch import record_launches

HUMANOID = pytest.mark.skipif(not scenes.availability("humanoid")[0],
                              reason="the humanoid MJCF needs mujoco-warp's files")
NON_FINITE = int(StepStatus.NON_FINITE)
INVALID_QUATERNION = int(StepStatus.INVALID_QUATERNION)
CONTACT_OVERFLOW = int(StepStatus.CONTACT_OVERFLOW)
REJECTED = NON_FINITE | INVALID_QUATERNION


def threads(call) -> int:
    """Threads a recorded launch starts: the product of its ``dim`` times the lanes per index."""
    return int(np.prod(np.atleast_1d(call.dim))) * call.lanes


def one_thread_per_world(call, num_worlds: int) -> bool:
    """A launch of one thread per world: as many threads as worlds, one lane per index (not a
    block-per-world launch, whose index is a world and whose block has 32 lanes)."""
    return call.lanes == 1 and threads(call) == num_worlds


@HUMANOID
@pytest.mark.parametrize("preset", PRESETS)
def test_no_launch_of_a_humanoid_step_runs_one_thread_per_world(device, preset):
    """Collision + step of 64 humanoids, every launch recorded: none runs one thread per world.
    The kernels that did (the input, pose and output checks, the contact selection, the
    accelerations and statistics) are still launched, over blocks of lanes or (world, body). The
    staged Newton path's own kernels (evaluate, line search, finish: one thread per world) are the
    Newton loop's; this is the default, fused path."""
    W = 64
    scene = scenes.get("humanoid", W)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact,
                               contact_preset_variant=preset, device=device)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config, device=device)
    state, control = sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device)
    contacts = pipeline.contacts()
    with record_launches() as record:
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, 2e-3)
    assert np.isfinite(state.joint_q.numpy()).all()
    per_world = [f"{c.kernel} dim={c.dim}" for c in record.calls if one_thread_per_world(c, W)]
    assert not per_world, f"one thread per world: {per_world}"
    shape = {c.kernel: (c.dim, c.lanes) for c in record.calls}
    for kernel in ("_check_inputs", "_check_poses", "_select_order", "_select_outputs"):
        assert shape[kernel] == (W, 32), (kernel, shape[kernel])
    assert shape["_accelerations_and_statistics"] == ((W, scene.sap_model.body_count), 1)


# ----------------------------------------------------------------------------- the collision's selection


def _poses(model, W, rng):
    """Body poses of W humanoids that overlap each other and the floor: world 0 every body at the
    same pose (many equal depths: ties), the others random around a point below the floor; world
    W − 1 with one rejected quaternion (norm 1e-10)."""
    B = model.body_count
    X = np.zeros((W, B, 7))
    X[..., 6] = 1.0
    X[0, :, 2] = -0.05
    for w in range(1, W):
        X[w, :, :3] = rng.uniform(-0.25, 0.25, (B, 3)) + [0.0, 0.0, 0.05]
        q = rng.normal(size=(B, 4))
        X[w, :, 3:] = q / np.linalg.norm(q, axis=1, keepdims=True)
    X[W - 1, 3, 3:] *= 1e-10
    return X


def _collide(model, X, capacity, device, lanes: bool):
    pipeline = sap_gpu.CollisionPipeline(model, capacity, device=device)
    state = sap_gpu.arrays.state(model, device)
    state.body_q.assign(wp.array(X, dtype=wp.transformd, device=device))
    contacts = pipeline.contacts()
    with cooperative_lanes(lanes):
        pipeline.collide(state, contacts)
    S = pipeline.scratch
    out = {name: getattr(contacts, name).numpy() for name in ("count", "overflow", *CONTACT_SLOT_FIELDS)}
    out["status"] = pipeline.last_status.numpy()
    out["kept"] = pipeline.kept.numpy()
    out["pair_count"], out["phi"] = S.pair_count.numpy(), S.phi.numpy()
    out["offset"] = S.offset.numpy()
    return out


def _serial_selection(pair_count, offset, phi, capacity):
    """The serial walk's selection of one world: generated slots pair by pair; past the capacity
    the `capacity` deepest (ties by slot), in slot order. Returns (kept slots, overflow)."""
    generated = [int(offset[p]) + jj for p in range(len(pair_count)) for jj in range(int(pair_count[p]))]
    if len(generated) <= capacity:
        return generated, 0
    deepest = set(sorted(generated, key=lambda i: (phi[i], i))[:capacity])
    kept = [i for i in generated if i in deepest]
    return kept, len(generated) - len(kept)


@HUMANOID
@pytest.mark.parametrize("capacity", [3, 64])
def test_contact_selection_with_lanes_is_the_serial_walks(device, capacity):
    """The humanoid's 161 shape pairs (six rounds of 32 lanes) over overlapping random poses: the
    kept slots, counts, overflow and every contact field equal with one lane and with 32, and the
    serial walk's selection (capacity 3: most worlds overflow, ranked by depth; 64: all kept); a
    world with a rejected body quaternion is flagged and gets no contact."""
    W = 4
    model = scenes.get("humanoid", W).sap_model
    X = _poses(model, W, np.random.default_rng(5))
    one = _collide(model, X, capacity, device, lanes=False)
    many = _collide(model, X, capacity, device, lanes=True)
    for name in one:
        np.testing.assert_array_equal(many[name], one[name], err_msg=name)
    assert one["status"].tolist() == [0] * (W - 1) + [INVALID_QUATERNION]
    assert one["count"][W - 1] == 0 and one["overflow"][W - 1] == 0
    overflowed = 0
    for w in range(W):
        kept, overflow = _serial_selection(one["pair_count"][w], one["offset"], one["phi"][w], capacity)
        assert one["count"][w] == len(kept) and one["overflow"][w] == overflow, w
        assert one["kept"][w, :len(kept)].tolist() == kept, w
        overflowed += overflow > 0
    assert overflowed >= (2 if capacity == 3 else 0)
    assert (one["count"][:W - 1] > 0).all()


# ----------------------------------------------------------------------------- the input and output checks


def _checks(model, W, device, lanes: bool, bad_inputs, bad_outputs, params_invalid, status_in, overflow,
            out_order: str):
    """check_inputs on random inputs with ``bad_inputs`` applied, then select_outputs on the
    scene's q₀, v₀ = 0 and q₁ = q₀ + 0.01, v₁ = v₀ + 0.01 with ``bad_outputs`` applied, from
    ``status_in``, into an output state in ``out_order``."""
    m = GpuModel(model, device)
    rng = np.random.default_rng(3)
    nv, B = model.joint_dof_count, model.body_count
    state, control = sap_gpu.arrays.state(model, device), sap_gpu.arrays.control(model, device)
    host = {"joint_q": np.tile(model.joint_q_init, (W, 1)), "joint_qd": rng.normal(size=(W, nv)),
            "joint_f": rng.normal(size=(W, nv)), "joint_act": rng.normal(size=(W, nv)),
            "joint_target_pos": rng.normal(size=(W, nv)), "joint_target_vel": rng.normal(size=(W, nv)),
            "body_q": rng.normal(size=(W, B, 7)), "body_qd": rng.normal(size=(W, B, 6)),
            "body_f": rng.normal(size=(W, B, 6))}
    for name, index, value in bad_inputs:
        host[name][index] = value
    for name, value in host.items():
        getattr(control if name in ("joint_f", "joint_act", "joint_target_pos", "joint_target_vel") else state,
                name).assign(value)
    m.params.invalid.assign(np.asarray(params_invalid, dtype=np.int32))
    status = wp.zeros(W, dtype=int, device=device)
    done = wp.full(W, 7, dtype=int, device=device)
    copies = {"q0": wp.zeros((W, model.joint_coord_count), dtype=wp.float64, device=device),
              "qd_in": wp.zeros((W, nv), dtype=wp.float64, device=device),
              "body_q_in": wp.zeros((W, B), dtype=wp.transformd, device=device),
              "body_qd_in": wp.zeros((W, B), dtype=wp.spatial_vectord, device=device),
              **{name: wp.zeros((W, nv), dtype=wp.float64, device=device)
                 for name in ("joint_act", "target_pos", "target_vel")}}
    q0, v0 = np.tile(model.joint_q_init, (W, 1)), np.zeros((W, nv))
    q1, v1 = q0 + 0.01, v0 + 0.01
    for name, index, value in bad_outputs:
        (q1 if name == "q1" else v1)[index] = value
    dq0, dv0 = wp.array(q0, dtype=wp.float64, device=device), wp.array(v0, dtype=wp.float64, device=device)
    dq1, dv1 = wp.array(q1, dtype=wp.float64, device=device), wp.array(v1, dtype=wp.float64, device=device)
    out_status = wp.array(np.asarray(status_in, dtype=np.int32), dtype=int, device=device)
    state_out = sap_gpu.arrays.state(model, device)
    state_out.joint_qd_order = out_order
    state_out.joint_qd.fill_(5.0)  # written only in SAP order
    truncated = wp.full(W, -1, dtype=int, device=device)
    with cooperative_lanes(lanes):
        boundary.check_inputs(m, state, control, status, done, *copies.values())
        boundary.select_outputs(m, dq0, dv0, wp.array(np.asarray(overflow, dtype=np.int32), dtype=int, device=device),
                                dq1, dv1, out_status, state_out, truncated)
    return {"status": status.numpy(), "done": done.numpy(), "q1": dq1.numpy(), "v1": dv1.numpy(),
            "out_status": out_status.numpy(), "joint_q_out": state_out.joint_q.numpy(),
            "joint_qd_out": state_out.joint_qd.numpy(), "truncated": truncated.numpy(),
            **{"copy " + name: a.numpy() for name, a in copies.items()}}, host, (q0, v0, q1, v1)


@pytest.mark.skipif(not scenes.availability("humanoid3")[0], reason="the humanoid MJCF needs mujoco-warp's files")
@pytest.mark.parametrize("out_order", ["public", "sap"])
def test_input_and_output_checks_with_lanes_flag_the_worlds_a_serial_walk_flags(device, out_order):
    """Three humanoids in a world (84 coordinates, 81 velocities, 54 bodies, 3 quaternions: the
    lanes go round more than once). Each world has one bad value, placed past the first 32 items
    where the kind allows; the flags, ``done``, the output status, the restored q₁, v₁, the
    step's copies of its inputs and the outputs written into the state (q₁; v₁ in SAP order;
    the overflow) equal with one lane and with 32, and what the checks define."""
    W = 9
    model = scenes.get("humanoid3", W).sap_model
    nq, nv, B = model.joint_coord_count, model.joint_dof_count, model.body_count
    assert nq > 64 and nv > 64 and B > 32
    quat = [int(model.joint_q_start[j]) + 3 for j in range(model.joint_count)
            if JointType(int(model.joint_type[j])) == JointType.FREE]
    assert len(quat) == 3
    bad_inputs = [("joint_q", (1, nq - 2), np.nan), ("joint_qd", (2, 70), np.inf), ("joint_act", (3, 40), -np.inf),
                  ("joint_target_vel", (4, nv - 1), np.nan), ("body_f", (5, B - 1, 4), np.nan),
                  ("joint_q", (6, slice(quat[2], quat[2] + 4)), 1e-10)]
    params_invalid = [0] * W
    params_invalid[7] = 1
    # the output side: world 0 a non-finite velocity far out, world 8 a quaternion carried out of
    # range and an overflow; world 7 already NON_FINITE on input (its own bits only)
    bad_outputs = [("v1", (0, 77), np.nan), ("q1", (8, slice(quat[1], quat[1] + 4)), 1e10)]
    status_in = [0] * W
    status_in[7] = NON_FINITE
    overflow = [0] * W
    overflow[8] = 2
    args = (bad_inputs, bad_outputs, params_invalid, status_in, overflow, out_order)
    one, host, (q0, v0, q1, v1) = _checks(model, W, device, False, *args)
    many = _checks(model, W, device, True, *args)[0]
    for name in one:
        np.testing.assert_array_equal(many[name], one[name], err_msg=name)
    expected_in = [0, NON_FINITE, NON_FINITE, NON_FINITE, NON_FINITE, NON_FINITE, INVALID_QUATERNION, NON_FINITE, 0]
    assert one["status"].tolist() == expected_in
    assert one["done"].tolist() == [int(s != 0) for s in expected_in]
    for copy, name in (("q0", "joint_q"), ("qd_in", "joint_qd"), ("body_q_in", "body_q"), ("body_qd_in", "body_qd"),
                       ("joint_act", "joint_act"), ("target_pos", "joint_target_pos"),
                       ("target_vel", "joint_target_vel")):
        np.testing.assert_array_equal(one["copy " + copy], host[name], err_msg=copy)
    expected_out = [NON_FINITE] + [0] * 6 + [NON_FINITE, INVALID_QUATERNION | CONTACT_OVERFLOW]
    assert one["out_status"].tolist() == expected_out
    for w in range(W):
        rejected = expected_out[w] & REJECTED
        np.testing.assert_array_equal(one["q1"][w], q0[w] if rejected else q1[w])
        np.testing.assert_array_equal(one["v1"][w], v0[w] if rejected else v1[w])
    np.testing.assert_array_equal(one["joint_q_out"], one["q1"])
    np.testing.assert_array_equal(one["joint_qd_out"], one["v1"] if out_order == "sap" else np.full((W, nv), 5.0))
    assert one["truncated"].tolist() == overflow


@HUMANOID
@pytest.mark.parametrize("order", ["public", "sap"])
def test_a_humanoid_step_makes_no_device_copy(device, order, monkeypatch):
    """The step's copies of its inputs and outputs are stored by the kernels that read or produce
    them (the input check, the contact geometry, the output selection, forward kinematics at q₁):
    collision + step of the default path issue no ``wp.copy``, with the output velocities in
    either order."""
    W = 4
    scene = scenes.get("humanoid", W)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config, device=device)
    state, control = sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device)
    state.joint_qd_order = order
    contacts = pipeline.contacts()
    copies = []
    copy = wp.copy
    monkeypatch.setattr(wp, "copy", lambda *a, **k: (copies.append(a[0].shape), copy(*a, **k)))
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, 2e-3)
    assert copies == []
    assert np.isfinite(state.joint_q.numpy()).all() and (solver.last_status.numpy() & REJECTED == 0).all()
