"""Collision on the device: the narrow phase of :mod:`sap_ref.collision`, one thread per (world, pair).

Same pairs (``model.shape_pair``), same broad phase (:mod:`sap_gpu.broad_phase`), same routines,
same conventions (normal from shape 0 into shape 1, x1 − x0 = φ₀ n̂, reported while
φ₀ < margin₀ + margin₁, Drake's material combination with the solver fallbacks) and the same order.

Pair families. The routines are grouped by what they need, one file each, named as in sap_ref:

====================  ==========================================================  ====================
family                pairs                                                       routines
====================  ==========================================================  ====================
``primitive``         plane, sphere, capsule with each other (closed forms)      collision_primitive
``box``               a box with a plane, sphere or capsule                       collision_box
``box_box``           two boxes, neither rounded (SAT, then face clipping or      collision_box
                      edge–edge)
``plane_convex``      a plane with a cylinder, ellipsoid or convex mesh           collision_manifold
``convex``            a cylinder, ellipsoid or mesh with anything but a plane     collision_convex
                      or a height field (GJK/EPA, then the manifold)              + collision_manifold
``rounded_box_box``   two boxes, either rounded (as ``convex``)                   collision_convex
                                                                                  + collision_manifold
``heightfield``       a height field with any shape but a plane                   collision_heightfield
====================  ==========================================================  ====================

Each family has its own kernel, and each kernel is its own Warp module (``module="unique"``), so
a model compiles and launches only the families it has: a model of planes, spheres and capsules
(a humanoid) compiles no box, GJK/EPA or manifold code. The model's pairs are grouped by family
once, on the host, and each family present gets one launch of (num_worlds, pairs of the family)
threads. A kernel the size of the whole narrow phase would take the worst family's registers and
stack for every pair, and its CUDA compile would be paid by every model. Every family's kernel
starts with :func:`start_pair` (the pair, its count zeroed, the stop for rejected poses or a pair
the broad phase drops, the shapes in canonical order), then runs its family's routine. After the
families, the pairs with a rounded shape have their cores' contacts moved out by the radii, one
thread per (world, such pair) (``_round_contacts``, docs/design.md § Rounded shapes).

Layout: pair p owns ``MAX_CONTACTS_PER_PAIR`` slots of a per-world scratch, starting at
``offset[p]`` (a prefix sum over the pairs); the thread of (world, p) writes its contacts there
and their number to ``pair_count[world, p]``, so threads never share a slot, whichever family's
kernel runs them. The compaction then takes two launches. ``_select_order`` (one block of lanes
per world) lists the scratch slot of each contact kept in slot order — pair by pair, each pair's
points in its routine's order: sap_ref's generation order, whatever order the threads and kernels
ran in. Its lanes take 32 pairs at a time, each lane its pair's kept points, and an exclusive
prefix sum over the lanes of their numbers says where each pair's list starts: the indices of a
walk over the pairs one after another. If more than ``max_rigid_contact`` were generated the deepest are kept
(ties by generation order), in generation order, and the rest counted in ``contacts.overflow``.
``_select_copy`` (one thread per (world, contact slot)) then fills every contact slot through the
contact record's helpers (:func:`~sap_gpu.arrays.write_contact_point` and
:func:`~sap_gpu.arrays.write_contact_pair`, :func:`~sap_gpu.arrays.clear_contact`): the listed
contact (a point contact: the pair's k, the point's φ₀, area 0), or an empty slot past the
count. Neighbouring threads write neighbouring slots, so its stores coalesce; a thread per world
writing its own row of slots would put every store of a warp in a different row. Nothing is ever
written beyond the capacity.
"""

import numpy as np
import warp as wp

from sap_common.collision_rules import (
    MAX_CONTACTS_PER_PAIR,
    MaterialFallbacks,
    check_broad_phase,
    pair_capacity,
)
from sap_common.config import SapConfig, collision_pipeline_args

# The pair routines' thresholds, re-exported: sap_ref.collision names the same objects.
from sap_common.constants import (  # noqa: F401
    COINCIDENT_DISTANCE,
    EPA_MAX_FACES,
    EPA_MAX_VERTICES,
    GOLDEN_TIE,
    INTERIOR_DEPTH_MARGIN,
    PARALLEL_TOL,
)
from sap_common.model import SapModel, ShapeType
from sap_common.state import MemoryEstimate, SapContacts, SapState, StepStatus, check_memory, contacts_memory

# The pair routines' thresholds, re-exported: sap_ref.collision names the same objects.
from .arrays import ContactSlots, GpuModel, clear_contact, contact_slots, write_contact_pair, write_contact_point
from .blocked_cholesky import block_or_int, block_prefix_int, block_sum_int
from .broad_phase import pair_overlap, world_bounds
from .collision_box import box_box, box_contacts
from .collision_heightfield import heightfield_contacts
from .collision_manifold import convex_manifold, plane_manifold
from .collision_primitive import plane_normal, primitive_contacts
from .collision_support import CAPSULE, SPHERE, Convex, Epa, Geometry, Scratch, emit_all
from .device import device_nbytes, free_memory, get_device, probe_memory
from .kinematics import quat_norm_ok
from .launch import launch_blocks, launch_threads
from .parameters import WorldParameters, check_parameters, world_view

wp.set_module_options({"enable_backward": False})

__all__ = ["CollisionPipeline", "FAMILIES", "pair_family", "collide_pairs", "pipeline_memory"]

BOX = wp.constant(int(ShapeType.BOX))
INVALID_QUATERNION = wp.constant(int(StepStatus.INVALID_QUATERNION))

# The pair families, in launch order (any order gives the same contacts: every pair has its own slots).
FAMILIES = ("primitive", "box", "box_box", "plane_convex", "convex", "rounded_box_box", "heightfield")
_EPA_FAMILIES = ("convex", "rounded_box_box", "heightfield")  # the families with GJK/EPA scratch rows
_CONVEX_CORES = (ShapeType.CYLINDER, ShapeType.ELLIPSOID, ShapeType.CONVEX_MESH)


def pair_family(type0, type1, rounding0: float = 0.0, rounding1: float = 0.0) -> str:
    """The family (one of ``FAMILIES``) of a pair of shape types, in either order, with the shapes'
    rounding radii: two boxes, either rounded, are ``rounded_box_box`` (GJK/EPA and the manifold, as
    in sap_ref: :func:`sap_ref.collision.rounded_boxes` says why)."""
    lo, hi = sorted((ShapeType(int(type0)), ShapeType(int(type1))))
    if lo == hi == ShapeType.BOX and (rounding0 != 0.0 or rounding1 != 0.0):
        return "rounded_box_box"
    if hi == ShapeType.HEIGHTFIELD and lo not in (ShapeType.PLANE, ShapeType.HEIGHTFIELD):
        return "heightfield"
    if hi in _CONVEX_CORES:
        return "plane_convex" if lo == ShapeType.PLANE else "convex"
    if hi == ShapeType.BOX:
        return "box_box" if lo == ShapeType.BOX else "box"
    if hi in (ShapeType.SPHERE, ShapeType.CAPSULE):
        return "primitive"
    raise ValueError(f"shape_type: no narrow phase for {lo.name}–{hi.name}")


@wp.struct
class ShapeData:
    """Per shape: its mesh's vertex and face ranges, its height field's heights (start, rows,
    columns), its local bounds."""
    v0: wp.array(dtype=int)
    v1: wp.array(dtype=int)
    f0: wp.array(dtype=int)
    f1: wp.array(dtype=int)
    h_start: wp.array(dtype=int)
    h_rows: wp.array(dtype=int)
    h_cols: wp.array(dtype=int)
    lo: wp.array(dtype=wp.vec3d)
    hi: wp.array(dtype=wp.vec3d)


@wp.func
def key_less(X1: wp.transformd, s1: wp.vec3d, X0: wp.transformd, s0: wp.vec3d) -> int:
    """sap_ref.collision._canonical_swap: (X1, size1) before (X0, size0), lexicographically."""
    a = wp.transform_get_translation(X1)
    b = wp.transform_get_translation(X0)
    for i in range(3):
        if a[i] < b[i]:
            return 1
        if a[i] > b[i]:
            return 0
    qa = wp.transform_get_rotation(X1)
    qb = wp.transform_get_rotation(X0)
    for i in range(4):
        if qa[i] < qb[i]:
            return 1
        if qa[i] > qb[i]:
            return 0
    for i in range(3):
        if s1[i] < s0[i]:
            return 1
        if s1[i] > s0[i]:
            return 0
    return 0


@wp.func
def start_pair(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
               shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
               family_pair: wp.array(dtype=int), use_broad_phase: int, pose: wp.array2d(dtype=wp.transformd),
               status: wp.array(dtype=int), centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d),
               S: Scratch, world: int, i: int, boxes_by_key: int):
    """The start of every family's kernel, for its thread (world, i): the pair p = family_pair[i]
    with its count zeroed, then (go, p, swap, i0, i1). go = 0 when the world's poses were rejected
    or the broad phase drops the pair (the kernel returns); (i0, i1) its shapes in canonical order
    (sap_ref.collision.pair_contacts: lower type first, two shapes of one type but boxes by
    :func:`key_less`; boxes too where ``boxes_by_key`` is 1, in the ``rounded_box_box`` family) and
    swap = 1 when that flips the pair's (a, b). The kernels read the shapes' poses again rather than
    take the ones read here: passing the poses out of the swap costs registers
    (docs/benchmarks.md § Registers behind the code's choices)."""
    p = family_pair[i]
    S.pair_count[world, p] = 0
    a = shape_pair[p, 0]
    b = shape_pair[p, 1]
    if status[world] != 0:
        return 0, p, 0, a, b
    Xa = pose[world, a]
    Xb = pose[world, b]
    if use_broad_phase != 0 and pair_overlap(shape_type, shape_margin, centre, half, world, a, b, Xa, Xb) == 0:
        return 0, p, 0, a, b
    ta = shape_type[a]
    tb = shape_type[b]
    swap = int(0)
    if tb < ta:
        swap = int(1)
    elif ta == tb and (ta != BOX or boxes_by_key != 0):
        swap = key_less(Xb, shape_size[b], Xa, shape_size[a])
    if swap == 1:
        return 1, p, 1, b, a
    return 1, p, 0, a, b


@wp.func
def shape_convex(D: ShapeData, kind: int, X: wp.transformd, size: wp.vec3d, s: int) -> Convex:
    """The Convex of shape s at world pose X (sap_ref.collision.convex_shape)."""
    c = Convex()
    c.kind = kind
    c.p = wp.transform_get_translation(X)
    c.R = wp.quat_to_matrix(wp.transform_get_rotation(X))
    c.size = size
    c.radius = wp.float64(0.0)
    if kind == SPHERE or kind == CAPSULE:
        c.radius = size[0]
    c.v0 = D.v0[s]
    c.v1 = D.v1[s]
    c.f0 = D.f0[s]
    c.f1 = D.f1[s]
    return c


# ----------------------------------------------------------------------------- one kernel per pair family
# dim = (num_worlds, pairs of the family); family_pair[i] is the i-th pair of the family (an index
# into model.shape_pair), so each thread writes only pair family_pair[i]'s slots.


@wp.kernel(enable_backward=False, module="unique")
def _collide_primitive(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                       shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                       family_pair: wp.array(dtype=int), use_broad_phase: int, pose: wp.array2d(dtype=wp.transformd),
                       status: wp.array(dtype=int), centre: wp.array2d(dtype=wp.vec3d),
                       half: wp.array2d(dtype=wp.vec3d), S: Scratch):
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 0)
    if go == 0:
        return
    primitive_contacts(S, world, p, swap, shape_type[i0], pose[world, i0], shape_size[i0], shape_type[i1],
                       pose[world, i1], shape_size[i1])


@wp.kernel(enable_backward=False, module="unique")
def _collide_box(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                 shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                 family_pair: wp.array(dtype=int), use_broad_phase: int, pose: wp.array2d(dtype=wp.transformd),
                 status: wp.array(dtype=int), centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d),
                 S: Scratch):
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 0)
    if go == 0:
        return
    box_contacts(S, world, p, swap, shape_type[i0], pose[world, i0], shape_size[i0], pose[world, i1], shape_size[i1])


@wp.kernel(enable_backward=False, module="unique")
def _collide_box_box(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                     shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                     family_pair: wp.array(dtype=int), use_broad_phase: int, pose: wp.array2d(dtype=wp.transformd),
                     status: wp.array(dtype=int), centre: wp.array2d(dtype=wp.vec3d),
                     half: wp.array2d(dtype=wp.vec3d), S: Scratch):
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 0)
    if go == 0:
        return
    box_box(S, world, p, swap, pose[world, i0], shape_size[i0], pose[world, i1], shape_size[i1])


@wp.kernel(enable_backward=False, module="unique")
def _collide_plane_convex(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                          shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                          family_pair: wp.array(dtype=int), G: Geometry, D: ShapeData, use_broad_phase: int,
                          pose: wp.array2d(dtype=wp.transformd), status: wp.array(dtype=int),
                          centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d), S: Scratch):
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 0)
    if go == 0:
        return
    Xp = pose[world, i0]
    B_ = shape_convex(D, shape_type[i1], pose[world, i1], shape_size[i1], i1)
    cnt, CX0, CX1, CN, CPHI = plane_manifold(G, wp.transform_get_translation(Xp), plane_normal(Xp), B_,
                                             S.margin[world, p])
    emit_all(S, world, p, swap, cnt, CX0, CX1, CN, CPHI)


@wp.kernel(enable_backward=False, module="unique")
def _collide_convex(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                    shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                    family_pair: wp.array(dtype=int), G: Geometry, D: ShapeData, use_broad_phase: int,
                    pose: wp.array2d(dtype=wp.transformd), status: wp.array(dtype=int),
                    centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d), epa_first: int, E: Epa,
                    S: Scratch):
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 0)
    if go == 0:
        return
    row = epa_first + world * family_pair.shape[0] + i  # this thread's EPA scratch row
    A_ = shape_convex(D, shape_type[i0], pose[world, i0], shape_size[i0], i0)
    B_ = shape_convex(D, shape_type[i1], pose[world, i1], shape_size[i1], i1)
    cnt, CX0, CX1, CN, CPHI = convex_manifold(G, E, row, A_, B_, S.margin[world, p])
    emit_all(S, world, p, swap, cnt, CX0, CX1, CN, CPHI)


@wp.kernel(enable_backward=False, module="unique")
def _collide_rounded_box_box(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                             shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                             family_pair: wp.array(dtype=int), G: Geometry, D: ShapeData, use_broad_phase: int,
                             pose: wp.array2d(dtype=wp.transformd), status: wp.array(dtype=int),
                             centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d), epa_first: int,
                             E: Epa, S: Scratch):
    """Two boxes, either rounded: ``_collide_convex``'s GJK/EPA and manifold on their cores, the two in
    the order of :func:`key_less` as two shapes of any other type (the swapped pair is then the exact
    mirror). A kernel of its own: in ``_collide_convex`` that order costs stack for every pair."""
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 1)
    if go == 0:
        return
    row = epa_first + world * family_pair.shape[0] + i  # this thread's EPA scratch row
    A_ = shape_convex(D, shape_type[i0], pose[world, i0], shape_size[i0], i0)
    B_ = shape_convex(D, shape_type[i1], pose[world, i1], shape_size[i1], i1)
    cnt, CX0, CX1, CN, CPHI = convex_manifold(G, E, row, A_, B_, S.margin[world, p])
    emit_all(S, world, p, swap, cnt, CX0, CX1, CN, CPHI)


@wp.kernel(enable_backward=False, module="unique")
def _collide_heightfield(shape_type: wp.array(dtype=int), shape_size: wp.array(dtype=wp.vec3d),
                         shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                         family_pair: wp.array(dtype=int), G: Geometry, D: ShapeData, use_broad_phase: int,
                         pose: wp.array2d(dtype=wp.transformd), status: wp.array(dtype=int),
                         centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d), epa_first: int,
                         E: Epa, S: Scratch):
    world, i = wp.tid()
    go, p, swap, i0, i1 = start_pair(shape_type, shape_size, shape_margin, shape_pair, family_pair, use_broad_phase,
                                     pose, status, centre, half, S, world, i, 0)
    if go == 0:
        return
    row = epa_first + world * family_pair.shape[0] + i  # this thread's EPA scratch row
    A_ = shape_convex(D, shape_type[i0], pose[world, i0], shape_size[i0], i0)
    Xh = pose[world, i1]
    cnt, CX0, CX1, CN, CPHI = heightfield_contacts(
        G, E, row, A_, D.lo[i0], D.hi[i0], wp.transform_get_translation(Xh),
        wp.quat_to_matrix(wp.transform_get_rotation(Xh)), shape_size[i1], D.h_start[i1], D.h_rows[i1], D.h_cols[i1],
        S.margin[world, p])
    emit_all(S, world, p, swap, cnt, CX0, CX1, CN, CPHI)


@wp.kernel
def _round_contacts(shape_margin: wp.array2d(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
                    pair_rounding: wp.array(dtype=wp.vec2d), rounded_pair: wp.array(dtype=int), S: Scratch):
    """One thread per (world, pair with a rounded shape), after the families' kernels: the pair's cores'
    contacts moved out by the radii (sap_ref.collision.rounded: x0 + ρ_a n̂, x1 − ρ_b n̂,
    φ − (ρ_a + ρ_b), in the pair's order, the same values in either shape order), keeping those with
    φ < margin_a + margin_b (summed as the pair materials' kernel sums them), in order. Its own kernel, so
    that the families' routines and their registers are those of shapes without rounding."""
    world, i = wp.tid()
    p = rounded_pair[i]
    a = shape_pair[p, 0]
    b = shape_pair[p, 1]
    r = pair_rounding[p]
    margin = shape_margin[world, a] + shape_margin[world, b]
    kept = int(0)
    for j in range(S.pair_count[world, p]):
        k = S.offset[p] + j
        phi = S.phi[world, k] - (r[0] + r[1])
        if phi < margin:
            n = S.normal[world, k]
            out = S.offset[p] + kept
            S.x0[world, out] = S.x0[world, k] + r[0] * n
            S.x1[world, out] = S.x1[world, k] - r[1] * n
            S.normal[world, out] = n
            S.phi[world, out] = phi
            kept += 1
    S.pair_count[world, p] = kept


_KERNELS = {"primitive": _collide_primitive, "box": _collide_box, "box_box": _collide_box_box,
            "plane_convex": _collide_plane_convex, "convex": _collide_convex,
            "rounded_box_box": _collide_rounded_box_box, "heightfield": _collide_heightfield}


def collide_pairs(family: str, m: GpuModel, family_pair: wp.array, geometry: Geometry, shape_data: ShapeData,
                  use_broad_phase: int, pose: wp.array, status: wp.array, centre: wp.array, half: wp.array,
                  epa_first: int, epa: Epa, scratch: Scratch) -> None:
    """Launch the kernel of ``family`` over (num_worlds, len(family_pair)): every pair of the family
    writes its contacts to its own scratch slots. Needs the world poses and boxes of
    :func:`~sap_gpu.broad_phase.world_bounds` and the poses' ``status``. ``geometry``,
    ``shape_data`` (the convex families) and the EPA scratch rows from ``epa_first`` on
    (``convex``, ``rounded_box_box``, ``heightfield``: num_worlds × len(family_pair) of them) go where
    the family needs them."""
    kernel = _KERNELS[family]
    dim = (m.num_worlds, family_pair.shape[0])
    head = [m.shape_type, m.shape_size, m.params.array("shape_margin"), m.shape_pair, family_pair]
    state = [use_broad_phase, pose, status, centre, half]
    if family in ("primitive", "box", "box_box"):
        inputs, outputs = head + state, [scratch]
    elif family == "plane_convex":
        inputs, outputs = head + [geometry, shape_data] + state, [scratch]
    else:
        inputs, outputs = head + [geometry, shape_data] + state + [epa_first], [epa, scratch]
    launch_threads(kernel, dim=dim, device=m.device, inputs=inputs, outputs=outputs)


@wp.kernel(enable_backward=False, module="unique")
def _check_poses(body_count: int, body_q: wp.array2d(dtype=wp.transformd), status_out: wp.array(dtype=int)):
    """INVALID_QUATERNION for a world with a rejected body_q quaternion
    (docs/conventions.md § Quaternions read from a state), else 0. One block per world: lanes over
    the bodies, one block OR, lane 0 stores."""
    world, lane = wp.tid()
    flags = int(0)
    for b in range(lane, body_count, wp.block_dim()):  # a rejected body_q quaternion: no contacts for this world
        if quat_norm_ok(wp.transform_get_rotation(body_q[world, b])) == 0:
            flags = INVALID_QUATERNION
    flags = block_or_int(flags)
    if lane == 0:
        status_out[world] = flags


# A pair's kept points are the bits of one int in _select_order (checked at import, also under -O).
if max(MAX_CONTACTS_PER_PAIR.values()) >= 32:
    raise RuntimeError("sap_gpu.collision: _select_order keeps a pair's points as the bits of one int; "
                       f"MAX_CONTACTS_PER_PAIR must stay below 32, got {max(MAX_CONTACTS_PER_PAIR.values())}")


@wp.func
def _kept_points(capacity: int, slots: int, n: int, S: Scratch, world: int, p: int) -> int:
    """Bit jj set where point jj of pair p is kept: every generated point while the world's
    ``n`` contacts fit in ``capacity``; else the point's rank by depth (ties by generation
    order, i.e. slot order) among the world's contacts must be below ``capacity``."""
    kept = int(0)
    for jj in range(S.pair_count[world, p]):
        i = S.offset[p] + jj
        keep = int(1)
        if n > capacity:  # rank by depth, ties by generation order: keep the `capacity` deepest
            rank = int(0)
            for j in range(slots):
                pj = S.slot_pair[j]
                if j - S.offset[pj] < S.pair_count[world, pj]:
                    if S.phi[world, j] < S.phi[world, i] or (S.phi[world, j] == S.phi[world, i] and j < i):
                        rank += 1
            if rank >= capacity:
                keep = 0
        if keep == 1:
            kept = kept | (1 << jj)
    return kept


@wp.kernel(enable_backward=False, module="unique")
def _select_order(capacity: int, pairs: int, slots: int, S: Scratch, count: wp.array(dtype=int),
                  overflow: wp.array(dtype=int), kept: wp.array2d(dtype=int)):
    """Which scratch slots a world keeps, in order: ``kept[world, 0 … count − 1]``. Every
    generated contact in generation order (pair by pair, each pair's slots in order); past
    ``capacity`` the ``capacity`` deepest, ties by generation order, still in generation order.

    One block per world (:func:`_select_copy` moves the contacts themselves, coalesced): lanes
    over the pairs sum the world's generated contacts (one block sum); then, 32 pairs at a time,
    each lane finds its pair's kept points and an exclusive prefix sum over the lanes of their
    numbers gives where the pair's first one goes, after the earlier pairs' (the order of the
    serial walk, pair by pair). Integer sums: the same indices as one thread walking the pairs."""
    world, lane = wp.tid()
    bd = wp.block_dim()
    mine = int(0)
    for p in range(lane, pairs, bd):
        mine += S.pair_count[world, p]
    n = block_sum_int(mine)
    out = int(0)
    for first in range(0, pairs, bd):  # the same trips on every lane: the prefix sum is cooperative
        p = first + lane
        points = int(0)
        number = int(0)
        if p < pairs:
            points = _kept_points(capacity, slots, n, S, world, p)
            for jj in range(S.pair_count[world, p]):
                number += (points >> jj) & 1
        before, total = block_prefix_int(number, lane)
        k = out + before
        if p < pairs:
            for jj in range(S.pair_count[world, p]):
                if ((points >> jj) & 1) != 0:
                    kept[world, k] = S.offset[p] + jj
                    k += 1
        out += total
    if lane == 0:
        count[world] = out
        overflow[world] = n - out


@wp.kernel
def _select_copy(shape_pair: wp.array2d(dtype=int), shape_body: wp.array(dtype=int),
                 shape_margin: wp.array2d(dtype=wp.float64), pair_mu: wp.array2d(dtype=wp.float64),
                 pair_ke: wp.array2d(dtype=wp.float64), pair_ke0: wp.array2d(dtype=wp.float64),
                 pair_ke1: wp.array2d(dtype=wp.float64), pair_tau: wp.array2d(dtype=wp.float64),
                 pair_hcd: wp.array2d(dtype=wp.float64), S: Scratch, count: wp.array(dtype=int),
                 kept: wp.array2d(dtype=int), contacts_out: ContactSlots):
    """Contact slot ``slot`` of a world: the scratch contact ``kept[world, slot]`` with its pair's
    shapes, bodies and materials (a point contact: the pair's k, the point's φ₀, area 0), or empty
    past the world's count. One thread per (world, slot), so neighbouring threads write
    neighbouring slots. The two branches store their own values: gathering the values first and
    storing them once keeps them all live across the branch, and the record's two halves are
    written one after the other for the same reason (:func:`~sap_gpu.arrays.write_contact`; the
    registers in docs/benchmarks.md § Registers behind the code's choices)."""
    world, slot = wp.tid()
    if slot < count[world]:
        i = kept[world, slot]
        p = S.slot_pair[i]
        a = shape_pair[p, 0]
        b = shape_pair[p, 1]
        write_contact_point(contacts_out, world, slot, a, b, shape_body[a], shape_body[b], S.x0[world, i],
                            S.x1[world, i], S.normal[world, i], S.phi[world, i], pair_ke[world, p], wp.float64(0.0))
        write_contact_pair(contacts_out, world, slot, shape_margin[world, a], shape_margin[world, b], pair_mu[world, p],
                           pair_ke0[world, p], pair_ke1[world, p], pair_tau[world, p], pair_hcd[world, p])
    else:
        clear_contact(contacts_out, world, slot)


@wp.func
def _or_fallback(x: wp.float64, fallback: wp.float64):
    if wp.isnan(x):
        return fallback
    return x


@wp.func
def pair_material(mu_a: wp.float64, mu_b: wp.float64, ke_a: wp.float64, ke_b: wp.float64, tau_a: wp.float64,
                  tau_b: wp.float64, hcd_a: wp.float64, hcd_b: wp.float64, fallback_mu: wp.float64,
                  fallback_ke: wp.float64, fallback_tau: wp.float64, fallback_hcd: wp.float64):
    """``(μ, k, k₀, k₁, τ_d, d)`` of a shape pair from its two shapes' values (NaN: unset, the
    fallback), in the operations of sap_common.collision_rules.combine_materials and
    combine_hc_dissipation: the device's one copy of the combination rules (the pipeline's pair
    materials and sap_newton's pair tables both call it, so they agree bit for bit)."""
    zero = wp.float64(0.0)
    mu0 = _or_fallback(mu_a, fallback_mu)
    mu1 = _or_fallback(mu_b, fallback_mu)
    k0 = _or_fallback(ke_a, fallback_ke)
    k1 = _or_fallback(ke_b, fallback_ke)
    m = zero
    if mu0 + mu1 != zero:
        m = wp.float64(2.0) * mu0 * mu1 / (mu0 + mu1)
    k = zero
    if wp.isinf(k0) or wp.isinf(k1):
        k = k0
        if wp.isinf(k0):
            k = k1
    elif k0 + k1 != zero:
        k = k0 * k1 / (k0 + k1)
    d0 = _or_fallback(hcd_a, fallback_hcd)
    d1 = _or_fallback(hcd_b, fallback_hcd)
    d = zero
    if wp.isinf(k0) and wp.isinf(k1):
        d = wp.float64(0.5) * (d0 + d1)
    elif wp.isinf(k0):
        d = d1
    elif wp.isinf(k1):
        d = d0
    elif k0 + k1 != zero:
        denom = k0 + k1
        d = (k1 / denom) * d0 + (k0 / denom) * d1
    return m, k, k0, k1, _or_fallback(tau_a, fallback_tau) + _or_fallback(tau_b, fallback_tau), d


@wp.kernel
def _pair_materials(shape_pair: wp.array2d(dtype=int), mu: wp.array2d(dtype=wp.float64),
                    ke: wp.array2d(dtype=wp.float64), tau: wp.array2d(dtype=wp.float64),
                    hcd: wp.array2d(dtype=wp.float64), margin: wp.array2d(dtype=wp.float64),
                    fallback_mu: wp.float64, fallback_ke: wp.float64, fallback_tau: wp.float64,
                    fallback_hcd: wp.float64, pair_rounding: wp.array(dtype=wp.vec2d),
                    pair_mu: wp.array2d(dtype=wp.float64),
                    pair_ke: wp.array2d(dtype=wp.float64), pair_ke0: wp.array2d(dtype=wp.float64),
                    pair_ke1: wp.array2d(dtype=wp.float64), pair_tau: wp.array2d(dtype=wp.float64),
                    pair_hcd: wp.array2d(dtype=wp.float64), pair_margin: wp.array2d(dtype=wp.float64)):
    """One thread per (world, pair): the pair's combined materials (:func:`pair_material`) and the
    margin its routine bounds candidates by, margin₀ + margin₁ + ρ_a + ρ_b (just margin₀ + margin₁ without
    rounding; :class:`~sap_gpu.collision_support.Scratch`)."""
    w, p = wp.tid()
    a = shape_pair[p, 0]
    b = shape_pair[p, 1]
    m, k, k0, k1, t, d = pair_material(mu[w, a], mu[w, b], ke[w, a], ke[w, b], tau[w, a], tau[w, b], hcd[w, a],
                                       hcd[w, b], fallback_mu, fallback_ke, fallback_tau, fallback_hcd)
    pair_mu[w, p] = m
    pair_ke[w, p] = k
    pair_ke0[w, p] = k0
    pair_ke1[w, p] = k1
    pair_tau[w, p] = t
    pair_hcd[w, p] = d
    r = pair_rounding[p]
    pair_margin[w, p] = margin[w, a] + margin[w, b] + r[0] + r[1]


class CollisionPipeline:
    """The narrow phase of :class:`sap_ref.collision.CollisionPipeline`, batched on a Warp device.

    Args:
        model: the model.
        max_rigid_contact: contact slots per world (≥ 0).
        config: supplies the material fallbacks (default ``SapConfig()``).
        device: Warp device.
        broad_phase: ``"aabb"`` (default) or ``"none"``, as in sap_ref; the contacts are the same.
        parameters: the :class:`~sap_gpu.parameters.WorldParameters` the solver reads (per-world
            margins and shape materials; the pairs' materials are combined per world at every
            ``collide``), or None: the model's values in every world.
    """

    def __init__(self, model: SapModel, max_rigid_contact: int, config: SapConfig | None = None, device=None,
                 broad_phase: str = "aabb", parameters: WorldParameters | None = None):
        self.max_rigid_contact, self.config = collision_pipeline_args(model, max_rigid_contact, config)
        self.broad_phase = check_broad_phase(broad_phase)
        self.model = model
        self.device = get_device(device)
        if parameters is not None:  # a wrong argument is reported before the memory is
            check_parameters(parameters, model, self.device)
        # Refused before anything is allocated when the buffers would not fit (docs/scaling.md § Memory).
        check_memory(pipeline_memory(model, self.max_rigid_contact, parameters is not None), lambda: free_memory(
            self.device), "sap_gpu.CollisionPipeline", where=f"device {self.device}", capacity=self.max_rigid_contact)
        self._allocate(model, parameters)

    def _allocate(self, model: SapModel, parameters: WorldParameters | None, sizing: bool = False) -> None:
        """Every buffer of the pipeline. ``sizing``: a probe of the memory estimate
        (:func:`pipeline_memory`), which launches nothing."""
        self.m = GpuModel(model, self.device)
        self.parameters = self.m.params = params = check_parameters(parameters, model, self.device,
                                                                     shared=self.m.params)
        d, W = self.device, model.num_worlds
        P, Sh = len(model.shape_pair), model.shape_count
        f64 = lambda x: wp.array(np.ascontiguousarray(x, np.float64), dtype=wp.float64, device=d)  # noqa: E731
        i32 = lambda x: wp.array(np.ascontiguousarray(x, np.int32), dtype=int, device=d)  # noqa: E731
        v3 = lambda x: wp.array(np.ascontiguousarray(np.reshape(x, (-1, 3)), np.float64), dtype=wp.vec3d, device=d)  # noqa: E731
        # Each world's pair materials and margins, (num_worlds, P): combined once (one row every
        # world reads) from shared parameters, at every collide from per-world ones.
        rows = 1 if params.shared else W
        self._pair_rows = [wp.zeros((rows, max(P, 1)), dtype=wp.float64, device=d) for _ in range(7)]
        views = [world_view(a, W) if params.shared else a for a in self._pair_rows]
        self.pair_mu, self.pair_ke, self.pair_ke0, self.pair_ke1, self.pair_tau, self.pair_hcd, pair_margin = views
        self._shape_pair = i32(model.shape_pair.reshape(-1, 2) if P else np.zeros((1, 2)))
        caps = pair_capacity(model)
        offset = np.concatenate([[0], np.cumsum(caps)]).astype(np.int64)
        self.slots = int(offset[-1])
        cap = max(self.slots, 1)
        S = Scratch()
        S.x0, S.x1, S.normal = (wp.zeros((W, cap), dtype=wp.vec3d, device=d) for _ in range(3))
        S.phi = wp.zeros((W, cap), dtype=wp.float64, device=d)
        S.pair_count = wp.zeros((W, max(P, 1)), dtype=int, device=d)
        S.offset = i32(offset[:-1] if P else [0])
        S.pair_capacity = i32(caps if P else [0])
        S.slot_pair = i32(np.repeat(np.arange(P), caps) if P else [0])
        pairs = model.shape_pair
        S.margin = pair_margin
        # Per pair, its shapes' rounding radii; the pairs with any, for _round_contacts (None: no such pair).
        rounding = np.stack([model.shape_rounding[pairs[:, 0]], model.shape_rounding[pairs[:, 1]]], axis=1) if P \
            else np.zeros((1, 2))
        # (P,) vec2d: (ρ_a, ρ_b) of each pair's shapes (a, b). Not in the Scratch struct: the families'
        # kernels pass that struct along, and the GJK/EPA family's spills any field added to it.
        self.pair_rounding = wp.array(np.ascontiguousarray(rounding, np.float64), dtype=wp.vec2d, device=d)
        rounded = np.flatnonzero(np.any(rounding != 0.0, axis=1)) if P else np.zeros(0, np.int64)
        self.rounded_pair = i32(rounded) if len(rounded) else None
        self.scratch = S
        if params.shared and not sizing:
            self._combine_materials(1)  # needs the pairs' rounding radii (pair_rounding)
        # Geometry of meshes and height fields, and per-shape ranges into it.
        G = Geometry()
        G.mesh_vertex = v3(model.mesh_vertex if len(model.mesh_vertex) else np.zeros(3))
        G.mesh_face_vertex_start = i32(model.mesh_face_vertex_start)
        G.mesh_face_vertex = i32(model.mesh_face_vertex if len(model.mesh_face_vertex) else [0])
        G.mesh_face_plane = wp.array(np.ascontiguousarray(model.mesh_face_plane if len(model.mesh_face_plane)
                                                          else np.zeros((1, 4)), np.float64), dtype=wp.vec4d, device=d)
        G.hfield_height = f64(model.hfield_height if len(model.hfield_height) else np.zeros(1))
        self.geometry = G
        Dd = ShapeData()
        src = model.shape_source
        is_mesh = model.shape_type == int(ShapeType.CONVEX_MESH)
        is_hf = model.shape_type == int(ShapeType.HEIGHTFIELD)
        mesh = np.where(is_mesh, src, 0)
        hf = np.where(is_hf, src, 0)
        def pick(values, index, where):  # values[index] where `where`, else 0 (index may be out of range there)
            values = np.asarray(values)
            return np.where(where, values[np.clip(index, 0, max(len(values) - 1, 0))], 0) if len(values) else \
                np.zeros(Sh, np.int64)

        hshape = model.hfield_shape if len(model.hfield_shape) else np.zeros((1, 2), np.int32)
        Dd.v0 = i32(pick(model.mesh_vertex_start, mesh, is_mesh) if Sh else [0])
        Dd.v1 = i32(pick(model.mesh_vertex_start, mesh + 1, is_mesh) if Sh else [0])
        Dd.f0 = i32(pick(model.mesh_face_start, mesh, is_mesh) if Sh else [0])
        Dd.f1 = i32(pick(model.mesh_face_start, mesh + 1, is_mesh) if Sh else [0])
        Dd.h_start = i32(pick(model.hfield_start, hf, is_hf) if Sh else [0])
        Dd.h_rows = i32(pick(hshape[:, 0], hf, is_hf) if Sh else [0])
        Dd.h_cols = i32(pick(hshape[:, 1], hf, is_hf) if Sh else [0])
        bounds = np.where(np.isfinite(model.shape_local_bounds), model.shape_local_bounds, 0.0)  # a plane's: unused
        Dd.lo = v3(bounds[:, 0] if Sh else np.zeros(3))
        Dd.hi = v3(bounds[:, 1] if Sh else np.zeros(3))
        self.shape_data = Dd
        # The pairs of each family present, in model.shape_pair order, and the first EPA scratch row
        # of the families that run GJK/EPA: one row per (world, pair) thread of theirs.
        family = np.array([pair_family(model.shape_type[a], model.shape_type[b], model.shape_rounding[a],
                                       model.shape_rounding[b]) for a, b in pairs], dtype=object)
        self.families = []  # (family, family_pair, epa_first), in FAMILIES order
        epa_rows = 0
        for name in FAMILIES:
            members = np.flatnonzero(family == name)
            if len(members):
                self.families.append((name, i32(members), epa_rows))
                if name in _EPA_FAMILIES:
                    epa_rows += W * len(members)
        rows = max(epa_rows, 1)
        E = Epa()
        E.P, E.PA, E.PB = (wp.zeros((rows, EPA_MAX_VERTICES), dtype=wp.vec3d, device=d) for _ in range(3))
        E.face = wp.zeros((rows, EPA_MAX_FACES), dtype=wp.vec3i, device=d)
        E.fn = wp.zeros((rows, EPA_MAX_FACES), dtype=wp.vec3d, device=d)
        E.fd = wp.zeros((rows, EPA_MAX_FACES), dtype=wp.float64, device=d)
        E.alive = wp.zeros((rows, EPA_MAX_FACES), dtype=int, device=d)
        E.visible = wp.zeros((rows, EPA_MAX_FACES), dtype=int, device=d)
        E.horizon = wp.zeros((rows, 3 * EPA_MAX_FACES), dtype=wp.vec2i, device=d)
        self.epa = E
        # Every shape's world pose and (broad phase) world box, (num_worlds, S).
        self.pose = wp.zeros((W, max(Sh, 1)), dtype=wp.transformd, device=d)
        self.centre = wp.zeros((W, max(Sh, 1)), dtype=wp.vec3d, device=d)
        self.half = wp.zeros((W, max(Sh, 1)), dtype=wp.vec3d, device=d)
        # Per world after collide(): StepStatus.INVALID_QUATERNION where a body_q quaternion was
        # rejected (that world got no contacts), else 0. Device array, (num_worlds,).
        self.last_status = wp.zeros(W, dtype=wp.int32, device=d)
        # The scratch slot of each kept contact, (num_worlds, max_rigid_contact): what the two
        # selection kernels pass between them.
        self.kept = wp.zeros((W, max(self.max_rigid_contact, 1)), dtype=int, device=d)
        self._slots = None  # the ContactSlots of the contacts last filled (sap_gpu.arrays.contact_slots)

    @classmethod
    def memory_estimate(cls, model: SapModel, max_rigid_contact: int, config: SapConfig | None = None,
                        device=None, broad_phase: str = "aabb", parameters: WorldParameters | None = None,
                        contacts: bool = True) -> MemoryEstimate:
        """What this constructor's arguments would allocate on the device, without allocating it:
        a :class:`~sap_common.state.MemoryEstimate` with the parts ``collision pipeline`` and (with
        ``contacts``) ``contacts``, those of :meth:`contacts` (docs/scaling.md § Memory). Of
        ``parameters`` only whether there are any matters (per-world ones, or ``True`` for ones not
        built yet, make the pair materials per world; their own arrays are not counted)."""
        C, _ = collision_pipeline_args(model, max_rigid_contact, config)
        check_broad_phase(broad_phase)
        get_device(device)
        out = pipeline_memory(model, C, parameters is not None)
        return out + contacts_memory(model.num_worlds, C) if contacts else out

    def _combine_materials(self, rows: int) -> None:
        """Launch: the pairs' materials and margins of the first ``rows`` worlds (``_pair_materials``)."""
        P = len(self.model.shape_pair)
        if P == 0:
            return
        a, cfg = self.parameters.array, self.config
        launch_threads(_pair_materials, dim=(rows, P), device=self.device, inputs=[
            self._shape_pair, a("shape_material_mu"), a("shape_material_ke"), a("shape_material_tau"),
            a("shape_material_hcd"), a("shape_margin"), wp.float64(cfg.fallback_mu), wp.float64(cfg.fallback_stiffness),
            wp.float64(cfg.contact_tau_d), wp.float64(cfg.fallback_hc_dissipation), self.pair_rounding],
            outputs=self._pair_rows)

    def contacts(self) -> SapContacts:
        """Empty device contacts for this pipeline."""
        from .arrays import contacts

        out = contacts(self.model.num_worlds, self.max_rigid_contact, self.device)
        out.materials = MaterialFallbacks.of(self.config)
        return out

    def collide(self, state, contacts: SapContacts) -> None:
        """Fill device ``contacts`` from ``state.body_q`` for every world.

        Body quaternions are normalized on read; a world with a rejected one (not finite, or norm
        outside [QUAT_NORM_MIN, QUAT_NORM_MAX]) gets no contacts and ``last_status[w] =
        INVALID_QUATERNION``, as in sap_ref.
        """
        from .arrays import check_device_contacts

        m = self.m
        if not isinstance(state, SapState):
            raise ValueError(f"state: expected a SapState, got {type(state).__name__}")
        if not isinstance(state.body_q, wp.array) or tuple(state.body_q.shape) != (m.num_worlds, m.body_count) \
                or state.body_q.dtype != wp.transformd:
            raise ValueError(f"state.body_q: expected a wp.array of wp.transformd shaped "
                             f"{(m.num_worlds, m.body_count)}")
        check_device_contacts(m, contacts, self.max_rigid_contact)
        W, P = m.num_worlds, len(self.model.shape_pair)
        launch_blocks(_check_poses, num_worlds=W, device=self.device, inputs=[m.body_count, state.body_q],
                      outputs=[self.last_status])
        use_bp = int(self.broad_phase == "aabb")
        if not self.parameters.shared:  # per-world materials and margins: combined again, a (W, P) launch
            self._combine_materials(W)
        world_bounds(self.device, m.shape_type, m.shape_body, m.shape_transform, self.shape_data.lo,
                     self.shape_data.hi, m.params.array("shape_margin"), state.body_q, self.pose, self.centre,
                     self.half, W, self.model.shape_count)
        for family, family_pair, epa_first in self.families:
            collide_pairs(family, m, family_pair, self.geometry, self.shape_data, use_bp, self.pose, self.last_status,
                          self.centre, self.half, epa_first, self.epa, self.scratch)
        if self.rounded_pair is not None:  # docs/design.md § Rounded shapes
            launch_threads(_round_contacts, dim=(W, self.rounded_pair.shape[0]), device=self.device,
                           inputs=[m.params.array("shape_margin"), m.shape_pair, self.pair_rounding, self.rounded_pair],
                           outputs=[self.scratch])
        c, C = contacts, self.max_rigid_contact
        self._slots = contact_slots(c, self._slots)
        launch_blocks(_select_order, num_worlds=W, device=self.device, inputs=[C, P, self.slots if P else 0,
                      self.scratch], outputs=[c.count, c.overflow, self.kept])
        launch_threads(_select_copy, dim=(W, C), device=self.device, inputs=[m.shape_pair, m.shape_body,
                       m.params.array("shape_margin"), self.pair_mu, self.pair_ke, self.pair_ke0, self.pair_ke1,
                       self.pair_tau, self.pair_hcd, self.scratch, c.count, self.kept], outputs=[self._slots])
        contacts.materials = MaterialFallbacks.of(self.config)  # what a solver checks its own config against


def pipeline_memory(model: SapModel, max_rigid_contact: int, per_world_parameters: bool = False) -> MemoryEstimate:
    """The device bytes a :class:`CollisionPipeline` of ``model`` allocates (its own arrays; per-world
    parameters, when given, are the caller's and not counted), measured on 1 and 2 worlds
    (:func:`~sap_gpu.device.probe_memory`): the part ``collision pipeline`` of a MemoryEstimate."""

    def measure(model_w, device):
        probe = CollisionPipeline.__new__(CollisionPipeline)
        probe.max_rigid_contact, probe.config = collision_pipeline_args(model_w, max_rigid_contact, None)
        probe.broad_phase, probe.model, probe.device = "aabb", model_w, device
        params = WorldParameters(model_w, device) if per_world_parameters else None
        probe._allocate(model_w, params, sizing=True)
        return device_nbytes(probe) - (device_nbytes(params) if params is not None else 0)

    return probe_memory("collision pipeline", model, measure, key=(int(max_rigid_contact), per_world_parameters))
