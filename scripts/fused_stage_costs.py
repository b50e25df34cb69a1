"""Where the fused Newton kernel's time goes, by doing one stage twice.

    python scripts/fused_stage_costs.py OUT [sap-benchmark arguments ...]

writes OUT/<variant>/sap_gpu, a copy of sap_gpu whose fused kernel (sap_gpu/contact_solve_fused.py)
runs one stage twice per Newton iteration, with a block barrier between, so the results and the
iterations are unchanged: ``eval2`` the evaluation (A(v − v*), the rows' γ and G, ∇ℓ), ``hess2``
H = A + JᵀGJ, ``chol2`` the tile Cholesky factor and solve (one tile: nv ≤ 32), ``lchol2`` the
factor and solve in the lanes' registers (runs with ``--fused-cholesky lanes``), ``ls2`` the line
search. With
sap-benchmark arguments it then runs sap-benchmark once on the checkout's sap_gpu (``base``) and
once on each copy, each in its own process, and prints every run's ms/step and its difference
from ``base``: what doing the stage twice costs. On a CUDA device, pass ``--cuda-output cubin``
and compile the copies beforehand (each is a new module) or let the first step compile them.

The differences are upper bounds of each stage's share rather than a partition: a copy's kernel
can need more registers than the original (fewer worlds per multiprocessor), and a larger kernel
body. ``sap-precompile ... --resources`` run in the same way prints the registers of each copy.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FUSED = ROOT / "sap_gpu" / "contact_solve_fused.py"

# Each stage: the whole lines of the Newton loop to repeat, with their indentation (they must
# occur once in the kernel, each starting a line).
STAGES = {
    "eval2": ("            ell_A = zero\n"
              "            if wp.static(shared):\n"
              "                ell_A = momentum_pass_shared(P, world, lane, bd, As, v_star_s)\n"
              "            else:\n"
              "                ell_A = f.momentum_pass(P, world, lane, bd)\n"
              "            ell_lane = f.evaluate_rows(P, world, lane, bd, ell_A)\n"
              "            block_sync(lane)  # γ of every row, before Jᵀγ\n"
              "            r2, sA, sJ, bad = f.gradient_pass(P, world, lane, bd)\n"),
    "hess2": ("                if wp.static(shared):\n"
              "                    hessian_rows_shared(P, world, lane, bd, H, rhs, As)\n"
              "                else:\n"
              "                    hessian_rows(P, world, lane, bd, H, rhs)\n"),
    "chol2": "                    failed = factor_solve(H[world], rhs[world], dv_out[world], lane)\n",
    "lchol2": "                    failed = factor_solve(H[world], rhs[world], dv_out[world], nv, lane)\n",
    "ls2": "            alpha, evals, ls_failed = search(P, world, lane, N.ell[world], q[2], N.line_search)\n",
}

# Runs a module with sys.path[0] = the variant, past an editable install's import finder.
_RUN = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
        "sys.path.insert(0, sys.argv[1]); import sap_gpu; assert sap_gpu.__file__.startswith(sys.argv[1]), "
        "sap_gpu.__file__; sys.argv = ['sap-benchmark', *sys.argv[2:]]; "
        "runpy.run_module('sap_tools.benchmark', run_name='__main__')")


def make_variants(out: pathlib.Path) -> dict:
    src = FUSED.read_text()
    made = {}
    for name, lines in STAGES.items():
        if src.count("\n" + lines) != 1:  # whole lines: a match inside an indentation would nest wrongly
            raise SystemExit(f"fused_stage_costs: the {name} lines are not once in {FUSED}; update STAGES")
        indent = re.match(r" *", lines).group(0)
        twice = "\n" + lines + f"{indent}block_sync(lane)\n" + lines
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(ROOT / "sap_gpu", d / "sap_gpu", ignore=shutil.ignore_patterns("__pycache__"))
        (d / "sap_gpu" / "contact_solve_fused.py").write_text(src.replace("\n" + lines, twice))
        made[name] = d
    return made


def ms_per_step(output: str) -> dict:
    """{label: ms/step} from sap-benchmark's table."""
    rows = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[1].isdigit() and parts[-1] in ("yes", "no"):
            rows[parts[0]] = float(parts[3].replace(",", ""))
    return rows


def main(argv) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path(argv[0]).resolve()
    variants = make_variants(out)
    print("variants: " + ", ".join(f"{k} ({v})" for k, v in variants.items()))
    if len(argv) == 1:
        return 0
    env_path = str(ROOT)
    results = {}
    for name, where in [("base", ROOT), *variants.items()]:
        run = subprocess.run([sys.executable, "-c", _RUN, str(where), *argv[1:], "--quiet"], capture_output=True,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": env_path})
        if run.returncode != 0:
            print(run.stdout[-2000:] + run.stderr[-2000:], file=sys.stderr)
            return 1
        results[name] = ms_per_step(run.stdout)
    for label, base in results["base"].items():
        cells = "  ".join(f"{name} {r[label]:.3f} (+{r[label] - base:.3f})" for name, r in results.items()
                          if name != "base")
        print(f"{label}: base {base:.3f} ms/step; {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
