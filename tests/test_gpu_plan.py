"""sap_gpu.plan: which Newton loop a solver runs, decided once, and read from the plan by every
part that depends on it (docs/pipeline.md § The Newton-loop plan)."""

import pathlib
import re

import pytest
import warp as wp

import sap_gpu
from sap_common import scenes
from sap_common.config import SapConfig
from sap_gpu.contact_solve import newton_kernels
from sap_gpu.contact_solve_fused import fused_newton_kernel
from sap_gpu.launch import TILE_BLOCK_DIM, record_launches
from sap_gpu.plan import FUSED_TILE, NewtonPlan


def _plan(nv, cuda, **overrides):
    return NewtonPlan.resolve(SapConfig.from_preset(overrides.pop("preset", "approx32"), **overrides), nv, cuda)


def test_the_plan_of_every_path_and_size():
    gpu = _plan(27, True)
    assert (gpu.path, gpu.size, gpu.hessian, gpu.factorization, gpu.max_registers, gpu.shared_tiles) == \
        ("fused", 32, "rows", "lanes", 128, True)
    assert (gpu.block_dim, gpu.worlds_per_block, gpu.T, gpu.TL) == (TILE_BLOCK_DIM, 1, wp.float64, wp.float32)
    assert _plan(27, True, preset="drake").max_registers == 168
    cpu = _plan(27, False)
    assert (cpu.factorization, cpu.max_registers, cpu.shared_tiles) == ("tile", None, False)
    big = _plan(81, True)
    assert (big.size, big.factorization, big.max_registers, big.shared_tiles) == (96, "blocked", None, False)
    tiles = _plan(27, True, fused_hessian="tiles")
    assert (tiles.hessian, tiles.factorization, tiles.max_registers, tiles.shared_tiles) == \
        ("tiles", "tile", None, True)
    assert _plan(81, True, fused_hessian="tiles").hessian == "rows"  # H of more than one tile: by rows
    staged = _plan(27, True, newton_path="staged")
    assert (staged.path, staged.size, staged.factorization, staged.block_dim) == ("staged", 32, "tile", 1)
    assert _plan(81, True, newton_path="staged").factorization == "blocked"
    pcr = _plan(27, True, contact_linear_solver="pcr")  # PCR runs staged whatever newton_path says
    assert (pcr.path, pcr.hessian, pcr.factorization) == ("staged", "matrix_free", "pcr")
    assert _plan(6, True, fused_max_registers=96).max_registers == 96
    assert "fused Newton loop" in gpu.describe() and "≤ 128 registers" in gpu.describe()
    assert "staged Newton loop" in staged.describe()


def test_the_solver_and_its_workspace_run_the_plan():
    scene = scenes.get("box_stack", num_worlds=2)
    kwargs = dict(max_rigid_contact=scene.max_rigid_contact, device="cpu")
    for overrides in ({}, {"newton_path": "staged"}, {"contact_linear_solver": "pcr"}):
        solver = sap_gpu.SolverSAP(scene.sap_model, **kwargs, **overrides)
        plan = solver.plan
        assert plan == NewtonPlan.resolve(solver.config, scene.sap_model.joint_dof_count, cuda=False)
        assert solver.work.plan is plan and solver.fused == plan.fused
        assert solver.kernels is newton_kernels(plan)
        if plan.fused:
            assert solver.work.H.shape[1:] == (plan.size, plan.size) and plan.size == FUSED_TILE
            assert solver.fused_kernel is fused_newton_kernel(plan)
        else:
            assert solver.fused_kernel is None and solver.work.newton_rhs.shape[1] == plan.size
    with record_launches(dry_run=True):  # what a GPU compiles: the plan is CUDA's
        assert sap_gpu.SolverSAP(scene.sap_model, **kwargs).plan.factorization == "lanes"


def test_the_fused_kernel_is_built_once_per_shape():
    """Two plans that differ only where the kernel does not (the padded size of one tile, the
    device flag of a plan without a register cap) share one kernel; a cap makes another."""
    a = _plan(6, False)
    b = _plan(27, False)
    assert a.size == b.size == FUSED_TILE and fused_newton_kernel(a) is fused_newton_kernel(b)
    capped = _plan(27, True)
    assert fused_newton_kernel(capped) is not fused_newton_kernel(b)
    with pytest.raises(ValueError, match="the plan's path is 'staged'"):
        fused_newton_kernel(_plan(6, False, newton_path="staged"))


def test_nothing_but_the_plan_decides_the_newton_loop():
    """The decisions live in sap_gpu/plan.py only: no other module of sap_gpu calls the resolvers."""
    root = pathlib.Path(sap_gpu.__file__).parent
    names = (r"\b(resolve_fused_cholesky|fused_cholesky_for|fused_hessian_for|fused_register_cap|fused_size"
             r"|swept_cholesky)\(")
    found = [f"{p.name}:{i + 1}" for p in sorted(root.glob("*.py")) if p.name != "plan.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines()) if re.search(names, line)]
    assert not found, found
