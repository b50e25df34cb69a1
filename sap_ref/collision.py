"""Collision: the narrow phase for the model's candidate shape pairs, one world at a time.

``CollisionPipeline(model, max_rigid_contact, config).collide(state, contacts)`` fills
:class:`~sap_common.state.SapContacts` (docs/design.md § Collision). For each candidate pair (a, b) of
``model.shape_pair`` (a < b, already filtered), shape 0 = a and shape 1 = b whatever their
types. Conventions (docs/formulation.md § Contact frame and Jacobian, docs/conventions.md):

* ``normal`` n̂ is a unit vector from shape 0 into shape 1 (world frame);
* ``x0`` is the point of shape 0 deepest inside shape 1 (on shape 0's surface), ``x1`` the
  point of shape 1 deepest inside shape 0 (on shape 1's surface), and
  ``phi0 = n̂·(x1 − x0)`` with x1 − x0 = φ₀ n̂ exactly: φ₀ < 0 in penetration;
* a contact is reported while ``phi0 < margin0 + margin1`` (docs/design.md § Collision; a non-finite φ₀, from a
  non-finite pose, is never reported);
* per shape, an unset (NaN) material takes the config's fallback (``fallback_mu``,
  ``fallback_stiffness``, ``contact_tau_d``); a pair combines them as Drake does
  (docs/formulation.md § Material combination):
  μ = 2μ₀μ₁/(μ₀+μ₁), k = k₀k₁/(k₀+k₁) (one ∞: the other), τ_d = τ₀ + τ₁;
* per world, contacts are in generation order (pairs in ``model.shape_pair`` order, points in
  each routine's fixed order). Beyond ``max_rigid_contact`` the deepest are kept (smallest φ₀,
  ties by generation order), still in generation order, and ``contacts.overflow[w]`` counts
  the dropped ones; nothing is written past the capacity; unused slots hold the allocation
  values (ids −1, zeros);
* every slot is written through :func:`sap_ref.arrays.write_contact` and
  :func:`~sap_ref.arrays.clear_contact`: point contacts, so each point's ``ke`` is the pair's
  combined k, its ``phi0`` the geometry's φ₀ and its ``area`` 0.

Points per pair (``MAX_CONTACTS_PER_PAIR``): plane–sphere 1; plane–capsule 2 (the segment's end
spheres); plane–box 8 (corners); sphere–sphere, sphere–capsule, sphere–box 1; capsule–capsule 1
(2 at the ends of the overlap of (nearly) parallel segments); capsule–box 3 (the end spheres,
plus the segment's deepest point when it is deeper than both ends); box–box 8. Each routine is
written for one canonical type order (lower ``ShapeType`` first); :func:`pair_contacts` swaps the
witness points and negates the normal for the other order. Multi-point manifolds (corners, end
spheres, clipped faces) extend Drake, which reports one point pair per geometry pair. For the
shallower end sphere of a tilted capsule the capsule-side witness lies on that end sphere, i.e. on
or inside the capsule (the usual two-point capsule manifold, as in MuJoCo); every other witness
point is on its shape's surface.

The routines, one file per pair family (``sap_gpu`` uses the same files for the same pairs):
:mod:`sap_ref.collision_primitive` (planes, spheres and capsules with each other: closed forms),
:mod:`sap_ref.collision_box` (a box with a plane, sphere, capsule or box), and for the pairs of a
cylinder, ellipsoid, convex mesh or height field :mod:`sap_ref.collision_convex` (GJK/EPA on the
shapes of :mod:`sap_ref.collision_support`), :mod:`sap_ref.collision_manifold` (multi-point
contact, and the plane pairs of these shapes) and :mod:`sap_ref.collision_heightfield`.

A shape with a rounding radius ρ (``model.shape_rounding``) is its core swept by a ball: its pairs
run the cores' routine and move each contact out by the radii (:func:`rounded`, docs/design.md
§ Rounded shapes); two boxes of which one is rounded take GJK/EPA (:func:`rounded_boxes`).

Degenerate cases are deterministic and finite: coincident sphere centres take n̂ = +z
(``DEFAULT_NORMAL``); a sphere centre on a capsule's segment takes the capsule frame's x axis;
intersecting capsule segments take their axes' common perpendicular; a zero-length capsule is
one sphere (one point, not two coincident ones); a point inside a box uses its nearest face
(first axis on ties).

Drake: ``QueryObject::ComputePointPairPenetration`` (point contact; sphere pairs through
``penetration_as_point_pair::Callback`` / ``SignedDistanceToPoint``, other pairs through FCL).
"""

from __future__ import annotations

import math

import numpy as np

from sap_common import spatial
from sap_common.collision_rules import (
    MAX_CONTACTS_PER_PAIR,
    MaterialFallbacks,
    check_broad_phase,
    combine_hc_dissipation,
    combine_materials,
    contact_capacity,
)
from sap_common.config import SapConfig, collision_pipeline_args

# The pair routines' thresholds, re-exported: sap_gpu.collision names the same objects.
from sap_common.constants import (  # noqa: F401
    COINCIDENT_DISTANCE,
    DEFAULT_NORMAL,
    GOLDEN_ITERATIONS,
    GOLDEN_TIE,
    INTERIOR_DEPTH_MARGIN,
    PARALLEL_TOL,
)
from sap_common.conventions import quaternion_norm_ok
from sap_common.geometry import hfield_grid, shape_local_bounds
from sap_common.model import SapModel, ShapeType
from sap_common.state import (
    MemoryEstimate,
    SapContacts,
    SapState,
    StepStatus,
    available_host_memory,
    check_contacts,
    check_memory,
    check_state,
    contacts_memory,
    host_nbytes,
    probe_memory,
)

from .arrays import check_host_device, clear_contact, write_contact
from .broad_phase import pair_overlap
from .collision_box import box_box, capsule_box, plane_box, sphere_box
from .collision_heightfield import heightfield_contacts
from .collision_manifold import convex_manifold, plane_manifold
from .collision_primitive import capsule_capsule, plane_capsule, plane_sphere, sphere_capsule, sphere_sphere
from .collision_support import Convex
from .parameters import WorldParameters, world_slice, write_world

__all__ = ["CollisionPipeline", "MAX_CONTACTS_PER_PAIR", "contact_capacity", "pair_contacts", "combine_materials",
           "combine_hc_dissipation",
           "plane_sphere", "plane_capsule", "plane_box", "sphere_sphere", "sphere_capsule", "sphere_box",
           "capsule_capsule", "capsule_box", "box_box", "pipeline_memory"]

P, S, C, B = ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX

# The closed forms by canonical type pair: the primitives (sap_ref.collision_primitive) and the box
# pairs (sap_ref.collision_box). Every pair with a newer shape type goes through _new_pair.
_ROUTINES = {
    (P, S): plane_sphere, (P, C): plane_capsule, (P, B): plane_box, (S, S): sphere_sphere,
    (S, C): sphere_capsule, (S, B): sphere_box, (C, C): capsule_capsule, (C, B): capsule_box,
    (B, B): box_box,
}


_NEW_TYPES = (ShapeType.CYLINDER, ShapeType.ELLIPSOID, ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD)


def convex_shape(t, X, size, geometry=None) -> Convex:
    """The :class:`~sap_ref.collision_support.Convex` of a shape at world pose X; ``geometry`` is a
    mesh's ``(points (V, 3), faces [(n, d, vertex indices)])`` in its own frame."""
    conv = Convex(int(t), X[:3], spatial.quat_to_matrix(X[3:]), size, None if geometry is None else geometry[0])
    if geometry is not None:
        conv.faces = geometry[1]
    return conv


def shape_geometry(model: SapModel, s: int):
    """The ``geometry`` argument of :func:`pair_contacts` for shape s of a model: a mesh's
    ``(points (V, 3), faces [(n, d, vertex indices into points)])``, a height field's heights
    (rows, columns), else None."""
    t = ShapeType(int(model.shape_type[s]))
    if t == ShapeType.HEIGHTFIELD:
        return hfield_grid(model, s)
    if t != ShapeType.CONVEX_MESH:
        return None
    mesh = int(model.shape_source[s])
    v0, v1 = int(model.mesh_vertex_start[mesh]), int(model.mesh_vertex_start[mesh + 1])
    faces = []
    for f in range(int(model.mesh_face_start[mesh]), int(model.mesh_face_start[mesh + 1])):
        idx = model.mesh_face_vertex[model.mesh_face_vertex_start[f]:model.mesh_face_vertex_start[f + 1]] - v0
        faces.append((model.mesh_face_plane[f, :3], float(model.mesh_face_plane[f, 3]), np.asarray(idx)))
    return np.asarray(model.mesh_vertex[v0:v1]), faces


def local_bounds(t, size, geometry=None, rounding=0.0) -> np.ndarray:
    """A shape's axis-aligned bounds in its own frame, (2, 3) (:func:`sap_common.geometry.shape_local_bounds`,
    grown by a rounding radius as ``SapModel.shape_local_bounds`` is)."""
    if int(t) == ShapeType.CONVEX_MESH:
        return shape_local_bounds([int(t)], [size], [0], geometry[0], [0, len(geometry[0])], np.zeros(0), [0],
                                  [rounding])[0]
    return shape_local_bounds([int(t)], [size], [-1], np.zeros((0, 3)), [0], np.zeros(0), [0], [rounding])[0]


def _canonical_swap(X0, size0, X1, size1) -> bool:
    """For two shapes of one type: whether shape 1 comes first in the fixed order (pose, then size,
    lexicographically). Running the routine in that order whatever the argument order makes the
    swapped call the exact mirror (witness points swapped, normal negated), rounding included."""
    return tuple(np.concatenate([X1, size1])) < tuple(np.concatenate([X0, size0]))


def _new_pair(t0, X0, size0, t1, X1, size1, geo0, geo1, margin, rounding0=0.0):
    """Canonical order t0 ≤ t1, at least one of the new shape types (or two rounded boxes);
    ``rounding0`` grows shape 0's bounds for a height field's cell range."""
    if t0 == ShapeType.PLANE:
        plane = (X0[:3], spatial.quat_to_matrix(X0[3:]))
        return plane_manifold(plane, convex_shape(t1, X1, size1, geo1), margin)
    if t1 == ShapeType.HEIGHTFIELD:
        return heightfield_contacts(convex_shape(t0, X0, size0, geo0), X1[:3], spatial.quat_to_matrix(X1[3:]), size1,
                                    geo1, local_bounds(t0, size0, geo0, rounding0), margin)
    return convex_manifold(convex_shape(t0, X0, size0, geo0), convex_shape(t1, X1, size1, geo1), margin)


def _mirror(contacts):
    return [(x1, x0, -n, phi) for x0, x1, n, phi in contacts]


def rounded(contacts, rounding0, rounding1):
    """The contacts of two rounded shapes from their cores' (docs/design.md § Rounded shapes): each
    witness point moved out along the normal by its shape's radius, x0 + ρ₀n̂ and x1 − ρ₁n̂, and
    φ₀ − (ρ₀ + ρ₁) (the signed distance of two convex sets swept by balls is the cores' minus the
    radii, with the same normal). The same values for the pair in the other order (its normal −n̂,
    and ρ₀ + ρ₁ = ρ₁ + ρ₀ in floating point too); ``sap_gpu.collision`` does the same operations in
    its own kernel after the pairs' routines."""
    return [(x0 + rounding0 * n, x1 - rounding1 * n, n, phi - (rounding0 + rounding1)) for x0, x1, n, phi in contacts]


def rounded_boxes(type0, type1, rounding0, rounding1) -> bool:
    """Whether a pair is two boxes, at least one of them rounded: such a pair goes through GJK/EPA and
    the manifolds (:mod:`sap_ref.collision_manifold`), not box_box, whose separated pairs report only a
    lower bound of the distance (their SAT separation), which the radii would turn into a false
    penetration."""
    return int(type0) == int(type1) == ShapeType.BOX and (rounding0 != 0.0 or rounding1 != 0.0)


def pair_contacts(type0, X0, size0, type1, X1, size1, geometry0=None, geometry1=None, margin=0.0, rounding0=0.0,
                  rounding1=0.0):
    """Contacts ``[(x0, x1, normal, phi0)]`` of shape 0 against shape 1, in either type order.

    The routine of the canonical order (lower ``ShapeType`` first; for two shapes of one type, the
    order of :func:`_canonical_swap`) runs; for the other order its outputs are swapped (x0 ↔ x1)
    and the normal negated, so φ₀ and the point order are the same both ways. ``X0``/``X1`` are
    world poses ``[p, q_xyzw]``; ``geometry0/1`` the mesh ``(points, faces)`` or the height field's
    heights (rows, columns) of a CONVEX_MESH / HEIGHTFIELD shape; ``margin`` (margin₀ + margin₁)
    bounds the candidates of a manifold (:mod:`sap_ref.collision_manifold`). No margin filtering here.
    ``rounding0/1`` are the shapes' rounding radii: with either non-zero the routine runs on the
    cores, with the candidates bounded by margin + ρ₀ + ρ₁, and :func:`rounded` moves its contacts
    out (two boxes then take GJK/EPA, :func:`rounded_boxes`); with both 0 nothing of this runs.
    """
    t0, t1 = ShapeType(int(type0)), ShapeType(int(type1))
    X0, X1 = np.asarray(X0, dtype=np.float64), np.asarray(X1, dtype=np.float64)
    size0, size1 = np.asarray(size0, dtype=np.float64), np.asarray(size1, dtype=np.float64)
    is_rounded = rounding0 != 0.0 or rounding1 != 0.0
    if is_rounded:
        margin = margin + rounding0 + rounding1  # the cores' candidates: within the margin of the rounded shapes
    boxes = rounded_boxes(t0, t1, rounding0, rounding1)
    swap = t1 < t0 or (t0 == t1 and (t0 != ShapeType.BOX or boxes) and _canonical_swap(X0, size0, X1, size1))
    if swap:
        t0, X0, size0, geometry0, t1, X1, size1, geometry1 = t1, X1, size1, geometry1, t0, X0, size0, geometry0
        rounding0, rounding1 = rounding1, rounding0
    if t0 in _NEW_TYPES or t1 in _NEW_TYPES or boxes:
        if (t0, t1) in ((ShapeType.PLANE, ShapeType.PLANE), (ShapeType.PLANE, ShapeType.HEIGHTFIELD),
                        (ShapeType.HEIGHTFIELD, ShapeType.HEIGHTFIELD)):
            raise ValueError(f"shape_type: no narrow phase for {t0.name}–{t1.name}")
        out = _new_pair(t0, X0, size0, t1, X1, size1, geometry0, geometry1, margin, rounding0)
    elif (t0, t1) in _ROUTINES:
        out = _ROUTINES[(t0, t1)](X0, size0, X1, size1)
    else:
        raise ValueError(f"shape_type: no narrow phase for {t0.name}–{t1.name}")
    if is_rounded:
        out = rounded(out, rounding0, rounding1)
    return _mirror(out) if swap else out


class CollisionPipeline:
    """Narrow phase over ``model.shape_pair`` for every world (NumPy, one world at a time).

    Args:
        model: the model (its ``shape_*`` fields and candidate pairs).
        max_rigid_contact: contact slots per world, an integer ≥ 0 (:func:`contact_capacity`
            gives one that never overflows).
        config: supplies the material fallbacks (default ``SapConfig()``).
        device: None or ``"cpu"`` (the host; accepted so that sap_ref and sap_gpu are called alike).
        broad_phase: ``"aabb"`` (default: the narrow phase runs on pairs whose bounding boxes
            overlap, :mod:`sap_ref.broad_phase`) or ``"none"`` (every candidate pair); the contacts
            are the same.
        parameters: a :class:`~sap_ref.WorldParameters` of this very ``model`` object, or None. With
            it, world ``w``'s contacts are exactly those a one-world pipeline of
            ``parameters.world_model(w)`` writes (that world's margins and materials): each world
            is collided by such a pipeline, rebuilt when the world's parameters are next written.
    """

    def __init__(self, model: SapModel, max_rigid_contact: int, config: SapConfig | None = None, device=None,
                 broad_phase: str = "aabb", parameters: WorldParameters | None = None):
        check_host_device(device)
        self.max_rigid_contact, self.config = collision_pipeline_args(model, max_rigid_contact, config)
        self.broad_phase = check_broad_phase(broad_phase)
        self.model = model
        if parameters is not None and (not isinstance(parameters, WorldParameters) or parameters.model is not model):
            got = type(parameters).__name__ if not isinstance(parameters, WorldParameters) else \
                "the WorldParameters of another model object"
            raise ValueError(f"parameters: expected a sap_ref.WorldParameters of this pipeline's model (the same "
                             f"object), got {got}")
        check_memory(pipeline_memory(model), available_host_memory, "sap_ref.CollisionPipeline",
                     capacity=self.max_rigid_contact)  # docs/scaling.md § Memory
        self.parameters = parameters
        self._world_pipelines: dict[int, tuple[int, CollisionPipeline]] = {}  # w -> (version, one-world pipeline)
        # Per shape: a mesh's (points, faces) or a height field's heights, in its own frame.
        self._geometry = [shape_geometry(model, s) for s in range(model.shape_count)]
        self._allocate(model.num_worlds)
        # Per candidate pair: (mu, ke, ke0, ke1, tau_d, hcd); materials are static.
        self._materials = [(*combine_materials(model, int(a), int(b), self.config),
                            combine_hc_dissipation(model, int(a), int(b), self.config)) for a, b in model.shape_pair]

    def _allocate(self, W: int) -> None:
        """The arrays over worlds. Per world after collide(): StepStatus.INVALID_QUATERNION where a
        body_q quaternion was rejected (that world got no contacts), else 0, ``last_status`` (W,)."""
        self.last_status = np.zeros(W, dtype=np.int32)

    @classmethod
    def memory_estimate(cls, model: SapModel, max_rigid_contact: int, config: SapConfig | None = None,
                        device=None, broad_phase: str = "aabb", parameters: WorldParameters | None = None,
                        contacts: bool = True) -> MemoryEstimate:
        """What this constructor's arguments would take on the host (sap_gpu's method of the same name):
        the parts ``collision pipeline`` and, with ``contacts``, ``contacts`` (:meth:`contacts`)."""
        check_host_device(device)
        C, _ = collision_pipeline_args(model, max_rigid_contact, config)
        check_broad_phase(broad_phase)
        return pipeline_memory(model) + contacts_memory(model.num_worlds, C) if contacts else pipeline_memory(model)

    def contacts(self) -> SapContacts:
        """Empty contact buffers for this pipeline: ``(num_worlds, max_rigid_contact)`` slots."""
        contacts = SapContacts.allocate(self.model.num_worlds, self.max_rigid_contact)
        contacts.materials = MaterialFallbacks.of(self.config)
        return contacts

    def collide(self, state: SapState, contacts: SapContacts) -> None:
        """Fill ``contacts`` for every world from ``state.body_q`` (world pose of each body origin).

        Shape s's world pose is X_WB ∘ X_BS with X_WB = ``body_q[w, shape_body[s]]`` and
        X_BS = ``shape_transform[s]`` (for a world shape, body −1, X_BS is already X_WS).
        Raises ``ValueError`` (naming the field) when ``state`` or ``contacts`` does not match
        the model or this pipeline's capacity. Body quaternions are normalized on read; a world with
        a rejected one (not finite, or norm outside [QUAT_NORM_MIN, QUAT_NORM_MAX],
        docs/conventions.md) gets no contacts and ``last_status[w] = INVALID_QUATERNION``.
        """
        m = self.model
        if not isinstance(state, SapState):
            raise ValueError(f"state: expected a SapState, got {type(state).__name__}")
        check_state(m, state, "state")
        if not isinstance(contacts, SapContacts):
            raise ValueError(f"contacts: expected SapContacts, got {type(contacts).__name__}")
        check_contacts(m, contacts)
        if contacts.capacity != self.max_rigid_contact:
            raise ValueError(f"contacts: capacity {contacts.capacity} does not match max_rigid_contact "
                             f"{self.max_rigid_contact}")
        if self.parameters is not None:
            self._collide_parameters(state, contacts)
            return
        for w in range(m.num_worlds):
            body_q = np.asarray(state.body_q[w], dtype=np.float64)
            accepted = bool(np.all(quaternion_norm_ok(body_q[:, 3:])))
            self.last_status[w] = 0 if accepted else int(StepStatus.INVALID_QUATERNION)
            self._collide_world(body_q, contacts, w, accepted)
        contacts.materials = MaterialFallbacks.of(self.config)  # what a solver checks its own config against

    def _world_pipeline(self, w: int) -> CollisionPipeline:
        """World ``w``'s one-world pipeline of ``parameters.world_model(w)``, rebuilt when the world's
        parameters were written since."""
        version = int(self.parameters.version[w])
        cached = self._world_pipelines.get(w)
        if cached is None or cached[0] != version:
            pipeline = CollisionPipeline(self.parameters.world_model(w), self.max_rigid_contact, self.config,
                                         broad_phase=self.broad_phase)
            cached = self._world_pipelines[w] = (version, pipeline)
        return cached[1]

    def _collide_parameters(self, state: SapState, contacts: SapContacts) -> None:
        """:meth:`collide` with per-world parameters: each world by its one-world pipeline on
        one-world copies of ``state`` and ``contacts``, its rows written back."""
        pipelines = [self._world_pipeline(w) for w in range(self.model.num_worlds)]
        for w, pipeline in enumerate(pipelines):
            one = world_slice(contacts, w)
            pipeline.collide(world_slice(state, w), one)
            write_world(contacts, one, w)
            self.last_status[w] = pipeline.last_status[0]
        contacts.materials = MaterialFallbacks.of(self.config)

    def _shape_poses(self, body_q) -> np.ndarray:
        """World pose X_WS of every shape, (S, 7)."""
        m = self.model
        X = np.array(m.shape_transform, dtype=np.float64)
        on_body = m.shape_body >= 0
        if np.any(on_body):
            X[on_body] = spatial.transform_compose(body_q[m.shape_body[on_body]], m.shape_transform[on_body])
        return X

    def _collide_world(self, body_q, contacts: SapContacts, w: int, accepted: bool = True) -> None:
        m = self.model
        found = []  # (a, b, x0, x1, normal, phi0, materials) in generation order
        X = self._shape_poses(body_q) if accepted else None
        test = pair_overlap(m, X) if accepted and self.broad_phase == "aabb" else np.ones(len(m.shape_pair), bool)
        for (a, b), mat, tested in zip(m.shape_pair if accepted else (), self._materials, test):
            if not tested:
                continue
            a, b = int(a), int(b)
            margin = m.shape_margin[a] + m.shape_margin[b]
            for x0, x1, n, phi in pair_contacts(m.shape_type[a], X[a], m.shape_size[a],
                                                m.shape_type[b], X[b], m.shape_size[b],
                                                self._geometry[a], self._geometry[b], margin,
                                                float(m.shape_rounding[a]), float(m.shape_rounding[b])):
                if phi < margin and math.isfinite(phi):  # a non-finite pose reports nothing
                    found.append((a, b, x0, x1, n, float(phi), mat))
        keep = list(range(len(found)))
        if len(found) > self.max_rigid_contact:  # the deepest (ties: generation order), in generation order
            keep = sorted(sorted(keep, key=lambda i: (found[i][5], i))[:self.max_rigid_contact])
        clear_contact(contacts, w)
        for slot, i in enumerate(keep):  # point contact: the pair's k, the point's φ₀, area 0
            a, b, x0, x1, n, phi, (mu, ke, k0, k1, tau, hcd) = found[i]
            write_contact(contacts, w, slot, a, b, m.shape_body[a], m.shape_body[b], x0, x1, n, phi,
                          m.shape_margin[a], m.shape_margin[b], mu, ke, k0, k1, tau, hcd, 0.0)
        contacts.count[w] = len(keep)
        contacts.overflow[w] = len(found) - len(keep)


def pipeline_memory(model: SapModel) -> MemoryEstimate:
    """The host arrays over worlds a :class:`CollisionPipeline` of ``model`` keeps (its status per world),
    measured on 1 and 2 worlds (``sap_common.state.probe_memory``): the part ``collision pipeline``."""

    def measure(W):
        probe = CollisionPipeline.__new__(CollisionPipeline)
        probe._allocate(W)
        return host_nbytes(probe, skip=(SapModel,))

    return probe_memory("collision pipeline", model, measure, key="sap_ref")
