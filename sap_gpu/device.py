"""One place that turns a ``device`` argument into a Warp device, or a clear ``ValueError``.

Every public entry point of sap_gpu that takes ``device`` (``SolverSAP``, ``CollisionPipeline``,
``GpuModel``, ``to_device``, ``state``, ``control``, ``contacts``) and the command-line tools go
through :func:`get_device`. Asked for a device this machine lacks, Warp itself either raises
"Invalid device identifier" or prints CUDA driver errors and raises a ``RuntimeError``; here the
name is checked against Warp's device list first, so nothing reaches Warp's CUDA layer and the
error says what is available.
"""

from __future__ import annotations

import warp as wp

__all__ = ["get_device", "available_devices"]


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
