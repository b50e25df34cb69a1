"""Per-world parameters in sap_ref (sap_ref.WorldParameters, sap_common.parameters).

World ``w`` of a batch stepped with ``parameters=`` equals, bit for bit, the one-world model
``model.replace(num_worlds=1, **params.world_fields(w))`` stepped alone (a random draw of many
fields, on a contact scene with limits and drives and on a closed linkage); every rule of
``set`` refuses a bad value with a ``ValueError`` naming the field and the world, the model
refuses the same value, and nothing is written.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sap_ref
from sap_common import scenes
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.parameters import PARAMETER_FIELDS, check_worlds
from sap_common.state import SapControl
from sap_common.time_step import LargeTimeStepWarning
from sap_ref.parameters import world_slice

W = 3  # worlds per batch
STEPS = 25  # steps per example
# The acceptance size of a batch against its worlds alone, under -m slow: 16 worlds, 200 steps.
SLOW_W, SLOW_STEPS = 16, 200

# ----------------------------------------------------------------------------- batch = one world alone


def _floats(lo, hi, n, unset=False):
    """``n`` floats in [lo, hi] (NaN allowed with ``unset``: a material left to the fallback)."""
    x = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
    return st.lists(st.one_of(st.just(math.nan), x) if unset else x, min_size=n, max_size=n).map(np.array)


def _apart(n):
    """Added to the drawn gravity (set in every world): the worlds differ even where every draw is alike."""
    return np.outer(np.arange(n), [0.0, 0.0, 0.5])


def _per_world(draw, strategy, n):
    return np.stack([draw(strategy) for _ in range(n)])


@st.composite
def _arm_values(draw, m):
    """Per-world values of arm_push_block (DOFs 0, 1: the revolute shoulder and elbow; 2:8 the block's
    FREE joint, which takes no drive and no limit)."""
    n = m.num_worlds
    pw = lambda strategy: _per_world(draw, strategy, n)  # noqa: E731
    B, S, nv = m.body_count, m.shape_count, m.joint_dof_count
    scale = pw(_floats(0.5, 2.0, B))
    v = {"body_mass": m.body_mass * scale,
         "body_inertia": m.body_inertia * (scale * pw(_floats(0.8, 1.25, B)))[..., None, None],
         "body_com": m.body_com + pw(_floats(-0.02, 0.02, 3 * B)).reshape(n, B, 3)}
    for name, lo, hi in (("joint_armature", 1e-3, 0.05), ("joint_damping", 0.0, 0.5), ("joint_target_ke", 50.0, 400.0),
                         ("joint_target_kd", 5.0, 40.0), ("joint_effort_limit", 2.0, 100.0)):
        v[name] = np.broadcast_to(getattr(m, name), (n, nv)).copy()
        v[name][:, :2] = pw(_floats(lo, hi, 2))
    v["joint_limit_upper"] = np.broadcast_to(m.joint_limit_upper, (n, nv)).copy()
    v["joint_limit_upper"][:, 0] = pw(_floats(-0.29, math.pi, 1))[:, 0]  # the shoulder starts at -0.3
    v["joint_limit_lower"] = np.broadcast_to(m.joint_limit_lower, (n, nv)).copy()
    v["joint_limit_lower"][:, 1] = pw(_floats(-0.05, -1e-3, 1))[:, 0]  # the elbow starts at 0
    v["joint_limit_ke"] = 10.0 ** pw(_floats(5.0, 12.0, nv))
    v["joint_limit_kd"] = v["joint_limit_ke"] * pw(_floats(0.0, 1e-2, nv))
    v["shape_material_mu"] = pw(_floats(0.1, 1.0, S, unset=True))
    v["shape_material_ke"] = 10.0 ** pw(_floats(4.0, 7.0, S, unset=True))
    v["shape_material_tau"] = pw(_floats(0.0, 0.05, S, unset=True))
    v["shape_material_hcd"] = pw(_floats(0.0, 100.0, S, unset=True))
    v["shape_margin"] = pw(_floats(0.0, 5e-3, S))
    v["gravity"] = pw(_floats(-1.0, 1.0, 3)) + [0.0, 0.0, -draw(st.floats(6.0, 12.0))] - _apart(n)
    return v


@st.composite
def _fourbar_values(draw, m):
    """Per-world values of fourbar (three revolute DOFs without drives, the rocker's (DOF 2) lower limit near
    its start)."""
    n = m.num_worlds
    pw = lambda strategy: _per_world(draw, strategy, n)  # noqa: E731
    B, nv = m.body_count, m.joint_dof_count
    scale = pw(_floats(0.5, 2.0, B))
    v = {"body_mass": m.body_mass * scale, "body_inertia": m.body_inertia * scale[..., None, None],
         "body_com": m.body_com + pw(_floats(-0.02, 0.02, 3 * B)).reshape(n, B, 3)}
    for name, lo, hi in (("joint_armature", 0.0, 0.01), ("joint_damping", 0.0, 0.2), ("joint_effort_limit", 1.0, 50.0)):
        v[name] = pw(_floats(lo, hi, nv))
    v["joint_limit_lower"] = np.broadcast_to(m.joint_limit_lower, (n, nv)).copy()
    v["joint_limit_lower"][:, 2] = pw(_floats(-1.25, -1.195, 1))[:, 0]  # the rocker starts at -1.19
    v["joint_limit_ke"] = 10.0 ** pw(_floats(6.0, 12.0, nv))
    v["joint_limit_kd"] = v["joint_limit_ke"] * pw(_floats(0.0, 4e-3, nv))
    v["gravity"] = pw(_floats(-2.0, 2.0, 3)) + [0.0, 0.0, -draw(st.floats(6.0, 12.0))] - _apart(n)
    return v


_SCENE_NAMES = ("arm_push_block", "fourbar")
_SCENES = {name: scenes.get(name, num_worlds=W) for name in _SCENE_NAMES}
_VALUES = {"arm_push_block": _arm_values, "fourbar": _fourbar_values}


def _assert_world_equal(batch, w, one, what):
    """Every array field of world ``w`` of ``batch`` equals the one-world ``one``'s, bit for bit."""
    for f in dataclasses.fields(batch):
        a = getattr(batch, f.name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a[w], getattr(one, f.name)[0], equal_nan=True), f"{what}.{f.name}, world {w}"


def _one_world_control(control, w) -> SapControl:
    """World ``w``'s control, as the caller of a one-world solver would build it."""
    return SapControl(**{f: np.array(getattr(control, f)[w:w + 1]) for f in
                         ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act")},
                      joint_f_order=control.joint_f_order)


@pytest.mark.parametrize("scene_name", sorted(_SCENES))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_each_world_steps_as_its_one_world_model_bit_for_bit(scene_name, data):
    _batch_against_worlds_alone(_SCENES[scene_name], scene_name, data, STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("scene_name", _SCENE_NAMES)
@settings(max_examples=1, deadline=None)
@given(data=st.data())
def test_sixteen_worlds_step_as_their_one_world_models_for_200_steps(scene_name, data):
    _batch_against_worlds_alone(scenes.get(scene_name, num_worlds=SLOW_W), scene_name, data, SLOW_STEPS)


def _batch_against_worlds_alone(scene, scene_name, data, steps):
    """Every world of a batch with drawn per-world values steps bit for bit as a one-world solver and
    pipeline of its own model, every step: state, contacts, status, iterations, diagnostics."""
    W = scene.sap_model.num_worlds
    model, C, dt = scene.sap_model, scene.max_rigid_contact, scene.dt
    values = data.draw(_VALUES[scene_name](model), label="values")
    masks = {}
    approximation = data.draw(st.sampled_from(["sap", "lagged", "similar"]), label="approximation")
    params = sap_ref.WorldParameters(model)
    for name, v in values.items():
        masks[name] = np.ones(W, bool) if name == "gravity" else np.array(
            data.draw(st.lists(st.booleans(), min_size=W, max_size=W), label=f"mask {name}"))
        params.set(name, v, world_mask=masks[name])
    for w in range(W):  # what set() stored: the drawn value in the masked worlds, the model's elsewhere
        fields = params.world_fields(w)
        assert sorted(fields) == sorted(PARAMETER_FIELDS)
        for name, x in fields.items():
            want = values[name][w] if name in values and masks[name][w] else getattr(model, name)
            assert np.array_equal(x, want, equal_nan=True), (name, w)

    solver = sap_ref.SolverSAP(model, max_rigid_contact=C, parameters=params,
                               discrete_contact_approximation=approximation)
    pipeline = sap_ref.CollisionPipeline(model, C, solver.config, parameters=params)
    state, control, contacts = scene.state.copy(), scene.control, pipeline.contacts()
    alone = []
    for w in range(W):
        one_model = model.replace(num_worlds=1, **params.world_fields(w))
        one_solver = sap_ref.SolverSAP(one_model, max_rigid_contact=C, discrete_contact_approximation=approximation)
        one_pipeline = sap_ref.CollisionPipeline(one_model, C, one_solver.config)
        alone.append((one_solver, one_pipeline, one_model.state(), _one_world_control(control, w),
                      one_pipeline.contacts()))
        _assert_world_equal(state, w, alone[w][2], "initial state")
    touched = np.zeros(W, bool)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeTimeStepWarning)
        for k in range(steps):
            pipeline.collide(state, contacts)
            touched |= contacts.count > 0
            solver.step(state, state, control, contacts, dt)
            for w, (one_solver, one_pipeline, one_state, one_control, one_contacts) in enumerate(alone):
                one_pipeline.collide(one_state, one_contacts)
                one_solver.step(one_state, one_state, one_control, one_contacts, dt)
                _assert_world_equal(contacts, w, one_contacts, f"step {k}: contacts")
                _assert_world_equal(state, w, one_state, f"step {k}: state")
                assert solver.last_status[w] == one_solver.last_status[0]
                assert solver.last_newton_iterations[w] == one_solver.last_newton_iterations[0]
                assert pipeline.last_status[w] == one_pipeline.last_status[0]
    for w, (one_solver, *_) in enumerate(alone):  # the last step's diagnostics and observables
        for name, x in solver.diagnostics().items():
            assert np.array_equal(x[w], one_solver.diagnostics()[name][0]), (name, w)
        for name, x in solver.read_observables().items():
            assert np.array_equal(x[w], one_solver.read_observables()[name][0]), (name, w)
        assert np.array_equal(solver.last_results[w].q1, one_solver.last_results[0].q1)
    assert solver.statistics()["steps"].tolist() == [steps] * W
    # The draws changed the dynamics: the worlds did not all end alike.
    assert any(not np.array_equal(state.joint_q[0], state.joint_q[w]) for w in range(1, W))
    if scene_name == "arm_push_block":
        assert np.all(touched)  # every world had contacts (the block on the ground)


# ----------------------------------------------------------------------------- bad values


ARM = scenes.get("arm_push_block", num_worlds=W).sap_model
BALL = scenes.get("ball_joint_pendulum", num_worlds=W).sap_model
NAN, INF = math.nan, math.inf


def _snapshot(params):
    return {name: params.get(name) for name in PARAMETER_FIELDS}, params.version


def _assert_unchanged(params, before):
    values, version = before
    for name in PARAMETER_FIELDS:
        assert np.array_equal(params.get(name), values[name], equal_nan=True), name
    assert np.array_equal(params.version, version)


def _bad(model, name, w, index, value):
    """Every world's current value of ``name`` with element ``index`` of world ``w`` set to ``value``."""
    v = np.broadcast_to(np.asarray(getattr(model, name), dtype=np.float64),
                        (model.num_worlds, *np.shape(getattr(model, name)))).copy()
    v[(w, *index)] = value
    return v


# (model, field, world, element index, value, a fragment of the rule's message)
RULES = [
    (ARM, "body_mass", 1, (0,), NAN, "finite and >= 0"),
    (ARM, "body_mass", 2, (1,), -1.0, "finite and >= 0"),
    (ARM, "body_mass", 1, (2,), 0.0, "mass matrix is singular"),  # a FREE block of mass 0, no armature
    (ARM, "body_com", 0, (1, 2), INF, "finite"),
    (ARM, "body_inertia", 2, (0, 0, 0), NAN, "finite"),
    (ARM, "body_inertia", 1, (1,), np.diag([1e-3, 1e-3, -1e-4]), "positive definite"),
    (ARM, "body_inertia", 1, (1, 0, 1), 1e-3, "symmetric"),
    (ARM, "body_inertia", 2, (2,), np.diag([1e-3, 1e-3, 3e-3]), "triangle inequality"),
    (ARM, "joint_armature", 1, (0,), -0.1, ">= 0"),
    (ARM, "joint_damping", 2, (1,), -1.0, ">= 0"),
    (ARM, "joint_damping", 0, (0,), NAN, ">= 0"),
    (ARM, "joint_target_ke", 1, (0,), -5.0, ">= 0"),
    (ARM, "joint_target_kd", 2, (1,), INF, ">= 0"),
    (ARM, "joint_limit_ke", 1, (1,), -1.0, ">= 0"),
    (ARM, "joint_limit_kd", 2, (0,), -1.0, ">= 0"),
    (ARM, "joint_effort_limit", 1, (0,), 0.0, "> 0"),
    (ARM, "joint_effort_limit", 2, (1,), NAN, "> 0"),
    (ARM, "joint_limit_lower", 2, (1,), 3.0, "<= joint_limit_upper"),  # above the elbow's upper limit 2.5
    (ARM, "joint_limit_upper", 1, (0,), -4.0, "<= joint_limit_upper"),  # below the shoulder's lower limit -π
    (ARM, "joint_limit_lower", 1, (0,), NAN, "NaN"),
    (ARM, "joint_limit_lower", 2, (4,), -1.0, "FREE joints take no position limits"),
    (ARM, "joint_limit_upper", 1, (2,), 1.0, "FREE joints take no position limits"),
    (BALL, "joint_limit_upper", 1, (1,), 1.0, "BALL joints take no position limits"),
    (ARM, "joint_target_ke", 2, (3,), 1.0, "drives act on PRISMATIC, REVOLUTE and D6 DOFs only"),
    (ARM, "joint_target_kd", 1, (5,), 1.0, "FREE joint's"),
    (BALL, "joint_target_ke", 2, (0,), 1.0, "BALL joint's"),
    (ARM, "shape_material_mu", 1, (3,), -0.1, ">= 0"),
    (ARM, "shape_material_mu", 2, (0,), INF, ">= 0"),
    (ARM, "shape_material_ke", 1, (0,), 0.0, "> 0 N/m"),
    (ARM, "shape_material_ke", 2, (3,), -1e5, "> 0 N/m"),
    (ARM, "shape_material_tau", 1, (1,), -1e-3, ">= 0 s"),
    (ARM, "shape_material_tau", 2, (2,), INF, ">= 0 s"),
    (ARM, "shape_material_hcd", 1, (3,), -1.0, ">= 0 s/m"),
    (ARM, "shape_margin", 2, (1,), -1e-3, ">= 0 m"),
    (ARM, "shape_margin", 1, (0,), NAN, ">= 0 m"),
    (ARM, "gravity", 2, (1,), NAN, "finite"),
    (ARM, "gravity", 1, (2,), -INF, "finite"),
]


@pytest.mark.parametrize("model, name, w, index, value, rule", RULES,
                         ids=[f"{r[1]}-w{r[2]}-{r[5][:20]}" for r in RULES])
def test_set_refuses_each_rule_naming_field_and_world_and_writes_nothing(model, name, w, index, value, rule):
    params = sap_ref.WorldParameters(model)
    before = _snapshot(params)
    bad = _bad(model, name, w, index, value)
    with pytest.raises(ValueError) as e:
        params.set(name, bad)
    msg = str(e.value)
    assert name.split("_lower")[0].split("_upper")[0] in msg and f"world {w}" in msg and rule in msg, msg
    _assert_unchanged(params, before)
    with pytest.raises(ValueError) as e:  # only that world is bad: masking it out writes the others
        params.set(name, bad, world_mask=np.arange(W) == w)
    assert f"world {w}" in str(e.value)
    _assert_unchanged(params, before)
    # The model refuses the same value: the rule is the model's.
    with pytest.raises(ValueError):
        model.replace(num_worlds=1, **{**params.world_fields(w), name: bad[w]})
    # check_worlds itself, on the candidate.
    candidate = {k: params.get(k) for k in PARAMETER_FIELDS}
    candidate[name] = bad
    check_worlds(model, candidate, [k for k in range(W) if k != w], [name])  # the other worlds pass
    with pytest.raises(ValueError, match=f"world {w}"):
        check_worlds(model, candidate, range(W), [name])


FOURBAR = scenes.get("fourbar", num_worlds=W).sap_model

# Which limits and drives exist is the model's in every world (their rows are laid out once): values
# a one-world model accepts, but a world of the batch may not take.
PATTERN = [
    (FOURBAR, "joint_target_ke", 1, (0,), 10.0, "has no drive"),  # a drive the model lacks
    (ARM, "joint_target_kd", 2, (1,), 0.0, None),  # the elbow keeps its drive through ke
    (ARM, "joint_target_ke", 2, (1,), 0.0, None),  # ... and through kd
    (ARM, "joint_limit_lower", 1, (0,), -INF, "is finite"),  # a limit removed
    (FOURBAR, "joint_limit_upper", 2, (0,), 1.0, "is not finite"),  # a limit added
    (ARM, "joint_limit_ke", 1, (1,), 0.0, "is > 0"),  # a limit switched off
]


@pytest.mark.parametrize("model, name, w, index, value, rule", PATTERN,
                         ids=[f"{r[1]}-w{r[2]}-{r[5]}" for r in PATTERN])
def test_set_refuses_adding_or_removing_a_limit_or_drive(model, name, w, index, value, rule):
    params = sap_ref.WorldParameters(model)
    bad = _bad(model, name, w, index, value)
    if rule is None:  # one gain to 0 leaves the drive: accepted; both to 0 remove it
        params.set(name, bad)
        other = "joint_target_ke" if name == "joint_target_kd" else "joint_target_kd"
        name, bad, rule = other, _bad(model, other, w, index, 0.0), "has a drive"
    before = _snapshot(params)
    with pytest.raises(ValueError) as e:
        params.set(name, bad)
    msg = str(e.value)
    assert name.split("_target")[0].split("_lower")[0].split("_upper")[0] in msg and f"world {w}" in msg, msg
    assert rule in msg and "new model" in msg, msg
    _assert_unchanged(params, before)
    model.replace(num_worlds=1, **{**params.world_fields(w), name: bad[w]})  # a model of its own may


def test_set_writes_the_other_worlds_when_the_bad_one_is_masked_out():
    params = sap_ref.WorldParameters(ARM)
    bad = _bad(ARM, "body_mass", 1, (0,), -1.0)
    bad[[0, 2], 0] = 3.0
    params.set("body_mass", bad, world_mask=np.array([True, False, True]))
    assert params.get("body_mass")[:, 0].tolist() == [3.0, 1.0, 3.0]
    assert params.version.tolist() == [1, 0, 1]


@pytest.mark.parametrize("name, values, fragment", [
    ("body_mass", np.ones(2), "expected shape (3,)"),
    ("body_mass", np.ones((W + 1, 3)), "expected shape (3,)"),
    ("gravity", np.ones((W, 3, 1)), "expected shape (3,)"),
    ("body_mass", np.ones(3, dtype=np.float32), "float64"),
    ("body_mass", np.ones(3, dtype=np.int64), "float64"),
    ("joint_damping", np.zeros((W, 8), dtype=np.int32), "float64"),
    ("gravity", np.array([0, 0, -9], dtype=np.float32), "float64"),
    ("shape_margin", np.float32(0.0), "float64"),
    ("shape_margin", "thick", "expected"),
    ("body_mass", [[1.0, 2.0], [3.0]], "expected"),
])
def test_set_refuses_wrong_shape_and_dtype_naming_the_field(name, values, fragment):
    params = sap_ref.WorldParameters(ARM)
    before = _snapshot(params)
    with pytest.raises(ValueError, match=f"^{name}: ") as e:
        params.set(name, values)
    assert fragment in str(e.value)
    _assert_unchanged(params, before)


@pytest.mark.parametrize("mask", [np.ones(W - 1, bool), np.ones(W, np.float64), np.ones((W, 1), bool), "all", True])
def test_set_refuses_a_bad_world_mask(mask):
    params = sap_ref.WorldParameters(ARM)
    before = _snapshot(params)
    with pytest.raises(ValueError, match="^world_mask: "):
        params.set("gravity", [0.0, 0.0, -1.0], world_mask=mask)
    _assert_unchanged(params, before)


@pytest.mark.parametrize("name", ["body_name", "joint_axis", "shape_size", "num_worlds", "mass", None])
def test_unknown_names_are_refused(name):
    params = sap_ref.WorldParameters(ARM)
    before = _snapshot(params)
    with pytest.raises(ValueError, match="^name: .*not a per-world parameter"):
        params.set(name, 1.0)
    with pytest.raises(ValueError, match="^name: "):
        params.get(name)
    _assert_unchanged(params, before)


def test_rigid_stiffness_is_refused_once_a_hunt_crossley_solver_reads_the_parameters():
    params = sap_ref.WorldParameters(ARM)
    params.set("shape_material_ke", _bad(ARM, "shape_material_ke", 2, (0,), INF))  # rigid ground: fine under sap
    sap_ref.SolverSAP(ARM, max_rigid_contact=16, parameters=params)
    assert params.forbid_rigid is False
    before = _snapshot(params)
    with pytest.raises(ValueError, match=r"^shape_material_ke\[world 2, shape 0 \(ground\)\]: inf \(rigid\)"):
        sap_ref.SolverSAP(ARM, max_rigid_contact=16, parameters=params, discrete_contact_approximation="lagged")
    assert params.forbid_rigid is False
    _assert_unchanged(params, before)
    for forbid in (lambda: setattr(params, "forbid_rigid", True), params.check_rigid):
        with pytest.raises(ValueError, match=r"^shape_material_ke\[world 2, shape 0 \(ground\)\]"):
            forbid()
        assert params.forbid_rigid is False
    params.set("shape_material_ke", np.full(ARM.shape_count, 1e6))
    sap_ref.SolverSAP(ARM, max_rigid_contact=16, parameters=params, discrete_contact_approximation="similar")
    assert params.forbid_rigid is True
    before = _snapshot(params)
    ke = params.get("shape_material_ke")
    ke[1, 3] = INF
    with pytest.raises(ValueError, match=r"^shape_material_ke\[world 1, shape 3 \(block_shape\)\]: inf \(rigid\)"):
        params.set("shape_material_ke", ke)
    _assert_unchanged(params, before)


def test_world_mask_set_changes_only_those_worlds_and_their_models():
    params = sap_ref.WorldParameters(ARM)
    models = [params.world_model(w) for w in range(W)]
    assert all(params.world_model(w) is models[w] for w in range(W))  # cached
    params.set("gravity", [0.0, 0.0, -3.0], world_mask=np.array([0, 1, 0]))
    assert params.get("gravity").tolist() == [[0, 0, -9.81], [0, 0, -3.0], [0, 0, -9.81]]
    assert params.version.tolist() == [0, 1, 0]
    assert params.world_model(0) is models[0] and params.world_model(2) is models[2]
    assert params.world_model(1) is not models[1] and params.world_model(1).gravity.tolist() == [0, 0, -3.0]
    mu = np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0], [0.5, 0.6, 0.7, 0.8]])
    params.set("shape_material_mu", mu, world_mask=[True, False, True])
    got = params.get("shape_material_mu")
    assert np.array_equal(got[[0, 2]], mu[[0, 2]]) and np.array_equal(got[1], ARM.shape_material_mu, equal_nan=True)
    got[...] = 0.0  # get() is a copy
    assert params.get("shape_material_mu")[0, 0] == 0.1
    params.set("body_mass", ARM.body_mass * 2.0, world_mask=np.zeros(W, bool))  # nothing masked: nothing written
    assert params.version.tolist() == [1, 1, 1]


def test_constructor_and_world_index_are_checked():
    with pytest.raises(ValueError, match="^device"):
        sap_ref.WorldParameters(ARM, device="cuda:0")
    with pytest.raises(ValueError, match="^model: "):
        sap_ref.WorldParameters("arm")
    params = sap_ref.WorldParameters(ARM, device="cpu")
    assert params.num_worlds == W and params.model is ARM and params.forbid_rigid is False
    for w in (-1, W, 1.0, True):
        with pytest.raises(ValueError, match="^w: "):
            params.world_fields(w)


def test_parameters_of_another_model_are_refused():
    other = scenes.get("arm_push_block", num_worlds=W).sap_model  # equal, but another object
    params = sap_ref.WorldParameters(other)
    for bad in (params, {"gravity": np.zeros(3)}):
        with pytest.raises(ValueError, match="^parameters: "):
            sap_ref.SolverSAP(ARM, max_rigid_contact=16, parameters=bad)
        with pytest.raises(ValueError, match="^parameters: "):
            sap_ref.CollisionPipeline(ARM, 16, parameters=bad)


def _arm_batch(params):
    scene = _SCENES["arm_push_block"]
    solver = sap_ref.SolverSAP(scene.sap_model, max_rigid_contact=16, parameters=params)
    pipeline = sap_ref.CollisionPipeline(scene.sap_model, 16, solver.config, parameters=params)
    return scene, solver, pipeline


def test_bad_step_input_raises_before_any_world_is_written():
    params = sap_ref.WorldParameters(_SCENES["arm_push_block"].sap_model)
    params.set("body_mass", _bad(params.model, "body_mass", 1, (2,), 2.0))
    scene, solver, pipeline = _arm_batch(params)
    state, contacts = scene.state.copy(), pipeline.contacts()
    pipeline.collide(state, contacts)
    solver.step(state, state, scene.control, contacts, scene.dt)
    before, status = state.copy(), solver.last_status.copy()
    bad_out = dataclasses.replace(state.copy(), joint_q=state.joint_q[:, :-1].copy())
    for args, match in (((state, bad_out, scene.control, contacts, scene.dt), "^state_out.joint_q"),
                        ((state, state, scene.control, contacts, -1.0), "^dt: "),
                        ((state, state, scene.control, contacts.copy(), scene.dt), None)):
        if match is None:  # a contact index out of range in the last world
            args[3].count[W - 1], args[3].shape0[W - 1, 0] = 1, 99
            match = rf"^contacts.shape0\[{W - 1}\]"
        with pytest.raises(ValueError, match=match):
            solver.step(*args)
        for w in range(W):
            _assert_world_equal(state, w, world_slice(before, w), "state")
        assert np.array_equal(solver.last_status, status)
    with pytest.raises(ValueError, match="^state.body_q"):
        pipeline.collide(dataclasses.replace(state, body_q=state.body_q[:, :1]), contacts)


def test_the_batch_warns_once_for_the_world_with_the_shortest_time_step_bound():
    params = sap_ref.WorldParameters(_SCENES["arm_push_block"].sap_model)
    scene, solver, pipeline = _arm_batch(params)
    state = scene.state.copy()
    dt = 0.01  # below the scene's bound (capsule radius 0.03 m under 9.81 m/s²: 0.078 s)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeTimeStepWarning)
        solver.step(state, state, scene.control, None, dt)
    params.set("gravity", [0.0, 0.0, -981.0], world_mask=np.arange(W) == 1)  # bound 0.0078 s in world 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solver.step(state, state, scene.control, None, dt)
    big = [c for c in caught if issubclass(c.category, LargeTimeStepWarning)]
    assert len(big) == 1 and "steps up to 0.00782 s" in str(big[0].message), [str(c.message) for c in big]
    assert big[0].filename == __file__  # points at the caller of step()


@pytest.mark.parametrize("order", ["public", "sap"])
def test_reset_restores_each_worlds_initial_state_and_clears_its_diagnostics(order):
    # The block starts spinning (ω_z 1 rad/s) and world 2's COM is off its origin: its SAP-order
    # velocity (the origin's) differs from the other worlds'.
    model = _SCENES["arm_push_block"].sap_model.with_initial_state(joint_qd=[0, 0, 0.1, 0, 0, 0, 0, 1.0])
    params = sap_ref.WorldParameters(model)
    com = params.get("body_com")
    com[2, 2] += [0.01, 0.0, 0.0]
    params.set("body_com", com)
    solver = sap_ref.SolverSAP(model, max_rigid_contact=16, parameters=params)
    pipeline = sap_ref.CollisionPipeline(model, 16, solver.config, parameters=params)
    control = _SCENES["arm_push_block"].control
    state, contacts = sap_ref.to_device(model.state()), pipeline.contacts()
    state.joint_qd_order = order
    for _ in range(3):
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, 2e-3)
    moved = state.copy()
    solver.reset(state, np.array([False, True, True]))
    _assert_world_equal(state, 0, world_slice(moved, 0), "state")
    for w in (1, 2):
        want = params.world_model(w).state()
        if order == "sap":
            want.joint_qd = joint_qd_public_to_sap(params.world_model(w), want.joint_q, want.joint_qd)
        _assert_world_equal(state, w, want, "state")
        assert solver.last_newton_iterations[w] == 0 and solver.statistics()["steps"][w] == 0
    assert solver.statistics()["steps"][0] == 3
    if order == "sap":
        assert state.joint_qd[2, 6] == -0.01 and state.joint_qd[1, 6] == 0.0
    pipeline.collide(state, contacts)  # and steps on
    solver.step(state, state, control, contacts, 2e-3)
    assert solver.statistics()["steps"].tolist() == [4, 1, 1]


def test_a_set_between_steps_takes_effect_at_the_next_step():
    params = sap_ref.WorldParameters(_SCENES["arm_push_block"].sap_model)
    scene, solver, pipeline = _arm_batch(params)
    state, contacts = scene.state.copy(), pipeline.contacts()
    for _ in range(3):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
    one = np.arange(W) == 1
    params.set("shape_margin", np.full(params.model.shape_count, 2e-3), world_mask=one)
    params.set("gravity", [0.5, 0.0, -4.0], world_mask=one)
    params.set("joint_target_ke", _bad(params.model, "joint_target_ke", 2, (0,), 900.0))
    start = state.copy()
    pipeline.collide(state, contacts)
    solver.step(state, state, scene.control, contacts, scene.dt)
    for w in range(W):
        one_model = params.model.replace(num_worlds=1, **params.world_fields(w))
        one_solver = sap_ref.SolverSAP(one_model, max_rigid_contact=16)
        one_pipeline = sap_ref.CollisionPipeline(one_model, 16, one_solver.config)
        one_state, one_contacts = world_slice(start, w), one_pipeline.contacts()
        one_pipeline.collide(one_state, one_contacts)
        one_solver.step(one_state, one_state, _one_world_control(scene.control, w), one_contacts, scene.dt)
        _assert_world_equal(contacts, w, one_contacts, "contacts")
        _assert_world_equal(state, w, one_state, "state")
    n = contacts.count
    assert np.all(contacts.margin0[1, :n[1]] == 2e-3) and np.all(contacts.margin0[0, :n[0]] == 0.0)
    assert not np.array_equal(state.joint_q[0], state.joint_q[1])
