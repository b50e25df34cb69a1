"""The Newton loop's sparse products against the plain dense path (docs/testing.md § Fast paths against plain paths).

``SolverSAP.sparse_rows`` (default True) runs every J and A product of the Newton loop over the
non-zero columns of each contact block, scalar row and row of A (``constraints.row_support``);
False lists every column. An entry left out is exactly zero, so the two paths add the same
non-zero terms in the same order: results must be *equal*, not close (``np.array_equal``; the
only possible difference is the sign of a zero, which compares equal).
"""

import numpy as np
import pytest
from conftest import cooperative_lanes
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_constrained_models
from test_gpu_stages import LINEAR_SOLVERS
from variants import preset_line_search_params

import sap_gpu
from sap_common import scenes
from sap_common.config import NEWTON_PATHS
from sap_ref.collision import CollisionPipeline

CAP = 16


def _inputs(case, device):
    model, q, qd = case
    state = model.state()
    state.joint_q[0] = q
    state.joint_qd[0] = qd
    from sap_common.kinematics import body_state
    state.body_q[:], state.body_qd[:] = body_state(model, state.joint_q, state.joint_qd, "public")
    pipe = CollisionPipeline(model, CAP)
    contacts = pipe.contacts()
    pipe.collide(state, contacts)
    control = model.control()
    control.joint_target_pos[0] = np.linspace(-0.3, 0.3, model.joint_dof_count)
    control.joint_act[0] = np.linspace(1.0, -1.0, model.joint_dof_count)
    return model, state, control, contacts


def _step(model, state, control, contacts, device, sparse, newton_path="staged", **config):
    solver = sap_gpu.SolverSAP(model, max_rigid_contact=CAP, device=device, newton_path=newton_path, **config)
    solver.sparse_rows = sparse
    out = sap_gpu.to_device(state, device)
    with cooperative_lanes(newton_path == "fused"):
        solver.step(sap_gpu.to_device(state, device), out, sap_gpu.to_device(control, device),
                    sap_gpu.to_device(contacts, device), 1e-3)
    return solver, sap_gpu.to_host(out)


def _nonzero_columns(rows):
    """Ascending non-zero columns of a block of rows (a NaN counts as non-zero)."""
    return np.flatnonzero(np.any(rows != 0.0, axis=0))


def _check_lists(solver, sparse):
    """The support lists of world 0 are exactly the non-zero columns (every column when dense)."""
    P, nv, S = solver.work.P, solver.m.nv, solver.work.rows.count
    C = int(P.contact_count.numpy()[0])
    J, cols, ncols = solver.work.contact_J.numpy()[0], P.contact_cols.numpy()[0], P.contact_ncols.numpy()[0]
    for c in range(C):
        want = _nonzero_columns(J[3 * c:3 * c + 3]) if sparse else np.arange(nv)
        np.testing.assert_array_equal(cols[c, :ncols[c]], want, err_msg=f"contact {c}")
    active = solver.work.row_active.numpy()[0]
    rJ, rcols, rncols = solver.work.row_J.numpy()[0], P.row_cols.numpy()[0], P.row_ncols.numpy()[0]
    for r in range(S):
        want = np.arange(0) if not active[r] else (_nonzero_columns(rJ[r:r + 1]) if sparse else np.arange(nv))
        np.testing.assert_array_equal(rcols[r, :rncols[r]], want, err_msg=f"scalar row {r}")
    A, acols, ancols = solver.work.A.numpy()[0], P.A_cols.numpy()[0], P.A_ncols.numpy()[0]
    for i in range(nv):
        want = _nonzero_columns(A[i:i + 1, :nv]) if sparse else np.arange(nv)
        np.testing.assert_array_equal(acols[i, :ancols[i]], want, err_msg=f"row {i} of A")


def _assert_equal_runs(a, b, what):
    (sa, oa), (sb, ob) = a, b
    for f in ("joint_q", "joint_qd"):
        np.testing.assert_array_equal(getattr(oa, f), getattr(ob, f), err_msg=f"{what}: {f}")
    da, db = sa.diagnostics(), sb.diagnostics()
    for k in ("status", "newton_iterations", "line_search_iterations", "linear_solver_iterations",
              "linear_solver_residual"):
        np.testing.assert_array_equal(da[k], db[k], err_msg=f"{what}: {k}")


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=5)
@given(case=random_constrained_models(), linear_solver=st.sampled_from(LINEAR_SOLVERS),
       newton_path=st.sampled_from(NEWTON_PATHS))
def test_sparse_rows_equal_dense_rows(device, case, preset, line_search, linear_solver, newton_path):
    """Random models with every joint type, limits, drives and contacts: one step, both row paths,
    on either Newton path (the fused one with its 32 cooperative lanes: the lanes split the DOFs
    and rows by index, not by the lists, so the sums are still equal term for term)."""
    model, state, control, contacts = _inputs(case, device)
    config = dict(contact_preset_variant=preset, line_search_variant=line_search, contact_linear_solver=linear_solver)
    runs = [_step(model, state, control, contacts, device, sparse, newton_path, **config) for sparse in (True, False)]
    _check_lists(runs[0][0], True)
    _check_lists(runs[1][0], False)
    _assert_equal_runs(*runs, f"{preset}/{line_search}/{linear_solver}")
    # ℓ, ∇ℓ, γ and H (or diag H) at a velocity that is not the solution.
    v = runs[0][0].work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
    with cooperative_lanes(newton_path == "fused"):
        ea, eb = (s.evaluate_at(v) for s, _ in runs)
    for k, x in ea.items():
        if x is None:
            assert eb[k] is None
        else:
            np.testing.assert_array_equal(x, eb[k], err_msg=f"evaluate_at: {k}")


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=3)
@given(case=random_constrained_models(holonomic=True), linear_solver=st.sampled_from(LINEAR_SOLVERS),
       newton_path=st.sampled_from(NEWTON_PATHS))
def test_sparse_rows_equal_dense_rows_with_holonomic_constraints(device, case, preset, line_search, linear_solver,
                                                                  newton_path):
    """The holonomic constraint rows' column lists: sparse and dense rows give equal steps."""
    test_sparse_rows_equal_dense_rows.hypothesis.inner_test(device, case, preset, line_search, linear_solver,
                                                            newton_path)


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@pytest.mark.parametrize("approximation", ["lagged", "similar"])
@settings(max_examples=2)
@given(case=random_constrained_models(hunt_crossley=True), linear_solver=st.sampled_from(LINEAR_SOLVERS),
       newton_path=st.sampled_from(NEWTON_PATHS))
def test_sparse_rows_equal_dense_rows_under_hunt_crossley(device, approximation, case, preset, line_search,
                                                          linear_solver, newton_path):
    """The Hunt–Crossley contact term over the non-zero columns equals it over every column."""
    model, state, control, contacts = _inputs(case, device)
    config = dict(contact_preset_variant=preset, line_search_variant=line_search, contact_linear_solver=linear_solver,
                  discrete_contact_approximation=approximation)
    runs = [_step(model, state, control, contacts, device, sparse, newton_path, **config) for sparse in (True, False)]
    _assert_equal_runs(*runs, f"{approximation}/{preset}/{line_search}/{linear_solver}")
    v = runs[0][0].work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
    with cooperative_lanes(newton_path == "fused"):
        ea, eb = (s.evaluate_at(v) for s, _ in runs)
    for k, x in ea.items():
        if x is None:
            assert eb[k] is None
        else:
            np.testing.assert_array_equal(x, eb[k], err_msg=f"evaluate_at: {k}")


@pytest.mark.parametrize("linear_solver, newton_path", [("cholesky", "staged"), ("pcr", "staged"),
                                                       ("cholesky", "fused")])
def test_humanoid_rollout_sparse_equals_dense(device, linear_solver, newton_path):
    """A falling humanoid (one tree, ~13 of 27 columns per contact): the sparse path is taken
    (shorter lists than nv) and a 60-step rollout of 3 worlds equals the dense one."""
    ok, why = scenes.availability("humanoid")
    if not ok:
        pytest.skip(why)
    scene = scenes.get("humanoid", num_worlds=3)
    m = scene.sap_model
    rng = np.random.default_rng(3)
    outs = []
    for sparse in (True, False):
        solver = sap_gpu.SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, device=device,
                                   contact_linear_solver=linear_solver, newton_path=newton_path, **scene.solver_kwargs)
        solver.sparse_rows = sparse
        pipe = sap_gpu.CollisionPipeline(m, scene.max_rigid_contact, solver.config, device=device)
        contacts = pipe.contacts()
        state = sap_gpu.to_device(scene.state, device)
        control = scene.control.copy()
        control.joint_f[:] = rng.normal(0.0, 5.0, control.joint_f.shape) if sparse else outs[0][2]
        noise = control.joint_f.copy()
        control = sap_gpu.to_device(control, device)
        ncols_seen = []
        for _ in range(60):
            pipe.collide(state, contacts)
            with cooperative_lanes(newton_path == "fused"):
                solver.step(state, state, control, contacts, scene.dt)
            count = contacts.count.numpy()
            ncols_seen += [n for w in range(3) for n in solver.work.P.contact_ncols.numpy()[w, :count[w]]]
        _check_lists(solver, sparse)
        assert np.all(solver.diagnostics()["status"] & 1)
        outs.append((sap_gpu.to_host(state), solver.diagnostics(), noise, ncols_seen))
    (sa, da, _, ns), (sb, db, _, nd) = outs
    assert ns and max(ns) < m.joint_dof_count, "the humanoid's contacts never shortened a column list"
    assert set(nd) == {m.joint_dof_count}
    for f in ("joint_q", "joint_qd", "body_q", "body_qd"):
        np.testing.assert_array_equal(getattr(sa, f), getattr(sb, f), err_msg=f)
    for k in ("status", "newton_iterations", "line_search_iterations", "linear_solver_iterations"):
        np.testing.assert_array_equal(da[k], db[k], err_msg=k)


@pytest.mark.parametrize("bad", [None, 1, "dense"])
def test_sparse_rows_must_be_a_bool(device, bad):
    scene = scenes.get("box_stack", num_worlds=1)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device)
    solver.sparse_rows = bad
    state = sap_gpu.to_device(scene.state, device)
    with pytest.raises(ValueError, match="sparse_rows: expected True .* or False"):
        solver.step(state, state, sap_gpu.to_device(scene.control, device), None, scene.dt)


# ---------------------------------------------------------------- the rolled sums, bit for bit

_ROLLED_KERNELS: dict = {}


def _column_lists(rng, worlds: int, rows: int, n: int):
    """Random non-zero column lists: per (world, row) a count in 0..n and that many distinct
    columns < n in ascending order (the rest of the row 0). Returns (ncols, cols)."""
    ncols = rng.integers(0, n + 1, (worlds, rows))
    cols = np.zeros((worlds, rows, n), int)
    for w in range(worlds):
        for r in range(rows):
            cols[w, r, :ncols[w, r]] = np.sort(rng.choice(n, ncols[w, r], replace=False))
    return ncols, cols


def _rolled_kernels(T):
    """Two kernels over the same random lists: the rolled sums of ``sap_gpu.contact_problem``
    (C++ loops the CUDA compiler keeps rolled) and the Python loops they replace, as the module
    had them. One thread per (world, row)."""
    if T in _ROLLED_KERNELS:
        return _ROLLED_KERNELS[T]
    import warp as wp

    from sap_gpu.contact_problem import rolled_sums

    rolled = rolled_sums(T)
    V3 = wp.types.vector(3, T)

    @wp.kernel(enable_backward=False, module="unique")
    def sums(M: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int), ncols: wp.array2d(dtype=int),
             x: wp.array2d(dtype=T), xs: wp.array2d(dtype=wp.float64), J: wp.array3d(dtype=wp.float64),
             dof_rows: wp.array3d(dtype=int), dof_nrows: wp.array2d(dtype=int), row_J: wp.array3d(dtype=wp.float64),
             gamma: wp.array2d(dtype=T), o: int, python: int, out: wp.array3d(dtype=T)):
        world, r = wp.tid()
        dot = T(0.0)
        d1 = T(0.0)
        d2 = T(0.0)
        Jx = V3()
        jtg = T(0.0)
        if python == 0:
            dot = rolled.sparse_row_dot(M, cols, ncols, world, r, x)
            two = rolled.A_row_dots(M, cols, ncols, world, r, x, xs)
            d1 = two[0]
            d2 = two[1]
            Jx = rolled.contact_rows_dot(J, cols, ncols, world, r, x)
            jtg = rolled.jt_gamma(J, dof_rows, dof_nrows, row_J, dof_rows, dof_nrows, gamma, o, world, r)
        else:
            for t in range(ncols[world, r]):  # sparse_row_dot
                k = cols[world, r, t]
                dot = dot + T(M[world, r, k]) * x[world, k]
            for t in range(ncols[world, r]):  # A_row_dots
                k = cols[world, r, t]
                a = T(M[world, r, k])
                d1 = d1 + a * (x[world, k] - T(xs[world, k]))
                d2 = d2 + a * x[world, k]
            for t in range(ncols[world, r]):  # contact_rows_dot
                k = cols[world, r, t]
                Jx = Jx + V3(T(J[world, 3 * r, k]), T(J[world, 3 * r + 1, k]), T(J[world, 3 * r + 2, k])) * x[world, k]
            for t in range(dof_nrows[world, r]):  # jt_gamma: contacts, then the scalar rows
                q = 3 * dof_rows[world, r, t]
                jtg = jtg + T(J[world, q, r]) * gamma[world, q] + T(J[world, q + 1, r]) * gamma[
                    world, q + 1] + T(J[world, q + 2, r]) * gamma[world, q + 2]
            for t in range(dof_nrows[world, r]):
                q = dof_rows[world, r, t]
                jtg = jtg + T(row_J[world, q, r]) * gamma[world, o + q]
        out[world, r, 0] = dot
        out[world, r, 1] = d1
        out[world, r, 2] = d2
        out[world, r, 3] = Jx[0]
        out[world, r, 4] = Jx[1]
        out[world, r, 5] = Jx[2]
        out[world, r, 6] = jtg

    _ROLLED_KERNELS[T] = sums
    return sums


@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), scalar=st.sampled_from(["float32", "float64"]))
def test_rolled_sums_equal_the_python_loops_they_replace(device, seed, n, scalar):
    """Every sum over a non-zero list that the Newton passes run (``rolled_sums``) gives the
    numbers of the Python loop it replaced, bit for bit, on lists of any length (0 included),
    with entries of mixed magnitude so that a changed order or rounding would show."""
    import warp as wp

    T = {"float32": wp.float32, "float64": wp.float64}[scalar]
    rng = np.random.default_rng(seed)
    W = 2
    scale = lambda *shape: rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)  # noqa: E731
    ncols, cols = _column_lists(rng, W, n, n)
    # dof_rows lists rows < n for both the contact blocks (3 rows each) and the scalar rows
    o = 3 * n
    gamma = scale(W, o + n)
    arrays = dict(M=scale(W, n, n), cols=cols, ncols=ncols, x=scale(W, n), xs=scale(W, n), J=scale(W, 3 * n, n),
                  dof_rows=cols, dof_nrows=ncols, row_J=scale(W, n, n), gamma=gamma)
    dtypes = dict(M=wp.float64, cols=int, ncols=int, x=T, xs=wp.float64, J=wp.float64, dof_rows=int, dof_nrows=int,
                  row_J=wp.float64, gamma=T)
    inputs = [wp.array(arrays[k], dtype=dtypes[k], device=device) for k in dtypes]
    kernel = _rolled_kernels(T)
    outs = []
    for python in (0, 1):
        out = wp.zeros((W, n, 7), dtype=T, device=device)
        wp.launch(kernel, dim=(W, n), inputs=[*inputs, o, python, out], device=device)
        outs.append(out.numpy())
    assert np.array_equal(outs[0], outs[1]), np.argwhere(outs[0] != outs[1])


_HESSIAN_KERNELS: dict = {}


def _hessian_kernels(T, TL):
    """Row i of H from A and the contacts of a random list (one thread per (world, row)): the
    rolled loops of ``hessian_functions`` (``A_terms``, ``contact_terms``) or the Python loops they
    replace, as the module had them."""
    if (T, TL) in _HESSIAN_KERNELS:
        return _HESSIAN_KERNELS[T, TL]
    import warp as wp

    from sap_gpu.contact_problem import hessian_functions

    h = hessian_functions(T, TL)
    V3 = wp.types.vector(3, T)

    @wp.kernel(enable_backward=False, module="unique")
    def rows(A: wp.array3d(dtype=wp.float64), J: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int),
             ncols: wp.array2d(dtype=int), GJ: wp.array3d(dtype=T), python: int, H: wp.array3d(dtype=TL)):
        world, i = wp.tid()
        if python == 0:
            h.A_terms(A, H, world, i)
        else:
            for k in range(i + 1):
                H[world, i, k] = TL(A[world, i, k])
        for c in range(ncols.shape[1]):  # every contact (row block) of the lists touches row i here
            GJi = V3(GJ[world, c, 0], GJ[world, c, 1], GJ[world, c, 2])
            if python == 0:
                h.contact_terms(J, cols, ncols, H, world, i, c, GJi)
            else:
                r = 3 * c
                for t in range(ncols[world, c]):
                    k = cols[world, c, t]
                    if k > i:
                        break
                    Jk = V3(T(J[world, r, k]), T(J[world, r + 1, k]), T(J[world, r + 2, k]))
                    H[world, i, k] = H[world, i, k] + TL(wp.dot(GJi, Jk))

    _HESSIAN_KERNELS[T, TL] = rows
    return rows


@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12),
       scalars=st.sampled_from([("float32", "float32"), ("float64", "float32"), ("float64", "float64")]))
def test_hessian_row_loops_equal_the_python_loops_they_replace(device, seed, n, scalars):
    """H's A part and contact terms (``hessian_functions``' ``A_terms``, ``contact_terms``: rolled
    loops through pointers) give the Python loops' H bit for bit, on column lists of any length
    (0 included) that end below, at or above the row (the loop stops at the diagonal)."""
    import warp as wp

    T, TL = ({"float32": wp.float32, "float64": wp.float64}[s] for s in scalars)
    rng = np.random.default_rng(seed)
    W, C = 2, 3
    scale = lambda *shape: rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)  # noqa: E731
    ncols, cols = _column_lists(rng, W, C, n)
    inputs = [wp.array(scale(W, n, n), dtype=wp.float64, device=device),
              wp.array(scale(W, 3 * C, n), dtype=wp.float64, device=device),
              wp.array(cols, dtype=int, device=device), wp.array(ncols, dtype=int, device=device),
              wp.array(scale(W, C, 3), dtype=T, device=device)]
    kernel = _hessian_kernels(T, TL)
    outs = []
    for python in (0, 1):
        H = wp.array(np.full((W, n, n), 7.0), dtype=TL, device=device)  # above the diagonal: untouched
        wp.launch(kernel, dim=(W, n), inputs=[*inputs, python, H], device=device)
        outs.append(H.numpy())
    assert np.array_equal(outs[0], outs[1]), np.argwhere(outs[0] != outs[1])
    upper = np.triu_indices(n, 1)
    assert np.all(outs[0][:, upper[0], upper[1]] == 7.0)


def test_the_rolled_loops_refuse_rows_whose_elements_are_not_adjacent(device):
    """The rolled loops step along a row by the element's size; an array whose last index is
    strided (a transposed view) is refused by name before any kernel runs."""
    from types import SimpleNamespace

    import warp as wp

    from sap_gpu.contact_problem import ROLLED_ARRAYS, check_rolled_arrays

    P = SimpleNamespace(**{k: wp.zeros((2, 3, 4), dtype=wp.float64, device=device) for k in ROLLED_ARRAYS})
    check_rolled_arrays(P, wp.zeros((2, 4, 4), dtype=wp.float32, device=device))
    P.contact_J = wp.zeros((2, 4, 3), dtype=wp.float64, device=device).transpose((0, 2, 1))
    with pytest.raises(ValueError, match=r"P\.contact_J: the rolled Newton loops need rows of adjacent elements"):
        check_rolled_arrays(P)
