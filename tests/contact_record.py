"""The contact record (``sap_common.state.SapContacts``) for the tests of its writers: the per-slot
fields, a sentinel fill, a distinct value per field, and which fields a writer left alone.

The fields are read from the dataclass itself, not from ``sap_common.state.CONTACT_SLOT_FIELDS``:
a field added to the dataclass that a writer does not write then fails these tests.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sap_common.state import SapContacts

SLOT_FIELDS = tuple(f.name for f in dataclasses.fields(SapContacts) if f.name not in ("count", "overflow"))
SENTINEL_ID = -7  # in the integer fields; the float fields hold NaN


def poison(contacts: SapContacts) -> SapContacts:
    """Host ``contacts`` with every per-slot field at the sentinel (ids −7, reals NaN)."""
    for f in SLOT_FIELDS:
        a = getattr(contacts, f)
        a[...] = SENTINEL_ID if np.issubdtype(a.dtype, np.integer) else np.nan
    return contacts


def unwritten(contacts: SapContacts, world: int, slot: int) -> list[str]:
    """The per-slot fields of host ``contacts`` still holding the sentinel at (world, slot)."""
    out = []
    for f in SLOT_FIELDS:
        v = np.asarray(getattr(contacts, f)[world, slot])
        if np.any(v == SENTINEL_ID) if np.issubdtype(v.dtype, np.integer) else np.any(np.isnan(v)):
            out.append(f)
    return out


def not_empty(contacts: SapContacts, world: int, slot: int) -> list[str]:
    """The per-slot fields of host ``contacts`` at (world, slot) that differ from an empty slot
    (``SapContacts.allocate``'s values: ids −1, the rest 0)."""
    empty = SapContacts.allocate(1, 1)
    return [f for f in SLOT_FIELDS
            if not np.array_equal(getattr(contacts, f)[world, slot], getattr(empty, f)[0, 0])]


def record_values() -> dict:
    """A value per per-slot field, each different from every other and from the sentinel and empty
    values: ids 10, 11, …; reals 0.5, 1.5, …; 3-vectors (k, k + 0.25, k + 0.5)."""
    out = {}
    for k, f in enumerate(SLOT_FIELDS):
        a = getattr(SapContacts.allocate(1, 1), f)
        if np.issubdtype(a.dtype, np.integer):
            out[f] = 10 + k
        elif a.ndim == 3:
            out[f] = np.array([k, k + 0.25, k + 0.5])
        else:
            out[f] = k + 0.5
    return out


def assert_point_contacts(model, contacts: SapContacts, config) -> None:
    """Host ``contacts`` as a collision pipeline leaves them: every slot below the count fully
    written (none of :func:`poison`'s sentinels left), point contacts (area 0, the pair's combined
    k), and every slot past the count empty."""
    from sap_common.collision_rules import combine_materials

    for w in range(contacts.num_worlds):
        n = int(contacts.count[w])
        for k in range(n):
            assert unwritten(contacts, w, k) == [], (w, k)
            a, b = int(contacts.shape0[w, k]), int(contacts.shape1[w, k])
            assert contacts.area[w, k] == 0.0, (w, k)
            assert contacts.ke[w, k] == combine_materials(model, a, b, config)[1], (w, k)
        for k in range(n, contacts.capacity):
            assert not_empty(contacts, w, k) == [], (w, k)
