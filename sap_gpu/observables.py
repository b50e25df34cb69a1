"""What a step leaves besides the state, per world on the device, and the per-world reset.

Counterpart of :mod:`sap_ref.observables`. Three groups of device arrays, built once by the
:class:`~sap_gpu.workspace.Workspace` (``work.obs``, ``work.stats``, ``work.initial``) and
refreshed by every :meth:`SolverSAP.step <sap_gpu.solver.SolverSAP.step>`:

* :class:`StepObservables` (``work.obs``): the step's contacts and their forces, the net contact
  wrench on every body and every body's acceleration over the step (shapes and units in the
  struct's docstring). For rewards, sensors and checks: read them on the device (torch
  ``wp.to_torch``, a kernel of yours) or copy them with ``SolverSAP.read_observables()``.
* :class:`WorldStatistics` (``work.stats``): per-world counters since the world's last reset
  (steps, Newton and line-search iterations, the union of the status bits, failing steps), the
  per-world failure flag ``failed`` and ``any_failed``, a one-entry flag a caller can test on
  the device (``wp.capture_if``) or read with one copy for the whole batch.
* the model's initial state in both velocity orders (``work.initial``), which a reset writes into
  the masked worlds of a state.

Conventions (docs/conventions.md): γ of a contact is the impulse on body 1 (shape 1's body),
−γ the impulse on body 0; force = impulse / h. A contact's force acts on body 1 at ``p1`` and
on body 0 at ``p0`` (the points the contact Jacobian measures: the witness points, or both at
the stiffness-weighted midpoint under ``contact_point_mode="contact_midpoint"``). A world the
step rejected (NON_FINITE or INVALID_QUATERNION: its state was left unchanged) reports no
contact and zero wrenches and accelerations.

Every launch here reads and writes preallocated arrays only, and the reset kernels take the
world mask as a device array, so ``reset`` inside a captured CUDA graph replays with whatever
mask the array holds at replay.
"""


import warp as wp

from sap_common.state import FAILURE_BITS, StepStatus

from .launch import built_once, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["StepObservables", "WorldStatistics", "InitialState", "contact_observables", "body_contact_wrenches",
           "accelerations_and_statistics", "reset_worlds", "recount_failures", "OBSERVABLE_NAMES",
           "STATISTIC_NAMES"]

REJECTED = wp.constant(int(StepStatus.NON_FINITE | StepStatus.INVALID_QUATERNION))
FAILURE = wp.constant(int(FAILURE_BITS))

# The fields of StepObservables and WorldStatistics, in the order read_observables()/statistics() give them.
OBSERVABLE_NAMES = ("contact_count", "contact_impulse", "contact_force", "contact_point0", "contact_point1",
                    "contact_normal", "body_contact_force", "body_contact_torque", "body_acceleration")
STATISTIC_NAMES = ("steps", "newton_iterations", "line_search_iterations", "status_union", "failed_steps", "failed")


@wp.struct
class StepObservables:
    """The last step's observables of every world (W worlds, C contact slots, B bodies; world frame).

    contact_count: contacts of the step, (W,) int32 (0 for a rejected world).
    contact_impulse: each contact's impulse on body 1, ``R_WC γ`` [N·s], (W, C) vec3d (zero past the count).
    contact_force: ``contact_impulse / h`` [N], (W, C) vec3d.
    contact_point0, contact_point1: where the force acts on body 0 / body 1 [m], (W, C) vec3d.
    contact_normal: n̂, from shape 0 into shape 1, (W, C) vec3d.
    body_contact_force: Σ of the contact forces on each body [N], (W, B) vec3d.
    body_contact_torque: Σ of their moments about the body's origin [N·m] (origin and points at the
        step's start), (W, B) vec3d.
    body_qd0: each body's public twist ``[v_C; ω]`` at the step's start (from q₀, v₀), (W, B).
    body_acceleration: ``(body_qd₁ − body_qd₀) / h`` [m/s², rad/s²], public order ``[a_C; α]`` (the
        COM's acceleration, then the angular one), (W, B) spatial_vectord.
    """

    contact_count: wp.array(dtype=wp.int32)
    contact_impulse: wp.array2d(dtype=wp.vec3d)
    contact_force: wp.array2d(dtype=wp.vec3d)
    contact_point0: wp.array2d(dtype=wp.vec3d)
    contact_point1: wp.array2d(dtype=wp.vec3d)
    contact_normal: wp.array2d(dtype=wp.vec3d)
    body_contact_force: wp.array2d(dtype=wp.vec3d)
    body_contact_torque: wp.array2d(dtype=wp.vec3d)
    body_qd0: wp.array2d(dtype=wp.spatial_vectord)
    body_acceleration: wp.array2d(dtype=wp.spatial_vectord)


@wp.struct
class WorldStatistics:
    """Per-world counters since each world's last reset (or the solver's construction), (W,).

    steps: steps taken.  newton_iterations, line_search_iterations: their sums (int64).
    status_union: the OR of every step's status bits (int32).  failed_steps: steps whose status had
    a bit of :data:`~sap_common.state.FAILURE_BITS` (int64).  failed: 1 once a step of the world
    failed (int32).  any_failed: (1,) int32, 1 while any world's ``failed`` is 1.
    """

    steps: wp.array(dtype=wp.int64)
    newton_iterations: wp.array(dtype=wp.int64)
    line_search_iterations: wp.array(dtype=wp.int64)
    status_union: wp.array(dtype=wp.int32)
    failed_steps: wp.array(dtype=wp.int64)
    failed: wp.array(dtype=wp.int32)
    any_failed: wp.array(dtype=wp.int32)


@wp.struct
class InitialState:
    """The model's initial state (``SapModel.state()``), which :func:`reset_worlds` writes.

    joint_q (W, nq); joint_qd_public, joint_qd_sap (W, nv): ``joint_qd_init`` in each order;
    body_q (W, B); body_qd (W, B) public (body twists are always public).
    """

    joint_q: wp.array2d(dtype=wp.float64)
    joint_qd_public: wp.array2d(dtype=wp.float64)
    joint_qd_sap: wp.array2d(dtype=wp.float64)
    body_q: wp.array2d(dtype=wp.transformd)
    body_qd: wp.array2d(dtype=wp.spatial_vectord)


@wp.struct
class Diagnostics:
    """The last step's per-world diagnostics a reset clears (the arrays behind ``last_status`` …).

    The linear solver's residual is float32 or float64 by the solver's precision: the array of the
    other precision is a one-entry stand-in.
    """

    status: wp.array(dtype=wp.int32)
    newton_iterations: wp.array(dtype=wp.int32)
    line_search_iterations: wp.array(dtype=wp.int32)
    truncated: wp.array(dtype=wp.int32)
    linear_iterations: wp.array(dtype=wp.int32)
    residual32: wp.array(dtype=wp.float32)
    residual64: wp.array(dtype=wp.float64)
    v_init: wp.array2d(dtype=wp.float64)


# ----------------------------------------------------------------------------- the step's observables


@built_once()
def _contact_kernel(T):
    """The contact observables kernel reading γ in the objective scalar T."""

    @wp.kernel(enable_backward=False, module="unique")
    def contact_observables_kernel(h: wp.float64, status: wp.array(dtype=wp.int32),
                                   count: wp.array(dtype=wp.int32), gamma: wp.array2d(dtype=T),
                                   R_WC: wp.array2d(dtype=wp.mat33d), p0: wp.array2d(dtype=wp.vec3d),
                                   p1: wp.array2d(dtype=wp.vec3d), O: StepObservables):
        world, c = wp.tid()
        n = count[world]
        if (status[world] & REJECTED) != 0:
            n = 0
        if c == 0:
            O.contact_count[world] = n
        zero = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
        if c >= n:
            O.contact_impulse[world, c] = zero
            O.contact_force[world, c] = zero
            O.contact_point0[world, c] = zero
            O.contact_point1[world, c] = zero
            O.contact_normal[world, c] = zero
            return
        R = R_WC[world, c]
        g = wp.vec3d(wp.float64(gamma[world, 3 * c]), wp.float64(gamma[world, 3 * c + 1]),
                     wp.float64(gamma[world, 3 * c + 2]))
        impulse = R * g
        O.contact_impulse[world, c] = impulse
        O.contact_force[world, c] = impulse / h
        O.contact_point0[world, c] = p0[world, c]
        O.contact_point1[world, c] = p1[world, c]
        O.contact_normal[world, c] = wp.vec3d(R[0, 2], R[1, 2], R[2, 2])

    return contact_observables_kernel


@wp.kernel
def _body_contact_wrenches(body0: wp.array2d(dtype=wp.int32), body1: wp.array2d(dtype=wp.int32),
                           body_X: wp.array2d(dtype=wp.transformd), O: StepObservables):
    """Σ over the world's contacts, in slot order (no atomics: the same sums every run)."""
    world, b = wp.tid()
    o = wp.transform_get_translation(body_X[world, b])
    f = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    tau = f
    for c in range(O.contact_count[world]):
        F = O.contact_force[world, c]
        if body1[world, c] == b:
            f = f + F
            tau = tau + wp.cross(O.contact_point1[world, c] - o, F)
        if body0[world, c] == b:
            f = f - F
            tau = tau - wp.cross(O.contact_point0[world, c] - o, F)
    O.body_contact_force[world, b] = f
    O.body_contact_torque[world, b] = tau


@wp.kernel
def _accelerations_and_statistics(h: wp.float64, status: wp.array(dtype=wp.int32),
                                  newton_iterations: wp.array(dtype=wp.int32),
                                  line_search_iterations: wp.array(dtype=wp.int32),
                                  body_qd1: wp.array2d(dtype=wp.spatial_vectord), O: StepObservables,
                                  S: WorldStatistics):
    """One thread per (world, body): the body's acceleration over the step; body 0's thread also
    adds the step to the world's statistics."""
    world, b = wp.tid()
    s = status[world]
    a = wp.spatial_vectord()
    if (s & REJECTED) == 0:
        a = (body_qd1[world, b] - O.body_qd0[world, b]) / h
    O.body_acceleration[world, b] = a
    if b != 0:
        return
    S.steps[world] = S.steps[world] + wp.int64(1)
    S.newton_iterations[world] = S.newton_iterations[world] + wp.int64(newton_iterations[world])
    S.line_search_iterations[world] = S.line_search_iterations[world] + wp.int64(line_search_iterations[world])
    S.status_union[world] = S.status_union[world] | s
    if (s & FAILURE) != 0:
        S.failed_steps[world] = S.failed_steps[world] + wp.int64(1)
        S.failed[world] = 1
    if S.failed[world] != 0:
        S.any_failed[0] = 1  # every writer writes 1: no race on the value


def contact_observables(m, T, h: float, status, count, gamma, R_WC, p0, p1, obs) -> None:
    """Launch: the contact observables of every (world, slot) from the step's γ (objective scalar T)."""
    C = obs.contact_impulse.shape[1]
    launch_threads(_contact_kernel(T), dim=(m.num_worlds, C), device=m.device,
                   inputs=[wp.float64(h), status, count, gamma, R_WC, p0, p1, obs])


def body_contact_wrenches(m, contacts, body_X, obs) -> None:
    """Launch: the net contact force and moment about the origin (poses ``body_X``) of every body."""
    launch_threads(_body_contact_wrenches, dim=(m.num_worlds, m.body_count), device=m.device,
                   inputs=[contacts.body0, contacts.body1, body_X, obs])


def accelerations_and_statistics(m, h: float, status, newton_iterations, line_search_iterations, body_qd1, obs,
                                 stats) -> None:
    """Launch: body accelerations over the step and the per-world statistics (one thread per
    (world, body))."""
    launch_threads(_accelerations_and_statistics, dim=(m.num_worlds, m.body_count), device=m.device,
                   inputs=[wp.float64(h), status, newton_iterations, line_search_iterations, body_qd1,
                           obs, stats])


# ----------------------------------------------------------------------------- the per-world reset


@wp.func
def _clear_world(world: int, D: Diagnostics, O: StepObservables, S: WorldStatistics):
    zero = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    D.status[world] = 0
    D.newton_iterations[world] = 0
    D.line_search_iterations[world] = 0
    D.truncated[world] = 0
    D.linear_iterations[world] = 0
    if D.residual32.shape[0] > world:
        D.residual32[world] = wp.float32(0.0)
    if D.residual64.shape[0] > world:
        D.residual64[world] = wp.float64(0.0)
    for k in range(D.v_init.shape[1]):
        D.v_init[world, k] = wp.float64(0.0)
    O.contact_count[world] = 0
    for c in range(O.contact_impulse.shape[1]):
        O.contact_impulse[world, c] = zero
        O.contact_force[world, c] = zero
        O.contact_point0[world, c] = zero
        O.contact_point1[world, c] = zero
        O.contact_normal[world, c] = zero
    for b in range(O.body_contact_force.shape[1]):
        O.body_contact_force[world, b] = zero
        O.body_contact_torque[world, b] = zero
        O.body_qd0[world, b] = wp.spatial_vectord()
        O.body_acceleration[world, b] = wp.spatial_vectord()
    S.steps[world] = wp.int64(0)
    S.newton_iterations[world] = wp.int64(0)
    S.line_search_iterations[world] = wp.int64(0)
    S.status_union[world] = 0
    S.failed_steps[world] = wp.int64(0)
    S.failed[world] = 0


@wp.func
def _reset_state(world: int, write_state: int, sap_order: int, I: InitialState,
                 joint_q: wp.array2d(dtype=wp.float64), joint_qd: wp.array2d(dtype=wp.float64),
                 body_q: wp.array2d(dtype=wp.transformd), body_qd: wp.array2d(dtype=wp.spatial_vectord),
                 body_f: wp.array2d(dtype=wp.spatial_vectord)):
    if write_state == 0:
        return
    for i in range(joint_q.shape[1]):
        joint_q[world, i] = I.joint_q[world, i]
    for i in range(joint_qd.shape[1]):
        if sap_order != 0:
            joint_qd[world, i] = I.joint_qd_sap[world, i]
        else:
            joint_qd[world, i] = I.joint_qd_public[world, i]
    for b in range(body_q.shape[1]):
        body_q[world, b] = I.body_q[world, b]
        body_qd[world, b] = I.body_qd[world, b]
        body_f[world, b] = wp.spatial_vectord()


@wp.kernel
def _reset_masked_bool(mask: wp.array(dtype=wp.bool), D: Diagnostics, O: StepObservables, S: WorldStatistics,
                       write_state: int, sap_order: int, I: InitialState, joint_q: wp.array2d(dtype=wp.float64),
                       joint_qd: wp.array2d(dtype=wp.float64), body_q: wp.array2d(dtype=wp.transformd),
                       body_qd: wp.array2d(dtype=wp.spatial_vectord), body_f: wp.array2d(dtype=wp.spatial_vectord)):
    world = wp.tid()
    if not mask[world]:
        return
    _clear_world(world, D, O, S)
    _reset_state(world, write_state, sap_order, I, joint_q, joint_qd, body_q, body_qd, body_f)


@wp.kernel
def _reset_masked_int(mask: wp.array(dtype=wp.int32), D: Diagnostics, O: StepObservables, S: WorldStatistics,
                      write_state: int, sap_order: int, I: InitialState, joint_q: wp.array2d(dtype=wp.float64),
                      joint_qd: wp.array2d(dtype=wp.float64), body_q: wp.array2d(dtype=wp.transformd),
                      body_qd: wp.array2d(dtype=wp.spatial_vectord), body_f: wp.array2d(dtype=wp.spatial_vectord)):
    world = wp.tid()
    if mask[world] == 0:
        return
    _clear_world(world, D, O, S)
    _reset_state(world, write_state, sap_order, I, joint_q, joint_qd, body_q, body_qd, body_f)


@wp.kernel
def _any_failed(S: WorldStatistics):
    world = wp.tid()
    if S.failed[world] != 0:
        S.any_failed[0] = 1


def reset_worlds(m, mask, diag, obs, stats, initial, state) -> None:
    """Launch: clear the diagnostics, observables and statistics of the worlds where ``mask`` (W,)
    (bool or int32, nonzero = reset) is set, and write the initial state into those worlds of
    ``state`` (None: no state). ``any_failed`` must then be recounted (:func:`recount_failures`)."""
    kernel = _reset_masked_bool if mask.dtype == wp.bool else _reset_masked_int
    if state is None:
        arrays = [initial.joint_q, initial.joint_qd_sap, initial.body_q, initial.body_qd, initial.body_qd]
        write, sap_order = 0, 0
    else:
        arrays = [state.joint_q, state.joint_qd, state.body_q, state.body_qd, state.body_f]
        write, sap_order = 1, int(state.joint_qd_order == "sap")
    launch_threads(kernel, dim=m.num_worlds, device=m.device, inputs=[mask, diag, obs, stats, write, sap_order,
                                                                      initial, *arrays])


def recount_failures(m, stats) -> None:
    """``any_failed`` from every world's ``failed`` (a memset and one launch)."""
    stats.any_failed.zero_()
    launch_threads(_any_failed, dim=m.num_worlds, device=m.device, inputs=[stats])
