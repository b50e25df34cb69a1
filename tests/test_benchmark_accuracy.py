"""sap-benchmark-accuracy: each line search's distance from the minimiser of the SAP cost, and the
accuracy of the default line search on a short humanoid rollout
(docs/presets.md § Accuracy and work of the line searches)."""

import numpy as np
import pytest

from sap_common import scenes
from sap_common.config import DEFAULT_LINE_SEARCH, SapConfig
from sap_ref.contact_solve import evaluate, stopping_criterion
from sap_tools.benchmark.accuracy import collect_problems, main, measure, reference_config

# The accuracy asked of the default line search: ‖v₁ − v*‖∞ ≤ 1e-4 m/s (rad/s) at the 99th
# percentile of the benchmark's humanoid rollout. The short rollout here must meet it everywhere.
DEFAULT_DISTANCE_MAX = 1e-4
STEPS, WORLDS = 10, 2  # 20 problems: the humanoid falling into its first contacts


@pytest.fixture(scope="module")
def humanoid_problems():
    scene = scenes.get("humanoid", num_worlds=WORLDS)
    return scene, collect_problems(scene, "approx32", STEPS, 0.1, 0)


def _config(scene, **kw):
    return SapConfig.from_preset("approx32", max_rigid_contact=scene.max_rigid_contact, **kw)


def test_the_default_line_search_stops_at_the_minimiser_and_monotone_decay_does_not(humanoid_problems):
    scene, problems = humanoid_problems
    assert len(problems) == STEPS * WORLDS
    default = measure(problems, _config(scene))
    assert default.line_search == DEFAULT_LINE_SEARCH
    assert default.not_converged == 0 and default.reference_not_converged == 0
    assert default.distance["max"] <= DEFAULT_DISTANCE_MAX, default.distance
    monotone = measure(problems, _config(scene, line_search_variant="monotone_decay"))
    assert monotone.distance["max"] > 10 * DEFAULT_DISTANCE_MAX, monotone.distance  # its cost criterion
    assert monotone.newton_mean > default.newton_mean


def test_a_float32_cost_is_solved_in_float32_and_held_to_the_float64_minimiser(humanoid_problems):
    scene, problems = humanoid_problems
    p, _ = problems[-1]
    p32 = p.astype(np.float32)
    assert p32.dtype == np.float32 and p32.rows.J.dtype == np.float32 and np.array_equal(p32.dofs, p.dofs)
    assert np.array_equal(p32.astype(np.float64).A, p.A.astype(np.float32).astype(np.float64))
    row = measure(problems[:4], _config(scene, contact_solve_precision="fp32", line_search_variant="monotone_decay"))
    assert row.reference_not_converged == 0 and row.problems == 4
    assert reference_config(_config(scene, contact_solve_precision="fp32")).contact_solve_precision == "fp64"


def test_the_reference_meets_its_tighter_bound(humanoid_problems):
    """The reference is the minimiser to its own bound (10⁴ × tighter than the default), not to the default's."""
    scene, problems = humanoid_problems
    cfg = _config(scene)
    ref = reference_config(cfg)
    assert (ref.line_search_variant, ref.contact_linear_solve_precision) == ("exact_root", "fp64")
    assert ref.optimality_rel_tol == pytest.approx(cfg.optimality_rel_tol / 1e4) and ref.optimality_abs_tol == 0.0
    from sap_ref.contact_solve import solve

    p, v0 = problems[-1]
    v = solve(p, solve(p, v0, cfg).v, ref).v
    reached, r, s = stopping_criterion(p, evaluate(p, v), ref)
    assert reached and r <= ref.optimality_rel_tol * s


def test_the_command_prints_a_row_per_preset_and_line_search(capsys):
    assert main(["--scene", "box_stack", "--worlds", "1", "--steps", "3", "--presets", "approx32", "drake",
                 "--line-searches", "exact_root", "monotone_decay"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| approx32") or line.startswith("| drake")]
    assert [r.split(" | ")[:2] for r in rows] == [["| approx32", "exact_root"], ["| approx32", "monotone_decay"],
                                                  ["| drake", "exact_root"], ["| drake", "monotone_decay"]]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert np.all(np.isfinite([float(c) for c in cells[2:]]))


@pytest.mark.parametrize("argv, message", [
    (["--worlds", "0"], "--worlds and --steps: must be >= 1"),
    (["--line-searches", "newton"], "line_search_variant"),
    (["--presets", "fast"], "contact_preset_variant"),
    (["--override", "rho"], "--override: expected KEY=VALUE"),
    (["--override", "rho=2"], "rho"),
    (["--scene", "no_such_scene"], "no_such_scene"),
])
def test_bad_arguments_are_one_line_errors_before_any_rollout(capsys, monkeypatch, argv, message):
    import sap_tools.benchmark.accuracy as acc

    monkeypatch.setattr(acc, "collect_problems", lambda *a, **k: pytest.fail("rollout before the check"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sap-benchmark-accuracy: error:") and message in err[0], err
