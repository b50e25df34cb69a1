"""How sap_gpu launches its kernels: the two launch shapes, and a record of what a step launches.

Every kernel launch of sap_gpu goes through one of two functions here:

* :func:`launch_threads`, **one thread per index** of ``dim`` (a world, or a world and an item:
  kinematics, dynamics, collision, Jacobians, the staged Newton kernels). On a CUDA device the
  threads come in blocks of :data:`WORLD_BLOCK_DIM` = 32: Warp's default block of 256 threads
  would put 8192 worlds on 32 blocks, i.e. on 32 of an H100's 132 SMs; blocks of one warp give
  256 blocks, so every SM gets work, and a warp is the GPU's scheduling unit, so a smaller
  block would leave lanes idle. On the CPU device a launch's threads run one after another and
  a block only matters to cooperative (tile) kernels, so these launches keep Warp's CPU
  default of 1 (a larger block would run the same threads as cooperative fibers).
* :func:`launch_blocks`, **one block of lanes per world** (``wp.launch_tiled``: the tile
  Cholesky, the fused Newton loop), :data:`TILE_BLOCK_DIM` = 32 lanes. These kernels reduce
  over the block with full-warp operations, so the block size must be a multiple of 32; the
  launch refuses any other. On the CPU device the block runs on one lane unless
  ``wp.config.enable_cpu_blocks = True`` (what the tests set to exercise the cooperative code).

Warp compiles a module once per block size it is launched with, so a fixed block size per
launch shape means one compiled variant of each module per device. The staged Newton loop
repeats with :func:`loop_while` (``wp.capture_while``: no host synchronization, graph-capturable).

:func:`record_launches` lists the (module, CUDA block size) variants a piece of host code
launches, optionally without running anything (a dry run): that is how ``sap-precompile``
finds what a scene's step needs compiled for a GPU, on a machine without one.

:func:`built_once` is how every factory of Warp structs, functions and kernels is memoized: a
kernel built twice would be a second module, compiled a second time.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field

import warp as wp

__all__ = ["WORLD_BLOCK_DIM", "TILE_BLOCK_DIM", "WARP_SIZE", "world_block_dim", "launch_threads", "launch_blocks",
           "loop_while", "record_launches", "dry_run_open", "LaunchRecord", "LaunchCall", "built_once"]

WORLD_BLOCK_DIM = 32  # threads (worlds) per block of a one-thread-per-index launch on CUDA
TILE_BLOCK_DIM = 32  # threads (lanes) of one world's block: one warp
WARP_SIZE = 32  # the block kernels' reductions use whole warps


def built_once(key=None):
    """Decorator: a factory of Warp structs, functions or kernels builds once per key and returns
    that same object on every later call.

    Warp makes a module of every kernel object, and a kernel built twice from one factory is a
    second module, compiled a second time (and, on a GPU, loaded twice), so every factory of the
    package goes through this. The key is ``key(*args, **kwargs)`` where a factory's arguments
    hold more than its kernel depends on (the fused kernel's key reads only the plan's fields that
    shape the kernel); by default, the arguments bound to the factory's signature with its
    defaults, so a positional and a keyword call share one entry. ``factory.built`` holds what was
    built, by key."""

    def decorate(factory):
        signature = inspect.signature(factory)
        built: dict = {}
        # the call as made -> what it built: a repeated call (several per step) skips binding the
        # signature, which costs more than the kernel launch it precedes on the CPU device
        calls: dict = {}

        @functools.wraps(factory)
        def get(*args, **kwargs):
            call = (args, tuple(kwargs.items()))
            hit = calls.get(call)
            if hit is not None:
                return hit
            if key is None:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                k = tuple(bound.arguments.values())
            else:
                k = key(*args, **kwargs)
            if k not in built:
                built[k] = factory(*args, **kwargs)
            calls[call] = built[k]
            return built[k]

        get.built = built
        return get

    return decorate


def world_block_dim(device) -> int:
    """``block_dim`` of a one-thread-per-index launch on ``device`` (see the module docstring)."""
    return WORLD_BLOCK_DIM if wp.get_device(device).is_cuda else 1


@dataclass
class LaunchRecord:
    """The launches seen inside :func:`record_launches`, in order of first launch.

    Attributes:
        variants: ``{(module name, CUDA block size): warp Module}``: what a GPU compiles.
        kernels: ``{(module name, CUDA block size): [kernel keys]}``.
        launches: the number of launches seen (a repeated launch counts each time).
        calls: one :class:`LaunchCall` per launch, in order (what ``sap-benchmark --structure``
            counts the bytes of).
        dry_run: launches were recorded, not run.
    """

    dry_run: bool
    variants: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)
    launches: int = 0
    calls: list = field(default_factory=list)

    def add(self, kernel, cuda_block_dim: int, dim=None, inputs=(), outputs=(), lanes: int = 1) -> None:
        key = (kernel.module.name, int(cuda_block_dim))
        self.variants.setdefault(key, kernel.module)
        names = self.kernels.setdefault(key, [])
        if kernel.key not in names:
            names.append(kernel.key)
        self.launches += 1
        self.calls.append(LaunchCall(kernel.key, kernel.module.name, dim, lanes, tuple(inputs), tuple(outputs)))


@dataclass(frozen=True)
class LaunchCall:
    """One recorded launch: the kernel's key and module, its launch ``dim`` (the worlds for a
    block-per-world launch), the threads each index of ``dim`` runs on (``lanes``: 1, or the
    block size of a block-per-world launch) and the arguments it was given (``inputs``,
    ``outputs``, as passed)."""

    kernel: str
    module: str
    dim: object
    lanes: int
    inputs: tuple
    outputs: tuple


_RECORDS: list[LaunchRecord] = []  # the records open now, innermost last


@contextlib.contextmanager
def record_launches(dry_run: bool = False):
    """Record every sap_gpu launch made inside the ``with`` block into a :class:`LaunchRecord`.

    With ``dry_run`` nothing is launched (so nothing is compiled for the device at hand) and
    :func:`loop_while` runs its body once, so every kernel of a loop is seen; device arrays keep
    whatever they held, so results of a dry run mean nothing. Records nest: a launch goes into
    every open record, and runs only if none of them is a dry run.
    """
    record = LaunchRecord(dry_run=bool(dry_run))
    _RECORDS.append(record)
    try:
        yield record
    finally:
        _RECORDS.remove(record)


def _record(kernel, cuda_block_dim: int, dim, inputs, outputs, lanes: int = 1) -> bool:
    """Add a launch to every open record; True if it must not run (a dry run is open)."""
    for record in _RECORDS:
        record.add(kernel, cuda_block_dim, dim, inputs, outputs, lanes)
    return any(record.dry_run for record in _RECORDS)


def launch_threads(kernel, *, dim, device, inputs=(), outputs=()) -> None:
    """Launch ``kernel`` with one thread per index of ``dim`` on ``device``, in blocks of
    :func:`world_block_dim`."""
    device = wp.get_device(device)
    if _RECORDS and _record(kernel, WORLD_BLOCK_DIM, dim, inputs, outputs):
        return
    wp.launch(kernel, dim=dim, inputs=list(inputs), outputs=list(outputs), device=device,
              block_dim=world_block_dim(device))


def launch_blocks(kernel, *, num_worlds: int, device, inputs=(), outputs=(), block_dim: int = TILE_BLOCK_DIM) -> None:
    """Launch ``kernel`` with one block of ``block_dim`` lanes per world (``wp.launch_tiled``), so
    that ``world, lane = wp.tid()`` inside it. ``ValueError`` unless ``block_dim`` is a positive
    multiple of :data:`WARP_SIZE` and ``num_worlds`` a count ≥ 0."""
    if isinstance(block_dim, bool) or not isinstance(block_dim, int) or block_dim <= 0 or block_dim % WARP_SIZE:
        raise ValueError(f"block_dim: the block kernels reduce over whole warps; must be a positive multiple of "
                         f"{WARP_SIZE}, got {block_dim!r}")
    if isinstance(num_worlds, bool) or not isinstance(num_worlds, int) or num_worlds < 0:
        raise ValueError(f"num_worlds: one block per world needs a world count >= 0, got {num_worlds!r}")
    if _RECORDS and _record(kernel, block_dim, num_worlds, inputs, outputs, block_dim):
        return
    wp.launch_tiled(kernel, dim=[num_worlds], inputs=list(inputs), outputs=list(outputs), block_dim=block_dim,
                    device=device)


def dry_run_open() -> bool:
    """True inside a dry run of :func:`record_launches`: what is launched there is recorded for a
    GPU to compile, whatever device the arrays are on."""
    return any(record.dry_run for record in _RECORDS)


def loop_while(condition, body) -> None:
    """``wp.capture_while(condition, body)``: repeat ``body`` while ``condition[0] != 0``, without a
    host synchronization on CUDA (a conditional graph node when captured). In a dry run of
    :func:`record_launches`, ``body`` runs once."""
    if dry_run_open():
        body()
        return
    wp.capture_while(condition, body)
