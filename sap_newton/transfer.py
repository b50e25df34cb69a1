"""Newton ``State``/``Control``/``Contacts`` ↔ SAP device data, in Warp kernels on one device.

Newton keeps every world in flat float32 arrays; ``sap_gpu`` keeps one ``(num_worlds, …)``
float64 array per quantity and per :class:`~sap_newton.convert.WorldGroup`. The public orders
are the same (see :mod:`sap_newton.convert`), so every transfer is a gather or a scatter through
the group's index maps, widened or narrowed between float32 and float64 — no reordering, no host
round trip, no allocation after construction (the launches are CUDA-graph capturable).

=====================  ==================================  ===============================
SAP (per group)        Newton                              map
=====================  ==================================  ===============================
``joint_q``            ``State.joint_q``                   ``coord_index``
``joint_qd``           ``State.joint_qd``                  ``dof_index``
``body_q/qd/f``        ``State.body_q/qd/f``               ``body_index``
``joint_f``            ``Control.joint_f``                 ``dof_index``
``joint_target_pos``   ``Control.joint_target_q``          ``target_q_index`` (−1 → 0)
``joint_target_vel``   ``Control.joint_target_qd``         ``target_qd_index`` (−1 → 0)
contacts               ``Contacts.rigid_contact_*``        shape → (group, world, shape)
=====================  ==================================  ===============================

SAP's ``joint_act`` stays zero: Newton's ``Control.joint_act`` feeds Newton's ``Actuator``
objects, which write ``joint_f``; Newton's solvers do not read it either.

Newton contacts: the witness points are Newton's body-frame support points plus their surface
offsets, moved to world by the SAP poses of ``joint_q``; φ₀ = n̂·(x₁ − x₀); materials are
combined per shape pair with :func:`sap_common.collision_rules.combine_materials` and
:func:`~sap_common.collision_rules.combine_hc_dissipation` into per-world tables, on the device,
by one kernel that also refreshes them after a parameter change (Newton's per-contact properties
are not used); point contacts, so ``area`` is 0. Each slot is written
through sap_gpu's contact-record helpers (``write_contact_point``, ``write_contact_pair``). A
world with more contacts than slots keeps an arbitrary subset (Warp's atomic order), counts the
rest in ``overflow`` and is flagged ``CONTACT_OVERFLOW`` by the solver: size
``max_rigid_contact`` for the worst case.
"""

from __future__ import annotations

import numpy as np
import warp as wp

import sap_gpu
from sap_common.config import SapConfig
from sap_gpu import ContactSlots, contact_slots, world_view, write_contact_pair, write_contact_point

from .convert import NewtonConversion

wp.set_module_options({"enable_backward": False})

__all__ = ["Transfer"]


# ---------------------------------------------------------------------------------- kernels


@wp.kernel
def _gather_scalars(index: wp.array2d(dtype=int), value_in: wp.array(dtype=wp.float32),
                    value_out: wp.array2d(dtype=wp.float64)):
    world, i = wp.tid()
    k = index[world, i]
    value = wp.float64(0.0)
    if k >= 0:
        value = wp.float64(value_in[k])
    value_out[world, i] = value


@wp.kernel
def _scatter_scalars(index: wp.array2d(dtype=int), value_in: wp.array2d(dtype=wp.float64),
                     value_out: wp.array(dtype=wp.float32)):
    world, i = wp.tid()
    k = index[world, i]
    if k >= 0:
        value_out[k] = wp.float32(value_in[world, i])


@wp.kernel
def _gather_transforms(index: wp.array2d(dtype=int), X_in: wp.array(dtype=wp.transformf),
                       X_out: wp.array2d(dtype=wp.transformd)):
    world, b = wp.tid()
    X = X_in[index[world, b]]
    X_out[world, b] = wp.transformd(wp.vec3d(wp.transform_get_translation(X)),
                                    wp.quatd(wp.transform_get_rotation(X)))


@wp.kernel
def _scatter_transforms(index: wp.array2d(dtype=int), X_in: wp.array2d(dtype=wp.transformd),
                        X_out: wp.array(dtype=wp.transformf)):
    world, b = wp.tid()
    X = X_in[world, b]
    X_out[index[world, b]] = wp.transformf(wp.vec3f(wp.transform_get_translation(X)),
                                           wp.quatf(wp.transform_get_rotation(X)))


@wp.kernel
def _gather_spatial(index: wp.array2d(dtype=int), V_in: wp.array(dtype=wp.spatial_vectorf),
                    V_out: wp.array2d(dtype=wp.spatial_vectord)):
    world, b = wp.tid()
    V_out[world, b] = wp.spatial_vectord(V_in[index[world, b]])


@wp.kernel
def _scatter_spatial(index: wp.array2d(dtype=int), V_in: wp.array2d(dtype=wp.spatial_vectord),
                     V_out: wp.array(dtype=wp.spatial_vectorf)):
    world, b = wp.tid()
    V_out[index[world, b]] = wp.spatial_vectorf(V_in[world, b])


@wp.func
def _world_point(body: int, X: wp.transformd, p: wp.vec3f) -> wp.vec3d:
    """A Newton contact point (body frame, or world frame for body −1) in world, float64."""
    x = wp.vec3d(p)
    if body >= 0:
        x = wp.transform_point(X, x)
    return x


@wp.kernel
def _route_newton_contacts(
    shape_group: wp.array(dtype=int), shape_slot: wp.array(dtype=int), shape_local: wp.array(dtype=int),
    local_shape_body: wp.array(dtype=int), local_shape_margin: wp.array2d(dtype=wp.float64),
    pair_mu: wp.array3d(dtype=wp.float64), pair_ke: wp.array3d(dtype=wp.float64),
    pair_ke0: wp.array3d(dtype=wp.float64), pair_ke1: wp.array3d(dtype=wp.float64),
    pair_tau: wp.array3d(dtype=wp.float64), pair_hcd: wp.array3d(dtype=wp.float64), group: int, capacity: int,
    contact_count_in: wp.array(dtype=int), shape0_in: wp.array(dtype=int), shape1_in: wp.array(dtype=int),
    point0_in: wp.array(dtype=wp.vec3f), point1_in: wp.array(dtype=wp.vec3f), offset0_in: wp.array(dtype=wp.vec3f),
    offset1_in: wp.array(dtype=wp.vec3f), normal_in: wp.array(dtype=wp.vec3f),
    body_X: wp.array2d(dtype=wp.transformd), use_row_map: int, row_map: wp.array(dtype=wp.vec3i),
    count_out: wp.array(dtype=int), overflow_out: wp.array(dtype=int), contacts_out: ContactSlots,
):
    """One Newton rigid contact into its world's next SAP slot (only this group's worlds); with
    ``use_row_map``, ``row_map[k] = (group, world, slot)`` of the routed contact (rows left at −1
    were not routed to any slot: another model's shape, a skipped shape, or an overflow). A point
    contact: the pair's combined k, the points' φ₀, area 0. The record's two halves are written one
    after the other, each loading its values just before its stores
    (:func:`sap_gpu.arrays.write_contact`)."""
    k = wp.tid()
    if k >= contact_count_in[0]:
        return
    a = shape0_in[k]
    b = shape1_in[k]
    if a < 0 or b < 0 or a >= shape_local.shape[0] or b >= shape_local.shape[0]:
        return  # not a shape of this model
    la = shape_local[a]
    lb = shape_local[b]
    if la < 0 or lb < 0:
        return
    world = int(shape_slot[a])
    g = int(shape_group[a])
    if world < 0:  # shape 0 is global (e.g. the ground): shape 1 names the world
        world = int(shape_slot[b])
        g = int(shape_group[b])
    if world < 0 or g != group:
        return
    slot = wp.atomic_add(count_out, world, 1)
    if slot >= capacity:
        wp.atomic_add(overflow_out, world, 1)
        return
    if use_row_map != 0:
        row_map[k] = wp.vec3i(group, world, slot)
    ba = local_shape_body[la]
    bb = local_shape_body[lb]
    Xa = wp.transform_identity(dtype=wp.float64)
    Xb = wp.transform_identity(dtype=wp.float64)
    if ba >= 0:
        Xa = body_X[world, ba]
    if bb >= 0:
        Xb = body_X[world, bb]
    x0 = _world_point(ba, Xa, point0_in[k] + offset0_in[k])
    x1 = _world_point(bb, Xb, point1_in[k] + offset1_in[k])
    n = wp.normalize(wp.vec3d(normal_in[k]))
    write_contact_point(contacts_out, world, slot, la, lb, ba, bb, x0, x1, n, wp.dot(n, x1 - x0),
                        pair_ke[world, la, lb], wp.float64(0.0))
    write_contact_pair(contacts_out, world, slot, local_shape_margin[world, la], local_shape_margin[world, lb],
                       pair_mu[world, la, lb], pair_ke0[world, la, lb], pair_ke1[world, la, lb],
                       pair_tau[world, la, lb], pair_hcd[world, la, lb])


@wp.kernel
def _clamp_counts(capacity: int, count: wp.array(dtype=int)):
    world = wp.tid()
    count[world] = wp.min(count[world], capacity)


@wp.kernel
def _pair_tables(mu: wp.array2d(dtype=wp.float64), ke: wp.array2d(dtype=wp.float64),
                 tau: wp.array2d(dtype=wp.float64), hcd: wp.array2d(dtype=wp.float64), fallback_mu: wp.float64,
                 fallback_ke: wp.float64, fallback_tau: wp.float64, fallback_hcd: wp.float64,
                 pair_mu: wp.array3d(dtype=wp.float64), pair_ke: wp.array3d(dtype=wp.float64),
                 pair_ke0: wp.array3d(dtype=wp.float64), pair_ke1: wp.array3d(dtype=wp.float64),
                 pair_tau: wp.array3d(dtype=wp.float64), pair_hcd: wp.array3d(dtype=wp.float64)):
    """The combined materials of the ordered shape pair (a, b) of world w from the shapes' values
    with the fallbacks (``sap_gpu.pair_material``, the pipeline's own combination). This one kernel
    builds the tables and refreshes them (SolverSAP.notify_model_changed), so a refreshed table is a
    new solver's, bit for bit."""
    w, a, b = wp.tid()
    m, k, k0, k1, t, d = sap_gpu.pair_material(mu[w, a], mu[w, b], ke[w, a], ke[w, b], tau[w, a], tau[w, b],
                                               hcd[w, a], hcd[w, b], fallback_mu, fallback_ke, fallback_tau,
                                               fallback_hcd)
    pair_mu[w, a, b] = m
    pair_ke[w, a, b] = k
    pair_ke0[w, a, b] = k0
    pair_ke1[w, a, b] = k1
    pair_tau[w, a, b] = t
    pair_hcd[w, a, b] = d


# ---------------------------------------------------------------------------------- launchers


def _check(name: str, a, length: int, dtype, device) -> None:
    if not isinstance(a, wp.array):
        raise ValueError(f"{name}: expected a wp.array, got {type(a).__name__}")
    if a.ndim != 1 or a.shape[0] != length:
        raise ValueError(f"{name}: expected shape ({length},), got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {wp.types.type_repr(dtype)}, got {wp.types.type_repr(a.dtype)}")
    if a.device != device:
        raise ValueError(f"{name}: on device {a.device}, but the SAP data live on {device}")


class _GroupMaps:
    """One group's index maps on the device, and its per-world margins and COMs: ``(Wg, …)`` arrays,
    or one row every world reads (a world-stride-0 view of ``rows[name]``) where the worlds agree."""

    def __init__(self, group, device):
        i32 = lambda a: wp.array(np.ascontiguousarray(a, np.int32), dtype=int, device=device)  # noqa: E731
        self.body_index, self.coord_index, self.dof_index = (i32(group.body_index), i32(group.coord_index),
                                                             i32(group.dof_index))
        self.target_q_index, self.target_qd_index = i32(group.target_q_index), i32(group.target_qd_index)
        m = group.sap_model
        self.shape_body = i32(m.shape_body if m.shape_count else np.zeros(1))
        margin = world_values(group, "shape_margin")
        self.rows = {}  # name -> the stored (rows, …) array behind the (num_worlds, …) one
        self.shape_margin = self._keep("shape_margin", margin if m.shape_count else np.zeros((margin.shape[0], 1)),
                                       wp.float64, m.num_worlds, device)
        self.body_com = self._keep("body_com", world_values(group, "body_com"), wp.vec3d, m.num_worlds, device)

    def _keep(self, name, values, dtype, num_worlds, device) -> wp.array:
        a = _per_world(values, dtype, num_worlds, device)
        self.rows[name] = getattr(a, "_sap_base", a)
        return a


def world_values(group, name: str) -> np.ndarray:
    """Field ``name`` of the group's worlds, (Wg, *shape), or (1, *shape) when every world has the
    template's value."""
    if name in group.parameters:
        return np.asarray(group.parameters[name], np.float64)
    return np.asarray(getattr(group.sap_model, name), np.float64)[None]


def _per_world(values: np.ndarray, dtype, num_worlds: int, device) -> wp.array:
    """``values`` (Wg or 1, …) on the device as a (num_worlds, …) array (one row: a world-stride-0 view)."""
    a = wp.array(np.ascontiguousarray(values), dtype=dtype, device=device)
    if values.shape[0] == num_worlds:
        return a
    view = world_view(a, num_worlds)
    view._sap_base = a  # the view does not own its memory
    return view


class Transfer:
    """Moves data between Newton's flat arrays and the per-group SAP device data.

    Args:
        conversion: the :class:`~sap_newton.convert.NewtonConversion` of the Newton model.
        body_count, joint_coord_count, joint_dof_count, shape_count: the Newton model's sizes.
        device: the Warp device of both sides.
        config: supplies the contact-material fallbacks (default ``SapConfig()``).
    """

    def __init__(self, conversion: NewtonConversion, body_count: int, joint_coord_count: int, joint_dof_count: int,
                 shape_count: int, device, config: SapConfig | None = None):
        self.conversion = conversion
        if device is None:
            raise ValueError("device: the Warp device of the Newton model (explicit; no default device is assumed)")
        self.device = d = wp.get_device(device)
        self.body_count, self.nq, self.nv, self.shape_count = body_count, joint_coord_count, joint_dof_count, \
            shape_count
        self.groups = [_GroupMaps(g, d) for g in conversion.groups]
        i32 = lambda a: wp.array(np.ascontiguousarray(a, np.int32), dtype=int, device=d)  # noqa: E731
        self.shape_group, self.shape_slot = i32(conversion.shape_group), i32(conversion.shape_slot)
        self.shape_local = i32(conversion.shape_local)
        self._no_row_map = wp.zeros(1, dtype=wp.vec3i, device=d)  # stand-in when no row map is kept
        self.config = SapConfig() if config is None else config
        # Per group: the 6 pair tables (mu, ke, ke0, ke1, tau_d, hcd), (Wg, S, S) each, or one row every
        # world reads while the group's worlds have the same shape materials (the stored rows:
        # _pair_rows). Combined on the device (_pair_tables), here and by update_parameters.
        self.pair_materials, self._pair_rows = [], []
        names = ("shape_material_mu", "shape_material_ke", "shape_material_tau", "shape_material_hcd")
        for g in conversion.groups:
            m, S = g.sap_model, g.sap_model.shape_count
            rows = max(world_values(g, n).shape[0] for n in names)
            tables = [wp.zeros((rows, max(S, 1), max(S, 1)), dtype=wp.float64, device=d) for _ in range(6)]
            self._pair_rows.append(tables)
            self.pair_materials.append([t if rows == m.num_worlds else world_view(t, m.num_worlds) for t in tables])
            if S:
                self._combine(len(self._pair_rows) - 1, *(
                    wp.array(np.ascontiguousarray(np.broadcast_to(world_values(g, n), (rows, S))), dtype=wp.float64,
                             device=d) for n in names))

    def _combine(self, g: int, mu, ke, tau, hcd) -> None:
        """Launch: group ``g``'s stored pair tables from per-shape values ((rows or more, S) arrays)."""
        tables, cfg = self._pair_rows[g], self.config
        S = self.conversion.groups[g].sap_model.shape_count
        wp.launch(_pair_tables, dim=(tables[0].shape[0], S, S), device=self.device, inputs=[
            mu, ke, tau, hcd, wp.float64(cfg.fallback_mu), wp.float64(cfg.fallback_stiffness),
            wp.float64(cfg.contact_tau_d), wp.float64(cfg.fallback_hc_dissipation)], outputs=tables)

    # ------------------------------------------------------------------ per-world parameters

    def table_rows(self, g: int) -> dict:
        """How many rows group ``g``'s per-world tables store: ``"body_com"``, ``"shape_margin"`` and
        ``"materials"`` (the pair tables) → Wg, or 1 where every world reads one row."""
        M = self.groups[g]
        return {"body_com": M.rows["body_com"].shape[0], "shape_margin": M.rows["shape_margin"].shape[0],
                "materials": self._pair_rows[g][0].shape[0]}

    def update_parameters(self, g: int, body_com=None, shape_margin=None, materials=None) -> None:
        """Launch: group ``g``'s per-world tables from new per-world values, in place (the arrays a step
        reads stay the same): ``body_com`` ((Wg, B) ``wp.vec3d``), ``shape_margin`` ((Wg, S) float64)
        and ``materials`` (the shapes' mu, ke, tau, hcd, (Wg, S) float64 each: the pair tables are
        combined again). A table stored as one row takes world 0's values: the caller has checked
        that every world's are the same (:meth:`table_rows`)."""
        M = self.groups[g]
        for name, values in (("body_com", body_com), ("shape_margin", shape_margin)):
            if values is not None:
                rows = M.rows[name]
                wp.copy(rows, values[:rows.shape[0]])
        if materials is not None and self.conversion.groups[g].sap_model.shape_count:
            self._combine(g, *materials)

    # ------------------------------------------------------------------ allocation

    def states(self) -> list:
        """One device :class:`~sap_common.state.SapState` per group (public order)."""
        return [sap_gpu.state(g.sap_model, self.device) for g in self.conversion.groups]

    def controls(self) -> list:
        """One device :class:`~sap_common.state.SapControl` per group (public order)."""
        return [sap_gpu.control(g.sap_model, self.device) for g in self.conversion.groups]

    def contacts(self, capacity: int) -> list:
        """One device :class:`~sap_common.state.SapContacts` per group, ``capacity`` slots per world."""
        return [sap_gpu.contacts(g.sap_model.num_worlds, capacity, self.device) for g in self.conversion.groups]

    # ------------------------------------------------------------------ state and control

    def check_state(self, state, name: str = "state") -> None:
        """``ValueError`` naming the field if a Newton ``State`` does not fit the model."""
        d = self.device
        _check(f"{name}.joint_q", state.joint_q, self.nq, wp.float32, d)
        _check(f"{name}.joint_qd", state.joint_qd, self.nv, wp.float32, d)
        _check(f"{name}.body_q", state.body_q, self.body_count, wp.transformf, d)
        _check(f"{name}.body_qd", state.body_qd, self.body_count, wp.spatial_vectorf, d)
        _check(f"{name}.body_f", state.body_f, self.body_count, wp.spatial_vectorf, d)

    def check_control(self, control, name: str = "control") -> None:
        """``ValueError`` naming the field if a Newton ``Control`` does not fit the model."""
        d = self.device
        _check(f"{name}.joint_f", control.joint_f, self.nv, wp.float32, d)
        _check(f"{name}.joint_target_q", control.joint_target_q, self.nq, wp.float32, d)
        _check(f"{name}.joint_target_qd", control.joint_target_qd, self.nv, wp.float32, d)

    def state_to_sap(self, g: int, state, sap_state) -> None:
        """Launch: Newton ``state`` → group ``g``'s ``sap_state`` (joint_q, joint_qd, body_q/qd/f)."""
        M, d = self.groups[g], self.device
        _launch(_gather_scalars, M.coord_index, state.joint_q, sap_state.joint_q, d)
        _launch(_gather_scalars, M.dof_index, state.joint_qd, sap_state.joint_qd, d)
        _launch(_gather_transforms, M.body_index, state.body_q, sap_state.body_q, d)
        _launch(_gather_spatial, M.body_index, state.body_qd, sap_state.body_qd, d)
        _launch(_gather_spatial, M.body_index, state.body_f, sap_state.body_f, d)

    def state_from_sap(self, g: int, sap_state, state) -> None:
        """Launch: group ``g``'s public ``sap_state`` → Newton ``state`` (joint_q, joint_qd, body_q, body_qd;
        ``body_f`` is an input and is left alone)."""
        if sap_state.joint_qd_order != "public":
            raise ValueError("sap_state.joint_qd_order: must be 'public' to copy into a Newton State")
        M, d = self.groups[g], self.device
        _launch(_scatter_scalars, M.coord_index, sap_state.joint_q, state.joint_q, d)
        _launch(_scatter_scalars, M.dof_index, sap_state.joint_qd, state.joint_qd, d)
        _launch(_scatter_transforms, M.body_index, sap_state.body_q, state.body_q, d)
        _launch(_scatter_spatial, M.body_index, sap_state.body_qd, state.body_qd, d)

    def control_to_sap(self, g: int, control, sap_control) -> None:
        """Launch: Newton ``control`` → group ``g``'s ``sap_control`` (public order; ``joint_act`` is not
        read — see the module docstring)."""
        M, d = self.groups[g], self.device
        _launch(_gather_scalars, M.dof_index, control.joint_f, sap_control.joint_f, d)
        _launch(_gather_scalars, M.target_q_index, control.joint_target_q, sap_control.joint_target_pos, d)
        _launch(_gather_scalars, M.target_qd_index, control.joint_target_qd, sap_control.joint_target_vel, d)

    # ------------------------------------------------------------------ contacts

    def contacts_to_sap(self, g: int, contacts, body_X, sap_contacts, row_map=None) -> None:
        """Launch: the Newton ``contacts`` of group ``g``'s worlds → ``sap_contacts``.

        ``body_X (Wg, B)`` are the SAP body poses the body-frame points are moved with (the poses
        of the step's ``joint_q``). ``row_map`` (``wp.vec3i``, at least ``rigid_contact_max`` rows,
        filled with −1 by the caller before the first group): each routed row's (group, world,
        slot), for writing results back in Newton's contact order (``CONTACT_F``).
        """
        M, d, c, s = self.groups[g], self.device, contacts, sap_contacts
        mu, ke, ke0, ke1, tau, hcd = self.pair_materials[g]
        s.count.zero_()
        s.overflow.zero_()
        capacity = int(s.shape0.shape[1])
        if c.rigid_contact_max == 0:
            return
        wp.launch(_route_newton_contacts, dim=c.rigid_contact_max, device=d, inputs=[
            self.shape_group, self.shape_slot, self.shape_local, M.shape_body, M.shape_margin, mu, ke, ke0, ke1, tau,
            hcd, g, capacity, c.rigid_contact_count, c.rigid_contact_shape0, c.rigid_contact_shape1,
            c.rigid_contact_point0, c.rigid_contact_point1, c.rigid_contact_offset0, c.rigid_contact_offset1,
            c.rigid_contact_normal, body_X, int(row_map is not None),
            self._no_row_map if row_map is None else row_map], outputs=[s.count, s.overflow, contact_slots(s)])
        wp.launch(_clamp_counts, dim=s.count.shape[0], device=d, inputs=[capacity], outputs=[s.count])


def _launch(kernel, index, src, dst, device) -> None:
    if index.shape[0] * index.shape[1] == 0:
        return
    wp.launch(kernel, dim=index.shape, device=device, inputs=[index, src], outputs=[dst])
