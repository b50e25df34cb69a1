"""sap_tools.benchmark.traffic (``sap-benchmark --structure``): the derived Newton figure against a
count by hand on a one-contact world, the counted set-up figure against an independent count of
launches and array sizes, and the command line's traffic lines."""

import json

import numpy as np
import pytest
import warp as wp

import sap_gpu
from sap_common import scenes
from sap_tools.benchmark.cli import main
from sap_tools.benchmark.runs import SapRun, noise_channels
from sap_tools.benchmark.traffic import SETUP_STAGES, newton_traffic, setup_traffic


def _sphere_slide_step(device, newton_path="fused", **config):
    """One step of sphere_slide (a free sphere on the ground: nv = 6, one contact) on ``device``."""
    scene = scenes.get("sphere_slide", 1)
    m = scene.sap_model
    solver = sap_gpu.SolverSAP(m, max_rigid_contact=1, device=device, newton_path=newton_path, **config)
    pipe = sap_gpu.CollisionPipeline(m, 1, solver.config, device=device)
    state, control, contacts = sap_gpu.state(m, device), sap_gpu.control(m, device), pipe.contacts()
    pipe.collide(state, contacts)
    solver.step(state, state, control, contacts, scene.dt)
    return solver


# sphere_slide's lists after its first step: A is diagonal (each row lists its own column), the
# contact's 3 rows list every DOF but the spin about the normal (DOF 2), every DOF participates.
CONTACT_COLS = (0, 1, 3, 4, 5)


def _hand_count(lanes: int, probes_per_iteration: float, tiles: bool = False, lane_cholesky: bool = False):
    """Loads and stores of one fused Newton iteration on sphere_slide, counted by hand from
    sap_gpu/contact_problem.py: nv = 6, one column per row of A, one contact listing
    :data:`CONTACT_COLS`, no limit or drive row, the system padded to n = 32 (approx32)."""
    nv, n, nc = 6, 32, len(CONTACT_COLS)
    shared = tiles or lane_cholesky  # A, v* and Δv in shared tiles for the step (their loads: step_load)
    bound = lanes  # every lane reads the contact count as its loop bound
    if shared:
        momentum = nv * (nv + 1)  # per row v_k for every k < nv, v_i
    else:
        momentum = nv * (1 + 1 + 4 + 2)  # A_ncols; the column's index, A, v*, v twice; v_i, v*_i
    contact = (1 + nc + 3 * nc + nc) + 3  # J_c v over its columns; R, v̂, μ
    touched = [1 if i in CONTACT_COLS else 0 for i in range(nv)]
    gradient = sum(6 + 7 * k for k in touched)  # lists, Jᵀγ (index, 3 J, 3 γ), grad, mask, A_ii, dp
    # H row i: ∇ℓ_i, A_i0..A_ii (unless shared), the contact list's count, for the contact (index,
    # 3 J_i, G, its column count, per listed column ≤ i: index, 3 J_k, H_ik; the first column > i,
    # read to break), the limit list's count.
    hessian, h_stores = 0, 0
    for i in range(nv):
        below = sum(1 for k in CONTACT_COLS if k <= i)
        contact_part = (6 + 5 * below + (1 if max(CONTACT_COLS) > i else 0)) if touched[i] else 0
        hessian += 1 + (0 if shared else i + 1) + 1 + contact_part + 1
        h_stores += 1 + (i + 1) + (below if touched[i] else 0)
    factor = n * n + n + n  # the H tile, the rhs tile, the pivot check's H_ii
    readback = nv + (n if shared else 0)  # Δv from the solve's output (and its tile load into shared memory)
    if lane_cholesky:  # fused_cholesky="lanes": row r < nv loads its nv entries of H and b_r; 32 x_r stored
        factor = nv * (nv + 1)
    if shared:
        direction = bound + (1 + nc + 3 * nc + nc) + 2 * nv  # J_c Δv; per DOF v_i, ∇ℓ_i (A, v*, Δv shared)
    else:
        direction = bound + (1 + nc + 3 * nc + nc) + nv * (4 + 5)  # J_c Δv; per DOF A_i Δv, v, v*, Δv, ∇ℓ, Δv
    if tiles:  # fused_hessian="tiles" (contact_solve_fused._tile_hessian); A and v* in shared tiles
        slab = 2 * 16 * n  # the slab scratch holds J's 16 rows and G J's (SLAB_ROWS)
        # per column k < 32 (lanes over columns): ∇ℓ_k (k < nv; no drive; A's column from its
        # shared tile); the tiles of H (from the scratch) and of −∇ℓ; the contact count per lane;
        # the one contact slab: per column < nv, J's 3 rows and G; the slab's two tiles.
        hessian = nv + n * n + n + bound + nv * (3 + 1) + slab
        h_stores = n + n * n + slab  # −∇ℓ_k and column k of A + diag(d); every entry of the slab
        factor = n  # only the check's diagonal, stored (counted with the stores) and read back
        readback = 0  # Δv from the shared solution tile

    probe = 6 + bound + 9 + 3  # P.line (lane 0), bound, vc and Δvc, R, v̂, μ
    loads = momentum + bound + contact + gradient + hessian + factor + readback + direction + 2 * nv
    stores = (2 * nv + 7) + nv + h_stores + n + nv + (3 + 3) + nv
    return loads + probes_per_iteration * probe, stores, hessian


@pytest.mark.parametrize("lanes", [32, 1])
def test_newton_traffic_equals_a_count_by_hand_on_one_contact(device, lanes):
    """H by rows, factored by the tile Cholesky (the count by hand of the other ways: below)."""
    solver = _sphere_slide_step(device, fused_cholesky="tile")
    d = solver.diagnostics()
    its, probes = int(d["newton_iterations"][0]), int(d["line_search_iterations"][0])
    assert its >= 1 and int(solver.work.P.contact_count.numpy()[0]) == 1
    P = solver.work.P
    assert tuple(P.contact_cols.numpy()[0, 0, :P.contact_ncols.numpy()[0, 0]]) == CONTACT_COLS
    assert set(P.A_ncols.numpy()[0]) == {1} and P.dof_mask.numpy()[0].all()
    t = newton_traffic(solver, lanes=lanes)
    loads, stores, hessian = _hand_count(lanes, probes / its)
    assert t["method"] == "derived" and t["iterations"] == its
    assert t["loads"] == pytest.approx(loads, rel=1e-12) and t["stores"] == pytest.approx(stores, rel=1e-12)
    assert t["phases"]["hessian"]["loads"] == hessian
    assert t["phases"]["step_load"]["loads"] == 0  # A and v* from global memory beside the tile Cholesky
    assert t["load_bytes"] == pytest.approx(sum(p["load_bytes"] for p in t["phases"].values()))
    if lanes == 1:  # one lane does everything: the busiest lane is the whole block
        assert t["busiest_lane_loads"] == pytest.approx(t["loads"])
        # its own loads: all but the tiles of H and −∇ℓ the factorization loads
        assert t["busiest_lane_own_loads"] == pytest.approx(t["loads"] - 32 * 32 - 32)
    else:
        assert t["busiest_lane_loads"] < t["loads"] / 4


@pytest.mark.parametrize("lanes", [32, 1])
def test_newton_traffic_of_the_tile_hessian_equals_a_count_by_hand(device, lanes):
    """fused_hessian="tiles": H is not in global memory; the count by hand of its slabs."""
    solver = _sphere_slide_step(device, fused_hessian="tiles")
    d = solver.diagnostics()
    its, probes = int(d["newton_iterations"][0]), int(d["line_search_iterations"][0])
    assert its >= 1 and int(solver.work.P.contact_count.numpy()[0]) == 1 and solver.work.P.n_pad == 8
    t = newton_traffic(solver, lanes=lanes)
    loads, stores, hessian = _hand_count(lanes, probes / its, tiles=True)
    step_load = (8 * 8 + 6) / its  # A (n_pad × n_pad) and v* once per step, the iteration's share
    assert t["loads"] == pytest.approx(loads + step_load, rel=1e-12)
    assert t["stores"] == pytest.approx(stores, rel=1e-12)
    assert t["phases"]["hessian"]["loads"] == hessian
    assert t["phases"]["step_load"]["loads"] == pytest.approx(step_load, rel=1e-12)
    if lanes == 1:  # its own loads: all but the tiles of H, −∇ℓ, the slab's J and G J, A and v*
        assert t["busiest_lane_own_loads"] == pytest.approx(t["loads"] - (32 * 32 + 32 + 2 * 16 * 32) - step_load)


@pytest.mark.parametrize("lanes", [32, 1])
def test_newton_traffic_of_the_lane_cholesky_equals_a_count_by_hand(device, lanes):
    """fused_cholesky="lanes": each row of H and b loaded once by its lane, no tile load."""
    solver = _sphere_slide_step(device, fused_cholesky="lanes")
    d = solver.diagnostics()
    its, probes = int(d["newton_iterations"][0]), int(d["line_search_iterations"][0])
    t = newton_traffic(solver, lanes=lanes)
    loads, stores, hessian = _hand_count(lanes, probes / its, lane_cholesky=True)
    step_load = (8 * 8 + 6) / its  # A (n_pad × n_pad) and v* once per step, the iteration's share
    assert t["loads"] == pytest.approx(loads + step_load, rel=1e-12)
    assert t["stores"] == pytest.approx(stores, rel=1e-12)
    assert t["phases"]["factor_solve"]["loads"] == 6 * 7
    if lanes == 1:  # the solve loads no tile: the lane's own loads are all but Δv's, A's and v*'s tiles
        assert t["busiest_lane_own_loads"] == pytest.approx(t["loads"] - 32 - step_load)
    else:  # the busiest lane of the solve loads one row
        assert t["phases"]["factor_solve"]["busiest_lane_loads"] == 7


def test_newton_traffic_needs_the_fused_path(device):
    solver = _sphere_slide_step(device, newton_path="staged")
    with pytest.raises(ValueError, match="newton_path"):
        newton_traffic(solver)


def _array_bytes(a):
    return a.size * wp.types.type_size_in_bytes(a.dtype)


def test_setup_traffic_counts_launches_and_bytes_independently(device):
    scene = scenes.get("sphere_slide", 3)
    run = SapRun(scene, "approx32", {}, device, scene.dt, noise_channels(scene), 0.1, 0)
    run.step()
    # the independent count: every wp.launch / wp.launch_tiled between the stage marks
    counted, stage_of = {}, []
    original = wp.launch, wp.launch_tiled

    def counting(fn):
        def wrapped(*a, **k):
            stage_of.append(None)
            return fn(*a, **k)
        return wrapped

    def mark(stage):
        counted[stage] = counted.get(stage, 0) + len(stage_of)
        stage_of.clear()

    wp.launch, wp.launch_tiled = counting(original[0]), counting(original[1])
    try:
        run.set_stage_hook(mark)
        run.step(mark=mark)
    finally:
        wp.launch, wp.launch_tiled = original
        run.set_stage_hook(None)
    t = setup_traffic(run)
    assert t["method"] == "counted" and t["num_worlds"] == 3
    for stage in SETUP_STAGES:
        assert t["stages"][stage]["launches"] == counted[stage], stage
    assert t["setup"]["launches"] == sum(counted[s] for s in SETUP_STAGES)
    # forward kinematics: the model's joint arrays, q₀, v₀ in; poses, twists, subspaces out
    s, m = run.solver, run.solver.m
    fk = next(c for c in t["stages"]["boundary_in"]["calls"] if c["kernel"] == "_forward_kinematics")
    model_in = [m.joint_type, m.joint_parent, m.joint_child, m.joint_X_p, m.joint_X_c, m.joint_q_start,
                m.joint_qd_start, m.joint_lin_count, m.joint_ang_count, m.joint_axis, m.joint_order, m.level_start]
    assert fk["bytes_in"] == sum(_array_bytes(a) for a in model_in + [s.work.q0, s.work.v0])
    assert fk["bytes_out"] == sum(_array_bytes(a) for a in (s.work.body_X, s.work.body_V, s.work.dof_S))
    assert fk["bytes"] == fk["bytes_in"] + fk["bytes_out"]
    assert t["setup"]["bytes"] == sum(t["stages"][st]["bytes"] for st in SETUP_STAGES)


@pytest.mark.skipif(not scenes.availability("humanoid")[0], reason="the humanoid MJCF needs mujoco-warp's files")
def test_cli_structure_prints_and_writes_the_traffic(capsys, device):
    assert main(["humanoid", "--num-worlds", "2", "--steps", "1", "--warmup", "1", "--structure",
                 "--structure-steps", "1", "--device", str(device), "--json", "--quiet"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    row = json.loads(lines[-1])
    tr = row["traffic"]
    assert tr["newton"]["method"] == "derived" and tr["setup"]["method"] == "counted"
    assert tr["newton"]["iterations"] > 0 and tr["newton"]["loads"] > 0 and tr["setup"]["setup"]["launches"] > 0
    text = [line for line in lines if line.startswith("traffic: approx32 x2: ")]
    assert len(text) == 2 and "derived" in text[0] and "counted" in text[1]
    assert np.isfinite(tr["newton"]["busiest_lane_loads"])
