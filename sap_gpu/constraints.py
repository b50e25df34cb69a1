"""Constraint rows on the device: limits, drives, participation, and the terms ℓᵢ, γᵢ, Gᵢ.

Counterpart of :mod:`sap_ref.constraints`. The scalar rows (limits, holonomic constraints,
drives: :mod:`sap_common.rows`) are laid out once per model (:class:`RowLayout`, one slot per row
a world can have, kind by kind); every step a kernel decides which limit rows are inside the
window ``q₀ ± 2h·max(|v₀|, |v*|)`` and fills their J, R, v̂ (docs/formulation.md § Limits), another
writes the drive rows and sets the drives' near-rigid gains (docs/formulation.md § Drives), and
:mod:`sap_gpu.holonomic` fills the holonomic constraints' rows. The terms are built per scalar
type (``contact_solve_precision``) by :func:`make_terms`.
"""

import numpy as np
import warp as wp

from sap_common.constants import (
    DISTANCE_EPS,
    DRIVE_BETA,
    HC_VELOCITY_GUARD,
    LIMIT_BETA,
    LIMIT_WINDOW_FACTOR,
    SOFT_NORM_EPS,
)
from sap_common.model import SapModel
from sap_common.rows import RowKind, scalar_row_layout

from .blocked_cholesky import block_sync
from .kinematics import add_point_jacobian_along
from .launch import built_once, launch_blocks, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["RowLayout", "row_layout", "limit_constraints", "drive_constraints", "hunt_crossley_data", "HC_DATA",
           "participation", "row_support", "make_terms", "hunt_crossley_term", "SOFT_NORM_EPS", "STICTION", "SLIDING",
           "NO_CONTACT"]

STICTION, SLIDING, NO_CONTACT = 0, 1, 2
_FOUR_PI2 = 4.0 * np.pi**2
# β²/(4π²), folded here in float64: arithmetic between Python constants inside a Warp kernel is
# done in float32 (it cost limit and drive rows a 7e-8 relative error before).
_LIMIT_R_FACTOR = LIMIT_BETA * LIMIT_BETA / _FOUR_PI2
_DRIVE_R_FACTOR = DRIVE_BETA * DRIVE_BETA / _FOUR_PI2
_TWO_THIRDS = 2.0 / 3.0  # the antiderivative's ⅔, rounded in float64 as sap_ref rounds it
_SQRT3 = float(np.sqrt(3.0))  # in float64: arithmetic between constants inside a Warp kernel is float32
# Per contact of a Hunt–Crossley step: (k [N/m], d [s/m], fₑ₀ [N], n₀ [N·s], ε_s [m/s]).
HC_DATA = wp.types.vector(5, wp.float64)


class RowLayout:
    """A model's scalar rows on the device (:func:`sap_common.rows.scalar_row_layout`, ``host``):
    ``count`` (S) slots, kind by kind, ``start`` the first row of each kind (indexed by
    :class:`~sap_common.rows.RowKind`) and S last; the limit rows first (``limit_count``), then the
    holonomic constraints' rows (from ``holonomic_row0``), then the drives (from ``drive_row0``,
    ``drive_count``).

    The limit rows on the device: ``limit_kind`` 0 a scalar DOF's (``limit_index`` = DOF), 1 a
    distance joint's (``limit_index`` = joint); ``limit_side`` −1 lower, +1 upper. ``drive_dof``
    (D,): each drive's DOF. Arrays of a kind without rows hold one unused entry, so kernel
    signatures never change.
    """

    def __init__(self, model: SapModel, device):
        layout = scalar_row_layout(model)
        self.host = layout
        self.count = layout.count
        self.start = tuple(int(x) for x in layout.start)
        self.limit_count = len(layout.rows(RowKind.LIMIT))
        self.holonomic_row0 = self.start[RowKind.HOLONOMIC]
        self.drive_row0 = self.start[RowKind.DRIVE]
        self.drive_count = len(layout.drive_dof)

        def arr(x):
            x = np.asarray(x, np.int32).reshape(-1)
            return wp.array(x if len(x) else np.zeros(1, np.int32), dtype=int, device=device)

        self.limit_kind, self.limit_index, self.limit_side = (arr(layout.limit_kind), arr(layout.limit_index),
                                                              arr(layout.limit_side))
        self.drive_dof = arr(layout.drive_dof)


def row_layout(model: SapModel, device) -> RowLayout:
    return RowLayout(model, device)


@wp.kernel
def _limit_constraints(
    joint_parent: wp.array(dtype=int), joint_child: wp.array(dtype=int), joint_X_p: wp.array(dtype=wp.transformd),
    joint_X_c: wp.array(dtype=wp.transformd), joint_qd_start: wp.array(dtype=int),
    body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int), dof_coord: wp.array(dtype=int),
    limit_lower: wp.array2d(dtype=wp.float64), limit_upper: wp.array2d(dtype=wp.float64),
    limit_ke: wp.array2d(dtype=wp.float64), limit_kd: wp.array2d(dtype=wp.float64),
    limit_kind: wp.array(dtype=int), limit_index: wp.array(dtype=int), limit_side: wp.array(dtype=int),
    limit_count: int, nv: int, dt: wp.float64,
    joint_q_in: wp.array2d(dtype=wp.float64), v0_in: wp.array2d(dtype=wp.float64),
    v_star_in: wp.array2d(dtype=wp.float64), A_in: wp.array3d(dtype=wp.float64),
    body_X_in: wp.array2d(dtype=wp.transformd), dof_S_in: wp.array2d(dtype=wp.spatial_vectord),
    active_out: wp.array2d(dtype=int), J_out: wp.array3d(dtype=wp.float64), R_out: wp.array2d(dtype=wp.float64),
    v_hat_out: wp.array2d(dtype=wp.float64),
):
    """One thread per (world, limit row): each row reads the step's poses and writes only its own row
    (the limit rows are the first scalar rows)."""
    world, r = wp.tid()
    zero = wp.float64(0.0)
    if r < limit_count:
        for k in range(nv):
            J_out[world, r, k] = zero
        side = limit_side[r]
        active = int(0)
        g0 = zero
        slot = int(0)
        if limit_kind[r] == 0:
            dof = limit_index[r]
            slot = dof
            q = joint_q_in[world, dof_coord[dof]]
            window = wp.float64(LIMIT_WINDOW_FACTOR) * dt * wp.max(wp.abs(v0_in[world, dof]),
                                                                   wp.abs(v_star_in[world, dof]))
            if side < 0:
                if limit_lower[world, dof] >= q - window:
                    active = 1
                    g0 = q - limit_lower[world, dof]
            else:
                if limit_upper[world, dof] <= q + window:
                    active = 1
                    g0 = limit_upper[world, dof] - q
            J_out[world, r, dof] = wp.float64(-side)
        else:
            j = limit_index[r]
            slot = joint_qd_start[j]
            p = joint_parent[j]
            c = joint_child[j]
            p_P = wp.transform_get_translation(joint_X_p[j])
            if p >= 0:
                p_P = wp.transform_point(body_X_in[world, p], wp.transform_get_translation(joint_X_p[j]))
            p_C = wp.transform_point(body_X_in[world, c], wp.transform_get_translation(joint_X_c[j]))
            dvec = p_C - p_P
            dist = wp.length(dvec)
            if dist >= wp.float64(DISTANCE_EPS):
                n = dvec / dist
                # J = −side·n̂ᵀ(J_v,C(p_C) − J_v,P(p_P)): +rate for a lower limit, −rate for an upper one.
                add_point_jacobian_along(world, c, p_C, n, wp.float64(-side), r, body_parent, body_joint,
                                         joint_qd_start, body_X_in, dof_S_in, J_out)
                add_point_jacobian_along(world, p, p_P, n, wp.float64(side), r, body_parent, body_joint,
                                         joint_qd_start, body_X_in, dof_S_in, J_out)
                rate0 = zero
                rate_star = zero
                for k in range(nv):  # J = −side·(row), so |J v| is the distance rate either way
                    rate0 = rate0 + J_out[world, r, k] * v0_in[world, k]
                    rate_star = rate_star + J_out[world, r, k] * v_star_in[world, k]
                window = wp.float64(LIMIT_WINDOW_FACTOR) * dt * wp.max(wp.abs(rate0), wp.abs(rate_star))
                if side < 0:
                    if limit_lower[world, slot] >= dist - window:
                        active = 1
                        g0 = dist - limit_lower[world, slot]
                else:
                    if limit_upper[world, slot] <= dist + window:
                        active = 1
                        g0 = limit_upper[world, slot] - dist
        active_out[world, r] = active
        if active == 1:
            w = zero
            for k in range(nv):
                w = w + J_out[world, r, k] * J_out[world, r, k] / A_in[world, k, k]
            w = wp.max(w, wp.float64(1e-12))
            ke = limit_ke[world, slot]
            tau = limit_kd[world, slot] / ke
            R = wp.max(wp.float64(_LIMIT_R_FACTOR) * w, wp.float64(1.0) / (dt * ke * (dt + tau)))
            R_out[world, r] = R
            v_hat_out[world, r] = -g0 / (dt + tau)


@wp.kernel
def _drive_constraints(dof_coord: wp.array(dtype=int), target_ke: wp.array2d(dtype=wp.float64),
                target_kd: wp.array2d(dtype=wp.float64), drive_dof: wp.array(dtype=int), drive_count: int,
                row0: int, nv: int, dt: wp.float64, joint_q_in: wp.array2d(dtype=wp.float64),
                A_in: wp.array3d(dtype=wp.float64), q0_out: wp.array2d(dtype=wp.float64),
                Kp_out: wp.array2d(dtype=wp.float64), Kd_out: wp.array2d(dtype=wp.float64),
                active_out: wp.array2d(dtype=int), J_out: wp.array3d(dtype=wp.float64)):
    """Drive i's row (row0 + i: J = e_dofᵀ, always in use) and Drake's effective PD gains: lowered
    (ratio kept) until R = 1/(h(hKp+Kd)) reaches R_nr. One thread per (world, drive)."""
    world, i = wp.tid()
    if i < drive_count:
        dof = drive_dof[i]
        r = row0 + i
        for k in range(nv):
            J_out[world, r, k] = wp.float64(0.0)
        J_out[world, r, dof] = wp.float64(1.0)
        active_out[world, r] = 1
        Kp = target_ke[world, dof]
        Kd = target_kd[world, dof]
        R_nr = wp.float64(_DRIVE_R_FACTOR) / A_in[world, dof, dof]
        R = wp.float64(1.0) / (dt * (dt * Kp + Kd))
        if R < R_nr:
            if dt * Kp > Kd:
                tau = Kd / Kp
                Kp = wp.float64(1.0) / (dt * (dt + tau) * R_nr)
                Kd = tau * Kp
            else:
                ratio = Kp / Kd
                Kd = wp.float64(1.0) / (dt * (wp.float64(1.0) + dt * ratio) * R_nr)
                Kp = ratio * Kd
        q0_out[world, i] = joint_q_in[world, dof_coord[dof]]
        Kp_out[world, i] = Kp
        Kd_out[world, i] = Kd


@built_once()
def _hunt_crossley_kernel(T):
    @wp.kernel(enable_backward=False, module="unique")
    def hunt_crossley_kernel(nv: int, dt: wp.float64, sigma: wp.float64, stiction_tolerance: wp.float64,
                             count_in: wp.array(dtype=int), mu_in: wp.array2d(dtype=wp.float64),
                             ke_in: wp.array2d(dtype=wp.float64), hcd_in: wp.array2d(dtype=wp.float64),
                             phi0_in: wp.array2d(dtype=wp.float64), w_in: wp.array2d(dtype=wp.float64),
                             J_in: wp.array3d(dtype=wp.float64), v0_in: wp.array2d(dtype=wp.float64),
                             hc_out: wp.array2d(dtype=HC_DATA), vn0_out: wp.array2d(dtype=wp.float64)):
        world, c = wp.tid()  # one thread per contact slot; slots past the world's count return
        if c >= count_in[world]:
            return
        vn = wp.float64(0.0)
        for k in range(nv):
            vn = vn + J_in[world, 3 * c + 2, k] * v0_in[world, k]
        w = T(w_in[world, c])
        mu = T(mu_in[world, c])
        ke = T(ke_in[world, c])
        d = T(hcd_in[world, c])
        vn0 = T(vn)
        h = T(dt)
        w_rms = wp.sqrt(w * w + w * w + w * w) / T(_SQRT3)
        R_t = T(sigma) * wp.max(T(0.5) * (w + w), w_rms)
        fe0 = ke * -T(phi0_in[world, c])
        n0 = wp.max(T(0.0), h * fe0) * wp.max(T(0.0), T(1.0) - d * vn0)
        eps = wp.max(T(stiction_tolerance), mu * R_t * n0)
        hc_out[world, c] = HC_DATA(wp.float64(ke), wp.float64(d), wp.float64(fe0), wp.float64(n0), wp.float64(eps))
        vn0_out[world, c] = wp.float64(vn0)

    return hunt_crossley_kernel


def hunt_crossley_data(m, contacts, precision: str, dt, sigma, stiction_tolerance, w, J, v0, hc, vn0) -> None:
    """Launch: each contact's Hunt–Crossley data ``hc = (k, d, fₑ₀, n₀, ε_s)`` and ``vn0``, one thread
    per (world, contact slot), in ``sap_contact_weight_precision``
    (docs/formulation.md § Hunt–Crossley contact): vₙ₀ = (J v₀)ₙ, fₑ₀ = −kφ₀,
    n₀ = (h fₑ₀)₊(1 − d vₙ₀)₊, ε_s = max(v_s, μ σ w_t n₀) with w_t = max(w, ‖(w, w, w)‖/√3).
    Counterpart of :func:`sap_ref.constraints.hunt_crossley_data`; Drake:
    ``SapHuntCrossleyConstraint::DoMakeData``."""
    T = wp.float32 if precision == "fp32" else wp.float64
    launch_threads(_hunt_crossley_kernel(T), dim=(m.num_worlds, w.shape[1]), device=m.device,
                   inputs=[m.nv, wp.float64(dt), wp.float64(sigma), wp.float64(stiction_tolerance), contacts.count,
                   contacts.mu, contacts.ke, contacts.hcd, contacts.phi0, w, J, v0], outputs=[hc, vn0])


@wp.kernel(enable_backward=False, module="unique")
def _participation(dof_tree: wp.array(dtype=int), nv: int, tree_count: int, row_count: int,
                   count_in: wp.array(dtype=int), contact_J_in: wp.array3d(dtype=wp.float64),
                   row_active_in: wp.array2d(dtype=int), row_J_in: wp.array3d(dtype=wp.float64),
                   tree_scratch: wp.array2d(dtype=int),
                   v0_in: wp.array2d(dtype=wp.float64), v_star_in: wp.array2d(dtype=wp.float64),
                   dof_mask_out: wp.array2d(dtype=int), v_out: wp.array2d(dtype=wp.float64)):
    """Trees touched by a constraint row; the Newton start: v₀ there, v* elsewhere.

    One block per world: lanes over trees clear the marks; lanes over DOFs mark the tree of each
    DOF a row touches (every writer writes 1); lanes over DOFs read their tree's mark. Block
    barriers between the three. docs/formulation.md § Participating DOFs.
    """
    world, lane = wp.tid()
    bd = wp.block_dim()
    for t in range(lane, tree_count, bd):
        tree_scratch[world, t] = 0
    block_sync(lane)
    for k in range(lane, nv, bd):
        touched = int(0)
        for row in range(3 * count_in[world]):
            if contact_J_in[world, row, k] != wp.float64(0.0):
                touched = 1
        for r in range(row_count):
            if row_active_in[world, r] != 0 and row_J_in[world, r, k] != wp.float64(0.0):
                touched = 1
        if touched == 1:
            tree_scratch[world, dof_tree[k]] = 1
    block_sync(lane)
    for k in range(lane, nv, bd):
        m = tree_scratch[world, dof_tree[k]]
        dof_mask_out[world, k] = m
        if m == 1:
            v_out[world, k] = v0_in[world, k]
        else:
            v_out[world, k] = v_star_in[world, k]


@wp.kernel
def _row_support(nv: int, row_count: int, dense: int, count_in: wp.array(dtype=int),
                 contact_J_in: wp.array3d(dtype=wp.float64), row_active_in: wp.array2d(dtype=int),
                 row_J_in: wp.array3d(dtype=wp.float64), A_in: wp.array3d(dtype=wp.float64),
                 contact_cols_out: wp.array3d(dtype=int), contact_ncols_out: wp.array2d(dtype=int),
                 row_cols_out: wp.array3d(dtype=int), row_ncols_out: wp.array2d(dtype=int),
                 A_cols_out: wp.array3d(dtype=int), A_ncols_out: wp.array2d(dtype=int),
                 dof_contacts_out: wp.array3d(dtype=int), dof_ncontacts_out: wp.array2d(dtype=int),
                 dof_rows_out: wp.array3d(dtype=int), dof_nrows_out: wp.array2d(dtype=int)):
    """Ascending lists of the columns where a contact's 3 rows, a scalar row in use or a row of A
    is not 0, and the transposed lists: per DOF, the contacts and scalar rows in use that list it.

    One thread per (world, k): contact k's list, scalar row k's, row k of A's and DOF k's lists
    (each where k is in range); every list is built by one thread in ascending order from J and
    A directly, so no thread waits for another. ``dense != 0`` lists every column (the plain
    path). A NaN entry counts as non-zero, so a non-finite J or A still reaches the products and
    is flagged there.
    """
    world, k = wp.tid()
    zero = wp.float64(0.0)
    C = count_in[world]
    if k < C:
        n = int(0)
        for col in range(nv):
            if (dense != 0 or contact_J_in[world, 3 * k, col] != zero or contact_J_in[world, 3 * k + 1, col] != zero
                    or contact_J_in[world, 3 * k + 2, col] != zero):
                contact_cols_out[world, k, n] = col
                n = n + 1
        contact_ncols_out[world, k] = n
    if k < row_count:
        n = int(0)
        if row_active_in[world, k] != 0:
            for col in range(nv):
                if dense != 0 or row_J_in[world, k, col] != zero:
                    row_cols_out[world, k, n] = col
                    n = n + 1
        row_ncols_out[world, k] = n
    if k < nv:
        n = int(0)
        for col in range(nv):
            if dense != 0 or A_in[world, k, col] != zero:
                A_cols_out[world, k, n] = col
                n = n + 1
        A_ncols_out[world, k] = n
        m = int(0)
        for c in range(C):
            if (dense != 0 or contact_J_in[world, 3 * c, k] != zero or contact_J_in[world, 3 * c + 1, k] != zero
                    or contact_J_in[world, 3 * c + 2, k] != zero):
                dof_contacts_out[world, k, m] = c
                m = m + 1
        dof_ncontacts_out[world, k] = m
        m = int(0)
        for r in range(row_count):
            if row_active_in[world, r] != 0 and (dense != 0 or row_J_in[world, r, k] != zero):
                dof_rows_out[world, k, m] = r
                m = m + 1
        dof_nrows_out[world, k] = m


def limit_constraints(m, layout: RowLayout, dt, joint_q, v0, v_star, A, body_X, dof_S, active, J, R, v_hat) -> None:
    """Launch: which limit rows (the layout's first ``limit_count`` scalar rows) are in their window
    this step, with J, R, v̂ (docs/formulation.md § Limits)."""
    if layout.limit_count == 0:
        return
    launch_threads(_limit_constraints, dim=(m.num_worlds, layout.limit_count), device=m.device,
                   inputs=[m.joint_parent, m.joint_child,
                   m.joint_X_p, m.joint_X_c, m.joint_qd_start, m.body_parent, m.body_joint, m.dof_coord,
                   *(m.params.array(k) for k in ("joint_limit_lower", "joint_limit_upper", "joint_limit_ke",
                                                  "joint_limit_kd")), layout.limit_kind,
                   layout.limit_index, layout.limit_side, layout.limit_count, m.nv, wp.float64(dt), joint_q, v0,
                   v_star, A, body_X, dof_S], outputs=[active, J, R, v_hat])


def drive_constraints(m, layout: RowLayout, dt, joint_q, A, q0, Kp, Kd, active, J) -> None:
    """Launch: each drive's row (the layout's drive rows) with its q₀ and near-rigid effective gains
    (docs/formulation.md § Drives)."""
    if layout.drive_count == 0:
        return
    launch_threads(_drive_constraints, dim=(m.num_worlds, layout.drive_count), device=m.device,
                   inputs=[m.dof_coord, m.params.array("joint_target_ke"), m.params.array("joint_target_kd"),
                   layout.drive_dof, layout.drive_count, layout.drive_row0, m.nv, wp.float64(dt), joint_q, A],
                   outputs=[q0, Kp, Kd, active, J])


def participation(m, row_count, contacts, contact_J, row_active, row_J, tree_scratch, v0, v_star, dof_mask,
                  v) -> None:
    """Launch: participating DOFs and the Newton warm start."""
    launch_blocks(_participation, num_worlds=m.num_worlds, device=m.device, inputs=[m.dof_tree, m.nv,
                  m.tree_count, row_count, contacts.count, contact_J, row_active, row_J, tree_scratch, v0, v_star],
                  outputs=[dof_mask, v])


def row_support(m, row_count, dense, contacts, contact_J, row_active, row_J, A, contact_cols, contact_ncols,
                row_cols, row_ncols, A_cols, A_ncols, dof_contacts, dof_ncontacts, dof_rows, dof_nrows) -> None:
    """Launch: the non-zero columns of every contact block, scalar row in use and row of A, and
    per DOF the contacts and scalar rows in use whose lists hold it (ascending).

    The Newton loop's products (J·v, Jᵀγ, JᵀGJ, A·x) run over these lists only; an entry left
    out is exactly zero, so the sums are the dense ones term for term (``dense=True``: every
    column, the plain path kept for comparison, ``SolverSAP.sparse_rows = False``). The
    per-DOF lists serve the fused Newton loop, whose lanes own DOFs (Jᵀγ and rows of H).
    """
    items = max(contact_J.shape[1] // 3, row_count, m.nv)  # contact slots, scalar rows, DOFs
    launch_threads(_row_support, dim=(m.num_worlds, items), device=m.device, inputs=[m.nv, row_count, int(dense),
                   contacts.count, contact_J, row_active, row_J, A], outputs=[contact_cols, contact_ncols,
                   row_cols, row_ncols, A_cols, A_ncols, dof_contacts, dof_ncontacts, dof_rows, dof_nrows])


def make_terms(T):
    """``(friction_cone, limit_term, drive_term)`` Warp functions in scalar type T.

    docs/formulation.md § The cost and its derivatives.
    """
    V3 = wp.types.vector(3, T)
    M33 = wp.types.matrix((3, 3), T)

    @wp.func
    def friction_cone(vc: V3, R: V3, v_hat_n: T, mu: T):
        """γ, G, ℓ and the region of one contact (see sap_ref.constraints.friction_cone)."""
        y = V3((-vc[0]) / R[0], (-vc[1]) / R[1], (v_hat_n - vc[2]) / R[2])
        y_r = wp.sqrt(y[0] * y[0] + y[1] * y[1] + T(SOFT_NORM_EPS) * T(SOFT_NORM_EPS))
        t0 = y[0] / y_r
        t1 = y[1] / y_r
        mu_hat = mu * R[0] / R[2]
        f = T(1.0) / (T(1.0) + mu * mu * R[0] / R[2])
        gamma = V3(T(0.0), T(0.0), T(0.0))
        G = M33()
        mode = int(NO_CONTACT)
        if y_r <= mu * y[2]:
            mode = int(STICTION)
            gamma = y
            for i in range(3):
                G[i, i] = T(1.0) / R[i]
        elif y[2] > -mu_hat * y_r and mu * y[2] < y_r:
            mode = int(SLIDING)
            g_n = f * (y[2] + mu_hat * y_r)
            gamma = V3(mu * g_n * t0, mu * g_n * t1, g_n)
            D = M33()
            P00 = t0 * t0
            P01 = t0 * t1
            P11 = t1 * t1
            a = g_n / y_r
            b = mu_hat * f
            D[0, 0] = mu * (a * (T(1.0) - P00) + b * P00)
            D[0, 1] = mu * (-a * P01 + b * P01)
            D[1, 0] = D[0, 1]
            D[1, 1] = mu * (a * (T(1.0) - P11) + b * P11)
            D[0, 2] = mu * f * t0
            D[1, 2] = mu * f * t1
            D[2, 0] = mu_hat * f * t0
            D[2, 1] = mu_hat * f * t1
            D[2, 2] = f
            for i in range(3):
                for j in range(3):
                    G[i, j] = D[i, j] / R[j]
        ell = T(0.5) * (gamma[0] * R[0] * gamma[0] + gamma[1] * R[1] * gamma[1] + gamma[2] * R[2] * gamma[2])
        return gamma, G, ell, mode

    @wp.func
    def limit_term(vc: T, R: T, v_hat: T, bilateral: int):
        """γ = max(0, y), G = 1/R while y > 0, ℓ = ½Rγ² (y = (v̂ − vc)/R); a ``bilateral`` row
        (a holonomic constraint's, docs/formulation.md § Holonomic constraints) drops the clamp:
        γ = y, G = 1/R."""
        y = (v_hat - vc) / R
        gamma = wp.max(y, T(0.0))
        G = T(0.0)
        if y > T(0.0) or bilateral != 0:
            G = T(1.0) / R
        if bilateral != 0:
            gamma = y
        return gamma, G, T(0.5) * R * gamma * gamma

    @wp.func
    def drive_term(vc: T, h: T, q0: T, q_target: T, v_target: T, u0: T, Kp: T, Kd: T, e: T):
        """γ = h·clamp(y, ±e), G = h(hKp + Kd) inside, ℓ = (h/c)Φ_e(y) (docs/formulation.md § Drives)."""
        y = -Kp * (q0 + h * vc - q_target) - Kd * (vc - v_target) + u0
        c = h * Kp + Kd
        gamma = h * wp.clamp(y, -e, e)
        G = T(0.0)
        phi = T(0.0)
        if wp.abs(y) <= e:
            G = h * c
            phi = T(0.5) * y * y
        else:
            phi = e * (wp.abs(y) - T(0.5) * e)
        return gamma, G, (h / c) * phi

    return friction_cone, limit_term, drive_term


@built_once(key=lambda T, similar: (T, bool(similar)))
def hunt_crossley_term(T, similar: bool):
    """The Hunt–Crossley constraint of one contact in scalar T, ``similar`` or lagged (memoized):
    ``hunt_crossley(vc, mu, h, k, d, fe0, n0, eps) -> (gamma, G, ell, mode)``.

    The same formulas, in the same order, as :func:`sap_ref.constraints.hunt_crossley`
    (docs/formulation.md § Hunt–Crossley contact): with ‖v_t‖_s = √(‖v_t‖² + ε²) − ε,
    s = ‖v_t‖_s + ε, t̂ = v_t/s, the normal impulse n(z) = h(fₑ₀ − hkz)₊(1 − dz)₊, its derivative
    n'(z) where both factors are > 0 (else 0) and its antiderivative N(z), constant past
    v̂ = min(fₑ₀/h/(k + g), 1/(d + g)) (g = HC_VELOCITY_GUARD); similar: z = vₙ − μ‖v_t‖_s,
    ℓ = −N(z), friction μn(z); lagged: z = vₙ, ℓ = −N(vₙ) + μn₀‖v_t‖_s, friction μn₀. The
    variant is fixed when the kernels are built (no runtime branch). Drake:
    ``SapHuntCrossleyConstraint``.
    """
    V3 = wp.types.vector(3, T)
    M33 = wp.types.matrix((3, 3), T)
    is_similar = bool(similar)

    @wp.func
    def hunt_crossley(vc: V3, mu: T, h: T, k: T, d: T, fe0: T, n0: T, eps: T):
        """γ, G, ℓ and the regime of one Hunt–Crossley contact (see the factory's docstring)."""
        vt2 = vc[0] * vc[0] + vc[1] * vc[1]
        vt_soft = wp.sqrt(vt2 + eps * eps) - eps
        s = vt_soft + eps
        t0 = vc[0] / s
        t1 = vc[1] / s
        z = vc[2]
        if wp.static(is_similar):
            z = vc[2] - mu * vt_soft
        xdot = -z
        fe = fe0 + h * k * xdot
        damping = T(1.0) + d * xdot
        n = T(0.0)
        dn = T(0.0)
        if fe > T(0.0) and damping > T(0.0):
            n = h * fe * damping
            dn = -h * (k * h * damping + d * fe)
        v_d = T(1.0) / (d + T(HC_VELOCITY_GUARD))
        v_x = fe0 / h / (k + T(HC_VELOCITY_GUARD))
        v = wp.min(z, wp.min(v_x, v_d))
        df = -h * k * v
        N = h * (v * (fe0 + T(0.5) * df) - d * v * v / T(2.0) * (fe0 + T(_TWO_THIRDS) * df))
        n_friction = n0
        if wp.static(is_similar):
            n_friction = n
        gamma = V3(-mu * n_friction * t0, -mu * n_friction * t1, n)
        P00 = t0 * t0
        P01 = t0 * t1
        P11 = t1 * t1
        G = M33()
        ell = T(0.0)
        if wp.static(is_similar):
            a = -mu * mu * dn
            b = mu * n
            G[0, 0] = a * P00 + b * (T(1.0) - P00) / s
            G[0, 1] = a * P01 + b * (T(0.0) - P01) / s
            G[1, 0] = G[0, 1]
            G[1, 1] = a * P11 + b * (T(1.0) - P11) / s
            G[0, 2] = mu * dn * t0
            G[1, 2] = mu * dn * t1
            G[2, 0] = G[0, 2]
            G[2, 1] = G[1, 2]
            ell = -N
        else:
            c = mu * n0
            G[0, 0] = c * (T(1.0) - P00) / s
            G[0, 1] = c * (T(0.0) - P01) / s
            G[1, 0] = G[0, 1]
            G[1, 1] = c * (T(1.0) - P11) / s
            ell = -N + mu * vt_soft * n0
        G[2, 2] = -dn
        mode = int(SLIDING)
        if wp.sqrt(vt2) <= eps:
            mode = int(STICTION)
        if n == T(0.0) and mu * n_friction == T(0.0):
            mode = int(NO_CONTACT)
        return gamma, G, ell, mode

    return hunt_crossley
