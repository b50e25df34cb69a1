"""sap_newton's meshes and height fields: Newton's MESH, CONVEX_MESH and HFIELD shapes as this project's
convex meshes and height fields (sap_newton.convert), and the contact slots their pairs get.

A box given as a CONVEX_MESH of its 8 corners or as a MESH of its 12 triangles is the box: its SAP
geometry is the box's corners (Newton's shape scale applied) and it tumbles onto the ground as the BOX
does. A Newton height field is the same surface as Newton's collision sees (its grid, its triangles'
diagonal, its shape scale and pose): spheres placed over it get the depths Newton's collision gives, and
spheres dropped on its plateaus rest at the plateau's height plus their radius. A non-convex MESH
collides as its convex hull, warned once per model naming it.
"""

import warnings

import numpy as np
import pytest

newton = pytest.importorskip("newton")
import warp as wp  # noqa: E402
from scipy.spatial import ConvexHull  # noqa: E402
from test_newton_solver import _rollout as newton_rollout  # noqa: E402

import sap_newton  # noqa: E402
from sap_common.model import ShapeType  # noqa: E402

DT = 2e-3
HALF = (0.1, 0.15, 0.05)  # the box's half extents [m]
# The SAP states are float32 (Newton's): the box's coordinates (≤ 0.5) and velocities (≤ 5) round at
# 6e-8 and 5e-7; two conversions of the same box that collide the same corners agree to that.
FLOAT32_STATE_TOL = 1e-6
# With Newton's contacts, its mesh–plane routine and its box–plane routine write the same corner
# contacts with different float32 arithmetic (measured: 1.05e-5 in the velocities over 300 steps).
NEWTON_MESH_BOX_TOL = 5e-5
# Newton's collision of a sphere with a height field (GJK/MPR on the triangle prisms, float32) and
# this project's (the same triangles, float64) give the same depth to the float32 round-off of the
# world coordinates (≤ 2 m: 2.4e-7; measured: 5.1e-8).
HFIELD_DEPTH_TOL = 1e-6
# A ball settling onto its rest depth approaches it exponentially (time scale τ, the combined
# dissipation time scale: 0.02 s in the test); its float32 height stops changing once a step's h·v
# falls below half an ulp of the height: above the rest by about τ·ulp(z)/(2h), 3.0e-7 m at
# z = 0.55 m (measured, with either collision: 0.6, 1.6 and 2.4e-7 m at 0.15, 0.35 and 0.55 m).
FLOAT32_REST_TOL = 1e-6


def _unit_box_mesh():
    return newton.Mesh.create_box(1.0, 1.0, 1.0, duplicate_vertices=False, compute_normals=False,
                                  compute_uvs=False, compute_inertia=False)


def _box_model(kind, gap=0.005):
    """A 1 kg box (half extents HALF) tilted 0.3 rad, 0.25 m above the ground, moving at 1.5 m/s and
    spinning at 2 rad/s: a BOX, or the unit cube's mesh scaled by HALF as a CONVEX_MESH or a MESH."""
    b = newton.ModelBuilder()
    b.default_shape_cfg.ke, b.default_shape_cfg.kd, b.default_shape_cfg.mu = 1e5, 1e3, 0.5
    b.default_shape_cfg.density = 0.0
    b.rigid_gap = gap
    q = wp.quat_from_axis_angle(wp.normalize(wp.vec3(1.0, 0.3, 0.0)), 0.3)
    body = b.add_body(mass=1.0, xform=wp.transform((0.0, 0.0, 0.25), q),
                      inertia=wp.mat33(np.diag([0.01, 0.008, 0.012])), label="box")
    if kind == "box":
        b.add_shape_box(body, hx=HALF[0], hy=HALF[1], hz=HALF[2], label="box")
    elif kind == "convex":
        b.add_shape_convex_hull(body, mesh=_unit_box_mesh(), scale=HALF, label="box")
    else:
        b.add_shape_mesh(body, mesh=_unit_box_mesh(), scale=HALF, label="box")
    b.add_ground_plane()
    model = b.finalize(device="cpu")
    qd = model.joint_qd.numpy()
    qd[0], qd[4] = 1.5, 2.0
    model.joint_qd.assign(qd)
    return model


def _rollout(model, collision, steps=300, **options):
    """test_newton_solver's rollout with ``collision``, checking every step drops no contact and fails
    nowhere. Returns (joint_q | joint_qd per step, the most contacts of world 0 at once)."""
    most = [0]

    def each(solver):
        diag = solver.diagnostics()
        assert not diag["truncated_contact_count"].any() and not diag["failed"].any()
        most[0] = max(most[0], int(diag["contact_count"][0]))

    solver = sap_newton.SolverSAP(model, collision=collision, **options)
    traj, _ = newton_rollout(model, solver, steps, newton_contacts=collision == "newton", each=each)
    return traj, most[0]


@pytest.mark.parametrize("kind", ("convex", "mesh"))
def test_a_box_given_as_a_mesh_is_the_box(kind):
    """The unit cube's 8 corners (CONVEX_MESH) or 12 triangles (MESH) scaled by HALF convert to a SAP
    convex mesh whose points are the box's corners, with no warning (the MESH is convex)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = sap_newton.to_sap_model(_box_model(kind))
    s = int(np.flatnonzero(np.asarray(m.shape_name) == "box")[0])
    assert ShapeType(int(m.shape_type[s])) == ShapeType.CONVEX_MESH
    lo, hi = m.mesh_vertex_start[m.shape_source[s]], m.mesh_vertex_start[m.shape_source[s] + 1]
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * np.float32(HALF)
    got = m.mesh_vertex[lo:hi]
    assert len(got) == 8 and np.array_equal(np.unique(got, axis=0), np.unique(corners, axis=0))
    assert np.array_equal(m.shape_transform, sap_newton.to_sap_model(_box_model("box")).shape_transform)


@pytest.mark.parametrize("kind", ("convex", "mesh"))
def test_a_mesh_box_tumbles_onto_the_ground_as_the_box_does(kind):
    """With this project's collision the mesh box's trajectory is the BOX's to float32 round-off (the
    same corners touch: 4 at rest, 0.6 s of a tilted, spinning drop and slide), and it rests at the
    compliant depth of four corners."""
    box, _ = _rollout(_box_model("box"), "sap")
    mesh, _ = _rollout(_box_model(kind), "sap")
    assert np.max(np.abs(mesh - box)) < FLOAT32_STATE_TOL
    k = 1e5 * 1e5 / 2e5  # box and ground in series
    assert HALF[2] - mesh[-1, 2] == pytest.approx(9.81 / (4 * k), rel=0.02)


def test_a_mesh_box_on_newton_s_contacts_follows_the_box_and_drops_none():
    """With Newton's contacts (its mesh path for a MESH, its GJK manifold for a CONVEX_MESH, its box
    routine for a BOX) nothing is dropped: the MESH's pairs get Newton's per-pair bound of its contact
    reduction (NEWTON_MESH_PAIR_CONTACTS), and the MESH box follows the BOX."""
    box, _ = _rollout(_box_model("box", gap=0.1), "newton")
    mesh, most = _rollout(_box_model("mesh", gap=0.1), "newton")
    assert np.max(np.abs(mesh - box)) < NEWTON_MESH_BOX_TOL
    assert most >= 4
    convex, _ = _rollout(_box_model("convex", gap=0.1), "newton")
    # Newton's manifold differs from its box routine on impact; at rest both stand on the four corners.
    assert convex[-1, 2] == pytest.approx(box[-1, 2], abs=FLOAT32_STATE_TOL)
    solver = sap_newton.SolverSAP(_box_model("mesh"))
    # Box–ground pair of a Newton MESH: Newton's bound; SAP's own narrow phase keeps at most 4.
    assert solver.solvers[0].config.max_rigid_contact == sap_newton.solver.NEWTON_MESH_PAIR_CONTACTS
    assert sap_newton.SolverSAP(_box_model("convex")).solvers[0].config.max_rigid_contact == 8


def test_newton_s_contact_bounds_are_the_ones_its_collision_uses():
    """The constants read from Newton 1.8's source: its contact reduction's per-pair limit and its
    height-field prisms' depth."""
    from newton._src.geometry import contact_reduction, support_function

    assert sap_newton.solver.NEWTON_MESH_PAIR_CONTACTS == contact_reduction.MAX_CONTACTS_PER_PAIR
    assert sap_newton.convert.NEWTON_HFIELD_EXTRUSION == support_function.TRIANGLE_PRISM_EXTRUSION


def _bowl():
    """An open bowl: a square rim at z = 0.1 and a floor at z = 0, 10 triangles, no lid."""
    v = np.array([[-1, -1, 0.1], [1, -1, 0.1], [1, 1, 0.1], [-1, 1, 0.1],
                  [-0.5, -0.5, 0], [0.5, -0.5, 0], [0.5, 0.5, 0], [-0.5, 0.5, 0]], np.float32)
    f = [(4, 6, 5), (4, 7, 6)]
    for a in range(4):
        b = (a + 1) % 4
        f += [(a, b, 4 + b), (a, 4 + b, 4 + a)]
    return newton.Mesh(v, np.array(f, np.int32).ravel(), compute_inertia=False)


def _dented_cube():
    """The cube [−1, 1]³ with its top face pushed in: 4 triangles down to an apex at the centre, 12
    triangles in all, closed, not convex."""
    v = np.array([[x, y, z] for z in (-1, 1) for y in (-1, 1) for x in (-1, 1)] + [[0, 0, 0]], np.float32)
    f = [(0, 2, 1), (1, 2, 3), (0, 1, 4), (1, 5, 4), (1, 3, 5), (3, 7, 5), (3, 2, 7), (2, 6, 7), (2, 0, 6),
         (0, 4, 6)]  # bottom and sides (outward)
    f += [(4, 5, 8), (5, 7, 8), (7, 6, 8), (6, 4, 8)]  # the dent
    return newton.Mesh(v, np.array(f, np.int32).ravel(), compute_inertia=False)


@pytest.mark.parametrize("make", (_bowl, _dented_cube), ids=("open bowl", "dented cube"))
def test_a_non_convex_mesh_warns_once_and_collides_as_its_hull(make):
    """A non-convex mesh in each of two worlds (an open bowl, whose triangles all lie on its hull but
    leave its lid open; a closed cube with a dent): one UserWarning naming it, and the SAP mesh is its
    hull (the bowl filled up to its rim, the dent filled)."""
    w = newton.ModelBuilder()
    w.default_shape_cfg.density = 0.0
    body = w.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    w.add_shape_mesh(body, mesh=make(), scale=(0.2, 0.2, 0.5), label="bowl")
    b = newton.ModelBuilder()
    b.replicate(w, 2)
    b.add_ground_plane()
    model = b.finalize(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv = sap_newton.convert_model(model)
    hull_warnings = [str(x.message) for x in caught if "convex hull" in str(x.message)]
    assert len(hull_warnings) == 1 and "'bowl'" in hull_warnings[0] and issubclass(caught[0].category, UserWarning)
    m = conv.sap_model
    s = int(np.flatnonzero(np.asarray(m.shape_name) == "bowl")[0])
    lo, hi = m.mesh_vertex_start[m.shape_source[s]], m.mesh_vertex_start[m.shape_source[s] + 1]
    points = make().vertices.astype(np.float64) * np.float32([0.2, 0.2, 0.5])
    hull = ConvexHull(points)
    assert np.array_equal(np.unique(m.mesh_vertex[lo:hi], axis=0), np.unique(points[hull.vertices], axis=0))
    assert ConvexHull(m.mesh_vertex[lo:hi]).volume == pytest.approx(hull.volume)


@pytest.mark.parametrize("make, match", [
    (lambda b, body: b.add_shape_mesh(-1, mesh=newton.Mesh(np.float32([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]]),
                                                           np.int32([0, 1, 2, 0, 2, 3])), label="tile"),
     "'tile'.*span no volume"),
    (lambda b, body: b.add_shape(body=-1, type=newton.GeoType.HFIELD, label="soft",
                                 src=newton.Heightfield(np.eye(3), 3, 3),
                                 cfg=newton.ModelBuilder.ShapeConfig(margin=0.01)), "'soft'.*rounded terrain"),
    (lambda b, body: b.add_shape(body=body, type=newton.GeoType.HFIELD, label="tray",
                                 src=newton.Heightfield(np.eye(3), 3, 3)), "'tray'.*HFIELD on body 0"),
])
def test_meshes_and_height_fields_sap_cannot_represent_are_refused_by_name(make, match):
    b = newton.ModelBuilder()
    body = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_shape_sphere(body, radius=0.1)
    make(b, body)
    with pytest.raises(ValueError, match=match):
        sap_newton.convert_model(b.finalize(device="cpu"))


def test_a_mesh_s_margin_is_its_rounding_radius():
    """Newton's surface margin on a MESH or CONVEX_MESH offsets its surface outward: SAP's rounding
    radius of the converted convex mesh, whose points stay the hull's (the old conversion refused it)."""
    b = newton.ModelBuilder()
    body = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_shape_mesh(body, mesh=_unit_box_mesh(), label="soft", cfg=newton.ModelBuilder.ShapeConfig(margin=0.01))
    b.add_shape_convex_hull(body, mesh=_unit_box_mesh(), label="hard")
    m = sap_newton.to_sap_model(b.finalize(device="cpu"))
    assert [ShapeType(int(t)) for t in m.shape_type] == [ShapeType.CONVEX_MESH, ShapeType.CONVEX_MESH]
    assert m.shape_rounding.tolist() == pytest.approx([0.01, 0.0])
    for s in range(2):
        lo, hi = m.mesh_vertex_start[m.shape_source[s]], m.mesh_vertex_start[m.shape_source[s] + 1]
        assert np.abs(m.mesh_vertex[lo:hi]).max() == 1.0  # the box mesh's hull (half extent 1), not grown


# A 7 × 9 height field with random heights, a non-unit shape scale and a tilted, turned, moved pose.
HF_ROWS, HF_COLS, HF_HX, HF_HY, HF_SCALE = 7, 9, 0.8, 0.6, (1.5, 0.8, 2.0)
HF_XFORM = wp.transform((0.3, -0.2, 0.1), wp.quat_from_axis_angle(wp.normalize(wp.vec3(0.3, 0.1, 1.0)), 0.4))


def _terrain_model(xy, radius=0.03, depth=0.002, min_z=0.0, max_z=0.1):
    """The height field (``HF_*``) and a free sphere over each shape-frame point ``xy`` (n, 2), its
    centre ``radius − depth`` above the surface there (the grid's triangles as Newton describes them:
    cell (r, c) split along its diagonal from (r, c) to (r + 1, c + 1))."""
    rng = np.random.default_rng(7)
    data = rng.uniform(0.0, 1.0, (HF_ROWS, HF_COLS))
    hf = newton.Heightfield(data, HF_ROWS, HF_COLS, hx=HF_HX, hy=HF_HY, min_z=min_z, max_z=max_z)
    b = newton.ModelBuilder()
    b.default_shape_cfg.density = 0.0
    b.rigid_gap = 0.02
    b.add_shape_heightfield(xform=HF_XFORM, heightfield=hf, scale=HF_SCALE, label="terrain")
    hx, hy, z = HF_HX * HF_SCALE[0], HF_HY * HF_SCALE[1], (min_z + hf.data * (max_z - min_z)) * HF_SCALE[2]
    for k, (x, y) in enumerate(xy):
        c, r = (x + hx) / (2 * hx) * (HF_COLS - 1), (y + hy) / (2 * hy) * (HF_ROWS - 1)
        c0, r0 = int(c), int(r)
        fx, fy = c - c0, r - r0
        h00, h11 = z[r0, c0], z[r0 + 1, c0 + 1]
        h = (h00 + fx * (z[r0, c0 + 1] - h00) + fy * (h11 - z[r0, c0 + 1]) if fx >= fy
             else h00 + fy * (z[r0 + 1, c0] - h00) + fx * (h11 - z[r0 + 1, c0]))
        p = wp.transform_point(HF_XFORM, wp.vec3(x, y, h + radius - depth))
        body = b.add_body(mass=1.0, xform=wp.transform(p, wp.quat_identity()), inertia=wp.mat33(np.eye(3) * 1e-3),
                          label=f"ball{k}")
        b.add_shape_sphere(body, radius=radius)
    return b.finalize(device="cpu")


def _deepest(solver, model):
    """Per sphere, the smallest φ₀ of its contacts in the SAP contacts of the last step."""
    c = solver.sap_contacts[0]
    n = int(c.count.numpy()[0])
    body0, body1, phi = c.body0.numpy()[0, :n], c.body1.numpy()[0, :n], c.phi0.numpy()[0, :n]
    out = np.full(model.body_count, np.inf)
    for b0, b1, p in zip(body0, body1, phi):
        b = max(int(b0), int(b1))
        out[b] = min(out[b], float(p))
    return out


def test_a_height_field_is_the_surface_newton_collides_with():
    """Balls over 40 random points of a scaled, posed height field (0.2 m of relief over cells of
    0.3 × 0.16 m): the depths this project's collision finds on the converted height field are those
    Newton's collision writes (GJK/MPR on its triangle prisms), so the grid, its extent, the shape scale,
    the pose and the triangles' diagonal are Newton's.

    (On steeper relief the two differ by design where a ball reaches under a neighbouring triangle's
    plane across a crease: this project's height field resolves that prism along the triangle's normal,
    Newton's GJK/MPR through the prism's vertical wall; measured 1.5e-2 m apart for 5 cm balls on 0.4 m
    of relief, docs/newton.md.)"""
    rng = np.random.default_rng(3)
    hx, hy = HF_HX * HF_SCALE[0], HF_HY * HF_SCALE[1]
    xy = rng.uniform((-0.9 * hx, -0.9 * hy), (0.9 * hx, 0.9 * hy), (40, 2))
    model = _terrain_model(xy)
    depths = {}
    for collision in ("newton", "sap"):
        solver = sap_newton.SolverSAP(model, collision=collision)
        pipeline = newton.CollisionPipeline(model) if collision == "newton" else None
        contacts = pipeline.contacts() if pipeline else None
        state = model.state()
        if pipeline:
            pipeline.collide(state, contacts)
        solver.step(state, model.state(), None, contacts, DT)
        assert not solver.diagnostics()["truncated_contact_count"].any()
        depths[collision] = _deepest(solver, model)
    assert np.all(np.isfinite(depths["sap"])) and np.all(np.isfinite(depths["newton"]))
    assert np.max(np.abs(depths["sap"] - depths["newton"])) < HFIELD_DEPTH_TOL
    # Each ball is 2 mm into the surface straight below its centre, so at least that deep.
    assert np.all(depths["sap"] <= -0.002 + HFIELD_DEPTH_TOL)


def test_the_converted_height_field_has_newton_s_heights_at_its_grid_points():
    """The SAP height field's grid points, in world coordinates, are Newton's: x, y over ±hx, ±hy of the
    shape frame times the scale, z = min_z + e·(max_z − min_z) times the scale, columns along x."""
    model = _terrain_model(np.zeros((1, 2)))  # one ball: SAP needs a DOF
    m = sap_newton.to_sap_model(model)
    s = int(np.flatnonzero(m.shape_type == int(ShapeType.HEIGHTFIELD))[0])
    from sap_common.geometry import hfield_grid, hfield_point
    from sap_common.spatial import transform_point

    heights = hfield_grid(m, s)
    assert heights.shape == (HF_ROWS, HF_COLS)
    hf = model.shape_source[int(np.flatnonzero(model.shape_type.numpy() == int(newton.GeoType.HFIELD))[0])]
    for r in range(HF_ROWS):
        for c in range(HF_COLS):
            ours = transform_point(m.shape_transform[s], hfield_point(heights, m.shape_size[s, 0], m.shape_size[s, 1],
                                                                      r, c))
            local = wp.vec3(-HF_HX * HF_SCALE[0] + 2 * HF_HX * HF_SCALE[0] * c / (HF_COLS - 1),
                            -HF_HY * HF_SCALE[1] + 2 * HF_HY * HF_SCALE[1] * r / (HF_ROWS - 1),
                            (hf.min_z + float(hf.data[r, c]) * (hf.max_z - hf.min_z)) * HF_SCALE[2])
            assert ours == pytest.approx(np.array(wp.transform_point(HF_XFORM, local)), abs=1e-6)


def test_balls_rest_on_a_height_field_s_plateaus_as_on_a_plane_at_the_plateau_s_height():
    """Three plateaus (0.1, 0.3 and 0.5 m) of one height field and the ground plane beside it, a ball of
    radius 0.05 m dropped from 1 cm on each: after 0.8 s each ball on a plateau rests at the plateau's
    height plus the height the same ball rests at on the plane (the radius less its compliant depth),
    with this project's collision and with Newton's, and nothing rolls. τ_d is 0.01 s per shape, so
    that they settle within the run: with the default 0.1 s they approach their rest over seconds."""
    data = np.repeat([0.1, 0.3, 0.5], 3)[None, :].repeat(9, axis=0)  # columns (x) 0-2, 3-5, 6-8
    hf = newton.Heightfield(data, 9, 9, hx=1.2, hy=1.2)  # cells of 0.3 m: plateaus 0.6 m wide
    b = newton.ModelBuilder()
    b.add_shape_heightfield(heightfield=hf, label="steps")
    b.add_ground_plane()
    xs, levels = (-0.85, 0.05, 0.95, 3.0), (0.1, 0.3, 0.5, 0.0)  # inside a triangle of each plateau; the plane
    for x, level in zip(xs, levels):
        body = b.add_body(mass=1.0, xform=wp.transform((x, 0.1, level + 0.06), wp.quat_identity()),
                          inertia=wp.mat33(np.eye(3) * 1e-3))
        b.add_shape_sphere(body, radius=0.05, cfg=newton.ModelBuilder.ShapeConfig(density=0.0))
    model = b.finalize(device="cpu")
    for collision in ("newton", "sap"):
        traj, _ = _rollout(model, collision, steps=400, contact_tau_d=0.01)
        z = traj[-1, [2, 9, 16, 23]] - np.array(levels)
        assert 0.049 < z[3] < 0.05  # on the plane: the radius less the depth
        assert np.max(np.abs(z[:3] - z[3])) < FLOAT32_REST_TOL
        if collision == "sap":  # flat: nothing rolls (Newton's float32 prism normals tilt by ~1e-7: 2e-5 m in 3 s)
            assert np.max(np.abs(traj[-1, [0, 7, 14, 21]] - xs)) < FLOAT32_STATE_TOL
