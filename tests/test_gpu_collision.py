"""sap_gpu.CollisionPipeline against sap_ref.collision: same contacts for the same state.

Integer fields (count, overflow, shape/body ids) must be identical and float fields equal to a
few ulps: both run the same routines in float64 in the same order; they differ only in how a
quaternion rotates a vector (Warp's formula vs NumPy's) and in summation order. Where a cylinder
or an ellipsoid takes part, GJK/EPA and the refinement iterate to a tolerance, and the float
fields are held to ``CURVED_GEOMETRY_TOL`` (sap_tools/tolerances.py says why).
"""

import dataclasses
import math

import numpy as np
import pytest
import warp as wp
from collision_cases import CUBE, GEM
from contact_record import assert_point_contacts, poison
from hypothesis import given, settings
from hypothesis import strategies as st

import sap_gpu
import sap_ref
from sap_common import scenes, spatial
from sap_common.builder import ModelBuilder
from sap_common.config import SapConfig
from sap_common.model import ShapeType
from sap_common.state import SapContacts
from sap_gpu.collision import CollisionPipeline as GpuPipeline
from sap_ref.collision import CollisionPipeline as RefPipeline
from sap_ref.collision import contact_capacity
from sap_tools.tolerances import CURVED_GEOMETRY_TOL, GEOMETRY_TOL, normal_tol  # float64 geometry (reasons there)

INT_FIELDS = ("count", "overflow", "shape0", "shape1", "body0", "body1")
FLOAT_FIELDS = ("x0", "x1", "normal", "phi0", "margin0", "margin1", "mu", "ke", "ke0", "ke1", "tau_d", "hcd", "area")
TYPES = (ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX, ShapeType.CYLINDER,
         ShapeType.ELLIPSOID, ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD)
STATIC = (ShapeType.PLANE, ShapeType.HEIGHTFIELD)
CURVED = (ShapeType.CYLINDER, ShapeType.ELLIPSOID)
HEIGHTS = np.array([[0.015 * np.sin(0.8 * i + 0.5 * j) for j in range(6)] for i in range(5)])


def _both(model, state, capacity, device, config=None):
    ref = RefPipeline(model, capacity, config)
    expected = ref.contacts()
    ref.collide(state, expected)
    gpu = GpuPipeline(model, capacity, config, device=device)
    got = gpu.contacts()
    gpu.collide(sap_gpu.to_device(state, device), got)
    return expected, sap_gpu.to_host(got)


def assert_same_contacts(expected, got, what="", curved=False):
    """Identical integer fields; float fields within GEOMETRY_TOL, or CURVED_GEOMETRY_TOL for the
    geometric fields where a curved core (cylinder, ellipsoid) took part; normals also within
    their witness points' rounding over the points' distance (normal_tol)."""
    for f in INT_FIELDS:
        assert np.array_equal(getattr(expected, f), getattr(got, f)), f"{what} {f}: {getattr(expected, f)} vs " \
                                                                       f"{getattr(got, f)}"
    for f in FLOAT_FIELDS:
        a, b = getattr(expected, f), getattr(got, f)
        finite = np.isfinite(a)
        tol = CURVED_GEOMETRY_TOL.get(f, GEOMETRY_TOL) if curved else GEOMETRY_TOL
        assert np.array_equal(finite, np.isfinite(b)), f"{what} {f}: non-finite entries differ"
        if f == "normal":  # per contact: the witness points' rounding over their distance (normal_tol)
            used = np.arange(a.shape[1])[None, :] < expected.count[:, None]
            tol = np.broadcast_to(np.where(used, normal_tol(expected.x0, expected.x1, tol), tol)[..., None], a.shape)
            assert np.all(np.abs(a[finite] - b[finite]) <= tol[finite]), f"{what} {f}"
            continue
        assert np.abs(a[finite] - b[finite]).max(initial=0.0) <= tol, f"{what} {f}"
        assert np.array_equal(a[~finite], b[~finite]), f"{what} {f}"  # ±inf stiffness


def _perturbed(scene, rng):
    """The scene's state pushed 0–3 cm down and tilted a little in every world and body."""
    state = scene.state.copy()
    W, B = state.body_q.shape[:2]
    state.body_q[:, :, 2] -= rng.uniform(0.0, 0.03, size=(W, B))
    for w in range(W):
        for b in range(B):
            state.body_q[w, b, 3:] = spatial.quat_normalize(state.body_q[w, b, 3:] + rng.normal(size=4) * 0.05)
    return state


@pytest.mark.parametrize("name", ["sphere_drop", "box_slide", "box_stack", "sphere_on_sphere", "arm_push_block",
                                  "humanoid"])
def test_scenes_match_sap_ref_with_and_without_overflow(device, name):
    scene = scenes.get(name, num_worlds=3)
    state = _perturbed(scene, np.random.default_rng(7))
    if name == "sphere_drop":  # starts in the air: sink world 1's sphere 5 mm into the ground
        state.body_q[1, 0, 2] = scene.sap_model.shape_size[1, 0] - 0.005
    model = scene.sap_model
    for capacity in (contact_capacity(model), 3):
        expected, got = _both(model, state, capacity, device)
        assert_same_contacts(expected, got, f"{name} capacity {capacity}")
    assert expected.count.sum() > 0  # the perturbation made contacts


def _two_shapes(types, sizes, poses, materials=None):
    """A model with two shapes of ``types`` (a plane goes to the world, every other shape on its
    own free body), and its state with the bodies at ``poses`` (world poses, [p, q_xyzw])."""
    b = ModelBuilder()
    bodies = []
    for k, (t, size) in enumerate(zip(types, sizes)):
        mat = {} if materials is None else materials[k]
        if t == ShapeType.PLANE:
            b.add_shape_plane(-1, poses[k], **mat)
            continue
        if t == ShapeType.HEIGHTFIELD:
            b.add_shape_heightfield(HEIGHTS, poses[k], hx=0.3, hy=0.25, base=0.1, **mat)
            continue
        body = b.add_body(1.0, inertia=(1, 1, 1))
        b.add_joint_free(-1, body)
        bodies.append(k)
        if t == ShapeType.SPHERE:
            b.add_shape_sphere(body, radius=size[0], **mat)
        elif t == ShapeType.CAPSULE:
            b.add_shape_capsule(body, radius=size[0], half_length=size[1], **mat)
        elif t == ShapeType.CYLINDER:
            b.add_shape_cylinder(body, radius=size[0], half_length=size[1], **mat)
        elif t == ShapeType.ELLIPSOID:
            b.add_shape_ellipsoid(body, None, *size, **mat)
        elif t == ShapeType.CONVEX_MESH:
            b.add_shape_convex_mesh(body, vertices=GEM if size[0] == 0 else CUBE, **mat)
        else:
            b.add_shape_box(body, None, *size, **mat)
    model = b.finalize()
    state = model.state()
    for i, k in enumerate(bodies):
        state.body_q[0, i] = poses[k]
    return model, state


@st.composite
def generic_two_shape_models(draw):
    """Every pair type in both shape orders, with random margins and materials, and sizes and
    poses drawn continuously (from a seed): generic configurations. Degenerate ones (exact ties,
    coincident or parallel features), where an answer may flip on rounding, are in
    ``test_degenerate_configurations_match_sap_ref``."""
    t0, t1 = draw(st.sampled_from(TYPES)), draw(st.sampled_from(TYPES))
    if t0 in STATIC and t1 in STATIC:
        t1 = ShapeType.BOX
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = {ShapeType.PLANE: lambda: np.zeros(3), ShapeType.SPHERE: lambda: [rng.uniform(0.02, 0.3), 0, 0],
             ShapeType.CAPSULE: lambda: [rng.uniform(0.02, 0.2), rng.uniform(0.0, 0.3), 0],
             ShapeType.BOX: lambda: rng.uniform(0.02, 0.3, 3),
             ShapeType.CYLINDER: lambda: [rng.uniform(0.02, 0.2), rng.uniform(0.01, 0.2), 0],
             ShapeType.ELLIPSOID: lambda: rng.uniform(0.02, 0.2, 3),
             ShapeType.CONVEX_MESH: lambda: [float(rng.integers(0, 2)), 0, 0],  # 0: the gem, 1: the cube
             ShapeType.HEIGHTFIELD: lambda: np.zeros(3)}
    poses = [spatial.transform(rng.uniform(-0.2, 0.2, 3), spatial.quat_normalize(rng.normal(size=4)))
             for _ in range(2)]
    for k, t in enumerate((t0, t1)):
        if t == ShapeType.HEIGHTFIELD:  # an upright terrain near the origin, the other shape above it
            poses[k] = spatial.transform(rng.uniform(-0.05, 0.05, 3), spatial.quat_from_axis_angle(
                np.array([0.0, 0.0, 1.0]), rng.uniform(-3, 3)))
    materials = [dict(margin=draw(st.sampled_from([0.0, 0.01])), mu=draw(st.sampled_from([None, 0.3, 1.0])),
                      ke=draw(st.sampled_from([None, 1e5, math.inf]))) for _ in range(2)]
    return _two_shapes((t0, t1), [sizes[t0](), sizes[t1]()], poses, materials)


# A capsule (r 0.138, half length 0.164) reaching 1.5 cm into a box off its edge: the segment's
# deepest point is a smooth minimum, which golden section finds only to ~√ε; the two backends' last
# GOLDEN_TIE decisions went apart and the interior contact's points were 2.7e-8 m, its normal 2.2e-7
# apart, until the minimiser is made exact outside the box (sap_ref.collision_box._refined_outside).
# Found by tests/test_gpu_stages_parameters.py's search.
CAPSULE_OFF_BOX_EDGE = (
    [0.1379858777019921, 0.16384680072879543, 0.0], [0.0433861392371131, 0.12170707702329056, 0.10146093311463476],
    [[-0.007954607024559754, -0.0038213129475459726, -0.005515717295071696, 0.3965274757188809,
      -0.6765025352850862, 0.619230642850058, -0.04078837712347784],
     [-0.10471379974198337, -0.059701064942986645, 0.21652478475581707, 0.7348753471157885,
      -0.2130503676264073, -0.6429166028972577, 0.03501437954258385]])


def test_capsule_box_interior_minimum_is_exact_in_both_backends(device):
    size_c, size_b, poses = CAPSULE_OFF_BOX_EDGE
    model, state = _two_shapes((ShapeType.CAPSULE, ShapeType.BOX), [size_c, size_b], [np.array(p) for p in poses])
    expected, got = _both(model, state, 16, device, SapConfig())
    assert expected.count[0] == 2  # the end sphere in the box and the interior minimum
    assert_same_contacts(expected, got)


@settings(max_examples=400)
@given(generic_two_shape_models())
def test_random_pairs_match_sap_ref(device, case):
    model, state = case
    config = SapConfig(fallback_mu=0.7, fallback_stiffness=3e5, contact_tau_d=0.02)
    expected, got = _both(model, state, 16, device, config)
    # sap_ref never generates more than MAX_CONTACTS_PER_PAIR (an ellipsoid or a sphere touches in one point)
    assert expected.count[0] + expected.overflow[0] <= contact_capacity(model)
    assert_same_contacts(expected, got, curved=bool(np.isin(model.shape_type, CURVED).any()))


ROUNDABLE = (ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX, ShapeType.CYLINDER, ShapeType.ELLIPSOID,
             ShapeType.CONVEX_MESH)


@st.composite
def rounded_two_shape_models(draw):
    """:func:`generic_two_shape_models` with a rounding radius on every shape that takes one (planes
    and height fields do not), 0 on some: a rounded shape against every type, two rounded boxes
    (which take GJK/EPA) included."""
    model, state = draw(generic_two_shape_models())
    rounding = [draw(st.sampled_from([0.0, 0.005, 0.03])) if ShapeType(int(t)) in ROUNDABLE else 0.0
                for t in model.shape_type]
    k = next((k for k, t in enumerate(model.shape_type) if ShapeType(int(t)) in ROUNDABLE), None)
    if k is not None and not any(rounding):
        rounding[k] = 0.01
    return model.replace(shape_rounding=rounding), state


@settings(max_examples=200)
@given(rounded_two_shape_models())
def test_rounded_pairs_match_sap_ref(device, case):
    """Rounded shapes: the cores' contacts moved out by the radii, the same in both backends (to the
    tolerances of plain shapes: the move is three operations per contact, in the same order)."""
    model, state = case
    config = SapConfig(fallback_mu=0.7, fallback_stiffness=3e5, contact_tau_d=0.02)
    expected, got = _both(model, state, 16, device, config)
    assert_same_contacts(expected, got, curved=bool(np.isin(model.shape_type, CURVED).any()))


@pytest.mark.parametrize("q1", [(0.124034734, 0.992277875, 0.0, 6.05638351e-05),
                                (0.447213595, 0.894427190, 0.0, 5.45915033e-05)])
def test_crossing_nearly_parallel_capsules_match_sap_ref(device, q1):
    """Capsules whose segments cross 1e-5–1e-4 rad apart take the common perpendicular of their
    axes as the normal in both backends (tests/test_ref_collision.py has the surfaces)."""
    poses = [np.array([0.0, 0.0, 0.3, 0.0, 0.999999998, 0.0, 6.10351561e-05]), np.array([0.0, 0.0, 0.3, *q1])]
    for X in poses:
        X[3:] /= np.linalg.norm(X[3:])
    model, state = _two_shapes((ShapeType.CAPSULE, ShapeType.CAPSULE), [(0.125, 0.25, 0.0), (0.125, 0.1875, 0.0)],
                               poses)
    expected, got = _both(model, state, 16, device)
    n = int(expected.count[0])
    assert n == int(got.count[0]) >= 1
    # The common perpendicular m̂ = û₀ × û₁/|û₀ × û₁| carries rounding over sin δ, and where along
    # the segments it sits, rounding over sin²δ (nearly parallel lines): 8 ε per unit of each.
    u0, u1 = (spatial.quat_rotate(X[3:], [0.0, 0.0, 1.0]) for X in poses)
    sin_delta = np.linalg.norm(np.cross(u0, u1))
    eps = np.finfo(float).eps
    for f, tol in (("normal", 8 * eps / sin_delta), ("x0", 8 * eps / sin_delta**2), ("x1", 8 * eps / sin_delta**2),
                   ("phi0", GEOMETRY_TOL)):
        err = np.abs(getattr(expected, f)[0, :n] - getattr(got, f)[0, :n]).max()
        assert err <= GEOMETRY_TOL + tol, (f, err)


def test_a_box_micrometres_above_a_height_field_matches_sap_ref_to_the_normal_s_conditioning(device):
    """The random search found this pair: a box 4.0 µm above one prism of a terrain. Both backends'
    witness points agree to 1e-16 m, but the normal joins two points 4.0e-6 m apart, so it differs
    by 4.9e-12 rad, above GEOMETRY_TOL and within normal_tol (the points' rounding over their
    distance); the other three contacts, centimetres apart, stay within GEOMETRY_TOL."""
    terrain = np.array([8.4627942883590268e-04, 4.6691095473806399e-02, 9.5810916100114302e-03, 0.0, 0.0,
                        -9.6976513354656957e-01, 2.4404013144850625e-01])
    box = np.array([-0.1563130316873605, 0.0943438691254539, 0.14248453592690685, -0.5519236681778499,
                    -0.5322994987332745, 0.2566623062725316, -0.5883553082043846])
    model, state = _two_shapes((ShapeType.HEIGHTFIELD, ShapeType.BOX),
                               [np.zeros(3), (0.10652118315907434, 0.1478059672983004, 0.2997460617674767)],
                               [terrain, box], [dict(margin=0.0), dict(margin=0.01)])
    expected, got = _both(model, state, 16, device, SapConfig(fallback_mu=0.7, fallback_stiffness=3e5))
    assert_same_contacts(expected, got)
    n = int(expected.count[0])
    d = np.linalg.norm(expected.x1[0, :n] - expected.x0[0, :n], axis=1)
    near = np.argmin(d)
    assert d[near] < 1e-5 and np.all(np.delete(d, near) > 1e-3)
    err = np.abs(expected.normal[0, :n] - got.normal[0, :n]).max(axis=1)
    assert np.all(np.delete(err, near) <= GEOMETRY_TOL)


def test_a_deep_ellipsoid_in_a_height_field_matches_sap_ref(device):
    """The random search found this pair: an ellipsoid deep in the terrain, where the two backends'
    refinements parted by 5 mm on one prism while prisms' edges were kink moves. Prisms now keep
    the smooth refinement alone (sap_ref.collision_convex._kink_axes)."""
    terrain = np.array([-0.03549443196407397, -0.04067812423826307, 0.0037658358969994907, -0.0, -0.0,
                        -0.4497905049780948, 0.8931340893905856])
    pose = np.array([0.13931170911510998, -0.10893877621764757, 0.033725783319414754, -0.20542040188833097,
                     0.36244233592858827, -0.7307116031248639, 0.5408313643580189])
    materials = [dict(margin=0.0, mu=None, ke=None)] * 2
    model, state = _two_shapes((ShapeType.HEIGHTFIELD, ShapeType.ELLIPSOID),
                               [np.zeros(3), [0.10960089345483431, 0.03409025437950722, 0.1935005072186]],
                               [terrain, pose], materials)
    config = SapConfig(fallback_mu=0.7, fallback_stiffness=3e5, contact_tau_d=0.02)
    expected, got = _both(model, state, 16, device, config)
    assert expected.count[0] == 4 and expected.phi0[0, :4].min() < -0.09  # deep, a manifold of prisms
    assert_same_contacts(expected, got, curved=True)


def _q(axis, angle):
    return spatial.quat_from_axis_angle(np.asarray(axis, float), angle)


P_, S_, C_, B_, CY_, E_, M_, H_ = TYPES
IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])
ALONG_X = _q([0, 1, 0], math.pi / 2)  # capsule axis (frame z) along world x
DEGENERATE = {
    "coincident sphere centres": ((S_, S_), ([0.1, 0, 0], [0.2, 0, 0]), ([0, 0, 0], [0, 0, 0])),
    "sphere centre on a capsule segment": ((S_, C_), ([0.1, 0, 0], [0.05, 0.2, 0]), ([0, 0, 0.1], [0, 0, 0])),
    "parallel overlapping capsules": ((C_, C_), ([0.05, 0.2, 0], [0.05, 0.1, 0]), ([0, 0, 0], [0.05, 0.03, 0.08])),
    "collinear capsules end to end": ((C_, C_), ([0.05, 0.2, 0], [0.05, 0.1, 0]), ([0, 0, 0], [0.28, 0, 0])),
    "intersecting capsule axes": ((C_, C_), ([0.05, 0.2, 0], [0.05, 0.1, 0]), ([0, 0, 0], [0, 0, 0])),
    "zero-length capsule on a plane": ((P_, C_), ([0, 0, 0], [0.05, 0.0, 0]), ([0, 0, 0], [0, 0, 0.03])),
    "zero-length capsule in a box": ((C_, B_), ([0.05, 0.0, 0], [0.1, 0.1, 0.1]), ([0, 0, 0.12], [0, 0, 0])),
    "capsule lying flat on a box face": ((C_, B_), ([0.05, 0.1, 0], [0.2, 0.2, 0.1]), ([0, 0, 0.14], [0, 0, 0])),
    "capsule inside a box, parallel to a face": ((C_, B_), ([0.02, 0.1, 0], [0.3, 0.3, 0.1]),
                                                 ([0, 0, 0.05], [0, 0, 0])),
    "sphere centre at a box centre": ((S_, B_), ([0.05, 0, 0], [0.1, 0.1, 0.1]), ([0, 0, 0], [0, 0, 0])),
    "aligned boxes face on face": ((B_, B_), ([0.1, 0.1, 0.1], [0.05, 0.05, 0.05]), ([0, 0, 0], [0.02, 0.01, 0.14])),
    "identical coincident boxes": ((B_, B_), ([0.1, 0.1, 0.1], [0.1, 0.1, 0.1]), ([0, 0, 0], [0, 0, 0])),
    "box resting flat on a plane": ((P_, B_), ([0, 0, 0], [0.1, 0.2, 0.05]), ([0, 0, 0], [0, 0, 0.049])),
    # Multi-point contacts of the new shapes: faces tie exactly, the first candidates win in both.
    "mesh cube resting flat on a plane": ((P_, M_), ([0, 0, 0], [1, 0, 0]), ([0, 0, 0], [0, 0, 0.0599])),
    "mesh cube resting flat on a box": ((B_, M_), ([0.1, 0.1, 0.1], [1, 0, 0]), ([0, 0, 0], [0.02, 0.01, 0.1599])),
    "mesh cubes stacked": ((M_, M_), ([1, 0, 0], [1, 0, 0]), ([0, 0, 0], [0.01, 0.02, 0.1199])),
    "cylinder standing on a plane": ((P_, CY_), ([0, 0, 0], [0.05, 0.1, 0]), ([0, 0, 0], [0, 0, 0.0999])),
    "cylinder standing on a box": ((B_, CY_), ([0.2, 0.2, 0.1], [0.05, 0.1, 0]), ([0, 0, 0], [0.01, 0, 0.1999])),
    "capsule lying on a mesh face": ((C_, M_), ([0.05, 0.03, 0], [1, 0, 0]), ([0, 0, 0.1099], [0, 0, 0])),
    "sphere over a height-field vertex": ((S_, H_), ([0.05, 0, 0], [0, 0, 0]), ([-0.06, 0, 0.055], [0, 0, 0])),
}


@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_degenerate_configurations_match_sap_ref(device, name):
    """Exact ties and coincident features: both backends take the same documented fallback."""
    types, sizes, positions = DEGENERATE[name]
    quats = [ALONG_X if t == C_ else IDENTITY for t in types]
    if name == "intersecting capsule axes":
        quats = [ALONG_X, _q([1, 0, 0], -math.pi / 2)]  # along x and along y, crossing at the origin
    poses = [spatial.transform(np.asarray(p, float), q) for p, q in zip(positions, quats)]
    model, state = _two_shapes(types, [np.asarray(s, float) for s in sizes], poses)
    expected, got = _both(model, state, 16, device)
    assert expected.count[0] > 0, "the configuration is meant to touch"
    assert_same_contacts(expected, got, name, curved=bool(np.isin(model.shape_type, CURVED).any()))


def test_two_runs_and_identical_worlds_are_bit_identical(device):
    scene = scenes.get("box_stack", num_worlds=4)
    state = scene.state.copy()
    state.body_q[:, :, 2] -= np.array([0.0005, 0.0021, 0.0039])  # every interface in contact, no equal depths
    pipe = GpuPipeline(scene.sap_model, contact_capacity(scene.sap_model), device=device)
    runs = []
    for _ in range(2):
        c = pipe.contacts()
        pipe.collide(sap_gpu.to_device(state, device), c)
        runs.append(sap_gpu.to_host(c))
    for f in dataclasses.fields(runs[0]):
        a, b = getattr(runs[0], f.name), getattr(runs[1], f.name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b), f.name
            assert all(np.array_equal(a[0], a[w]) for w in range(1, 4)), f.name
    expected, _ = _both(scene.sap_model, state, contact_capacity(scene.sap_model), device)
    assert_same_contacts(expected, runs[0])
    assert runs[0].count[0] >= 12  # at least 4 per face contact: ground–box and two box–box


def test_overflow_counts_and_never_writes_past_the_capacity(device):
    scene = scenes.get("box_stack")
    state = scene.state.copy()
    state.body_q[:, :, 2] -= np.array([0.0005, 0.0021, 0.0039])
    model = scene.sap_model
    n = int(_both(model, state, contact_capacity(model), device)[0].count[0])
    for capacity in (0, 1, 5):
        expected, got = _both(model, state, capacity, device)
        assert got.x0.shape == (1, capacity, 3) and got.count[0] == capacity and got.overflow[0] == n - capacity
        assert_same_contacts(expected, got, f"capacity {capacity}")


def test_stale_buffers_are_reset_and_non_finite_worlds_report_nothing(device):
    scene = scenes.get("sphere_drop", num_worlds=2)
    state = scene.state.copy()
    state.body_q[:, 0, 2] = 0.09  # 1 cm into the ground
    state.body_q[0, 0, 2] = np.nan
    pipe = GpuPipeline(scene.sap_model, 2, device=device)
    stale = pipe.contacts()
    for f in dataclasses.fields(stale):
        a = getattr(stale, f.name)
        if isinstance(a, wp.array):
            a.fill_(7) if a.dtype in (wp.int32, wp.float64) else None
    pipe.collide(sap_gpu.to_device(state, device), stale)
    host = sap_gpu.to_host(stale)
    assert host.count.tolist() == [0, 1] and host.overflow.tolist() == [0, 0]
    assert np.all(host.shape0[0] == -1) and np.all(host.phi0[0] == 0) and np.all(host.shape0[1, 1:] == -1)
    assert host.phi0[1, 0] == pytest.approx(-0.01, abs=1e-15)


def test_point_contacts_fill_every_field_of_the_record_with_area_zero(device):
    scene = scenes.get("box_stack", num_worlds=2)
    state = scene.state.copy()
    state.body_q[:, :, 2] -= np.array([0.0005, 0.0021, 0.0039])
    state.body_q[1, 2, :3] += [0.03, 0.0, 0.0]  # the worlds differ
    model = scene.sap_model
    pipe = GpuPipeline(model, contact_capacity(model), device=device)
    contacts = sap_gpu.to_device(poison(SapContacts.allocate(2, contact_capacity(model))), device)
    pipe.collide(sap_gpu.to_device(state, device), contacts)
    host = sap_gpu.to_host(contacts)
    assert host.count.min() > 0 and host.count.max() < host.capacity
    assert_point_contacts(model, host, SapConfig())


def test_bad_input_raises_naming_the_field(device):
    model = scenes.get("sphere_drop").sap_model
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match=r"max_rigid_contact: must be an integer >= 0"):
            GpuPipeline(model, bad, device=device)
    with pytest.raises(ValueError, match=r"config: expected a SapConfig"):
        GpuPipeline(model, 2, config={"fallback_mu": 0.5}, device=device)
    with pytest.raises(ValueError, match=r"model: expected a SapModel"):
        GpuPipeline("model", 2, device=device)
    pipe = GpuPipeline(model, 2, device=device)
    state = sap_gpu.state(model, device)
    with pytest.raises(ValueError, match=r"contacts: capacity 3 does not match the solver's max_rigid_contact 2"):
        pipe.collide(state, GpuPipeline(model, 3, device=device).contacts())
    with pytest.raises(ValueError, match=r"state.body_q: expected a wp.array"):
        pipe.collide(model.state(), pipe.contacts())  # host state
    with pytest.raises(ValueError, match=r"state: expected a SapState"):
        pipe.collide(state.body_q, pipe.contacts())


def _many_shapes(num_worlds, seed=3):
    """A scene with one shape of every type on its own free body (and a plane and a height field),
    scattered so that some pairs touch and most do not, in every world differently."""
    b = ModelBuilder()
    b.add_ground_plane()
    b.add_shape_heightfield(HEIGHTS, spatial.transform((2.0, 0.0, 0.0)), hx=0.3, hy=0.25, base=0.1)
    for i in range(2 * scenes.SHAPE_TYPES_CYCLE):
        body = b.add_body(1.0, inertia=(1, 1, 1))
        b.add_joint_free(-1, body)
        scenes.add_shape_of_every_type(b, body, i)
    model = b.replicate(num_worlds).finalize()
    state = model.state()
    rng = np.random.default_rng(seed)
    for w in range(num_worlds):
        for k in range(model.body_count):
            centre = (2.0, 0.0, 0.05) if k % 3 == 0 else (0.0, 0.0, 0.05)
            state.body_q[w, k] = spatial.transform(np.asarray(centre) + rng.uniform(-0.2, 0.2, 3) * [1, 1, 0.3],
                                                   spatial.quat_normalize(rng.normal(size=4)))
    return model, state


def test_broad_phase_gives_the_contacts_of_every_pair_and_matches_sap_ref(device):
    model, state = _many_shapes(3)
    capacity = contact_capacity(model)
    results = {}
    for bp in ("aabb", "none"):
        pipe = GpuPipeline(model, capacity, device=device, broad_phase=bp)
        c = pipe.contacts()
        pipe.collide(sap_gpu.to_device(state, device), c)
        results[bp] = sap_gpu.to_host(c)
    for f in dataclasses.fields(results["aabb"]):
        a = getattr(results["aabb"], f.name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, getattr(results["none"], f.name)), f.name
    ref = RefPipeline(model, capacity)
    expected = ref.contacts()
    ref.collide(state, expected)
    assert_same_contacts(expected, results["aabb"], "many shapes", curved=True)
    assert results["aabb"].count.min() > 0 and len(model.shape_pair) > 50


def test_broad_phase_value_is_checked(device):
    model = scenes.get("sphere_drop").sap_model
    with pytest.raises(ValueError, match=r"broad_phase: expected one of aabb, none, got 'sap'"):
        GpuPipeline(model, 2, device=device, broad_phase="sap")


def test_rounded_shapes_with_per_world_margins_match_sap_ref(device):
    """A rounded box over a plane in 3 worlds whose margins differ (per-world parameters): the pair's
    candidates are bounded by each world's margins plus the radius, its contacts reported while
    φ < that world's margins, the same in both backends (φ = 5 mm at the 4 corners: within the first
    two worlds' margins, 15 and 8 mm, not within the third's, 4 mm)."""
    b = ModelBuilder()
    b.add_ground_plane()
    body = b.add_body(1.0, inertia=(1, 1, 1))
    b.add_joint_free(-1, body)
    b.add_shape_box(body, None, 0.1, 0.2, 0.05, rounding=0.02)
    model = b.finalize().replicate(3)
    state = model.state()
    state.body_q[:, 0, :3] = [0.0, 0.0, 0.05 + 0.02 + 0.005]  # the rounded box's face 5 mm above the plane
    margins = np.array([[0.0, 0.015], [0.0, 0.008], [0.0, 0.004]])
    ref_params, gpu_params = sap_ref.WorldParameters(model), sap_gpu.WorldParameters(model, device=device)
    ref_params.set("shape_margin", margins)
    gpu_params.set("shape_margin", margins)
    ref = RefPipeline(model, 8, parameters=ref_params)
    expected = ref.contacts()
    ref.collide(state, expected)
    gpu = GpuPipeline(model, 8, device=device, parameters=gpu_params)
    got = gpu.contacts()
    gpu.collide(sap_gpu.to_device(state, device), got)
    got = sap_gpu.to_host(got)
    assert expected.count.tolist() == [4, 4, 0]
    np.testing.assert_allclose(expected.phi0[:2, :4], 0.005, atol=1e-15)
    assert_same_contacts(expected, got)
