"""sap_ref.constraints: the friction cone's three regions, the Hunt–Crossley constraint (lagged and
similar), limits and drives.

docs/formulation.md § Friction cone, Hunt–Crossley contact, Limits, Drives.
"""

import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from sap_common.builder import ModelBuilder
from sap_common.collision_rules import combine_hc_dissipation
from sap_common.config import SapConfig
from sap_common.constants import HC_VELOCITY_GUARD
from sap_ref.constraints import (
    NO_CONTACT,
    SLIDING,
    STICTION,
    DriveConstraints,
    HuntCrossley,
    drive_terms,
    friction_cone,
    hunt_crossley,
    hunt_crossley_antiderivative,
    hunt_crossley_data,
    hunt_crossley_impulse,
    hunt_crossley_impulse_derivative,
    limit_constraints,
    limit_terms,
)

# Central differences with a relative step 1e-6 on costs of O(1): the rounding noise of ℓ
# (ε·|ℓ|/h) bounds the agreement at about 1e-6 relative (seen: 3e-6 in the exactly consistent
# stiction region), so 3e-5 leaves margin without hiding a wrong formula (errors are O(1)).
FD_RTOL = 3e-5
# Sliding: the central-difference step as a fraction of the length R_t·|y_t| over which γ turns
# (its error, O(step²), is then ~1e-6 relative: under FD_RTOL; rounding, ε·|γ|/h, stays far below).
SLIDING_FD_STEP = 1e-3


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
    event(["stiction", "sliding", "no contact"][_check_cone_derivatives(inputs)])


def _check_cone_derivatives(inputs) -> int:
    """γ = −∂ℓ/∂vc and G = −∂γ/∂vc by central differences, G symmetric PSD, ℓ = ½γᵀRγ; returns
    the region (``assume`` rejects a region border or the soft norm's scale within the step)."""
    R, v_hat, mu, vc = inputs
    gamma, G, ell, mode = friction_cone(vc, R, v_hat, mu)
    h = 1e-6 * max(1e-4, np.abs(vc).max())
    y_t = ((v_hat - vc) / R)[0, :2]
    if mode[0] == SLIDING:
        # Sliding, γ turns with the tangential direction of y = R⁻¹(v̂ − vc), over a length
        # R_t·|y_t| of vc: central differences are O((h / (R_t|y_t|))²) off, so the step stays
        # SLIDING_FD_STEP of that length (explore run: R_t|y_t| = 1e-5 against h = 1e-6 gave 0.5 %).
        h = min(h, SLIDING_FD_STEP * R[0, 0] * np.linalg.norm(y_t))
    modes = [friction_cone(vc + d, R, v_hat, mu)[3][0] for d in (np.eye(3) * h)] + \
            [friction_cone(vc - d, R, v_hat, mu)[3][0] for d in (np.eye(3) * h)]
    if any(m != mode[0] for m in modes):
        assume(False)  # a region border within h: derivatives are one-sided there (tested below)
    if mode[0] == SLIDING and np.linalg.norm(y_t) < 1e3 * 1e-7:
        assume(False)  # |y_t| ~ soft-norm ε: Drake's ℓ and γ differ by O(ε²/|y_t|²) there by design
    grad = -_fd(lambda x: friction_cone(x, R, v_hat, mu)[2], vc, h)[0]
    scale = max(np.abs(gamma).max(), 1e-12)
    np.testing.assert_allclose(grad, gamma[0], atol=FD_RTOL * scale)
    dgamma = -_fd(lambda x: friction_cone(x, R, v_hat, mu)[0], vc, h)[0]
    np.testing.assert_allclose(dgamma, G[0], atol=FD_RTOL * max(np.abs(G).max(), 1e-12))
    np.testing.assert_allclose(G[0], G[0].T, atol=1e-12 * max(np.abs(G).max(), 1e-12))  # μ̂/R_t = μ/R_n
    assert np.linalg.eigvalsh(0.5 * (G[0] + G[0].T))[0] >= -1e-9 * max(np.abs(G).max(), 1.0)
    assert ell[0] == pytest.approx(0.5 * gamma[0] @ (R[0] * gamma[0]))
    return int(mode[0])


def test_sliding_with_a_tiny_tangential_scale_is_differentiated_at_its_own_scale():
    """R_t = 0.0625, μ = 1e-5, vc = (0, 1e-5, −1): sliding with R_t·|y_t| = 1e-5, where the step
    1e-6 of the magnitude rule was 10 % of the length over which γ turns (explore run: G₀₀ off by
    0.5 %); the step now follows that length."""
    inputs = (np.array([[0.0625, 0.0625, 1.0]]), np.array([[0.0, 0.0, 0.0]]), np.array([1e-5]),
              np.array([[0.0, 1e-5, -1.0]]))
    assert _check_cone_derivatives(inputs) == SLIDING


# ----------------------------------------------------------------------------- Hunt–Crossley


def hc_inputs():
    """One random Hunt–Crossley contact: (HuntCrossley of one contact, μ, vc). k up to 1e7 N/m,
    d up to 100 s/m (both may be 0: the guarded cases), penetrations up to 1 mm, ε_s from 1e-5."""
    def build(t):
        k, d, depth, vn0, n0_scale, eps, mu, vc, h, similar = t
        fe0 = k * depth
        n0 = max(0.0, h * fe0) * max(0.0, 1.0 - d * vn0) * n0_scale
        hc = HuntCrossley(similar=similar, h=h, k=np.array([k]), d=np.array([d]), fe0=np.array([fe0]),
                          vn0=np.array([vn0]), n0=np.array([n0]), eps=np.array([eps]))
        return hc, np.array([mu]), np.array([vc])
    stiff = st.one_of(st.just(0.0), st.floats(1e2, 1e7))
    diss = st.one_of(st.just(0.0), st.floats(0.1, 100.0))
    return st.tuples(stiff, diss, st.floats(0.0, 1e-3), st.floats(-1.0, 1.0), st.floats(0.0, 1.0),
                     st.floats(1e-5, 1e-2), st.floats(0.0, 1.5),
                     st.lists(st.floats(-0.5, 0.5), min_size=3, max_size=3), st.sampled_from([1e-3, 4e-3]),
                     st.booleans()).map(build)


def _hc_kink_near(hc, mu, vc, h):
    """Whether a kink of n (a factor of n(z) crossing 0) lies within 2h of z: derivatives of ℓ are
    one-sided there."""
    vt = vc[0, :2]
    soft = np.sqrt(vt @ vt + hc.eps[0] ** 2) - hc.eps[0]
    z = vc[0, 2] - mu[0] * soft if hc.similar else vc[0, 2]
    kinks = []
    if hc.k[0] > 0:
        kinks.append(hc.fe0[0] / (hc.h * hc.k[0]))
    if hc.d[0] > 0:
        kinks.append(1.0 / hc.d[0])
    return any(abs(z - x) < 2 * h * (1 + mu[0]) for x in kinks)


@settings(max_examples=400)
@given(hc_inputs())
def test_hunt_crossley_impulse_and_hessian_are_derivatives(inputs):
    """γ = −∂ℓ/∂vc and G = −∂γ/∂vc for both variants, away from the kinks of n (docs/formulation.md
    § Hunt–Crossley contact); G symmetric and positive semi-definite (ℓ is convex)."""
    hc, mu, vc = inputs
    # The friction law v_t/√(|v_t|² + ε²) bends on the scale ε_s: a central difference's error is
    # ~(step/ε_s)² relative, so the step is 1e-3 ε_s (1e-6 relative), at most 1e-7.
    h = min(1e-7, 1e-3 * hc.eps[0])
    assume(not _hc_kink_near(hc, mu, vc, h))
    gamma, G, ell, mode = hunt_crossley(vc, mu, hc)
    event(("similar" if hc.similar else "lagged") + " " + ["stiction", "sliding", "no contact"][mode[0]])
    grad = -_fd(lambda x: hunt_crossley(x, mu, hc)[2], vc, h)[0]
    scale = max(np.abs(gamma).max(), hc.n0[0] * mu[0], 1e-12)
    np.testing.assert_allclose(grad, gamma[0], atol=FD_RTOL * scale + 1e-9 * abs(ell[0]) / h)
    dgamma = -_fd(lambda x: hunt_crossley(x, mu, hc)[0], vc, h)[0]
    gscale = max(np.abs(G).max(), 1e-12)
    np.testing.assert_allclose(dgamma, G[0], atol=FD_RTOL * gscale + 1e-9 * scale / h)
    np.testing.assert_array_equal(G[0], G[0].T)
    assert np.linalg.eigvalsh(G[0])[0] >= -1e-12 * gscale
    assert np.all(np.isfinite(gamma)) and np.all(np.isfinite(G)) and np.isfinite(ell[0])


def test_hunt_crossley_law_and_variants():
    """n(v) = h(fₑ₀ − hkv)₊(1 − dv)₊; lagged friction is μn₀ (any vₙ), similar friction μn(z) with
    z = vₙ − μ‖v_t‖_s; the friction magnitude is μn‖v_t‖/√(‖v_t‖² + ε²) ≤ μn."""
    h, k, d, depth = 1e-3, 1e5, 20.0, 2e-4
    fe0 = k * depth
    base = dict(h=h, k=np.array([k]), d=np.array([d]), fe0=np.array([fe0]), vn0=np.array([-0.1]),
                n0=np.array([h * fe0 * 1.1 * 0.97]), eps=np.array([1e-4]))
    lagged, similar = HuntCrossley(similar=False, **base), HuntCrossley(similar=True, **base)
    mu = np.array([0.5])
    vc = np.array([[0.3, -0.4, -0.02]])  # sliding at 0.5 m/s, approaching at 2 cm/s
    g, _, _, mode = hunt_crossley(vc, mu, lagged)
    assert g[0, 2] == pytest.approx(h * (fe0 + h * k * 0.02) * (1 + d * 0.02), rel=1e-14)
    assert np.linalg.norm(g[0, :2]) == pytest.approx(0.5 * base["n0"][0] * 0.5 / np.sqrt(0.25 + 1e-8), rel=1e-12)
    assert g[0, :2] @ vc[0, :2] < 0 and mode[0] == SLIDING  # friction opposes the slip
    gs, _, _, _ = hunt_crossley(vc, mu, similar)
    soft = np.sqrt(0.25 + 1e-8) - 1e-4
    z = -0.02 - 0.5 * soft
    assert gs[0, 2] == pytest.approx(h * (fe0 - h * k * z) * (1 - d * z), rel=1e-13)  # gliding: larger n
    assert np.linalg.norm(gs[0, :2]) == pytest.approx(0.5 * gs[0, 2] * 0.5 / (soft + 1e-4), rel=1e-12)
    # Separating faster than fₑ₀/(hk): no normal impulse, but lagged friction stays μn₀.
    sep = np.array([[0.3, -0.4, 1.0]])
    g, G, _, mode = hunt_crossley(sep, mu, lagged)
    assert g[0, 2] == 0.0 and G[0, 2, 2] == 0.0 and np.linalg.norm(g[0, :2]) > 0 and mode[0] == SLIDING
    g, G, ell, mode = hunt_crossley(sep, mu, similar)
    assert not g.any() and not G.any() and mode[0] == NO_CONTACT
    # Stiction: |v_t| ≤ ε_s, a linear friction law of slope μn₀/ε_s.
    g, G, _, mode = hunt_crossley(np.array([[1e-6, 0.0, 0.0]]), mu, lagged)
    s = np.sqrt(1e-12 + 1e-8)  # ‖v_t‖_s + ε_s
    assert mode[0] == STICTION and G[0, 0, 0] == pytest.approx(0.5 * base["n0"][0] * (1 - (1e-6 / s) ** 2) / s,
                                                               rel=1e-12)
    assert G[0, 1, 1] == pytest.approx(0.5 * base["n0"][0] / s, rel=1e-12)


@pytest.mark.parametrize("k, d", [(0.0, 30.0), (2e5, 0.0), (0.0, 0.0)])
def test_hunt_crossley_guards_for_zero_stiffness_or_dissipation(k, d):
    """d = 0 or k = 0: v_d = 1/(d + g) or v_x = fₑ₀/h/(k + g) become huge (g = HC_VELOCITY_GUARD)
    instead of dividing by zero, and N is the closed-form antiderivative: h(fₑ₀v − ½hkv²) for
    d = 0, h fₑ₀(v − dv²/2) for k = 0."""
    h, fe0 = 1e-3, 15.0
    z = np.linspace(-0.5, 0.9 / max(d, 1.0) if d else 0.02, 101)
    with np.errstate(all="raise"):
        n = hunt_crossley_impulse(z, h, k, d, fe0)
        dn = hunt_crossley_impulse_derivative(z, h, k, d, fe0)
        N = hunt_crossley_antiderivative(z, h, k, d, fe0)
    assert np.all(np.isfinite(n)) and np.all(np.isfinite(dn)) and np.all(np.isfinite(N))
    if d == 0.0:
        inside = z < fe0 / (h * k) if k else np.ones_like(z, bool)
        np.testing.assert_allclose(N[inside], (h * (fe0 * z - 0.5 * h * k * z * z))[inside], rtol=1e-13, atol=1e-18)
        np.testing.assert_allclose(n[inside], (h * (fe0 - h * k * z))[inside], rtol=1e-13)
    if k == 0.0:
        inside = z < 1.0 / d if d else np.ones_like(z, bool)
        np.testing.assert_allclose(N[inside], (h * fe0 * (z - d * z * z / 2))[inside], rtol=1e-13, atol=1e-18)
    g = HC_VELOCITY_GUARD  # the guard leaves a physical k unchanged
    assert k == 0.0 or fe0 / h / (k + g) == fe0 / h / k


@settings(max_examples=200)
@given(st.floats(1e2, 1e7), st.floats(0.0, 100.0), st.floats(1e-6, 1e-3))
def test_hunt_crossley_antiderivative_is_c1_and_flat_beyond_v_hat(k, d, depth):
    """N is continuous with N' = n everywhere (the line search's φ' is continuous), and constant
    from v̂ = min(fₑ₀/(hk), 1/d) on, where n = 0."""
    h, g = 1e-3, HC_VELOCITY_GUARD
    fe0 = k * depth
    v_hat = min(fe0 / h / (k + g), 1.0 / (d + g))  # as the constraint forms it
    z = np.array([v_hat - 1e-9, v_hat, v_hat + 1e-9, v_hat + 1.0])
    N = hunt_crossley_antiderivative(z, h, k, d, fe0)
    n = hunt_crossley_impulse(z, h, k, d, fe0)
    n_scale = h * fe0 * (1 + d * fe0 / (h * k))
    # At v̂ itself fₑ₀ − hkv̂ is a rounding of 0 (a few ulps of fₑ₀), and so is n there.
    assert N[2] == N[1] == N[3] and n[2] == n[3] == 0.0 and abs(n[1]) <= 1e-14 * n_scale
    assert abs(N[0] - N[1]) <= 1e-9 * n_scale * 1.01 + 1e-15 * abs(N[1])
    zs = np.linspace(-0.1, v_hat * 1.5, 2001)
    dz = zs[1] - zs[0]
    Ns = hunt_crossley_antiderivative(zs, h, k, d, fe0)
    mid = hunt_crossley_impulse(0.5 * (zs[1:] + zs[:-1]), h, k, d, fe0)
    smooth = (zs[1:] < v_hat) | (zs[:-1] > v_hat)  # N is C¹ but not C² at v̂: the interval over it averages
    np.testing.assert_allclose((np.diff(Ns) / dz)[smooth], mid[smooth], atol=1e-6 * np.abs(mid).max() + 1e-12)


def test_hunt_crossley_data_matches_drake_make_data():
    """fₑ₀ = −kφ₀, n₀ = (hfₑ₀)₊(1 − dvₙ₀)₊, ε_s = max(v_s, μσw_t n₀) (Drake's DoMakeData)."""
    hc = hunt_crossley_data(w=np.array([2.0, 2.0, 1e3]), mu=np.array([0.5, 0.5, 1.0]), ke=np.array([1e5, 1e5, 1e7]),
                            hcd=np.array([10.0, 10.0, 50.0]), phi0=np.array([-1e-3, -1e-3, -1e-3]),
                            vn0=np.array([-0.2, 0.2, 0.0]), dt=1e-3, sigma=1e-3, stiction_tolerance=1e-4, similar=False)
    np.testing.assert_allclose(hc.fe0, [100.0, 100.0, 1e4])
    np.testing.assert_allclose(hc.n0, [0.1 * 3.0, 0.0, 10.0])  # vₙ₀ = 0.2 m/s separating: 1 − 10·0.2 < 0
    # ε_s: μσw n₀ = 0.5·2e-3·0.3 = 3e-4 > v_s; the second has n₀ = 0 → v_s; the third 1·1·10 = 10 m/s.
    np.testing.assert_allclose(hc.eps, [3e-4, 1e-4, 10.0], rtol=1e-15)


def test_hunt_crossley_dissipation_combination():
    """d = k_B/(k_A+k_B)·d_A + k_A/(k_A+k_B)·d_B, each d weighted by the other stiffness: k = 1e5,
    d = 5 against k = 4e5, d = 20 gives 8 s/m, not the mean 12.5; a shape that sets none gets the
    fallback, a rigid one hands the pair the other's d."""
    b = ModelBuilder()
    body = b.add_body(1.0, inertia=(0.1, 0.1, 0.1))
    b.add_joint_free(-1, body)
    b.add_ground_plane(ke=1e5, hcd=5.0)
    b.add_shape_sphere(body, radius=0.1, ke=4e5, hcd=20.0)
    b.add_shape_sphere(body, radius=0.05, ke=1e5)
    b.add_shape_sphere(body, radius=0.02, ke=np.inf, hcd=3.0)
    m = b.finalize()
    cfg = SapConfig()
    assert combine_hc_dissipation(m, 0, 1, cfg) == pytest.approx(8.0, rel=1e-15)
    assert combine_hc_dissipation(m, 0, 2, cfg) == pytest.approx(0.5 * 5.0 + 0.5 * 50.0)  # fallback 50 s/m
    assert combine_hc_dissipation(m, 0, 2, SapConfig(fallback_hc_dissipation=0.0)) == pytest.approx(2.5)
    assert combine_hc_dissipation(m, 0, 3, cfg) == 5.0  # the rigid sphere does not deform: the ground's d


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
