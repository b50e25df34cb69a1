"""sap-inspect: the step capture, its words, its figures and its HTML report (no browser needed).

The report is checked against independent runs of the solver: the Newton iterations, the
line-search probes and the regimes it shows must be the ones sap_ref took; a block pushed below
μ m g sticks and above it slides; the sap_gpu comparison lies within the strong-convexity bound.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from variants import preset_line_search_params

from sap_common import scenes
from sap_common.builder import ModelBuilder, solid_box_inertia
from sap_ref.collision import CollisionPipeline
from sap_ref.constraints import SLIDING, STICTION
from sap_ref.solver import SolverSAP
from sap_tools.inspector import main, report_html
from sap_tools.step_capture import capture_step, regime_switches, rollout, summary

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = 5  # scene, Newton convergence, line searches, regimes, H and velocities


def _images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def _reference_step(scene, steps, **kw):
    """An independent run: SolverSAP's own diagnostics for step ``steps`` of world 0."""
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **kw)
    pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts, state = pipe.contacts(), scene.state.copy()
    for _ in range(steps + 1):
        pipe.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
    return solver


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
def test_report_for_every_preset_and_line_search(preset, line_search, tmp_path, capsys):
    """sphere_slide's first step (a sliding contact): the report shows what sap_ref did (three
    pairs in the default run, every preset and line search among them; all nine under -m slow)."""
    out = tmp_path / "r.html"
    assert main(["sphere_slide", "--step", "0", "--preset", preset, "--line-search", line_search,
                 "--out", str(out), "--quiet", "--json", "--dpi", "40"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ref = _reference_step(scenes.get("sphere_slide"), 0, contact_preset_variant=preset,
                          line_search_variant=line_search)
    solve = row["solves"][0]
    assert solve["preset"] == preset and solve["line_search"] == line_search
    assert solve["newton_iterations"] == int(ref.last_newton_iterations[0]) >= 1
    assert solve["status"] == int(ref.last_status[0])
    text = " ".join(solve["summary"])
    assert f"{line_search} line search" in text
    assert f"{int(ref.last_line_search_iterations[0])} cost evaluation" in text
    html = out.read_text(encoding="utf-8")
    images = _images(html)
    assert len(images) == FIGURES and all(i.startswith(PNG_MAGIC) and len(i) > 2000 for i in images)
    assert "http://" not in html and "https://" not in html  # self-contained


@pytest.mark.parametrize("approximation", ["lagged", "similar"])
def test_hunt_crossley_quantities_are_shown(approximation, tmp_path, capsys):
    """Under lagged/similar every contact's fₑ₀, vₙ₀, n₀, ε_s and regime are reported (HTML table,
    JSON, summary) and are sap_ref's own: fₑ₀ = −kφ₀, the impulse n at the solution, the bound μn_f."""
    out = tmp_path / "hc.html"
    step = 250  # the box slides down the incline on its four corners (no hop under similar then)
    assert main(["incline_stick_slip", "--step", str(step), "--preset", "drake", "--approximation", approximation,
                 "--out", str(out), "--quiet", "--json", "--dpi", "40"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    solve = row["solves"][0]
    assert solve["approximation"] == approximation and solve["contacts"] == 4
    ref = _reference_step(scenes.get("incline_stick_slip"), step, contact_preset_variant="drake",
                          discrete_contact_approximation=approximation)
    r = ref.last_results[0]
    hc, gamma = r.hunt_crossley, r.contact_impulses
    for c, shown in enumerate(solve["hunt_crossley"]):
        assert shown["fe0"] == pytest.approx(-r.contacts.ke[c] * r.contacts.phi0[c], rel=1e-12)
        assert shown["n0"] == pytest.approx(float(hc.n0[c]), rel=1e-12) and shown["d"] == 8.0
        assert shown["eps_s"] == pytest.approx(1e-4) and shown["n"] == pytest.approx(gamma[c, 2], rel=1e-12)
        n_f = gamma[c, 2] if approximation == "similar" else hc.n0[c]
        assert shown["friction_bound"] == pytest.approx(0.5 * n_f, rel=1e-12)
        assert shown["normal_regime"] == "compressing" and shown["friction_regime"] == "sliding"
    html = out.read_text(encoding="utf-8")
    assert "Hunt–Crossley quantities" in html and "dissipation spent" not in html
    assert f"Hunt–Crossley ({approximation}) contact" in " ".join(solve["summary"])


def test_pcr_linear_solver_is_reported(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["box_stack", "--step", "3", "--linear-solver", "pcr", "--out", str(out), "--quiet"]) == 0
    assert "pcr linear solver" in capsys.readouterr().out


def _pushed_block(force_fraction: float, steps: int = 150):
    """A flat block (μ = 0.5 with the ground) settled for ``steps`` steps, then pushed along x by
    ``force_fraction`` · μ m g at its centre; returns the capture of the pushed step."""
    b = ModelBuilder()
    m, hx, hz = 2.0, 0.1, 0.02
    body = b.add_body(m, inertia=solid_box_inertia(m, hx, hx, hz), name="block")
    b.add_joint_free(-1, body, q0=(0, 0, hz, 0, 0, 0, 1), name="block")
    b.add_ground_plane(mu=0.5, ke=1e6, tau=0.01, name="ground")
    b.add_shape_box(body, hx=hx, hy=hx, hz=hz, mu=0.5, ke=1e6, tau=0.0, name="block_box")
    model = b.finalize()
    from sap_common.io.scene import LoadedScene

    scene = LoadedScene("block", model, model.state(), model.control(), 1e-3, steps, 8)
    state, contacts = rollout(scene, steps)
    control = scene.control.copy()
    control.joint_f[0, 0] = force_fraction * 0.5 * m * 9.81  # public order: [f, τ] of the free joint
    return capture_step(model, state, control, contacts, scene.dt, scene="block", step=steps)


def test_block_sticks_below_mu_m_g():
    cap = _pushed_block(0.5)
    assert cap.contact_count == 4
    assert np.all(cap.modes[-1] == STICTION)
    g = cap.result.contact_impulses
    assert np.all(np.linalg.norm(g[:, :2], axis=1) < 0.5 * g[:, 2])  # strictly inside the cone
    assert "4 sticking" in " ".join(summary(cap))


def test_block_slides_above_mu_m_g_and_the_switch_is_reported():
    cap = _pushed_block(2.0)
    assert np.all(cap.modes[0] == STICTION)  # the warm start: the block at rest
    assert np.all(cap.modes[-1] == SLIDING)
    g = cap.result.contact_impulses
    np.testing.assert_allclose(np.linalg.norm(g[:, :2], axis=1), 0.5 * g[:, 2], rtol=1e-6)  # on the cone
    switches = regime_switches(cap)
    assert {c for c, _, before, after in switches if (before, after) == (STICTION, SLIDING)} == {0, 1, 2, 3}
    text = " ".join(summary(cap))
    assert "switched from sticking to sliding at iteration" in text


def test_line_search_figure_marks_the_probes_sap_ref_took():
    from sap_tools.inspector_figures import fig_line_searches

    cap = _pushed_block(2.0)
    fig = fig_line_searches(cap)
    hist = cap.result.solve.history
    for ax, it in zip(fig.axes, hist):
        probes = [line for line in ax.get_lines() if line.get_label() == "probes"]
        assert len(probes) == 1
        np.testing.assert_array_equal(probes[0].get_xdata(), [a for a, _, _ in it.line_search.probes])
        accepted = [line for line in ax.get_lines() if line.get_label().startswith("accepted")]
        assert accepted[0].get_xdata()[0] == it.alpha


def test_compare_presets_side_by_side(tmp_path, capsys):
    out = tmp_path / "c.html"
    assert main(["sphere_slide", "--step", "0", "--compare-presets", "approx32", "drake", "--out", str(out),
                 "--quiet", "--json", "--dpi", "40"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [s["preset"] for s in row["solves"]] == ["approx32", "drake"]
    html = out.read_text(encoding="utf-8")
    assert len(_images(html)) == 2 * FIGURES
    assert "<h2>approx32</h2>" in html and "<h2>drake</h2>" in html
    # The difference table is the difference of two independent solves from the same state.
    scene = scenes.get("sphere_slide")
    state, contacts = rollout(scene, 0, contact_preset_variant="approx32")
    a, b = (capture_step(scene.sap_model, state, scene.control, contacts, scene.dt, contact_preset_variant=p)
            for p in ("approx32", "drake"))
    shown = float(re.search(r"‖v₁\(A\) − v₁\(B\)‖∞ \[m/s, rad/s\]</td><td[^>]*>([^<]+)<", html).group(1))
    assert shown == pytest.approx(np.abs(a.result.v1 - b.result.v1).max(), rel=1e-3)
    assert shown > 0  # approx32 and drake differ in weights, contact points and integration


def test_sap_gpu_world_is_rerun_in_sap_ref(tmp_path, capsys):
    out = tmp_path / "g.html"
    assert main(["box_stack", "--step", "5", "--backend", "gpu", "--device", "cpu", "--num-worlds", "2",
                 "--world", "1", "--preset", "drake", "--out", str(out), "--quiet", "--json", "--dpi", "40"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    b = row["backends"]
    assert b["device"] == "cpu"
    assert b["distance_A"] <= b["bound_A"]
    # fp64 on both sides (drake preset): the two solves agree to rounding.
    assert b["rows"]["v₁ [m/s, rad/s]"]["max_abs_diff"] < 1e-9
    assert b["rows"]["γ at each backend's v₁ [N·s]"]["max_abs_diff"] < 1e-9
    assert "sap_gpu against sap_ref" in out.read_text(encoding="utf-8")


def test_step_zero_without_contact_says_so(tmp_path, capsys):
    out = tmp_path / "free.html"
    assert main(["free_spin", "--step", "0", "--out", str(out), "--quiet"]) == 0
    assert "No contact, limit, holonomic constraint or drive row: v₁ = v*" in capsys.readouterr().out
    assert len(_images(out.read_text(encoding="utf-8"))) == FIGURES  # each figure says there is nothing


def test_report_html_lists_each_iteration():
    cap = _pushed_block(2.0)
    html = report_html([cap], dpi=30)
    for k in range(cap.newton_iterations + 1):
        assert f"<td class=\"\">{k}</td><td class=\"\">{cap.evaluations[k].ell:.9e}</td>" in html


@pytest.mark.parametrize("argv, message", [
    (["box_stack", "--step", "-1"], "--step: must be >= 0"),
    (["box_stack", "--step", "1", "--preset", "fast"], "--preset:"),
    (["box_stack", "--step", "1", "--line-search", "nope"], "--line-search:"),
    (["box_stack", "--step", "1", "--world", "2", "--num-worlds", "2"], "--num-worlds: must be > --world"),
    (["box_stack", "--step", "1", "--compare-presets", "drake"], "--compare-presets: give two presets"),
    (["box_stack", "--step", "1", "--compare-presets", "drake", "fast"], "--preset:"),
    (["box_stack", "--step", "1", "--device", "cpu"], "--device: only applies to --backend gpu"),
    (["box_stack", "--step", "1", "--out", "/no/such/dir/r.html"], "--out:"),
    (["no_such_scene", "--step", "1"], "valid:"),
    (["box_stack", "--step", "1000000"], "--step: 1000000 is past the end of box_stack (1000 steps: 0 … 999); "
                                          "rolling out 1000000 steps first may take long: pass --past-end"),
    (["box_stack", "--step", "1000"], "--step: 1000 is past the end of box_stack"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sap-inspect: error: ") and message in err and err.count("\n") == 1


def test_a_step_past_the_end_runs_when_asked(tmp_path, capsys, monkeypatch):
    """--past-end lifts the refusal (on a scene made 3 steps long, so that going past is quick)."""
    import dataclasses

    import sap_tools.inspector as inspector

    load = inspector.load_scene_arg
    monkeypatch.setattr(inspector, "load_scene_arg", lambda *a: dataclasses.replace(load(*a), num_steps=3))
    out = tmp_path / "r.html"
    assert main(["sphere_drop", "--step", "5", "--out", str(out), "--quiet"]) == 2
    assert "--step: 5 is past the end of sphere_drop (3 steps: 0 … 2)" in capsys.readouterr().err
    assert not out.exists()
    assert main(["sphere_drop", "--step", "2", "--out", str(out), "--quiet"]) == 0  # the last step is within
    assert main(["sphere_drop", "--step", "5", "--past-end", "--out", str(out), "--quiet"]) == 0
    assert out.stat().st_size > 1000


def test_holonomic_constraint_rows_are_shown(tmp_path, capsys):
    """fourbar at step 5: the ball constraint's three rows (g₀, ġ, v̂, R, regime, γ) in the report
    and in --json."""
    out = tmp_path / "fourbar.html"
    assert main(["fourbar", "--step", "5", "--preset", "drake", "--out", str(out), "--quiet", "--json"]) == 0
    text = capsys.readouterr().out
    row = json.loads(text.strip().splitlines()[-1])
    hol = row["solves"][0]["holonomic"]
    assert [r["type"] for r in hol] == ["BALL"] * 3 and {r["regime"] for r in hol} == {"near-rigid"}
    assert any(abs(r["gamma"]) > 0 for r in hol)
    assert "3 holonomic constraint rows" in text
    html = out.read_text(encoding="utf-8")
    assert "<h2>Holonomic constraints</h2>" in html and "loop" in html
