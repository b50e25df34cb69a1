"""Stage 3's data on the device and the per-row functions both Newton loops are built from.

Counterpart of :class:`sap_ref.contact_solve.SapProblem` and of the cost pieces of
:mod:`sap_ref.contact_solve` (docs/formulation.md § The cost and its derivatives, § Newton loop).
The staged loop (:mod:`sap_gpu.contact_solve`, one thread per world) and the fused loop
(:mod:`sap_gpu.contact_solve_fused`, one block of lanes per world) run the *same* functions:
each function that walks DOFs or rows takes ``lane`` and ``stride`` and covers rows
``lane, lane + stride, …``. The staged kernels call them with ``(0, 1)`` (every row, in order);
the fused kernel with ``(lane, block_dim)`` and then block-sums the partial results. Lane 0's
partial sum always starts with the terms the staged loop starts with, so on one lane the two
loops compute the same numbers bit for bit.

Everything here is built once per scalar type (:func:`sap_gpu.launch.built_once`):

* :func:`problem_types` (objective scalar T): the ``Problem`` struct (one step's A, v*, the
  contacts' J, R, v̂, μ and Hunt–Crossley data, the scalar rows, their non-zero column lists, the
  Newton state) and the ``Newton`` struct (per-world iteration state and the solver settings);
* :func:`row_functions` (T, contact approximation): row products, the terms γ, G, ℓ of every
  row, the gradient and stopping sums, the direction's row velocities and the line-search cost
  φ(α). Every pass walks the contacts, then the scalar rows (limits, holonomic constraints,
  drives: :mod:`sap_common.rows`) term by term (:data:`ROW_TERM_KINDS`, ``row_terms``). The
  contact term is chosen here, when the kernels are built: the friction cone for ``sap``, the
  Hunt–Crossley constraint for ``lagged`` / ``similar``; the scalar rows, the Hessian assembly
  (from each row's G) and the linear solves are the same for every approximation, and the
  ``sap`` kernels carry no Hunt–Crossley code;
* :func:`hessian_functions` (T, linear-solve scalar TL): rows of H = A + JᵀGJ;
* :func:`rolled_sums` (T): the sums over a row's or a DOF's non-zero entries that every pass
  runs, as loops the CUDA compiler keeps rolled (below).

**Rolled loops.** CUDA's compiler unrolls a loop whose trip count it cannot see (a row's list
of non-zero columns, a DOF's list of contacts) four or more times over, with a remainder loop,
and Warp gives a Python loop no way to ask otherwise (it emits a loop as labels and ``goto``,
where C++'s ``#pragma unroll 1`` does not apply). In the fused Newton kernel that unrolling is
code size, and on an H100 that kernel waits for its own instructions more than for memory
(docs/benchmarks.md § The fused kernel under Nsight Compute). So the sums over those lists are
``wp.func_native`` loops under ``#pragma unroll 1``, with the same operations in the same order
as the Python they replace (Warp's ``wp::add`` and ``wp::mul``, one operation each, as Warp's
generated code calls them), so the numbers are the same bit for bit. So are the loops of H's
rows over A's row and over each contact's columns (:func:`hessian_functions`). They read the
arrays through row pointers formed once per call, so that an entry costs one multiply-add of
address arithmetic instead of a full index computation per entry; that needs rows of adjacent
elements, which :func:`check_rolled_arrays` holds the workspace's arrays to.
"""

from types import SimpleNamespace

import warp as wp

from sap_common.rows import ROW_KINDS, WINDOWED_KINDS, RowKind
from sap_common.state import StepStatus

from .constraints import HC_DATA, hunt_crossley_term, make_terms
from .launch import built_once
from .line_search import line_search_settings

wp.set_module_options({"enable_backward": False})

__all__ = ["problem_types", "row_functions", "hessian_functions", "rolled_sums", "check_rolled_arrays", "HC_DATA",
           "ROW_START", "ROW_END", "ROW_TERM_KINDS"]

CONVERGED = wp.constant(int(StepStatus.CONVERGED))
# Problem.row_start: the first scalar row of each kind (indexed by RowKind) and, last, their count.
ROW_START = wp.types.vector(len(ROW_KINDS) + 1, int)
ROW_END = wp.constant(len(ROW_KINDS))
# The scalar rows' terms, each with the kinds it serves (contiguous in ROW_KINDS; every kind once):
# a pass over the scalar rows walks them term by term, one loop per term, each spreading its rows over
# the lanes from lane 0. LIMIT and HOLONOMIC share the limit term (the clamp dropped from the first
# holonomic row on), DRIVE has its own (row_functions' ``row_terms`` holds the functions).
ROW_TERM_KINDS = ((RowKind.LIMIT, RowKind.HOLONOMIC), (RowKind.DRIVE,))
MAX_ITERATIONS = wp.constant(int(StepStatus.MAX_ITERATIONS))



@built_once()
def problem_types(T):
    """``(Problem, Newton)``: the stage-3 structs for objective scalar ``T`` (built once)."""
    M33 = wp.types.matrix((3, 3), T)
    HC5 = HC_DATA
    LineSearchSettings = line_search_settings(T)

    @wp.struct
    class Problem:
        """One step's SAP problem for every world (float64 inputs, read as T).

        Rows: the 3C contact rows (3 per slot), then the S scalar rows (``row_*``: limits,
        holonomic constraints' rows, drives, kind by kind, :mod:`sap_common.rows`; the rows of kind
        k are ``row_start[k] … row_start[k + 1] − 1``, S = ``row_start[ROW_END]``). ``vc``, ``dvc``
        and ``gamma`` hold the contacts' 3C entries first, then the scalar rows'."""
        nv: int
        n_pad: int
        row_start: ROW_START
        h: wp.float64
        A: wp.array3d(dtype=wp.float64)
        v_star: wp.array2d(dtype=wp.float64)
        dof_mask: wp.array2d(dtype=int)
        contact_count: wp.array(dtype=int)
        contact_J: wp.array3d(dtype=wp.float64)
        contact_R: wp.array2d(dtype=wp.vec3d)
        contact_v_hat: wp.array2d(dtype=wp.float64)
        contact_mu: wp.array2d(dtype=wp.float64)
        # Hunt–Crossley data per contact (lagged/similar): (k, d, fₑ₀, n₀, ε_s); a stand-in under sap.
        contact_hc: wp.array2d(dtype=HC5)
        # Kinematic bodies: each contact's known velocity J_kin v₀ of their DOFs (t₁, t₂, n), which the
        # cone of the plan's kinematic variant reads as vc + J_kin v₀ (docs/formulation.md § Kinematic bodies).
        contact_vc_kin: wp.array2d(dtype=wp.vec3d)
        # The scalar rows: whether in use this step (a limit inside its window; every holonomic and
        # drive row), J, and R, v̂ (limit and holonomic rows).
        row_active: wp.array2d(dtype=int)
        row_J: wp.array3d(dtype=wp.float64)
        row_R: wp.array2d(dtype=wp.float64)
        row_v_hat: wp.array2d(dtype=wp.float64)
        # The drive rows' parameters, by drive d (row row_start[DRIVE] + d).
        drive_dof: wp.array(dtype=int)
        drive_q0: wp.array2d(dtype=wp.float64)
        drive_Kp: wp.array2d(dtype=wp.float64)
        drive_Kd: wp.array2d(dtype=wp.float64)
        q_target: wp.array2d(dtype=wp.float64)
        v_target: wp.array2d(dtype=wp.float64)
        u0: wp.array2d(dtype=wp.float64)
        effort: wp.array2d(dtype=wp.float64)
        # Non-zero columns (constraints.row_support): of each contact's 3 rows, of each scalar
        # row, of each row of A. Every J and A product runs over these lists.
        contact_cols: wp.array3d(dtype=int)
        contact_ncols: wp.array2d(dtype=int)
        row_cols: wp.array3d(dtype=int)
        row_ncols: wp.array2d(dtype=int)
        A_cols: wp.array3d(dtype=int)
        A_ncols: wp.array2d(dtype=int)
        # Transposed: per DOF, the contacts and active scalar rows listing it (ascending).
        dof_contacts: wp.array3d(dtype=int)
        dof_ncontacts: wp.array2d(dtype=int)
        dof_rows: wp.array3d(dtype=int)
        dof_nrows: wp.array2d(dtype=int)
        # Newton state (objective scalar T)
        v: wp.array2d(dtype=T)
        dv: wp.array2d(dtype=T)
        grad: wp.array2d(dtype=T)
        vc: wp.array2d(dtype=T)
        dvc: wp.array2d(dtype=T)
        dp: wp.array2d(dtype=T)  # A v at the last evaluated v (the stopping test's momentum scale)
        line: wp.array2d(dtype=T)  # per world: ℓ_A(v), Δpᵀ(v − v*), ΔvᵀAΔv
        gamma: wp.array2d(dtype=T)  # per row: γ at the last evaluated v (contacts 3C, then the scalar rows)
        # G = −∂γ/∂vc of each row at the last evaluated v (kept for the assembly of H).
        contact_G: wp.array2d(dtype=M33)
        row_G: wp.array2d(dtype=T)

    @wp.struct
    class Newton:
        """Per-world iteration state and the solver settings."""
        ell: wp.array(dtype=T)
        ell_prev: wp.array(dtype=T)
        alpha_prev: wp.array(dtype=T)
        residual: wp.array(dtype=T)
        scale: wp.array(dtype=T)
        iterations: wp.array(dtype=int)
        ls_iterations: wp.array(dtype=int)
        done: wp.array(dtype=int)
        pending: wp.array(dtype=int)
        status: wp.array(dtype=int)
        count: wp.array(dtype=int)
        max_iterations: int
        abs_tol: T
        rel_tol: T
        cost_abs: T
        cost_rel: T
        line_search: LineSearchSettings  # the line search's settings, one struct (sap_gpu.line_search)

    return Problem, Newton


# The C++ of rolled_sums: SCALAR is the objective scalar T (LSCALAR the linear-solve scalar TL
# where H is written). Sums through wp::add / wp::mul (wp::dot) in the order of the Python each
# replaces (named in rolled_sums). Array entries are read through pointers formed once per call:
# the row a loop walks is a base pointer and entry k is base[k] (SAP_AT: rows of adjacent
# elements, which check_rolled_arrays holds the workspace to), a column walked by row index r is
# base + r · row stride (SAP_ATS), in unsigned 32-bit factors: one wide multiply-add. wp::index
# instead forms every entry's byte offset from signed ints widened to 64 bits, three to five
# instructions per index, and the loop's listed index k goes through all of them; in the fused
# kernel those address sums were most of the loops' instructions
# (docs/benchmarks.md § Address arithmetic in the Newton loops).
# Every index here is in range and ≥ 0 (worlds, rows, listed columns).
_PTR = r"""
#define SAP_ROW1(a, i) ((char*)(a).data + (unsigned long long)(unsigned)(i) * (unsigned)(a).strides[0])
#define SAP_ROW2(a, i, j) (SAP_ROW1(a, i) + (unsigned long long)(unsigned)(j) * (unsigned)(a).strides[1])
#define SAP_AT(type, base, k) (((type*)(base))[k])
#define SAP_ATS(type, base, k, stride) (*(type*)((base) + (unsigned long long)(unsigned)(k) * (stride)))
// contact c's column list (n entries from cr) and its three rows of J (J0, J1, J2), in a loop
// whose arguments are named J, cols, ncols, world, c; SAP_JK(k): column k of those rows in SCALAR
#define SAP_CONTACT_ROWS const int n = wp::index(ncols, world, c); const char* cr = SAP_ROW2(cols, world, c); \
    const char* J0 = SAP_ROW2(J, world, 3 * c); const unsigned s1 = J.strides[1]; const char* J1 = J0 + s1; \
    const char* J2 = J1 + s1
#define SAP_JK(k) wp::vec_t<3, SCALAR>(SCALAR(SAP_AT(const wp::float64, J0, k)), \
    SCALAR(SAP_AT(const wp::float64, J1, k)), SCALAR(SAP_AT(const wp::float64, J2, k)))
"""
_PTR_END = r"""
#undef SAP_ROW1
#undef SAP_ROW2
#undef SAP_AT
#undef SAP_ATS
#undef SAP_CONTACT_ROWS
#undef SAP_JK
"""
_ROLLED_SPARSE_ROW_DOT = r"""
const int n = wp::index(ncols, world, row);
const char* Mr = SAP_ROW2(M, world, row);
const char* cr = SAP_ROW2(cols, world, row);
const char* xw = SAP_ROW1(x, world);
SCALAR s = SCALAR(0.0);
WP_PRAGMA_NO_UNROLL
for (int t = 0; t < n; ++t) {
    const int k = SAP_AT(const int, cr, t);
    s = wp::add(s, wp::mul(SCALAR(SAP_AT(const wp::float64, Mr, k)), SAP_AT(const SCALAR, xw, k)));
}
return s;
"""
_ROLLED_A_ROW_DOTS = r"""
const int n = wp::index(ncols, world, i);
const char* Ar = SAP_ROW2(A, world, i);
const char* cr = SAP_ROW2(cols, world, i);
const char* vw = SAP_ROW1(v, world);
const char* sw = SAP_ROW1(v_star, world);
SCALAR s = SCALAR(0.0);
SCALAR sv_ = SCALAR(0.0);
WP_PRAGMA_NO_UNROLL
for (int t = 0; t < n; ++t) {
    const int k = SAP_AT(const int, cr, t);
    const SCALAR a = SCALAR(SAP_AT(const wp::float64, Ar, k));
    const SCALAR vk = SAP_AT(const SCALAR, vw, k);
    s = wp::add(s, wp::mul(a, wp::sub(vk, SCALAR(SAP_AT(const wp::float64, sw, k)))));
    sv_ = wp::add(sv_, wp::mul(a, vk));
}
return wp::vec_t<2, SCALAR>(s, sv_);
"""
_ROLLED_CONTACT_ROWS_DOT = r"""
SAP_CONTACT_ROWS;
const char* xw = SAP_ROW1(x, world);
wp::vec_t<3, SCALAR> s(SCALAR(0.0), SCALAR(0.0), SCALAR(0.0));
WP_PRAGMA_NO_UNROLL
for (int t = 0; t < n; ++t) {
    const int k = SAP_AT(const int, cr, t);
    const wp::vec_t<3, SCALAR> Jk = SAP_JK(k);
    s = wp::add(s, wp::mul(Jk, SAP_AT(const SCALAR, xw, k)));
}
return s;
"""
_ROLLED_JT_GAMMA = r"""
SCALAR s = SCALAR(0.0);
const char* gw = SAP_ROW1(gamma, world);
const int nc = wp::index(dof_ncontacts, world, i);
const char* dc = SAP_ROW2(dof_contacts, world, i);
const unsigned sJ = contact_J.strides[1];
const char* Ji = SAP_ROW1(contact_J, world) + (unsigned long long)(unsigned)i * (unsigned)contact_J.strides[2];
WP_PRAGMA_NO_UNROLL
for (int t = 0; t < nc; ++t) {
    const int r = 3 * SAP_AT(const int, dc, t);
    s = wp::add(wp::add(wp::add(s, wp::mul(SCALAR(SAP_ATS(const wp::float64, Ji, r, sJ)), SAP_AT(const SCALAR, gw, r))),
                        wp::mul(SCALAR(SAP_ATS(const wp::float64, Ji, r + 1, sJ)), SAP_AT(const SCALAR, gw, r + 1))),
                wp::mul(SCALAR(SAP_ATS(const wp::float64, Ji, r + 2, sJ)), SAP_AT(const SCALAR, gw, r + 2)));
}
const int nl = wp::index(dof_nrows, world, i);
const char* dl = SAP_ROW2(dof_rows, world, i);
const unsigned sL = row_J.strides[1];
const char* Li = SAP_ROW1(row_J, world) + (unsigned long long)(unsigned)i * (unsigned)row_J.strides[2];
WP_PRAGMA_NO_UNROLL
for (int t = 0; t < nl; ++t) {
    const int r = SAP_AT(const int, dl, t);
    s = wp::add(s, wp::mul(SCALAR(SAP_ATS(const wp::float64, Li, r, sL)), SAP_AT(const SCALAR, gw, o + r)));
}
return s;
"""
# hessian_functions' contact terms of row i of H (contact c, G J_i given); LSCALAR is TL.
_ROLLED_HESSIAN_CONTACT = r"""
SAP_CONTACT_ROWS;
char* Hr = SAP_ROW2(H, world, i);
WP_PRAGMA_NO_UNROLL
for (int t = 0; t < n; ++t) {
    const int k = SAP_AT(const int, cr, t);
    if (k > i)
        break;
    const wp::vec_t<3, SCALAR> Jk = SAP_JK(k);
    LSCALAR& h = SAP_AT(LSCALAR, Hr, k);
    h = wp::add(h, LSCALAR(wp::dot(GJi, Jk)));
}
"""
# hessian_functions' A part of row i of H up to the diagonal.
_ROLLED_HESSIAN_A = r"""
const char* Ar = SAP_ROW2(A, world, i);
char* Hr = SAP_ROW2(H, world, i);
WP_PRAGMA_NO_UNROLL
for (int k = 0; k <= i; ++k)
    SAP_AT(LSCALAR, Hr, k) = LSCALAR(SAP_AT(const wp::float64, Ar, k));
"""
_SCALARS = {wp.float32: "wp::float32", wp.float64: "wp::float64"}


def _native(snippet: str, **names) -> str:
    """A rolled loop's C++ between the pointer macros, with SCALAR, LSCALAR set (in both)."""
    code = _PTR + snippet + _PTR_END
    for k in sorted(names, key=len, reverse=True):  # LSCALAR before the SCALAR inside it
        code = code.replace(k, _SCALARS[names[k]])
    return code


# The Problem's arrays that the rolled loops walk by element (``SAP_AT``: the last index steps by
# one element, so a row's entries must be adjacent).
ROLLED_ARRAYS = ("A", "A_cols", "v", "v_star", "dv", "gamma", "contact_J", "contact_cols", "row_J", "row_cols",
                 "dof_contacts", "dof_rows")


def check_rolled_arrays(P, H=None) -> None:
    """Raise ``ValueError`` unless every array the rolled loops index by element (``ROLLED_ARRAYS``
    of the Problem ``P``, and ``H`` where given) has its last index contiguous: the loops step
    along a row by the element's size, not by the array's stride."""
    named = [(f"P.{k}", getattr(P, k)) for k in ROLLED_ARRAYS] + ([("H", H)] if H is not None else [])
    for name, a in named:
        if a.strides[-1] != wp.types.type_size_in_bytes(a.dtype):
            raise ValueError(f"{name}: the rolled Newton loops need rows of adjacent elements, got strides "
                             f"{a.strides} for {a.dtype.__name__} (allocate it with wp.zeros / wp.empty)")


@built_once()
def rolled_sums(T) -> SimpleNamespace:
    """The sums over non-zero lists as loops kept rolled on CUDA (the module docstring), in
    objective scalar ``T`` (built once): ``sparse_row_dot`` (M[row] · x over the row's listed
    columns), ``A_row_dots`` ((A(v − v*))_i and (A v)_i, one pass), ``contact_rows_dot`` (J_c x,
    the 3 rows of contact c) and ``jt_gamma`` ((Jᵀγ)_i: the contacts and the scalar rows touching
    DOF i, in row order). :func:`row_functions` documents each as the function
    of its own that calls it."""
    V2 = wp.types.vector(2, T)
    V3 = wp.types.vector(3, T)

    @wp.func_native(_native(_ROLLED_SPARSE_ROW_DOT, SCALAR=T))
    def sparse_row_dot(M: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int), ncols: wp.array2d(dtype=int),
                       world: int, row: int, x: wp.array2d(dtype=T)) -> T:
        ...

    @wp.func_native(_native(_ROLLED_A_ROW_DOTS, SCALAR=T))
    def A_row_dots(A: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int), ncols: wp.array2d(dtype=int),
                   world: int, i: int, v: wp.array2d(dtype=T), v_star: wp.array2d(dtype=wp.float64)) -> V2:
        ...

    @wp.func_native(_native(_ROLLED_CONTACT_ROWS_DOT, SCALAR=T))
    def contact_rows_dot(J: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int), ncols: wp.array2d(dtype=int),
                         world: int, c: int, x: wp.array2d(dtype=T)) -> V3:
        ...

    @wp.func_native(_native(_ROLLED_JT_GAMMA, SCALAR=T))
    def jt_gamma(contact_J: wp.array3d(dtype=wp.float64), dof_contacts: wp.array3d(dtype=int),
                 dof_ncontacts: wp.array2d(dtype=int), row_J: wp.array3d(dtype=wp.float64),
                 dof_rows: wp.array3d(dtype=int), dof_nrows: wp.array2d(dtype=int), gamma: wp.array2d(dtype=T), o: int,
                 world: int, i: int) -> T:
        ...

    return SimpleNamespace(sparse_row_dot=sparse_row_dot, A_row_dots=A_row_dots, contact_rows_dot=contact_rows_dot,
                           jt_gamma=jt_gamma)


@built_once()
def row_functions(T, approximation: str = "sap", kinematic: bool = False) -> SimpleNamespace:
    """The per-row and per-DOF ``wp.func`` s of the objective in scalar ``T`` with the contact
    constraint of ``approximation`` (``sap``, ``lagged``, ``similar``; built once). ``kinematic``:
    the friction cone reads v_c + J_kin v₀ (``P.contact_vc_kin``), for models with kinematic bodies;
    a variant of its own, so that other models' kernels are the ones they were without it.

    Returns a namespace with ``T``, ``V3``, ``Problem``, ``Newton``, the terms
    (``friction_cone``, ``contact_term`` — the approximation's, ``limit_term``, ``drive_term`` and
    ``row_terms``, each scalar-row kind's term), the products (``A_row_dot``,
    ``A_row_dots``, ``contact_rows_dot``, ``scalar_row_dot``), and the strided passes of one
    Newton iteration: ``momentum_pass``, ``evaluate_rows``, ``gradient_pass``, ``newton_stop``,
    ``direction_rows``, ``direction_sums`` and ``cost_along_line`` (φ(α) and its derivatives).
    """
    if approximation not in ("sap", "lagged", "similar"):
        raise ValueError(f"discrete_contact_approximation: {approximation!r} is not valid; valid: sap, lagged, similar")
    Problem, Newton = problem_types(T)
    V3 = wp.types.vector(3, T)
    friction_cone, limit_term, drive_term = make_terms(T)

    @wp.func
    def contact_params(P: Problem, world: int, c: int):
        """R (3), v̂ₙ and μ of contact c, read as T."""
        R = P.contact_R[world, c]
        return V3(T(R[0]), T(R[1]), T(R[2])), T(P.contact_v_hat[world, c]), T(P.contact_mu[world, c])

    @wp.func
    def cone_term(P: Problem, world: int, c: int, vc: V3):
        """γ, G, ℓ and the region of contact c as a friction cone (``sap``)."""
        R, vh, mu = contact_params(P, world, c)
        return friction_cone(vc, R, vh, mu)

    @wp.func
    def cone_term_kinematic(P: Problem, world: int, c: int, vc: V3):
        """``cone_term`` of v_c + J_kin v₀: the contact's velocity with its kinematic bodies' part."""
        R, vh, mu = contact_params(P, world, c)
        b = P.contact_vc_kin[world, c]
        return friction_cone(vc + V3(T(b[0]), T(b[1]), T(b[2])), R, vh, mu)

    if approximation == "sap":
        contact_term = cone_term_kinematic if kinematic else cone_term
    else:
        hunt_crossley = hunt_crossley_term(T, approximation == "similar")

        @wp.func
        def contact_term(P: Problem, world: int, c: int, vc: V3):
            """γ, G, ℓ and the regime of contact c as a Hunt–Crossley constraint."""
            p = P.contact_hc[world, c]
            return hunt_crossley(vc, T(P.contact_mu[world, c]), T(P.h), T(p[0]), T(p[1]), T(p[2]), T(p[3]), T(p[4]))

    @wp.func
    def drive_params(P: Problem, world: int, i: int):
        """q₀, q_target, v_target, u₀, Kp, Kd and the effort limit of drive i, read as T."""
        dof = P.drive_dof[i]
        return (T(P.drive_q0[world, i]), T(P.q_target[world, dof]), T(P.v_target[world, dof]),
                T(P.u0[world, dof]), T(P.drive_Kp[world, i]), T(P.drive_Kd[world, i]), T(P.effort[world, dof]))

    # The terms of the scalar rows (ROW_TERM_KINDS), wp.func (P, world, r, vc) -> (γ, G, ℓ) of row r at
    # row velocity vc. A pass walks the rows term by term with the term fixed when the kernel is built:
    # a branch on a row's kind inside one loop, or a loop per kind, costs the Newton kernels registers
    # and spills (docs/benchmarks.md § The scalar rows' loops).
    @wp.func
    def limit_row_term(P: Problem, world: int, r: int, vc: T):
        """A limit's one-sided term (docs/formulation.md § Limits), or a holonomic constraint's
        row: the same without the clamp (docs/formulation.md § Holonomic constraints)."""
        bilateral = int(0)
        if r >= P.row_start[wp.static(int(RowKind.HOLONOMIC))]:
            bilateral = 1
        return limit_term(vc, T(P.row_R[world, r]), T(P.row_v_hat[world, r]), bilateral)

    @wp.func
    def drive_row_term(P: Problem, world: int, r: int, vc: T):
        """A drive's PD term (docs/formulation.md § Drives), drive d = r − row_start[DRIVE]."""
        q0, qt, vt, u, Kp, Kd, e = drive_params(P, world, r - P.row_start[wp.static(int(RowKind.DRIVE))])
        return drive_term(vc, T(P.h), q0, qt, vt, u, Kp, Kd, e)

    row_terms = {ROW_TERM_KINDS[0]: limit_row_term, ROW_TERM_KINDS[1]: drive_row_term}
    # For the loops below, unrolled when a kernel is built: each term's first row kind, the kind
    # after its last, and whether its rows can be out of use this step (sap_common.rows.WINDOWED_KINDS).
    term_first = [int(kinds[0]) for kinds in ROW_TERM_KINDS]
    term_end = [int(kinds[-1]) + 1 for kinds in ROW_TERM_KINDS]
    term_windowed = [any(k in WINDOWED_KINDS for k in kinds) for kinds in ROW_TERM_KINDS]
    terms = [row_terms[kinds] for kinds in ROW_TERM_KINDS]

    def row_passes(term):
        """``(evaluate, along_line)`` of one scalar row r in use, with ``term``: evaluate stores its γ
        and G and returns ``ell`` + its ℓ; along_line returns ``s`` + its ℓ, dℓ/dα, d²ℓ/dα² at
        v + αΔv (o = 3C, where the scalar rows' vc, Δvc and γ start)."""

        @wp.func
        def evaluate(P: Problem, world: int, o: int, r: int, vc: T, ell: T) -> T:
            gr, Gr, lr = term(P, world, r, vc)
            P.gamma[world, o + r] = gr
            P.row_G[world, r] = Gr
            return ell + lr

        @wp.func
        def along_line(P: Problem, world: int, o: int, r: int, alpha: T, s: V3) -> V3:
            d = P.dvc[world, o + r]
            gr, Gr, lr = term(P, world, r, P.vc[world, o + r] + alpha * d)
            return V3(s[0] + lr, s[1] - d * gr, s[2] + d * Gr * d)

        return evaluate, along_line

    row_evaluate = [row_passes(term)[0] for term in terms]
    row_along_line = [row_passes(term)[1] for term in terms]

    rolled = rolled_sums(T)

    @wp.func
    def A_row_dot(P: Problem, world: int, i: int, x: wp.array2d(dtype=T)) -> T:
        """(A x)_i over the non-zero columns of row i: Σₜ T(A[i, k]) x[k], k = A_cols[i, t] (rolled)."""
        return rolled.sparse_row_dot(P.A, P.A_cols, P.A_ncols, world, i, x)

    @wp.func
    def A_row_dots(P: Problem, world: int, i: int):
        """(A (v − v*))_i and (A v)_i in one pass over the non-zero columns of row i: with
        a = T(A[i, k]), Σₜ a (v[k] − T(v*[k])) and Σₜ a v[k] (rolled)."""
        s = rolled.A_row_dots(P.A, P.A_cols, P.A_ncols, world, i, P.v, P.v_star)
        return s[0], s[1]

    @wp.func
    def contact_rows_dot(P: Problem, world: int, c: int, x: wp.array2d(dtype=T)) -> V3:
        """(J_c x) for the 3 rows of contact c, over its non-zero columns: Σₜ J_c[:, k] x[k] (rolled)."""
        return rolled.contact_rows_dot(P.contact_J, P.contact_cols, P.contact_ncols, world, c, x)

    @wp.func
    def scalar_row_dot(P: Problem, world: int, r: int, x: wp.array2d(dtype=T)) -> T:
        """J_r x of scalar row r over its non-zero columns (0 for an inactive row: empty list; rolled)."""
        return rolled.sparse_row_dot(P.row_J, P.row_cols, P.row_ncols, world, r, x)

    @wp.func
    def momentum_pass(P: Problem, world: int, lane: int, stride: int) -> T:
        """DOFs i = lane, lane + stride, …: grad_i = (A(v − v*))_i and dp_i = (A v)_i; returns
        the lane's part of ℓ_A(v) = ½(v − v*)ᵀA(v − v*)."""
        ell_A = T(0.0)
        for i in range(lane, P.nv, stride):
            Adv, Av = A_row_dots(P, world, i)
            P.grad[world, i] = Adv
            P.dp[world, i] = Av
            ell_A = ell_A + T(0.5) * (P.v[world, i] - T(P.v_star[world, i])) * Adv
        return ell_A

    @wp.func
    def evaluate_rows(P: Problem, world: int, lane: int, stride: int, ell_start: T) -> T:
        """Rows r = lane, lane + stride, … of contacts, then of the scalar rows: vc = J v, γ, G
        into the Problem's rows; returns ``ell_start`` + the lane's Σ ℓᵢ in that order."""
        ell = ell_start
        for c in range(lane, P.contact_count[world], stride):
            Jv = contact_rows_dot(P, world, c, P.v)
            g, G, l, mode = contact_term(P, world, c, Jv)
            ell = ell + l
            P.contact_G[world, c] = G
            for a in range(3):
                P.vc[world, 3 * c + a] = Jv[a]
                P.gamma[world, 3 * c + a] = g[a]
        o = P.contact_J.shape[1]
        # The scalar rows term by term (a loop unrolled when the kernel is built; each term's rows
        # from lane 0); rows out of use this step (windowed kinds only) get no impulse.
        for f in range(wp.static(len(terms))):
            r0 = lane  # the first kind's rows start at row 0
            if wp.static(term_first[f] != 0):
                r0 = P.row_start[wp.static(term_first[f])] + lane
            for r in range(r0, P.row_start[wp.static(term_end[f])], stride):
                vcr = scalar_row_dot(P, world, r, P.v)
                P.vc[world, o + r] = vcr
                if wp.static(term_windowed[f]):
                    P.gamma[world, o + r] = T(0.0)
                    P.row_G[world, r] = T(0.0)
                    if P.row_active[world, r] != 0:
                        ell = wp.static(row_evaluate[f])(P, world, o, r, vcr, ell)
                else:
                    ell = wp.static(row_evaluate[f])(P, world, o, r, vcr, ell)
        return ell

    @wp.func
    def jt_gamma(P: Problem, world: int, i: int) -> T:
        """(Jᵀγ)_i: the rows touching DOF i in row order (rolled): from 0, for each listed contact c
        (r = 3c) s + J[r, i] γ[r] + J[r+1, i] γ[r+1] + J[r+2, i] γ[r+2], left to right; then each
        listed scalar row r, s + J_r[i] γ[o + r] (o = 3C: where the scalar rows' γ start)."""
        return rolled.jt_gamma(P.contact_J, P.dof_contacts, P.dof_ncontacts, P.row_J, P.dof_rows, P.dof_nrows, P.gamma,
                               P.contact_J.shape[1], world, i)

    @wp.func
    def gradient_pass(P: Problem, world: int, lane: int, stride: int):
        """DOFs i = lane, lane + stride, …: ∇ℓ_i = (A(v − v*))_i − (Jᵀγ)_i into grad; returns the
        lane's parts of the stopping sums over participating DOFs with D̃ = diag(A)^(-1/2):
        ‖D̃∇ℓ‖², ‖D̃ A v‖², ‖D̃ Jᵀγ‖², and 1 if a gradient entry is not finite, else 0
        (docs/formulation.md § Stopping criteria)."""
        r2 = T(0.0)
        sA = T(0.0)
        sJ = T(0.0)
        bad = T(0.0)
        for i in range(lane, P.nv, stride):
            jtg = jt_gamma(P, world, i)
            g = P.grad[world, i] - jtg
            P.grad[world, i] = g
            if not wp.isfinite(g):
                bad = T(1.0)
            if P.dof_mask[world, i] != 0:
                d = T(1.0) / wp.sqrt(T(P.A[world, i, i]))
                Av = P.dp[world, i]
                r2 = r2 + d * d * g * g
                sA = sA + d * d * Av * Av
                sJ = sJ + d * d * jtg * jtg
        return r2, sA, sJ, bad

    @wp.func
    def newton_stop(N: Newton, iterations: int, ell: T, ell_prev: T, alpha_prev: T, residual: T, scale: T) -> int:
        """The status bit that ends a world's loop after an evaluation, or 0 to go on: CONVERGED
        on the optimality criterion or (after a step with α > ½) the cost criterion, else
        MAX_ITERATIONS at the cap (docs/formulation.md § Stopping criteria)."""
        cost_reached = int(0)
        if iterations > 0:
            if wp.abs(ell_prev - ell) < N.cost_abs + N.cost_rel * T(0.5) * (wp.abs(ell) + wp.abs(ell_prev)):
                if alpha_prev > T(0.5):
                    cost_reached = 1
        if residual <= N.abs_tol + N.rel_tol * scale or cost_reached == 1:
            return CONVERGED
        if iterations == N.max_iterations:
            return MAX_ITERATIONS
        return 0

    @wp.func
    def direction_rows(P: Problem, world: int, lane: int, stride: int):
        """Rows r = lane, lane + stride, …: Δvc = J Δv into P.dvc."""
        o = P.contact_J.shape[1]
        for c in range(lane, P.contact_count[world], stride):
            Jdv = contact_rows_dot(P, world, c, P.dv)
            for a in range(3):
                P.dvc[world, 3 * c + a] = Jdv[a]
        for r in range(lane, P.row_start[ROW_END], stride):
            P.dvc[world, o + r] = scalar_row_dot(P, world, r, P.dv)

    @wp.func
    def direction_sums(P: Problem, world: int, lane: int, stride: int) -> V3:
        """DOFs i = lane, lane + stride, …: the lane's parts of (A Δv)ᵀ(v − v*), ΔvᵀAΔv and ∇ℓᵀΔv
        (the quadratic part of φ(α) and φ'(0))."""
        slope = T(0.0)
        curvature = T(0.0)
        dphi0 = T(0.0)
        for i in range(lane, P.nv, stride):
            dp = A_row_dot(P, world, i, P.dv)
            dvs = P.v[world, i] - T(P.v_star[world, i])
            slope = slope + dp * dvs
            curvature = curvature + dp * P.dv[world, i]
            dphi0 = dphi0 + P.grad[world, i] * P.dv[world, i]
        return V3(slope, curvature, dphi0)

    @wp.func
    def cost_along_line(P: Problem, world: int, lane: int, stride: int, alpha: T) -> V3:
        """The lane's part of φ(α) = ℓ(v + αΔv), φ'(α), φ''(α): lane 0 holds the quadratic part from
        P.line, each lane adds its rows' terms (docs/formulation.md § Line searches)."""
        ell = T(0.0)
        dell = T(0.0)
        d2ell = T(0.0)
        if lane == 0:
            ell = P.line[world, 0] + alpha * P.line[world, 1] + T(0.5) * alpha * alpha * P.line[world, 2]
            dell = P.line[world, 1] + alpha * P.line[world, 2]
            d2ell = P.line[world, 2]
        for c in range(lane, P.contact_count[world], stride):
            r = 3 * c
            vc = V3(P.vc[world, r] + alpha * P.dvc[world, r], P.vc[world, r + 1] + alpha * P.dvc[world, r + 1],
                    P.vc[world, r + 2] + alpha * P.dvc[world, r + 2])
            g, G, l, mode = contact_term(P, world, c, vc)
            d = V3(P.dvc[world, r], P.dvc[world, r + 1], P.dvc[world, r + 2])
            ell = ell + l
            dell = dell - wp.dot(d, g)
            d2ell = d2ell + wp.dot(d, G * d)
        sums = V3(ell, dell, d2ell)
        o = P.contact_J.shape[1]
        for f in range(wp.static(len(terms))):  # term by term, as evaluate_rows
            r0 = lane  # the first kind's rows start at row 0
            if wp.static(term_first[f] != 0):
                r0 = P.row_start[wp.static(term_first[f])] + lane
            for r in range(r0, P.row_start[wp.static(term_end[f])], stride):
                if wp.static(term_windowed[f]):
                    if P.row_active[world, r] != 0:
                        sums = wp.static(row_along_line[f])(P, world, o, r, alpha, sums)
                else:
                    sums = wp.static(row_along_line[f])(P, world, o, r, alpha, sums)
        return sums

    return SimpleNamespace(
        T=T, V3=V3, Problem=Problem, Newton=Newton, friction_cone=friction_cone, contact_term=contact_term,
        approximation=approximation, limit_term=limit_term,
        drive_term=drive_term, row_terms=row_terms, contact_params=contact_params, drive_params=drive_params,
        A_row_dot=A_row_dot, A_row_dots=A_row_dots, contact_rows_dot=contact_rows_dot, scalar_row_dot=scalar_row_dot,
        momentum_pass=momentum_pass, evaluate_rows=evaluate_rows, jt_gamma=jt_gamma, gradient_pass=gradient_pass,
        newton_stop=newton_stop, direction_rows=direction_rows, direction_sums=direction_sums,
        cost_along_line=cost_along_line)


@built_once()
def hessian_functions(T, TL) -> SimpleNamespace:
    """``hessian_rows``: rows of H = A + JᵀGJ and −∇ℓ in the linear-solve scalar ``TL`` (built once);
    ``hessian_row`` one row, from ``A_terms`` and ``constraint_terms`` (each touching contact's
    ``contact_terms``, rolled loops as :func:`rolled_sums`, then the scalar rows)."""
    f = row_functions(T)
    Problem, V3 = f.Problem, f.V3

    @wp.func_native(_native(_ROLLED_HESSIAN_CONTACT, SCALAR=T, LSCALAR=TL))
    def contact_terms(J: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int), ncols: wp.array2d(dtype=int),
                      H: wp.array3d(dtype=TL), world: int, i: int, c: int, GJi: V3):
        """Contact c's terms of row i of H up to the diagonal (rolled): for its listed columns
        k ≤ i in ascending order, H[i, k] + TL(G J_i · J_k), J_k = T(J_c[:, k])."""
        ...

    @wp.func_native(_native(_ROLLED_HESSIAN_A, LSCALAR=TL))
    def A_terms(A: wp.array3d(dtype=wp.float64), H: wp.array3d(dtype=TL), world: int, i: int):
        """H[i, k] = TL(A[i, k]) for k ≤ i (rolled)."""
        ...

    @wp.func
    def constraint_terms(P: Problem, world: int, i: int, H: wp.array3d(dtype=TL)):
        """Row i of H up to the diagonal, after its A part: + the terms of the contacts touching
        DOF i, then of the scalar rows touching it with G ≠ 0, in row order."""
        for u in range(P.dof_ncontacts[world, i]):
            c = P.dof_contacts[world, i, u]
            r = 3 * c
            Ji = V3(T(P.contact_J[world, r, i]), T(P.contact_J[world, r + 1, i]), T(P.contact_J[world, r + 2, i]))
            GJi = wp.transpose(P.contact_G[world, c]) * Ji
            contact_terms(P.contact_J, P.contact_cols, P.contact_ncols, H, world, i, c, GJi)
        for u in range(P.dof_nrows[world, i]):
            r = P.dof_rows[world, i, u]
            Gr = P.row_G[world, r]
            Jr = P.row_J[world, r, i]
            if Gr != T(0.0):
                for t in range(P.row_ncols[world, r]):
                    k = P.row_cols[world, r, t]
                    if k > i:
                        break
                    H[world, i, k] = H[world, i, k] + TL(Gr * T(Jr) * T(P.row_J[world, r, k]))

    @wp.func
    def hessian_row(P: Problem, world: int, i: int, H: wp.array3d(dtype=TL)):
        """Row i of H = A + JᵀGJ up to the diagonal, in TL: A, then the contacts touching DOF i,
        then the scalar rows, in row order (the Cholesky reads nothing else; the padding rows and
        columns hold the identity from allocation)."""
        A_terms(P.A, H, world, i)
        constraint_terms(P, world, i, H)

    @wp.func
    def hessian_rows(P: Problem, world: int, lane: int, stride: int, H: wp.array3d(dtype=TL),
                     rhs: wp.array3d(dtype=TL)):
        """Rows i = lane, lane + stride, … of H (lower triangle) and of rhs = −∇ℓ, in TL."""
        for i in range(lane, P.nv, stride):
            rhs[world, i, 0] = TL(-P.grad[world, i])
            hessian_row(P, world, i, H)

    return SimpleNamespace(TL=TL, hessian_row=hessian_row, hessian_rows=hessian_rows, A_terms=A_terms,
                           constraint_terms=constraint_terms, contact_terms=contact_terms)
