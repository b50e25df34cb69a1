"""A check of the C++ that Warp generates from the project's kernels: constants read where they may be unset.

Warp 1.19 makes a named Python constant (``KINK_TOL`` in ``wp.float64(KINK_TOL)``) a variable of the
generated function at the first place the function's source names it, and every later use of the
name reads that variable. A float constant's variable is *set* there, at its first use. When the
first use sits inside a branch (an ``if``; the right side of ``and`` / ``or``; one copy of an
unrolled loop's body; a loop that may run no trip), a later use outside that branch reads a variable
that was never set on the paths that skipped the branch. Optimized builds usually fold the read to
the constant, so nothing shows; an unoptimized build (Warp's ``optimization_level=0``) reads
whatever the stack held. That is how it was found: at ``-O0`` two crossing capsules took the wrong
sign of their normal, because the capsule pair's ``COINCIDENT_DISTANCE`` had first been named
inside the branch of parallel segments.

The rule for kernel code: a named constant used inside a branch and again after it is read into a
local at the function's top level first (``tol = wp.float64(TOL)``) and the local is used. This
module finds every violation in generated source (:func:`unset_constant_reads`), and
:func:`check_modules` runs it over Warp modules; ``tests/test_gpu_codegen_check.py`` holds every
kernel of sap_gpu, sap_newton and the benchmark to it. The scan reads the generated code's structure (braces, and Warp's
``start_for_N:`` / ``end_for_N:`` labels around loops), which is the layout of warp-lang 1.19.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import warp as wp

__all__ = ["UnsetRead", "check_modules", "module_source", "unset_constant_reads"]

# A generated function's body sets a variable to a literal: where a named float constant becomes a
# variable (``var_36 = 1e-12;``), and where a literal is assigned inline.
_SET_TO_LITERAL = re.compile(
    r"^\s*(var_\w+) = ([-+]?(?:\d[\d.]*(?:e[-+]?\d+)?|inf|INFINITY|NAN|nan)|true|false);\s*$")
_ASSIGNMENT = re.compile(r"^\s*(var_\w+) = (.*)$")
_VARIABLE = re.compile(r"\bvar_\w+\b")
_BRANCH = re.compile(r"^\s*if \(!?(var_\w+)\) \{\s*$")  # Warp's `if (c) {` and, for an else, `if (!c) {`
_LOOP_START = re.compile(r"^\s*start_(?:for|while)_\d+:;")
_LOOP_END = re.compile(r"^\s*end_(?:for|while)_\d+:;")
# Warp's phi after a branch on c: ``var_m = wp::where(c, var_if, var_else);``; it reads each side only
# where that side's branch ran.
_PHI = re.compile(r"^wp::where\((var_\w+), (var_\w+), (var_\w+)\);$")


@dataclass(frozen=True)
class UnsetRead:
    """A read of ``variable`` on generated ``line`` (1-based) of ``function``, outside the block
    that set it on ``set_line``: on a path that skipped that block it reads an unset variable."""

    function: str
    variable: str
    line: int
    set_line: int
    text: str

    def __str__(self) -> str:
        return (f"{self.function}: line {self.line} reads {self.variable}, set only inside the block at line "
                f"{self.set_line}: {self.text}")


def unset_constant_reads(source: str) -> list[UnsetRead]:
    """Every read, in Warp-generated C++ or CUDA ``source``, of a variable that its function sets to a
    literal only inside a block (a branch or a loop's body) that does not enclose the read.

    Reads by the phi that Warp writes after a branch (``wp::where`` on the branch's condition),
    which merges the branch's value with the value before it, are not counted: they take the
    branch's variable only where the branch ran."""
    found = []
    function = None
    blocks: list[int] = []  # the ids of the open blocks, outermost first
    conditions: dict[int, str] = {}  # a branch's block id -> the variable it branches on
    opened = 0
    set_in: dict[str, tuple[tuple[int, ...], int]] = {}  # variable -> (its block path, line set)
    for number, line in enumerate(source.splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("//"):
            continue
        if not line[0].isspace() and "(" in text and not text.endswith(";"):
            function = text.split("(")[0].split()[-1]  # a function's signature: a new scope
            blocks, set_in = [], {}
        if function is None:
            continue
        if _LOOP_END.match(line):
            if blocks:
                blocks.pop()
            continue
        if _LOOP_START.match(line):
            opened += 1
            blocks.append(opened)
            continue
        assignment = _ASSIGNMENT.match(line)
        read = assignment.group(2).strip() if assignment else text
        phi = _PHI.match(read)
        for variable in _VARIABLE.findall(read):
            where = set_in.get(variable)
            if where is None or tuple(blocks[:len(where[0])]) == where[0]:
                continue
            if phi and variable in phi.group(2, 3):
                if conditions.get(where[0][-1]) != phi.group(1):
                    # A phi of an enclosing branch passes the unset value on: its result is unset
                    # where the operand is, and a read of the result is what counts.
                    set_in.setdefault(assignment.group(1), where)
                continue
            found.append(UnsetRead(function, variable, number, where[1], text))
        literal = _SET_TO_LITERAL.match(line)
        if literal and blocks:
            set_in.setdefault(literal.group(1), (tuple(blocks), number))
        branch = _BRANCH.match(line)
        for char in text:
            if char == "{":
                opened += 1
                blocks.append(opened)
                if branch:
                    conditions[opened] = branch.group(1)
            elif char == "}" and blocks:
                blocks.pop()
    return found


def module_source(module, block_dim: int = 1) -> str:
    """The C++ Warp generates for ``module`` (a ``warp.Module``) at ``block_dim``, without compiling
    it. The CPU target: a kernel's Python source lowers the same way for a GPU (only tile calls
    differ), and its branches are those of the options the module was built with."""
    wp.init()
    module.get_module_hash(block_dim)
    options = module.resolved_options[block_dim] | {"output_arch": None}
    return module._run_codegen(options, True)[0]


def check_modules(modules) -> dict[str, list[UnsetRead]]:
    """``{module name: its unset reads}`` for each ``(module, block_dim)`` of ``modules``, modules
    without any left out."""
    out = {}
    for module, block_dim in modules:
        reads = unset_constant_reads(module_source(module, block_dim))
        if reads:
            out[module.name] = reads
    return out
