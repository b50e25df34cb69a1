"""One place that turns a ``device`` argument into a Warp device, or a clear ``ValueError``; and
what a device has free and what objects take on it (docs/scaling.md § Memory).

Every public entry point of sap_gpu that takes ``device`` (``SolverSAP``, ``CollisionPipeline``,
``GpuModel``, ``to_device``, ``state``, ``control``, ``contacts``) and the command-line tools go
through :func:`get_device`. Asked for a device this machine lacks, Warp itself either raises
"Invalid device identifier" or prints CUDA driver errors and raises a ``RuntimeError``; here the
name is checked against Warp's device list first, so nothing reaches Warp's CUDA layer and the
error says what is available.
"""

from __future__ import annotations

import warp as wp

from sap_common.model import SapModel
from sap_common.state import MemoryEstimate, available_host_memory, reachable_arrays
from sap_common.state import probe_memory as probe_host

__all__ = ["get_device", "available_devices", "free_memory", "device_nbytes", "probe_memory", "STAGING"]


def available_devices() -> list[str]:
    """Aliases of the Warp devices on this machine (``"cpu"``, ``"cuda:0"``, …)."""
    return [d.alias for d in wp.get_devices()]


def get_device(device=None, name: str = "device") -> wp.Device:
    """The Warp device for ``device``: None (Warp's default), a ``wp.Device``, or an alias
    (``"cpu"``, ``"cuda"`` = the default CUDA device, ``"cuda:N"``).

    Raises ``ValueError`` naming ``name`` and listing the devices this machine has when there is
    no such device here, before Warp is asked for it.
    """
    if device is None or isinstance(device, wp.Device):
        return wp.get_device(device)
    available = available_devices()
    if not isinstance(device, str):
        raise ValueError(f"{name}: expected None, a device name or a wp.Device, got "
                         f"{type(device).__name__} {device!r}; available: {', '.join(available)}")
    cuda = [a for a in available if a.startswith("cuda")]
    if device in available or (device == "cuda" and cuda):
        return wp.get_device(device)
    why = "no CUDA device here" if device.startswith("cuda") and not cuda else "no such Warp device here"
    raise ValueError(f"{name} {device!r}: {why}; available: {', '.join(available)}")


def free_memory(device) -> int | None:
    """Bytes free on ``device`` (a ``wp.Device``): on a CUDA device what the driver reports
    (``Device.free_memory``, cudaMemGetInfo); on the CPU device the host's available memory
    (``sap_common.state.available_host_memory``: Warp's own figure for the CPU needs psutil and
    leaves out the caches the kernel can reclaim). None where it cannot be read."""
    if device.is_cuda:
        return int(device.free_memory)
    return available_host_memory()


# ----------------------------------------------------------------------------- memory of device objects

# The name of the part of a memory estimate held on the host only while an object is built: the host
# arrays copied to the device (on the CPU device these share the host's memory with the device arrays).
STAGING = "host staging"


def device_nbytes(*roots) -> int:
    """Bytes of the Warp arrays reachable from ``roots`` (``sap_common.state.reachable_arrays``:
    attributes, struct variables, containers), each allocation once: a view counts the array that
    owns its memory, a view of memory no reachable array owns (a world-stride-0 view) nothing."""
    owners = {}
    for a in reachable_arrays(roots, lambda o: isinstance(o, wp.array), skip=(SapModel, wp.Device)):
        while a.deleter is None and isinstance(getattr(a, "_ref", None), wp.array):
            a = a._ref
        if a.deleter is not None:
            owners[(str(a.device), a.ptr)] = int(a.capacity)
    return sum(owners.values())


def probe_memory(name: str, model: SapModel, measure, key=(), num_worlds: int | None = None) -> MemoryEstimate:
    """``sap_common.state.probe_memory`` of what ``measure(model_w, device)`` builds for ``model_w``
    (the model's template with 1 and 2 worlds) on Warp's CPU device and counts (:func:`device_nbytes`):
    the measured bytes of the allocating code itself. What it builds must launch nothing (the
    constructors' ``sizing`` flag)."""
    cpu = wp.get_device("cpu")
    return probe_host(name, model, lambda w: measure(model if model.num_worlds == w else model.replace(num_worlds=w),
                                                     cpu), key=("sap_gpu", key), num_worlds=num_worlds)
