"""sap_gpu.to_device / to_host and the device-side constructors (docs/design.md § Data model and batching)."""

import dataclasses

import numpy as np
import pytest
import warp as wp

import sap_gpu
from sap_common import scenes
from sap_common.state import SapContacts, SapControl, SapState


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
