"""README stays true: its example runs, and .ci/run runs README's install and test command."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = [b.strip() for b in _blocks("bash")]
    assert len(commands) == 2
    assert commands[0] == 'pip install -e ".[plot]" && sap-demo'
    assert commands[1] == 'pip install -e ".[test]" && pytest -n auto'


def test_ci_runs_the_readme_test_command_as_a_newcomer_would():
    """.ci/run runs README's command as its own line, with nothing exported before it that a
    newcomer's shell would lack (a Hypothesis profile, a device, pytest options)."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    command = _blocks("bash")[1].strip()
    assert command in ci
    before = ci[:ci.index(command)]
    assert not [line for line in before if line.startswith("export ") or "HYPOTHESIS" in line or "PYTEST" in line]


def test_readme_example_runs():
    (code,) = _blocks("python")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["state"].joint_q.shape == (16, 7)
    assert namespace["stack"].sap_model.num_worlds == 16
    assert (namespace["solver"].last_status == 1).all()
    assert (namespace["gpu"].diagnostics()["status"] == 1).all()
