"""The step inspector's figures, drawn with matplotlib from a :class:`~sap_tools.step_capture.StepCapture`.

Each ``fig_*`` function returns a matplotlib ``Figure``; :func:`figures` returns all of them with
their titles, and :func:`png` turns one into PNG bytes (the report embeds them, the viewer shows
them). Needs the ``plot`` extra (matplotlib); the Agg backend is used, so no display is needed.
"""

from __future__ import annotations

import io

import numpy as np

from sap_common import spatial
from sap_common.model import ShapeType
from sap_ref.constraints import NO_CONTACT, SLIDING, STICTION
from sap_ref.contact_solve import cost_along_line

from .shapes import body_colors, shape_mesh, shape_poses
from .step_capture import REGIME_NAMES, StepCapture

__all__ = ["figures", "png", "fig_scene", "fig_convergence", "fig_line_searches", "fig_regimes", "fig_hessian",
           "REGIME_COLORS", "MAX_LINE_SEARCH_PANELS"]

REGIME_COLORS = {STICTION: "#2b8cbe", SLIDING: "#e6550d", NO_CONTACT: "#bdbdbd"}
MAX_LINE_SEARCH_PANELS = 8  # more Newton iterations than this: the first 7 and the last are drawn
_SAMPLES = 120  # points of each drawn ℓ(v + αΔv) curve


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig, dpi: int = 80) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    _plt().close(fig)
    return buf.getvalue()


def _no_data(title: str, text: str):
    fig, ax = _plt().subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11)
    ax.set_title(title)
    return fig


def fig_scene(cap: StepCapture):
    """The bodies at the start of the step, the contact points, normals and impulses γ (on body 1)."""
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    plt = _plt()
    model, r = cap.model, cap.result
    body_q = cap.state.body_q[0]
    X = shape_poses(model, body_q)
    fig = plt.figure(figsize=(7, 6))
    ax = fig.add_subplot(projection="3d")
    pts = [body_q[:, :3]] if model.body_count else []
    C = cap.contact_count
    if C and r.contacts is not None:
        pts.append(0.5 * (r.contacts.p0 + r.contacts.p1))
    allp = np.concatenate(pts) if pts else np.zeros((1, 3))
    centre = 0.5 * (allp.min(0) + allp.max(0))
    extent = max(float(np.ptp(allp, axis=0).max()), 2 * float(np.max(model.shape_size, initial=0.05)), 0.2)
    colors = body_colors(model) / 255.0

    for s in range(model.shape_count):
        kind = ShapeType(int(model.shape_type[s]))
        v, f = shape_mesh(model, s, plane_size=1.6 * extent, n=12)
        if kind == ShapeType.PLANE:
            c_S = spatial.quat_rotate_inv(X[s, 3:], centre - X[s, :3])  # the patch is centred under the scene
            v = v + np.array([c_S[0], c_S[1], 0.0])
        w = spatial.transform_point(X[s], v)
        b = int(model.shape_body[s])
        face = (0.8, 0.8, 0.8, 0.25) if b < 0 else (*colors[b], 0.35)
        ax.add_collection3d(Poly3DCollection(w[f], facecolor=face, edgecolor=(0, 0, 0, 0.12), linewidth=0.3))
    if C and r.contacts is not None and r.solve is not None:
        p = 0.5 * (r.contacts.p0 + r.contacts.p1)
        n = r.contacts.R_WC[:, :, 2]
        g = r.contact_impulses_W
        modes = cap.modes[-1] if len(cap.evaluations) else np.full(C, NO_CONTACT)
        gmax = float(np.linalg.norm(g, axis=1).max(initial=0.0))
        scale = 0.3 * extent / gmax if gmax > 0 else 0.0
        ax.scatter(*p.T, color="k", s=12, depthshade=False)
        ax.quiver(*p.T, *(0.12 * extent * n).T, color="#636363", linewidth=0.8, arrow_length_ratio=0.2)
        for m in REGIME_NAMES:
            sel = modes == m
            if np.any(sel) and scale > 0:
                ax.quiver(*p[sel].T, *(scale * g[sel]).T, color=REGIME_COLORS[m], linewidth=1.8,
                          arrow_length_ratio=0.15, label=f"γ, {REGIME_NAMES[m]}")
        for c in range(C):
            ax.text(*(p[c] + 0.02 * extent), str(c), fontsize=7)
        note = f"impulse arrows: {1 / scale if scale else 0:.3g} N·s per m" if scale else "no impulse"
    else:
        note = "no contact"
    half = 0.6 * extent
    for set_lim, c0 in zip((ax.set_xlim, ax.set_ylim, ax.set_zlim), centre):
        set_lim(c0 - half, c0 + half)
    ax.set_box_aspect((1, 1, 1))
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_zlabel("z [m]")
    handles = ax.get_legend_handles_labels()[0]
    if handles:
        ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"t = {cap.t:.4g} s: contact points (numbered), normals (grey), impulses γ\n{note}", fontsize=10)
    fig.tight_layout()
    return fig


def fig_convergence(cap: StepCapture):
    """ℓ, ‖D̃∇ℓ‖ against the stopping tolerance, and the step length α, per Newton iteration."""
    if not cap.evaluations:
        return _no_data("Newton convergence", "nothing solved")
    plt = _plt()
    K = cap.newton_iterations
    k = np.arange(K + 1)
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    ell = np.array([ev.ell for ev in cap.evaluations], dtype=np.float64)
    ax[0].plot(k, ell, "o-", color="k")
    ax[0].set_xlabel("iterate k")
    ax[0].set_ylabel("ℓ(v_k) [J]")
    ax[0].set_title("cost")
    floor = np.finfo(float).tiny
    ax[1].semilogy(k, np.maximum(cap.residuals, floor), "o-", color="k", label="‖D̃∇ℓ(v_k)‖")
    ax[1].semilogy(k, np.maximum(cap.tolerances, floor), "--", color="tab:red", label="ε_a + ε_r·s (stop below)")
    ax[1].set_xlabel("iterate k")
    ax[1].set_title("optimality")
    ax[1].legend(fontsize=8)
    hist = cap.result.solve.history
    if hist:
        it = np.arange(1, K + 1)
        alphas = [h.alpha for h in hist]
        bars = ax[2].bar(it, alphas, color="tab:blue")
        for b, h in zip(bars, hist):
            ax[2].annotate(f"{h.line_search.iterations} eval", (b.get_x() + b.get_width() / 2, b.get_height()),
                           ha="center", va="bottom", fontsize=7)
        ax[2].set_xticks(it)
        ax[2].set_ylim(0, max(1.6, 1.15 * max(alphas)))
    else:
        ax[2].text(0.5, 0.5, "converged at v₀:\nno iteration", ha="center", va="center", transform=ax[2].transAxes)
    ax[2].set_xlabel("Newton iteration")
    ax[2].set_ylabel("accepted α")
    ax[2].set_title(f"{cap.config.line_search_variant} step length")
    for a in ax[:2]:
        a.set_xticks(k)
    fig.suptitle(f"Newton: {K} iteration{'s' if K != 1 else ''}", fontsize=11)
    fig.tight_layout()
    return fig


def _line_search_panels(K: int) -> list[int]:
    if K <= MAX_LINE_SEARCH_PANELS:
        return list(range(K))
    return list(range(MAX_LINE_SEARCH_PANELS - 1)) + [K - 1]


def fig_line_searches(cap: StepCapture):
    """Each line search: ℓ(v + αΔv) − ℓ(v) along α, the probes in order, the accepted α."""
    hist = [] if cap.result.solve is None else cap.result.solve.history
    if not hist:
        return _no_data("Line searches", "no Newton iteration, so no line search")
    plt = _plt()
    panels = _line_search_panels(len(hist))
    cols = min(4, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(max(6.5, 3.4 * cols), 2.9 * rows), squeeze=False)
    p = cap.result.problem
    for ax, k in zip(axes.flat, panels):
        h = hist[k]
        phi = cost_along_line(p, cap.evaluations[k], h.dv)
        probes = np.array([(a, f) for a, f, _ in h.line_search.probes]) if h.line_search.probes else np.zeros((0, 2))
        hi = max(1.5, float(probes[:, 0].max(initial=0.0)), h.alpha) * 1.05
        a = np.linspace(0.0, hi, _SAMPLES)
        phi0 = h.ell
        ax.plot(a, [phi(x)[0] - phi0 for x in a], color="k", linewidth=1.2)
        if len(probes):
            ax.plot(probes[:, 0], probes[:, 1] - phi0, "o", color="tab:orange", markersize=4, label="probes")
            for i, (x, y) in enumerate(probes):
                ax.annotate(str(i + 1), (x, y - phi0), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.axvline(h.alpha, color="tab:green", linestyle="--", linewidth=1.0,
                   label=f"accepted α = {h.alpha:.3g}" + (" (failed)" if h.line_search.failed else ""))
        ax.axhline(0.0, color="#999", linewidth=0.6)
        ax.set_title(f"iteration {k + 1}", fontsize=9)
        ax.set_xlabel("α", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("ℓ(v + αΔv) − ℓ(v) [J]", fontsize=8)
    fig.suptitle(f"{cap.config.line_search_variant}: cost along each Newton direction", fontsize=11)
    fig.tight_layout()
    return fig


def fig_regimes(cap: StepCapture):
    """Each contact's friction-cone region per iterate, and γ against the cone at the solution."""
    C = cap.contact_count
    if C == 0 or not cap.evaluations:
        return _no_data("Friction-cone regimes", "no contact in this step")
    plt = _plt()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    modes = cap.modes
    fig, ax = plt.subplots(1, 2, figsize=(12, max(3.0, 0.22 * C + 1.6)),
                           gridspec_kw={"width_ratios": [1.3, 1]})
    order = (STICTION, SLIDING, NO_CONTACT)
    cmap = ListedColormap([REGIME_COLORS[m] for m in order])
    index = np.vectorize({m: i for i, m in enumerate(order)}.get)(modes.T)
    ax[0].imshow(index, cmap=cmap, vmin=-0.5, vmax=2.5, aspect="auto", interpolation="nearest")
    ax[0].set_xticks(range(modes.shape[0]))
    ax[0].set_xlabel("iterate k (0 = warm start v₀)")
    ax[0].set_yticks(range(C))
    ax[0].set_yticklabels([f"{c}: {n}" for c, n in enumerate(cap.contact_names)], fontsize=7)
    ax[0].legend(handles=[Patch(color=REGIME_COLORS[m], label=REGIME_NAMES[m]) for m in order],
                 fontsize=7, loc="upper right", bbox_to_anchor=(1.0, 1.12), ncol=3, frameon=False)
    ax[0].set_title("regime per iterate", fontsize=10, loc="left")
    g = cap.result.contact_impulses
    gn, gt = g[:, 2], np.linalg.norm(g[:, :2], axis=1)
    hc = cap.result.hunt_crossley
    lagged = hc is not None and not hc.similar
    if lagged:  # lagged friction is bounded by μ n₀, the previous step's normal impulse, not by μ γ_n
        gn = hc.n0.astype(np.float64)
    mu = cap.result.contacts.mu
    top = max(float(gn.max(initial=0.0)), 1e-30) * 1.1
    for m_val in np.unique(np.round(mu, 12)):
        ax[1].plot([0, top], [0, m_val * top], color="#555", linewidth=0.8, linestyle="--")
        ax[1].annotate(f"μ = {m_val:.3g}", (top, m_val * top), fontsize=7, ha="right", va="bottom")
    for m in order:
        sel = modes[-1] == m
        if np.any(sel):
            ax[1].scatter(gn[sel], gt[sel], color=REGIME_COLORS[m], s=22, label=REGIME_NAMES[m], zorder=3)
    for c in range(C):
        ax[1].annotate(str(c), (gn[c], gt[c]), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax[1].set_xlabel("n₀ (lagged: the previous step's normal impulse) [N·s]" if lagged else "γ_n [N·s]")
    ax[1].set_ylabel("‖γ_t‖ [N·s]")
    ax[1].set_xlim(left=0)
    ax[1].set_ylim(bottom=0)
    ax[1].set_title("γ against its bound ‖γ_t‖ ≤ μ n₀ (solution)" if lagged else
                    "γ against the cone ‖γ_t‖ ≤ μ γ_n (solution)", fontsize=10)
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_hessian(cap: StepCapture):
    """H's structure and condition number at the solution, and v* against v₁ (and v₀)."""
    if not cap.hessians or cap.hessians[-1].size == 0:
        return _no_data("H and velocities", "no constraint row: nothing solved, v₁ = v*")
    plt = _plt()
    r = cap.result
    H = cap.hessians[-1]
    dofs = r.problem.dofs
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [1, 1.5]})
    # Entries below ε·max|H| are rounding left by J's zero columns: drawn (and counted) as zeros.
    structural = np.abs(H) > np.finfo(float).eps * np.abs(H).max()
    mag = np.log10(np.abs(H), out=np.full(H.shape, np.nan), where=structural)
    im = ax[0].imshow(mag, cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax[0], fraction=0.046, label="log₁₀|H_ij| (blank: 0)")
    nnz = int(np.count_nonzero(structural))
    ax[0].set_title(f"H = A + JᵀGJ at the solution ({len(dofs)}×{len(dofs)}, {nnz} non-zeros)\n"
                    f"cond(H) = {cap.conditions[-1]:.3g}; at v₀: {cap.conditions[0]:.3g}", fontsize=9)
    names = [cap.dof_names[d] for d in dofs]
    if len(dofs) <= 30:
        ax[0].set_xticks(range(len(dofs)))
        ax[0].set_xticklabels(names, rotation=90, fontsize=6)
        ax[0].set_yticks(range(len(dofs)))
        ax[0].set_yticklabels(names, fontsize=6)
    nv = cap.model.joint_dof_count
    x = np.arange(nv)
    v0 = cap.result.solve.history[0].v if cap.result.solve.history else None
    ax[1].axhline(0.0, color="#999", linewidth=0.6)
    ax[1].plot(x, r.free_motion.v_star, "s", color="tab:gray", markersize=5, label="v* (free motion)")
    ax[1].plot(x, r.v1, "o", color="tab:red", markersize=4, label="v₁ (solution)")
    if v0 is not None:
        full_v0 = r.free_motion.v_star.copy()
        full_v0[dofs] = v0
        ax[1].plot(x, full_v0, "x", color="k", markersize=4, label="v₀ (warm start)")
    ax[1].vlines(x, r.free_motion.v_star, r.v1, color="tab:red", linewidth=0.8, alpha=0.6)
    ax[1].set_xticks(x)
    ax[1].set_xticklabels(cap.dof_names, rotation=90, fontsize=6 if nv > 12 else 8)
    ax[1].set_ylabel("velocity [m/s, rad/s] (SAP order)")
    ax[1].set_title("free motion v* against the solution v₁", fontsize=10)
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def figures(cap: StepCapture) -> list[tuple[str, object]]:
    """``[(title, Figure), …]``: every figure of the report, in order."""
    return [("The scene at the start of the step", fig_scene(cap)),
            ("Newton convergence", fig_convergence(cap)),
            ("Line searches", fig_line_searches(cap)),
            ("Friction-cone regime of each contact", fig_regimes(cap)),
            ("H and the velocities", fig_hessian(cap))]
