"""Stage 4 on the device: q₁ = Φ(q₀, v₀, v₁, h), one thread per (world, joint) (docs/formulation.md § Integration).

Counterpart of :mod:`sap_ref.integration`: ``sap_euler`` q₁ = q₀ + h N(q₀) v₁ (quaternions not
re-normalized, Drake), ``midpoint`` with v̄ = (v₀ + v₁)/2 and the normalized exponential map.
"""

from __future__ import annotations

import warp as wp

from .kinematics import BALL, DISTANCE, FREE
from .launch import launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["integrate_positions"]


@wp.func
def quat_increment(q: wp.quatd, w: wp.vec3d, h: wp.float64, midpoint: int) -> wp.quatd:
    """sap_euler: q + h·½(ω, 0)⊗q (no normalization); midpoint: exp(hω) ⊗ q, normalized."""
    if midpoint == 0:
        dq = wp.quatd(w[0], w[1], w[2], wp.float64(0.0)) * q
        return wp.quatd(q[0] + wp.float64(0.5) * h * dq[0], q[1] + wp.float64(0.5) * h * dq[1],
                        q[2] + wp.float64(0.5) * h * dq[2], q[3] + wp.float64(0.5) * h * dq[3])
    theta = wp.length(w) * h
    half = wp.float64(0.5) * theta
    s = wp.float64(0.5) * h - theta * theta * h / wp.float64(48.0)  # sin(θ/2)/|ω| for tiny θ
    if theta >= wp.float64(1e-6):
        s = wp.sin(half) / wp.length(w)
    e = wp.quatd(w[0] * s, w[1] * s, w[2] * s, wp.cos(half))
    return wp.normalize(e * q)


@wp.kernel
def _integrate(joint_type: wp.array(dtype=int), joint_q_start: wp.array(dtype=int),
               joint_qd_start: wp.array(dtype=int), dt: wp.float64, midpoint: int,
               joint_q_in: wp.array2d(dtype=wp.float64), v0_in: wp.array2d(dtype=wp.float64),
               v1_in: wp.array2d(dtype=wp.float64), joint_q_out: wp.array2d(dtype=wp.float64)):
    """One thread per (world, joint): a joint's coordinates from its own velocities (the joints'
    ranges of joint_q are disjoint, so ``joint_q_out`` may be ``joint_q_in``)."""
    world, j = wp.tid()
    half = wp.float64(0.5)
    jt = joint_type[j]
    qs, ds = joint_q_start[j], joint_qd_start[j]
    if jt == BALL or jt == FREE or jt == DISTANCE:
        o = 0
        if jt != BALL:
            o = 3
            for i in range(3):
                v = v1_in[world, ds + 3 + i]
                if midpoint != 0:
                    v = half * (v0_in[world, ds + 3 + i] + v)
                joint_q_out[world, qs + i] = joint_q_in[world, qs + i] + dt * v
        w = wp.vec3d(v1_in[world, ds], v1_in[world, ds + 1], v1_in[world, ds + 2])
        if midpoint != 0:
            w = half * (wp.vec3d(v0_in[world, ds], v0_in[world, ds + 1], v0_in[world, ds + 2]) + w)
        q = wp.quatd(joint_q_in[world, qs + o], joint_q_in[world, qs + o + 1], joint_q_in[world, qs + o + 2],
                     joint_q_in[world, qs + o + 3])
        q1 = quat_increment(q, w, dt, midpoint)
        for i in range(4):
            joint_q_out[world, qs + o + i] = q1[i]
    else:
        for i in range(joint_q_start[j + 1] - qs):
            v = v1_in[world, ds + i]
            if midpoint != 0:
                v = half * (v0_in[world, ds + i] + v)
            joint_q_out[world, qs + i] = joint_q_in[world, qs + i] + dt * v


def integrate_positions(m, joint_q, v0, v1, dt, mode: str, joint_q_out) -> None:
    """Launch: ``joint_q_out = Φ(joint_q, v0, v1, dt)`` (``mode``: midpoint or sap_euler; may alias)."""
    if mode not in ("midpoint", "sap_euler"):
        raise ValueError(f"position_integration: {mode!r} is not valid; valid: midpoint, sap_euler")
    launch_threads(_integrate, dim=(m.num_worlds, m.joint_count), device=m.device,
                   inputs=[m.joint_type, m.joint_q_start, m.joint_qd_start, wp.float64(dt),
                           int(mode == "midpoint"), joint_q, v0, v1], outputs=[joint_q_out])
