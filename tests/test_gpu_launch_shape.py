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


def _checks(model, W, device, lanes: bool, bad_inputs, bad_outputs, params_invalid, status_in, overflow):
    """check_inputs on the scene's state with ``bad_inputs`` applied, then select_outputs on the
    scene's q₀, v₀ = 0 and q₁ = q₀ + 0.01, v₁ = v₀ + 0.01 with ``bad_outputs`` applied, from
    ``status_in``."""
    m = GpuModel(model, device)
    state, control = sap_gpu.arrays.state(model, device), sap_gpu.arrays.control(model, device)
    host = {"joint_q": np.tile(model.joint_q_init, (W, 1)), "joint_qd": np.zeros((W, model.joint_dof_count)),
            "joint_act": np.zeros((W, model.joint_dof_count)), "joint_target_vel": np.zeros((W, model.joint_dof_count)),
            "body_f": np.zeros((W, model.body_count, 6))}
    for name, index, value in bad_inputs:
        host[name][index] = value
    for name, value in host.items():
        getattr(control if name in ("joint_act", "joint_target_vel") else state, name).assign(value)
    m.params.invalid.assign(np.asarray(params_invalid, dtype=np.int32))
    status = wp.zeros(W, dtype=int, device=device)
    done = wp.full(W, 7, dtype=int, device=device)
    q0, v0 = np.tile(model.joint_q_init, (W, 1)), np.zeros((W, model.joint_dof_count))
    q1, v1 = q0 + 0.01, v0 + 0.01
    for name, index, value in bad_outputs:
        (q1 if name == "q1" else v1)[index] = value
    dq0, dv0 = wp.array(q0, dtype=wp.float64, device=device), wp.array(v0, dtype=wp.float64, device=device)
    dq1, dv1 = wp.array(q1, dtype=wp.float64, device=device), wp.array(v1, dtype=wp.float64, device=device)
    out_status = wp.array(np.asarray(status_in, dtype=np.int32), dtype=int, device=device)
    with cooperative_lanes(lanes):
        boundary.check_inputs(m, state, control, status, done)
        boundary.select_outputs(m, dq0, dv0, wp.array(np.asarray(overflow, dtype=np.int32), dtype=int, device=device),
                                dq1, dv1, out_status)
    return {"status": status.numpy(), "done": done.numpy(), "q1": dq1.numpy(), "v1": dv1.numpy(),
            "out_status": out_status.numpy(), "q0": q0, "v0": v0, "q1_in": q1, "v1_in": v1}


@pytest.mark.skipif(not scenes.availability("humanoid3")[0], reason="the humanoid MJCF needs mujoco-warp's files")
def test_input_and_output_checks_with_lanes_flag_the_worlds_a_serial_walk_flags(device):
    """Three humanoids in a world (84 coordinates, 81 velocities, 54 bodies, 3 quaternions: the
    lanes go round more than once). Each world has one bad value, placed past the first 32 items
    where the kind allows; the flags, ``done``, the output status and the restored q₁, v₁ equal
    with one lane and with 32, and what the checks define."""
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
    one = _checks(model, W, device, False, bad_inputs, bad_outputs, params_invalid, status_in, overflow)
    many = _checks(model, W, device, True, bad_inputs, bad_outputs, params_invalid, status_in, overflow)
    for name in one:
        np.testing.assert_array_equal(many[name], one[name], err_msg=name)
    expected_in = [0, NON_FINITE, NON_FINITE, NON_FINITE, NON_FINITE, NON_FINITE, INVALID_QUATERNION, NON_FINITE, 0]
    assert one["status"].tolist() == expected_in
    assert one["done"].tolist() == [int(s != 0) for s in expected_in]
    expected_out = [NON_FINITE] + [0] * 6 + [NON_FINITE, INVALID_QUATERNION | CONTACT_OVERFLOW]
    assert one["out_status"].tolist() == expected_out
    for w in range(W):
        rejected = expected_out[w] & REJECTED
        np.testing.assert_array_equal(one["q1"][w], one["q0"][w] if rejected else one["q1_in"][w])
        np.testing.assert_array_equal(one["v1"][w], one["v0"][w] if rejected else one["v1_in"][w])
