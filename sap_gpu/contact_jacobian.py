"""Stage 2 for contacts on the device: frames, points, Jacobian rows, weights, R and v̂.

Counterpart of :mod:`sap_ref.contact_jacobian`, one thread per (world, contact slot). The Jacobian row block of
contact c (rows 3c, 3c+1, 3c+2 = t₁, t₂, n) is ``R_WCᵀ [J_v,1(p₁) − J_v,0(p₀)]``; a body's point
Jacobian column for DOF k on its path to the root is ``S_v,k + S_ω,k × (p − p_k)`` with p_k the
origin of the joint's child body. Weights, R and v̂ are computed in the scalar type of
``sap_contact_weight_precision`` (kernels built per type) and stored as float64. The
Hunt–Crossley data of a ``lagged`` / ``similar`` step is constraint data, built in
:func:`sap_gpu.constraints.hunt_crossley_data` as sap_ref builds it in :mod:`sap_ref.constraints`.
The point Jacobians the rows are made of are :mod:`sap_gpu.kinematics`'.
"""

import math

import warp as wp

from sap_common.constants import WEIGHT_FLOOR

from .kinematics import add_point_jacobian
from .launch import built_once, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["contact_geometry", "split_kinematic", "contact_weights", "WEIGHT_FLOOR"]

# 4π², computed here in float64: arithmetic between constants inside a Warp kernel is float32.
FOUR_PI2 = 4.0 * math.pi * math.pi


@wp.func
def contact_frame(u: wp.vec3d) -> wp.mat33d:
    """Columns (t̂₁, t̂₂, n̂) with Drake's ``MakeFromOneUnitVector`` tangents.

    docs/formulation.md § Contact frame and Jacobian. With i the axis of u's smallest component
    and (i, j, k) cyclic: x = r·(u_j e_k − u_k e_j), y = root·e_i + s·(u_j e_j + u_k e_k), root =
    √(1 − u_i²), r = 1/root, s = −u_i/root. Written out per i, so that no vector is indexed at
    run time (on CUDA that puts the vectors in local memory, a stack).
    """
    zero = wp.float64(0.0)
    i = int(0)
    smallest = wp.abs(u[0])
    if wp.abs(u[1]) < smallest:
        i = 1
        smallest = wp.abs(u[1])
    if wp.abs(u[2]) < smallest:
        i = 2
    ui = u[0]
    if i == 1:
        ui = u[1]
    elif i == 2:
        ui = u[2]
    root = wp.sqrt(wp.float64(1.0) - ui * ui)
    r = wp.float64(1.0) / root
    s = -ui / root
    x = wp.vec3d(zero, -r * u[2], r * u[1])  # i = 0: (j, k) = (1, 2)
    y = wp.vec3d(root, s * u[1], s * u[2])
    if i == 1:  # (j, k) = (2, 0)
        x = wp.vec3d(r * u[2], zero, -r * u[0])
        y = wp.vec3d(s * u[0], root, s * u[2])
    elif i == 2:  # (j, k) = (0, 1)
        x = wp.vec3d(-r * u[1], r * u[0], zero)
        y = wp.vec3d(s * u[0], s * u[1], root)
    return wp.mat33d(x[0], y[0], u[0], x[1], y[1], u[1], x[2], y[2], u[2])


@wp.func
def midpoint_weight(k0: wp.float64, k1: wp.float64) -> wp.float64:
    """α₀ = k₀/(k₀+k₁); ½ for 0/0 and ∞/∞; 1 (or 0) for ∞ against a finite stiffness."""
    inf0 = wp.isinf(k0)
    inf1 = wp.isinf(k1)
    if inf0 and not inf1:
        return wp.float64(1.0)
    if inf1 and not inf0:
        return wp.float64(0.0)
    if inf0 or k0 + k1 <= wp.float64(0.0):
        return wp.float64(0.5)
    return k0 / (k0 + k1)


@wp.kernel
def _contact_geometry(
    body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
    nv: int, midpoint: int,
    count_in: wp.array(dtype=int), body0_in: wp.array2d(dtype=int), body1_in: wp.array2d(dtype=int),
    x0_in: wp.array2d(dtype=wp.vec3d), x1_in: wp.array2d(dtype=wp.vec3d), normal_in: wp.array2d(dtype=wp.vec3d),
    ke0_in: wp.array2d(dtype=wp.float64), ke1_in: wp.array2d(dtype=wp.float64),
    mu_in: wp.array2d(dtype=wp.float64),
    body_X_in: wp.array2d(dtype=wp.transformd), dof_S_in: wp.array2d(dtype=wp.spatial_vectord),
    R_WC_out: wp.array2d(dtype=wp.mat33d), p0_out: wp.array2d(dtype=wp.vec3d), p1_out: wp.array2d(dtype=wp.vec3d),
    J_out: wp.array3d(dtype=wp.float64), count_out: wp.array(dtype=int), mu_out: wp.array2d(dtype=wp.float64),
):
    # one thread per contact slot (and one for a world of no slots): the Newton problem's copies
    # of the count and of every slot's μ, then the slot's frame, points and rows; slots past the
    # world's count return
    world, c = wp.tid()
    if c == 0:
        count_out[world] = count_in[world]
    if c >= mu_in.shape[1]:
        return
    mu_out[world, c] = mu_in[world, c]
    if c >= count_in[world]:
        return
    R = contact_frame(normal_in[world, c])
    R_WC_out[world, c] = R
    p0 = x0_in[world, c]
    p1 = x1_in[world, c]
    if midpoint != 0:
        a0 = midpoint_weight(ke0_in[world, c], ke1_in[world, c])
        p0 = a0 * p0 + (wp.float64(1.0) - a0) * p1
        p1 = p0
    p0_out[world, c] = p0
    p1_out[world, c] = p1
    for a in range(3):
        for k in range(nv):
            J_out[world, 3 * c + a, k] = wp.float64(0.0)
    add_point_jacobian(world, body1_in[world, c], p1, R, wp.float64(1.0), 3 * c, body_parent, body_joint,
                       joint_qd_start, body_X_in, dof_S_in, J_out)
    add_point_jacobian(world, body0_in[world, c], p0, R, wp.float64(-1.0), 3 * c, body_parent, body_joint,
                       joint_qd_start, body_X_in, dof_S_in, J_out)


@built_once()
def _weights_kernel(T):
    V3 = wp.types.vector(3, T)
    M33 = wp.types.matrix((3, 3), T)

    @wp.kernel(enable_backward=False, module="unique")
    def contact_weights_kernel(
        body_mass: wp.array2d(dtype=wp.float64), body_com: wp.array2d(dtype=wp.vec3d),
        body_inertia_inv: wp.array2d(dtype=wp.mat33d), body_static: wp.array(dtype=int), nv: int,
        delassus: int, dt: wp.float64, beta: wp.float64, sigma: wp.float64,
        count_in: wp.array(dtype=int), body0_in: wp.array2d(dtype=int), body1_in: wp.array2d(dtype=int),
        phi0_in: wp.array2d(dtype=wp.float64), ke_in: wp.array2d(dtype=wp.float64),
        tau_in: wp.array2d(dtype=wp.float64), A_in: wp.array3d(dtype=wp.float64),
        body_X_in: wp.array2d(dtype=wp.transformd), R_WC_in: wp.array2d(dtype=wp.mat33d),
        p0_in: wp.array2d(dtype=wp.vec3d), p1_in: wp.array2d(dtype=wp.vec3d), J_in: wp.array3d(dtype=wp.float64),
        w_out: wp.array2d(dtype=wp.float64), R_out: wp.array2d(dtype=wp.vec3d), v_hat_out: wp.array2d(dtype=wp.float64),
    ):
        world, c = wp.tid()  # one thread per contact slot; slots past the world's count return
        if c >= count_in[world]:
            return
        w = T(0.0)
        if delassus != 0:  # ‖J diag(A)⁻¹ Jᵀ‖_F / 3
            W = M33()
            for k in range(nv):
                inv_a = T(1.0) / T(A_in[world, k, k])
                for i in range(3):
                    for j in range(3):
                        W[i, j] = W[i, j] + T(J_in[world, 3 * c + i, k]) * inv_a * T(J_in[world, 3 * c + j, k])
            s = T(0.0)
            for i in range(3):
                for j in range(3):
                    s = s + W[i, j] * W[i, j]
            w = wp.sqrt(s) / T(3.0)
        else:  # ⅓ Σ_c Σ_b 1/m_b + (R_bᵀ(r × c))ᵀ I_b⁻¹ (R_bᵀ(r × c))
            for side in range(2):
                b = body0_in[world, c]
                p = p0_in[world, c]
                if side == 1:
                    b = body1_in[world, c]
                    p = p1_in[world, c]
                if b < 0:
                    continue
                if body_static[b] != 0 or body_mass[world, b] == wp.float64(0.0):
                    continue
                X = body_X_in[world, b]
                Rb = wp.quat_to_matrix(wp.transform_get_rotation(X))
                r = p - wp.transform_point(X, body_com[world, b])
                Rbt = M33()
                I_inv = M33()
                for i in range(3):
                    for j in range(3):
                        Rbt[i, j] = T(Rb[j, i])
                        I_inv[i, j] = T(body_inertia_inv[world, b][i, j])
                for axis in range(3):
                    cw = wp.cross(r, wp.vec3d(R_WC_in[world, c][0, axis], R_WC_in[world, c][1, axis],
                                              R_WC_in[world, c][2, axis]))
                    arm = Rbt * V3(T(cw[0]), T(cw[1]), T(cw[2]))
                    w = w + T(1.0) / T(body_mass[world, b]) + wp.dot(arm, I_inv * arm)
            w = w / T(3.0)
        w = wp.max(w, T(WEIGHT_FLOOR))
        h = T(dt)
        tau = T(tau_in[world, c])
        R_n = T(beta) * T(beta) / T(FOUR_PI2) * w
        stiffness = T(ke_in[world, c])
        if not wp.isinf(stiffness):
            R_n = wp.max(R_n, T(1.0) / (h * stiffness * (h + tau)))
        R_t = T(sigma) * w
        w_out[world, c] = wp.float64(w)
        R_out[world, c] = wp.vec3d(wp.float64(R_t), wp.float64(R_t), wp.float64(R_n))
        v_hat_out[world, c] = wp.float64(-T(phi0_in[world, c]) / (h + tau))

    return contact_weights_kernel


@wp.kernel(enable_backward=False)
def _split_kinematic(dof_kinematic: wp.array(dtype=int), nv: int, count_in: wp.array(dtype=int),
                     v0_in: wp.array2d(dtype=wp.float64), J_inout: wp.array3d(dtype=wp.float64),
                     vc_kin_out: wp.array2d(dtype=wp.vec3d)):
    """One thread per (world, contact slot): vc_kin = J_kin v₀ of its 3 rows, then J's kinematic
    columns zeroed (J_dyn)."""
    world, c = wp.tid()
    if c >= count_in[world]:
        return
    b = wp.vec3d()
    for i in range(3):
        s = wp.float64(0.0)
        for k in range(nv):
            if dof_kinematic[k] != 0:
                s += J_inout[world, 3 * c + i, k] * v0_in[world, k]
                J_inout[world, 3 * c + i, k] = wp.float64(0.0)
        b[i] = s
    vc_kin_out[world, c] = b


def split_kinematic(m, contacts, v0, J, vc_kin) -> None:
    """Launch: the contacts' known velocity of the kinematic DOFs ``vc_kin = J_kin v₀ (W, C)`` and
    J with those columns zeroed (sap_ref.contact_jacobian.split_kinematic); one thread per
    (world, contact slot)."""
    launch_threads(_split_kinematic, dim=(m.num_worlds, vc_kin.shape[1]), device=m.device,
                   inputs=[m.dof_kinematic, m.nv, contacts.count, v0], outputs=[J, vc_kin])


def contact_geometry(m, contacts, midpoint: bool, body_X, dof_S, R_WC, p0, p1, J, count, mu) -> None:
    """Launch: contact frames, the points J measures, and the Jacobian rows ``J (W, 3C, nv)``; one
    thread per (world, contact slot), at least one per world. Also ``count`` = ``contacts.count``
    and ``mu`` = ``contacts.mu`` (the Newton problem's copies)."""
    launch_threads(_contact_geometry, dim=(m.num_worlds, max(R_WC.shape[1], 1)), device=m.device,
                   inputs=[m.body_parent, m.body_joint, m.joint_qd_start, m.nv, int(midpoint), contacts.count,
                   contacts.body0, contacts.body1, contacts.x0, contacts.x1, contacts.normal, contacts.ke0,
                   contacts.ke1, contacts.mu, body_X, dof_S], outputs=[R_WC, p0, p1, J, count, mu])


def contact_weights(m, contacts, delassus: bool, precision: str, dt, beta, sigma, A, body_X, R_WC, p0, p1, J,
                    w, R, v_hat) -> None:
    """Launch: weights ``w``, regularization ``R = (σw, σw, R_n)`` and normal bias ``v̂`` per contact;
    one thread per (world, contact slot)."""
    T = wp.float32 if precision == "fp32" else wp.float64
    p = m.params.array
    launch_threads(_weights_kernel(T), dim=(m.num_worlds, w.shape[1]), device=m.device, inputs=[p("body_mass"),
                   p("body_com"), p("body_inertia_inv"), m.body_static, m.nv, int(delassus), wp.float64(dt),
                   wp.float64(beta),
                   wp.float64(sigma), contacts.count, contacts.body0, contacts.body1, contacts.phi0, contacts.ke,
                   contacts.tau_d, A, body_X, R_WC, p0, p1, J], outputs=[w, R, v_hat])
