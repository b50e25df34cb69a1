"""Record a scene specification with Drake (pydrake 1.51.1): MultibodyPlant, SAP, point contact.

The plant's discrete contact approximation is the specification's
``plant.discrete_contact_approximation`` (``kSap``, ``kLagged`` or ``kSimilar``; a specification
without one is recorded with ``kSap``, the approximation of the first recordings), its stiction
tolerance ``plant.stiction_tolerance`` (default 1e-4 m/s, the plant's), and a geometry's
``hunt_crossley_dissipation`` is set when the specification gives it (else SceneGraph's 50 s/m).

``record(spec)`` builds the plant from a scene specification (sap_tools/record/spec.py), runs
Drake's simulator step by step, and returns ``(document, arrays)``: the JSON document and the
NPZ arrays of the format in ``tests/data/drake/README.md``. Everything in the document that
describes the model is read back from the finalized plant and from SceneGraph's *context*
inspector (where SceneGraph's default proximity properties are filled in), not copied from the
specification. pydrake is imported lazily: the rest of the project runs without it.

One Drake step, as recorded (README, "What one Drake step does"): kinematics and contact
geometry at q₀, v₁ from SAP, q₁ = q₀ + h N(q₀) v₁. With sampled output ports, the contact
results, generalized contact forces and net actuation read after step n describe the step
n−1 → n, so they fill row n.
"""

from __future__ import annotations

import time

import numpy as np

from sap_tools.record.scene_file import is_identity_pose, spec_num_steps
from sap_tools.record.spec import NO_DRAKE_COUNTERPART, check_spec

__all__ = ["PYDRAKE_VERSION", "pydrake_available", "record", "TIMING_RUNS", "spec_approximation",
           "spec_stiction_tolerance", "DRAKE_APPROXIMATIONS"]

PYDRAKE_VERSION = "1.51.1"
TIMING_RUNS = 7  # Simulator.AdvanceTo(T) runs whose median gives Drake's time per step
# Drake's DiscreteContactApproximation names and MultibodyPlantConfig's strings for them.
DRAKE_APPROXIMATIONS = {"kSap": "sap", "kLagged": "lagged", "kSimilar": "similar"}
DEFAULT_STICTION_TOLERANCE = 1e-4  # [m/s] MultibodyPlantConfig::stiction_tolerance


def spec_approximation(spec: dict) -> str:
    """The specification's approximation as MultibodyPlantConfig's string (``sap``, ``lagged``,
    ``similar``): ``plant.discrete_contact_approximation``, ``sap`` when absent."""
    value = spec.get("plant", {}).get("discrete_contact_approximation", "kSap")
    names = {**DRAKE_APPROXIMATIONS, **{v: v for v in DRAKE_APPROXIMATIONS.values()}}
    if value not in names:
        raise ValueError(f"scene {spec.get('scene', 'scene')!r}: plant.discrete_contact_approximation: {value!r} is "
                         f"not valid; valid: {', '.join(DRAKE_APPROXIMATIONS)}")
    return names[value]


def spec_stiction_tolerance(spec: dict) -> float:
    """``plant.stiction_tolerance`` [m/s] of the specification (the plant's 1e-4 when absent)."""
    value = float(spec.get("plant", {}).get("stiction_tolerance", DEFAULT_STICTION_TOLERANCE))
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(f"scene {spec.get('scene', 'scene')!r}: plant.stiction_tolerance: must be finite and > 0 "
                         f"m/s, got {value}")
    return value


def pydrake_available() -> tuple[bool, str]:
    """``(True, "")`` when pydrake 1.51.1 is importable, else ``(False, reason)``."""
    try:
        import pydrake
    except ImportError:
        return False, "pydrake is not installed (the [drake] extra: pip install -e '.[drake]', i.e. drake==1.51.1)"
    version = getattr(pydrake, "__version__", None)
    if version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version
        try:
            version = dist_version("drake")
        except PackageNotFoundError:
            version = "unknown"
    if version != PYDRAKE_VERSION:
        return False, f"pydrake {version} is installed; the recordings are made with {PYDRAKE_VERSION}"
    return True, ""


def _require_pydrake():
    ok, why = pydrake_available()
    if not ok:
        raise ValueError(f"--engine drake: {why}")


# ----------------------------------------------------------------------------- building the plant


def obj_text(vertices, faces) -> str:
    """A Wavefront OBJ of a polygon mesh (faces: 0-based vertex indices, counter-clockwise seen
    from outside; OBJ counts from 1), with every coordinate written exactly (repr)."""
    lines = [f"v {float(x)!r} {float(y)!r} {float(z)!r}" for x, y, z in vertices]
    lines += ["f " + " ".join(str(int(k) + 1) for k in f) for f in faces]
    return "\n".join(lines) + "\n"


def drake_shape(shape: dict, name: str):
    """Drake's ``Cylinder(radius, length)`` or ``Convex`` (an in-memory OBJ of the shape's vertices
    and faces; Drake collides with its convex hull) of a ``cylinder`` / ``convex`` shape entry."""
    from pydrake.common import MemoryFile
    from pydrake.geometry import Convex, Cylinder, InMemoryMesh

    if shape["type"] == "cylinder":
        return Cylinder(float(shape["radius"]), float(shape["length"]))
    if "faces" not in shape:
        raise ValueError(f"geometry {name!r}: a convex shape needs 'faces' (vertex index lists) for Drake's mesh")
    text = obj_text(shape["vertices"], shape["faces"])
    return Convex(InMemoryMesh(mesh_file=MemoryFile(text, ".obj", name)))


class DrakeScene:
    """A built Drake diagram and the maps back to the specification.

    Attributes:
        spec: the scene specification.
        diagram, plant, scene_graph: the Drake systems.
        geometry_ids: GeometryId of every ``spec["geometries"]`` entry, in order.
        auto_floating: names of the bodies Drake gave a floating joint.
        u_ff: feed-forward actuation [N or N·m], (nu,).  xd: desired state ``[qd, vd]``, (2 nu,).
        approximation: ``sap``, ``lagged`` or ``similar``.  stiction_tolerance: v_s [m/s].
    """

    def __init__(self, spec: dict):
        _require_pydrake()
        from pydrake.geometry import (
            AddContactMaterial,
            CollisionFilterDeclaration,
            GeometrySet,
            HalfSpace,
            ProximityProperties,
            Sphere,
        )
        from pydrake.math import RigidTransform
        from pydrake.multibody.plant import AddMultibodyPlant, CoulombFriction, MultibodyPlantConfig
        from pydrake.multibody.tree import (
            BallRpyJoint,
            FixedOffsetFrame,
            PdControllerGains,
            PrismaticJoint,
            RevoluteJoint,
            WeldJoint,
        )
        from pydrake.systems.framework import DiagramBuilder

        check_spec(spec)
        self.spec = spec
        self.approximation, self.stiction_tolerance = spec_approximation(spec), spec_stiction_tolerance(spec)
        name = spec.get("scene", "scene")
        h = float(spec["plant"]["time_step"])
        builder = DiagramBuilder()
        config = MultibodyPlantConfig(time_step=h, discrete_contact_approximation=self.approximation,
                                      contact_model="point", sap_near_rigid_threshold=1.0,
                                      use_sampled_output_ports=True, adjacent_bodies_collision_filters=True,
                                      penetration_allowance=1e-3, stiction_tolerance=self.stiction_tolerance)
        plant, scene_graph = AddMultibodyPlant(config, builder)
        plant.mutable_gravity_field().set_gravity_vector(np.asarray(spec["plant"].get("gravity_W", [0, 0, -9.81]),
                                                                    float))
        X = lambda d: RigidTransform(_quaternion(d["quat_xyzw"]), np.asarray(d["p"], float))  # noqa: E731

        bodies = {"world": plant.world_body()}
        for b in sorted(spec["bodies"], key=lambda b: int(b["index"])):
            if int(b["index"]) == 0:
                continue
            M = spatial_inertia(b)
            body = plant.AddRigidBody(b["name"], M)
            if int(body.index()) != int(b["index"]):
                raise ValueError(f"scene {name!r}: body {b['name']!r}: index {b['index']} is not Drake's "
                                 f"{int(body.index())} (list bodies in index order, world = 0)")
            bodies[b["name"]] = body

        def frame(body_name, fd, key):
            body = bodies[body_name]
            pose = fd[key]
            if fd["name"] == body_name and is_identity_pose(pose):  # the rule read_scene_file checks
                return body.body_frame()
            return plant.AddFrame(FixedOffsetFrame(fd["name"], body.body_frame(), X(pose)))

        self.auto_floating = []
        joints = {}
        for jd in spec["joints"]:
            jtype = jd["type"]
            if jtype == "quaternion_floating":  # added by Finalize() for every body without a joint
                self.auto_floating.append(jd["child_body"])
                continue
            F = frame(jd["parent_body"], jd["frame_on_parent_F"], "X_PF")
            M = frame(jd["child_body"], jd["frame_on_child_M"], "X_CM")
            damping = [float(x) for x in jd.get("damping", [0.0])]
            lo = [float(x) for x in jd.get("position_lower_limits", ["-inf"])]
            hi = [float(x) for x in jd.get("position_upper_limits", ["inf"])]
            if jtype == "revolute":
                joint = RevoluteJoint(jd["name"], F, M, np.asarray(jd["axis"], float), lo[0], hi[0], damping[0])
            elif jtype == "prismatic":
                joint = PrismaticJoint(jd["name"], F, M, np.asarray(jd["axis"], float), lo[0], hi[0], damping[0])
            elif jtype == "ball_rpy":
                joint = BallRpyJoint(jd["name"], F, M, damping[0])
            else:
                joint = WeldJoint(jd["name"], F, M, RigidTransform())
            joints[jd["name"]] = plant.AddJoint(joint)

        actuation = spec.get("actuation", {}) or {}
        for a in actuation.get("actuators", []):
            act = plant.AddJointActuator(a["name"], joints[a["joint"]], float(a.get("effort_limit", "inf")))
            act.set_default_rotor_inertia(float(a.get("rotor_inertia", 0.0)))
            act.set_default_gear_ratio(float(a.get("gear_ratio", 1.0)))
            if a.get("pd_controlled", False):
                act.set_controller_gains(PdControllerGains(p=float(a["pd_gains"]["p"]), d=float(a["pd_gains"]["d"])))

        # Registration order: the geometries of the bodies first (by body index), then the world's
        # (anchored) ones, each in list order; the list itself runs by body index, world first.
        # GeometryIds follow the registration order and Drake orders a contact pair (A, B) by id,
        # so a body's geometry is A and the ground is B.
        geometries = spec.get("geometries", [])
        order = sorted(range(len(geometries)), key=lambda i: (geometries[i]["body"] == "world",
                                                              int(geometries[i].get("body_index", 0)), i))
        self.geometry_ids = [None] * len(geometries)
        for i in order:
            g = geometries[i]
            shape = g["shape"]
            if shape["type"] == "sphere":
                geometry = Sphere(float(shape["radius"]))
            elif shape["type"] in ("cylinder", "convex"):
                geometry = drake_shape(shape, g["name"])
            else:
                geometry = HalfSpace()
            props = ProximityProperties()
            source = g.get("property_source", {})
            explicit = lambda key, prop: (source.get(prop, "explicit") == "explicit" and key in g)  # noqa: E731
            k = float(g["point_contact_stiffness"]) if explicit("point_contact_stiffness", "point_contact_stiffness") \
                else None
            friction = None
            if explicit("dynamic_friction", "coulomb_friction"):
                mu_d = float(g["dynamic_friction"])
                friction = CoulombFriction(float(g.get("static_friction", mu_d)), mu_d)
            d = float(g["hunt_crossley_dissipation"]) if explicit("hunt_crossley_dissipation",
                                                                   "hunt_crossley_dissipation") else None
            if k is not None or friction is not None or d is not None:
                AddContactMaterial(dissipation=d, point_stiffness=k, friction=friction, properties=props)
            if explicit("relaxation_time", "relaxation_time"):
                props.AddProperty("material", "relaxation_time", float(g["relaxation_time"]))
            body = bodies[g["body"]]
            X_BG = RigidTransform(canonical_rotation(g["X_BG"]["quat_xyzw"]), np.asarray(g["X_BG"]["p"], float))
            self.geometry_ids[i] = plant.RegisterCollisionGeometry(body, X_BG, geometry, g["name"], props)

        self.constraint_ids = _add_constraints(plant, spec, bodies, joints, X)
        plant.Finalize()
        wanted = {tuple(sorted(map(int, c["geometries"]))) for c in spec.get("collision_candidate_pairs", [])}
        if "collision_candidate_pairs" in spec:  # exclude every pair Drake would test that the scene does not
            index = {gid: i for i, gid in enumerate(self.geometry_ids)}
            drake_pairs = {tuple(sorted((index[a], index[b])))
                           for a, b in scene_graph.model_inspector().GetCollisionCandidates()}
            missing = sorted(wanted - drake_pairs)
            if missing:
                names = [(spec["geometries"][a]["name"], spec["geometries"][b]["name"]) for a, b in missing]
                raise ValueError(f"scene {name!r}: Drake never tests the geometry pairs {names} (same body or "
                                 "bodies joined by a joint), which the scene lists as collision candidates")
            for a, b in sorted(drake_pairs - wanted):
                scene_graph.collision_filter_manager().Apply(CollisionFilterDeclaration().ExcludeBetween(
                    GeometrySet(self.geometry_ids[a]), GeometrySet(self.geometry_ids[b])))
        self.diagram = builder.Build()
        self.plant, self.scene_graph = plant, scene_graph
        self.u_ff = np.asarray(actuation.get("feedforward_actuation_u_ff", [0.0] * plant.num_actuators()), float)
        xd = actuation.get("desired_state_input", {}).get("xd")
        self.xd = None if xd is None else np.asarray(xd, float)

    def initial_context(self):
        """A fresh diagram context at the specification's initial state, inputs fixed."""
        plant = self.plant
        context = self.diagram.CreateDefaultContext()
        pc = plant.GetMyMutableContextFromRoot(context)
        q0, v0 = plant.GetPositions(pc).copy(), plant.GetVelocities(pc).copy()
        for jd in self.spec["joints"]:
            joint = plant.GetJointByName(jd["name"])
            if "initial_q" in jd:
                q0[joint.position_start():joint.position_start() + joint.num_positions()] = jd["initial_q"]
            if "initial_v" in jd:
                v0[joint.velocity_start():joint.velocity_start() + joint.num_velocities()] = jd["initial_v"]
        plant.SetPositions(pc, q0)
        plant.SetVelocities(pc, v0)
        if plant.num_actuators():
            plant.get_actuation_input_port().FixValue(pc, self.u_ff)
            if any(plant.get_joint_actuator(i).has_controller() for i in plant.GetJointActuatorIndices()):
                plant.get_desired_state_input_port(plant.GetModelInstanceByName("DefaultModelInstance")).FixValue(
                    pc, self.xd)
        return context


def _add_constraints(plant, spec: dict, bodies: dict, joints: dict, X) -> list:
    """The specification's ``constraints`` as Drake's holonomic constraints (SAP only), in list
    order: ``AddCouplerConstraint``, ``AddDistanceConstraint``, ``AddBallConstraint``,
    ``AddWeldConstraint`` (docs/formulation.md § Holonomic constraints). Returns their ids."""
    name = spec.get("scene", "scene")
    ids = []
    for i, c in enumerate(spec.get("constraints", [])):
        kind = c.get("type")
        where = f"scene {name!r}: constraints[{i}]"
        if kind == "coupler":
            ids.append(plant.AddCouplerConstraint(joints[c["joint0"]], joints[c["joint1"]], float(c["gear_ratio"]),
                                                  float(c.get("offset", 0.0))))
            continue
        if kind not in ("distance", "ball", "weld"):
            raise ValueError(f"{where}.type: {kind!r} is not valid; valid: coupler, distance, ball, weld")
        A, B = bodies[c["body_A"]], bodies[c["body_B"]]
        if "world" in (c["body_A"], c["body_B"]):
            raise ValueError(f"{where}: {NO_DRAKE_COUNTERPART['constraint on the world body']}")
        if kind == "weld":
            ids.append(plant.AddWeldConstraint(A, X(c["X_AP"]), B, X(c["X_BQ"])))
            continue
        p_AP, p_BQ = np.asarray(c["p_AP"], float), np.asarray(c["p_BQ"], float)
        if kind == "ball":
            ids.append(plant.AddBallConstraint(A, p_AP, B, p_BQ))
        else:
            ids.append(plant.AddDistanceConstraint(A, p_AP, B, p_BQ, float(c["distance"]),
                                                   float(c.get("stiffness", "inf")), float(c.get("damping", 0.0))))
    return ids


def spatial_inertia(b: dict):
    """Drake's SpatialInertia of a specification body.

    A recorded file holds the inertia *read back* from the plant, about the COM and about Bo. The
    body is rebuilt so that reading it back gives both recorded matrices bit for bit: from the
    central inertia (how a scene is written) when that reproduces them, else from the inertia
    about Bo divided by the mass (Drake stores the unit inertia about Bo). Two unit inertias that
    differ in the last bit can read back alike (m·G rounds), so the central construction is tried
    first: it is the one a scene author's numbers went through.
    """
    from pydrake.multibody.tree import RotationalInertia, SpatialInertia, UnitInertia

    m, com = float(b["mass"]), np.asarray(b["com_B"], float)
    I = np.asarray(b["inertia_about_com_B"], float)
    central = SpatialInertia.MakeFromCentralInertia(
        m, com, RotationalInertia(I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]))
    if "inertia_about_origin_B" not in b:
        return central
    Io = np.asarray(b["inertia_about_origin_B"], float)
    G = Io / m
    candidates = (central, SpatialInertia(m, com, UnitInertia(G[0, 0], G[1, 1], G[2, 2], G[0, 1], G[0, 2], G[1, 2])))
    for M in candidates:
        if (np.array_equal(M.CalcRotationalInertia().CopyToFullMatrix3(), Io)
                and np.array_equal(M.Shift(com).CalcRotationalInertia().CopyToFullMatrix3(), I)):
            return M
    return central


def canonical_rotation(xyzw):
    """The rotation a geometry is registered with, for a pose's quaternion ``xyzw``: one that
    recording the scene again from its own file reproduces bit for bit.

    Drake stores a RotationMatrix and the recording reads it back as a quaternion (canonical sign
    qw ≥ 0). For a general rotation that round trip q → R(q) → q' is not the identity in the last
    bits, and repeated it falls into a short cycle; so the rotation used is R of the cycle's least
    quaternion, the same whether one starts from the scene's quaternion or from one read back
    (the recorded file). Identity and axis-aligned rotations are their own cycle: unchanged.
    """
    from pydrake.common.eigen_geometry import Quaternion
    from pydrake.math import RotationMatrix

    x, y, z, w = map(float, xyzw)
    seen, cur = [], (w, x, y, z)
    while cur not in seen and len(seen) < 64:
        seen.append(cur)
        q = RotationMatrix(Quaternion(*cur)).ToQuaternion()
        cur = tuple(float(c) for c in (q.w(), q.x(), q.y(), q.z()))
        if cur[0] < 0:
            cur = tuple(-c for c in cur)
    cycle = seen[seen.index(cur):] if cur in seen else seen
    return RotationMatrix(Quaternion(*min(cycle)))


def _quaternion(xyzw):
    from pydrake.common.eigen_geometry import Quaternion
    x, y, z, w = map(float, xyzw)
    return Quaternion(w, x, y, z)


# ----------------------------------------------------------------------------- simulating and recording


def _pose_row(X) -> np.ndarray:
    """``[x, y, z, qx, qy, qz, qw]`` with the canonical sign qw ≥ 0."""
    q = X.rotation().ToQuaternion()
    wxyz = np.array([q.w(), q.x(), q.y(), q.z()])
    if wxyz[0] < 0:
        wxyz = -wxyz
    return np.concatenate([X.translation(), wxyz[1:], wxyz[:1]])


def simulate(ds: DrakeScene, num_steps: int) -> dict:
    """Step Drake's simulator ``num_steps`` times; every array of the recording (README, "NPZ arrays")."""
    from pydrake.systems.analysis import Simulator

    plant = ds.plant
    h = plant.time_step()
    context = ds.initial_context()
    pc = plant.GetMyContextFromRoot(context)
    bodies = [plant.get_body(_body_index(i)) for i in range(1, plant.num_bodies())]  # world excluded
    index = {gid: i for i, gid in enumerate(ds.geometry_ids)}
    N, nv, nu, nb = num_steps, plant.num_velocities(), plant.num_actuators(), len(bodies)
    rows = {"t": [], "q": [], "v": [], "body_pose_W": [], "body_V_W": [], "kinetic_energy": [],
            "potential_energy": [], "generalized_contact_forces": [], "net_actuation": []}
    contacts = []  # per row: list of (gA, gB, bA, bB, p_WC, f, nhat, depth, p_WCa, p_WCb, sep, slip)
    instance = plant.GetModelInstanceByName("DefaultModelInstance")

    def sample(n):
        rows["t"].append(context.get_time())
        rows["q"].append(plant.GetPositions(pc).copy())
        rows["v"].append(plant.GetVelocities(pc).copy())
        rows["body_pose_W"].append([_pose_row(plant.EvalBodyPoseInWorld(pc, b)) for b in bodies])
        rows["body_V_W"].append([plant.EvalBodySpatialVelocityInWorld(pc, b).get_coeffs().copy() for b in bodies])
        rows["kinetic_energy"].append(plant.CalcKineticEnergy(pc))
        rows["potential_energy"].append(plant.CalcPotentialEnergy(pc))
        if n == 0:
            rows["generalized_contact_forces"].append(np.zeros(nv))
            rows["net_actuation"].append(np.zeros(nu))
            contacts.append([])
            return
        rows["generalized_contact_forces"].append(
            plant.get_generalized_contact_forces_output_port(instance).Eval(pc).copy())
        rows["net_actuation"].append(plant.get_net_actuation_output_port().Eval(pc).copy() if nu else np.zeros(0))
        results = plant.get_contact_results_output_port().Eval(pc)
        row = []
        for i in range(results.num_point_pair_contacts()):
            info = results.point_pair_contact_info(i)
            pp = info.point_pair()
            row.append((index[pp.id_A], index[pp.id_B], int(info.bodyA_index()), int(info.bodyB_index()),
                        info.contact_point(), info.contact_force(), pp.nhat_BA_W, pp.depth, pp.p_WCa, pp.p_WCb,
                        info.separation_speed(), info.slip_speed()))
        contacts.append(row)

    simulator = Simulator(ds.diagram, context)
    simulator.Initialize()
    sample(0)
    t0 = time.perf_counter()
    for n in range(1, N + 1):
        simulator.AdvanceTo(n * h)
        sample(n)
    loop_s = time.perf_counter() - t0
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in rows.items()}
    arrays["body_pose_W"] = arrays["body_pose_W"].reshape(N + 1, nb, 7)
    arrays["body_V_W"] = arrays["body_V_W"].reshape(N + 1, nb, 6)
    arrays["net_actuation"] = arrays["net_actuation"].reshape(N + 1, nu)
    C = max(1, max(len(r) for r in contacts))
    count = np.array([len(r) for r in contacts], dtype=np.int32)
    ints = {k: np.full((N + 1, C), -1, dtype=np.int32) for k in ("contact_geom_A", "contact_geom_B",
                                                                 "contact_body_A", "contact_body_B")}
    vec = {k: np.zeros((N + 1, C, 3)) for k in ("contact_p_WC", "contact_f_Bc_W", "contact_nhat_BA_W")}
    sca = {k: np.zeros((N + 1, C)) for k in ("contact_depth",)}
    wit = {k: np.zeros((N + 1, C, 3)) for k in ("contact_p_WCa", "contact_p_WCb")}
    speeds = {k: np.zeros((N + 1, C)) for k in ("contact_separation_speed", "contact_slip_speed")}
    for n, row in enumerate(contacts):
        for c, (gA, gB, bA, bB, p, f, nh, depth, pa, pb, sep, slip) in enumerate(row):
            ints["contact_geom_A"][n, c], ints["contact_geom_B"][n, c] = gA, gB
            ints["contact_body_A"][n, c], ints["contact_body_B"][n, c] = bA, bB
            vec["contact_p_WC"][n, c], vec["contact_f_Bc_W"][n, c], vec["contact_nhat_BA_W"][n, c] = p, f, nh
            sca["contact_depth"][n, c] = depth
            wit["contact_p_WCa"][n, c], wit["contact_p_WCb"][n, c] = pa, pb
            speeds["contact_separation_speed"][n, c], speeds["contact_slip_speed"][n, c] = sep, slip
    arrays["contact_count"] = count
    arrays.update(ints)
    arrays.update({k: vec[k] for k in ("contact_p_WC", "contact_f_Bc_W", "contact_nhat_BA_W")})
    arrays.update(sca)
    arrays.update(wit)
    arrays.update(speeds)
    scratch = plant.CreateDefaultContext()
    for suffix, row in (("0", 0), ("_final", N)):
        plant.SetPositions(scratch, arrays["q"][row])
        plant.SetVelocities(scratch, arrays["v"][row])
        arrays["M" + suffix] = plant.CalcMassMatrix(scratch)
        arrays["bias_term" + suffix] = plant.CalcBiasTerm(scratch)
        arrays["gravity_forces" + suffix] = plant.CalcGravityGeneralizedForces(scratch)
        if suffix == "0":
            # Column by column through MapVelocityToQDot: the signs of its zeros (−0.0 in the
            # quaternion rows) are those of the committed recordings.
            arrays["N0"] = np.column_stack([plant.MapVelocityToQDot(scratch, e)
                                            for e in np.eye(plant.num_velocities())])
    arrays["dynamics_residual"] = dynamics_residual(ds, arrays)
    ordered = {k: arrays[k] for k in ARRAY_ORDER}
    return {"arrays": ordered, "contacts_max": C, "recording_loop_s": loop_s}


def _body_index(i):
    from pydrake.multibody.tree import BodyIndex
    return BodyIndex(i)


def _dense(a) -> np.ndarray:
    """A (possibly sparse) Drake matrix as a C-ordered dense array (the NPZ stores N0 row-major)."""
    return np.ascontiguousarray(a.toarray() if hasattr(a, "toarray") else a, dtype=np.float64)


# The order of the arrays in the NPZ (that of the committed recordings).
ARRAY_ORDER = ("t", "q", "v", "body_pose_W", "body_V_W", "kinetic_energy", "potential_energy",
               "generalized_contact_forces", "net_actuation", "contact_count", "contact_geom_A", "contact_geom_B",
               "contact_body_A", "contact_body_B", "contact_p_WC", "contact_f_Bc_W", "contact_nhat_BA_W",
               "contact_depth", "contact_p_WCa", "contact_p_WCb", "contact_separation_speed", "contact_slip_speed",
               "M0", "bias_term0", "gravity_forces0", "N0", "M_final", "bias_term_final", "gravity_forces_final",
               "dynamics_residual")


def damping_vector(ds: DrakeScene) -> np.ndarray:
    """Joint damping per generalized velocity [N·s/m or N·m·s], (nv,)."""
    plant = ds.plant
    D = np.zeros(plant.num_velocities())
    for i in plant.GetJointIndices():
        joint = plant.get_joint(i)
        if joint.num_velocities():
            D[joint.velocity_start():joint.velocity_start() + joint.num_velocities()] = joint.default_damping_vector()
    return D


def dynamics_residual(ds: DrakeScene, arrays: dict) -> np.ndarray:
    """``M(q_{n−1})(v_n − v_{n−1}) − h[τ_g − C v_{n−1} − D v_n + τ_c + B u]`` per row (row 0 = 0), (N+1, nv):
    the discrete momentum balance the step satisfied, up to the solver tolerance and the impulses
    no output port reports (joint limits)."""
    plant = ds.plant
    h = plant.time_step()
    q, v = arrays["q"], arrays["v"]
    B = _dense(plant.MakeActuationMatrix()) if plant.num_actuators() else np.zeros((plant.num_velocities(), 0))
    D = damping_vector(ds)
    out = np.zeros_like(v)
    ctx = plant.CreateDefaultContext()
    for n in range(1, len(q)):
        plant.SetPositions(ctx, q[n - 1])
        plant.SetVelocities(ctx, v[n - 1])
        M = plant.CalcMassMatrix(ctx)
        tau = (plant.CalcGravityGeneralizedForces(ctx) - plant.CalcBiasTerm(ctx) - D * v[n]
               + arrays["generalized_contact_forces"][n] + B @ arrays["net_actuation"][n])
        out[n] = M @ (v[n] - v[n - 1]) - h * tau
    return out


def timing(ds: DrakeScene, num_steps: int, final_q: np.ndarray, final_v: np.ndarray) -> dict:
    """Drake's own speed: :data:`TIMING_RUNS` runs of ``Simulator.AdvanceTo(T)`` on fresh contexts (no
    Python in the loop). Each run must end in the recorded final state, bit for bit."""
    from pydrake.systems.analysis import Simulator

    T = num_steps * ds.plant.time_step()
    runs = []
    for _ in range(TIMING_RUNS):
        context = ds.initial_context()
        simulator = Simulator(ds.diagram, context)
        simulator.Initialize()
        t0 = time.perf_counter()
        simulator.AdvanceTo(T)
        runs.append(time.perf_counter() - t0)
        pc = ds.plant.GetMyContextFromRoot(context)
        if not (np.array_equal(ds.plant.GetPositions(pc), final_q) and np.array_equal(ds.plant.GetVelocities(pc),
                                                                                       final_v)):
            raise RuntimeError("a timing run of Simulator.AdvanceTo(T) did not end in the recorded final state")
    return {"wall_time_per_step_s": float(np.median(runs)) / num_steps,
            "wall_time_per_step_min_s": float(np.min(runs)) / num_steps, "wall_times_full_run_s": runs,
            "method": f"median of {TIMING_RUNS} runs of Simulator.AdvanceTo({T:g}) on a fresh context (no Python in "
                      "the loop, no visualization), divided by num_steps"}


def record(spec: dict, *, num_steps: int | None = None, with_timing: bool = False):
    """Record ``spec`` with Drake: ``(DrakeScene, simulation dict, timing dict or None)``."""
    ds = DrakeScene(spec)
    N = spec_num_steps(spec, num_steps)  # --steps, else the scene's, as load_json reads it
    if N < 1:
        raise ValueError(f"--steps: must be >= 1, got {N}")
    sim = simulate(ds, N)
    perf = timing(ds, N, sim["arrays"]["q"][-1], sim["arrays"]["v"][-1]) if with_timing else None
    return ds, sim, perf
