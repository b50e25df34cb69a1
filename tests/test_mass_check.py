"""A model whose mass matrix is singular is rejected when it is built (sap_common.mass_check).

Structural rule: a joint with DOFs needs mass in its composite (child plus welded bodies) or
armature on each DOF; otherwise the tree's M + armature is checked at joint_q_init.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import random_models

import sap_gpu
import sap_ref
from sap_common import ModelBuilder, SapModel, spatial
from sap_common.builder import solid_box_inertia, solid_sphere_inertia
from sap_common.mass_check import composite_masses, mass_matrix_at
from sap_common.state import StepStatus
from sap_ref.dynamics import mass_matrix


def _free_body(mass, inertia, **joint):
    b = ModelBuilder()
    body = b.add_body(mass=mass, inertia=inertia, name="ball")
    b.add_joint_free(-1, body, name="float", **joint)
    return b


@pytest.mark.parametrize("inertia", [np.eye(3) * 0.01, np.zeros((3, 3))], ids=["inertia>0", "inertia=0"])
def test_a_massless_free_body_is_rejected_at_finalize_naming_body_and_joint(inertia):
    with pytest.raises(ValueError, match=r"body_mass\[0\] \(ball\): the mass matrix is singular — joint\(s\) "
                                         r"'float' \(FREE, DOFs 0:6\) move only massless bodies"):
        _free_body(0.0, inertia).finalize()


def test_direct_construction_and_replicate_run_the_same_check():
    good = _free_body(1.0, np.eye(3)).finalize()
    fields = {f: getattr(good, f) for f in SapModel.__dataclass_fields__ if SapModel.__dataclass_fields__[f].init}
    fields["body_mass"] = np.zeros(1)
    with pytest.raises(ValueError, match=r"the mass matrix is singular"):
        SapModel(**fields)
    assert good.replicate(3).num_worlds == 3


def test_armature_on_every_dof_makes_a_massless_body_fine():
    m = _free_body(0.0, np.zeros((3, 3)), armature=0.1).finalize()
    assert np.all(np.linalg.eigvalsh(mass_matrix_at(m, m.joint_q_init)) > 0)


def _chain(first_mass, second_axis=(0.0, 1.0, 0.0), second_offset=(0.0, 0.0, -0.5), kind="revolute"):
    """world —revolute z→ link (massless or not) —revolute/prismatic→ bob (1 kg, inertia > 0)."""
    b = ModelBuilder()
    inertia = np.zeros((3, 3)) if first_mass == 0.0 else solid_sphere_inertia(first_mass, 0.05)
    link = b.add_body(first_mass, inertia=inertia, name="link")
    bob = b.add_body(1.0, com=(0.0, 0.0, -0.3), inertia=solid_box_inertia(1.0, 0.05, 0.05, 0.05), name="bob")
    b.add_joint_revolute(-1, link, spatial.transform((0, 0, 2.0)), axis=(0, 0, 1), name="yaw")
    add = b.add_joint_revolute if kind == "revolute" else b.add_joint_prismatic
    add(link, bob, spatial.transform(second_offset), axis=second_axis, name="second")
    return b


def test_a_massless_link_whose_massive_child_follows_every_dof_is_fine_and_steps():
    model = _chain(0.0).replicate(2).finalize()  # yaw about z, then pitch about y at an offset
    assert composite_masses(model).tolist() == [0.0, 1.0]
    M = mass_matrix_at(model, model.joint_q_init)
    np.testing.assert_allclose(M, mass_matrix(model, model.joint_q_init), rtol=1e-13, atol=1e-15)
    assert np.linalg.eigvalsh(M)[0] > 1e-6
    for package in (sap_ref, sap_gpu):
        solver = package.SolverSAP(model, max_rigid_contact=0, device="cpu")
        state = package.to_device(model.state(), "cpu")
        state_host = package.to_host(state)
        state_host.joint_qd[:] = [[1.0, 2.0], [-0.5, 0.3]]
        state = package.to_device(state_host, "cpu")
        solver.step(state, state, package.to_device(model.control(), "cpu"), None, 1e-3)
        assert np.all(solver.diagnostics()["status"] == StepStatus.CONVERGED), package.__name__


def test_a_massless_link_on_a_hinge_coaxial_with_its_childs_is_rejected():
    """Yaw about z, then the child's hinge about z through the same axis: the massless link's own
    rotation relative to the bob moves no mass."""
    with pytest.raises(ValueError, match=r"body_mass\[0\] \(link\): the mass matrix is singular — joint\(s\) "
                                         r"'yaw' \(REVOLUTE, DOFs 0:1\)"):
        _chain(0.0, second_axis=(0.0, 0.0, 1.0), second_offset=(0.0, 0.0, 0.0)).finalize()
    _chain(0.5, second_axis=(0.0, 0.0, 1.0), second_offset=(0.0, 0.0, 0.0)).finalize()  # with mass: fine


def test_a_prismatic_joint_driving_a_massless_leaf_is_rejected():
    b = ModelBuilder()
    cart = b.add_body(2.0, inertia=solid_box_inertia(2.0, 0.1, 0.1, 0.1), name="cart")
    tip = b.add_body(0.0, inertia=np.eye(3) * 1e-3, name="tip")  # rotational inertia, no mass
    b.add_joint_prismatic(-1, cart, axis=(1, 0, 0), name="rail")
    b.add_joint_prismatic(cart, tip, axis=(0, 0, 1), name="slider")
    with pytest.raises(ValueError, match=r"body_mass\[1\] \(tip\): the mass matrix is singular — joint\(s\) "
                                         r"'slider' \(PRISMATIC, DOFs 1:2\)"):
        b.finalize()


def test_a_massless_body_welded_to_a_massive_one_is_fine():
    b = ModelBuilder()
    frame = b.add_body(0.0, inertia=np.zeros((3, 3)), name="frame")
    payload = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1), name="payload")
    b.add_joint_free(-1, frame, name="float")
    b.add_joint_fixed(frame, payload, spatial.transform((0.2, 0, 0)), name="weld")
    m = b.finalize()
    assert composite_masses(m).tolist() == [1.0, 1.0]
    assert np.linalg.eigvalsh(mass_matrix_at(m, m.joint_q_init))[0] > 0


@settings(max_examples=25)
@given(random_models())
def test_the_jacobian_form_equals_crba_on_random_trees(model_and_state):
    """The numerical part of the check evaluates M from body Jacobians: it must be CRBA's M."""
    model, q, _ = model_and_state
    M = mass_matrix(model, q)
    np.testing.assert_allclose(mass_matrix_at(model, q), M, rtol=0, atol=1e-12 * max(1.0, np.abs(M).max()))
