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

import argparse
import json
import sys

__all__ = ["read_runs", "series", "plot", "main"]

DEFAULT_OUT = "benchmark.png"


def read_runs(path: str) -> list[dict]:
    """The runs of one results file (a ``{"runs": [...]}`` object, or one run object)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"results file: cannot read {path!r} ({e.strerror})") from None
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
    for r in runs:
        missing = {"label", "num_worlds", "world_steps_per_s", "valid"} - set(r)
        if missing:
            raise ValueError(f"results file: a run in {path!r} lacks {sorted(missing)}")
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


def plot(runs: list[dict], path: str, title: str | None = None) -> None:
    """Write the throughput plot of ``runs`` to ``path`` (needs matplotlib)."""
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sap-plot-benchmark", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="JSON files written by sap-benchmark --out")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"PNG to write (default {DEFAULT_OUT})")
    parser.add_argument("--title", default=None, help="plot title (default: scene and device)")
    args = parser.parse_args(argv)
    try:
        runs = [r for path in args.results for r in read_runs(path)]
        if not runs:
            raise ValueError("results file: no runs to plot")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("matplotlib is not installed (pip install -e \".[plot]\")") from None
    except ValueError as e:
        print(f"sap-plot-benchmark: error: {e}", file=sys.stderr)
        return 2
    plot(runs, args.out, args.title)
    print(f"plot of {len(runs)} runs written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
