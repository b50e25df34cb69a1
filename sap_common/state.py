"""Per-step data on the host: state, control and contacts (docs/design.md § Data model and batching).

Arrays carry a leading world axis. ``SapModel.state()`` / ``SapModel.control()`` return
public-order buffers; constructing the dataclasses directly defaults the order flags to
``"sap"`` (the solvers' internal order). ``sap_gpu`` mirrors these with ``wp.array`` fields.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import numpy as np

from .conventions import check_num_worlds, check_order

__all__ = ["SapState", "SapControl", "SapContacts", "StepStatus", "FAILURE_BITS", "check_state", "check_control",
           "check_contacts", "check_type", "check_dtypes", "field_dtype", "INDEX_FIELDS", "CONTACT_WORLD_FIELDS",
           "CONTACT_VECTOR_FIELDS", "CONTACT_SLOT_FIELDS", "contact_field_shape"]


class StepStatus(enum.IntFlag):
    """Per-world outcome of a time step (a bitmask; both solvers report it the same way).

    CONVERGED: the optimality or the cost criterion was met (docs/formulation.md § Stopping criteria).
    LINE_SEARCH_FAILURE: a line search could not meet its acceptance test.
    MAX_ITERATIONS: the Newton iteration cap was reached first.
    NON_FINITE: the world's inputs or iterates were not finite; its state was left unchanged.
    CONTACT_OVERFLOW: the collision stage dropped contacts for lack of capacity.
    LINEAR_SOLVE_FAILURE: the Newton system could not be factored (H not SPD).
    DIRECTION_FALLBACK: an inexact (PCR) Newton direction was not a descent direction at least
        once in the step, and the negative preconditioned gradient −P∇ℓ was used instead.
    INVALID_QUATERNION: a quaternion of the world's ``joint_q`` (BALL joints, FREE/DISTANCE
        coordinates 3:7) is not finite or its norm lies outside [QUAT_NORM_MIN, QUAT_NORM_MAX]
        (``sap_common.constants``, docs/conventions.md); the world was not stepped and its state
        was left unchanged. (A NaN or inf quaternion also sets NON_FINITE.) Collision pipelines
        report it in their own ``last_status`` for a ``body_q`` quaternion, and give that world
        no contacts.

    A world flagged NON_FINITE or INVALID_QUATERNION is *left unchanged*: ``state_out`` gets
    ``state_in``'s ``joint_q``, ``body_q`` and ``body_qd`` bit for bit, and its ``joint_qd`` bit
    for bit when both states use the same velocity order (otherwise converted at q₀; with an
    invalid quaternion that conversion is undefined and the FREE/DISTANCE segments are NaN).
    """

    CONVERGED = 1
    LINE_SEARCH_FAILURE = 2
    MAX_ITERATIONS = 4
    NON_FINITE = 8
    CONTACT_OVERFLOW = 16
    LINEAR_SOLVE_FAILURE = 32
    DIRECTION_FALLBACK = 64
    INVALID_QUATERNION = 128


# The bits that make a world's step a failure, for the per-world failure flags both solvers keep
# (``SolverSAP.statistics()["failed"]``, sap_newton's ``world_failed``): the state was left unchanged
# (NON_FINITE, INVALID_QUATERNION), the step did not converge (MAX_ITERATIONS, LINE_SEARCH_FAILURE,
# LINEAR_SOLVE_FAILURE), or contacts were dropped for lack of slots (CONTACT_OVERFLOW: the step ran
# without some contacts). CONVERGED and DIRECTION_FALLBACK (a PCR direction replaced by −P∇ℓ; the
# step still converges or fails on its own) are not failures.
FAILURE_BITS = (StepStatus.NON_FINITE | StepStatus.INVALID_QUATERNION | StepStatus.MAX_ITERATIONS
                | StepStatus.LINE_SEARCH_FAILURE | StepStatus.LINEAR_SOLVE_FAILURE | StepStatus.CONTACT_OVERFLOW)


def _copy_fields(obj):
    return keep_stamp(obj, dataclasses.replace(
        obj, **{f.name: np.array(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if isinstance(getattr(obj, f.name), np.ndarray)}))


def keep_stamp(source, copy):
    """``copy`` with ``source``'s collision-pipeline stamp (``SapContacts.materials``), if it has one:
    the copies and device transfers of contacts keep what made them."""
    if hasattr(source, "materials"):
        copy.materials = source.materials
    return copy


@dataclass
class SapState:
    """Configuration and velocity of every world.

    Attributes:
        joint_q: joint coordinates (see ``sap_common.model``), (num_worlds, nq).
        joint_qd: joint velocities [m/s, rad/s], order per ``joint_qd_order``, (num_worlds, nv).
        body_q: pose ``[x, y, z, qx, qy, qz, qw]`` of each body origin in world, (num_worlds, B, 7).
        body_qd: body velocity, public ``[v_C, ω]`` (COM linear velocity, angular velocity,
            world frame) [m/s, rad/s], (num_worlds, B, 6).
        body_f: external wrench per body, order per ``body_f_order``: public ``[f, τ_C]``,
            SAP ``[τ_O, f]`` [N, N·m], world frame, (num_worlds, B, 6).
        joint_qd_order: ``"public"`` or ``"sap"``.
        body_f_order: ``"public"`` or ``"sap"``.
    """

    joint_q: np.ndarray
    joint_qd: np.ndarray
    body_q: np.ndarray
    body_qd: np.ndarray
    body_f: np.ndarray
    joint_qd_order: str = "sap"
    body_f_order: str = "sap"

    def __post_init__(self):
        check_order("joint_qd_order", self.joint_qd_order)
        check_order("body_f_order", self.body_f_order)

    def copy(self) -> "SapState":
        """Deep copy (new arrays)."""
        return _copy_fields(self)


@dataclass
class SapControl:
    """Inputs of every world, per DOF.

    Attributes:
        joint_f: generalized force [N, N·m], order per ``joint_f_order``, (num_worlds, nv).
        joint_target_pos: drive position target [m, rad], (num_worlds, nv).
        joint_target_vel: drive velocity target [m/s, rad/s], (num_worlds, nv).
        joint_act: feed-forward actuation [N, N·m], (num_worlds, nv): inside the effort clamp
            of a driven DOF; on an undriven DOF applied in free motion, clamped to the effort
            limit.
        joint_f_order: ``"public"`` or ``"sap"``.
    """

    joint_f: np.ndarray
    joint_target_pos: np.ndarray
    joint_target_vel: np.ndarray
    joint_act: np.ndarray
    joint_f_order: str = "sap"

    def __post_init__(self):
        check_order("joint_f_order", self.joint_f_order)

    def copy(self) -> "SapControl":
        return _copy_fields(self)


@dataclass
class SapContacts:
    """Rigid contacts of every world, ``capacity = max_rigid_contact`` slots per world.

    Slot ``k < count[w]`` of world ``w`` is valid. Contacts beyond capacity are dropped
    (the deepest are kept) and counted in ``overflow``.

    Attributes:
        count: valid contacts per world, (num_worlds,).
        overflow: contacts generated but dropped for lack of capacity, (num_worlds,).
        shape0 / shape1: shape indices, (num_worlds, C).
        body0 / body1: body indices, −1 = world, (num_worlds, C).
        x0 / x1: witness points on shape 0 / shape 1, world frame [m], (num_worlds, C, 3).
        normal: unit normal from shape 0 into shape 1, world frame, (num_worlds, C, 3).
        phi0: the point's signed distance at the start of the step [m], < 0 in penetration,
            (num_worlds, C). Per point: point contact writes the geometry's φ₀; a contact model may
            set its own per point (a hydroelastic face: φ₀ = −p₀/g).
        margin0 / margin1: the shapes' margins [m], (num_worlds, C).
        mu: combined friction coefficient ``2μ₀μ₁/(μ₀+μ₁)``, (num_worlds, C).
        ke: the point's stiffness [N/m], (num_worlds, C). Per point: point contact writes the
            materials' combined ``k₀k₁/(k₀+k₁)``; a contact model may set its own per point (a
            hydroelastic face: k = A·g).
        ke0 / ke1: each shape's stiffness [N/m] (weights of the contact midpoint), (num_worlds, C).
        tau_d: combined dissipation time scale ``τ₀ + τ₁`` [s], (num_worlds, C).
        hcd: combined Hunt–Crossley dissipation ``(k₁d₀ + k₀d₁)/(k₀ + k₁)`` [s/m], (num_worlds, C)
            (read by the ``lagged`` and ``similar`` contact approximations).
        area: contact area the point stands for [m²], (num_worlds, C); 0 for point contact.

    Every per-slot field (all but ``count`` and ``overflow``, :data:`CONTACT_SLOT_FIELDS`) is
    written by one helper per backend, which takes every field's value:
    ``sap_ref.arrays.write_contact`` / ``clear_contact`` on the host, the ``wp.func`` helpers
    ``sap_gpu.arrays.write_contact`` / ``clear_contact`` in kernels. A new field goes into this
    dataclass and ``allocate``, ``sap_gpu.arrays.ContactSlots`` and those helpers; the checks,
    copies and device transfers follow the dataclass.

    A collision pipeline also stamps the contacts it allocates and fills with the material
    fallbacks it combined μ, k and τ_d with (``materials``, a
    :class:`~sap_common.collision_rules.MaterialFallbacks`); a solver refuses contacts stamped
    with another configuration's. Contacts filled by other means carry no stamp. The stamp is an
    attribute, not a field: it travels with ``copy``, ``to_device`` and ``to_host``.
    """

    count: np.ndarray
    overflow: np.ndarray
    shape0: np.ndarray
    shape1: np.ndarray
    body0: np.ndarray
    body1: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    normal: np.ndarray
    phi0: np.ndarray
    margin0: np.ndarray
    margin1: np.ndarray
    mu: np.ndarray
    ke: np.ndarray
    ke0: np.ndarray
    ke1: np.ndarray
    tau_d: np.ndarray
    hcd: np.ndarray
    area: np.ndarray

    @classmethod
    def allocate(cls, num_worlds: int, capacity: int) -> "SapContacts":
        """Empty contacts (count 0) with ``capacity`` slots per world."""
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 0:
            raise ValueError(f"max_rigid_contact: must be an integer >= 0, got {capacity!r}")
        W, C = check_num_worlds(num_worlds), int(capacity)
        i = lambda: np.full((W, C), -1, dtype=np.int32)  # noqa: E731
        f = lambda *s: np.zeros((W, C) + s)  # noqa: E731
        return cls(
            count=np.zeros(W, dtype=np.int32), overflow=np.zeros(W, dtype=np.int32),
            shape0=i(), shape1=i(), body0=i(), body1=i(), x0=f(3), x1=f(3), normal=f(3),
            phi0=f(), margin0=f(), margin1=f(), mu=f(), ke=f(), ke0=f(), ke1=f(), tau_d=f(), hcd=f(),
            area=f(),
        )

    @property
    def capacity(self) -> int:
        return int(self.shape0.shape[1])

    @property
    def num_worlds(self) -> int:
        return int(self.count.shape[0])

    def copy(self) -> "SapContacts":
        return _copy_fields(self)


# The fields of SapContacts with one entry per world; every other field has one per contact slot.
CONTACT_WORLD_FIELDS = ("count", "overflow")
# The per-slot fields that hold a world-frame 3-vector; the others hold one value per slot.
CONTACT_VECTOR_FIELDS = ("x0", "x1", "normal")
# The per-slot fields in declaration order: what the write helpers of both backends write.
CONTACT_SLOT_FIELDS = tuple(f.name for f in dataclasses.fields(SapContacts) if f.name not in CONTACT_WORLD_FIELDS)


def contact_field_shape(name: str, num_worlds: int, capacity: int) -> tuple:
    """The shape of the host field ``name`` of contacts with ``capacity`` slots per world."""
    if name in CONTACT_WORLD_FIELDS:
        return (num_worlds,)
    return (num_worlds, capacity, 3) if name in CONTACT_VECTOR_FIELDS else (num_worlds, capacity)


# The one dtype of every host array (what ``model.state()``, ``model.control()`` and
# ``SapContacts.allocate`` create, and what the solvers read and write): real quantities float64,
# contact counts and indices int32. Other dtypes are rejected, never converted: an integer
# ``joint_q`` would truncate positions written back into it, a float32 one would round them.
INDEX_FIELDS = ("count", "overflow", "shape0", "shape1", "body0", "body1")


def field_dtype(name: str) -> np.dtype:
    """The required dtype of the host field ``name`` (int32 for contact counts and indices, else float64)."""
    return np.dtype(np.int32) if name in INDEX_FIELDS else np.dtype(np.float64)


def check_dtypes(obj, name: str) -> None:
    """``ValueError`` naming the first NumPy field of ``obj`` (SapState/SapControl/SapContacts) whose
    dtype is not :func:`field_dtype`'s. Fields that are not NumPy arrays are left to other checks."""
    for f in dataclasses.fields(obj):
        if isinstance(getattr(obj, f.name), np.ndarray):
            _check_dtype(f"{name}.{f.name}", getattr(obj, f.name))


def _check_dtype(name: str, a: np.ndarray) -> None:
    want = field_dtype(name.rsplit(".", 1)[-1])
    if a.dtype != want:
        raise ValueError(f"{name}: expected dtype {want.name}, got {a.dtype.name} (convert it with "
                         f".astype(np.{want.name}); arrays are never converted in place)")


def _check_shape(name: str, a, shape: tuple) -> None:
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array of shape {shape}, got {type(a).__name__}")
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    _check_dtype(name, a)


def check_type(name: str, obj, cls) -> None:
    """Raise ``ValueError`` naming ``name`` if ``obj`` is not a ``cls`` (e.g. ``step(None, ...)``)."""
    if not isinstance(obj, cls):
        raise ValueError(f"{name}: expected a {cls.__name__}, got {type(obj).__name__}")


def check_state(model, state: SapState, name: str = "state") -> None:
    """Raise ``ValueError`` if ``state``'s arrays do not match ``model`` (docs/design.md § Bad input)."""
    check_type(name, state, SapState)
    W, B = model.num_worlds, model.body_count
    _check_shape(f"{name}.joint_q", state.joint_q, (W, model.joint_coord_count))
    _check_shape(f"{name}.joint_qd", state.joint_qd, (W, model.joint_dof_count))
    _check_shape(f"{name}.body_q", state.body_q, (W, B, 7))
    _check_shape(f"{name}.body_qd", state.body_qd, (W, B, 6))
    _check_shape(f"{name}.body_f", state.body_f, (W, B, 6))
    check_order(f"{name}.joint_qd_order", state.joint_qd_order)
    check_order(f"{name}.body_f_order", state.body_f_order)


def check_control(model, control: SapControl, name: str = "control") -> None:
    """Raise ``ValueError`` if ``control``'s arrays do not match ``model``."""
    check_type(name, control, SapControl)
    shape = (model.num_worlds, model.joint_dof_count)
    for f in ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act"):
        _check_shape(f"{name}.{f}", getattr(control, f), shape)
    check_order(f"{name}.joint_f_order", control.joint_f_order)


def check_contacts(model, contacts: SapContacts, name: str = "contacts") -> None:
    """Raise ``ValueError`` if ``contacts`` does not match ``model``'s world count or is inconsistent."""
    W, C = model.num_worlds, contacts.shape0.shape[1] if contacts.shape0.ndim == 2 else -1
    for f in CONTACT_WORLD_FIELDS + CONTACT_SLOT_FIELDS:
        _check_shape(f"{name}.{f}", getattr(contacts, f), contact_field_shape(f, W, C))
    if np.any(contacts.count < 0) or np.any(contacts.count > C):
        raise ValueError(f"{name}.count: must lie in [0, {C}] (the capacity), got {contacts.count.tolist()}")
