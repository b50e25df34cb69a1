"""Device broad phase: :mod:`sap_ref.broad_phase` per (world, shape) and per (world, pair).

``world_bounds`` fills each shape's world pose and world box (centre, half extents grown by its margin and
``BROAD_PHASE_SLACK``; a plane's are infinite) in a (world, shape) launch; ``pair_overlap`` is
called by the narrow-phase thread of a pair before any geometry: boxes that overlap on every
axis, or, for a plane, the other box reaching below its surface plus the margins. The same test
as sap_ref's, so both pipelines test the same pairs and report the same contacts.
"""

import warp as wp

from sap_common.constants import BROAD_PHASE_SLACK
from sap_common.enums import ShapeType

from .launch import launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["world_bounds", "pair_overlap"]

PLANE = wp.constant(int(ShapeType.PLANE))


@wp.func
def body_pose(X: wp.transformd) -> wp.transformd:
    """A body pose with its quaternion normalized on read (the quaternion policy)."""
    return wp.transformd(wp.transform_get_translation(X), wp.normalize(wp.transform_get_rotation(X)))


@wp.func
def shape_pose(shape_body: wp.array(dtype=int), shape_transform: wp.array(dtype=wp.transformd),
               body_q: wp.array2d(dtype=wp.transformd), world: int, s: int) -> wp.transformd:
    """World pose X_WB ∘ X_BS of shape s (a body quaternion normalized on read)."""
    X = shape_transform[s]
    b = shape_body[s]
    if b >= 0:
        X = body_pose(body_q[world, b]) * X
    return X


@wp.func
def zero_vec() -> wp.vec3d:
    return wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))


@wp.kernel
def _world_bounds(shape_type: wp.array(dtype=int), shape_body: wp.array(dtype=int),
                  shape_transform: wp.array(dtype=wp.transformd), shape_lo: wp.array(dtype=wp.vec3d),
                  shape_hi: wp.array(dtype=wp.vec3d), shape_margin: wp.array2d(dtype=wp.float64),
                  body_q: wp.array2d(dtype=wp.transformd), pose_out: wp.array2d(dtype=wp.transformd),
                  centre_out: wp.array2d(dtype=wp.vec3d), half_out: wp.array2d(dtype=wp.vec3d)):
    world, s = wp.tid()
    X = shape_pose(shape_body, shape_transform, body_q, world, s)
    pose_out[world, s] = X
    if shape_type[s] == PLANE:
        inf = wp.float64(wp.inf)
        centre_out[world, s] = wp.transform_get_translation(X)
        half_out[world, s] = wp.vec3d(inf, inf, inf)
        return
    c = wp.float64(0.5) * (shape_lo[s] + shape_hi[s])
    e = wp.float64(0.5) * (shape_hi[s] - shape_lo[s])
    R = wp.quat_to_matrix(wp.transform_get_rotation(X))
    grow = shape_margin[world, s] + wp.float64(BROAD_PHASE_SLACK)
    h = zero_vec()
    for i in range(3):
        h[i] = (wp.abs(R[i, 0]) * e[0] + wp.abs(R[i, 1]) * e[1] + wp.abs(R[i, 2]) * e[2]) + grow
    centre_out[world, s] = wp.transform_get_translation(X) + R * c
    half_out[world, s] = h


def world_bounds(device, shape_type, shape_body, shape_transform, shape_lo, shape_hi, shape_margin, body_q,
                 pose, centre, half, num_worlds, shape_count):
    """Launch the (world, shape) kernel: every shape's world pose ``pose`` and world box
    ``centre``/``half``, (num_worlds, S) each; the narrow phase reads the poses from here."""
    if shape_count:
        launch_threads(_world_bounds, dim=(num_worlds, shape_count), device=device, inputs=[shape_type, shape_body,
                       shape_transform, shape_lo, shape_hi, shape_margin, body_q], outputs=[pose, centre, half])


@wp.func
def pair_overlap(shape_type: wp.array(dtype=int), shape_margin: wp.array2d(dtype=wp.float64),
                 centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d), world: int, a: int, b: int,
                 Xa: wp.transformd, Xb: wp.transformd) -> int:
    """Whether the narrow phase must test pair (a, b) (sap_ref.broad_phase.pair_overlap)."""
    if shape_type[a] == PLANE or shape_type[b] == PLANE:
        p = a
        o = b
        Xp = Xa
        if shape_type[b] == PLANE:
            p = b
            o = a
            Xp = Xb
        n = wp.quat_rotate(wp.transform_get_rotation(Xp), wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(1.0)))
        ho = half[world, o]
        lowest = wp.dot(n, centre[world, o] - wp.transform_get_translation(Xp)) - (
            wp.abs(n[0]) * ho[0] + wp.abs(n[1]) * ho[1] + wp.abs(n[2]) * ho[2])
        if lowest <= shape_margin[world, p] + wp.float64(BROAD_PHASE_SLACK):
            return 1
        return 0
    d = centre[world, a] - centre[world, b]
    ha = half[world, a]
    hb = half[world, b]
    for i in range(3):
        if not (wp.abs(d[i]) <= ha[i] + hb[i]):
            return 0
    return 1
