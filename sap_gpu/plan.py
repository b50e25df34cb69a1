"""How stage 3 runs for one solver, decided once: the Newton-loop plan.

A :class:`NewtonPlan` is resolved when :class:`~sap_gpu.solver.SolverSAP` is built, from the
configuration (``newton_path``, ``contact_linear_solver``, ``fused_hessian``, ``fused_cholesky``,
``fused_max_registers``, the precisions, the line search and the contact approximation), the
model's DOF count and the device, and every reader takes it from there: the workspace sizes the
Newton system and its scratch by it, the solver builds and launches the kernels it names,
``sap-precompile`` compiles them and ``sap-benchmark`` labels its runs with it. Nothing else
decides which Newton loop runs.

The decisions (docs/pipeline.md § The Newton-loop plan):

* **path**: ``fused`` (one block of lanes per world runs its whole loop) or ``staged`` (one thread
  per world per kernel, a trip of ``wp.capture_while`` per iteration); PCR always runs staged
  (its iterations need block barriers around a matrix-free product).
* **size**: the Newton system's padded size: the fused path pads to 32 (one tile, one compiled
  variant for every nv ≤ 32) or a multiple of 32; the staged path to
  :func:`sap_gpu.blocked_cholesky.padded_size`.
* **hessian**: how the fused kernel forms H: ``rows`` (lanes over rows of H in global memory) or
  ``tiles`` (in shared memory by tile products; a world of one tile only).
* **factorization**: ``lanes`` (H's rows in the lanes' registers, one tile formed by rows),
  ``tile`` (Warp's tile Cholesky on one tile), ``blocked`` (32 × 32 blocks, nv > 32), or ``pcr``.
  ``fused_cholesky="auto"`` takes ``lanes`` on a GPU and ``tile`` on Warp's CPU device, the faster
  of the two on each (docs/benchmarks.md § The factorization on the CPU device).
* **max_registers**: the fused kernel's register cap on CUDA (``None``: the compiler's choice; on
  the CPU device a cap means nothing, so none is set there).
* **block_dim**, **worlds_per_block**: the fused kernel's lanes per world and worlds per block.
* **shared_tiles**: whether the fused kernel keeps the world's A, v* and Δv in shared tiles for
  the step (where H is formed by tiles or factored in the lanes' registers).
"""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

from sap_common.constants import (
    DEFAULT_FUSED_CHOLESKY,
    FUSED_AUTO_CHOLESKY,
    FUSED_AUTO_MAX_REGISTERS,
    FUSED_CHOLESKY_AUTO,
    FUSED_CHOLESKYS,
    FUSED_HESSIANS,
    FUSED_MAX_REGISTERS_AUTO,
    FUSED_MAX_REGISTERS_NONE,
)

from .blocked_cholesky import padded_size
from .launch import TILE_BLOCK_DIM

__all__ = ["NewtonPlan", "FUSED_TILE", "fused_size", "fused_hessian_for", "resolve_fused_cholesky",
           "fused_cholesky_for", "fused_register_cap", "swept_cholesky"]

FUSED_TILE = 32  # the fused path's Cholesky tile edge (and its padded size for nv ≤ 32)


def fused_size(nv: int) -> int:
    """The fused path's padded system size: 32 for nv ≤ 32, else nv rounded up to 32."""
    return FUSED_TILE * max(1, -(-nv // FUSED_TILE))


def fused_hessian_for(hessian: str, n: int) -> str:
    """How the fused kernel forms H for ``SapConfig.fused_hessian`` and padded size ``n``: ``tiles``
    only where the system is one tile (n = 32, nv ≤ 32); a larger world's H (humanoid3: nv = 81)
    does not fit a block's shared memory beside the factorization, so it is formed by rows."""
    if hessian not in FUSED_HESSIANS:
        raise ValueError(f"fused_hessian: {hessian!r} is not valid; valid: {', '.join(FUSED_HESSIANS)}")
    return "tiles" if hessian == "tiles" and n <= FUSED_TILE else "rows"


def resolve_fused_cholesky(cholesky: str, cuda: bool) -> str:
    """The factorization ``SapConfig.fused_cholesky`` asks for on a CUDA device (``cuda``) or
    Warp's CPU device: ``tile`` or ``lanes`` as given; ``auto`` what
    :data:`~sap_common.constants.FUSED_AUTO_CHOLESKY` gives for the device (``lanes`` on a GPU,
    ``tile`` on the CPU device, where a block is one lane)."""
    if cholesky not in FUSED_CHOLESKYS:
        raise ValueError(f"fused_cholesky: {cholesky!r} is not valid; valid: {', '.join(FUSED_CHOLESKYS)}")
    if cholesky == FUSED_CHOLESKY_AUTO:
        return FUSED_AUTO_CHOLESKY["cuda" if cuda else "cpu"]
    return cholesky


def fused_cholesky_for(cholesky: str, hessian: str, n: int) -> str:
    """How the fused kernel factors H for the factorization ``cholesky`` (``tile`` or ``lanes``:
    ``SapConfig.fused_cholesky`` resolved for the device by :func:`resolve_fused_cholesky`), the H
    it forms (:func:`fused_hessian_for`) and padded size ``n``: ``lanes`` only where H is one tile
    (n = 32) formed by rows, in global memory where the lanes load their rows from; a tile-formed H
    is already in shared memory, and a larger one is factored by blocks (still "tile" here: the
    plan's ``factorization`` says ``blocked``)."""
    if cholesky not in FUSED_CHOLESKYS or cholesky == FUSED_CHOLESKY_AUTO:
        raise ValueError(f"fused_cholesky: {cholesky!r} is not a factorization; valid: tile, lanes "
                         f"(resolve_fused_cholesky resolves {FUSED_CHOLESKY_AUTO!r} for a device)")
    return "lanes" if cholesky == "lanes" and n <= FUSED_TILE and fused_hessian_for(hessian, n) == "rows" else "tile"


def fused_register_cap(setting, linear_precision: str, n: int, hessian: str, cholesky: str) -> int | None:
    """The register cap the fused kernel is compiled with on CUDA (``None``: the compiler's choice)
    for ``SapConfig.fused_max_registers`` ``setting``, the linear solve's precision (``fp32`` or
    ``fp64``), padded size ``n``, the configured ``hessian`` and the factorization ``cholesky``
    (resolved for CUDA); an integer as given, ``None`` for ``"none"``; for ``"auto"``, where H is
    factored in the lanes' registers (:func:`fused_cholesky_for`), the cap of
    :data:`~sap_common.constants.FUSED_AUTO_MAX_REGISTERS` for that precision, else ``None``."""
    if setting == FUSED_MAX_REGISTERS_NONE:
        return None
    if setting != FUSED_MAX_REGISTERS_AUTO:
        return setting
    if fused_cholesky_for(cholesky, hessian, n) != "lanes":
        return None
    return FUSED_AUTO_MAX_REGISTERS[linear_precision]


def swept_cholesky(cholesky: str, hessian: str, cuda: bool) -> tuple[str, bool]:
    """For the tools that sweep fused_cholesky × fused_hessian on a CUDA device (``cuda``) or the
    CPU device: how the fused kernel factors the H of a world of one tile
    (:func:`fused_cholesky_for`), and whether that is how it factors it in the default
    configuration on that device (then there is nothing to set, and a run needs no label for it)."""
    taken = fused_cholesky_for(resolve_fused_cholesky(cholesky, cuda), hessian, FUSED_TILE)
    return taken, taken == fused_cholesky_for(resolve_fused_cholesky(DEFAULT_FUSED_CHOLESKY, cuda), hessian,
                                              FUSED_TILE)


@dataclass(frozen=True)
class NewtonPlan:
    """How stage 3 runs for one solver (the module docstring); build it with :meth:`resolve`.

    Attributes:
        path: ``fused`` or ``staged``.
        linear_solver: ``cholesky`` or ``pcr``.
        line_search: the line search variant.
        approximation: the contact approximation (``sap``, ``lagged``, ``similar``).
        objective_precision: ℓ, ∇ℓ and the Newton iterate's precision (``fp32``/``fp64``).
        linear_precision: the Newton system's precision (``fp32``/``fp64``).
        size: the Newton system's padded size.
        hessian: how H is formed: ``rows`` or ``tiles`` (fused), ``rows`` (staged Cholesky) or
            ``matrix_free`` (PCR: never formed).
        factorization: ``lanes``, ``tile``, ``blocked`` or ``pcr``.
        cholesky: ``SapConfig.fused_cholesky`` resolved for the device (``lanes`` or ``tile``): the
            factorization a fused kernel of one tile formed by rows takes.
        max_registers: the fused kernel's register cap on CUDA, or None.
        block_dim: lanes per world in the fused kernel (1: the staged kernels' thread per world).
        worlds_per_block: worlds per block of the fused kernel.
        shared_tiles: A, v* and Δv in shared tiles for the step (fused, one tile).
        cuda: the plan is for a CUDA device (or a dry run recording what one compiles).
        kinematic: the model has kinematic bodies: the contact term adds each contact's known
            velocity J_kin v₀ to v_c (a kernel variant of its own, so that other models compile the
            kernels they compiled before, docs/formulation.md § Kinematic bodies).
    """

    path: str
    linear_solver: str
    line_search: str
    approximation: str
    objective_precision: str
    linear_precision: str
    size: int
    hessian: str
    factorization: str
    cholesky: str
    max_registers: int | None
    block_dim: int
    worlds_per_block: int
    shared_tiles: bool
    cuda: bool
    kinematic: bool = False

    @classmethod
    def resolve(cls, config, nv: int, cuda: bool, kinematic: bool = False) -> "NewtonPlan":
        """The plan for ``config`` (a :class:`~sap_common.config.SapConfig`), ``nv`` DOFs and a
        CUDA device (``cuda``; a dry run of :func:`sap_gpu.launch.record_launches` counts as one)
        or Warp's CPU device; ``kinematic``: the model has kinematic bodies."""
        pcr = config.contact_linear_solver == "pcr"
        fused = config.newton_path == "fused" and not pcr
        cholesky = resolve_fused_cholesky(config.fused_cholesky, cuda)
        common = dict(linear_solver=config.contact_linear_solver, line_search=config.line_search_variant,
                      approximation=config.discrete_contact_approximation,
                      objective_precision=config.contact_solve_precision,
                      linear_precision=config.contact_linear_solve_precision, cholesky=cholesky,
                      worlds_per_block=1, cuda=bool(cuda), kinematic=bool(kinematic))
        if not fused:
            n = padded_size(nv)
            factorization = "pcr" if pcr else ("tile" if n <= FUSED_TILE else "blocked")
            return cls(path="staged", size=n, hessian="matrix_free" if pcr else "rows", factorization=factorization,
                       max_registers=None, block_dim=1, shared_tiles=False, **common)
        n = fused_size(nv)
        hessian = fused_hessian_for(config.fused_hessian, n)
        factorization = fused_cholesky_for(cholesky, config.fused_hessian, n)
        if n > FUSED_TILE:
            factorization = "blocked"
        cap = fused_register_cap(config.fused_max_registers, config.contact_linear_solve_precision, n,
                                 config.fused_hessian, cholesky) if cuda else None
        return cls(path="fused", size=n, hessian=hessian, factorization=factorization, max_registers=cap,
                   block_dim=TILE_BLOCK_DIM, shared_tiles=hessian == "tiles" or factorization == "lanes", **common)

    @property
    def fused(self) -> bool:
        """Whether stage 3 runs the fused loop."""
        return self.path == "fused"

    @property
    def T(self):
        """The Warp scalar of the objective (ℓ, ∇ℓ, the iterate)."""
        return wp.float32 if self.objective_precision == "fp32" else wp.float64

    @property
    def TL(self):
        """The Warp scalar of the Newton system."""
        return wp.float32 if self.linear_precision == "fp32" else wp.float64

    def describe(self) -> str:
        """One line for logs and benchmark headers."""
        if not self.fused:
            return (f"staged Newton loop, {self.linear_solver} ({self.factorization}) in {self.linear_precision}, "
                    f"system padded to {self.size}")
        cap = "no register cap" if self.max_registers is None else f"≤ {self.max_registers} registers"
        return (f"fused Newton loop, {self.block_dim} lanes per world, H by {self.hessian}, {self.factorization} "
                f"Cholesky in {self.linear_precision}, system padded to {self.size}, {cap}"
                + (", A and v* in shared tiles" if self.shared_tiles else ""))
