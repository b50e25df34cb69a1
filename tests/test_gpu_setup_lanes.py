"""The set-up kernels that walk the tree with one block of lanes per world (sap_gpu.kinematics,
sap_gpu.dynamics; docs/pipeline.md § Thread mapping): the tree's levels, and the results of 32
cooperative lanes equal, bit for bit, to one lane's (which follows the parents-first walk of
``joint_order``), and to sap_ref within the stage tolerances.

On Warp's CPU device a block runs on one lane unless ``wp.config.enable_cpu_blocks`` is set
(``conftest.cooperative_lanes``); with it, the lanes run as fibers that switch at every block
barrier, so a read of a parent's pose, a child's composite inertia or wrench before its lane
wrote it (a missing barrier) gives a different result from the one-lane run.
"""

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes
from hypothesis import given, settings
from strategies import random_models

from sap_common import scenes
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.model import JointType
from sap_gpu import dynamics, kinematics
from sap_gpu.arrays import GpuModel, tree_levels
from sap_ref import dynamics as ref_dynamics
from sap_tools.tolerances import TOL

W = 3  # worlds, each with its own state


def _levels_ok(model):
    level_start, children, child_start = tree_levels(model)
    order = list(model.joint_order)
    level_of = {}
    for lev in range(len(level_start) - 1):
        for k in range(level_start[lev], level_start[lev + 1]):
            level_of[int(model.joint_child[order[k]])] = lev
    assert sorted(level_of) == list(range(model.body_count))
    position = {int(model.joint_child[j]): k for k, j in enumerate(order)}
    for b in range(model.body_count):
        p = int(model.body_parent[b])
        assert level_of[b] == (0 if p < 0 else level_of[p] + 1)
        kids = list(children[child_start[b]:child_start[b + 1]])
        assert sorted(kids) == sorted(c for c in range(model.body_count) if model.body_parent[c] == b)
        assert [position[c] for c in kids] == sorted((position[c] for c in kids), reverse=True)


def _setup_stage(model, q, qd_sap, body_f, device, lanes: bool):
    """FK, A (dt = 0.01) and the generalized forces of every world, with one or 32 lanes per block."""
    m = GpuModel(model, device)
    assert m.num_worlds == W
    B, nv = model.body_count, model.joint_dof_count
    n_pad = max(8, -(-nv // 8) * 8)
    jq = wp.array(q, dtype=wp.float64, device=device)
    jqd = wp.array(qd_sap, dtype=wp.float64, device=device)
    bf = wp.array(body_f, dtype=wp.spatial_vectord, device=device)
    X = wp.zeros((W, B), dtype=wp.transformd, device=device)
    V = wp.zeros((W, B), dtype=wp.spatial_vectord, device=device)
    S = wp.zeros((W, nv), dtype=wp.spatial_vectord, device=device)
    Ic = wp.zeros((W, B), dtype=wp.spatial_matrixd, device=device)
    A = wp.full((W, n_pad, n_pad), wp.float64(7.0), dtype=wp.float64, device=device)  # zeroed by the kernel
    acc = wp.zeros((W, B), dtype=wp.spatial_vectord, device=device)
    wr = wp.zeros((W, B), dtype=wp.spatial_vectord, device=device)
    tau = wp.zeros((W, nv), dtype=wp.float64, device=device)
    with cooperative_lanes(lanes):
        kinematics.forward_kinematics(m, jq, jqd, X, V, S)
        dynamics.mass_matrix(m, 0.01, X, S, Ic, A)
        dynamics.generalized_forces(m, X, V, S, jqd, bf, acc, wr, tau)
    return {name: a.numpy() for name, a in (("body_X", X), ("body_V", V), ("dof_S", S), ("A", A), ("tau", tau))}


def _inputs(model, q, qd, seed=0):
    """Each world's state: q with its scalar joint coordinates moved by up to ±0.3, qd scaled."""
    rng = np.random.default_rng(seed)
    qs = np.repeat(q[None], W, 0)
    for j in range(model.joint_count):
        if JointType(int(model.joint_type[j])) in (JointType.REVOLUTE, JointType.PRISMATIC, JointType.D6):
            sl = model.joint_q_slice(j)
            qs[1:, sl] += rng.uniform(-0.3, 0.3, (W - 1, sl.stop - sl.start))
    qds = np.repeat(qd[None], W, 0) * rng.uniform(0.5, 1.5, (W, 1))
    qd_sap = np.array([joint_qd_public_to_sap(model, qs[w], qds[w]) for w in range(W)])
    body_f = rng.normal(0.0, 1.0, (W, model.body_count, 6))
    return qs, qd_sap, body_f


@settings(max_examples=15, deadline=None)
@given(random_models(max_bodies=6, num_worlds=W))
def test_block_kernels_give_one_lanes_bits_with_32_lanes(device, case):
    model, q, qd = case
    _levels_ok(model)
    qs, qd_sap, body_f = _inputs(model, q, qd)
    one = _setup_stage(model, qs, qd_sap, body_f, device, lanes=False)
    many = _setup_stage(model, qs, qd_sap, body_f, device, lanes=True)
    for name in one:
        np.testing.assert_array_equal(many[name], one[name], err_msg=name)


@pytest.mark.skipif(not scenes.availability("humanoid")[0], reason="the humanoid MJCF needs mujoco-warp's files")
def test_humanoid_set_up_with_lanes_matches_sap_ref(device):
    """The humanoid (7 levels, up to 4 bodies a level), 32 lanes: A and the generalized forces
    against sap_ref's CRBA and RNEA at each world's state, to the float64 stage tolerance."""
    scene = scenes.get("humanoid", W)
    model = scene.sap_model
    _levels_ok(model)
    rng = np.random.default_rng(1)
    q = scene.state.joint_q[0].copy()
    qd = rng.normal(0.0, 1.0, model.joint_dof_count)
    qs, qd_sap, body_f = _inputs(model, q, qd)
    got = _setup_stage(model, qs, qd_sap, np.zeros_like(body_f), device, lanes=True)
    one = _setup_stage(model, qs, qd_sap, np.zeros_like(body_f), device, lanes=False)
    for name in got:
        np.testing.assert_array_equal(got[name], one[name], err_msg=name)
    nv = model.joint_dof_count
    for w in range(W):
        A = ref_dynamics.mass_matrix(model, qs[w]) + np.diag(0.01 * model.joint_damping)  # M has the armature
        tau = ref_dynamics.bias_forces(model, qs[w], qd_sap[w])
        for name, a, b in (("A", got["A"][w, :nv, :nv], A), ("tau", got["tau"][w], tau)):
            err, scale = np.abs(a - b).max(), np.abs(b).max()
            assert err <= TOL["fp64"] * max(scale, 1.0), f"world {w} {name}: |Δ| = {err:.3e}, scale {scale:.3e}"


@settings(max_examples=15, deadline=None)
@given(random_models(max_bodies=6, num_worlds=W))
def test_participation_with_lanes_marks_the_touched_trees(device, case):
    """The participating DOFs (one block per world: clear, mark, read) against a NumPy count of the
    trees a contact row or a scalar row in use (two limit rows, sometimes inactive, and a drive's
    row e_dof, always in use) touches, with one lane and with 32."""
    from types import SimpleNamespace

    from sap_gpu import constraints

    model = case[0]
    nv, C, L = model.joint_dof_count, 3, 3
    rng = np.random.default_rng(nv)
    count = rng.integers(0, C + 1, W).astype(np.int32)
    J = np.where(rng.random((W, 3 * C, nv)) < 0.15, rng.normal(size=(W, 3 * C, nv)), 0.0)
    active = rng.integers(0, 2, (W, L)).astype(np.int32)
    row_J = np.where(rng.random((W, L, nv)) < 0.2, 1.0, 0.0)
    drive_dof = int(rng.integers(0, nv))
    row_J[:, 2] = 0.0
    row_J[:, 2, drive_dof] = 1.0
    active[:, 2] = 1
    v0, v_star = rng.normal(size=(W, nv)), rng.normal(size=(W, nv))
    tree = np.asarray(model.dof_tree)
    want = np.zeros((W, nv), np.int32)
    for w in range(W):
        touched = (J[w, :3 * count[w]] != 0).any(0) | ((active[w][:, None] != 0) & (row_J[w] != 0)).any(0)
        assert touched[drive_dof]
        want[w] = np.isin(tree, tree[touched])
    m = GpuModel(model, device)

    def run(lanes):
        f64 = dict(dtype=wp.float64, device=device)
        mask = wp.zeros((W, nv), dtype=int, device=device)
        v = wp.zeros((W, nv), **f64)
        with cooperative_lanes(lanes):
            constraints.participation(
                m, L, SimpleNamespace(count=wp.array(count, dtype=int, device=device)), wp.array(J, **f64),
                wp.array(active, dtype=int, device=device), wp.array(row_J, **f64),
                wp.zeros((W, max(model.tree_count, 1)), dtype=int, device=device), wp.array(v0, **f64),
                wp.array(v_star, **f64), mask, v)
        return mask.numpy(), v.numpy()

    for lanes in (False, True):
        mask, v = run(lanes)
        np.testing.assert_array_equal(mask, want)
        np.testing.assert_array_equal(v, np.where(want == 1, v0, v_star))
