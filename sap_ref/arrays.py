"""Host-side data helpers with sap_gpu's names, so that switching backends is one import.

``sap_ref`` runs on the host: its "device" is NumPy memory. ``state``, ``control``,
``contacts``, ``to_device`` and ``to_host`` take the same arguments as their ``sap_gpu``
counterparts and return ``SapState``/``SapControl``/``SapContacts`` with NumPy fields (always
new arrays). ``device`` may be None or ``"cpu"``; anything else is a ``ValueError``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sap_common.model import SapModel
from sap_common.state import SapContacts, SapControl, SapState, check_dtypes, keep_stamp

__all__ = ["check_host_device", "to_device", "to_host", "state", "control", "contacts"]

HOST_DEVICES = (None, "cpu")


def check_host_device(device, name: str = "device") -> None:
    """``ValueError`` unless ``device`` names the host (None or ``"cpu"``, or a Warp cpu device)."""
    if device is None or str(device) == "cpu":
        return
    raise ValueError(f"{name} {device!r}: sap_ref runs on the host (NumPy); use None or 'cpu' "
                     f"(sap_gpu runs on Warp devices)")


def _numpy(a) -> np.ndarray:
    """A new NumPy array with ``a``'s values (a Warp array is copied off its device by ``.numpy()``)."""
    return np.array(a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a)


def _host_copy(obj):
    if not isinstance(obj, (SapState, SapControl, SapContacts)):
        raise ValueError(f"obj: expected SapState, SapControl or SapContacts, got {type(obj).__name__}")
    out = dataclasses.replace(obj, **{f.name: _numpy(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                                      if not isinstance(getattr(obj, f.name), str)})
    check_dtypes(out, type(obj).__name__)
    return keep_stamp(obj, out)


def to_device(obj, device=None):
    """A NumPy copy of a ``SapState``/``SapControl``/``SapContacts`` (sap_ref's device is the host).

    A field of the wrong dtype (anything but float64, or int32 for contact counts and indices) is a
    ``ValueError`` naming it, as in ``sap_gpu.to_device``; nothing is converted.
    """
    check_host_device(device)
    return _host_copy(obj)


def to_host(obj):
    """A NumPy copy (fields on a Warp device are copied to the host too)."""
    return _host_copy(obj)


def state(model: SapModel, device=None) -> SapState:
    """``model.state()`` (public order)."""
    check_host_device(device)
    return model.state()


def control(model: SapModel, device=None) -> SapControl:
    """``model.control()`` (public order)."""
    check_host_device(device)
    return model.control()


def contacts(num_worlds: int, capacity: int, device=None) -> SapContacts:
    """Empty contacts with ``capacity`` slots per world."""
    check_host_device(device)
    return SapContacts.allocate(num_worlds, capacity)
