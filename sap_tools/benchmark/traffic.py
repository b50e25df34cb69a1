"""Memory traffic of a sap_gpu step as figures (``sap-benchmark --structure``).

Two figures, obtained two different ways, and named so in every output:

* **Newton loop, derived** (:func:`newton_traffic`): the global-memory loads and stores the fused
  Newton kernel (``sap_gpu/contact_solve_fused.py``, the default ``newton_path``) issues per
  Newton iteration of a world, *derived from its access pattern*: the functions of
  ``sap_gpu/contact_problem.py`` it calls are walked here, phase by phase, over the lists the
  step really built (each world's contact count, the non-zero columns of every row of A and
  of J, the rows touching every DOF, the scalar rows in use and their kinds) and each world's
  Newton and line-search iteration counts. Every array element the source reads counts as one
  load and every element it writes as one store, with the element's size in bytes (a
  ``vec3d`` is one load of 24 B); nothing is assumed cached, so two reads of ``v[k]`` in one
  expression are two loads, and a loop bound read from an array is a load. Struct scalars
  (``P.nv``, ``P.h``, ...) are kernel parameters, not loads. The tile Cholesky's loads and stores
  of H, ∇ℓ and Δv are spread evenly over the block's lanes; its work in shared memory is not
  counted; with ``fused_cholesky="lanes"`` each lane loads its row of H and b once and stores its
  Δv entry (the elimination is in registers). With ``fused_hessian="tiles"`` H is not in global
  memory at all: the phase ``hessian`` counts the lanes' writes of A's columns and of J's and
  G J's slabs to the world's scratch and the cooperative tile loads that bring them into shared
  memory, and ``factor_solve`` only the factor check's diagonal. With either (worlds of one tile,
  nv ≤ 32) A and v* are in shared tiles for the whole step (the phase
  ``step_load``: their tile loads, once per step, so per iteration the world's share of them), so
  the momentum pass, H's A part and the direction's sums read no A or v* from global memory
  (they read v there, densely: every v_k, k < nv, per row), and Δv comes from a shared tile
  (with rows, loaded there from the solve's output). Per world, the rows
  go to lanes round-robin (DOF i, contact c, scalar row r to lane ``index mod lanes``),
  as the kernel's ``range(lane, n, block_dim)`` loops do, and the
  **busiest lane** of an iteration is the sum, over the phases between two block barriers, of
  the largest lane's count: the dependent loads one world's iteration waits for. Its **own**
  loads leave out the lane's shares of cooperative tile loads, which the block issues together,
  coalesced and independent of each other.
* **Set-up kernels, counted** (:func:`setup_traffic`): one step recorded by
  :func:`sap_gpu.launch.record_launches` (the kernels run as usual) with the solver's stage hook
  marking the stages: per stage, the launches, the threads they start and the bytes of the
  arrays each launch takes, every array counted once per launch (its full allocation, the
  world-sized ones for all worlds): what a launch moves if it reads each element of its inputs
  and writes each element of its outputs once. Copies (``wp.copy``) and memsets are not
  launches and are not in it (``ops/step`` counts them).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from sap_common.rows import WINDOWED_KINDS, RowKind
from sap_gpu.contact_problem import ROW_TERM_KINDS
from sap_gpu.contact_solve_fused import CONTACTS_PER_SLAB, FUSED_TILE, SLAB_ROWS
from sap_gpu.launch import TILE_BLOCK_DIM, record_launches

__all__ = ["newton_traffic", "setup_traffic", "traffic_lines", "SETUP_STAGES", "NEWTON_PHASES"]

# Stages of SolverSAP.step before the Newton loop (docs/pipeline.md): the set-up of the problem.
SETUP_STAGES = ("boundary_in", "free_motion", "contact_jacobian", "constraints")
# The fused kernel's phases between block barriers, in order (one Newton iteration).
NEWTON_PHASES = ("evaluate_rows", "evaluate_gradient", "hessian", "factor_solve", "dv_readback", "direction",
                 "line_search_probe", "update", "step_load")

_I, _F64 = 4, 8  # bytes of an int32 index and of a float64


class _Phase:
    """Loads and stores per lane of one phase (counts and bytes)."""

    def __init__(self, lanes: int):
        self.loads = np.zeros(lanes, np.int64)
        self.load_bytes = np.zeros(lanes, np.int64)
        self.stores = np.zeros(lanes, np.int64)
        self.store_bytes = np.zeros(lanes, np.int64)
        self.tile_loads = np.zeros(lanes, np.int64)  # the part of ``loads`` from cooperative tile loads

    def load(self, lane: int, size: int, count: int = 1) -> None:
        self.loads[lane] += count
        self.load_bytes[lane] += count * size

    def store(self, lane: int, size: int, count: int = 1) -> None:
        self.stores[lane] += count
        self.store_bytes[lane] += count * size

    def spread(self, lanes: int, size: int, loads: int, stores: int) -> None:
        """A cooperative tile load/store: the elements shared evenly by the lanes."""
        for k in range(lanes):
            self.load(k, size, (loads + lanes - 1 - k) // lanes)
            self.store(k, size, (stores + lanes - 1 - k) // lanes)
            self.tile_loads[k] += (loads + lanes - 1 - k) // lanes


def _np(a):
    return a.numpy()


class _WorldLists:
    """The host copies of the lists one step built (every world at once)."""

    def __init__(self, solver):
        w = solver.work
        P = w.P
        self.nv, self.row_count = int(P.nv), int(w.rows.count)
        self.row_kind = w.rows.host.kind  # each scalar row's kind (static)
        # each scalar row's place in its term's loop (the loops spread their rows from lane 0)
        first = {k: int(w.rows.start[kinds[0]]) for kinds in ROW_TERM_KINDS for k in kinds}
        self.row_index = np.array([r - first[RowKind(int(k))] for r, k in enumerate(self.row_kind)], np.int64)
        self.n = int(w.H.shape[1])
        self.t = wp.types.type_size_in_bytes(P.v.dtype)
        self.tl = wp.types.type_size_in_bytes(w.H.dtype)
        plan = solver.plan
        self.fused = plan.fused
        self.n_pad = int(P.n_pad)
        self.tiles = plan.fused and plan.hessian == "tiles"
        self.lanes_cholesky = plan.fused and plan.factorization == "lanes"
        self.shared = plan.shared_tiles  # A, v* and Δv in shared tiles for the step
        self.approximation = solver.config.discrete_contact_approximation
        for name in ("contact_count", "A_ncols", "A_cols", "contact_ncols", "contact_cols", "dof_ncontacts",
                     "dof_contacts", "dof_nrows", "dof_rows", "row_ncols", "row_cols", "row_active",
                     "row_G", "dof_mask"):
            setattr(self, name, _np(getattr(P, name)))
        self.iterations = _np(w.N.iterations)
        self.ls_iterations = _np(w.N.ls_iterations)


def _rows_dot(ph: _Phase, lane: int, t: int, ncols: int, rows: int) -> None:
    """``contact_rows_dot`` (rows = 3) or ``sparse_row_dot`` (rows = 1) over ``ncols`` columns."""
    ph.load(lane, _I)  # the column count
    ph.load(lane, _I, ncols)  # the column indices
    ph.load(lane, _F64, rows * ncols)  # J (or A) entries
    ph.load(lane, t, ncols)  # x[k]


def _contact_params(ph: _Phase, lane: int, approximation: str) -> None:
    if approximation == "sap":  # R (vec3d), v̂ₙ, μ
        ph.load(lane, 24)
        ph.load(lane, _F64, 2)
    else:  # the Hunt–Crossley data (5 float64), μ
        ph.load(lane, 40)
        ph.load(lane, _F64)


def _row_params(ph: _Phase, lane: int, kind: int) -> None:
    """The reads of a scalar row's term (its kind's, fixed in the kernel): a drive's parameters, or R, v̂."""
    if kind == RowKind.DRIVE:
        ph.load(lane, _I)  # drive_dof
        ph.load(lane, _F64, 7)  # q₀, q_target, v_target, u₀, Kp, Kd, effort
    else:
        ph.load(lane, _F64, 2)  # R, v̂


def _world_phases(s: _WorldLists, w: int, lanes: int) -> dict:
    """Per-lane loads and stores of each phase of one Newton iteration of world ``w``."""
    t, tl, nv, S = s.t, s.tl, s.nv, s.row_count
    C = int(s.contact_count[w])
    ph = {name: _Phase(lanes) for name in NEWTON_PHASES}
    # evaluate: momentum_pass over DOFs, then evaluate_rows over contacts, scalar rows (no barrier between).
    e = ph["evaluate_rows"]
    for i in range(nv):
        k, n = i % lanes, int(s.A_ncols[w, i])
        if s.shared:  # A and v* from their shared tiles (step_load), densely: v_k for every k < nv, v_i
            e.load(k, t, nv + 1)
        else:
            e.load(k, _I)
            e.load(k, _I, n)
            e.load(k, _F64, 2 * n)  # A, v*
            e.load(k, t, 2 * n)  # v twice
            e.load(k, t)
            e.load(k, _F64)  # v_i, v*_i for ℓ_A
        e.store(k, t, 2)  # grad, dp
    for k in range(lanes):
        e.load(k, _I)  # the contact count (the loop bound of every lane)
    for c in range(C):
        k = c % lanes
        _rows_dot(e, k, t, int(s.contact_ncols[w, c]), 3)
        _contact_params(e, k, s.approximation)
        e.store(k, 9 * t)  # G
        e.store(k, t, 6)  # vc, γ
    for r in range(S):
        k = int(s.row_index[r]) % lanes
        _rows_dot(e, k, t, int(s.row_ncols[w, r]), 1)
        e.store(k, t)  # vc
        windowed = RowKind(int(s.row_kind[r])) in WINDOWED_KINDS
        if windowed:
            e.store(k, t, 2)  # γ, G cleared
            e.load(k, _I)  # active
        if s.row_active[w, r] or not windowed:
            _row_params(e, k, int(s.row_kind[r]))
            e.store(k, t, 2)  # γ, G
    # gradient_pass over DOFs: Jᵀγ from the per-DOF lists, ∇ℓ, the stopping sums.
    g = ph["evaluate_gradient"]
    for i in range(nv):
        k = i % lanes
        nc, nl = int(s.dof_ncontacts[w, i]), int(s.dof_nrows[w, i])
        g.load(k, _I)
        g.load(k, _I, nc)
        g.load(k, _F64, 3 * nc)
        g.load(k, t, 3 * nc)
        g.load(k, _I)
        g.load(k, _I, nl)
        g.load(k, _F64, nl)
        g.load(k, t, nl)
        g.load(k, t)
        g.store(k, t)  # grad
        g.load(k, _I)  # dof_mask
        if s.dof_mask[w, i]:
            g.load(k, _F64)
            g.load(k, t)
    if s.tiles:
        _tile_hessian(ph["hessian"], s, w, C, lanes)
        _shared_factor_solve(ph["factor_solve"], tl, lanes)
    else:
        _hessian_rows(ph["hessian"], s, w, lanes, s.shared)
        if s.lanes_cholesky:
            _lane_factor_solve(ph["factor_solve"], nv, tl, lanes)
        else:
            _factor_solve(ph["factor_solve"], s.n, tl, lanes)
    r = ph["dv_readback"]
    for i in range(nv):
        if not s.tiles:  # with tiles Δv is read from the shared solution tile
            r.load(i % lanes, tl)
        r.store(i % lanes, t)
    if s.shared and not s.tiles:  # Δv's tile load into shared memory, for the direction's sums
        r.spread(lanes, tl, FUSED_TILE, 0)
    # direction: Δvc = J Δv over rows, then the slope sums over DOFs (one barrier interval).
    dr = ph["direction"]
    for k in range(lanes):
        dr.load(k, _I)
    for c in range(C):
        _rows_dot(dr, c % lanes, t, int(s.contact_ncols[w, c]), 3)
        dr.store(c % lanes, t, 3)
    for rr in range(S):
        _rows_dot(dr, rr % lanes, t, int(s.row_ncols[w, rr]), 1)
        dr.store(rr % lanes, t)
    for i in range(nv):
        k = i % lanes
        if s.shared:  # A, v* and Δv from shared tiles
            dr.load(k, t, 2)  # v_i, ∇ℓ_i
            continue
        _rows_dot(dr, k, t, int(s.A_ncols[w, i]), 1)
        dr.load(k, t, 4)  # v, Δv, ∇ℓ, Δv
        dr.load(k, _F64)  # v*
    dr.store(0, t, 3)  # ℓ_A, the slope, the curvature into P.line
    # one line-search probe: cost_along_line over rows.
    p = ph["line_search_probe"]
    p.load(0, t, 6)  # P.line in the quadratic part
    for k in range(lanes):
        p.load(k, _I)
    for c in range(C):
        k = c % lanes
        p.load(k, t, 9)  # vc (3), Δvc (3 + 3)
        _contact_params(p, k, s.approximation)
    for rr in range(S):
        k = int(s.row_index[rr]) % lanes
        windowed = RowKind(int(s.row_kind[rr])) in WINDOWED_KINDS
        if windowed:
            p.load(k, _I)  # active
        if s.row_active[w, rr] or not windowed:
            p.load(k, t, 2)  # vc, Δvc
            _row_params(p, k, int(s.row_kind[rr]))
    u = ph["update"]
    for i in range(nv):
        u.load(i % lanes, t, 2)
        u.store(i % lanes, t)
    if s.shared:  # once per step: the tiles of A (n_pad × n_pad) and v*
        ph["step_load"].spread(lanes, _F64, s.n_pad * s.n_pad + nv, 0)
    return ph


def _hessian_rows(h: _Phase, s: _WorldLists, w: int, lanes: int, shared_A: bool) -> None:
    """hessian_rows over DOFs (``fused_hessian="rows"``): row i of H's lower triangle, −∇ℓ_i; with
    ``shared_A`` its A part from the shared tile."""
    t, tl, nv = s.t, s.tl, s.nv
    for i in range(nv):
        k = i % lanes
        h.load(k, t)
        h.store(k, tl)
        if not shared_A:
            h.load(k, _F64, i + 1)
        h.store(k, tl, i + 1)
        h.load(k, _I)
        for u in range(int(s.dof_ncontacts[w, i])):
            c = int(s.dof_contacts[w, i, u])
            h.load(k, _I)
            h.load(k, _F64, 3)
            h.load(k, 9 * t)
            h.load(k, _I)  # the contact's column count
            for tt in range(int(s.contact_ncols[w, c])):
                h.load(k, _I)
                if int(s.contact_cols[w, c, tt]) > i:
                    break
                h.load(k, _F64, 3)
                h.load(k, tl)
                h.store(k, tl)
        h.load(k, _I)
        for u in range(int(s.dof_nrows[w, i])):
            r = int(s.dof_rows[w, i, u])
            h.load(k, _I)
            h.load(k, t)
            h.load(k, _F64)
            if s.row_G[w, r] != 0:
                h.load(k, _I)
                for tt in range(int(s.row_ncols[w, r])):
                    h.load(k, _I)
                    if int(s.row_cols[w, r, tt]) > i:
                        break
                    h.load(k, _F64)
                    h.load(k, tl)
                    h.store(k, tl)


def _tile_hessian(h: _Phase, s: _WorldLists, w: int, C: int, lanes: int) -> None:
    """The tile assembly (``fused_hessian="tiles"``), lanes over the 32 columns: A and −∇ℓ
    written to the world's scratch and loaded as tiles, then per slab the lanes' J and G J
    entries and the slab's two tile loads."""
    t, tl, nv, L, ft, sr = s.t, s.tl, s.nv, s.row_count, FUSED_TILE, SLAB_ROWS
    for col in range(ft):  # lanes over columns: column k of A to the slab, −∇ℓ_k
        k = col % lanes
        if col < nv:
            h.load(k, t)  # ∇ℓ_k
        h.store(k, tl)  # −∇ℓ_k
        h.store(k, tl, ft)  # (A's column from its shared tile)
    h.spread(lanes, tl, ft * ft + ft, 0)  # the tiles of H and of −∇ℓ
    for k in range(lanes):
        h.load(k, _I)  # the contact count
    for c0 in range(0, C, CONTACTS_PER_SLAB):
        for col in range(ft):
            k = col % lanes
            for c in range(c0, c0 + CONTACTS_PER_SLAB):
                if c < C and col < nv:
                    h.load(k, _F64, 3)  # J's 3 rows at the column
                    h.load(k, 9 * t)  # G
                h.store(k, tl, 6)
            h.store(k, tl, 2 * (sr - 3 * CONTACTS_PER_SLAB))  # the slab's tail rows
        h.spread(lanes, tl, 2 * sr * ft, 0)  # the slab's J and G J tiles
    active = [r for r in range(L) if s.row_G[w, r] != 0]
    for k in range(lanes):  # every lane scans the rows' G for the slab boundaries (and again to fill)
        h.load(k, t, L)
    for a0 in range(0, len(active), sr):
        rows = active[a0:a0 + sr]
        # the rows the slab's scan spans: from the row after the last slab's last one to the row
        # after its own last one (a full slab), or to the end
        r0 = active[a0 - 1] + 1 if a0 else 0
        r1 = active[a0 + sr - 1] + 1 if a0 + sr <= len(active) else L
        for col in range(ft):
            k = col % lanes
            h.load(k, t, r1 - r0)  # G of every row the slab spans
            if col < nv:
                h.load(k, _F64, len(rows))  # J at the column
            h.store(k, tl, 2 * sr)  # J and G J: the rows, then zeros to the slab's end
        h.spread(lanes, tl, 2 * sr * ft, 0)


def _shared_factor_solve(ph: _Phase, tl: int, lanes: int) -> None:
    """The factorization in shared memory: only the check's diagonal goes through global memory
    (each lane stores H_ii of its rows and reads it back)."""
    for i in range(FUSED_TILE):
        ph.store(i % lanes, tl)
        ph.load(i % lanes, tl)


def _lane_factor_solve(ph: _Phase, nv: int, tl: int, lanes: int) -> None:
    """``fused_cholesky="lanes"`` (sap_gpu/lane_cholesky.py): row r < nv loads its nv entries of H
    (both triangles, from the lower one) and b_r; every row of the tile stores its x_r (0 past
    nv). The elimination runs in registers and warp shuffles: no memory traffic."""
    for r in range(FUSED_TILE):
        if r < nv:
            ph.load(r % lanes, tl, nv + 1)
        ph.store(r % lanes, tl)


def _factor_solve(ph: _Phase, n: int, tl: int, lanes: int) -> None:
    """The tile Cholesky of the fused kernel: tile loads and stores of H, L, −∇ℓ and Δv, the pivot check."""
    T = 32
    if n <= T:  # single_factor_solve: H, rhs loaded, the check reads H_ii, Δv stored
        ph.spread(lanes, tl, n * n + n, n)
        for i in range(n):
            ph.load(i % lanes, tl)
        return
    nb = n // T
    loads = stores = 0
    for j in range(nb):
        loads += T * T * (1 + j)
        stores += T * T
        for _ in range(j + 1, nb):
            loads += T * T * (1 + 2 * j)
            stores += T * T
    for j in range(nb):  # forward and backward substitution
        loads += 2 * (T + j * (T * T + T) + T * T)
        stores += 2 * T
    ph.spread(lanes, tl, loads, stores)
    for i in range(n):  # the check: H_ii and row i of L up to the diagonal
        ph.load(i % lanes, tl, i + 2)


def newton_traffic(solver, lanes: int = TILE_BLOCK_DIM) -> dict:
    """The fused Newton kernel's global loads and stores, derived (see the module docstring), for
    the last step of ``solver``: per Newton iteration of a world, averaged over every iteration
    of every world of the step (line-search probes at each world's own count per iteration).

    Returns ``method`` (``"derived"``), ``lanes``, ``iterations`` (Newton iterations of the step,
    all worlds), ``probes_per_iteration``, and per iteration ``loads``, ``load_bytes``,
    ``stores``, ``store_bytes`` (the whole block), ``busiest_lane_loads`` and
    ``busiest_lane_load_bytes`` (the sum over phases of the busiest lane), ``busiest_lane_own_loads``
    (the same without the lanes' shares of cooperative tile loads: the loads a lane issues one
    after another, each element of a tile load being one of many independent, coalesced loads of
    the block), and ``phases``:
    ``{phase: {"loads", "load_bytes", "stores", "store_bytes", "busiest_lane_loads",
    "busiest_lane_own_loads"}}`` per
    iteration (``line_search_probe`` times the probes). Needs the fused path.
    """
    if not solver.work.fused:
        raise ValueError("newton_path: the derived Newton traffic is of the fused kernel; run with newton_path='fused'")
    s = _WorldLists(solver)
    keys = ("loads", "load_bytes", "stores", "store_bytes", "busiest_lane_loads", "busiest_lane_load_bytes",
            "busiest_lane_own_loads")
    total = {name: dict.fromkeys(keys, 0.0) for name in NEWTON_PHASES}
    its = probes = 0
    for w in range(len(s.contact_count)):
        n_it, n_probe = int(s.iterations[w]), int(s.ls_iterations[w])
        if n_it == 0:
            continue
        its += n_it
        probes += n_probe
        for name, ph in _world_phases(s, w, lanes).items():
            times = n_probe if name == "line_search_probe" else 1 if name == "step_load" else n_it
            tot = total[name]
            tot["loads"] += times * int(ph.loads.sum())
            tot["load_bytes"] += times * int(ph.load_bytes.sum())
            tot["stores"] += times * int(ph.stores.sum())
            tot["store_bytes"] += times * int(ph.store_bytes.sum())
            tot["busiest_lane_loads"] += times * int(ph.loads.max())
            tot["busiest_lane_load_bytes"] += times * int(ph.load_bytes.max())
            tot["busiest_lane_own_loads"] += times * int((ph.loads - ph.tile_loads).max())
    per = {name: {k: (v / its if its else 0.0) for k, v in d.items()} for name, d in total.items()}
    out = dict(method="derived", lanes=lanes, iterations=its, probes_per_iteration=probes / its if its else 0.0,
               phases=per)
    for k in keys:
        out[k] = sum(d[k] for d in per.values())
    return out


def _array_bytes(a) -> int:
    return int(a.size) * wp.types.type_size_in_bytes(a.dtype)


def _arrays(args) -> dict:
    """``{(ptr, bytes): array}`` of the wp.arrays among launch arguments (struct fields included)."""
    out = {}
    for a in args:
        if isinstance(a, wp.array):
            out[(a.ptr, _array_bytes(a))] = a
        elif hasattr(a, "_cls") and hasattr(a._cls, "vars"):  # a Warp struct instance
            out.update(_arrays([getattr(a, name) for name in a._cls.vars]))
    return out


def _threads(call) -> int:
    dim = call.dim
    n = int(np.prod(dim)) if isinstance(dim, (tuple, list)) else int(dim)
    return n * int(call.lanes)


def setup_traffic(run) -> dict:
    """Launches and bytes of one step of a benchmark run (``run.step(mark)``; sap_gpu), counted by
    :func:`sap_gpu.launch.record_launches` (see the module docstring). Returns ``method``
    (``"counted"``), ``num_worlds``, ``stages``: ``{stage: {"launches", "threads", "bytes_in",
    "bytes_out", "bytes", "kernels", "calls"}}`` in step order (``calls``: per launch its ``kernel``,
    ``threads``, ``bytes_in``, ``bytes_out``, ``bytes``) (``collision``, the solver's stages,
    ``statistics`` for what the run adds), and the sums over :data:`SETUP_STAGES` as ``setup``."""
    marks = []
    with record_launches() as record:
        def mark(stage):
            marks.append((stage, len(record.calls)))

        run.set_stage_hook(mark)
        try:
            run.step(mark=mark)
        finally:
            run.set_stage_hook(None)
    stages, start = {}, 0
    for stage, end in marks:
        st = stages.setdefault(stage, dict(launches=0, threads=0, bytes_in=0, bytes_out=0, bytes=0, kernels=[],
                                                  calls=[]))
        for call in record.calls[start:end]:
            ins, outs = _arrays(call.inputs), _arrays(call.outputs)
            one = dict(kernel=call.kernel, threads=_threads(call), bytes_in=sum(k[1] for k in ins),
                       bytes_out=sum(k[1] for k in outs), bytes=sum(k[1] for k in {**ins, **outs}))
            st["launches"] += 1
            for k in ("threads", "bytes_in", "bytes_out", "bytes"):
                st[k] += one[k]
            st["kernels"].append(call.kernel)
            st["calls"].append(one)
        start = end
    setup = {k: sum(stages.get(s, {}).get(k, 0) for s in SETUP_STAGES)
             for k in ("launches", "threads", "bytes_in", "bytes_out", "bytes")}
    return dict(method="counted", num_worlds=run.W, stages=stages, setup=setup)


def traffic_lines(label: str, num_worlds: int, newton: dict | None, setup: dict) -> list[str]:
    """The ``traffic:`` lines of one sap_gpu run."""
    lines = []
    if newton is not None and newton["iterations"] == 0:
        lines.append(f"traffic: {label} x{num_worlds}: Newton loop: no world took a Newton iteration in the recorded "
                     f"step")
    elif newton is not None:
        h = newton["phases"]["hessian"]
        lines.append(
            f"traffic: {label} x{num_worlds}: Newton loop (derived from the fused kernel's access pattern, "
            f"{newton['lanes']} lanes) per iteration of a world: {newton['loads']:.0f} loads "
            f"({newton['load_bytes'] / 1024:.1f} KiB), {newton['stores']:.0f} stores "
            f"({newton['store_bytes'] / 1024:.1f} KiB); busiest lane {newton['busiest_lane_loads']:.0f} loads, "
            f"{100 * h['busiest_lane_loads'] / max(newton['busiest_lane_loads'], 1e-30):.0f}% of them building H, "
            f"{newton['busiest_lane_own_loads']:.0f} of them its own (not shares of tile loads; "
            f"{h['busiest_lane_own_loads']:.0f} building H); "
            f"{newton['probes_per_iteration']:.2f} line-search probes per iteration")
    st = setup["setup"]
    lines.append(
        f"traffic: {label} x{num_worlds}: set-up, stages {'/'.join(SETUP_STAGES)} (counted: recorded launches, "
        f"each array argument once): {st['launches']} launches, {st['threads']} threads, "
        f"{st['bytes'] / 2**20:.2f} MiB per step ({st['bytes'] / num_worlds / 1024:.1f} KiB per world)")
    return lines
