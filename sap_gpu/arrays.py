"""Device-side data: the model's arrays on a Warp device and state/control/contacts transfers.

``GpuModel`` holds one world's template (the frozen :class:`~sap_common.model.SapModel`) as Warp
arrays plus the sizes every kernel needs. Per-world data keep the host dataclasses
(:class:`~sap_common.state.SapState`, ``SapControl``, ``SapContacts``) with ``wp.array`` fields
shaped like the host arrays (``(num_worlds, …)``); ``body_q`` is ``(num_worlds, B)`` of
``wp.transformd`` and ``body_qd``/``body_f`` ``(num_worlds, B)`` of ``wp.spatial_vectord``, whose
NumPy views are the host's ``(num_worlds, B, 7)`` and ``(num_worlds, B, 6)``.

Kernels fill contact slots only through :func:`write_contact` (or its two halves) and
:func:`clear_contact`, on the :class:`ContactSlots` of the contacts, as ``sap_ref.arrays``' functions
of the same names do on the host: a new field of the record is written in one place per backend.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import warp as wp

from sap_common.conventions import check_num_worlds, check_order, quaternion_coords
from sap_common.model import JointType, SapModel
from sap_common.state import (
    CONTACT_SLOT_FIELDS,
    CONTACT_WORLD_FIELDS,
    INDEX_FIELDS,
    MemoryEstimate,
    SapContacts,
    SapControl,
    SapState,
    available_host_memory,
    check_capacity,
    check_dtypes,
    check_memory,
    check_type,
    contacts_memory,
    control_memory,
    keep_stamp,
    state_memory,
)

from .device import STAGING, free_memory, get_device

__all__ = ["GpuModel", "tree_levels", "to_device", "to_host", "state", "control", "contacts", "device_of",
           "check_device_state", "check_device_control", "check_device_contacts", "check_array", "ContactSlots",
           "contact_slots", "write_contact", "write_contact_point", "write_contact_pair", "clear_contact"]

# Warp dtypes of the host arrays whose last axis is a transform / spatial vector / 3-vector.
_VEC_FIELDS = {"body_q": wp.transformd, "body_qd": wp.spatial_vectord, "body_f": wp.spatial_vectord,
               "x0": wp.vec3d, "x1": wp.vec3d, "normal": wp.vec3d}


def _arr(a, dtype, device):
    return wp.array(np.ascontiguousarray(a), dtype=dtype, device=device)


class GpuModel:
    """A :class:`SapModel` on a Warp device (read-only arrays, one world's template).

    Sizes: ``num_worlds``, ``body_count`` B, ``joint_count`` J, ``nq``, ``nv``, ``shape_count``,
    ``pair_count``. Per-DOF ``dof_joint`` (owning joint), ``dof_is_linear`` (1 for a translation),
    ``dof_coord`` (the coordinate of a scalar DOF, −1 for ball/free/distance DOFs), and
    ``joint_lin_count``/``joint_ang_count`` complete the joint description.
    """

    def __init__(self, model: SapModel, device=None):
        self.host = model
        self.device = get_device(device)
        d = self.device
        m = model
        self.num_worlds, self.body_count, self.joint_count = m.num_worlds, m.body_count, m.joint_count
        self.nq, self.nv, self.shape_count = m.joint_coord_count, m.joint_dof_count, m.shape_count
        self.pair_count = len(m.shape_pair)
        f64, i32 = wp.float64, wp.int32
        self.body_mass = _arr(m.body_mass, f64, d)
        self.body_com = _arr(m.body_com, wp.vec3d, d)
        self.body_inertia = _arr(m.body_inertia, wp.mat33d, d)
        inv = np.array([np.linalg.inv(I) if mass > 0 else np.zeros((3, 3))
                        for mass, I in zip(m.body_mass, m.body_inertia)]).reshape(-1, 3, 3)
        self.body_inertia_inv = _arr(inv, wp.mat33d, d)
        self.body_parent = _arr(m.body_parent, i32, d)
        self.body_joint = _arr(m.body_joint, i32, d)
        # Bodies whose inverse inertia no contact weight counts: welded to the world or kinematic
        # (infinite mass for contact, docs/formulation.md § Kinematic bodies).
        self.body_static = _arr((m.body_static | m.body_kinematic).astype(np.int32), i32, d)
        self.has_kinematic = bool(m.dof_kinematic.any())
        self.dof_kinematic = _arr(m.dof_kinematic.astype(np.int32), i32, d)
        self.joint_type = _arr(m.joint_type, i32, d)
        self.joint_parent = _arr(m.joint_parent, i32, d)
        self.joint_child = _arr(m.joint_child, i32, d)
        self.joint_X_p = _arr(m.joint_X_p, wp.transformd, d)
        self.joint_X_c = _arr(m.joint_X_c, wp.transformd, d)
        self.joint_q_start = _arr(m.joint_q_start, i32, d)
        self.joint_qd_start = _arr(m.joint_qd_start, i32, d)
        self.joint_lin_count = _arr(m.joint_dof_dim[:, 0], i32, d)
        self.joint_ang_count = _arr(m.joint_dof_dim[:, 1], i32, d)
        self.joint_order = _arr(m.joint_order, i32, d)
        level_start, children, child_start = tree_levels(m)
        self.level_count = len(level_start) - 1
        self.level_start = _arr(level_start, i32, d)
        self.body_children = _arr(children if len(children) else np.zeros(1, np.int32), i32, d)
        self.body_child_start = _arr(child_start, i32, d)
        dof_joint = np.zeros(m.joint_dof_count, np.int32)
        dof_is_linear = np.zeros(m.joint_dof_count, np.int32)
        dof_coord = np.full(m.joint_dof_count, -1, np.int32)
        for j in range(m.joint_count):
            sl = m.joint_qd_slice(j)
            dof_joint[sl] = j
            jt = JointType(int(m.joint_type[j]))
            if jt in (JointType.PRISMATIC, JointType.REVOLUTE, JointType.D6):
                dof_coord[sl] = np.arange(int(m.joint_q_start[j]), int(m.joint_q_start[j + 1]))
                dof_is_linear[sl.start:sl.start + int(m.joint_dof_dim[j, 0])] = 1
        self.dof_joint = _arr(dof_joint, i32, d)
        self.dof_is_linear = _arr(dof_is_linear, i32, d)
        self.dof_coord = _arr(dof_coord, i32, d)
        self.dof_tree = _arr(m.dof_tree, i32, d)
        self.joint_axis = _arr(m.joint_axis, wp.vec3d, d)
        for name in ("joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd", "joint_effort_limit",
                     "joint_limit_lower", "joint_limit_upper", "joint_limit_ke", "joint_limit_kd"):
            setattr(self, name, _arr(getattr(m, name), f64, d))
        self.shape_type = _arr(m.shape_type, i32, d)
        self.shape_body = _arr(m.shape_body, i32, d)
        self.shape_transform = _arr(m.shape_transform, wp.transformd, d)
        self.shape_size = _arr(m.shape_size, wp.vec3d, d)
        self.shape_margin = _arr(m.shape_margin, f64, d)
        self.shape_pair = _arr(m.shape_pair.reshape(-1, 2), i32, d)
        self.gravity = wp.vec3d(*m.gravity.tolist())
        quats = quaternion_coords(m)  # first joint_q index of each BALL/FREE/DISTANCE quaternion
        self.quat_count = len(quats)
        self.quat_coord = _arr(quats if len(quats) else np.zeros(1, np.int32), i32, d)
        self.tree_count = m.tree_count
        # The per-world parameters kernels read (sap_gpu.parameters): the model's values, shared by
        # every world, unless a solver or pipeline is given its own WorldParameters.
        from .parameters import shared_parameters

        self.params = shared_parameters(m, d)


def tree_levels(m: SapModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tree by levels, for kernels that walk it with one lane per body.

    ``joint_order`` is sorted by the depth of each joint's child (roots, FREE/DISTANCE children
    included, at depth 0), so each level is a contiguous range of it. Returns ``level_start``
    (levels + 1,): level ℓ is ``joint_order[level_start[ℓ]:level_start[ℓ + 1]]``; and the children
    of every body as ``body_children`` / ``body_child_start`` (B + 1,): the children of body b
    are ``body_children[body_child_start[b]:body_child_start[b + 1]]``, in *decreasing* position
    in ``joint_order``: the order in which a children-before-parents pass over ``joint_order``
    reaches them, so a lane summing a body's children adds them in that pass's order.
    """
    B = m.body_count
    depth = np.zeros(B, np.int64)
    for j in m.joint_order:  # parents first
        c = int(m.joint_child[j])
        p = int(m.body_parent[c])
        depth[c] = depth[p] + 1 if p >= 0 else 0
    d = depth[m.joint_child[m.joint_order]] if m.joint_count else np.zeros(0, np.int64)
    if np.any(np.diff(d) < 0):  # SapModel sorts joint_order by depth; the levels rely on it
        raise ValueError("joint_order: expected the joints sorted by the depth of their child body (parents "
                         f"first, level by level), got depths {d.tolist()}")
    level_start = np.concatenate([[0], np.flatnonzero(np.diff(d)) + 1, [len(d)]]).astype(np.int32)
    if m.joint_count == 0:
        level_start = np.zeros(1, np.int32)
    lists = [[] for _ in range(B)]
    for j in m.joint_order[::-1]:
        c = int(m.joint_child[j])
        if m.body_parent[c] >= 0:
            lists[int(m.body_parent[c])].append(c)
    child_start = np.zeros(B + 1, np.int32)
    child_start[1:] = np.cumsum([len(x) for x in lists])
    children = np.array([c for x in lists for c in x], np.int32)
    return level_start, children, child_start


def device_of(array) -> wp.context.Device:
    return array.device


def _device_dtype(name):
    """The Warp dtype of device field ``name`` (the host dtype of ``sap_common.state.field_dtype``)."""
    return _VEC_FIELDS.get(name, wp.int32 if name in INDEX_FIELDS else wp.float64)


def _to_device_array(name, a, device):
    if isinstance(a, wp.array):
        if a.dtype != _device_dtype(name):
            raise ValueError(f"{name}: expected dtype {wp.types.type_repr(_device_dtype(name))}, "
                             f"got {wp.types.type_repr(a.dtype)}")
        return wp.clone(a, device=device)  # always a copy, like the host → device path
    # The host dtype was checked (float64 / int32): the upload copies, it never converts.
    return wp.array(np.ascontiguousarray(a), dtype=_device_dtype(name), device=device)


def to_device(obj, device=None):
    """A copy of a ``SapState``/``SapControl``/``SapContacts`` with ``wp.array`` fields on ``device``.

    Host (NumPy) fields are uploaded; fields already on a device are copied to ``device``. The
    result never shares memory with ``obj``. A host field of the wrong dtype (anything but
    float64, or int32 for contact counts and indices) is a ``ValueError`` naming it; nothing is
    converted. An unknown ``device`` is a ``ValueError`` listing the devices here.
    """
    if not isinstance(obj, (SapState, SapControl, SapContacts)):
        raise ValueError(f"obj: expected SapState, SapControl or SapContacts, got {type(obj).__name__}")
    device = get_device(device)
    check_dtypes(obj, type(obj).__name__)
    return keep_stamp(obj, dataclasses.replace(obj, **{f.name: _to_device_array(f.name, getattr(obj, f.name), device)
                                                       for f in dataclasses.fields(obj)
                                                       if isinstance(getattr(obj, f.name), (np.ndarray, wp.array))}))


def to_host(obj):
    """A copy with NumPy fields (host layout: transforms as (…, 7), spatial vectors as (…, 6))."""
    if not isinstance(obj, (SapState, SapControl, SapContacts)):
        raise ValueError(f"obj: expected SapState, SapControl or SapContacts, got {type(obj).__name__}")
    return keep_stamp(obj, dataclasses.replace(obj, **{f.name: (getattr(obj, f.name).numpy().copy()
                                                                if isinstance(getattr(obj, f.name), wp.array)
                                                                else np.array(getattr(obj, f.name)))
                                                       for f in dataclasses.fields(obj)
                                                       if isinstance(getattr(obj, f.name), (np.ndarray, wp.array))}))


def state(model: SapModel, device=None) -> SapState:
    """``model.state()`` on ``device`` (public order)."""
    _check_transfer(state_memory(model), device, "sap_gpu.state")
    return to_device(model.state(), device)


def control(model: SapModel, device=None) -> SapControl:
    """``model.control()`` on ``device`` (public order)."""
    _check_transfer(control_memory(model), device, "sap_gpu.control")
    return to_device(model.control(), device)


def contacts(num_worlds: int, capacity: int, device=None) -> SapContacts:
    """Empty contacts on ``device``."""
    C = check_capacity(capacity)
    _check_transfer(contacts_memory(check_num_worlds(num_worlds), C), device, "sap_gpu.contacts", capacity=C)
    return to_device(SapContacts.allocate(num_worlds, C), device)


def _check_transfer(estimate: MemoryEstimate, device, what: str, capacity: int | None = None) -> None:
    """The memory check of host arrays built and then copied to ``device``: on the CPU device both
    copies live in host memory at once (docs/scaling.md § Memory)."""
    d = get_device(device)
    if d.is_cpu:
        estimate = estimate + MemoryEstimate(estimate.num_worlds, tuple(
            dataclasses.replace(p, name=STAGING) for p in estimate.parts))
        check_memory(estimate, available_host_memory, what, where="device cpu", capacity=capacity)
    else:
        check_memory(estimate, lambda: free_memory(d), what, where=f"device {d}", capacity=capacity)


# ----------------------------------------------------------------------------- the contact record in kernels


@wp.struct
class ContactSlots:
    """The per-slot arrays of device contacts (every ``SapContacts`` field but ``count`` and
    ``overflow``, same names, (num_worlds, C)): what a kernel that fills contact slots takes, and
    writes through :func:`write_contact` and :func:`clear_contact` only. :func:`contact_slots`
    makes one from device contacts."""
    shape0: wp.array2d(dtype=wp.int32)
    shape1: wp.array2d(dtype=wp.int32)
    body0: wp.array2d(dtype=wp.int32)
    body1: wp.array2d(dtype=wp.int32)
    x0: wp.array2d(dtype=wp.vec3d)
    x1: wp.array2d(dtype=wp.vec3d)
    normal: wp.array2d(dtype=wp.vec3d)
    phi0: wp.array2d(dtype=wp.float64)
    margin0: wp.array2d(dtype=wp.float64)
    margin1: wp.array2d(dtype=wp.float64)
    mu: wp.array2d(dtype=wp.float64)
    ke: wp.array2d(dtype=wp.float64)
    ke0: wp.array2d(dtype=wp.float64)
    ke1: wp.array2d(dtype=wp.float64)
    tau_d: wp.array2d(dtype=wp.float64)
    hcd: wp.array2d(dtype=wp.float64)
    area: wp.array2d(dtype=wp.float64)


def contact_slots(contacts: SapContacts, made: ContactSlots | None = None) -> ContactSlots:
    """The :class:`ContactSlots` of device ``contacts`` (the same arrays, not copies): ``made``
    itself when it already holds exactly those arrays. Filling a Warp struct's array fields costs,
    on the CPU device, about as much as a collision kernel, so a caller that asks every step passes
    back what it got the last time."""
    if made is not None and all(getattr(made, f) is getattr(contacts, f) for f in CONTACT_SLOT_FIELDS):
        return made
    out = ContactSlots()
    for f in CONTACT_SLOT_FIELDS:
        setattr(out, f, getattr(contacts, f))
    return out


@wp.func
def write_contact_point(contacts: ContactSlots, world: int, slot: int, shape0: int, shape1: int, body0: int,
                        body1: int, x0: wp.vec3d, x1: wp.vec3d, normal: wp.vec3d, phi0: wp.float64, ke: wp.float64,
                        area: wp.float64):
    """The point's half of :func:`write_contact`: its shapes and bodies, geometry and its own ``ke``,
    ``phi0`` and ``area`` (point contact: the pair's combined k, the geometry's φ₀, 0; a contact
    model with per-point values, such as a hydroelastic face, its own)."""
    contacts.shape0[world, slot] = shape0
    contacts.shape1[world, slot] = shape1
    contacts.body0[world, slot] = body0
    contacts.body1[world, slot] = body1
    contacts.x0[world, slot] = x0
    contacts.x1[world, slot] = x1
    contacts.normal[world, slot] = normal
    contacts.phi0[world, slot] = phi0
    contacts.ke[world, slot] = ke
    contacts.area[world, slot] = area


@wp.func
def write_contact_pair(contacts: ContactSlots, world: int, slot: int, margin0: wp.float64, margin1: wp.float64,
                       mu: wp.float64, ke0: wp.float64, ke1: wp.float64, tau_d: wp.float64, hcd: wp.float64):
    """The shape pair's half of :func:`write_contact`: the margins and the combined materials."""
    contacts.margin0[world, slot] = margin0
    contacts.margin1[world, slot] = margin1
    contacts.mu[world, slot] = mu
    contacts.ke0[world, slot] = ke0
    contacts.ke1[world, slot] = ke1
    contacts.tau_d[world, slot] = tau_d
    contacts.hcd[world, slot] = hcd


@wp.func
def write_contact(contacts: ContactSlots, world: int, slot: int, shape0: int, shape1: int, body0: int, body1: int,
                  x0: wp.vec3d, x1: wp.vec3d, normal: wp.vec3d, phi0: wp.float64, margin0: wp.float64,
                  margin1: wp.float64, mu: wp.float64, ke: wp.float64, ke0: wp.float64, ke1: wp.float64,
                  tau_d: wp.float64, hcd: wp.float64, area: wp.float64):
    """Slot ``slot`` of ``world``: every field of the contact record (``sap_common.state.SapContacts``),
    the point's half and the pair's. A kernel whose values are loads from memory may call the two
    halves itself, loading each half's values just before storing them: a call takes its arguments
    all at once, so one call keeps every loaded value live until the stores (the collision's
    compaction's registers in docs/benchmarks.md § Registers behind the code's choices)."""
    write_contact_point(contacts, world, slot, shape0, shape1, body0, body1, x0, x1, normal, phi0, ke, area)
    write_contact_pair(contacts, world, slot, margin0, margin1, mu, ke0, ke1, tau_d, hcd)


@wp.func
def clear_contact(contacts: ContactSlots, world: int, slot: int):
    """Slot ``slot`` of ``world`` empty, as ``SapContacts.allocate`` leaves it: shapes and bodies −1,
    the rest 0."""
    zero = wp.float64(0.0)
    origin = wp.vec3d(zero, zero, zero)
    write_contact(contacts, world, slot, -1, -1, -1, -1, origin, origin, origin, zero, zero, zero, zero, zero, zero,
                  zero, zero, zero, zero)


# ----------------------------------------------------------------------------- checks of device inputs

def check_array(name, a, shape, dtype, device):
    """``ValueError`` naming ``name`` unless ``a`` is a wp.array of this shape and dtype on ``device``."""
    if not isinstance(a, wp.array):
        raise ValueError(f"{name}: expected a wp.array (use sap_gpu.to_device), got {type(a).__name__}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {wp.types.type_repr(dtype)}, got {wp.types.type_repr(a.dtype)}")
    if a.device != device:
        raise ValueError(f"{name}: on device {a.device}, but the solver runs on {device}")


def check_device_state(m: GpuModel, state: SapState, name: str = "state") -> None:
    """``ValueError`` naming the field if a device state does not match the model (docs/design.md § Bad input)."""
    check_type(name, state, SapState)
    W, B = m.num_worlds, m.body_count
    check_array(f"{name}.joint_q", state.joint_q, (W, m.nq), wp.float64, m.device)
    check_array(f"{name}.joint_qd", state.joint_qd, (W, m.nv), wp.float64, m.device)
    check_array(f"{name}.body_q", state.body_q, (W, B), wp.transformd, m.device)
    check_array(f"{name}.body_qd", state.body_qd, (W, B), wp.spatial_vectord, m.device)
    check_array(f"{name}.body_f", state.body_f, (W, B), wp.spatial_vectord, m.device)
    for flag in ("joint_qd_order", "body_f_order"):
        check_order(f"{name}.{flag}", getattr(state, flag))


def check_device_control(m: GpuModel, control: SapControl, name: str = "control") -> None:
    """``ValueError`` naming the field if a device control does not match the model."""
    check_type(name, control, SapControl)
    for f in ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act"):
        check_array(f"{name}.{f}", getattr(control, f), (m.num_worlds, m.nv), wp.float64, m.device)
    check_order(f"{name}.joint_f_order", control.joint_f_order)


# (field, one value per slot, device dtype) of every contacts field, in the order checked: found once
_CONTACT_CHECKS = tuple((f, f in CONTACT_SLOT_FIELDS, _device_dtype(f))
                        for f in CONTACT_WORLD_FIELDS + CONTACT_SLOT_FIELDS)


def check_device_contacts(m: GpuModel, contacts: SapContacts, capacity: int, name: str = "contacts") -> None:
    """``ValueError`` naming the field if device contacts do not match the model and ``capacity``."""
    W, C = m.num_worlds, capacity
    if not isinstance(contacts, SapContacts):
        raise ValueError(f"{name}: expected SapContacts or None, got {type(contacts).__name__}")
    if isinstance(contacts.shape0, wp.array) and contacts.shape0.ndim == 2 and contacts.shape0.shape[1] != C:
        raise ValueError(f"{name}: capacity {contacts.shape0.shape[1]} does not match the solver's "
                         f"max_rigid_contact {C}")
    for f, per_slot, dtype in _CONTACT_CHECKS:  # a 3-vector is one wp.vec3d: no trailing axis
        check_array(f"{name}.{f}", getattr(contacts, f), (W, C) if per_slot else (W,), dtype, m.device)
