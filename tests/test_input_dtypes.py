"""Wrong dtypes are rejected, never converted (sap_common.state.field_dtype): every field of the
state, the control and the contacts, on both backends, with a ValueError naming the field and the
expected dtype, and the caller's array left as it was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sap_gpu
import sap_ref
from sap_common import scenes
from sap_common.state import INDEX_FIELDS, SapContacts, SapControl, SapState, field_dtype

SCENE = scenes.get("box_stack", num_worlds=2)
MODEL = SCENE.sap_model
CAPACITY = 8


def _inputs():
    pipeline = sap_ref.CollisionPipeline(MODEL, CAPACITY)
    state, control, contacts = SCENE.state.copy(), SCENE.control.copy(), pipeline.contacts()
    pipeline.collide(state, contacts)
    return {"state": state, "control": control, "contacts": contacts}


def _cases():
    for kind, cls in (("state", SapState), ("control", SapControl), ("contacts", SapContacts)):
        for f in dataclasses.fields(cls):
            if f.type in ("str",) or f.name.endswith("_order"):
                continue
            wrong = ("int64", "float64") if f.name in INDEX_FIELDS else ("int64", "float32")
            for dtype in wrong:
                yield kind, f.name, dtype


CASES = list(_cases())


def test_every_array_field_is_covered():
    fields = {(k, f) for k, f, _ in CASES}
    assert len(fields) == 5 + 4 + 19  # state, control, contacts (hcd: the Hunt–Crossley dissipation; area)
    assert field_dtype("joint_q") == np.float64 and field_dtype("shape0") == np.int32


def _with_wrong_dtype(kind, field, dtype):
    inputs = _inputs()
    obj = inputs[kind]
    wrong = getattr(obj, field).astype(dtype)
    setattr(obj, field, wrong)
    return inputs, wrong, wrong.copy()


@pytest.mark.parametrize("kind,field,dtype", CASES)
def test_sap_ref_step_rejects_a_wrong_dtype_naming_the_field(kind, field, dtype):
    inputs, wrong, before = _with_wrong_dtype(kind, field, dtype)
    want = field_dtype(field).name
    name = {"state": "state_in", "control": "control", "contacts": "contacts"}[kind]
    solver = sap_ref.SolverSAP(MODEL, max_rigid_contact=CAPACITY)
    with pytest.raises(ValueError, match=rf"^{name}\.{field}: expected dtype {want}, got {dtype} "):
        solver.step(inputs["state"], inputs["state"], inputs["control"], inputs["contacts"], SCENE.dt)
    np.testing.assert_array_equal(wrong, before)  # nothing was written into the caller's array


@pytest.mark.parametrize("kind,field,dtype", [c for c in CASES if c[0] != "control"])
def test_sap_ref_collide_rejects_a_wrong_dtype_naming_the_field(kind, field, dtype):
    inputs, wrong, before = _with_wrong_dtype(kind, field, dtype)
    pipeline = sap_ref.CollisionPipeline(MODEL, CAPACITY)
    with pytest.raises(ValueError, match=rf"^{kind}\.{field}: expected dtype {field_dtype(field).name}, got {dtype}"):
        pipeline.collide(inputs["state"], inputs["contacts"])
    np.testing.assert_array_equal(wrong, before)


def test_a_wrong_dtype_state_out_is_rejected_before_anything_is_written():
    state = SCENE.state.copy()
    out = dataclasses.replace(state.copy(), joint_q=state.joint_q.astype(np.float32))
    before = out.joint_q.copy()
    with pytest.raises(ValueError, match=r"^state_out\.joint_q: expected dtype float64, got float32"):
        sap_ref.SolverSAP(MODEL, max_rigid_contact=CAPACITY).step(state, out, SCENE.control, None, SCENE.dt)
    np.testing.assert_array_equal(out.joint_q, before)


@pytest.mark.parametrize("package", [sap_ref, sap_gpu], ids=["sap_ref", "sap_gpu"])
@pytest.mark.parametrize("kind,field,dtype", CASES)
def test_to_device_rejects_a_wrong_dtype_naming_the_field(package, kind, field, dtype):
    inputs, wrong, before = _with_wrong_dtype(kind, field, dtype)
    cls = type(inputs[kind]).__name__
    with pytest.raises(ValueError, match=rf"^{cls}\.{field}: expected dtype {field_dtype(field).name}, got {dtype}"):
        package.to_device(inputs[kind], "cpu")
    np.testing.assert_array_equal(wrong, before)


def test_an_integer_joint_q_is_not_truncated_but_rejected():
    """The reported case: joint_q as int64 with z = 1 m used to read back 0 after one step."""
    state = SCENE.state.copy()
    state.joint_q = np.round(state.joint_q).astype(np.int64)
    state.joint_q[:, 2] = 1
    with pytest.raises(ValueError, match=r"state_in\.joint_q: expected dtype float64, got int64"):
        sap_ref.SolverSAP(MODEL, max_rigid_contact=CAPACITY).step(state, state, SCENE.control, None, SCENE.dt)
    assert np.all(state.joint_q[:, 2] == 1)
    with pytest.raises(ValueError, match=r"SapState\.joint_q: expected dtype float64, got int64"):
        sap_gpu.to_device(state, "cpu")


def test_device_arrays_of_the_wrong_dtype_are_rejected_by_to_device():
    import warp as wp

    dev = sap_gpu.to_device(SCENE.control, "cpu")
    bad = dataclasses.replace(dev, joint_f=wp.array(np.zeros((2, MODEL.joint_dof_count), np.float32),
                                                    dtype=wp.float32, device="cpu"))
    with pytest.raises(ValueError, match=r"joint_f: expected dtype float64, got float32"):
        sap_gpu.to_device(bad, "cpu")
