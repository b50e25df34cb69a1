"""Stage 1 on the device: A = M + h·diag(D) and v* from A (v* − v₀) = h·k (docs/formulation.md § Free motion).

Counterpart of :mod:`sap_ref.free_motion`. ``k = −(C v₀ − τ_g − Σ J_bᵀ F_b) − D v₀ + joint_f +
u_explicit`` with ``u_explicit`` the effort-clamped ``joint_act`` of undriven DOFs. With
``precision="fp32"`` A and h·k are rounded to float32 and the Cholesky runs in float32;
``v* = v₀ + cast₆₄(Δv₃₂)``, exactly as sap_ref.
"""

from __future__ import annotations

import warp as wp

from . import blocked_cholesky, linear_solve
from .launch import launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["free_motion_rhs", "solve_free_motion", "cast_matrix", "zero_kinematic_rhs", "keep_kinematic_velocity"]


@wp.kernel
def _free_motion_rhs(joint_damping: wp.array2d(dtype=wp.float64), joint_effort_limit: wp.array2d(dtype=wp.float64),
                     joint_target_ke: wp.array2d(dtype=wp.float64), joint_target_kd: wp.array2d(dtype=wp.float64),
                     nv: int, n_pad: int, dt: wp.float64,
                     tau_in: wp.array2d(dtype=wp.float64), v0_in: wp.array2d(dtype=wp.float64),
                     joint_f_in: wp.array2d(dtype=wp.float64), joint_act_in: wp.array2d(dtype=wp.float64),
                     rhs_out: wp.array3d(dtype=wp.float64)):
    """One thread per (world, row of the padded system): h·k_i, 0 on the padding."""
    world, i = wp.tid()
    if i < nv:
        u = wp.float64(0.0)
        if joint_target_ke[world, i] == wp.float64(0.0) and joint_target_kd[world, i] == wp.float64(0.0):
            e = joint_effort_limit[world, i]
            u = wp.clamp(joint_act_in[world, i], -e, e)
        k = -tau_in[world, i] - joint_damping[world, i] * v0_in[world, i] + joint_f_in[world, i] + u
        rhs_out[world, i, 0] = dt * k
    else:
        rhs_out[world, i, 0] = wp.float64(0.0)


@wp.kernel
def _cast_3d(src: wp.array3d(dtype=wp.float64), dst: wp.array3d(dtype=wp.float32)):
    w, i, j = wp.tid()
    dst[w, i, j] = wp.float32(src[w, i, j])


@wp.kernel
def _add_increment_f64(v0_in: wp.array2d(dtype=wp.float64), dv_in: wp.array3d(dtype=wp.float64),
                       v_out: wp.array2d(dtype=wp.float64)):
    w, i = wp.tid()
    v_out[w, i] = v0_in[w, i] + dv_in[w, i, 0]


@wp.kernel
def _add_increment_f32(v0_in: wp.array2d(dtype=wp.float64), dv_in: wp.array3d(dtype=wp.float32),
                       v_out: wp.array2d(dtype=wp.float64)):
    w, i = wp.tid()
    v_out[w, i] = v0_in[w, i] + wp.float64(dv_in[w, i, 0])


@wp.kernel
def _zero_kinematic_rhs(dof_kinematic: wp.array(dtype=int), rhs_out: wp.array3d(dtype=wp.float64)):
    world, i = wp.tid()
    if dof_kinematic[i] != 0:
        rhs_out[world, i, 0] = wp.float64(0.0)


@wp.kernel
def _keep_kinematic_velocity(dof_kinematic: wp.array(dtype=int), v0_in: wp.array2d(dtype=wp.float64),
                             v_star_out: wp.array2d(dtype=wp.float64)):
    world, i = wp.tid()
    if dof_kinematic[i] != 0:
        v_star_out[world, i] = v0_in[world, i]


def zero_kinematic_rhs(m, rhs) -> None:
    """Launch: ``h·k = 0`` on a kinematic body's DOFs (no force moves them; sap_ref.free_motion)."""
    launch_threads(_zero_kinematic_rhs, dim=(m.num_worlds, m.nv), device=m.device, inputs=[m.dof_kinematic],
                   outputs=[rhs])


def keep_kinematic_velocity(m, v0, v_star) -> None:
    """Launch: ``v* = v₀`` on a kinematic body's DOFs (their prescribed velocity)."""
    launch_threads(_keep_kinematic_velocity, dim=(m.num_worlds, m.nv), device=m.device, inputs=[m.dof_kinematic, v0],
                   outputs=[v_star])


def cast_matrix(src, dst) -> None:
    """Launch: float64 → float32 copy of a (W, n, m) array (fl₃₂ rounding)."""
    launch_threads(_cast_3d, dim=src.shape, device=src.device, inputs=[src], outputs=[dst])


def free_motion_rhs(m, dt, tau, v0, joint_f, joint_act, rhs) -> None:
    """Launch: ``rhs = h·k`` padded, (W, n_pad, 1)."""
    launch_threads(_free_motion_rhs, dim=(m.num_worlds, rhs.shape[1]), device=m.device,
                   inputs=[*(m.params.array(k) for k in ("joint_damping", "joint_effort_limit", "joint_target_ke",
                                                         "joint_target_kd")),
                   m.nv, rhs.shape[1], wp.float64(dt), tau, v0, joint_f, joint_act], outputs=[rhs])


def solve_free_motion(A, rhs, v0, v_star, active, scratch, precision: str, matrix_free: bool = False) -> None:
    """``v* = v₀ + A⁻¹ rhs`` per active world, at ``precision``: Cholesky, or PCR on A·p
    products when ``matrix_free`` (``matrixfree_representation``).

    ``scratch`` holds the solver's buffers: ``dv64`` and ``L64`` (Cholesky) or ``pcr`` (a PCR
    work struct); for fp32 also ``A32``/``rhs32``/``dv32`` and ``L32`` (Cholesky).
    """
    W, nv = v0.shape
    if matrix_free:  # per-step counts (not reported; kept bounded)
        scratch["pcr"].iterations.zero_()
        scratch["pcr"].residual.zero_()
    if precision == "fp32":
        cast_matrix(A, scratch["A32"])
        cast_matrix(rhs, scratch["rhs32"])
        if matrix_free:
            linear_solve.pcr(scratch["A32"], scratch["rhs32"], scratch["dv32"], active, scratch["pcr"], nv)
        else:
            blocked_cholesky.solve(scratch["A32"], scratch["rhs32"], scratch["dv32"], active, scratch["L32"])
        launch_threads(_add_increment_f32, dim=(W, nv), device=A.device, inputs=[v0, scratch["dv32"]], outputs=[v_star])
    else:
        if matrix_free:
            linear_solve.pcr(A, rhs, scratch["dv64"], active, scratch["pcr"], nv)
        else:
            blocked_cholesky.solve(A, rhs, scratch["dv64"], active, scratch["L64"])
        launch_threads(_add_increment_f64, dim=(W, nv), device=A.device, inputs=[v0, scratch["dv64"]], outputs=[v_star])
