"""sap_common.collision_rules: one configuration governs collision and solver.

A collision pipeline combines the shapes' materials with its configuration's fallbacks (a shape
that sets no μ gets ``fallback_mu``). A pipeline built without the solver's configuration would
silently combine with the defaults, so it stamps the contacts it fills and both solvers refuse
contacts stamped with another configuration's fallbacks, naming the knob.
"""

import numpy as np
import pytest

import sap_gpu
import sap_ref
from sap_common.builder import ModelBuilder, solid_box_inertia
from sap_common.collision_rules import MaterialFallbacks
from sap_common.config import SapConfig

SPEED = 1.0  # [m/s] the box's initial sliding speed
STEPS, DT = 300, 1e-3  # 0.3 s
# [m] Frictionless: the box keeps its speed, x = SPEED·t up to the slight sink of a compliant
# contact (no friction to slow it); with μ = 0.5 it would stop after v²/(2μg) = 0.10 m.
FRICTIONLESS_TOL = 1e-3


def _sliding_box():
    """A 0.1 m box on the ground sliding along x; neither shape sets μ (both take fallback_mu)."""
    b = ModelBuilder()
    b.add_ground_plane()
    box = b.add_body(1.0, inertia=solid_box_inertia(1.0, 0.05, 0.05, 0.05))
    b.add_joint_free(-1, box, q0=(0, 0, 0.05, 0, 0, 0, 1))
    b.add_shape_box(box, None, 0.05, 0.05, 0.05)
    model = b.finalize()
    state = model.state()
    state.joint_qd[0, 0] = SPEED  # public order: COM linear velocity first
    return model, state


BACKENDS = {"ref": (sap_ref, {}), "gpu": (sap_gpu, None)}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_pipeline_with_another_configuration_is_refused_at_the_first_step(backend, device):
    module, kw = BACKENDS[backend]
    kw = {"device": device} if kw is None else kw
    model, host = _sliding_box()
    solver = module.SolverSAP(model, max_rigid_contact=8, fallback_mu=0.0, **kw)
    silent = module.CollisionPipeline(model, 8, **kw)  # no config: SapConfig()'s fallbacks (μ 0.5)
    state, control = module.to_device(host, *kw.values()), module.to_device(model.control(), *kw.values())
    contacts = silent.contacts()
    silent.collide(state, contacts)
    assert contacts.materials == MaterialFallbacks.of(SapConfig())
    with pytest.raises(ValueError, match=r"contacts: made by a CollisionPipeline whose configuration differs from "
                                         r"the solver's: fallback_mu 0.5 \(solver: 0.0\); build the pipeline with "
                                         r"the solver's configuration"):
        solver.step(state, state, control, contacts, DT)
    # The stamp travels with the contacts' copies.
    moved = module.to_host(contacts)
    assert moved.materials == contacts.materials and moved.copy().materials == contacts.materials


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_solvers_configuration_makes_the_box_frictionless(backend, device):
    module, kw = BACKENDS[backend]
    kw = {"device": device} if kw is None else kw
    model, host = _sliding_box()
    solver = module.SolverSAP(model, max_rigid_contact=8, fallback_mu=0.0, **kw)
    pipeline = module.CollisionPipeline(model, 8, solver.config, **kw)
    state, control = module.to_device(host, *kw.values()), module.to_device(model.control(), *kw.values())
    contacts = pipeline.contacts()
    for _ in range(STEPS):
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, DT)
    x = float(np.asarray(module.to_host(state).joint_q)[0, 0])
    assert x == pytest.approx(SPEED * STEPS * DT, abs=FRICTIONLESS_TOL)


def test_contacts_filled_by_other_means_are_not_checked():
    model, host = _sliding_box()
    solver = sap_ref.SolverSAP(model, max_rigid_contact=8, fallback_mu=0.0)
    contacts = sap_ref.contacts(model.num_worlds, 8)
    assert getattr(contacts, "materials", None) is None
    solver.step(host, host, model.control(), contacts, DT)  # no stamp: nothing to compare
