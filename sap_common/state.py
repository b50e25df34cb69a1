"""Per-step data on the host: state, control and contacts (docs/design.md § Data model and batching).

Arrays carry a leading world axis. ``SapModel.state()`` / ``SapModel.control()`` return
public-order buffers; constructing the dataclasses directly defaults the order flags to
``"sap"`` (the solvers' internal order). ``sap_gpu`` mirrors these with ``wp.array`` fields.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import weakref
from dataclasses import dataclass

import numpy as np

from .constants import FREE_MEMORY_FRACTION, MEMORY_CHECK_ENV, MEMORY_CHECK_MIN_BYTES
from .conventions import check_num_worlds, check_order

__all__ = ["SapState", "SapControl", "SapContacts", "StepStatus", "FAILURE_BITS", "check_state", "check_control",
           "check_contacts", "check_type", "check_dtypes", "field_dtype", "INDEX_FIELDS", "CONTACT_WORLD_FIELDS",
           "CONTACT_VECTOR_FIELDS", "CONTACT_SLOT_FIELDS", "CONTACT_ID_FIELDS", "contact_field_shape", "check_capacity",
           "state_field_shapes", "control_field_shapes", "MemoryEstimate", "MemoryPart", "format_bytes",
           "state_memory", "control_memory", "contacts_memory", "reachable_arrays", "host_nbytes", "probe_memory",
           "available_host_memory", "memory_check_enabled", "check_memory", "memory_refusal"]


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
        C = check_capacity(capacity)
        W = check_num_worlds(num_worlds)
        check_memory(contacts_memory(W, C), available_host_memory, "SapContacts.allocate", capacity=C)
        # The shapes of the table the checks and the memory estimate read (contact_field_shape):
        # shapes and bodies -1, every other field 0.
        out = {}
        for f in CONTACT_WORLD_FIELDS + CONTACT_SLOT_FIELDS:
            shape, dtype = contact_field_shape(f, W, C), field_dtype(f)
            out[f] = np.full(shape, -1, dtype) if f in CONTACT_ID_FIELDS else np.zeros(shape, dtype)
        return cls(**out)

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


def check_capacity(capacity) -> int:
    """``capacity`` (contact slots per world) as an int if it is an integer >= 0, else ``ValueError``."""
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 0:
        raise ValueError(f"max_rigid_contact: must be an integer >= 0, got {capacity!r}")
    return int(capacity)


def state_field_shapes(model, num_worlds: int | None = None) -> dict[str, tuple]:
    """The shape of every array field of a ``SapState`` of ``model`` (``num_worlds`` worlds, default
    the model's): what ``SapModel.state()`` allocates, :func:`check_state` requires and
    :func:`state_memory` counts."""
    W, B = model.num_worlds if num_worlds is None else num_worlds, model.body_count
    return {"joint_q": (W, model.joint_coord_count), "joint_qd": (W, model.joint_dof_count), "body_q": (W, B, 7),
            "body_qd": (W, B, 6), "body_f": (W, B, 6)}


def control_field_shapes(model, num_worlds: int | None = None) -> dict[str, tuple]:
    """The shape of every array field of a ``SapControl`` of ``model`` (as :func:`state_field_shapes`)."""
    shape = (model.num_worlds if num_worlds is None else num_worlds, model.joint_dof_count)
    return {f: shape for f in ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act")}


def contact_field_shape(name: str, num_worlds: int, capacity: int) -> tuple:
    """The shape of the host field ``name`` of contacts with ``capacity`` slots per world."""
    if name in CONTACT_WORLD_FIELDS:
        return (num_worlds,)
    return (num_worlds, capacity, 3) if name in CONTACT_VECTOR_FIELDS else (num_worlds, capacity)


# The per-slot fields that hold shape or body indices (-1 in an empty slot).
CONTACT_ID_FIELDS = ("shape0", "shape1", "body0", "body1")


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
    for f, shape in state_field_shapes(model).items():
        _check_shape(f"{name}.{f}", getattr(state, f), shape)
    check_order(f"{name}.joint_qd_order", state.joint_qd_order)
    check_order(f"{name}.body_f_order", state.body_f_order)


def check_control(model, control: SapControl, name: str = "control") -> None:
    """Raise ``ValueError`` if ``control``'s arrays do not match ``model``."""
    check_type(name, control, SapControl)
    for f, shape in control_field_shapes(model).items():
        _check_shape(f"{name}.{f}", getattr(control, f), shape)
    check_order(f"{name}.joint_f_order", control.joint_f_order)


def check_contacts(model, contacts: SapContacts, name: str = "contacts") -> None:
    """Raise ``ValueError`` if ``contacts`` does not match ``model``'s world count or is inconsistent."""
    W, C = model.num_worlds, contacts.shape0.shape[1] if contacts.shape0.ndim == 2 else -1
    for f in CONTACT_WORLD_FIELDS + CONTACT_SLOT_FIELDS:
        _check_shape(f"{name}.{f}", getattr(contacts, f), contact_field_shape(f, W, C))
    if np.any(contacts.count < 0) or np.any(contacts.count > C):
        raise ValueError(f"{name}.count: must lie in [0, {C}] (the capacity), got {contacts.count.tolist()}")


# ----------------------------------------------------------------------------- memory
# What arrays over worlds take, and the refusal of a batch that would not fit (docs/scaling.md § Memory).
# Every array of a solver, pipeline or state is either per world (a leading world axis) or the
# model's (a fixed size), so the bytes of each part are ``fixed + per_world · num_worlds``.


@dataclass(frozen=True)
class MemoryPart:
    """One named part of a :class:`MemoryEstimate`: ``fixed + per_world · num_worlds`` bytes."""

    name: str
    fixed: int
    per_world: int

    def nbytes(self, num_worlds: int) -> int:
        return int(self.fixed) + int(self.per_world) * int(num_worlds)


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes that objects of ``num_worlds`` worlds allocate, part by part (each affine in the
    world count). Built without allocating anything of that size; ``+`` adds two estimates of the
    same world count, :meth:`worlds` gives the same parts for another count."""

    num_worlds: int
    parts: tuple = ()

    @classmethod
    def of(cls, name: str, num_worlds: int, per_world: int = 0, fixed: int = 0) -> MemoryEstimate:
        return cls(int(num_worlds), (MemoryPart(name, int(fixed), int(per_world)),))

    @property
    def nbytes(self) -> int:
        """Total bytes."""
        return sum(p.nbytes(self.num_worlds) for p in self.parts)

    @property
    def fixed(self) -> int:
        return sum(p.fixed for p in self.parts)

    @property
    def per_world(self) -> int:
        return sum(p.per_world for p in self.parts)

    def part(self, name: str) -> int:
        """Bytes of the parts called ``name`` (0 if none)."""
        return sum(p.nbytes(self.num_worlds) for p in self.parts if p.name == name)

    def worlds(self, num_worlds: int) -> MemoryEstimate:
        """The same parts for ``num_worlds`` worlds."""
        return MemoryEstimate(int(num_worlds), self.parts)

    def __add__(self, other: MemoryEstimate) -> MemoryEstimate:
        if not isinstance(other, MemoryEstimate):
            return NotImplemented
        if other.num_worlds != self.num_worlds:
            raise ValueError(f"MemoryEstimate: cannot add estimates of {self.num_worlds} and {other.num_worlds} "
                             "worlds; take .worlds(n) of one first")
        return MemoryEstimate(self.num_worlds, self.parts + other.parts)

    def max_worlds(self, budget: int) -> int:
        """The most worlds whose parts fit in ``budget`` bytes (0: not even one)."""
        room = int(budget) - self.fixed
        if room < self.per_world:
            return 0
        return room // max(self.per_world, 1)

    def describe(self) -> str:
        """``name size, …`` of the parts, sizes in GB/MB/kB; parts of one name summed, in order."""
        names = dict.fromkeys(p.name for p in self.parts)
        return ", ".join(f"{n} {format_bytes(self.part(n))}" for n in names)

    def __str__(self) -> str:
        return f"{format_bytes(self.nbytes)} for {self.num_worlds} worlds ({self.describe()})"


def format_bytes(n: int) -> str:
    """``n`` bytes as ``"24.3 GB"``, ``"512.0 MB"`` or ``"12.0 kB"`` (powers of 1000)."""
    n = float(n)
    for unit, size in (("GB", 1e9), ("MB", 1e6)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1e3:.1f} kB"


def _fields_nbytes(shapes: dict) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * field_dtype(name).itemsize for name, shape in shapes.items())


def state_memory(model, num_worlds: int | None = None, name: str = "state") -> MemoryEstimate:
    """The bytes of one ``SapState`` of ``model`` (:func:`state_field_shapes`), host or device alike."""
    W = model.num_worlds if num_worlds is None else num_worlds
    return MemoryEstimate.of(name, W, per_world=_fields_nbytes(state_field_shapes(model, 1)))


def control_memory(model, num_worlds: int | None = None, name: str = "control") -> MemoryEstimate:
    """The bytes of one ``SapControl`` of ``model`` (:func:`control_field_shapes`)."""
    W = model.num_worlds if num_worlds is None else num_worlds
    return MemoryEstimate.of(name, W, per_world=_fields_nbytes(control_field_shapes(model, 1)))


def contacts_memory(num_worlds: int, capacity: int, name: str = "contacts") -> MemoryEstimate:
    """The bytes of ``SapContacts`` with ``capacity`` slots per world (:func:`contact_field_shape`)."""
    fields = CONTACT_WORLD_FIELDS + CONTACT_SLOT_FIELDS
    return MemoryEstimate.of(name, num_worlds,
                             per_world=_fields_nbytes({f: contact_field_shape(f, 1, int(capacity)) for f in fields}))


def reachable_arrays(roots, is_array, skip=()) -> list:
    """Every array reachable from ``roots`` (each once): through the attributes of objects of this
    project's packages (``sap_*`` modules, dataclasses among them), the variables of Warp structs,
    dicts, lists and tuples. ``is_array(obj)`` says what an array is; objects of a type in ``skip``
    are not entered. What :func:`host_nbytes` and ``sap_gpu``'s device count walk."""
    found, seen, stack = [], set(), list(roots)
    while stack:
        obj = stack.pop()
        if obj is None or isinstance(obj, (str, bytes, int, float, bool, enum.Enum)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if is_array(obj):
            found.append(obj)
        elif isinstance(obj, skip) or isinstance(obj, type):
            continue
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "_cls") and hasattr(getattr(obj, "_cls"), "vars") and hasattr(obj, "_ctype"):
            stack.extend(getattr(obj, name) for name in obj._cls.vars)  # a Warp struct instance
        elif type(obj).__module__.split(".")[0].startswith("sap_") and hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return found


def host_nbytes(*roots, skip=()) -> int:
    """Bytes of the NumPy arrays reachable from ``roots`` (:func:`reachable_arrays`), each buffer once:
    a view counts the array that owns its memory."""
    owners = {}
    for a in reachable_arrays(roots, lambda o: isinstance(o, np.ndarray), skip):
        while isinstance(a.base, np.ndarray):
            a = a.base
        if a.base is None:  # memory NumPy owns (not a view of a Warp array or a buffer)
            owners[id(a)] = a.nbytes
    return sum(owners.values())


# The world counts a memory probe builds: two points of the affine bytes = fixed + per_world · worlds.
PROBE_WORLDS = (1, 2)
# Probes already measured: (id(model), name, key) -> (weak reference to the model, fixed, per_world).
_PROBES: dict = {}
_PROBES_KEPT = 256


def probe_memory(name: str, model, measure, key=(), num_worlds: int | None = None) -> MemoryEstimate:
    """The bytes ``measure(w)`` counts of an object it builds for ``w`` worlds of ``model``'s template,
    with 1 and with 2 worlds, as the part ``name`` of a :class:`MemoryEstimate` of ``num_worlds``
    worlds (default: the model's).

    Measured, not modelled: every array is per world or of a fixed size, so the two points give
    ``fixed + per_world · W`` and the estimate is whatever the allocating code allocates (no second
    description of the shapes to drift from it). Remembered per model object and ``key`` (what else
    decides the sizes: a configuration, a plan), so a second solver of the same model pays nothing."""
    W = model.num_worlds if num_worlds is None else int(num_worlds)
    cache_key = (id(model), name, key)
    hit = _PROBES.get(cache_key)
    if hit is not None and hit[0]() is model:
        return MemoryEstimate.of(name, W, fixed=hit[1], per_world=hit[2])
    b1, b2 = (int(measure(w)) for w in PROBE_WORLDS)
    per_world = b2 - b1
    fixed = b1 - per_world
    if len(_PROBES) >= _PROBES_KEPT:
        _PROBES.pop(next(iter(_PROBES)))
    _PROBES[cache_key] = (weakref.ref(model), fixed, per_world)
    return MemoryEstimate.of(name, W, fixed=fixed, per_world=per_world)


def available_host_memory() -> int | None:
    """Bytes of host memory this process can still take: the least of the kernel's estimate
    (``MemAvailable`` in /proc/meminfo: free memory and the caches it can reclaim; else the free
    pages ``os.sysconf`` reports), the room under this process's cgroup memory limit (a
    container's) and the address space left under ``ulimit -v`` (RLIMIT_AS). None where none can
    be read."""
    found = []
    meminfo = _read_keyed("/proc/meminfo")
    if "MemAvailable" in meminfo:
        found.append(meminfo["MemAvailable"])
    else:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    room = _cgroup_room()
    if room is not None:
        found.append(room)
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            found.append(max(soft - _read_keyed("/proc/self/status").get("VmSize", 0), 0))
    except (ImportError, OSError, ValueError):
        pass
    return min(found) if found else None


def _read_keyed(path: str) -> dict[str, int]:
    """``{key: bytes}`` of a /proc file of ``Key:   123 kB`` lines ({} where it cannot be read)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                words = rest.split()
                if len(words) == 2 and words[1] == "kB" and words[0].isdigit():
                    out[key] = int(words[0]) * 1024
    except OSError:
        pass
    return out


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), or None where there is no limit or none can be read."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":  # cgroup v2
            files = (f"/sys/fs/cgroup{parts[2]}/memory.max", f"/sys/fs/cgroup{parts[2]}/memory.current")
        elif "memory" in parts[1].split(","):  # cgroup v1
            files = (f"/sys/fs/cgroup/memory{parts[2]}/memory.limit_in_bytes",
                     f"/sys/fs/cgroup/memory{parts[2]}/memory.usage_in_bytes")
        else:
            continue
        try:
            with open(files[0]) as f:
                limit = f.read().strip()
            with open(files[1]) as f:
                used = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # "max" (v2) or a page-rounded 2**63 (v1): no limit
            return max(int(limit) - used, 0)
    return None


def memory_check_enabled() -> bool:
    """False when the environment variable ``SAP_MEMORY_CHECK`` (``MEMORY_CHECK_ENV``) turns the check off."""
    return os.environ.get(MEMORY_CHECK_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def check_memory(estimate: MemoryEstimate, free, what: str, *, where: str = "the host",
                 capacity: int | None = None, subject: str | None = None,
                 capacity_flag: str = "max_rigid_contact") -> None:
    """``ValueError`` when ``estimate`` is more than ``FREE_MEMORY_FRACTION`` of ``free`` bytes (an
    int, None for unknown, or a function giving one, called only when the estimate is large enough
    to check: ``MEMORY_CHECK_MIN_BYTES``). The message (:func:`memory_refusal`) names the world
    count, the estimate and the free memory in GB, and what to do. Off with ``SAP_MEMORY_CHECK=0``."""
    if estimate.nbytes < MEMORY_CHECK_MIN_BYTES or not memory_check_enabled():
        return
    if callable(free):
        free = free()
    if free is None or estimate.nbytes <= int(free * FREE_MEMORY_FRACTION):
        return
    raise ValueError(memory_refusal(estimate, free, what, where=where, capacity=capacity, subject=subject,
                                    capacity_flag=capacity_flag))


def memory_refusal(estimate: MemoryEstimate, free: int, what: str, *, where: str = "the host",
                   capacity: int | None = None, subject: str | None = None,
                   capacity_flag: str = "max_rigid_contact") -> str:
    """The message of a refusal: ``subject`` (default ``num_worlds N with max_rigid_contact C``),
    what would allocate how much, how much is free, how many worlds would fit, what to do."""
    W = estimate.num_worlds
    if subject is None:
        subject = f"num_worlds {W}" + ("" if capacity is None else f" with max_rigid_contact {capacity}")
    usable = int(free * FREE_MEMORY_FRACTION)
    fit = estimate.max_worlds(usable)
    fits = f"at most about {fit} fit" if fit >= 1 else "not even one world fits"
    smaller = f" or a smaller {capacity_flag}" if capacity else ""
    return (f"{subject}: {what} would allocate about {format_bytes(estimate.nbytes)} on {where} "
            f"({estimate.describe()}; {format_bytes(estimate.per_world)} per world), but {where} has "
            f"{format_bytes(free)} free, of which {FREE_MEMORY_FRACTION:.0%} ({format_bytes(usable)}) may be "
            f"planned for; use fewer worlds ({fits}){smaller}, or a machine with more memory "
            f"({MEMORY_CHECK_ENV}=0 skips this check)")
