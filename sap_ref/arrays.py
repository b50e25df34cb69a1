"""Host-side data helpers with sap_gpu's names, so that switching backends is one import.

``sap_ref`` runs on the host: its "device" is NumPy memory. ``state``, ``control``,
``contacts``, ``to_device`` and ``to_host`` take the same arguments as their ``sap_gpu``
counterparts and return ``SapState``/``SapControl``/``SapContacts`` with NumPy fields (always
new arrays). ``device`` may be None or ``"cpu"``; anything else is a ``ValueError``.

:func:`write_contact` and :func:`clear_contact` are the one way to fill or empty a contact slot on
the host, as ``sap_gpu.arrays``' functions of the same names are in kernels.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sap_common.model import SapModel
from sap_common.state import (
    SapContacts,
    SapControl,
    SapState,
    available_host_memory,
    check_dtypes,
    check_memory,
    control_memory,
    keep_stamp,
    state_memory,
)

__all__ = ["check_host_device", "to_device", "to_host", "state", "control", "contacts", "write_contact",
           "clear_contact"]

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
    check_memory(state_memory(model), available_host_memory, "sap_ref.state")  # docs/scaling.md § Memory
    return model.state()


def control(model: SapModel, device=None) -> SapControl:
    """``model.control()`` (public order)."""
    check_host_device(device)
    check_memory(control_memory(model), available_host_memory, "sap_ref.control")
    return model.control()


def contacts(num_worlds: int, capacity: int, device=None) -> SapContacts:
    """Empty contacts with ``capacity`` slots per world."""
    check_host_device(device)
    return SapContacts.allocate(num_worlds, capacity)


def write_contact(contacts: SapContacts, world: int, slot: int, shape0, shape1, body0, body1, x0, x1, normal, phi0,
                  margin0, margin1, mu, ke, ke0, ke1, tau_d, hcd, area) -> None:
    """Slot ``slot`` of ``world``: every field of the contact record (:class:`SapContacts`), in the
    arrays' dtypes (float64, int32 ids). ``ke``, ``phi0`` and ``area`` are the point's own: point
    contact passes the materials' combined k, the geometry's φ₀ and 0; a contact model with
    per-point values (a hydroelastic face) its own."""
    contacts.shape0[world, slot], contacts.shape1[world, slot] = shape0, shape1
    contacts.body0[world, slot], contacts.body1[world, slot] = body0, body1
    contacts.x0[world, slot], contacts.x1[world, slot], contacts.normal[world, slot] = x0, x1, normal
    contacts.phi0[world, slot] = phi0
    contacts.margin0[world, slot], contacts.margin1[world, slot] = margin0, margin1
    contacts.mu[world, slot], contacts.ke[world, slot] = mu, ke
    contacts.ke0[world, slot], contacts.ke1[world, slot], contacts.tau_d[world, slot] = ke0, ke1, tau_d
    contacts.hcd[world, slot] = hcd
    contacts.area[world, slot] = area


def clear_contact(contacts: SapContacts, world: int, slot=slice(None)) -> None:
    """Slot ``slot`` of ``world`` (default: every slot) empty, as :meth:`SapContacts.allocate` leaves
    it: shapes and bodies −1, the rest 0."""
    write_contact(contacts, world, slot, -1, -1, -1, -1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                  0.0)
