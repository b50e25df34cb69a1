"""``sap-inspect``: one time step of one world, taken apart, as a self-contained HTML report.

    sap-inspect box_stack --step 10
    sap-inspect sphere_slide --step 0 --preset drake --line-search armijo_decay --out slide.html
    sap-inspect box_stack --step 10 --compare-presets approx32 drake
    sap-inspect humanoid --step 40 --backend gpu --device cpu --num-worlds 4 --world 2

The scene is rolled out to step N (steps 0 … N−1 taken; step N goes from t = N·h to (N+1)·h),
then world W's step N is solved by sap_ref with every intermediate kept. The report (one HTML
file, figures embedded as PNG, no network needed to open it) shows: the scene with the contact
points, normals and impulses; Newton's convergence (ℓ, ‖D̃∇ℓ‖ against the stopping tolerance,
α); each line search's cost ℓ(v + αΔv) along α with its probes and the accepted α; each
contact's friction-cone regime per iterate and γ against the cone; under the ``lagged`` and
``similar`` approximations each contact's Hunt–Crossley quantities (fₑ₀, vₙ₀, n₀, ε_s, the
velocity v̂ where n vanishes, vₙ and n at the solution, the normal and friction regimes); H's
structure and condition number and v* against v₁; each holonomic constraint row (g₀, its rate
at the solution, v̂, R, the regime and the impulse); and a text of what happened.
``--approximation`` picks the contact approximation (default: the scene file's, else sap).

``--compare-presets A B`` solves the same step (same state, same contacts; rolled out with A)
with both presets and puts the two solves side by side. ``--backend gpu`` rolls out with
sap_gpu instead, takes step N on sap_gpu, re-runs world W's step in sap_ref from sap_gpu's state
and contacts, and reports how far the two solves are apart.
"""

from __future__ import annotations

import base64
import html
import json
import os
import sys

import numpy as np

from sap_common.config import PRESETS
from sap_tools.cli import (
    LINE_SEARCH_CHOICES,
    LINEAR_SOLVER_CHOICES,
    PRESET_CHOICES,
    atomic_output,
    check_flags,
    check_out,
    entry_point,
    fail,
    load_scene_arg,
    parser,
    scene_solver_kwargs,
    warp_device,
)
from sap_tools.progress import Progress
from sap_tools.step_capture import (
    REGIME_NAMES,
    StepCapture,
    capture_step,
    compare_backends,
    gpu_step,
    holonomic_rows,
    hunt_crossley_rows,
    rollout,
    status_text,
    summary,
)

__all__ = ["report_html", "write_report", "inspect_scene", "main"]

PROG = "sap-inspect"
DEFAULT_COMPARE = ("approx32", "drake")

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1300px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: right; } th { background: #f4f4f4; }
td.l, th.l { text-align: left; } img { max-width: 100%; } .summary li { margin: 0.2em 0; }
.cols { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; } .bad { color: #b00; font-weight: bold; }
"""


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _table(head: list[str], rows: list[list], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{html.escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _settings(cap: StepCapture) -> str:
    c = cap.config
    rows = [["preset", c.contact_preset_variant], ["contact approximation", c.discrete_contact_approximation],
            ["line search", c.line_search_variant],
            ["linear solver", c.contact_linear_solver], ["weights", c.contact_weight_mode],
            ["contact point", c.contact_point_mode], ["position integration", c.position_integration],
            ["max Newton iterations", c.max_iterations],
            ["optimality ε_a / ε_r", f"{c.optimality_abs_tol:g} / {c.optimality_rel_tol:g}"],
            ["cost ε_a / ε_r", f"{c.cost_abs_tol:g} / {c.cost_rel_tol:g}"], ["h [s]", f"{cap.dt:g}"]]
    if c.discrete_contact_approximation != "sap":
        rows.append(["stiction tolerance v_s [m/s]", f"{c.stiction_tolerance:g}"])
    return _table(["setting", "value"], rows, left=2)


def _iteration_table(cap: StepCapture) -> str:
    if not cap.evaluations:
        return ""
    hist = cap.result.solve.history
    rows = []
    for k, ev in enumerate(cap.evaluations):
        h = hist[k] if k < len(hist) else None
        rows.append([k, f"{ev.ell:.9e}", f"{cap.residuals[k]:.3e}", f"{cap.tolerances[k]:.3e}",
                     f"{cap.conditions[k]:.3g}", "" if h is None else f"{h.alpha:.4g}",
                     "" if h is None else h.line_search.iterations])
    return _table(["k", "ℓ(v_k) [J]", "‖D̃∇ℓ‖", "tolerance", "cond(H)", "α_k", "ℓ evaluations"], rows, left=0)


def _contact_table(cap: StepCapture) -> str:
    C = cap.contact_count
    if not C or cap.result.solve is None:
        return ""
    g, geo, modes = cap.result.contact_impulses, cap.result.contacts, cap.modes
    rows = [[c, cap.contact_names[c], f"{geo.phi0[c] * 1e3:.4f}", f"{geo.mu[c]:.3g}", f"{geo.ke[c]:.3g}",
             " → ".join(REGIME_NAMES[int(m)] for m in _runs(modes[:, c])),
             f"{g[c, 0]:.3e}", f"{g[c, 1]:.3e}", f"{g[c, 2]:.3e}"] for c in range(C)]
    return _table(["#", "shapes", "φ₀ [mm]", "μ", "k [N/m]", "regime over the iterations", "γ_t1 [N·s]",
                   "γ_t2 [N·s]", "γ_n [N·s]"], rows, left=2)


def _hunt_crossley_table(cap: StepCapture) -> str:
    rows = hunt_crossley_rows(cap)
    if not rows:
        return ""
    table = [[r["contact"], r["shapes"], f"{r['k']:.3g}", f"{r['d']:.3g}", f"{r['fe0']:.4g}", f"{r['vn0']:.4g}",
              f"{r['n0']:.4g}", f"{r['eps_s']:.3g}", f"{r['v_hat']:.4g}", f"{r['vn']:.4g}", f"{r['n']:.4g}",
              f"{r['friction_bound']:.4g}", r["normal_regime"], r["friction_regime"]] for r in rows]
    return ("<h2>Hunt–Crossley quantities</h2><p>Fixed for the step: fₑ₀ = −kφ₀, n₀ = (hfₑ₀)₊(1 − d vₙ₀)₊ "
            "(vₙ₀ the normal velocity at v₀), ε_s = max(v_s, μσw n₀); n(z) = h(fₑ₀ − hkz)₊(1 − dz)₊ vanishes "
            "from v̂ = min(fₑ₀/(hk), 1/d) on. At the solution: vₙ, n = γₙ and the friction bound μ n_f "
            "(n_f = n₀ lagged, n similar).</p>"
            + _table(["#", "shapes", "k [N/m]", "d [s/m]", "fₑ₀ [N]", "vₙ₀ [m/s]", "n₀ [N·s]", "ε_s [m/s]",
                      "v̂ [m/s]", "vₙ [m/s]", "n [N·s]", "μ n_f [N·s]", "normal regime", "friction"], table,
                     left=2))


def _holonomic_table(cap: StepCapture) -> str:
    rows = holonomic_rows(cap)
    if not rows:
        return ""
    table = [[r["row"], r["constraint"], r["type"].lower(), r["component"], f"{r['g0']:.4g}", f"{r['rate']:.4g}",
              f"{r['v_hat']:.4g}", f"{r['R']:.3g}", r["regime"], f"{r['gamma']:.4g}"] for r in rows]
    return ("<h2>Holonomic constraints</h2><p>Each row's g₀ (its function at q₀) [m or rad], its rate ġ = J v₁ "
            "at the solution, the bias v̂ = −g₀/(h + τ), R and the regime it sets (near-rigid: "
            "R = β²w/(4π²), τ = h) and the impulse γ = (v̂ − ġ)/R "
            "(docs/formulation.md § Holonomic constraints).</p>"
            + _table(["row", "constraint", "type", "component", "g₀", "ġ = J v₁", "v̂", "R", "regime", "γ"], table,
                     left=3))


def _runs(seq) -> list[int]:
    """The sequence with repeats collapsed (sliding, sliding, sticking → sliding, sticking)."""
    out = []
    for m in seq:
        if not out or out[-1] != m:
            out.append(int(m))
    return out


def _backend_table(cap: StepCapture) -> str:
    b = cap.backends
    if b is None:
        return ""
    rows = [[name, f"{err:.3e}", f"{scale:.3e}"] for name, err, scale in b.rows]
    verdict = ("within" if b.within_bound else '<span class="bad">OUTSIDE</span>')
    return (f"<h2>sap_gpu against sap_ref</h2><p>sap_gpu ran the batch ({b.num_worlds} worlds on "
            f"{html.escape(b.device)}); "
            f"world {cap.world}'s step was re-run in sap_ref from sap_gpu's state and contacts. Newton iterations: "
            f"{b.gpu_newton} (sap_gpu), {b.ref_newton} (sap_ref); status {status_text(b.gpu_status)} / "
            f"{status_text(b.ref_status)}. ‖v₁(gpu) − v₁(ref)‖_A = {b.distance_A:.3e} is {verdict} the bound "
            f"‖∇ℓ(v₁(gpu))‖_A⁻¹ + ‖∇ℓ(v₁(ref))‖_A⁻¹ = {b.bound_A:.3e} (ℓ is strongly convex in the A-norm, so "
            f"each stopping point lies within its gradient's A⁻¹-norm of the exact minimizer).</p>"
            + _table(["quantity", "max |gpu − ref|", "max |ref|"], rows))


def _capture_body(cap: StepCapture, dpi: int) -> str:
    from sap_tools.inspector_figures import figures, png

    parts = ['<ul class="summary">' + "".join(f"<li>{html.escape(s)}</li>" for s in summary(cap)) + "</ul>",
             _settings(cap), _backend_table(cap)]
    for title, fig in figures(cap):
        parts.append(f"<h2>{html.escape(title)}</h2>{_img(png(fig, dpi), title)}")
        if title.startswith("Newton"):
            parts.append(_iteration_table(cap))
        if title.startswith("Friction"):
            parts.append(_contact_table(cap))
            parts.append(_hunt_crossley_table(cap))
    parts.append(_holonomic_table(cap))
    return "\n".join(parts)


def _difference_table(a: StepCapture, b: StepCapture) -> str:
    ra, rb = a.result, b.result
    rows = [["‖v₁(A) − v₁(B)‖∞ [m/s, rad/s]", f"{np.abs(ra.v1 - rb.v1).max(initial=0.0):.3e}"],
            ["‖q₁(A) − q₁(B)‖∞", f"{np.abs(ra.q1 - rb.q1).max(initial=0.0):.3e}"],
            ["Newton iterations A / B", f"{a.newton_iterations} / {b.newton_iterations}"]]
    if a.contact_count and ra.solve is not None and rb.solve is not None:
        rows.append(["max |γ(A) − γ(B)| [N·s]", f"{np.abs(ra.contact_impulses - rb.contact_impulses).max():.3e}"])
        rows.append(["contacts in a different regime at the solution",
                     str(int(np.sum(a.modes[-1] != b.modes[-1])))])
    return _table(["A = " + a.config.contact_preset_variant + ", B = " + b.config.contact_preset_variant, ""], rows, 2)


def report_html(captures: list[StepCapture], dpi: int = 80) -> str:
    """The report of one capture, or of two side by side (``--compare-presets``), as one HTML page."""
    first = captures[0]
    title = f"sap-inspect: {first.scene or 'scene'}, step {first.step}, world {first.world}"
    if len(captures) == 1:
        body = _capture_body(first, dpi)
    else:
        names = " vs ".join(c.config.contact_preset_variant for c in captures)
        body = (f"<p>The same step, from the same state and contacts, solved with two presets "
                f"({html.escape(names)}).</p>"
                + _difference_table(*captures) + '<div class="cols">'
                + "".join(f"<div><h2>{html.escape(c.config.contact_preset_variant)}</h2>{_capture_body(c, dpi)}</div>"
                          for c in captures) + "</div>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")


def write_report(captures: list[StepCapture], path: str, dpi: int = 80) -> str:
    """Write :func:`report_html` to ``path`` atomically (a temporary file beside it, renamed when
    complete); returns ``path``."""
    text = report_html(captures, dpi)
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def inspect_scene(scene, step: int, world: int = 0, *, solver_kwargs: dict, compare: tuple | None = None,
                  backend: str = "ref", device=None, quiet: bool = True) -> list[StepCapture]:
    """Roll ``scene`` out to ``step`` and capture world ``world``'s step (two captures with ``compare``)."""
    if not 0 <= world < scene.sap_model.num_worlds:
        raise ValueError(f"--world: must lie in [0, {scene.sap_model.num_worlds}), got {world}")
    kw = {k: v for k, v in solver_kwargs.items() if k != "contact_preset_variant"}
    preset = compare[0] if compare else solver_kwargs.get("contact_preset_variant", "approx32")
    label = f"{scene.name} → step {step} ({'sap_gpu' if backend == 'gpu' else 'sap_ref'}, {preset})"
    with Progress(step, label, enabled=not quiet and step > 0) as bar:
        if backend == "gpu":
            state, contacts, out = gpu_step(scene, step, world, device, progress=bar.update,
                                            contact_preset_variant=preset, **kw)
        else:
            state, contacts = rollout(scene, step, progress=bar.update, contact_preset_variant=preset, **kw)
    presets = compare if compare else (preset,)
    caps = [capture_step(scene.sap_model, state, scene.control, contacts, scene.dt, world, scene=scene.name,
                         step=step, contact_preset_variant=p, **kw) for p in presets]
    if backend == "gpu":
        compare_backends(caps[0], out, scene.sap_model.num_worlds)
    return caps


def _check_args(args) -> tuple | None:
    """Flag checks before any work; returns the presets to compare (or None)."""
    check_flags(args.preset, args.line_search)
    if args.step < 0:
        raise ValueError(f"--step: must be >= 0, got {args.step}")
    if args.world < 0:
        raise ValueError(f"--world: must be >= 0, got {args.world}")
    if args.num_worlds is not None and args.num_worlds <= args.world:
        raise ValueError(f"--num-worlds: must be > --world ({args.world}), got {args.num_worlds}")
    if args.backend not in ("ref", "gpu"):
        raise ValueError(f"--backend: must be one of ref, gpu, got {args.backend!r}")
    if args.device is not None and args.backend != "gpu":
        raise ValueError("--device: only applies to --backend gpu")
    if args.linear_solver is not None and args.linear_solver not in LINEAR_SOLVER_CHOICES.split(", "):
        raise ValueError(f"--linear-solver: must be one of {LINEAR_SOLVER_CHOICES}, got {args.linear_solver!r}")
    compare = None
    if args.compare_presets is not None:
        if args.backend == "gpu":
            raise ValueError("--compare-presets: compares sap_ref solves; leave out --backend gpu")
        if args.preset is not None:
            raise ValueError("--compare-presets: names both presets; leave out --preset")
        compare = tuple(args.compare_presets) or DEFAULT_COMPARE
        if len(compare) != 2:
            raise ValueError(f"--compare-presets: give two presets (or none for {' '.join(DEFAULT_COMPARE)}), "
                             f"got {len(compare)}")
        for p in compare:
            if p not in PRESETS:
                check_flags(p, None)  # raises naming the valid presets (aliases pass)
    return compare


@entry_point("sap-inspect")
def main(argv=None) -> int:
    p = parser(PROG, __doc__)
    p.add_argument("scene", help="built-in scene name (sap-scenes lists them), JSON scene file or MJCF file")
    p.add_argument("--step", type=int, required=True, help="the step to inspect (steps 0 … N−1 are taken first); at "
                   "most the scene's length − 1 unless --past-end")
    p.add_argument("--past-end", action="store_true",
                   help="allow a --step at or past the scene's length (rolls out that many steps first)")
    p.add_argument("--world", type=int, default=0, help="world of the batch to inspect (default 0)")
    p.add_argument("--num-worlds", type=int, default=None, help="worlds in the batch (default: --world + 1)")
    p.add_argument("--preset", default=None, help=f"contact_preset_variant: one of {PRESET_CHOICES}")
    p.add_argument("--line-search", default=None, help=f"line_search_variant: one of {LINE_SEARCH_CHOICES}")
    p.add_argument("--linear-solver", default=None, help=f"contact_linear_solver: one of {LINEAR_SOLVER_CHOICES}")
    p.add_argument("--approximation", default=None, choices=("sap", "lagged", "similar"),
                   help="discrete_contact_approximation (default: the scene file's, else sap)")
    p.add_argument("--compare-presets", nargs="*", default=None, metavar="PRESET",
                   help=f"solve the step with two presets side by side (default {' '.join(DEFAULT_COMPARE)})")
    p.add_argument("--backend", default="ref", help="ref (roll out with sap_ref, default) or gpu (sap_gpu, "
                   "then the world is re-run in sap_ref and the two solves compared)")
    p.add_argument("--device", default=None,
                   help="Warp device for --backend gpu (default: cuda:0 where present, else cpu)")
    p.add_argument("--out", default=None, help="HTML file (default sap_inspect_<scene>_<step>.html)")
    p.add_argument("--dpi", type=int, default=80, help="resolution of the embedded figures (default 80)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        compare = _check_args(args)
        if args.dpi < 20:
            raise ValueError(f"--dpi: must be >= 20, got {args.dpi}")
        device = warp_device(args.device) if args.backend == "gpu" else None
        scene = load_scene_arg(args.scene, args.num_worlds or args.world + 1)
        if args.step >= scene.num_steps and not args.past_end:
            raise ValueError(f"--step: {args.step} is past the end of {scene.name} ({scene.num_steps} steps: "
                             f"0 … {scene.num_steps - 1}); rolling out {args.step} steps first may take long: "
                             "pass --past-end to do it anyway")
        out = check_out("--out", args.out or f"sap_inspect_{scene.name}_{args.step}.html")
        kwargs, source = scene_solver_kwargs(scene, args.preset, args.line_search)
        if args.linear_solver is not None:
            kwargs["contact_linear_solver"] = args.linear_solver
        if args.approximation is not None:
            kwargs["discrete_contact_approximation"] = args.approximation
        if compare:
            kwargs["contact_preset_variant"] = compare[0]
        caps = inspect_scene(scene, args.step, args.world, solver_kwargs=kwargs, compare=compare,
                             backend=args.backend, device=device, quiet=args.quiet)
    except ValueError as e:
        return fail(PROG, e)
    write_report(caps, out, args.dpi)
    print(source)
    for cap in caps:
        print("\n".join(summary(cap)))
    print(f"report written to {out} ({os.path.getsize(out) / 1024:.0f} KiB)")
    if args.json:
        print(json.dumps(dict(scene=scene.name, step=args.step, world=args.world, report=out,
                              solves=[dict(preset=c.config.contact_preset_variant,
                                           line_search=c.config.line_search_variant,
                                           approximation=c.config.discrete_contact_approximation,
                                           newton_iterations=c.newton_iterations, status=int(c.result.status),
                                           contacts=c.contact_count, hunt_crossley=hunt_crossley_rows(c),
                                           holonomic=holonomic_rows(c),
                                           summary=summary(c)) for c in caps],
                              backends=None if caps[0].backends is None else dict(
                                  device=caps[0].backends.device, distance_A=caps[0].backends.distance_A,
                                  bound_A=caps[0].backends.bound_A,
                                  rows={n: dict(max_abs_diff=e, ref_scale=s) for n, e, s in caps[0].backends.rows}))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
