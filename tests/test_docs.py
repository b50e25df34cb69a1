"""The repository's documentation stands alone: every reference in it resolves inside the repo.

Scanned: every tracked ``.py``, ``.md`` and ``.toml`` file. Checked:

* no reference to material a user does not have: the design notes or the math notes the
  project was written from, the folder they lived in, issue numbers, the workspace layout the
  Drake data were generated in;
* every repository path mentioned (``docs/…``, ``tests/…``, ``.ci/…``, and files under the package
  folders) exists;
* every section citation ``docs/<page>.md § <Heading>`` (the one citation syntax used in
  docstrings, comments and docs) names a heading that exists in that page;
* every relative Markdown link (and its ``#anchor``) in the Markdown files resolves;
* every dotted name ``sap_ref.x.y`` / ``sap_gpu.…`` / ``sap_common.…`` / ``sap_tools.…`` imports:
  backticked in the Markdown files, in Sphinx roles (``:func:`…```) in the Python files.
"""

from __future__ import annotations

import functools
import importlib
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".toml")
THIS_FILE = pathlib.Path(__file__).resolve().relative_to(ROOT).as_posix()

# (pattern, what it refers to). Each names something outside the repository.
FORBIDDEN = [
    (r"\bDESIGN\s*§", "a section of the design notes the project was written from: cite docs/design.md"),
    (r"\b[Ss]pec\s*§", "a section of the math notes the project was written from: cite docs/formulation.md"),
    (r"\bSTYLE\b", "the project's internal style notes"),
    (r"\.\./shared|/work/|\bshared/(?:spec|DESIGN|STYLE|notes|anchors)", "a folder outside the repository"),
    (r"\b[Ii]ssues?\s*#?\d+", "an issue number"),
    (r"\b[Tt]he issue(?:'s)?\b", "an issue the reader cannot see"),
    (r"\banchors/|drake_gen", "the workspace the Drake data were generated in: they are in tests/data/drake/"),
]
# Paths under docs/, tests/ and .ci/; under the package folders only file names (with a suffix),
# so that a ratio such as sap_gpu/mjwarp is not taken for a path.
PATH_RE = re.compile(r"(?<![\w./-])((?:docs|tests|\.ci)/[\w./-]*\w"
                     r"|(?:sap_tools|sap_common|sap_ref|sap_gpu)/[\w./-]*\.\w+)")
CITATION_RE = re.compile(r"(docs/[\w-]+\.md)\s*§([^\n]*)")
# A cited heading ends at the first of these (or at the end of the line).
CITATION_END_RE = re.compile(r"[),;:`\"]|\.(?:\s|$)|$")
LINK_RE = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOTTED_RE = re.compile(r"`~?(sap_(?:common|ref|gpu|tools)(?:\.\w+)+)`")  # in Markdown
ROLE_RE = re.compile(r":(?:mod|func|class|meth|attr|data):"
                     r"`~?(sap_(?:common|ref|gpu|tools)(?:\.\w+)+)`")  # in docstrings
FENCE_RE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)


@functools.lru_cache(maxsize=1)
def tracked_files() -> tuple[str, ...]:
    """Repository-relative paths of the tracked text files to scan."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but hidden/build ones
        names = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()
                 and not any(part.startswith(".") or part.endswith(".egg-info") or part in ("build", "__pycache__")
                             for part in p.relative_to(ROOT).parts[:-1])]
    return tuple(sorted(n for n in names if n.endswith(SUFFIXES) and (ROOT / n).is_file()))


def markdown_files() -> list[str]:
    return [n for n in tracked_files() if n.endswith(".md")]


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def forbidden_references(text: str) -> list[str]:
    """``line: 'match' (why)`` for each reference to material outside the repository."""
    found = []
    for pattern, why in FORBIDDEN:
        for m in re.finditer(pattern, text):
            found.append(f"{_line(text, m.start())}: {m.group(0)!r} ({why})")
    return found


def missing_paths(text: str) -> list[str]:
    """``line: path`` for each repository path mentioned in ``text`` that does not exist."""
    return [f"{_line(text, m.start())}: {m.group(1)}" for m in PATH_RE.finditer(text)
            if not (ROOT / m.group(1)).exists()]


@functools.lru_cache(maxsize=None)
def headings(page: str) -> frozenset:
    """The heading texts of a Markdown file (fenced code left out); empty if it does not exist."""
    path = ROOT / page
    if not path.is_file():
        return frozenset()
    text = FENCE_RE.sub("", path.read_text())
    return frozenset(m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def bad_citations(text: str) -> list[str]:
    """``line: citation (why)`` for each ``docs/<page>.md § <Heading>`` that does not resolve."""
    bad = []
    for m in CITATION_RE.finditer(text):
        page, rest = m.group(1), m.group(2)
        heading = rest[:CITATION_END_RE.search(rest).start()].strip()
        where = f"{_line(text, m.start())}: {page} § {heading}"
        if not (ROOT / page).is_file():
            bad.append(f"{where} (no such page)")
        elif not heading:
            bad.append(f"{where} (write the heading on the same line, after '§ ')")
        elif heading not in headings(page):
            bad.append(f"{where} (no such heading; headings: {', '.join(sorted(headings(page)))})")
    return bad


def broken_links(page: str, text: str) -> list[str]:
    """``line: target (why)`` for each relative Markdown link of ``page`` that does not resolve."""
    bad = []
    prose = FENCE_RE.sub(lambda f: "\n" * f.group(0).count("\n"), text)
    for m in LINK_RE.finditer(prose):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (ROOT / page).parent / file_part if file_part else ROOT / page
        where = f"{_line(prose, m.start())}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md":
            rel = dest.resolve().relative_to(ROOT).as_posix()
            if anchor not in {slug(h) for h in headings(rel)}:
                bad.append(f"{where} (no heading with anchor #{anchor})")
    return bad


def unresolved_names(text: str, pattern: re.Pattern = DOTTED_RE) -> list[str]:
    """``line: name`` for each ``sap_*`` dotted name matched by ``pattern`` that does not import."""
    bad = []
    for m in pattern.finditer(text):
        if not _resolves(m.group(1)):
            bad.append(f"{_line(text, m.start())}: {m.group(1)}")
    return bad


@functools.lru_cache(maxsize=None)
def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _report(check) -> list[str]:
    problems = []
    for name in tracked_files():
        if name != THIS_FILE:
            problems += [f"{name}:{p}" for p in check(name, (ROOT / name).read_text())]
    return problems


def test_scanned_files_include_the_docs_and_the_sources():
    names = set(tracked_files())
    assert {"README.md", "pyproject.toml", "docs/design.md", "docs/formulation.md",
            "tests/data/drake/README.md", "sap_ref/solver.py", "sap_gpu/solver.py"} <= names


def test_no_reference_to_material_outside_the_repository():
    problems = _report(lambda name, text: forbidden_references(text))
    assert not problems, "references a user cannot follow:\n" + "\n".join(problems)


def test_every_repository_path_mentioned_exists():
    problems = _report(lambda name, text: missing_paths(text))
    assert not problems, "paths that do not exist:\n" + "\n".join(problems)


def test_every_section_citation_names_an_existing_heading():
    problems = _report(lambda name, text: bad_citations(text))
    assert not problems, "section citations that do not resolve:\n" + "\n".join(problems)


def test_every_relative_markdown_link_resolves():
    problems = _report(lambda name, text: broken_links(name, text) if name.endswith(".md") else [])
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_dotted_code_name_imports():
    problems = _report(lambda name, text: unresolved_names(text, DOTTED_RE if name.endswith(".md") else ROLE_RE))
    assert not problems, "code names that do not exist:\n" + "\n".join(problems)


def unlisted_modules(layout: str, files) -> list[str]:
    """Package and script files the layout block does not name (by file name or module name). A
    sap_gpu file named under sap_ref counts: the layout says sap_gpu has sap_ref's stage files."""
    packages = ("sap_common/", "sap_ref/", "sap_gpu/", "sap_newton/", "sap_tools/", "scripts/", "examples/")
    return [n for n in files if n.startswith(packages) and n.endswith((".py", ".sh"))
            and pathlib.PurePosixPath(n).name not in ("__init__.py", "__main__.py")
            and not re.search(rf"\b{re.escape(pathlib.PurePosixPath(n).stem)}\b", layout)]


def design_layout() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("## Layout")
    return text[start:text.index("\n## ", start + 1)]


def test_the_design_layout_names_every_module():
    missing = unlisted_modules(design_layout(), tracked_files())
    assert not missing, "docs/design.md § Layout does not name:\n" + "\n".join(missing)


def test_an_unlisted_module_is_flagged():
    assert unlisted_modules("  solver.py  the step\n", ["sap_ref/solver.py", "sap_gpu/new_stage.py"]) == \
        ["sap_gpu/new_stage.py"]


# The checks themselves must be able to fail: each bad text below is flagged. The strings are
# assembled from pieces so that this file does not match its own patterns.
SECTION = "\u00a7"


@pytest.mark.parametrize("bad", [
    "see DESIGN " + SECTION + "5", "(spec " + SECTION + "4.1)", "Spec " + SECTION + "1.", "STYLE" + " rule 3",
    "(STYLE" + ": compare)",
    "../" + "shared/spec/x.md", "fixed in issue " + "12", "Issue #" + "7", "the " + "issue's table",
    "anchors" + "/drake/x.json",
])
def test_forbidden_reference_is_flagged(bad):
    assert forbidden_references(f"text {bad} text")


def test_missing_path_and_bad_citations_are_flagged():
    assert missing_paths("read docs/no_such_page.md first")
    assert not missing_paths("read docs/formulation.md first")
    assert bad_citations("(docs/formulation.md " + SECTION + " No such heading)")
    assert bad_citations("docs/no_such_page.md " + SECTION + " Friction cone")
    assert bad_citations("docs/formulation.md " + SECTION + "\n Friction cone")
    assert not bad_citations("(docs/formulation.md " + SECTION + " Friction cone).")


def test_broken_link_and_unknown_name_are_flagged():
    assert broken_links("docs/design.md", "[x](no_such_file.md)")
    assert broken_links("docs/design.md", "[x](formulation.md#no-such-heading)")
    assert not broken_links("docs/design.md", "[x](formulation.md#friction-cone) [y](#layout)")
    assert unresolved_names("`sap_ref.line_search.no_such_search`")
    assert not unresolved_names("`sap_ref.line_search.exact_root`")
    assert unresolved_names(":func:`sap_ref.line_search.no_such_search`", ROLE_RE)
    assert not unresolved_names(":func:`~sap_ref.line_search.exact_root`", ROLE_RE)
