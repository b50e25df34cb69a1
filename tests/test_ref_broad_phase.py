"""sap_ref.broad_phase: the bounding-box test drops only pairs the narrow phase would not report,
so the contacts are those of every candidate pair, in the same order; margins and planes."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.collision_rules import contact_capacity
from sap_ref.broad_phase import pair_overlap, world_bounds
from sap_ref.collision import CollisionPipeline
from sap_tools.benchmark.collision import pile


def _collide(model, state, broad_phase):
    pipe = CollisionPipeline(model, contact_capacity(model), broad_phase=broad_phase)
    c = pipe.contacts()
    pipe.collide(state, c)
    return c


def _assert_same(a, b):
    for f in dataclasses.fields(a):
        v = getattr(a, f.name)
        if isinstance(v, np.ndarray):
            assert np.array_equal(v, getattr(b, f.name), equal_nan=True), f.name


# Shapes in the pile: 50 in the default run (48 moving, every type of the pile's seven six times
# or more: 1,225 pairs); the 100-shape pile (4,950 pairs, ~30 s on sap_ref) under slow.
PILE_SHAPES = [50, pytest.param(100, marks=pytest.mark.slow)]


@pytest.mark.parametrize("shapes", PILE_SHAPES)
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), spread=st.floats(0.5, 1.5))
def test_a_pile_of_every_shape_type_gets_the_contacts_of_every_pair(shapes, seed, spread):
    model, state = pile(shapes, 1, seed)
    state.body_q[0, :, :2] *= spread  # from packed (many touching) to loose (few)
    aabb, every = _collide(model, state, "aabb"), _collide(model, state, "none")
    _assert_same(aabb, every)
    assert aabb.count[0] > 0
    X = CollisionPipeline(model, 0)._shape_poses(state.body_q[0])
    assert pair_overlap(model, X).sum() < 0.2 * len(model.shape_pair)  # most pairs never reach the narrow phase


def test_margins_keep_a_gap_pair_and_the_plane_test_uses_the_margins():
    """Two spheres 0.1 m apart with margins 0.06 each are reported (φ = 0.1 < 0.12): the boxes grown
    by the margins overlap. Without margins the pair is dropped before the narrow phase."""
    def model(margin):
        b = ModelBuilder()
        b.add_ground_plane(margin=margin)
        for x in (0.0, 0.3):
            body = b.add_body(1.0, inertia=(1, 1, 1))
            b.add_joint_free(-1, body, q0=(x, 0, 0.3, 0, 0, 0, 1))
            b.add_shape_sphere(body, radius=0.1, margin=margin)
        return b.finalize()

    for margin, reported in ((0.06, True), (0.0, False)):
        m = model(margin)
        X = CollisionPipeline(m, 0)._shape_poses(m.state().body_q[0])
        overlap = dict(zip(map(tuple, m.shape_pair.tolist()), pair_overlap(m, X)))
        assert overlap[(1, 2)] == reported
        # Spheres 0.2 m above the ground (φ = 0.2): within 0.06 + 0.06 no, so the plane pairs are dropped.
        assert not overlap[(0, 1)] and not overlap[(0, 2)]
        c = _collide(m, m.state(), "aabb")
        assert c.count[0] == int(reported)
        _assert_same(c, _collide(m, m.state(), "none"))


def test_plane_test_is_the_lowest_corner_of_the_box_against_the_surface():
    b = ModelBuilder()
    b.add_shape_plane(-1, spatial.transform((0, 0, 0), spatial.quat_from_axis_angle(np.array([1.0, 0, 0]), 0.3)))
    body = b.add_body(1.0, inertia=(1, 1, 1))
    b.add_joint_free(-1, body)
    b.add_shape_box(body, None, 0.1, 0.2, 0.05)
    m = b.finalize()
    state = m.state()
    n = spatial.quat_rotate(m.shape_transform[0, 3:], [0, 0, 1.0])
    centre, half = world_bounds(m, CollisionPipeline(m, 0)._shape_poses(state.body_q[0]))
    for gap, expected in ((0.01, False), (-0.01, True)):
        # Put the box's world box (not the box) `gap` above the plane along its normal.
        lowest = np.abs(n) @ half[1]
        state.body_q[0, 0, :3] = (lowest + gap) * n
        X = CollisionPipeline(m, 0)._shape_poses(state.body_q[0])
        assert bool(pair_overlap(m, X)[0]) == expected


def test_broad_phase_value_is_checked():
    m, _ = pile(100, 1)
    with pytest.raises(ValueError, match=r"broad_phase: expected one of aabb, none, got 'sweep'"):
        CollisionPipeline(m, 4, broad_phase="sweep")
    assert math.isinf(world_bounds(m, CollisionPipeline(m, 0)._shape_poses(m.state().body_q[0]))[1][0, 0])
