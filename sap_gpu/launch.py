"""Launch shapes of the sap_gpu kernels: how many threads a block gets.

Two kinds of launch:

* **one thread per world** (kinematics, dynamics, collision, Jacobians, the staged Newton
  kernels): ``wp.launch(kernel, dim=num_worlds, block_dim=world_block_dim(device))``. On a
  CUDA device Warp's default block of 256 threads would put 8192 worlds on 32 blocks, i.e. on
  32 of an H100's 132 SMs; blocks of one warp (32 threads) give 256 blocks, so every SM gets
  work, and a warp is the GPU's scheduling unit, so a smaller block would leave lanes idle.
  On the CPU device a launch's threads run one after another and a block only matters to
  cooperative (tile) kernels, so these launches keep Warp's CPU default of 1 (a larger block
  would run the same threads as cooperative fibers and compile the module a second time).
* **one block per world** (the tile Cholesky, the fused Newton loop):
  ``wp.launch_tiled(kernel, dim=[num_worlds], block_dim=TILE_BLOCK_DIM)``. On the CPU device
  these run on one lane unless ``wp.config.enable_cpu_blocks = True`` (what the tests set to
  exercise the cooperative code paths).
"""

from __future__ import annotations

__all__ = ["WORLD_BLOCK_DIM", "TILE_BLOCK_DIM", "world_block_dim"]

WORLD_BLOCK_DIM = 32  # threads (worlds) per block of a one-thread-per-world launch on CUDA
TILE_BLOCK_DIM = 32  # threads (lanes) of one world's block: one warp


def world_block_dim(device) -> int:
    """``block_dim`` of a one-thread-per-world launch on ``device`` (see the module docstring)."""
    return WORLD_BLOCK_DIM if device.is_cuda else 1
