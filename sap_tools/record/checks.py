"""Checks written into a Drake recording: the format's convention self-checks (every scene) and
the physics summaries of the reference scenes (``checks``; README, "Scenes").

``convention_self_checks`` verifies the documented conventions on the recorded data: the
position update with Drake's own N(q), the N(q)v formulas of the coordinates table, body poses
and angular velocities recomputed from the joint kinematics, and the contact point as the
stiffness-weighted witness-point average. :data:`SELF_CHECK_LIMIT` is the bar: a recording
whose self-check exceeds it is not written.

``scene_checks`` adds, for the seven reference scenes, the physics numbers their README
section quotes (rest penetration and SAP regime, slip-to-roll time, stop time and drift, limit
approach, energy drift, Dzhanibekov flip time, …), and for every scene the largest dynamics
residual and the number of steps where it exceeds :data:`RESIDUAL_REPORT_LEVEL`.
"""

from __future__ import annotations

import math

import numpy as np

from sap_common import spatial

__all__ = ["SELF_CHECK_LIMIT", "RESIDUAL_REPORT_LEVEL", "convention_self_checks", "scene_checks",
           "hunt_crossley_arrays", "HC_CHECK_KEYS"]

# The conventions hold to round-off (observed ≤ 1e-15 on every reference scene); 1e-9 leaves
# six orders of magnitude for long recordings while any real convention error (a swapped
# quaternion order, a body-frame ω, a COM/origin mix-up) is ≥ 1e-3.
SELF_CHECK_LIMIT = 1e-9
# A step's dynamics residual above this [N·s] is an impulse no port reports (a joint limit):
# SAP's relative tolerance 1e-6 keeps the solver's own residual ≤ 1e-6.
RESIDUAL_REPORT_LEVEL = 1e-4
SELF_CHECK_KEYS = ("max_abs(q[n+1]-q[n]-h*N(q[n])*v[n+1])", "max_abs(Drake N(q)v - documented formula)",
                   "max_abs(body pose from documented joint kinematics - recorded)",
                   "max_abs(body w (and free-body v_WBo) from documented convention - recorded)",
                   "max_abs(p_WC - (kA p_WCa + kB p_WCb)/(kA+kB))")


def _quat_wxyz_rate(q, w):
    """½ (0, w) ⊗ q for q = [qw, qx, qy, qz] (Hamilton product, w in F)."""
    qw, qx, qy, qz = q
    E = np.array([[-qx, -qy, -qz], [qw, qz, -qy], [-qz, qw, qx], [qy, -qx, qw]])
    return 0.5 * E @ w


def _qdot_formula(joint: dict, q, v):
    qs, nq, vs, nv = joint["q_start"], joint["nq"], joint["v_start"], joint["nv"]
    qj, vj = q[qs:qs + nq], v[vs:vs + nv]
    t = joint["type"]
    if t == "quaternion_floating":
        return np.concatenate([_quat_wxyz_rate(qj[:4], vj[:3]), vj[3:]])
    if t == "ball_rpy":
        p, y = qj[1], qj[2]
        cy, sy, cp, sp = math.cos(y), math.sin(y), math.cos(p), math.sin(p)
        wx, wy, wz = vj
        return np.array([(cy * wx + sy * wy) / cp, -sy * wx + cy * wy, wz + sp * (cy * wx + sy * wy) / cp])
    return vj.copy()


def _X(d: dict) -> np.ndarray:
    return spatial.transform(np.asarray(d["p"], float), np.asarray(d["quat_xyzw"], float))


def _X_FM(joint: dict, q) -> np.ndarray:
    qj = q[joint["q_start"]:joint["q_start"] + joint["nq"]]
    t = joint["type"]
    if t == "quaternion_floating":
        quat = np.array([qj[1], qj[2], qj[3], qj[0]])
        return spatial.transform(qj[4:7], quat / np.linalg.norm(quat))
    if t == "revolute":
        return spatial.transform((0, 0, 0), spatial.quat_from_axis_angle(joint["axis"], qj[0]))
    if t == "prismatic":
        return spatial.transform(qj[0] * np.asarray(joint["axis"], float))
    if t == "ball_rpy":
        return spatial.transform((0, 0, 0), spatial.quat_from_rpy(qj))
    return spatial.transform_identity()


def _body_kinematics(doc: dict, q, v):
    """World pose and angular velocity of every body from the joint table, (nb+1, 7), (nb+1, 3)."""
    names = [b["name"] for b in doc["bodies"]]
    X = {"world": spatial.transform_identity()}
    w = {"world": np.zeros(3)}
    pending = list(doc["joints"])
    while pending:
        j = next(j for j in pending if j["parent_body"] in X)
        pending.remove(j)
        X_WF = spatial.transform_compose(X[j["parent_body"]], _X(j["frame_on_parent_F"]["X_PF"]))
        X_WM = spatial.transform_compose(X_WF, _X_FM(j, q))
        X[j["child_body"]] = spatial.transform_compose(X_WM,
                                                       spatial.transform_inverse(_X(j["frame_on_child_M"]["X_CM"])))
        R_WF = spatial.quat_to_matrix(X_WF[3:])
        vj = v[j["v_start"]:j["v_start"] + j["nv"]]
        if j["type"] == "quaternion_floating":
            w[j["child_body"]] = vj[:3].copy()
        elif j["type"] == "revolute":
            w[j["child_body"]] = w[j["parent_body"]] + R_WF @ np.asarray(j["axis"], float) * vj[0]
        elif j["type"] == "ball_rpy":
            w[j["child_body"]] = w[j["parent_body"]] + R_WF @ vj
        else:
            w[j["child_body"]] = w[j["parent_body"]]
    return [X[n] for n in names[1:]], [w[n] for n in names[1:]]


def convention_self_checks(ds, doc: dict, arrays: dict) -> dict:
    """The five convention checks (max absolute errors) over every recorded row."""
    plant = ds.plant
    h = plant.time_step()
    q, v = arrays["q"], arrays["v"]
    ctx = plant.CreateDefaultContext()
    update = formula = pose = omega = 0.0
    free = [j for j in doc["joints"] if j["type"] == "quaternion_floating"]
    body_row = {b["name"]: i for i, b in enumerate(doc["bodies"][1:])}
    for n in range(len(q)):
        plant.SetPositions(ctx, q[n])
        N = np.asarray(plant.MakeVelocityToQDotMap(ctx).toarray()
                       if hasattr(plant.MakeVelocityToQDotMap(ctx), "toarray")
                       else plant.MakeVelocityToQDotMap(ctx))
        if n + 1 < len(q):
            vn = v[n + 1]
            drake_qdot = N @ vn
            update = max(update, float(np.abs(q[n + 1] - q[n] - h * drake_qdot).max(initial=0.0)))
            for j in doc["joints"]:
                s = slice(j["q_start"], j["q_start"] + j["nq"])
                formula = max(formula, float(np.abs(drake_qdot[s] - _qdot_formula(j, q[n], vn)).max(initial=0.0)))
        X, w = _body_kinematics(doc, q[n], v[n])
        for b, (Xb, wb) in enumerate(zip(X, w)):
            rec = arrays["body_pose_W"][n, b]
            quat = Xb[3:] if Xb[6] >= 0 else -Xb[3:]
            pose = max(pose, float(np.abs(Xb[:3] - rec[:3]).max()), float(np.abs(quat - rec[3:]).max()))
            omega = max(omega, float(np.abs(wb - arrays["body_V_W"][n, b, :3]).max()))
        for j in free:
            b = body_row[j["child_body"]]
            omega = max(omega, float(np.abs(v[n, j["v_start"] + 3:j["v_start"] + 6]
                                            - arrays["body_V_W"][n, b, 3:]).max()))
    k = np.array([g["point_contact_stiffness"] for g in doc["geometries"]] or [0.0])
    point = 0.0
    for n in range(len(q)):
        for c in range(int(arrays["contact_count"][n])):
            kA, kB = k[arrays["contact_geom_A"][n, c]], k[arrays["contact_geom_B"][n, c]]
            p = (kA * arrays["contact_p_WCa"][n, c] + kB * arrays["contact_p_WCb"][n, c]) / (kA + kB)
            point = max(point, float(np.abs(arrays["contact_p_WC"][n, c] - p).max()))
    return dict(zip(SELF_CHECK_KEYS, (update, formula, pose, omega, point)))


# ----------------------------------------------------------------------------- Hunt–Crossley data

# Self-checks of a kLagged / kSimilar recording: the recorded impulses against the Hunt–Crossley
# law evaluated at the recorded contact velocities with the recorder's own fe0, n0 and eps_s.
HC_CHECK_KEYS = ("max_abs(h f_n - n(z)) [N s] (Hunt-Crossley normal impulse at the recorded velocities)",
                 "max_abs(h |f_t| - mu n_f |vt|/sqrt(|vt|^2 + eps_s^2)) [N s] (regularized friction)")


def _hc_impulse(z, h, k, d, fe0):
    fe = fe0 + h * k * -z
    damping = 1.0 + d * -z
    return h * fe * damping if fe > 0 and damping > 0 else 0.0


def hunt_crossley_arrays(ds, doc: dict, arrays: dict) -> tuple[dict, dict]:
    """``(arrays, checks)`` of a kLagged / kSimilar recording: each contact's Hunt–Crossley data,
    which pydrake does not expose, computed as Drake's constraint does at the start of the step
    (q_{n−1}, v_{n−1}), and the largest differences between the recorded impulses and the law.

    fe0 = k·depth; vn0 = (J v_{n−1})_z in the contact frame (z from A into B); the Delassus
    estimate w = ‖J diag(A)⁻¹ Jᵀ‖_F/3 with A = M + h diag(D); n0 = (h fe0)₊(1 − d vn0)₊;
    eps_s = max(v_s, μ σ w n0) (σ = 1e-3). The checks evaluate n at z = vₙ (lagged) or
    z = vₙ − μ‖v_t‖_s (similar) with the recorded separation and slip speeds of v_n.
    """
    from pydrake.multibody.tree import BodyIndex, JacobianWrtVariable

    from sap_tools.record.drake import damping_vector

    plant = ds.plant
    h = plant.time_step()
    similar = ds.approximation == "similar"
    sigma = 1e-3
    pairs = {tuple(p["geometries"]): p for p in doc["collision_candidate_pairs"]}
    D = damping_vector(ds)
    N1, C = arrays["contact_depth"].shape
    out = {k: np.zeros((N1, C)) for k in ("contact_hc_fe0", "contact_hc_vn0", "contact_hc_n0", "contact_hc_eps")}
    normal_err = friction_err = 0.0
    ctx = plant.CreateDefaultContext()
    for n in range(1, N1):
        count = int(arrays["contact_count"][n])
        if not count:
            continue
        plant.SetPositions(ctx, arrays["q"][n - 1])
        plant.SetVelocities(ctx, arrays["v"][n - 1])
        inv_a = 1.0 / (np.diag(plant.CalcMassMatrix(ctx)) + h * D)
        for c in range(count):
            pair = pairs[tuple(sorted((int(arrays["contact_geom_A"][n, c]), int(arrays["contact_geom_B"][n, c]))))]
            k, d, mu = pair["k_combined"], pair["hunt_crossley_dissipation_combined"], pair["mu_dynamic_combined"]
            p_WC = arrays["contact_p_WC"][n, c]
            Jv = np.zeros((3, plant.num_velocities()))
            for key, sign in (("contact_body_B", 1.0), ("contact_body_A", -1.0)):
                body = plant.get_body(BodyIndex(int(arrays[key][n, c])))
                if int(body.index()) == 0:
                    continue
                p_BC = plant.CalcPointsPositions(ctx, plant.world_frame(), p_WC, body.body_frame()).ravel()
                Jv += sign * plant.CalcJacobianTranslationalVelocity(ctx, JacobianWrtVariable.kV, body.body_frame(),
                                                                     p_BC, plant.world_frame(), plant.world_frame())
            nhat = -arrays["contact_nhat_BA_W"][n, c]  # the frame's z axis, from A into B
            W = Jv @ (inv_a[:, None] * Jv.T)  # ‖·‖_F is the same in any frame with this z axis
            w = float(np.linalg.norm(W) / 3.0)
            vn0 = float(nhat @ (Jv @ arrays["v"][n - 1]))
            fe0 = k * arrays["contact_depth"][n, c]
            n0 = max(0.0, h * fe0) * max(0.0, 1.0 - d * vn0)
            w_t = max(0.5 * (w + w), np.sqrt(3 * w * w) / np.sqrt(3.0))
            eps = max(ds.stiction_tolerance, mu * (sigma * w_t) * n0)
            for key, value in zip(out, (fe0, vn0, n0, eps)):
                out[key][n, c] = value
            f = arrays["contact_f_Bc_W"][n, c]
            vn, slip = arrays["contact_separation_speed"][n, c], arrays["contact_slip_speed"][n, c]
            soft = np.sqrt(slip * slip + eps * eps) - eps
            z = vn - mu * soft if similar else vn
            nz = _hc_impulse(z, h, k, d, fe0)
            n_friction = nz if similar else n0
            f_n = float(nhat @ f)
            normal_err = max(normal_err, abs(h * f_n - nz))
            friction_err = max(friction_err, abs(h * float(np.linalg.norm(f - f_n * nhat))
                                                 - mu * n_friction * slip / (soft + eps)))
    return out, dict(zip(HC_CHECK_KEYS, (normal_err, friction_err)))


# ----------------------------------------------------------------------------- scene physics


def _free_joint(doc, name=None):
    return next(j for j in doc["joints"] if j["type"] == "quaternion_floating" and (name is None or j["name"] == name))


def _first_time(arrays, mask) -> float | None:
    idx = np.flatnonzero(mask)
    return float(arrays["t"][idx[0]]) if idx.size else None


def _delassus_w(ds, arrays, row: int, contact: int = 0) -> float:
    """SAP's w = ‖J diag(M)⁻¹ Jᵀ‖_F / 3 of one recorded contact at the state of ``row``."""
    from pydrake.multibody.tree import BodyIndex, JacobianWrtVariable

    plant = ds.plant
    ctx = plant.CreateDefaultContext()
    plant.SetPositions(ctx, arrays["q"][row])
    plant.SetVelocities(ctx, arrays["v"][row])
    p_WC = arrays["contact_p_WC"][row, contact]
    J = np.zeros((3, plant.num_velocities()))
    for key, sign in (("contact_body_B", 1.0), ("contact_body_A", -1.0)):
        body = plant.get_body(BodyIndex(int(arrays[key][row, contact])))
        if int(body.index()) == 0:
            continue
        p_BC = plant.CalcPointsPositions(ctx, plant.world_frame(), p_WC, body.body_frame()).ravel()
        J += sign * plant.CalcJacobianTranslationalVelocity(ctx, JacobianWrtVariable.kV, body.body_frame(), p_BC,
                                                            plant.world_frame(), plant.world_frame())
    W = J @ np.diag(1.0 / np.diag(plant.CalcMassMatrix(ctx))) @ J.T
    return float(np.linalg.norm(W) / 3.0)


def _rest_contact(ds, doc, arrays, body: dict, radius: float) -> dict:
    """Rest penetration of a sphere on the ground and SAP's regime (sphere_drop, sphere_slide)."""
    h = doc["plant"]["time_step"]
    g = -doc["plant"]["gravity_W"][2]
    pair = doc["collision_candidate_pairs"][0]
    k, tau = pair["k_combined"], pair["tau_d_combined"]
    m = body["mass"]
    j = _free_joint(doc)
    z = arrays["q"][:, j["q_start"] + 6]
    w = _delassus_w(ds, arrays, len(z) - 1)
    near, compliant = w / (4 * math.pi ** 2), 1.0 / (h * k * (h + tau))
    Rn = max(near, compliant)
    k_eff = 1.0 / (h * (h + tau) * Rn)
    f = float(np.linalg.norm(arrays["contact_f_Bc_W"][-1, 0]))  # |f|: the friction part is ~1e-4 of it
    depth, vn = arrays["contact_depth"][-1, 0], arrays["contact_separation_speed"][-1, 0]
    residual = arrays["dynamics_residual"][:, j["v_start"] + 3:j["v_start"] + 6]
    return {"final_center_z": z[-1], "naive_static_penetration_mg_over_k": m * g / k,
            "sap_delassus_w_at_rest": w, "sap_Rn_near_rigid": near, "sap_Rn_compliant": compliant,
            "sap_regime": "near_rigid" if near > compliant else "compliant", "sap_effective_stiffness": k_eff,
            "sap_predicted_static_penetration": m * g / k_eff, "final_penetration_from_state": radius - z[-1],
            "implied_k_eff_last_step f/(depth0-(h+tau)*vn)": f / (depth - (h + tau) * vn),
            "max_linear_momentum_residual_Ns": float(np.abs(residual).max())}


def _sphere_drop(ds, doc, arrays):
    ball = doc["bodies"][1]
    return _rest_contact(ds, doc, arrays, ball, doc["geometries"][1]["shape"]["radius"])


def _sphere_slide(ds, doc, arrays):
    ball, R = doc["bodies"][1], doc["geometries"][1]["shape"]["radius"]
    out = _rest_contact(ds, doc, arrays, ball, R)
    j = _free_joint(doc)
    v0, vs, qs = arrays["v"][0], j["v_start"], j["q_start"]
    m, I = ball["mass"], ball["inertia_about_com_B"][1][1]
    mu, g = doc["collision_candidate_pairs"][0]["mu_dynamic_combined"], -doc["plant"]["gravity_W"][2]
    slip0 = v0[vs + 3] - R * v0[vs + 1]  # contact-point speed along x: v_x − R ω_y
    in_contact = arrays["contact_count"] > 0
    rolling = in_contact & (arrays["contact_slip_speed"][:, 0] < 1e-3)
    z = arrays["q"][:, qs + 6]
    out.update({
        "slip_to_roll_time": _first_time(arrays, rolling),
        "slip_to_roll_time_analytic": slip0 / (mu * g * (1 + m * R * R / I)),
        "final_vx": arrays["v"][-1, vs + 3],
        "final_vx_analytic_rolling": (m * R * v0[vs + 3] + I * v0[vs + 1]) / (m * R + I / R),
        "final_wz": arrays["v"][-1, vs + 2],
        "max_center_lift_m (SAP gliding hop)": float(z.max() - z[0]),
        "steps_without_contact": int(np.sum(arrays["contact_count"][1:] == 0)),
        "first_step_normal_velocity": arrays["contact_separation_speed"][1, 0],
    })
    return out


def _box_corners_slide(ds, doc, arrays):
    j = _free_joint(doc)
    qs, vs = j["q_start"], j["v_start"]
    v_xy = np.linalg.norm(arrays["v"][:, vs + 3:vs + 5], axis=1)
    stop = int(np.argmax(v_xy < 1e-3))
    p = arrays["q"][:, qs + 4:qs + 7]
    n_final = int(arrays["contact_count"][-1])
    return {
        "stop_time_(|v_xy|<1e-3)": float(arrays["t"][stop]),
        "position_at_stop": p[stop], "final_position": p[-1],
        "drift_after_stop_m": float(np.linalg.norm(p[-1, :2] - p[stop, :2])),  # horizontal
        "max_speed_after_stop": float(v_xy[stop:].max()),
        "final_yaw_rate": arrays["v"][-1, vs + 2],
        "max_lift_m (SAP gliding hop)": float(p[:, 2].max() - p[0, 2]),
        "steps_without_contact": int(np.sum(arrays["contact_count"][1:] == 0)),
        "first_step_normal_velocity": arrays["v"][1, vs + 5],  # the box's vertical velocity after step 1
        "final_penetration_depths": arrays["contact_depth"][-1, :n_final],
    }


def _pendulum_limit(ds, doc, arrays):
    j = doc["joints"][0]
    q = arrays["q"][:, j["q_start"]]
    lower = float(j["position_lower_limits"][0])
    return {"min_angle": q.min(), "max_angle": q.max(), "max_lower_limit_violation_rad": max(0.0, lower - q.min()),
            "first_time_at_lower_limit": _first_time(arrays, q <= lower + 1e-3), "final_q": q[-1]}


def _energy(arrays) -> dict:
    E = arrays["kinetic_energy"] + arrays["potential_energy"]
    return {"energy_initial": E[0], "energy_final": E[-1], "energy_rel_change": (E[-1] - E[0]) / E[0]}


def _double_pendulum(ds, doc, arrays):
    return _energy(arrays)


def _prismatic_pd(ds, doc, arrays):
    j, a = doc["joints"][0], doc["actuation"]["actuators"][0]
    m, g = doc["bodies"][1]["mass"], -doc["plant"]["gravity_W"][2]
    u = arrays["net_actuation"][1:, a["input_start"]]
    return {"final_q": arrays["q"][-1, j["q_start"]],
            "steady_state_q_expected(qd - m g / Kp)": doc["actuation"]["desired_state_input"]["xd"][0]
            - m * g / a["pd_gains"]["p"],
            "max_abs_actuation": float(np.abs(u).max()),
            "steps_at_effort_limit": int(np.sum(np.abs(u) >= a["effort_limit"])),
            "final_actuation": u[-1]}


def _free_spin(ds, doc, arrays):
    body, j = doc["bodies"][1], _free_joint(doc)
    qs, vs = j["q_start"], j["v_start"]
    I_B = np.asarray(body["inertia_about_com_B"], float)
    moments, R_BP = np.linalg.eigh(I_B)
    out = _energy(arrays)

    def frames(row):
        quat = arrays["q"][row, qs:qs + 4]
        R_WB = spatial.quat_to_matrix(np.array([quat[1], quat[2], quat[3], quat[0]]) / np.linalg.norm(quat))
        w = arrays["v"][row, vs:vs + 3]
        return R_WB, w

    R0, w0 = frames(0)
    R_BP = R_BP * np.sign(R_BP.T @ R0.T @ w0)  # principal axes signed so the initial rates are positive
    plant, ctx = ds.plant, ds.plant.CreateDefaultContext()

    def H(row):  # angular momentum about the COM, world frame (Drake's spatial momentum)
        plant.SetPositions(ctx, arrays["q"][row])
        plant.SetVelocities(ctx, arrays["v"][row])
        return plant.CalcSpatialMomentumInWorldAboutPoint(ctx, plant.CalcCenterOfMassPositionInWorld(ctx)).rotational()
    w_P = np.array([R_BP.T @ frames(n)[0].T @ frames(n)[1] for n in range(len(arrays["t"]))])
    norms = np.linalg.norm(arrays["q"][:, qs:qs + 4], axis=1)
    h = doc["plant"]["time_step"]
    w_next = np.linalg.norm(arrays["v"][1:, vs:vs + 3], axis=1)
    out.update({
        "angular_momentum_about_com_initial": H(0), "angular_momentum_about_com_final": H(-1),
        "angular_momentum_rel_change": float(np.linalg.norm(H(-1) - H(0)) / np.linalg.norm(H(0))),
        "quaternion_norm_final": norms[-1],
        "quaternion_norm_predicted_prod_sqrt(1+(h|w_next|/2)^2)": float(np.prod(np.sqrt(1 + (h * w_next / 2) ** 2))
                                                                         * norms[0]),
        "w_principal_initial": w_P[0], "w_principal_final": w_P[-1],
        "flip_time_(intermediate-axis rate changes sign)": _first_time(arrays, np.sign(w_P[:, 1])
                                                                       != np.sign(w_P[0, 1])),
    })
    return out


# name -> (checks, steps of the reference run they describe)
SCENE_CHECKS = {"sphere_drop": (_sphere_drop, 2000), "sphere_slide": (_sphere_slide, 2000),
                "box_corners_slide": (_box_corners_slide, 1500), "pendulum_limit": (_pendulum_limit, 2000),
                "double_pendulum": (_double_pendulum, 3000), "prismatic_pd": (_prismatic_pd, 200),
                "free_spin": (_free_spin, 3000)}


def scene_checks(ds, doc: dict, arrays: dict) -> dict:
    """The scene's physics summary (a reference scene recorded over its reference run's length) and
    the dynamics-residual summary (every recording)."""
    checks, steps = SCENE_CHECKS.get(doc["scene"], (None, None))
    out = dict(checks(ds, doc, arrays)) if checks and len(arrays["t"]) - 1 == steps else {}
    res = np.abs(arrays["dynamics_residual"])
    out["max_abs_dynamics_residual"] = float(res.max(initial=0.0))
    out["steps_with_dynamics_residual_above_1e-4"] = int(np.sum(res.max(axis=1, initial=0.0) > RESIDUAL_REPORT_LEVEL))
    return out
