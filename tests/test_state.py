"""sap_common.state: order flags, shape checks, contact buffers."""

import numpy as np
import pytest

from sap_common.builder import ModelBuilder
from sap_common.state import (
    CONTACT_SLOT_FIELDS,
    CONTACT_WORLD_FIELDS,
    SapContacts,
    SapControl,
    SapState,
    check_contacts,
    check_control,
    check_state,
)


def model(num_worlds=2):
    b = ModelBuilder()
    b.add_body(1.0, inertia=(0.1, 0.1, 0.1))
    b.add_body(1.0, inertia=(0.1, 0.1, 0.1))
    b.add_joint_free(-1, 0)
    b.add_joint_revolute(0, 1)
    return b.replicate(num_worlds).finalize()


def raw_state(W=2):
    return SapState(joint_q=np.zeros((W, 8)), joint_qd=np.zeros((W, 7)), body_q=np.zeros((W, 2, 7)),
                    body_qd=np.zeros((W, 2, 6)), body_f=np.zeros((W, 2, 6)))


def test_raw_dataclasses_default_to_sap_order():
    assert raw_state().joint_qd_order == "sap" and raw_state().body_f_order == "sap"
    z = np.zeros((2, 7))
    assert SapControl(z, z, z, z).joint_f_order == "sap"


@pytest.mark.parametrize("field", ["joint_qd_order", "body_f_order"])
def test_state_order_flag_is_validated(field):
    with pytest.raises(ValueError, match=fr"{field}: must be one of 'public', 'sap', got 'world'"):
        SapState(**{**raw_state().__dict__, field: "world"})


def test_control_order_flag_is_validated():
    z = np.zeros((2, 7))
    with pytest.raises(ValueError, match=r"joint_f_order: must be one of 'public', 'sap'"):
        SapControl(z, z, z, z, joint_f_order="PUBLIC")


def test_check_state_and_control_name_the_field():
    m = model()
    check_state(m, m.state())
    check_control(m, m.control())
    bad = m.state()
    bad.joint_qd = np.zeros((2, 6))
    with pytest.raises(ValueError, match=r"state.joint_qd: expected shape \(2, 7\), got \(2, 6\)"):
        check_state(m, bad)
    bad = m.state()
    bad.body_q = np.zeros((1, 2, 7))
    with pytest.raises(ValueError, match=r"state.body_q: expected shape \(2, 2, 7\)"):
        check_state(m, bad)
    c = m.control()
    c.joint_act = [0.0] * 7
    with pytest.raises(ValueError, match=r"control.joint_act: expected a numpy array"):
        check_control(m, c)


def test_contacts_allocate_and_check():
    m = model()
    c = SapContacts.allocate(2, 5)
    assert c.capacity == 5 and c.num_worlds == 2
    assert c.count.tolist() == [0, 0] and c.overflow.tolist() == [0, 0]
    assert c.x0.shape == (2, 5, 3) and c.shape0.dtype == np.int32 and (c.shape0 == -1).all()
    check_contacts(m, c)
    c.count[1] = 6
    with pytest.raises(ValueError, match=r"contacts.count: must lie in \[0, 5\]"):
        check_contacts(m, c)
    with pytest.raises(ValueError, match=r"contacts.count: expected shape \(3,\)"):
        check_contacts(model(3), SapContacts.allocate(2, 5))
    with pytest.raises(ValueError, match=r"max_rigid_contact: must be an integer >= 0"):
        SapContacts.allocate(2, -1)
    with pytest.raises(ValueError, match=r"num_worlds: must be an integer >= 1"):
        SapContacts.allocate(0, 4)
    assert SapContacts.allocate(1, 0).x0.shape == (1, 0, 3)


def test_contacts_have_a_per_point_area_slot():
    c = SapContacts.allocate(2, 5)
    assert c.area.shape == (2, 5) and c.area.dtype == np.float64 and not c.area.any()
    c.area[1, 3] = 2.5e-4
    c2 = c.copy()
    c2.area[1, 3] = 0.0
    assert c.area[1, 3] == 2.5e-4  # copied, not shared
    assert CONTACT_SLOT_FIELDS[-1] == "area" and "area" not in CONTACT_WORLD_FIELDS


@pytest.mark.parametrize("bad, message", [
    (np.zeros((2, 4)), r"contacts.area: expected shape \(2, 5\), got \(2, 4\)"),
    (np.zeros((2, 5, 1)), r"contacts.area: expected shape \(2, 5\), got \(2, 5, 1\)"),
    (np.zeros((2, 5), np.float32), r"contacts.area: expected dtype float64, got float32"),
    ([[0.0] * 5] * 2, r"contacts.area: expected a numpy array"),
])
def test_check_contacts_refuses_a_bad_area_naming_it(bad, message):
    c = SapContacts.allocate(2, 5)
    c.area = bad
    with pytest.raises(ValueError, match=message):
        check_contacts(model(), c)


def test_copy_is_deep():
    m = model()
    s = m.state()
    s2 = s.copy()
    s2.joint_q[0, 0] = 9.0
    assert s.joint_q[0, 0] == 0.0 and s2.joint_qd_order == s.joint_qd_order
    c = SapContacts.allocate(2, 3)
    c2 = c.copy()
    c2.count[0] = 2
    assert c.count[0] == 0
