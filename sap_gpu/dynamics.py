"""Mass matrix (CRBA) and generalized forces (RNEA), one block of lanes per world, float64.

Each kernel walks the tree level by level (``GpuModel.level_start``), the bodies of a level
over the block's lanes with a block barrier between levels; a body adds its children's
composite inertias or wrenches itself, in the order the one-thread-per-world walk added them
(``GpuModel.body_children``), and each entry of A is one lane's, so the results are the bits
of that walk.

Counterpart of :mod:`sap_ref.dynamics`. From the poses ``body_X``, twists ``body_V`` and motion
subspaces ``dof_S`` of :mod:`sap_gpu.kinematics`:

* CRBA: composite inertias at body origins, ``M_kl = S_lᵀ (Ic_c S_k)`` moved up the tree;
  written padded into ``(n_pad, n_pad)`` with the identity on the padding.
* RNEA with q̈ = 0 and the world accelerating at −g gives ``C(q,v)v − τ_g − Σ J_bᵀ F_b``
  (external wrenches subtracted per body before the backward pass). Accelerations are the
  classical ones of each body origin; an axis a fixed in a frame turning at Ω has ȧ = Ω × a
  (Ω = ω_parent, plus the preceding angular axes for a D6 axis), so with r = p_C − p_P,
  d = p_C − p_Mo:
      ω̇_C = ω̇_P + Σ_k (Ω_k × a_k) qd_k
      a_C = a_P + ω̇_P × r + ω_P × (v_C − v_P) + Σ_k ṡ_k qd_k,
      ṡ_k = (Ω_k × a_k) × d + a_k × (ω_C × d)   (angular DOF),   ṡ_k = Ω_k × l_k (linear DOF).
"""

from __future__ import annotations

import warp as wp

from .blocked_cholesky import block_sync
from .kinematics import D6, DISTANCE, FREE, PRISMATIC, twist_v, twist_w
from .launch import launch_blocks, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["mass_matrix", "identity_kinematic_block", "generalized_forces"]


@wp.func
def wrench(t: wp.vec3d, f: wp.vec3d) -> wp.spatial_vectord:
    return wp.spatial_vectord(t[0], t[1], t[2], f[0], f[1], f[2])


@wp.func
def shift_wrench(W: wp.spatial_vectord, r: wp.vec3d) -> wp.spatial_vectord:
    """The same wrench about a point r before its point: τ ← τ + r × f."""
    f = twist_v(W)
    return wrench(twist_w(W) + wp.cross(r, f), f)


@wp.func
def skew(v: wp.vec3d) -> wp.mat33d:
    zero = wp.float64(0.0)
    return wp.mat33d(zero, -v[2], v[1], v[2], zero, -v[0], -v[1], v[0], zero)


@wp.func
def spatial_inertia(mass: wp.float64, c: wp.vec3d, I_C: wp.mat33d) -> wp.spatial_matrixd:
    """About the body origin, world axes: [[I_C + m[c][c]ᵀ, m[c]], [m[c]ᵀ, m·1]] (c = R·com)."""
    C = skew(c)
    top = I_C + mass * C * wp.transpose(C)
    mC = mass * C
    mCt = wp.transpose(mC)
    S = wp.spatial_matrixd()
    for i in range(3):
        for j in range(3):
            S[i, j] = top[i, j]
            S[i, j + 3] = mC[i, j]
            S[i + 3, j] = mCt[i, j]
        S[i + 3, i + 3] = mass
    return S


@wp.func
def shift_matrix(r: wp.vec3d) -> wp.spatial_matrixd:
    """T(r): a twist at A to the same motion at A + r (v ← v + ω × r = v − [r]ω)."""
    T = wp.identity(n=6, dtype=wp.float64)
    R = skew(r)
    for i in range(3):
        for j in range(3):
            T[i + 3, j] = -R[i, j]
    return T


@wp.func(inline=False)
def add_child_inertia(Ic_scratch: wp.array2d(dtype=wp.spatial_matrixd), body_X_in: wp.array2d(dtype=wp.transformd),
                      world: int, c: int, ch: int):
    """Ic_c ← Ic_c + Tᵀ Ic_ch T (child ch's composite inertia moved to c's origin).

    Out of line on purpose: inlined into the loop over c's children, the compiler keeps Ic_c (36
    float64) in registers from one child to the next beside the product's operands, and the
    kernel needs far more registers
    (docs/benchmarks.md § Registers behind the code's choices)."""
    T = shift_matrix(wp.transform_get_translation(body_X_in[world, ch])
                     - wp.transform_get_translation(body_X_in[world, c]))
    Ic_scratch[world, c] = Ic_scratch[world, c] + wp.transpose(T) * Ic_scratch[world, ch] * T


@wp.kernel(enable_backward=False, module="unique")
def _mass_matrix(
    body_mass: wp.array2d(dtype=wp.float64), body_com: wp.array2d(dtype=wp.vec3d),
    body_inertia: wp.array2d(dtype=wp.mat33d), body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int),
    body_children: wp.array(dtype=int), body_child_start: wp.array(dtype=int),
    joint_child: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int), joint_order: wp.array(dtype=int),
    level_start: wp.array(dtype=int), level_count: int, dof_joint: wp.array(dtype=int),
    joint_armature: wp.array2d(dtype=wp.float64), joint_damping: wp.array2d(dtype=wp.float64),
    joint_count: int, nv: int, n_pad: int, dt: wp.float64,
    body_X_in: wp.array2d(dtype=wp.transformd), dof_S_in: wp.array2d(dtype=wp.spatial_vectord),
    Ic_scratch: wp.array2d(dtype=wp.spatial_matrixd), A_out: wp.array3d(dtype=wp.float64),
):
    """CRBA, one block per world: body inertias over the lanes; composite inertias level by level,
    deepest first, each body adding its children in the order of a children-before-parents pass
    over ``joint_order`` (``body_children``); then the entries of A, one lane per DOF."""
    world, lane = wp.tid()
    bd = wp.block_dim()
    zero = wp.float64(0.0)
    for k in range(lane, joint_count, bd):
        c = joint_child[joint_order[k]]
        R = wp.quat_to_matrix(wp.transform_get_rotation(body_X_in[world, c]))
        Ic_scratch[world, c] = spatial_inertia(body_mass[world, c], R * body_com[world, c],
                                                R * body_inertia[world, c] * wp.transpose(R))
    for i in range(n_pad):  # lanes along a row: neighbouring lanes store neighbouring entries
        for j in range(lane, n_pad, bd):
            A_out[world, i, j] = zero
    block_sync(lane)
    for level_up in range(level_count):  # deepest level first: a body's children are complete
        level = level_count - 1 - level_up
        for k in range(level_start[level] + lane, level_start[level + 1], bd):
            c = joint_child[joint_order[k]]
            for u in range(body_child_start[c], body_child_start[c + 1]):
                add_child_inertia(Ic_scratch, body_X_in, world, c, body_children[u])
        block_sync(lane)
    for kd in range(lane, nv, bd):  # column kd of M: its own joint's DOFs from kd on, then up the tree
        j = dof_joint[kd]
        c = joint_child[j]
        F = Ic_scratch[world, c] * dof_S_in[world, kd]
        for ld in range(kd, joint_qd_start[j + 1]):
            Mkl = wp.dot(dof_S_in[world, ld], F)
            A_out[world, kd, ld] = Mkl
            A_out[world, ld, kd] = Mkl
        b = c
        while body_parent[b] >= 0:
            a = body_parent[b]
            F = shift_wrench(F, wp.transform_get_translation(body_X_in[world, b])
                             - wp.transform_get_translation(body_X_in[world, a]))
            i = body_joint[a]
            for ld in range(joint_qd_start[i], joint_qd_start[i + 1]):
                Mkl = wp.dot(dof_S_in[world, ld], F)
                A_out[world, kd, ld] = Mkl
                A_out[world, ld, kd] = Mkl
            b = a
    block_sync(lane)
    for i in range(lane, nv, bd):
        A_out[world, i, i] = A_out[world, i, i] + joint_armature[world, i] + dt * joint_damping[world, i]
    for i in range(nv + lane, n_pad, bd):
        A_out[world, i, i] = wp.float64(1.0)


@wp.kernel(enable_backward=False, module="unique")
def _generalized_forces(
    body_mass: wp.array2d(dtype=wp.float64), body_com: wp.array2d(dtype=wp.vec3d),
    body_inertia: wp.array2d(dtype=wp.mat33d), body_parent: wp.array(dtype=int),
    body_children: wp.array(dtype=int), body_child_start: wp.array(dtype=int),
    joint_type: wp.array(dtype=int), joint_parent: wp.array(dtype=int), joint_child: wp.array(dtype=int),
    joint_X_p: wp.array(dtype=wp.transformd), joint_X_c: wp.array(dtype=wp.transformd),
    joint_qd_start: wp.array(dtype=int), joint_lin_count: wp.array(dtype=int), joint_order: wp.array(dtype=int),
    level_start: wp.array(dtype=int), level_count: int, body_count: int, gravity_in: wp.array(dtype=wp.vec3d),
    body_X_in: wp.array2d(dtype=wp.transformd), body_V_in: wp.array2d(dtype=wp.spatial_vectord),
    dof_S_in: wp.array2d(dtype=wp.spatial_vectord), joint_qd_in: wp.array2d(dtype=wp.float64),
    body_f_in: wp.array2d(dtype=wp.spatial_vectord),
    acc_scratch: wp.array2d(dtype=wp.spatial_vectord), wrench_scratch: wp.array2d(dtype=wp.spatial_vectord),
    tau_out: wp.array2d(dtype=wp.float64),
):
    """tau = C(q,v)v − τ_g − Σ J_bᵀ F_b for every DOF (RNEA, q̈ = 0, base acceleration −g), one
    block per world: accelerations level by level from the roots, body wrenches over the lanes,
    then level by level from the leaves each body adds its children's wrenches (in the order of
    a children-before-parents pass over ``joint_order``) and projects the sum on its joint's DOFs."""
    world, lane = wp.tid()
    bd = wp.block_dim()
    zero = wp.float64(0.0)
    zero3 = wp.vec3d(zero, zero, zero)
    qd = joint_qd_in[world]
    gravity = gravity_in[world]
    for level in range(level_count):
        for k in range(level_start[level] + lane, level_start[level + 1], bd):
            j = joint_order[k]
            jt = joint_type[j]
            c = joint_child[j]
            p = joint_parent[j]
            if jt == FREE or jt == DISTANCE:
                acc_scratch[world, c] = wp.spatial_vectord(zero, zero, zero, -gravity[0], -gravity[1], -gravity[2])
                continue
            w_P = zero3
            v_P = zero3
            wd_P = zero3
            a_P = -gravity
            p_P = zero3
            if p >= 0:
                w_P = twist_w(body_V_in[world, p])
                v_P = twist_v(body_V_in[world, p])
                wd_P = twist_w(acc_scratch[world, p])
                a_P = twist_v(acc_scratch[world, p])
                p_P = wp.transform_get_translation(body_X_in[world, p])
            p_C = wp.transform_get_translation(body_X_in[world, c])
            p_Mo = wp.transform_point(body_X_in[world, c], wp.transform_get_translation(joint_X_c[j]))
            d = p_C - p_Mo
            w_C = twist_w(body_V_in[world, c])
            v_C = twist_v(body_V_in[world, c])
            wd_C = wd_P
            a_C = a_P + wp.cross(wd_P, p_C - p_P) + wp.cross(w_P, v_C - v_P)
            Omega = w_P
            ds = joint_qd_start[j]
            for kd in range(ds, joint_qd_start[j + 1]):
                a = twist_w(dof_S_in[world, kd])
                l = twist_v(dof_S_in[world, kd])
                is_linear = jt == PRISMATIC or (jt == D6 and kd - ds < joint_lin_count[j])
                if is_linear:
                    a_C = a_C + wp.cross(Omega, l) * qd[kd]
                else:
                    a_dot = wp.cross(Omega, a)
                    wd_C = wd_C + a_dot * qd[kd]
                    a_C = a_C + (wp.cross(a_dot, d) + wp.cross(a, wp.cross(w_C, d))) * qd[kd]
                    if jt == D6:  # later D6 axes turn with this one
                        Omega = Omega + a * qd[kd]
            acc_scratch[world, c] = wp.spatial_vectord(wd_C[0], wd_C[1], wd_C[2], a_C[0], a_C[1], a_C[2])
        block_sync(lane)  # this level's accelerations stored before the next level reads them
    for b in range(lane, body_count, bd):
        R = wp.quat_to_matrix(wp.transform_get_rotation(body_X_in[world, b]))
        c_W = R * body_com[world, b]
        I_C = R * body_inertia[world, b] * wp.transpose(R)
        w = twist_w(body_V_in[world, b])
        wd = twist_w(acc_scratch[world, b])
        f = body_mass[world, b] * (twist_v(acc_scratch[world, b]) + wp.cross(wd, c_W) + wp.cross(w, wp.cross(w, c_W)))
        wrench_scratch[world, b] = wrench(I_C * wd + wp.cross(w, I_C * w) + wp.cross(c_W, f), f) - body_f_in[world, b]
    block_sync(lane)
    for level_up in range(level_count):  # deepest level first: a body's children are complete
        level = level_count - 1 - level_up
        for k in range(level_start[level] + lane, level_start[level + 1], bd):
            j = joint_order[k]
            c = joint_child[j]
            for u in range(body_child_start[c], body_child_start[c + 1]):
                ch = body_children[u]
                wrench_scratch[world, c] = wrench_scratch[world, c] + shift_wrench(
                    wrench_scratch[world, ch], wp.transform_get_translation(body_X_in[world, ch])
                    - wp.transform_get_translation(body_X_in[world, c]))
            for kd in range(joint_qd_start[j], joint_qd_start[j + 1]):
                tau_out[world, kd] = wp.dot(dof_S_in[world, kd], wrench_scratch[world, c])
        block_sync(lane)


@wp.kernel(enable_backward=False)
def _identity_kinematic_block(dof_kinematic: wp.array(dtype=int), A_out: wp.array3d(dtype=wp.float64)):
    world, i, j = wp.tid()
    if dof_kinematic[i] != 0 or dof_kinematic[j] != 0:
        if i == j:
            A_out[world, i, j] = wp.float64(1.0)
        else:
            A_out[world, i, j] = wp.float64(0.0)


def identity_kinematic_block(m, A) -> None:
    """Launch: the identity in A's rows and columns of kinematic DOFs (never used: v* = v₀ there;
    regular whatever the body's mass; sap_ref.free_motion)."""
    launch_threads(_identity_kinematic_block, dim=(m.num_worlds, m.nv, m.nv), device=m.device,
                   inputs=[m.dof_kinematic], outputs=[A])


def mass_matrix(m, dt, body_X, dof_S, Ic_scratch, A) -> None:
    """Launch: ``A = M(q) + diag(armature) + dt·diag(damping)`` padded to ``A.shape[1]`` (dt = 0: M)."""
    p = m.params.array
    launch_blocks(_mass_matrix, num_worlds=m.num_worlds, device=m.device, inputs=[p("body_mass"), p("body_com"),
                  p("body_inertia"), m.body_parent, m.body_joint, m.body_children, m.body_child_start, m.joint_child,
                  m.joint_qd_start, m.joint_order, m.level_start, m.level_count, m.dof_joint, p("joint_armature"),
                  p("joint_damping"), m.joint_count, m.nv, A.shape[1], wp.float64(dt), body_X, dof_S],
                  outputs=[Ic_scratch, A])


def generalized_forces(m, body_X, body_V, dof_S, joint_qd_sap, body_f_sap, acc_scratch, wrench_scratch, tau) -> None:
    """Launch: ``tau = C(q,v)v − τ_g − Σ_b J_bᵀ F_b`` (``bias_forces`` minus the body wrenches)."""
    p = m.params.array
    launch_blocks(_generalized_forces, num_worlds=m.num_worlds, device=m.device, inputs=[p("body_mass"), p("body_com"),
                  p("body_inertia"), m.body_parent, m.body_children, m.body_child_start, m.joint_type, m.joint_parent,
                  m.joint_child, m.joint_X_p, m.joint_X_c, m.joint_qd_start, m.joint_lin_count, m.joint_order,
                  m.level_start, m.level_count, m.body_count, p("gravity"), body_X, body_V, dof_S, joint_qd_sap,
                  body_f_sap], outputs=[acc_scratch, wrench_scratch, tau])
