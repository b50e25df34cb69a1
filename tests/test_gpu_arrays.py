"""sap_gpu.to_device / to_host and the device-side constructors (docs/design.md § Data model and batching)."""

import dataclasses

import numpy as np
import pytest
import warp as wp
from contact_record import SLOT_FIELDS, not_empty, poison, record_values, unwritten

import sap_gpu
from sap_common import scenes
from sap_common.state import SapContacts, SapControl, SapState
from sap_gpu.arrays import (
    ContactSlots,
    GpuModel,
    check_device_contacts,
    clear_contact,
    contact_slots,
    write_contact,
    write_contact_pair,
    write_contact_point,
)


def _fields(obj):
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _random_fill(obj, rng):
    """Every array field filled with distinct random values of its dtype."""
    for name, a in _fields(obj).items():
        if isinstance(a, np.ndarray):
            a[...] = (rng.integers(-5, 50, a.shape) if np.issubdtype(a.dtype, np.integer)
                      else rng.standard_normal(a.shape))
    return obj


@pytest.fixture(scope="module")
def model():
    return scenes.get("arm_push_block", num_worlds=3).sap_model


@pytest.mark.parametrize("kind", ["state", "control", "contacts"])
def test_round_trip_is_exact_and_batched(device, model, kind):
    rng = np.random.default_rng(1)
    host = {"state": model.state, "control": model.control,
            "contacts": lambda: SapContacts.allocate(model.num_worlds, 5)}[kind]()
    host = _random_fill(host, rng)
    dev = sap_gpu.to_device(host, device)
    for name, a in _fields(dev).items():
        h = _fields(host)[name]
        if isinstance(h, np.ndarray):
            assert isinstance(a, wp.array) and a.device == device, name
            assert a.shape[0] == model.num_worlds, f"{name}: not batched over worlds"
            assert a.numpy().shape == h.shape, name  # transforms (…, 7), spatial vectors (…, 6)
        else:
            assert a == h, name  # order tags and other scalars carry over
    back = sap_gpu.to_host(dev)
    assert type(back) is type(host)
    for name, h in _fields(host).items():
        b = _fields(back)[name]
        if isinstance(h, np.ndarray):
            assert isinstance(b, np.ndarray) and b.dtype.kind == h.dtype.kind and np.array_equal(b, h), name
        else:
            assert b == h, name


def test_device_copies_never_share_memory(device, model):
    host = model.state()
    dev = sap_gpu.to_device(host, device)
    again = sap_gpu.to_device(dev, device)
    again.joint_q.fill_(3.0)
    assert not np.any(dev.joint_q.numpy() == 3.0)
    back = sap_gpu.to_host(dev)
    back.joint_q[...] = 4.0
    assert not np.any(dev.joint_q.numpy() == 4.0)
    host.joint_q[...] = 5.0
    assert not np.any(dev.joint_q.numpy() == 5.0)


def test_device_constructors_match_the_host_ones(device, model):
    for dev, host in ((sap_gpu.state(model, device), model.state()), (sap_gpu.control(model, device), model.control()),
                      (sap_gpu.contacts(model.num_worlds, 4, device), SapContacts.allocate(model.num_worlds, 4))):
        back = sap_gpu.to_host(dev)
        for name, h in _fields(host).items():
            b = _fields(back)[name]
            assert np.array_equal(b, h) if isinstance(h, np.ndarray) else b == h, name
    assert sap_gpu.state(model, device).body_q.dtype == wp.transformd
    assert sap_gpu.state(model, device).body_qd.dtype == wp.spatial_vectord
    assert sap_gpu.contacts(2, 4, device).normal.dtype == wp.vec3d


@pytest.mark.parametrize("bad", [None, 3, np.zeros(3), {"joint_q": np.zeros(3)}])
def test_unknown_objects_are_refused(bad):
    for f in (sap_gpu.to_device, sap_gpu.to_host):
        with pytest.raises(ValueError, match="obj: expected SapState, SapControl or SapContacts"):
            f(bad) if f is sap_gpu.to_host else f(bad, "cpu")


def test_public_types_are_the_host_dataclasses(device, model):
    assert isinstance(sap_gpu.state(model, device), SapState)
    assert isinstance(sap_gpu.control(model, device), SapControl)
    assert isinstance(sap_gpu.contacts(1, 1, device), SapContacts)


@wp.kernel(enable_backward=False)
def _write_and_clear(ids: wp.array(dtype=int), vecs: wp.array(dtype=wp.vec3d), reals: wp.array(dtype=wp.float64),
                     contacts_out: ContactSlots):
    write_contact(contacts_out, 1, 2, ids[0], ids[1], ids[2], ids[3], vecs[0], vecs[1], vecs[2], reals[0], reals[1],
                  reals[2], reals[3], reals[4], reals[5], reals[6], reals[7], reals[8], reals[9])
    clear_contact(contacts_out, 0, 1)


def test_contact_slots_and_write_contact_cover_every_field_of_the_record():
    assert list(ContactSlots.vars) == list(SLOT_FIELDS)
    assert list(write_contact.input_types)[3:] == list(SLOT_FIELDS)
    point, pair = (list(f.input_types)[3:] for f in (write_contact_point, write_contact_pair))
    assert sorted(point + pair) == sorted(SLOT_FIELDS) and not set(point) & set(pair)
    assert {"ke", "phi0", "area"} <= set(point)  # the per-point values a contact model may set


def test_contact_slots_reuses_the_struct_it_made_only_while_it_holds_the_same_arrays():
    dev = sap_gpu.to_device(SapContacts.allocate(2, 3), "cpu")
    made = contact_slots(dev)
    assert all(getattr(made, f) is getattr(dev, f) for f in SLOT_FIELDS)
    assert contact_slots(dev, made) is made
    other = sap_gpu.to_device(SapContacts.allocate(2, 3), "cpu")  # same shapes, other arrays
    fresh = contact_slots(other, made)
    assert fresh is not made and all(getattr(fresh, f) is getattr(other, f) for f in SLOT_FIELDS)
    dev.mu = wp.clone(dev.mu)  # one array replaced: the struct must follow it
    assert contact_slots(dev, made) is not made and contact_slots(dev, made).mu is dev.mu


def test_write_contact_writes_every_field_and_clear_contact_empties_the_slot(device):
    values = record_values()
    empty = SapContacts.allocate(1, 1)  # the kernel passes ids, 3-vectors and reals in SLOT_FIELDS order
    ids = [values[f] for f in SLOT_FIELDS if getattr(empty, f).dtype == np.int32]
    vecs = [values[f] for f in SLOT_FIELDS if getattr(empty, f).ndim == 3]
    reals = [values[f] for f in SLOT_FIELDS if getattr(empty, f).dtype == np.float64 and getattr(empty, f).ndim == 2]
    assert len(ids) + len(vecs) + len(reals) == len(SLOT_FIELDS)
    dev = sap_gpu.to_device(poison(SapContacts.allocate(2, 3)), device)
    wp.launch(_write_and_clear, dim=1, device=device, inputs=[
        wp.array(ids, dtype=int, device=device), wp.array(np.array(vecs), dtype=wp.vec3d, device=device),
        wp.array(reals, dtype=wp.float64, device=device)], outputs=[contact_slots(dev)])
    host = sap_gpu.to_host(dev)
    for f, v in values.items():
        assert np.array_equal(getattr(host, f)[1, 2], v), f
    assert not_empty(host, 0, 1) == []
    untouched = [(w, k) for w in range(2) for k in range(3) if (w, k) not in ((1, 2), (0, 1))]
    assert all(unwritten(host, w, k) == list(SLOT_FIELDS) for w, k in untouched)


@pytest.mark.parametrize("bad, message", [
    (lambda d: wp.zeros((3, 4), dtype=wp.float64, device=d), r"contacts.area: expected shape \(3, 5\)"),
    (lambda d: wp.zeros((3, 5), dtype=wp.float32, device=d), r"contacts.area: expected dtype float64"),
    (lambda d: np.zeros((3, 5)), r"contacts.area: expected a wp.array"),
])
def test_device_contacts_check_refuses_a_bad_area_naming_it(device, model, bad, message):
    c = sap_gpu.contacts(model.num_worlds, 5, device)
    check_device_contacts(GpuModel(model, device), c, 5)
    c.area = bad(device)
    with pytest.raises(ValueError, match=message):
        check_device_contacts(GpuModel(model, device), c, 5)
