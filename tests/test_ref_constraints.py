"""sap_ref.constraints: the friction cone's three regions, limits and drives.

docs/formulation.md § Friction cone, Limits, Drives.
"""

import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from sap_common.builder import ModelBuilder
from sap_ref.constraints import (
    NO_CONTACT,
    SLIDING,
    STICTION,
    DriveConstraints,
    drive_terms,
    friction_cone,
    limit_constraints,
    limit_terms,
)

# Central differences with a relative step 1e-6 on costs of O(1): the rounding noise of ℓ
# (ε·|ℓ|/h) bounds the agreement at about 1e-6 relative (seen: 3e-6 in the exactly consistent
# stiction region), so 3e-5 leaves margin without hiding a wrong formula (errors are O(1)).
FD_RTOL = 3e-5


def cone_inputs():
    """One random contact: R (near-rigid ratios like the solver's), v̂, μ and vc."""
    pos = st.floats(1e-3, 1e2)
    return st.tuples(pos, st.floats(1e-4, 1e-1), st.floats(0.0, 2.0), st.floats(-1, 1),
                     st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3), st.floats(-3, 0)).map(
        lambda t: (np.array([[t[1] * t[0], t[1] * t[0], t[0]]]), np.array([[0.0, 0.0, t[3]]]), np.array([t[2]]),
                   np.array([t[4]]) * 10 ** t[5]))


def _fd(f, x, h):
    out = []
    for i in range(x.shape[-1]):
        e = np.zeros_like(x)
        e[..., i] = h
        out.append((f(x + e) - f(x - e)) / (2 * h))
    return np.stack(out, -1)


@settings(max_examples=300)
@given(cone_inputs())
def test_cone_impulse_and_hessian_are_derivatives(inputs):
    R, v_hat, mu, vc = inputs
    gamma, G, ell, mode = friction_cone(vc, R, v_hat, mu)
    h = 1e-6 * max(1e-4, np.abs(vc).max())
    modes = [friction_cone(vc + d, R, v_hat, mu)[3][0] for d in (np.eye(3) * h)] + \
            [friction_cone(vc - d, R, v_hat, mu)[3][0] for d in (np.eye(3) * h)]
    if any(m != mode[0] for m in modes):
        assume(False)  # a region border within h: derivatives are one-sided there (tested below)
    y_t = ((v_hat - vc) / R)[0, :2]
    if mode[0] == SLIDING and np.linalg.norm(y_t) < 1e3 * 1e-7:
        assume(False)  # |y_t| ~ soft-norm ε: Drake's ℓ and γ differ by O(ε²/|y_t|²) there by design
    event(["stiction", "sliding", "no contact"][mode[0]])
    grad = -_fd(lambda x: friction_cone(x, R, v_hat, mu)[2], vc, h)[0]
    scale = max(np.abs(gamma).max(), 1e-12)
    np.testing.assert_allclose(grad, gamma[0], atol=FD_RTOL * scale)
    dgamma = -_fd(lambda x: friction_cone(x, R, v_hat, mu)[0], vc, h)[0]
    np.testing.assert_allclose(dgamma, G[0], atol=FD_RTOL * max(np.abs(G).max(), 1e-12))
    np.testing.assert_allclose(G[0], G[0].T, atol=1e-12 * max(np.abs(G).max(), 1e-12))  # μ̂/R_t = μ/R_n
    assert np.linalg.eigvalsh(0.5 * (G[0] + G[0].T))[0] >= -1e-9 * max(np.abs(G).max(), 1.0)
    assert ell[0] == pytest.approx(0.5 * gamma[0] @ (R[0] * gamma[0]))


def test_three_regions_are_hit():
    R = np.array([[1e-3, 1e-3, 1.0]] * 3)
    v_hat = np.zeros((3, 3))
    mu = np.full(3, 0.5)
    # y = (v̂ − vc)/R: stiction |y_t| ≤ μ y_n; sliding large y_t; no contact y_n < 0 (separating).
    vc = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, -1.0], [0.0, 0.0, 1.0]])
    gamma, G, _, mode = friction_cone(vc, R, v_hat, mu)
    assert mode.tolist() == [STICTION, SLIDING, NO_CONTACT]
    np.testing.assert_allclose(gamma[0], [0, 0, 1.0], atol=1e-12)
    assert np.linalg.norm(gamma[1, :2]) == pytest.approx(0.5 * gamma[1, 2], rel=1e-9)  # on the cone
    assert gamma[1, 0] > 0  # friction opposes the relative sliding velocity
    assert not gamma[2].any() and not G[2].any()


@pytest.mark.parametrize("mu", [0.0, 0.3, 1.0])
def test_projection_is_continuous_across_the_borders(mu):
    R = np.array([[2e-3, 2e-3, 0.7]])
    v_hat = np.array([[0, 0, 0.1]])
    # Sweep the tangential velocity through stiction → sliding and the normal one through
    # sliding → no contact; γ and ℓ must not jump.
    seen = set()
    for direction in (np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0]), np.array([0.6, -0.8, 0.3])):
        ts = np.linspace(-2, 2, 40001)
        vc = ts[:, None] * direction[None] - np.array([0.0, 0.0, 0.05])
        g, _, ell, mode = friction_cone(vc, np.repeat(R, len(ts), 0), np.repeat(v_hat, len(ts), 0),
                                        np.full(len(ts), mu))
        step = ts[1] - ts[0]
        jumps = np.abs(np.diff(g, axis=0)).max(axis=1)
        # Lipschitz with constant ‖G‖ ≤ 1/min(R): a jump would be O(|γ|), not O(step/R).
        assert jumps.max() <= 2 * step / R.min() * np.linalg.norm(direction)
        assert np.abs(np.diff(ell)).max() <= 2 * step * np.abs(g).max() * 2
        seen |= set(mode.tolist())
    # With μ = 0 there is no stiction region (|y_t| ≤ 0 never holds with the soft norm).
    assert seen == ({SLIDING, NO_CONTACT} if mu == 0.0 else {STICTION, SLIDING, NO_CONTACT})


def test_zero_friction_never_divides():
    R = np.array([[1e-3, 1e-3, 1.0]])
    with np.errstate(all="raise"):
        g, G, ell, mode = friction_cone(np.array([[0.3, 0.0, -1.0]]), R, np.zeros((1, 3)), np.array([0.0]))
    assert mode[0] == SLIDING and g[0, :2].tolist() == [0, 0] and g[0, 2] > 0


@settings(max_examples=100)
@given(st.floats(-2, 2), st.floats(1e-4, 1.0), st.floats(-1, 1))
def test_limit_terms_are_derivatives(vc, R, v_hat):
    vc, R, v_hat = np.array([vc]), np.array([R]), np.array([v_hat])
    gamma, G, ell = limit_terms(vc, R, v_hat)
    assert gamma[0] >= 0.0
    if abs(v_hat[0] - vc[0]) > 1e-4:  # away from the kink
        h = 1e-7
        fd = -(limit_terms(vc + h, R, v_hat)[2] - limit_terms(vc - h, R, v_hat)[2]) / (2 * h)
        assert fd[0] == pytest.approx(gamma[0], rel=FD_RTOL, abs=1e-6)
        fdG = -(limit_terms(vc + h, R, v_hat)[0] - limit_terms(vc - h, R, v_hat)[0]) / (2 * h)
        assert fdG[0] == pytest.approx(G[0], rel=FD_RTOL, abs=1e-6)


def _drive(effort=np.inf, Kp=400.0, Kd=40.0):
    return DriveConstraints(dof=np.array([0]), J=np.ones((1, 1)), q0=np.array([0.1]), q_target=np.array([0.5]),
                            v_target=np.array([0.0]), u0=np.array([2.0]), Kp=np.array([Kp]), Kd=np.array([Kd]),
                            effort=np.array([effort]), h=0.01)


@pytest.mark.parametrize("effort", [np.inf, 60.0, 5.0])
def test_drive_terms(effort):
    d = _drive(effort)
    v = np.linspace(-3, 3, 61)
    for x in v:
        vc = np.array([x])
        gamma, G, ell = drive_terms(vc, d)
        y = -400.0 * (0.1 + 0.01 * x - 0.5) - 40.0 * x + 2.0  # the PD law with feed-forward u₀ = 2
        assert gamma[0] == pytest.approx(0.01 * np.clip(y, -effort, effort))
        h = 1e-6
        fd = -(drive_terms(vc + h, d)[2] - drive_terms(vc - h, d)[2]) / (2 * h)
        assert fd[0] == pytest.approx(gamma[0], rel=1e-6, abs=1e-9)
        if abs(abs(y) - effort) > 1e-3:
            assert G[0] == (0.01 * (0.01 * 400 + 40) if abs(y) <= effort else 0.0)


def test_limit_window():
    """A limit enters only within q₀ ± 2h·max(|v₀|, |v*|); lower then upper rows (docs/formulation.md § Limits)."""
    b = ModelBuilder()
    b.add_joint_revolute(-1, b.add_body(1.0, com=(0, 0, -0.5), inertia=(0.1, 0.1, 0.01)), axis=(0, 1, 0),
                         limit_lower=-0.5, limit_upper=0.5, limit_ke=1e12, limit_kd=1e9)
    m = b.finalize()
    A, h = np.array([[0.35]]), 1e-3
    far = limit_constraints(m, [0.0], [1.0], [1.0], A, h)
    assert far.J.shape == (0, 1)
    near_low = limit_constraints(m, [-0.4985], [-1.0], [-1.0], A, h)
    assert near_low.side.tolist() == [-1] and near_low.J.tolist() == [[1.0]]
    assert near_low.g0[0] == pytest.approx(0.0015) and near_low.v_hat[0] == pytest.approx(-0.0015 / (2 * h))
    both = limit_constraints(m, [0.0], [300.0], [0.0], A, h)
    assert both.side.tolist() == [-1, 1] and both.J[:, 0].tolist() == [1.0, -1.0]
    # Near-rigid: R = β² w/(4π²) with w = 1/A (k = 1e12 makes the compliant R negligible).
    assert both.R[0] == pytest.approx(0.01 / (4 * np.pi**2) / 0.35)
    violated = limit_constraints(m, [0.6], [0.0], [0.0], A, h)
    assert violated.side.tolist() == [1] and violated.g0[0] == pytest.approx(-0.1)
