"""Per-world parameters on a Warp device (docs/scaling.md § Per-world parameters).

    params = sap_gpu.WorldParameters(model, device="cuda:0")    # every world at the model's values
    params.set("shape_material_mu", mu)                           # (num_worlds, S) or (S,), host or device
    solver = sap_gpu.SolverSAP(model, max_rigid_contact=16, parameters=params, device="cuda:0")
    pipeline = sap_gpu.CollisionPipeline(model, 16, solver.config, parameters=params, device="cuda:0")

The fields are those of :data:`sap_common.parameters.PARAMETER_FIELDS` (``SapModel`` names). Each
is one device array with a leading world axis that every kernel reading the field indexes by
world: ``(num_worlds, B)`` of float64 / ``wp.vec3d`` / ``wp.mat33d`` for the bodies' mass, centre of
mass and inertia, ``(num_worlds, nv)`` float64 per DOF, ``(num_worlds, S)`` float64 per shape, and
``(num_worlds,)`` ``wp.vec3d`` for gravity. World ``w`` then steps exactly as a one-world model
``model.replace(num_worlds=1, **params.world_fields(w))`` does, bit for bit.

A solver or pipeline built without ``parameters=`` reads a *shared* instance: one row per field,
seen by every world through a view whose world stride is 0 (no per-world memory, the model's
values, the same kernels).

Two ways to write:

* **host values** (NumPy arrays, lists, numbers): checked on the host with the model's rules
  (:func:`sap_common.parameters.check_worlds`): a bad value is a ``ValueError`` naming the field,
  the world and the element, and nothing is written. Then uploaded (an allocation and a copy:
  not for a captured graph).
* **device values** (a ``wp.array`` of the field's dtype and shape on the parameters' device, and
  a ``world_mask`` that is None or a device int32 array): one kernel writes the masked worlds and a
  second checks them, with no host synchronization and no allocation, so the write can be
  captured in a CUDA graph (a reset). A world whose values break a rule is not refused (the host
  never sees them): it is flagged in :attr:`WorldParameters.invalid`, and a solver reading the
  parameters reports it NON_FINITE and leaves it unchanged, as it does a world with non-finite
  inputs, until its values are set again.

Derived per-world data is kept with the fields: the inverse inertia of each body (the contact
weights read it); the pipeline combines each world's pair materials from the shape materials
itself, at every ``collide`` (:mod:`sap_gpu.collision`).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from sap_common import parameters as spec
from sap_common.enums import JointType
from sap_common.model import SapModel
from sap_common.state import MemoryEstimate, available_host_memory, check_memory, host_nbytes

from .device import device_nbytes, free_memory, get_device, probe_memory
from .launch import launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["WorldParameters", "shared_parameters", "check_parameters", "world_view", "parameters_memory"]

# Each field's Warp dtype and the number of its trailing host axes that the dtype holds.
_DTYPES = {"body_com": (wp.vec3d, 1), "body_inertia": (wp.mat33d, 2), "gravity": (wp.vec3d, 1)}


def _dtype(name):
    return _DTYPES.get(name, (wp.float64, 0))


def world_view(a: wp.array, num_worlds: int) -> wp.array:
    """A (num_worlds, …) view of the one-row array ``a`` whose world stride is 0: every world reads
    row 0. The caller keeps ``a`` alive."""
    return wp.array(ptr=a.ptr, shape=(num_worlds, *a.shape[1:]), strides=(0, *a.strides[1:]), dtype=a.dtype,
                    device=a.device)


# ----------------------------------------------------------------------------- kernels of a device write

@wp.kernel
def _write_f64(src: wp.array2d(dtype=wp.float64), mask: wp.array(dtype=int), masked: int,
               dst: wp.array2d(dtype=wp.float64)):
    w, i = wp.tid()
    if masked == 0 or mask[w] != 0:
        dst[w, i] = src[w, i]


@wp.kernel
def _write_vec3(src: wp.array2d(dtype=wp.vec3d), mask: wp.array(dtype=int), masked: int,
                dst: wp.array2d(dtype=wp.vec3d)):
    w, i = wp.tid()
    if masked == 0 or mask[w] != 0:
        dst[w, i] = src[w, i]


@wp.kernel
def _write_mat33(src: wp.array2d(dtype=wp.mat33d), mask: wp.array(dtype=int), masked: int,
                 dst: wp.array2d(dtype=wp.mat33d)):
    """An inertia is stored symmetrized, (I + Iᵀ)/2, as the model stores it."""
    w, i = wp.tid()
    if masked == 0 or mask[w] != 0:
        I = src[w, i]
        dst[w, i] = wp.float64(0.5) * (I + wp.transpose(I))


@wp.kernel
def _write_gravity(src: wp.array(dtype=wp.vec3d), mask: wp.array(dtype=int), masked: int,
                   dst: wp.array(dtype=wp.vec3d)):
    w = wp.tid()
    if masked == 0 or mask[w] != 0:
        dst[w] = src[w]


@wp.kernel
def _inverse_inertia(mass: wp.array2d(dtype=wp.float64), inertia: wp.array2d(dtype=wp.mat33d),
                     mask: wp.array(dtype=int), masked: int, inv: wp.array2d(dtype=wp.mat33d)):
    """Each body's inverse inertia (zero for a massless body), of the masked worlds: a device write
    computes it here; a host write uploads NumPy's, as the model's GpuModel does."""
    w, b = wp.tid()
    if masked == 0 or mask[w] != 0:
        if mass[w, b] > wp.float64(0.0):
            inv[w, b] = wp.inverse(inertia[w, b])
        else:
            inv[w, b] = wp.mat33d()


@wp.func
def _ok_nonneg(x: wp.float64):
    return wp.isfinite(x) and x >= wp.float64(0.0)


@wp.func
def _ok_material(x: wp.float64):  # NaN (unset) or finite and >= 0
    return wp.isnan(x) or (wp.isfinite(x) and x >= wp.float64(0.0))


@wp.kernel
def _check_worlds(mask: wp.array(dtype=int), masked: int, B: int, nv: int, S: int,
                  mass: wp.array2d(dtype=wp.float64), com: wp.array2d(dtype=wp.vec3d),
                  inertia: wp.array2d(dtype=wp.mat33d), armature: wp.array2d(dtype=wp.float64),
                  damping: wp.array2d(dtype=wp.float64), target_ke: wp.array2d(dtype=wp.float64),
                  target_kd: wp.array2d(dtype=wp.float64), effort: wp.array2d(dtype=wp.float64),
                  lower: wp.array2d(dtype=wp.float64), upper: wp.array2d(dtype=wp.float64),
                  limit_ke: wp.array2d(dtype=wp.float64), limit_kd: wp.array2d(dtype=wp.float64),
                  mu: wp.array2d(dtype=wp.float64), ke: wp.array2d(dtype=wp.float64),
                  tau: wp.array2d(dtype=wp.float64), hcd: wp.array2d(dtype=wp.float64),
                  margin: wp.array2d(dtype=wp.float64), gravity: wp.array(dtype=wp.vec3d),
                  dof_driven: wp.array(dtype=int), dof_limit_bits: wp.array(dtype=int),
                  dof_distance: wp.array(dtype=int),
                  shape_in_pair: wp.array(dtype=int), forbid_rigid: int, invalid: wp.array(dtype=int)):
    """The rules a device write cannot be refused for, per masked world: finite values in range,
    lower ≤ upper, drives and limits only where the joint takes them, each inertia symmetric
    positive definite (leading minors > 0; zero for a massless frame). ``invalid[w]`` = 1 where one
    fails (the model's host checks say which: sap_common.parameters.check_worlds)."""
    w = wp.tid()
    if masked != 0 and mask[w] == 0:
        return
    zero = wp.float64(0.0)
    ok = int(1)
    for b in range(B):
        m = mass[w, b]
        c = com[w, b]
        I = inertia[w, b]
        if not _ok_nonneg(m):
            ok = 0
        if not (wp.isfinite(c[0]) and wp.isfinite(c[1]) and wp.isfinite(c[2])):
            ok = 0
        frame = int(0)
        if m == zero:
            frame = 1
            for i in range(3):
                for j in range(3):
                    if I[i, j] != zero:
                        frame = 0
        if frame == 0:
            m2 = I[0, 0] * I[1, 1] - I[0, 1] * I[1, 0]
            if not (I[0, 0] > zero and m2 > zero and wp.determinant(I) > zero):  # NaN fails too
                ok = 0
    for i in range(nv):
        if not (_ok_nonneg(armature[w, i]) and _ok_nonneg(damping[w, i]) and _ok_nonneg(target_ke[w, i])
                and _ok_nonneg(target_kd[w, i]) and _ok_nonneg(limit_ke[w, i]) and _ok_nonneg(limit_kd[w, i])):
            ok = 0
        if not (effort[w, i] > zero):
            ok = 0
        lo = lower[w, i]
        hi = upper[w, i]
        if wp.isnan(lo) or wp.isnan(hi) or lo > hi:
            ok = 0
        driven = int(0)
        if target_ke[w, i] > zero or target_kd[w, i] > zero:
            driven = 1
        bits = int(0)  # which limit rows exist: sap_common.parameters' pattern rule
        if limit_ke[w, i] > zero:
            bits = bits | 1
        if (dof_distance[i] != 0 and lo > zero) or (dof_distance[i] == 0 and wp.isfinite(lo)):
            bits = bits | 2
        if wp.isfinite(hi):
            bits = bits | 4
        if driven != dof_driven[i] or bits != dof_limit_bits[i]:
            ok = 0
        if dof_distance[i] != 0 and lo < zero:  # a DISTANCE joint's limits: a distance >= 0
            ok = 0
    for s in range(S):
        k = ke[w, s]
        if not (_ok_material(mu[w, s]) and _ok_material(tau[w, s]) and _ok_material(hcd[w, s])
                and wp.isfinite(margin[w, s]) and margin[w, s] >= zero and (wp.isnan(k) or k > zero)):
            ok = 0
        if forbid_rigid != 0 and shape_in_pair[s] != 0 and wp.isinf(k):
            ok = 0
    g = gravity[w]
    if not (wp.isfinite(g[0]) and wp.isfinite(g[1]) and wp.isfinite(g[2])):
        ok = 0
    invalid[w] = 1 - ok


# ----------------------------------------------------------------------------- the parameters

class WorldParameters:
    """One value per world of each per-world field of ``model``, on ``device`` (module docstring).

    Args:
        model: the model whose worlds these are (its ``num_worlds``; every world starts at its values).
        device: Warp device (default: Warp's default device).

    Attributes:
        invalid: (num_worlds,) int32 device array, 1 where a device write left a world with values
            that break a rule (a solver reading these parameters flags it NON_FINITE).
        forbid_rigid: set by a solver with a Hunt–Crossley approximation: an infinite
            ``shape_material_ke`` on a shape of a pair is refused (host) or flagged (device).
    """

    def __init__(self, model: SapModel, device=None):
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        d = get_device(device)
        # Refused before anything is allocated when the arrays would not fit (docs/scaling.md § Memory):
        # the device arrays, and the host copy of every value kept beside them.
        device_part, host_part = parameters_memory(model, parts=True)
        if d.is_cpu:
            check_memory(device_part + host_part, available_host_memory, "sap_gpu.WorldParameters", where="device cpu")
        else:
            check_memory(device_part, lambda: free_memory(d), "sap_gpu.WorldParameters", where=f"device {d}")
            check_memory(host_part, available_host_memory, "sap_gpu.WorldParameters (host copy)")
        self._setup(model, d, False)

    def _setup(self, model: SapModel, device, _shared: bool) -> None:
        """Everything of the constructor; ``_shared``: one row every world reads (shared_parameters)."""
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        self.model = model
        self.device = d = get_device(device)
        self.num_worlds = W = model.num_worlds
        self.shared = _shared
        rows = 1 if _shared else W
        self._store, self._views = {}, {}
        self._host = {}  # name -> (rows, *shape) NumPy mirror of the device values, None when stale
        for name in spec.PARAMETER_FIELDS:
            value = np.asarray(getattr(model, name), dtype=np.float64)
            self._host[name] = np.broadcast_to(value, (rows, *value.shape)).copy()
            self._store[name] = self._upload(name, self._host[name])
        inv = self._host_inverse(self._host["body_mass"], self._host["body_inertia"])
        self._store["body_inertia_inv"] = wp.array(self._pad(inv, (rows, max(model.body_count, 1), 3, 3)),
                                                   dtype=wp.mat33d, device=d)
        for name, a in self._store.items():
            self._views[name] = world_view(a, W) if _shared else a
        self.invalid = wp.zeros(W, dtype=wp.int32, device=d)
        self.forbid_rigid = False
        self._no_mask = wp.zeros(1, dtype=wp.int32, device=d)
        # Per DOF, the model's pattern of drives and limits every world keeps (a drive; bits 1, 2, 4:
        # a limit stiffness > 0, a finite lower bound (> 0 for a DISTANCE joint's first DOF), a
        # finite upper bound), and which DOFs are a DISTANCE joint's first.
        nv = max(model.joint_dof_count, 1)
        driven, bits, distance = np.zeros(nv, np.int32), np.zeros(nv, np.int32), np.zeros(nv, np.int32)
        for j in range(model.joint_count):
            d0, d1 = int(model.joint_qd_start[j]), int(model.joint_qd_start[j + 1])
            if int(model.joint_type[j]) == int(JointType.DISTANCE) and d1 > d0:
                distance[d0] = 1
        n = model.joint_dof_count
        driven[:n] = (model.joint_target_ke > 0.0) | (model.joint_target_kd > 0.0)
        lo, hi = model.joint_limit_lower, model.joint_limit_upper
        bits[:n] = ((model.joint_limit_ke > 0.0) * 1 + np.where(distance[:n] != 0, lo > 0.0, np.isfinite(lo)) * 2
                    + np.isfinite(hi) * 4)
        in_pair = np.zeros(max(model.shape_count, 1), np.int32)
        if len(model.shape_pair):
            in_pair[np.asarray(model.shape_pair).ravel()] = 1
        self._dof_driven, self._dof_limit_bits, self._dof_distance = (wp.array(a, dtype=wp.int32, device=d)
                                                                      for a in (driven, bits, distance))
        self._shape_in_pair = wp.array(in_pair, dtype=wp.int32, device=d)

    # ------------------------------------------------------------------ reading

    def array(self, name: str) -> wp.array:
        """The device array kernels read for field ``name`` ((num_worlds, …); a world-stride-0 view
        for shared parameters). ``"body_inertia_inv"`` is the derived inverse inertia."""
        if name != "body_inertia_inv":
            spec.check_name(name)
        return self._views[name]

    def get(self, name: str) -> np.ndarray:
        """A host copy of field ``name``, (num_worlds, *shape) float64 (a device synchronization)."""
        spec.check_name(name)
        a = self._store[name].numpy()
        shape = spec.parameter_shape(self.model, name)
        a = a.reshape(a.shape[0], -1)[:, :int(np.prod(shape))].reshape(a.shape[0], *shape)
        return np.broadcast_to(a, (self.num_worlds, *shape)).copy()

    def world_fields(self, w: int) -> dict:
        """World ``w``'s value of every field: ``model.replace(num_worlds=1, **fields)`` steps as that world."""
        if not 0 <= int(w) < self.num_worlds:
            raise ValueError(f"w: expected a world in [0, {self.num_worlds}), got {w}")
        return {name: self.get(name)[int(w)] for name in spec.PARAMETER_FIELDS}

    # ------------------------------------------------------------------ writing

    def set(self, name: str, values, world_mask=None) -> None:
        """Write ``values`` of field ``name`` into the worlds of ``world_mask`` (None: every world).

        Host ``values`` ((num_worlds, *shape) or one world's (*shape), float64) are checked first
        and a ``ValueError`` names the field, world and element of a bad one (nothing written); a
        ``wp.array`` on this device ((num_worlds, …) in the field's dtype, :meth:`array`) is written
        and checked by kernels, a bad world flagged in :attr:`invalid` (module docstring).
        """
        spec.check_name(name)
        if self.shared:
            raise ValueError("set: these are a solver's shared parameters (the model's values); build "
                             "sap_gpu.WorldParameters(model, device) and pass it as parameters=")
        if isinstance(values, wp.array):
            self._set_device(name, values, world_mask)
        else:
            self._set_host(name, values, world_mask)

    def _set_host(self, name, values, world_mask):
        m, W = self.model, self.num_worlds
        vals = spec.host_values(m, name, values)
        mask = spec.world_mask(world_mask.numpy() if isinstance(world_mask, wp.array) else world_mask, W)
        candidate = {k: self._mirror(k) for k in spec.PARAMETER_FIELDS}
        candidate[name] = candidate[name].copy()
        candidate[name][mask] = vals[mask]
        spec.check_worlds(m, candidate, np.flatnonzero(mask), [name], self.forbid_rigid)
        if name == "body_inertia":
            candidate[name][mask] = spec.symmetrized(vals[mask])
        self._host[name] = candidate[name]
        wp.copy(self._store[name], self._upload(name, candidate[name]))
        if name in ("body_mass", "body_inertia"):
            inv = self._host_inverse(candidate["body_mass"], candidate["body_inertia"])
            target = self._store["body_inertia_inv"]
            wp.copy(target, wp.array(self._pad(inv, (*target.shape, 3, 3)), dtype=wp.mat33d, device=self.device))
        self._check(wp.array(mask.astype(np.int32), dtype=wp.int32, device=self.device), 1)

    def _set_device(self, name, values, world_mask):
        store = self._store[name]
        if values.dtype != store.dtype or tuple(values.shape) != tuple(store.shape) or values.device != self.device:
            raise ValueError(f"{name}: expected a wp.array of {wp.types.type_repr(store.dtype)} shaped "
                             f"{tuple(store.shape)} on {self.device}, got {wp.types.type_repr(values.dtype)} "
                             f"{tuple(values.shape)} on {values.device}")
        masked = 0 if world_mask is None else 1
        if world_mask is None:
            mask = self._no_mask
        else:
            if not isinstance(world_mask, wp.array) or world_mask.dtype != wp.int32 \
                    or tuple(world_mask.shape) != (self.num_worlds,) or world_mask.device != self.device:
                raise ValueError(f"world_mask: with device values, expected None or a wp.array of int32 shaped "
                                 f"({self.num_worlds},) on {self.device}")
            mask = world_mask
        kernel = {wp.float64: _write_f64, wp.vec3d: _write_vec3, wp.mat33d: _write_mat33}[store.dtype] \
            if name != "gravity" else _write_gravity
        launch_threads(kernel, dim=store.shape, device=self.device, inputs=[values, mask, masked], outputs=[store])
        self._host[name] = None  # the host mirror is stale until read back
        if name in ("body_mass", "body_inertia"):
            launch_threads(_inverse_inertia, dim=store.shape, device=self.device,
                           inputs=[self._store["body_mass"], self._store["body_inertia"], mask, masked],
                           outputs=[self._store["body_inertia_inv"]])
        self._check(mask, masked)

    def _check(self, mask, masked) -> None:
        m, a = self.model, self._store
        launch_threads(_check_worlds, dim=self.num_worlds, device=self.device, inputs=[
            mask, masked, m.body_count, m.joint_dof_count, m.shape_count, a["body_mass"], a["body_com"],
            a["body_inertia"], *(a[k] for k in spec.DOF_FIELDS), *(a[k] for k in spec.SHAPE_FIELDS), a["gravity"],
            self._dof_driven, self._dof_limit_bits, self._dof_distance, self._shape_in_pair, int(self.forbid_rigid)],
            outputs=[self.invalid])

    def check_rigid(self) -> None:
        """``ValueError`` if a world's shape of a pair is rigid (a Hunt–Crossley solver's check of
        the current values); then :attr:`forbid_rigid` holds for later writes."""
        ke = self.get("shape_material_ke")
        in_pair = np.zeros(self.model.shape_count, bool)
        if len(self.model.shape_pair):
            in_pair[np.asarray(self.model.shape_pair).ravel()] = True
        bad = np.argwhere(np.isinf(ke) & in_pair)
        if len(bad):
            w, s = (int(x) for x in bad[0])
            raise ValueError(f"shape_material_ke[world {w}, shape {s} ({self.model.shape_name[s]})]: inf (rigid) has "
                             "no Hunt–Crossley counterpart; give it a finite stiffness > 0 (or NaN for "
                             "fallback_stiffness), or use discrete_contact_approximation 'sap'")
        self.forbid_rigid = True

    # ------------------------------------------------------------------ helpers

    def _mirror(self, name) -> np.ndarray:
        """The (num_worlds, *shape) host values of ``name`` (read back after a device write)."""
        if self._host[name] is None:
            self._host[name] = self.get(name)
        return np.broadcast_to(self._host[name], (self.num_worlds, *self._host[name].shape[1:]))

    @staticmethod
    def _pad(a: np.ndarray, shape) -> np.ndarray:
        """``a`` in a zero array of ``shape`` (an empty axis holds one unused element on the device)."""
        out = np.zeros(shape, np.float64)
        out[tuple(slice(0, n) for n in a.shape)] = a
        return out

    def _upload(self, name, host: np.ndarray) -> wp.array:
        dtype, inner = _dtype(name)
        rows = host.shape[0]
        if name == "gravity":
            return wp.array(np.ascontiguousarray(host), dtype=dtype, device=self.device)
        n = host.shape[1]
        return wp.array(self._pad(host, (rows, max(n, 1), *host.shape[2:])), dtype=dtype, device=self.device)

    @staticmethod
    def _host_inverse(mass: np.ndarray, inertia: np.ndarray) -> np.ndarray:
        """Each body's inverse inertia, zero for a massless body (sap_gpu.arrays.GpuModel's, per world)."""
        massive = mass > 0  # NumPy's batched inverse solves each matrix as a single call does
        out = np.zeros(inertia.shape)
        out[massive] = np.linalg.inv(inertia[massive]) if np.any(massive) else 0.0
        return out


def shared_parameters(model: SapModel, device) -> WorldParameters:
    """The model's values seen by every world (what a solver or pipeline without ``parameters=`` reads)."""
    params = WorldParameters.__new__(WorldParameters)
    params._setup(model, device, True)
    return params


def check_parameters(parameters, model: SapModel, device, shared: WorldParameters | None = None) -> WorldParameters:
    """``parameters`` (a WorldParameters of ``model`` on ``device``), or for None the shared ones:
    ``shared`` where given (a GpuModel's), else new ones."""
    if parameters is None:
        return shared if shared is not None else shared_parameters(model, device)
    if not isinstance(parameters, WorldParameters) or parameters.shared:
        raise ValueError(f"parameters: expected a sap_gpu.WorldParameters or None, got {type(parameters).__name__}")
    if parameters.model is not model:
        raise ValueError("parameters: built for another model; build sap_gpu.WorldParameters(model, device) with the "
                         "solver's own model")
    if parameters.device != device:
        raise ValueError(f"parameters: on device {parameters.device}, but the solver runs on {device}")
    return parameters


def parameters_memory(model: SapModel, parts: bool = False) -> MemoryEstimate | tuple[MemoryEstimate, MemoryEstimate]:
    """The bytes a :class:`WorldParameters` of ``model`` allocates, measured on 1 and 2 worlds
    (:func:`~sap_gpu.device.probe_memory`): a MemoryEstimate of the parts ``parameters`` (device
    arrays) and ``parameters (host copy)`` (the NumPy copy of every value it keeps), or with
    ``parts`` the two estimates apart."""

    def build(model_w, probe_device):
        probe = WorldParameters.__new__(WorldParameters)
        probe._setup(model_w, probe_device, False)
        return probe

    on_device = probe_memory("parameters", model, lambda m, d: device_nbytes(build(m, d)))
    on_host = probe_memory("parameters (host copy)", model, lambda m, d: host_nbytes(build(m, d)._host))
    return (on_device, on_host) if parts else on_device + on_host
