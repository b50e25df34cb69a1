"""README stays true: its example runs and uses everything it builds, and .ci/run runs README's
install and test command."""

import ast
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
    assert namespace["solver"].config.line_search_variant == "exact_root"
    assert (namespace["solver"].last_status == 1).all()
    assert (namespace["gpu"].diagnostics()["status"] == 1).all()


def test_readme_example_uses_every_name_it_binds():
    """No dead lines: every name the example assigns or imports is read later in it."""
    (code,) = _blocks("python")
    tree = ast.parse(code)
    bound, read = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                bound.setdefault(node.id, node.lineno)
            else:
                read.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.setdefault((alias.asname or alias.name).split(".")[0], node.lineno)
    loop_variables = {"_"}
    unused = {name: line for name, line in bound.items() if name not in read and name not in loop_variables}
    assert not unused, f"README's example binds names it never uses: {unused}"


def test_license_and_changelog_match_pyproject():
    """The license pyproject declares is the LICENSE file's; CHANGELOG has an Unreleased section and
    one for the version pyproject (and so every --version) states."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    license_text = (ROOT / "LICENSE").read_text()
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert license_text.startswith("BSD 3-Clause License") and "the sap authors" in license_text.splitlines()[2]
    assert "Neither the name of the copyright holder nor the names of its" in license_text
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert headings[0] == "Unreleased" and project["version"] in headings
