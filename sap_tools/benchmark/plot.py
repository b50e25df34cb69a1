"""``sap-plot-benchmark``: throughput against num_worlds from ``sap-benchmark`` results, as a PNG.

    sap-benchmark humanoid --num-worlds 1024 4096 8192 --preset approx32 approx64 drake --vs-mjwarp --out results.json
    sap-plot-benchmark results.json                          # writes benchmark.png
    sap-plot-benchmark gpu.json cpu.json --out sweep.png --title "humanoid, dt 5 ms"

Reads one or more JSON files written by ``sap-benchmark --out`` (or a saved ``--json`` line:
the last line of the file is used when the whole file is not one JSON object). One line per
sap_gpu preset and one for MuJoCo Warp: world-steps/s against num_worlds, both axes
logarithmic. Runs reported invalid are drawn as crosses. When the runs come from more than one
scene or device, the legend names them.
"""

from __future__ import annotations

import json
import math
import sys

from sap_tools.cli import atomic_output, entry_point, fail, parser, plot_path

__all__ = ["read_runs", "series", "figure", "plot", "main"]

DEFAULT_OUT = "benchmark.png"


def _check_run(r, where: str) -> None:
    """``ValueError`` naming ``where.field`` unless run ``r`` has the fields the plot reads, typed."""
    if not isinstance(r, dict):
        raise ValueError(f"{where}: expected a run object, got {type(r).__name__}")
    checks = (("label", lambda v: isinstance(v, str), "a string"),
              ("num_worlds", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
              ("world_steps_per_s", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v) and v > 0, "a finite number > 0"),
              ("valid", lambda v: isinstance(v, bool), "true or false"))
    for key, ok, expected in checks:
        if key not in r:
            raise ValueError(f"{where}.{key}: missing; expected {expected}")
        if not ok(r[key]):
            raise ValueError(f"{where}.{key}: expected {expected}, got {r[key]!r}")
    if r.get("backend") is not None and not isinstance(r["backend"], str):
        raise ValueError(f"{where}.backend: expected a string, got {r['backend']!r}")


def read_runs(path: str) -> list[dict]:
    """The runs of one results file (a ``{"runs": [...]}`` object, or one run object); ``ValueError``
    naming the file and the field for anything the plot could not read."""
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"results file: cannot read {path!r} ({getattr(e, 'strerror', None) or e})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            obj = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            obj = None
    if not isinstance(obj, dict):
        raise ValueError(f"results file: {path!r} holds no sap-benchmark JSON object")
    runs = obj.get("runs", [obj])
    if not isinstance(runs, list) or not runs:
        raise ValueError(f"results file {path!r}: runs: expected a non-empty list of runs, got {runs!r}"[:300])
    for i, r in enumerate(runs):
        _check_run(r, f"results file {path!r}: runs[{i}]")
    return runs


def series(runs: list[dict]) -> dict[str, list[dict]]:
    """Runs grouped into plot lines (label, plus scene and device when several occur), sorted by num_worlds."""
    many = len({(r.get("scene"), r.get("device")) for r in runs}) > 1
    out: dict[str, list[dict]] = {}
    for r in runs:
        name = r["label"] if r.get("backend") != "mujoco_warp" else "MuJoCo Warp"
        if r.get("backend") == "sap_gpu":
            name = f"sap_gpu {name}"
        if many:
            name += f" ({r.get('scene')}, {r.get('device')})"
        out.setdefault(name, []).append(r)
    return {k: sorted(v, key=lambda r: r["num_worlds"]) for k, v in out.items()}


def figure(runs: list[dict], title: str | None = None):
    """The throughput figure of ``runs`` (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 5))
    for name, rs in series(runs).items():
        x = [r["num_worlds"] for r in rs]
        y = [r["world_steps_per_s"] for r in rs]
        style = dict(linestyle="--") if "MuJoCo" in name else {}
        line, = ax.plot(x, y, marker="o", label=name, **style)
        bad = [(r["num_worlds"], r["world_steps_per_s"]) for r in rs if not r["valid"]]
        if bad:
            ax.plot(*zip(*bad), linestyle="none", marker="x", markersize=12, color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    worlds = sorted({r["num_worlds"] for r in runs})
    ax.set_xticks(worlds, [str(w) for w in worlds])  # the swept values, as plain numbers
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("num_worlds")
    ax.set_ylabel("world-steps / s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    scenes = sorted({str(r.get("scene")) for r in runs})
    devices = sorted({str(r.get("hardware", r.get("device"))) for r in runs})
    ax.set_title(title or f"sap-benchmark: {', '.join(scenes)} on {', '.join(devices)}", fontsize=10)
    fig.tight_layout()
    return fig


def plot(runs: list[dict], path: str, title: str | None = None) -> None:
    """Write the throughput plot of ``runs`` to ``path`` (the format follows the extension)."""
    import matplotlib.pyplot as plt

    fig = figure(runs, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


@entry_point("sap-plot-benchmark")
def main(argv=None) -> int:
    p = parser("sap-plot-benchmark", __doc__, uses_warp=False)
    p.add_argument("results", nargs="+", help="JSON files written by sap-benchmark --out")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"plot file; its extension picks the format, none = .png (default {DEFAULT_OUT})")
    p.add_argument("--title", default=None, help="plot title (default: scene and device)")
    args = p.parse_args(argv)
    try:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("matplotlib is not installed (pip install -e \".[plot]\")") from None
        out = plot_path("--out", args.out)
        runs = [r for path in args.results for r in read_runs(path)]
    except ValueError as e:
        return fail("sap-plot-benchmark", e)
    with atomic_output(out) as tmp:
        plot(runs, tmp, args.title)
    print(f"plot of {len(runs)} runs written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
