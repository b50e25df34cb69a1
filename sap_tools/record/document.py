"""The JSON document of a Drake recording (format of ``tests/data/drake/README.md``).

``drake_document`` reads every model entry back from the finalized plant and SceneGraph's
context inspector; the fixed descriptive texts of the format (conventions, SAP internals,
array meanings, joint coordinates) are the constants below, shared by every recording.
Numbers that JSON cannot hold (±inf) are written as the strings ``"inf"``/``"-inf"``.
"""

from __future__ import annotations

import math
import os
import platform

import numpy as np

from sap_tools.cli import cpu_model

__all__ = ["FORMAT_VERSION", "GENERATOR", "drake_document", "index_entry", "jsonable"]

FORMAT_VERSION = 1
GENERATOR = "sap_tools/record/cli.py"

# ----------------------------------------------------------------------------- fixed texts of the format

UNITS = "SI: m, kg, s, N, N*m, rad"

CONVENTIONS = {
    "quaternions_in_this_json_and_body_pose_W": "xyzw (scalar LAST), unit norm",
    "quaternions_in_drake_q": "wxyz (scalar FIRST): QuaternionFloatingJoint q = [qw,qx,qy,qz,x,y,z]",
    "pose": "X_AB = {p: p_AoBo_A, quat_xyzw: q_AB}; v_A = R(q_AB) v_B",
    "spatial_velocity": ("[w, v]: angular velocity FIRST, then translational velocity of the body/frame ORIGIN "
        "(not COM); free-body velocities are expressed in WORLD"),
    "inertia": "3x3 rotational inertia matrices (positive products convention: off-diagonals are -sum m x y)",
    "gravity": "uniform field plant.gravity_W",
    "geometry_poses": "X_BG: geometry frame G in its body frame B",
}

SAP_INTERNALS = {
    "source": ("Drake v1.51.1 C++ source (not readable/settable through pydrake 1.51.1); values are Drake's built-in "
        "defaults"),
    "solver_parameters": {
        "abs_tolerance": 1e-14,
        "rel_tolerance": 1e-06,
        "cost_abs_tolerance": 1e-30,
        "cost_rel_tolerance": 1e-15,
        "max_iterations": 100,
        "line_search_type": "exact",
        "exact_line_search": {
            "max_iterations": 100,
            "alpha_max": 1.5,
        },
        "backtracking_line_search (unused)": {
            "max_iterations": 40,
            "armijos_parameter": 0.0001,
            "rho": 0.8,
            "alpha_max": 1.25,
        },
        "soft_tolerance": 1e-07,
        "relative_slop": "1000 * machine_epsilon",
        "linear_solver_type": "block sparse Cholesky",
        "optimality_criterion": ("||grad ell||_D < abs_tol + rel_tol * max(||A v||_D, ||J^T gamma||_D), "
            "D = diag(A)^(1/2) weighting; OR cost criterion |ell^(m+1)-ell^m| < cost_abs_tol "
            "+ cost_rel_tol*(ell^(m+1)+ell^m)/2"),
    },
    "contact_constraint (SapFrictionConeConstraint, point contact)": {
        "sigma": 0.001,
        "beta": "plant.sap_near_rigid_threshold (default 1.0)",
        "delassus_estimate_w": ("W_i = J_i diag(A)^-1 J_i^T (3x3, both trees' blocks summed), w = ||W_i||_F / 3, "
            "same w for all 3 rows; A = M + h*D"),
        "Rt": "sigma * w",
        "Rn": "max(beta^2/(4 pi^2) * w, 1/(h k (h + tau_d)))",
        "v_hat": "[0, 0, -phi0/(h + tau_d)]  (phi0 = -depth at q0)",
        "friction": "dynamic (kinetic) coefficient only; static ignored",
        "contact_frame": "z axis = nhat_AB_W = -nhat_BA_W (from A into B), vc = v_Bc - v_Ac at contact point C",
        "contact_point": ("p_WC = wA*p_WCa + wB*p_WCb, wA = kA/(kA+kB), wB = kB/(kA+kB) (per-geometry stiffnesses; "
            "0.5/0.5 if both zero)"),
        "kinematics_time": ("geometry query, Jacobian, phi0 evaluated at the previous state q0 (start of the step)"),
    },
    "joint_limit_constraint (SapLimitConstraint, 1-dof joints only)": {
        "stiffness": 1000000000000.0,
        "dissipation_time_scale": "h (the time step)",
        "beta": 0.1,
        "window_factor": 2.0,
        "activation": ("constraint added for a limit only if it lies within [q0 - 2*dq, q0 + 2*dq], dq = h*max(|v0|, "
            "|v*|)"),
        "constraint_function": "g = q0 - q_lower and/or q_upper - q0",
        "R": "max(beta^2/(4 pi^2) * w, 1/(h k (h + tau)))",
        "v_hat": "-g/(h + tau)",
    },
    "pd_controller_constraint (SapPdControllerConstraint)": {
        "beta": 0.1,
        "model": ("u = clamp(-Kp (q0 + h v - qd) - Kd (v - vd) + u_ff, -effort_limit, effort_limit), implicit in v"),
        "near_rigid_clamp": ("if 1/(h (h Kp + Kd)) < beta^2/(4 pi^2) w, the gains are scaled down (ratio Kd/Kp kept) "
            "so that R equals the near-rigid value"),
    },
    "free_motion_and_damping": {
        "v_star": ("v* = v0 + h * vdot0, vdot0 = (M + h D)^-1 k(x0), with k = all non-constraint forces at x0 "
            "(gravity, Coriolis/gyroscopic, -D v0, non-PD actuation, force elements); M includes reflected "
            "rotor inertia (armature)"),
        "A": "M(q0) + h * diag(joint damping)",
        "position_update": "q1 = q0 + h * N(q0) v1 (no quaternion re-normalization)",
    },
    "scene_graph_default_proximity_properties": {
        "point_contact_stiffness": 1000000.0,
        "relaxation_time": 0.1,
        "hunt_crossley_dissipation": 50.0,
        "static_friction": 0.5,
        "dynamic_friction": 0.5,
        "note": ("filled into every collision geometry that lacks the property when the SceneGraph context is "
            "created; the MultibodyPlant 'penetration_allowance' heuristic is therefore never reached for "
            "these properties"),
    },
    "combination_rules": {
        "stiffness": "k = kA kB / (kA + kB)",
        "relaxation_time": "tau_d = tauA + tauB",
        "friction": "mu = 2 muA muB / (muA + muB) (applied to dynamic mu)",
        "hunt_crossley (ignored by SAP)": "d = (kB dA + kA dB)/(kA + kB)",
    },
}

# The contact constraint of a lagged / similar recording (replaces the friction cone's entry).
HUNT_CROSSLEY_CONSTRAINT = {
    "sigma": 0.001,
    "model": ("normal impulse n(v) = h (fe0 - h k v)_+ (1 - d v)_+ with v the normal contact velocity (> 0 "
        "separating), fe0 = k * depth at q0 (phi0 and relaxation_time are not used); cost -N(z) with N the "
        "antiderivative of n, constant for v >= min(fe0/(h k), 1/d)"),
    "friction": ("smooth Coulomb: gamma_t = -mu n_f vt/sqrt(|vt|^2 + eps_s^2), cost mu n_f |vt|_s with |vt|_s = "
        "sqrt(|vt|^2 + eps_s^2) - eps_s"),
    "kLagged": "z = vn, n_f = n0 (the previous step's normal impulse): friction does not change n within the step",
    "kSimilar": "z = vn - mu |vt|_s, n_f = n(z): friction and normal impulse coupled",
    "n0": "max(0, h fe0) * max(0, 1 - d vn0), vn0 = normal contact velocity at v0 (start of the step)",
    "eps_s": ("max(stiction_tolerance, mu * Rt * n0), Rt = sigma * max((w0 + w1)/2, |w|/sqrt(3)) with w the "
        "Delassus estimate of the friction cone (||J diag(A)^-1 J^T||_F / 3 on every row)"),
    "per_contact_arrays": ("contact_hc_fe0, contact_hc_vn0, contact_hc_n0, contact_hc_eps: computed by the recorder "
        "(pydrake exposes none of them) and checked against the recorded impulses"),
    "contact_frame": "z axis = nhat_AB_W = -nhat_BA_W (from A into B), vc = v_Bc - v_Ac at contact point C",
    "contact_point": ("p_WC = wA*p_WCa + wB*p_WCb, wA = kA/(kA+kB), wB = kB/(kA+kB) (per-geometry stiffnesses; 0.5/0.5 "
        "if both zero)"),
    "kinematics_time": ("geometry query, Jacobian, fe0 and vn0 evaluated at the previous state (q0, v0)"),
}
HUNT_CROSSLEY_COMBINATION = {
    "stiffness": "k = kA kB / (kA + kB)",
    "relaxation_time (ignored by kLagged/kSimilar)": "tau_d = tauA + tauB",
    "friction": "mu = 2 muA muB / (muA + muB) (applied to dynamic mu)",
    "hunt_crossley": "d = (kB dA + kA dB)/(kA + kB): each geometry's d weighted by the OTHER stiffness",
}
HC_ARRAY_MEANINGS = {
    "contact_hc_fe0": {"shape": "(N+1, C)", "meaning": "elastic force fe0 = k * depth at q_{n-1} [N]"},
    "contact_hc_vn0": {"shape": "(N+1, C)",
                       "meaning": ("normal contact velocity (J v_{n-1})_z at the start of the step [m/s], "
                                   "+ = separating")},
    "contact_hc_n0": {"shape": "(N+1, C)", "meaning": "n0 = max(0, h fe0) max(0, 1 - d vn0) [N s]"},
    "contact_hc_eps": {"shape": "(N+1, C)", "meaning": "friction regularization velocity eps_s [m/s]"},
}

COLLISION_FILTER_NOTE = ("none beyond Drake defaults; geometries on the same body never collide; pairs listed in "
    "collision_candidate_pairs are the only ones Drake tests")

SOLVER_STATISTICS = "not available: pydrake 1.51.1 does not expose SapStatistics (iterations, residuals)"

ROW_SEMANTICS = ("row 0 = initial state; row n = state after step n. Contact/force rows n>=1 describe the step "
    "(n-1 -> n): geometry at q_{n-1}, forces = SAP impulses / h that produced v_n (Drake's sampled output ports). "
    "Row 0 of those arrays is zero-filled.")

ARRAY_MEANINGS = {
    "t": {
        "shape": "(N+1,)",
        "meaning": "time [s]; row 0 is the initial state, row n is after n steps",
    },
    "q": {
        "shape": "(N+1, nq)",
        "meaning": "Drake generalized positions (ordering: state.q_names / joints[*].q_start)",
    },
    "v": {
        "shape": "(N+1, nv)",
        "meaning": "Drake generalized velocities (ordering: state.v_names / joints[*].v_start)",
    },
    "body_pose_W": {
        "shape": "(N+1, nb, 7)",
        "meaning": ("per non-world body (order: recording.bodies): [x,y,z, qx,qy,qz,qw] = p_WBo and unit quaternion "
            "q_WB (xyzw, canonical qw>=0) of the BODY FRAME (origin Bo, not COM)"),
    },
    "body_V_W": {
        "shape": "(N+1, nb, 6)",
        "meaning": ("per body: [wx,wy,wz, vx,vy,vz] = w_WB_W and v_WBo_W (velocity of the body ORIGIN, world frame)"),
    },
    "kinetic_energy": {
        "shape": "(N+1,)",
        "meaning": "Drake CalcKineticEnergy [J]",
    },
    "potential_energy": {
        "shape": "(N+1,)",
        "meaning": "Drake CalcPotentialEnergy (gravity only here) [J]",
    },
    "generalized_contact_forces": {
        "shape": "(N+1, nv)",
        "meaning": ("row n: generalized contact forces tau_c = J^T gamma / h of the step (n-1 -> n) (contact "
            "constraints only; excludes limits/PD); row 0 = 0"),
    },
    "net_actuation": {
        "shape": "(N+1, nu)",
        "meaning": ("row n: actuator effort applied during step (n-1 -> n) incl. implicit PD (after effort clamp), "
            "indexed by actuator input_start; row 0 = 0"),
    },
    "contact_count": {
        "shape": "(N+1,)",
        "meaning": "number of point contacts reported for the step (n-1 -> n); row 0 = 0",
    },
    "contact_geom_A": {
        "shape": "(N+1, C)",
        "meaning": "geometry index (JSON geometries[*].index) of A, -1 = padding",
    },
    "contact_geom_B": {
        "shape": "(N+1, C)",
        "meaning": "geometry index of B, -1 = padding",
    },
    "contact_body_A": {
        "shape": "(N+1, C)",
        "meaning": "body index of A (JSON bodies[*].index; 0 = world)",
    },
    "contact_body_B": {
        "shape": "(N+1, C)",
        "meaning": "body index of B",
    },
    "contact_p_WC": {
        "shape": "(N+1, C, 3)",
        "meaning": "contact point C used by SAP: p_WC = wA p_WCa + wB p_WCb, wA = kA/(kA+kB)",
    },
    "contact_f_Bc_W": {
        "shape": "(N+1, C, 3)",
        "meaning": ("contact force on body B applied at C, world frame [N] (= impulse/h of the step); force on A is "
            "the negative"),
    },
    "contact_nhat_BA_W": {
        "shape": "(N+1, C, 3)",
        "meaning": "unit normal pointing from B into A (world)",
    },
    "contact_depth": {
        "shape": "(N+1, C)",
        "meaning": "penetration depth (>0) at the START of the step, i.e. at q_{n-1}",
    },
    "contact_p_WCa": {
        "shape": "(N+1, C, 3)",
        "meaning": "deepest point of A inside B (on A's surface), at q_{n-1}",
    },
    "contact_p_WCb": {
        "shape": "(N+1, C, 3)",
        "meaning": "deepest point of B inside A (on B's surface), at q_{n-1}",
    },
    "contact_separation_speed": {
        "shape": "(N+1, C)",
        "meaning": "normal relative velocity at C using v_n (end of step), positive = separating",
    },
    "contact_slip_speed": {
        "shape": "(N+1, C)",
        "meaning": "tangential relative speed at C using v_n",
    },
    "dynamics_residual": {
        "shape": "(N+1, nv)",
        "meaning": ("row n: M(q_{n-1}) (v_n - v_{n-1}) - h [tau_g(q_{n-1}) - C(q_{n-1},v_{n-1}) v_{n-1} - D v_n + "
            "generalized_contact_forces_n + B net_actuation_n] [N s or N m s]. ~SAP solver tolerance (rel "
            "1e-6) everywhere, EXCEPT where a joint limit constraint is active: there it equals the limit "
            "impulse J_limit^T gamma (not reported by any Drake port). Computed by the generator, not by "
            "Drake"),
    },
    "M0": {
        "shape": "(nv, nv)",
        "meaning": "mass matrix at the initial state (includes reflected rotor inertia)",
    },
    "bias_term0": {
        "shape": "(nv,)",
        "meaning": ("Drake CalcBiasTerm at the initial state: C(q,v) v (Coriolis/centrifugal/gyroscopic), M vdot + C "
            "v = tau"),
    },
    "gravity_forces0": {
        "shape": "(nv,)",
        "meaning": "Drake CalcGravityGeneralizedForces at the initial state (tau_g, appears on the RHS)",
    },
    "N0": {
        "shape": "(nq, nv)",
        "meaning": "qdot = N(q) v map at the initial state",
    },
    "M_final": {
        "shape": "(nv, nv)",
        "meaning": "mass matrix at the final state",
    },
    "bias_term_final": {
        "shape": "(nv,)",
        "meaning": "C(q,v) v at the final state",
    },
    "gravity_forces_final": {
        "shape": "(nv,)",
        "meaning": "tau_g at the final state",
    },
}

STATE_NOTES = {
    "ordering_note": ("Drake orders q and v by its internal spanning forest, NOT by body index (in these scenes "
        "jointed trees come first and free bodies last); always use joints[*].q_start/v_start"),
    "time_integration": "v_{n+1} from SAP; q_{n+1} = q_n + h N(q_n) v_{n+1}",
}

COORDINATES = {
    "quaternion_floating": {
        "q_layout": ["qw", "qx", "qy", "qz", "x", "y", "z"],
        "q_meaning": ("quaternion q_FM of child frame M (= body frame) in parent frame F (= world for free bodies), "
            "SCALAR FIRST (wxyz), NOT necessarily unit norm (Drake normalizes it on use and never "
            "re-normalizes the state); then p_FoMo_F = position of the body frame origin Bo (not the COM) in "
            "F"),
        "v_layout": ["wx", "wy", "wz", "vx", "vy", "vz"],
        "v_meaning": ("w_FM_F = angular velocity of M in F expressed in F (world frame, NOT body frame), then "
            "v_FMo_F = translational velocity of the body frame ORIGIN Mo (not the COM) in F, expressed in F"),
        "qdot": ("quat_dot = 0.5 * (0, w_F) (x) q  [Hamilton product, w in F] i.e. "
            "0.5*[[-qx,-qy,-qz],[qw,qz,-qy],[-qz,qw,qx],[qy,-qx,qw]] w; p_dot = v"),
    },
    "prismatic": {
        "q_layout": ["translation"],
        "q_meaning": "translation d (m) of Mo relative to Fo along the unit axis: p_FoMo_F = d * axis, R_FM = I",
        "v_layout": ["translational_rate"],
        "v_meaning": "d_dot (m/s)",
        "qdot": "q_dot = v",
    },
    "revolute": {
        "q_layout": ["angle"],
        "q_meaning": ("rotation angle theta (rad) of M relative to F about the unit axis (same components in F and M); "
            "R_FM = AngleAxis(theta, axis), p_FoMo = 0"),
        "v_layout": ["angular_rate"],
        "v_meaning": "theta_dot (rad/s)",
        "qdot": "q_dot = v",
    },
}

VELOCITY_LIMITS_NOTE = "velocity/acceleration limits are not used by the discrete SAP plant"

PD_LAW = ("u = clamp(-Kp*(q_next - qd) - Kd*(v_next - vd) + u_ff, -effort_limit, +effort_limit), evaluated "
    "implicitly inside SAP with q_next = q0 + h*v_next")

XD_LAYOUT = "[qd for each actuator in JointActuatorIndex order, then vd]"

HALF_SPACE_NOTE = ("solid region z_G <= 0 of the geometry frame G; outward normal +z_G; boundary plane through Go")

WORLD_NOTE = "world body (fixed)"

BALL_RPY_COORDINATES = {
    "q_layout": ["roll", "pitch", "yaw"],
    "q_meaning": "space-fixed x-y-z angles of M in F: R_FM = Rz(yaw) Ry(pitch) Rx(roll)",
    "v_layout": ["wx", "wy", "wz"],
    "v_meaning": "w_FM_F = angular velocity of M in F, expressed in F",
    "qdot": ("roll_dot = (cy wx + sy wy)/cp, pitch_dot = -sy wx + cy wy, yaw_dot = wz + sp (cy wx + sy wy)/cp "
             "(c/s = cos/sin of pitch p and yaw y)"),
}
WELD_COORDINATES = {"q_layout": [], "q_meaning": "none: X_FM = identity", "v_layout": [], "v_meaning": "none",
                    "qdot": "none"}


# ----------------------------------------------------------------------------- helpers


def machine() -> str:
    """CPU model, logical cores and OS of this machine (one line)."""
    return f"{cpu_model()}; {os.cpu_count()} logical cores; {platform.system()} {platform.machine()}"


def jsonable(x):
    """``x`` with NumPy arrays/scalars as lists/numbers and ±inf as the strings "inf"/"-inf"."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf" if x < 0 else "nan")
    return x


def _pose(X) -> dict:
    """``{p, quat_xyzw}`` of a RigidTransform, canonical sign qw ≥ 0."""
    q = X.rotation().ToQuaternion()
    wxyz = np.array([q.w(), q.x(), q.y(), q.z()])
    if wxyz[0] < 0:
        wxyz = -wxyz
    return {"p": X.translation().tolist(), "quat_xyzw": [*wxyz[1:].tolist(), float(wxyz[0])]}


def _enum_name(e) -> str:
    return str(e).rsplit(".", 1)[-1]


# ----------------------------------------------------------------------------- the document


def _bodies(ds, pc) -> list:
    from pydrake.multibody.tree import BodyIndex

    plant = ds.plant
    out = [{"index": 0, "name": "world", "model_instance": plant.GetModelInstanceName(
        plant.world_body().model_instance()), "note": WORLD_NOTE}]
    for i in range(1, plant.num_bodies()):
        b = plant.get_body(BodyIndex(i))
        com = b.default_com()
        X = plant.EvalBodyPoseInWorld(pc, b)
        V = plant.EvalBodySpatialVelocityInWorld(pc, b)
        w, v = V.rotational(), V.translational()
        out.append({
            "index": i, "name": b.name(), "model_instance": plant.GetModelInstanceName(b.model_instance()),
            "mass": b.default_mass(), "com_B": com.tolist(),
            "inertia_about_com_B": b.default_spatial_inertia().Shift(com).CalcRotationalInertia().CopyToFullMatrix3(),
            "inertia_about_origin_B": b.default_rotational_inertia().CopyToFullMatrix3(),
            "is_free_floating": b.is_floating_base_body(),
            "initial_pose_W": _pose(X),
            "initial_velocity_W": {"w_WB_W": w.tolist(), "v_WBo_W": v.tolist(),
                                   "v_WBcm_W": (v + np.cross(w, X.rotation().matrix() @ com)).tolist()},
        })
    return out


def _joints(ds, q0, v0) -> list:
    plant = ds.plant
    q_names = plant.GetPositionNames(add_model_instance_prefix=False)
    v_names = plant.GetVelocityNames(add_model_instance_prefix=False)
    out = []
    for i in plant.GetJointIndices():
        j = plant.get_joint(i)
        qs, nq, vs, nv = j.position_start(), j.num_positions(), j.velocity_start(), j.num_velocities()
        jtype = j.type_name()
        d = {"name": j.name(), "index": int(i), "type": jtype,
             "auto_added_for_free_body": jtype == "quaternion_floating" and j.child_body().name() in ds.auto_floating,
             "parent_body": j.parent_body().name(), "child_body": j.child_body().name(),
             "frame_on_parent_F": {"name": j.frame_on_parent().name(),
                                   "X_PF": _pose(j.frame_on_parent().GetFixedPoseInBodyFrame())},
             "frame_on_child_M": {"name": j.frame_on_child().name(),
                                  "X_CM": _pose(j.frame_on_child().GetFixedPoseInBodyFrame())},
             "q_start": qs, "nq": nq, "v_start": vs, "nv": nv,
             "q_names": q_names[qs:qs + nq], "v_names": v_names[vs:vs + nv],
             "initial_q": q0[qs:qs + nq], "initial_v": v0[vs:vs + nv],
             "damping": j.default_damping_vector(),
             "position_lower_limits": j.position_lower_limits(), "position_upper_limits": j.position_upper_limits(),
             "velocity_limits_note": VELOCITY_LIMITS_NOTE}
        if jtype == "revolute":
            d["axis"] = j.revolute_axis()
        elif jtype == "prismatic":
            d["axis"] = j.translation_axis()
        d["coordinates"] = COORDINATES.get(jtype) or {"ball_rpy": BALL_RPY_COORDINATES,
                                                      "weld": WELD_COORDINATES}[jtype]
        out.append(d)
    return out


def _actuation(ds) -> dict:
    plant = ds.plant
    actuators = []
    for i in plant.GetJointActuatorIndices():
        a = plant.get_joint_actuator(i)
        d = {"name": a.name(), "index": int(i), "joint": a.joint().name(), "input_start": a.input_start(),
             "effort_limit": a.effort_limit(), "rotor_inertia": a.default_rotor_inertia(),
             "gear_ratio": a.default_gear_ratio(),
             "reflected_inertia (armature, added to M diagonal)": a.default_reflected_inertia(),
             "pd_controlled": a.has_controller()}
        if a.has_controller():
            gains = a.get_controller_gains()
            d["pd_gains"] = {"p": gains.p, "d": gains.d}
        actuators.append(d)
    out = {"actuators": actuators}
    if actuators:
        if any(a["pd_controlled"] for a in actuators):
            out["desired_state_input"] = {"model_instance": "DefaultModelInstance", "xd": ds.xd, "layout": XD_LAYOUT}
        out["feedforward_actuation_u_ff"] = ds.u_ff
        out["pd_law"] = PD_LAW
    return out


def _convex(shape, name: str) -> dict:
    """A ``convex`` entry read back from Drake's ``Convex``: the vertices and faces of the OBJ it
    was given, after checking that Drake's own convex hull has exactly those vertices (so the
    loaded model collides with the shape Drake collided with)."""
    if not shape.source().is_in_memory() or shape.scale3().tolist() != [1.0, 1.0, 1.0]:
        raise ValueError(f"geometry {name!r}: only unscaled in-memory Convex meshes are recorded")
    vertices, faces = [], []
    for line in shape.source().in_memory().mesh_file.contents().decode().splitlines():
        if line.startswith("v "):
            vertices.append([float(x) for x in line.split()[1:4]])
        elif line.startswith("f "):
            faces.append([int(k.split("/")[0]) - 1 for k in line.split()[1:]])
    hull = shape.GetConvexHull()
    drake_hull = sorted(tuple(hull.vertex(i).tolist()) for i in range(hull.num_vertices()))
    if drake_hull != sorted(map(tuple, vertices)):
        raise ValueError(f"geometry {name!r}: Drake's convex hull has other vertices than the mesh "
                         "(give the hull's vertices only)")
    return {"type": "convex", "vertices": vertices, "faces": faces}


def _geometries(ds, context) -> tuple[list, list]:
    """The geometries and candidate pairs, read back from SceneGraph's context inspector. Under
    kLagged/kSimilar the Hunt–Crossley dissipation is a used property (its own key, a
    ``property_source`` entry, the pair's combined d); under kSap the format's first layout."""
    hc = ds.approximation != "sap"
    from pydrake.geometry import Box, Convex, Cylinder, HalfSpace, Sphere

    sg = ds.scene_graph
    inspector = sg.get_query_output_port().Eval(sg.GetMyContextFromRoot(context)).inspector()
    model = sg.model_inspector()
    plant = ds.plant
    out = []
    for i, gid in enumerate(ds.geometry_ids):
        body = plant.GetBodyFromFrameId(inspector.GetFrameId(gid))
        shape = inspector.GetShape(gid)
        if isinstance(shape, Sphere):
            s = {"type": "sphere", "radius": shape.radius()}
        elif isinstance(shape, Box):
            s = {"type": "box", "size": shape.size().tolist(), "half_extents": (0.5 * shape.size()).tolist()}
        elif isinstance(shape, HalfSpace):
            s = {"type": "half_space", "note": HALF_SPACE_NOTE}
        elif isinstance(shape, Cylinder):
            s = {"type": "cylinder", "radius": shape.radius(), "length": shape.length()}
        elif isinstance(shape, Convex):
            s = _convex(shape, inspector.GetName(gid))
        else:
            raise ValueError(f"geometry {inspector.GetName(gid)!r}: shape {type(shape).__name__} is not recorded")
        props, given = inspector.GetProximityProperties(gid), model.GetProximityProperties(gid)
        friction = props.GetProperty("material", "coulomb_friction")
        src = lambda name: "explicit" if given.HasProperty("material", name) else "scene_graph_default"  # noqa: E731
        d = {"index": i, "name": inspector.GetName(gid), "body": body.name(), "body_index": int(body.index()),
             "shape": s, "X_BG": _pose(inspector.GetPoseInFrame(gid)),
             "point_contact_stiffness": props.GetProperty("material", "point_contact_stiffness"),
             "relaxation_time": props.GetProperty("material", "relaxation_time"),
             "static_friction": friction.static_friction(), "dynamic_friction": friction.dynamic_friction(),
             "hunt_crossley_dissipation (ignored by SAP)": props.GetProperty("material", "hunt_crossley_dissipation"),
             "property_source": {"point_contact_stiffness": src("point_contact_stiffness"),
                                 "relaxation_time": src("relaxation_time"),
                                 "coulomb_friction": src("coulomb_friction")}}
        if hc:
            d["hunt_crossley_dissipation"] = d.pop("hunt_crossley_dissipation (ignored by SAP)")
            d["property_source"]["hunt_crossley_dissipation"] = src("hunt_crossley_dissipation")
        out.append(d)
    index = {gid: i for i, gid in enumerate(ds.geometry_ids)}
    pairs = []
    for a, b in sorted(tuple(sorted((index[x], index[y]))) for x, y in inspector.GetCollisionCandidates()):
        ga, gb = out[a], out[b]
        kA, kB = ga["point_contact_stiffness"], gb["point_contact_stiffness"]
        mA, mB = ga["dynamic_friction"], gb["dynamic_friction"]
        pairs.append({"geometries": [a, b], "names": [ga["name"], gb["name"]], "k_combined": kA * kB / (kA + kB),
                      "tau_d_combined": ga["relaxation_time"] + gb["relaxation_time"],
                      "mu_dynamic_combined": 2 * mA * mB / (mA + mB)})
        if hc:  # Drake's GetCombinedHuntCrossleyDissipation (both stiffnesses finite here)
            dA, dB = ga["hunt_crossley_dissipation"], gb["hunt_crossley_dissipation"]
            pairs[-1]["hunt_crossley_dissipation_combined"] = (kB / (kA + kB)) * dA + (kA / (kA + kB)) * dB
    return out, pairs


def drake_document(ds, sim: dict, perf: dict | None, *, npz_file: str, checks: dict, self_checks: dict) -> dict:
    """The JSON document of a recording (README, "JSON fields"), in the format's key order."""
    import pydrake

    plant, spec = ds.plant, ds.spec
    a = sim["arrays"]
    h = plant.time_step()
    N = len(a["t"]) - 1
    context = ds.initial_context()
    pc = plant.GetMyContextFromRoot(context)
    q0, v0 = a["q"][0], a["v"][0]
    geometries, pairs = _geometries(ds, context)

    doc = {
        "format_version": FORMAT_VERSION,
        "scene": spec.get("scene", "scene"),
        "description": spec.get("description", ""),
        "generator": GENERATOR,
        "versions": {"pydrake": getattr(pydrake, "__version__", None) or _drake_version(), "numpy": np.__version__,
                     "python": platform.python_version(), "machine": machine()},
        "units": UNITS,
        "conventions": CONVENTIONS,
        "plant": {"time_step": h, "gravity_W": plant.gravity_field().gravity_vector(),
                  "discrete_contact_approximation": _enum_name(plant.get_discrete_contact_approximation()),
                  "contact_model": _enum_name(plant.get_contact_model()),
                  "sap_near_rigid_threshold": plant.get_sap_near_rigid_threshold(),
                  "use_sampled_output_ports": True,
                  "adjacent_bodies_collision_filters": plant.get_adjacent_bodies_collision_filters(),
                  "penetration_allowance (unused: every geometry gets SceneGraph default stiffness)": 1e-3,
                  **({"stiction_tolerance (unused by SAP)": 1e-4} if ds.approximation == "sap" else
                     {"stiction_tolerance": ds.stiction_tolerance}),
                  "num_bodies_incl_world": plant.num_bodies(), "nq": plant.num_positions(),
                  "nv": plant.num_velocities(), "nu": plant.num_actuators()},
        "sap_internals": _sap_internals(ds),
        "bodies": _bodies(ds, pc),
        "joints": _joints(ds, q0, v0),
        "actuation": _actuation(ds),
        "geometries": geometries,
        **({"constraints": _constraints(ds)} if ds.constraint_ids else {}),
        "collision_candidate_pairs": pairs,
        "collision_filter_note": COLLISION_FILTER_NOTE,
        "state": {"nq": plant.num_positions(), "nv": plant.num_velocities(),
                  "q_names": plant.GetPositionNames(add_model_instance_prefix=False),
                  "v_names": plant.GetVelocityNames(add_model_instance_prefix=False),
                  "q0": q0, "v0": v0, **STATE_NOTES},
        "recording": {"file": npz_file, "num_steps": N, "record_every": 1, "duration_s": N * h,
                      "bodies": [b["name"] for b in _bodies(ds, pc)[1:]], "max_contacts_C": sim["contacts_max"],
                      "row_semantics": ROW_SEMANTICS,
                      "arrays": (ARRAY_MEANINGS if ds.approximation == "sap" else
                                 {**ARRAY_MEANINGS, **HC_ARRAY_MEANINGS})},
        "solver_statistics": SOLVER_STATISTICS,
    }
    if perf is not None:
        doc["performance"] = {**perf, "recording_loop_wall_s (python per-step loop, for reference)":
                              sim["recording_loop_s"], "machine": machine()}
    doc["final_state"] = {"q": a["q"][-1], "v": a["v"][-1]}
    doc["checks"] = checks
    doc["convention_self_checks (all must be ~1e-12 or less)"] = self_checks
    return jsonable(doc)


def _constraints(ds) -> list:
    """The plant's holonomic constraints in the scene format (tests/data/drake/README.md): the
    specification's list, each entry checked against the plant (its ids, and a distance
    constraint's parameters read back from the plant's default context)."""
    plant, spec = ds.plant, ds.spec
    out = []
    context = plant.CreateDefaultContext()
    for c, cid in zip(spec["constraints"], ds.constraint_ids):
        c = dict(c)
        if c["type"] == "distance":
            params = plant.GetDistanceConstraintParams(context, cid)
            c.update(p_AP=params.p_AP(), p_BQ=params.p_BQ(), distance=params.distance(),
                     stiffness=params.stiffness() if np.isfinite(params.stiffness()) else "inf",
                     damping=params.damping())
        out.append(c)
    return out


def _sap_internals(ds) -> dict:
    """The format's SAP internals; under kLagged/kSimilar the contact constraint's entry is the
    Hunt–Crossley constraint's and the combination rules say which properties it reads."""
    if ds.approximation == "sap":
        return SAP_INTERNALS
    out = {}
    for key, value in SAP_INTERNALS.items():
        if key.startswith("contact_constraint"):
            name = {"lagged": "kLagged", "similar": "kSimilar"}[ds.approximation]
            out[f"contact_constraint (SapHuntCrossleyConstraint, point contact, {name})"] = HUNT_CROSSLEY_CONSTRAINT
        elif key == "combination_rules":
            out[key] = HUNT_CROSSLEY_COMBINATION
        else:
            out[key] = value
    return out


def _drake_version() -> str:
    from importlib.metadata import version
    return version("drake")


def index_entry(doc: dict, json_file: str, npz_file: str) -> dict:
    """The scene's entry of ``index.json``."""
    entry = {"json": json_file, "npz": npz_file, "time_step": doc["plant"]["time_step"],
             "num_steps": doc["recording"]["num_steps"], "nq": doc["plant"]["nq"], "nv": doc["plant"]["nv"]}
    if "performance" in doc:
        entry["drake_wall_time_per_step_s"] = doc["performance"]["wall_time_per_step_s"]
    return entry
