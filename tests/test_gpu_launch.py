"""sap_gpu.launch: the two launch shapes, their guards, and the record of what a step launches.

Warp compiles a module once per block size it is launched with, so every module of a step must
be launched at one block size (checked over every configuration of the humanoid step, by dry
runs that compile nothing); the block kernels need whole warps and one block per world.
"""

import numpy as np
import pytest
import warp as wp

import sap_gpu
from sap_common import scenes
from sap_common.config import LINE_SEARCH_VARIANTS, LINEAR_SOLVERS, NEWTON_PATHS, PRESETS
from sap_gpu.contact_solve_fused import launch_fused
from sap_gpu.launch import TILE_BLOCK_DIM, WORLD_BLOCK_DIM, launch_threads, loop_while, record_launches
from sap_gpu.precompile import step_variants


@wp.kernel
def _write_one(out: wp.array(dtype=int)):
    out[wp.tid()] = 1


def test_a_dry_run_records_and_runs_nothing(device):
    out = wp.zeros(4, dtype=int, device=device)
    with record_launches(dry_run=True) as record:
        launch_threads(_write_one, dim=4, device=device, outputs=[out])
    assert out.numpy().tolist() == [0, 0, 0, 0]
    assert record.launches == 1 and list(record.variants) == [(_write_one.module.name, WORLD_BLOCK_DIM)]
    launch_threads(_write_one, dim=4, device=device, outputs=[out])  # nothing open: it runs
    assert out.numpy().tolist() == [1, 1, 1, 1]


def test_records_nest_and_a_recording_that_runs_still_runs(device):
    out = wp.zeros(2, dtype=int, device=device)
    with record_launches() as outer:
        launch_threads(_write_one, dim=2, device=device, outputs=[out])
        with record_launches(dry_run=True) as inner:
            launch_threads(_write_one, dim=1, device=device, outputs=[out])
    assert out.numpy().tolist() == [1, 1] and outer.launches == 2 and inner.launches == 1


def test_loop_while_runs_its_body_once_in_a_dry_run(device):
    condition = wp.zeros(1, dtype=int, device=device)  # 0: a real loop would not run the body
    calls = []
    with record_launches(dry_run=True):
        loop_while(condition, lambda: calls.append(1))
    loop_while(condition, lambda: calls.append(2))
    assert calls == [1]


CONFIGS = [(preset, path, solver) for preset in PRESETS for path in NEWTON_PATHS for solver in LINEAR_SOLVERS]


@pytest.mark.parametrize("preset, path, solver", CONFIGS)
def test_every_module_of_a_step_launches_at_one_block_size(preset, path, solver):
    """No module of the humanoid step compiles twice on a GPU: one CUDA block size per module, the
    one-thread launches at 32, the block launches at whole warps. A dry run: nothing compiles."""
    scene = scenes.get("humanoid", num_worlds=1)
    for line_search in LINE_SEARCH_VARIANTS:
        record = step_variants(scene.sap_model, scene.max_rigid_contact, contact_preset_variant=preset,
                               newton_path=path, contact_linear_solver=solver, line_search_variant=line_search)
        by_module = {}
        for name, block_dim in record.variants:
            by_module.setdefault(name, set()).add(block_dim)
        twice = {name: sorted(b) for name, b in by_module.items() if len(b) > 1}
        assert not twice, f"{preset}/{path}/{solver}/{line_search}: modules at several block sizes: {twice}"
        assert all(b % 32 == 0 for b in {b for bs in by_module.values() for b in bs})
        # No generic kernel (dtype=Any): its overloads appear only at a real launch, so a dry run
        # could not compile them ahead of time.
        generic = [k.key for m in record.variants.values() for k in m.kernels.values() if k.is_generic]
        assert not generic, f"generic kernels in the step: {generic}"
        assert record.launches > 10 and any("fused_newton" in n for n in by_module) == (
            path == "fused" and solver == "cholesky")


def test_the_fused_kernel_runs_one_block_per_world_only(device):
    """The fused kernel shares a world's rows between the lanes of its block: launching it over
    arrays of another world count, or with a block that is not whole warps, is refused."""
    scene = scenes.get("sphere_drop", num_worlds=2)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=4, device=device)
    w = solver.work
    args = (solver.fused_kernel, w.P, w.N, 0)
    wrong = wp.zeros((3, w.v_init.shape[1]), dtype=wp.float64, device=device)
    with pytest.raises(ValueError, match="v_init: 3 worlds, but the problem has 2"):
        launch_fused(*args, wrong, w.H, w.newton_rhs, w.newton_dv, w.newton_L, w.v1, device)
    with pytest.raises(ValueError, match="block_dim: .* multiple of 32"):
        launch_fused(*args, w.v_init, w.H, w.newton_rhs, w.newton_dv, w.newton_L, w.v1, device, block_dim=48)
    assert TILE_BLOCK_DIM % 32 == 0
    launch_fused(*args, w.v_init, w.H, w.newton_rhs, w.newton_dv, w.newton_L, w.v1, device)  # the right way runs
    assert np.isfinite(w.v1.numpy()).all()


# ---------------------------------------------------------------------------- built_once


def test_built_once_builds_once_per_key_and_a_keyword_call_shares_the_positional_one():
    from sap_gpu.launch import built_once

    calls = []

    @built_once()
    def factory(a, b=2):
        calls.append((a, b))
        return object()

    first = factory(1)
    assert factory(1) is first and factory(1, 2) is first and factory(a=1, b=2) is first
    assert factory(b=2, a=1) is first and factory(1, b=2) is first  # a call seen before or not
    assert factory(1, 3) is not first
    assert calls == [(1, 2), (1, 3)]
    assert set(factory.built) == {(1, 2), (1, 3)}

    @built_once(key=lambda n: n <= 32)  # what shapes the product: one tile or not
    def sized(n):
        calls.append(n)
        return object()

    assert sized(8) is sized(32) and sized(64) is sized(96) and sized(8) is not sized(64)


def test_no_factory_keeps_a_cache_of_its_own():
    """Every memoized factory of sap_gpu goes through built_once: no module-level dict caches."""
    import pathlib
    import re

    root = pathlib.Path(sap_gpu.__file__).parent
    found = [f"{p.name}: {m.group(0)}" for p in sorted(root.glob("*.py"))
             for m in re.finditer(r"^_[A-Z_]+: dict = \{\}", p.read_text(encoding="utf-8"), flags=re.M)]
    assert not found, found
