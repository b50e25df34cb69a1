"""Stages 0 and 5 on the device: the checks of each world's inputs and results, and public ↔ SAP order.

Counterpart of :mod:`sap_ref.boundary` (docs/conventions.md, docs/design.md § Bad input).

* In: :func:`check_inputs` flags a world whose inputs are not finite (NON_FINITE) or whose
  quaternions are rejected (INVALID_QUATERNION); such a world takes no part in the step.
  :func:`joint_arrays_to_sap` and :func:`body_wrenches_to_sap` convert FREE/DISTANCE joint
  velocities and forces and body wrenches to SAP order.
* Out: :func:`select_outputs` flags non-finite results, quaternions the step carried out of
  range and contact overflow; :func:`joint_velocities_to_public` and
  :func:`body_twists_to_public` convert back; :func:`keep_rejected_worlds` gives every rejected
  world its input state back, bit for bit.

The checks and the selection of outputs run one block of lanes per world (lanes over the
world's coordinates, velocities, bodies and quaternions, one block OR of the flags); the
conversions one thread per (world, joint) or (world, body), the restoring of rejected worlds one
per (world, element).

With r = R_WB·com, ``v_O = v_C − ω × r`` and ``τ_O = τ_C + r × f``. With ``pose32`` set
(``use_f64_boundary_pose=False``) r is evaluated in float32 from the rounded pose, as on the host.
"""

from __future__ import annotations

import warp as wp

from sap_common.state import StepStatus

from .blocked_cholesky import block_or_int
from .kinematics import DISTANCE, FREE, quat_norm_ok
from .launch import launch_blocks, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["check_inputs", "joint_arrays_to_sap", "body_wrenches_to_sap", "select_outputs",
           "joint_velocities_to_public", "body_twists_to_public", "keep_rejected_worlds"]

NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
INVALID_QUATERNION = wp.constant(int(StepStatus.INVALID_QUATERNION))
REJECTED = wp.constant(int(StepStatus.NON_FINITE | StepStatus.INVALID_QUATERNION))  # worlds left unchanged
CONTACT_OVERFLOW = wp.constant(int(StepStatus.CONTACT_OVERFLOW))


@wp.func
def com_offset(q: wp.quatd, com: wp.vec3d, pose32: int) -> wp.vec3d:
    """r = R(q/|q|)·com, in float32 arithmetic when ``pose32`` is set; NaN for a rejected quaternion
    (its world is flagged INVALID_QUATERNION and no rotation is invented for it; the converters
    write the whole FREE/DISTANCE segment as NaN then, as sap_ref does)."""
    if quat_norm_ok(q) == 0:
        return wp.vec3d(wp.float64(wp.nan), wp.float64(wp.nan), wp.float64(wp.nan))
    if pose32 != 0:
        q32 = wp.normalize(wp.quatf(wp.float32(q[0]), wp.float32(q[1]), wp.float32(q[2]), wp.float32(q[3])))
        r32 = wp.quat_rotate(q32, wp.vec3f(wp.float32(com[0]), wp.float32(com[1]), wp.float32(com[2])))
        return wp.vec3d(wp.float64(r32[0]), wp.float64(r32[1]), wp.float64(r32[2]))
    return wp.quat_rotate(wp.normalize(q), com)


@wp.kernel
def _joint_arrays_to_sap(joint_type: wp.array(dtype=int), joint_child: wp.array(dtype=int),
                         joint_q_start: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
                         body_com: wp.array2d(dtype=wp.vec3d), qd_public: int, f_public: int, pose32: int,
                         joint_q_in: wp.array2d(dtype=wp.float64), joint_qd_in: wp.array2d(dtype=wp.float64),
                         joint_f_in: wp.array2d(dtype=wp.float64),
                         v0_out: wp.array2d(dtype=wp.float64), joint_f_out: wp.array2d(dtype=wp.float64)):
    """One thread per (world, joint): the joint's DOFs copied, a FREE/DISTANCE segment converted."""
    world, j = wp.tid()
    for i in range(joint_qd_start[j], joint_qd_start[j + 1]):
        v0_out[world, i] = joint_qd_in[world, i]
        joint_f_out[world, i] = joint_f_in[world, i]
    jt = joint_type[j]
    if jt == FREE or jt == DISTANCE:
        qs, ds = joint_q_start[j], joint_qd_start[j]
        quat = wp.quatd(joint_q_in[world, qs + 3], joint_q_in[world, qs + 4], joint_q_in[world, qs + 5],
                        joint_q_in[world, qs + 6])
        r = com_offset(quat, body_com[world, joint_child[j]], pose32)
        if quat_norm_ok(quat) == 0:  # no rotation to convert with: the whole segment is undefined
            r_nan = wp.float64(wp.nan)
            for i in range(6):
                if qd_public != 0:
                    v0_out[world, ds + i] = r_nan
                if f_public != 0:
                    joint_f_out[world, ds + i] = r_nan
            return
        if qd_public != 0:  # [v_C, ω] -> [ω, v_O]
            v_C = wp.vec3d(joint_qd_in[world, ds], joint_qd_in[world, ds + 1], joint_qd_in[world, ds + 2])
            w = wp.vec3d(joint_qd_in[world, ds + 3], joint_qd_in[world, ds + 4], joint_qd_in[world, ds + 5])
            v_O = v_C - wp.cross(w, r)
            for i in range(3):
                v0_out[world, ds + i] = w[i]
                v0_out[world, ds + 3 + i] = v_O[i]
        if f_public != 0:  # [f, τ_C] -> [τ_O, f]
            f = wp.vec3d(joint_f_in[world, ds], joint_f_in[world, ds + 1], joint_f_in[world, ds + 2])
            t = wp.vec3d(joint_f_in[world, ds + 3], joint_f_in[world, ds + 4], joint_f_in[world, ds + 5])
            t_O = t + wp.cross(r, f)
            for i in range(3):
                joint_f_out[world, ds + i] = t_O[i]
                joint_f_out[world, ds + 3 + i] = f[i]


@wp.kernel
def _body_wrenches_to_sap(body_com: wp.array2d(dtype=wp.vec3d), is_public: int, pose32: int,
                          body_X_in: wp.array2d(dtype=wp.transformd), body_f_in: wp.array2d(dtype=wp.spatial_vectord),
                          body_f_out: wp.array2d(dtype=wp.spatial_vectord)):
    """One thread per (world, body)."""
    world, b = wp.tid()
    F = body_f_in[world, b]
    if is_public != 0:  # [f, τ_C] -> [τ_O, f]
        r = com_offset(wp.transform_get_rotation(body_X_in[world, b]), body_com[world, b], pose32)
        f = wp.vec3d(F[0], F[1], F[2])
        t = wp.vec3d(F[3], F[4], F[5]) + wp.cross(r, f)
        F = wp.spatial_vectord(t[0], t[1], t[2], f[0], f[1], f[2])
    body_f_out[world, b] = F


@wp.kernel
def _joint_velocities_to_public(joint_type: wp.array(dtype=int), joint_child: wp.array(dtype=int),
                                joint_q_start: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
                                body_com: wp.array2d(dtype=wp.vec3d), pose32: int,
                                joint_q_in: wp.array2d(dtype=wp.float64), v_in: wp.array2d(dtype=wp.float64),
                                joint_qd_out: wp.array2d(dtype=wp.float64)):
    """One thread per (world, joint): the joint's DOFs copied, a FREE/DISTANCE segment converted."""
    world, j = wp.tid()
    for i in range(joint_qd_start[j], joint_qd_start[j + 1]):
        joint_qd_out[world, i] = v_in[world, i]
    jt = joint_type[j]
    if jt != FREE and jt != DISTANCE:
        return
    qs, ds = joint_q_start[j], joint_qd_start[j]
    quat = wp.quatd(joint_q_in[world, qs + 3], joint_q_in[world, qs + 4], joint_q_in[world, qs + 5],
                    joint_q_in[world, qs + 6])
    r = com_offset(quat, body_com[world, joint_child[j]], pose32)
    if quat_norm_ok(quat) == 0:  # no rotation to convert with: the whole segment is undefined
        for i in range(6):
            joint_qd_out[world, ds + i] = wp.float64(wp.nan)
        return
    w = wp.vec3d(v_in[world, ds], v_in[world, ds + 1], v_in[world, ds + 2])
    v_C = wp.vec3d(v_in[world, ds + 3], v_in[world, ds + 4], v_in[world, ds + 5]) + wp.cross(w, r)
    for i in range(3):
        joint_qd_out[world, ds + i] = v_C[i]
        joint_qd_out[world, ds + 3 + i] = w[i]


@wp.kernel
def _body_twists_to_public(body_com: wp.array2d(dtype=wp.vec3d),
                           body_X_in: wp.array2d(dtype=wp.transformd), body_V_in: wp.array2d(dtype=wp.spatial_vectord),
                           body_qd_out: wp.array2d(dtype=wp.spatial_vectord)):
    """One thread per (world, body)."""
    world, b = wp.tid()
    V = body_V_in[world, b]
    w = wp.vec3d(V[0], V[1], V[2])
    r = wp.quat_rotate(wp.normalize(wp.transform_get_rotation(body_X_in[world, b])), body_com[world, b])
    v_C = wp.vec3d(V[3], V[4], V[5]) + wp.cross(w, r)
    body_qd_out[world, b] = wp.spatial_vectord(v_C[0], v_C[1], v_C[2], w[0], w[1], w[2])


@wp.func
def _rejected_quaternions(quat_coord: wp.array(dtype=int), quat_count: int, q: wp.array(dtype=wp.float64),
                          lane: int) -> int:
    """1 if a BALL/FREE/DISTANCE quaternion of one world's joint_q that this lane checks (every
    ``block_dim``-th from ``lane``) is rejected (quat_norm_ok), else 0."""
    bad = int(0)
    for k in range(lane, quat_count, wp.block_dim()):
        i = quat_coord[k]
        if quat_norm_ok(wp.quatd(q[i], q[i + 1], q[i + 2], q[i + 3])) == 0:
            bad = 1
    return bad


@wp.kernel(enable_backward=False, module="unique")
def _check_inputs(quat_coord: wp.array(dtype=int), quat_count: int, nq: int, nv: int, body_count: int,
                  joint_q: wp.array2d(dtype=wp.float64),
                  joint_qd: wp.array2d(dtype=wp.float64), joint_f: wp.array2d(dtype=wp.float64),
                  joint_act: wp.array2d(dtype=wp.float64), target_pos: wp.array2d(dtype=wp.float64),
                  target_vel: wp.array2d(dtype=wp.float64), body_q: wp.array2d(dtype=wp.transformd),
                  body_qd: wp.array2d(dtype=wp.spatial_vectord), body_f: wp.array2d(dtype=wp.spatial_vectord),
                  params_invalid: wp.array(dtype=int), status: wp.array(dtype=int), done: wp.array(dtype=int),
                  q0_out: wp.array2d(dtype=wp.float64), qd_out: wp.array2d(dtype=wp.float64),
                  act_out: wp.array2d(dtype=wp.float64), target_pos_out: wp.array2d(dtype=wp.float64),
                  target_vel_out: wp.array2d(dtype=wp.float64), body_q_out: wp.array2d(dtype=wp.transformd),
                  body_qd_out: wp.array2d(dtype=wp.spatial_vectord)):
    """A world whose inputs are not finite (NON_FINITE) or whose quaternions are rejected
    (INVALID_QUATERNION) is flagged and takes no part; it is left unchanged, as in sap_ref. The
    step's copies of the inputs it reads (``*_out``: q₀, the state's velocities and body state for
    a rejected world, the actuation and drive targets) are stored on the way.

    One block per world: lanes over coordinates, velocities, bodies and quaternions, each lane
    with its own bits (neighbouring lanes, neighbouring elements: coalesced loads and stores);
    one block OR gives the world's flags, which lane 0 stores."""
    world, lane = wp.tid()
    bd = wp.block_dim()
    flags = int(0)
    for i in range(lane, nq, bd):
        q = joint_q[world, i]
        q0_out[world, i] = q
        if not wp.isfinite(q):
            flags = NON_FINITE
    for i in range(lane, nv, bd):
        qd = joint_qd[world, i]
        act = joint_act[world, i]
        qt = target_pos[world, i]
        vt = target_vel[world, i]
        qd_out[world, i] = qd
        act_out[world, i] = act
        target_pos_out[world, i] = qt
        target_vel_out[world, i] = vt
        if not (wp.isfinite(qd) and wp.isfinite(joint_f[world, i]) and wp.isfinite(act) and wp.isfinite(qt)
                and wp.isfinite(vt)):
            flags = NON_FINITE
    for b in range(lane, body_count, bd):
        body_q_out[world, b] = body_q[world, b]
        body_qd_out[world, b] = body_qd[world, b]
        for i in range(6):
            if not wp.isfinite(body_f[world, b][i]):
                flags = NON_FINITE
    if _rejected_quaternions(quat_coord, quat_count, joint_q[world], lane) != 0:
        flags = flags | INVALID_QUATERNION
    flags = block_or_int(flags)
    if lane == 0:
        if params_invalid[world] != 0:  # a device write of bad per-world parameters (sap_gpu.parameters)
            flags = flags | NON_FINITE
        status[world] = flags
        done[world] = 0
        if flags != 0:
            done[world] = 1


@wp.kernel(enable_backward=False, module="unique")
def _select_outputs(quat_coord: wp.array(dtype=int), quat_count: int, nq: int, nv: int, v_out_sap: int,
                    q0: wp.array2d(dtype=wp.float64), v0: wp.array2d(dtype=wp.float64),
                    overflow: wp.array(dtype=int), q1: wp.array2d(dtype=wp.float64), v1: wp.array2d(dtype=wp.float64),
                    status: wp.array(dtype=int), joint_q_out: wp.array2d(dtype=wp.float64),
                    joint_qd_out: wp.array2d(dtype=wp.float64), truncated_out: wp.array(dtype=int)):
    """Flag non-finite results, quaternions the step carried out of range, and contact overflow; a
    NON_FINITE or INVALID_QUATERNION world keeps q₀, v₀ (docs/design.md § Bad input). The
    selected q₁ goes to ``joint_q_out`` too, v₁ to ``joint_qd_out`` where ``v_out_sap`` (the
    output state is in SAP order), the overflow to ``truncated_out``.

    One block per world: lanes over coordinates, velocities and quaternions find the bad ones
    (one block OR), every lane then holds the world's new status, lanes over coordinates and
    velocities restore a rejected world and store the outputs, and lane 0 stores the status.
    Every lane reads the status before the OR's barrier, and lane 0 writes it after."""
    world, lane = wp.tid()
    bd = wp.block_dim()
    s = status[world]
    found = int(0)  # NON_FINITE, INVALID_QUATERNION: this lane's bits
    if (s & REJECTED) == 0:  # a world rejected on input keeps its input flags only
        for i in range(lane, nq, bd):
            if not wp.isfinite(q1[world, i]):
                found = NON_FINITE
        for i in range(lane, nv, bd):
            if not wp.isfinite(v1[world, i]):
                found = NON_FINITE
        if _rejected_quaternions(quat_coord, quat_count, q1[world], lane) != 0:
            found = found | INVALID_QUATERNION
    found = block_or_int(found)
    if (found & NON_FINITE) != 0:
        s = s | NON_FINITE
    elif found != 0:
        s = s | INVALID_QUATERNION  # e.g. sap_euler's drift carried |q| past QUAT_NORM_MAX
    rejected = (s & REJECTED) != 0
    for i in range(lane, nq, bd):
        q = q1[world, i]
        if rejected:
            q = q0[world, i]
            q1[world, i] = q
        joint_q_out[world, i] = q
    for i in range(lane, nv, bd):
        v = v1[world, i]
        if rejected:
            v = v0[world, i]
            v1[world, i] = v
        if v_out_sap != 0:
            joint_qd_out[world, i] = v
    if overflow[world] > 0:
        s = s | CONTACT_OVERFLOW
    if lane == 0:
        status[world] = s
        truncated_out[world] = overflow[world]


@wp.kernel
def _keep_rejected_worlds(same_qd_order: int, nq: int, nv: int, body_count: int, status: wp.array(dtype=int),
                          q_in: wp.array2d(dtype=wp.float64), qd_in: wp.array2d(dtype=wp.float64),
                          body_q_in: wp.array2d(dtype=wp.transformd),
                          body_qd_in: wp.array2d(dtype=wp.spatial_vectord),
                          joint_q_out: wp.array2d(dtype=wp.float64), joint_qd_out: wp.array2d(dtype=wp.float64),
                          body_q_out: wp.array2d(dtype=wp.transformd),
                          body_qd_out: wp.array2d(dtype=wp.spatial_vectord)):
    """A NON_FINITE or INVALID_QUATERNION world gets state_in's values back, bit for bit (joint_qd
    only when both states use the same order; otherwise it keeps the converted v₀)."""
    world, k = wp.tid()  # k: a coordinate, a velocity and a body (one thread per the largest count)
    if (status[world] & REJECTED) == 0:
        return
    if k < nq:
        joint_q_out[world, k] = q_in[world, k]
    if same_qd_order != 0 and k < nv:
        joint_qd_out[world, k] = qd_in[world, k]
    if k < body_count:
        body_q_out[world, k] = body_q_in[world, k]
        body_qd_out[world, k] = body_qd_in[world, k]


def check_inputs(m, state, control, status, done, q0, qd_in, body_q_in, body_qd_in, joint_act, target_pos,
                 target_vel) -> None:
    """Launch: per world, ``status`` = NON_FINITE where an input of the step is not finite and
    INVALID_QUATERNION where a joint_q quaternion is rejected (else 0); ``done`` = 1 for those
    worlds, which take no part in the step (sap_ref: ``read_inputs``' ``finite`` and ``quat_ok``).
    Also the step's copies of what it reads: ``q0`` = ``state.joint_q``, ``qd_in``,
    ``body_q_in``, ``body_qd_in`` = the state's ``joint_qd``, ``body_q``, ``body_qd`` (for
    :func:`keep_rejected_worlds`), ``joint_act``, ``target_pos``, ``target_vel`` = the control's."""
    launch_blocks(_check_inputs, num_worlds=m.num_worlds, device=m.device, inputs=[m.quat_coord, m.quat_count, m.nq,
                  m.nv, m.body_count, state.joint_q, state.joint_qd, control.joint_f, control.joint_act,
                  control.joint_target_pos, control.joint_target_vel, state.body_q, state.body_qd, state.body_f,
                  m.params.invalid], outputs=[status, done, q0, qd_in, joint_act, target_pos, target_vel, body_q_in,
                  body_qd_in])


def select_outputs(m, q0, v0, overflow, q1, v1, status, state_out, truncated) -> None:
    """Launch: flag non-finite results, quaternions carried out of range and contact overflow in
    ``status``; a rejected world's ``q1``, ``v1`` become its ``q0``, ``v0``. Then
    ``state_out.joint_q`` = ``q1``, ``state_out.joint_qd`` = ``v1`` if the state is in SAP order
    (in public order :func:`joint_velocities_to_public` writes it), ``truncated`` = ``overflow``."""
    launch_blocks(_select_outputs, num_worlds=m.num_worlds, device=m.device, inputs=[m.quat_coord, m.quat_count,
                  m.nq, m.nv, int(state_out.joint_qd_order != "public"), q0, v0, overflow], outputs=[q1, v1, status,
                  state_out.joint_q, state_out.joint_qd, truncated])


def keep_rejected_worlds(m, state_in, state_out, status, q_in, qd_in, body_q_in, body_qd_in) -> None:
    """Launch: a rejected world of ``state_out`` gets state_in's values back, bit for bit, from the
    copies ``q_in``, ``qd_in``, ``body_q_in``, ``body_qd_in`` taken before the step (sap_ref:
    ``write_state``'s ``keep``)."""
    launch_threads(_keep_rejected_worlds, dim=(m.num_worlds, max(m.nq, m.nv, m.body_count)), device=m.device,
                   inputs=[int(state_in.joint_qd_order == state_out.joint_qd_order), m.nq, m.nv, m.body_count, status,
                   q_in, qd_in, body_q_in, body_qd_in], outputs=[state_out.joint_q, state_out.joint_qd,
                   state_out.body_q, state_out.body_qd])


def joint_arrays_to_sap(m, state, control, pose32, v0, joint_f):
    """Launch: ``v0`` and ``joint_f`` in SAP order from ``state``/``control`` (by their order flags)."""
    launch_threads(_joint_arrays_to_sap, dim=(m.num_worlds, m.joint_count), device=m.device,
                   inputs=[m.joint_type, m.joint_child, m.joint_q_start, m.joint_qd_start, m.params.array("body_com"),
                           int(state.joint_qd_order == "public"), int(control.joint_f_order == "public"),
                           int(pose32), state.joint_q, state.joint_qd, control.joint_f], outputs=[v0, joint_f])


def body_wrenches_to_sap(m, state, pose32, body_X, body_f):
    """Launch: ``body_f`` in SAP order ``[τ_O; f]`` from ``state.body_f`` (poses ``body_X`` from q₀)."""
    launch_threads(_body_wrenches_to_sap, dim=(m.num_worlds, m.body_count), device=m.device,
                   inputs=[m.params.array("body_com"), int(state.body_f_order == "public"), int(pose32), body_X,
                           state.body_f], outputs=[body_f])


def joint_velocities_to_public(m, pose32, joint_q, v, joint_qd):
    """Launch: ``joint_qd`` in public order from SAP-order ``v`` at coordinates ``joint_q``."""
    launch_threads(_joint_velocities_to_public, dim=(m.num_worlds, m.joint_count), device=m.device,
                   inputs=[m.joint_type, m.joint_child, m.joint_q_start, m.joint_qd_start, m.params.array("body_com"),
                           int(pose32), joint_q, v], outputs=[joint_qd])


def body_twists_to_public(m, body_X, body_V, body_qd):
    """Launch: public ``body_qd = [v_C, ω]`` from SAP twists ``[ω, v_O]``."""
    launch_threads(_body_twists_to_public, dim=(m.num_worlds, m.body_count), device=m.device,
                   inputs=[m.params.array("body_com"), body_X, body_V], outputs=[body_qd])
