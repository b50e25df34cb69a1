"""sap_gpu.precompile and sap-precompile: the CUDA compile of a step without a GPU, and its budgets.

The ``cuda_compile`` tests (``pytest -m cuda_compile``, run by ``.ci/run`` after README's test
command) compile every kernel of the humanoid step for sm_90 with Warp's NVRTC, in every preset,
Newton path and linear solver, and fail on any compile error; where cuobjdump is installed they
also hold every kernel to the resource budget of MuJoCo Warp's heaviest humanoid-step kernel
(docs/benchmarks.md, GPU readiness), except the kernels listed below with their reasons.
"""

import json
import subprocess
import sys

import pytest

from sap_common import scenes
from sap_common.config import LINEAR_SOLVERS, NEWTON_PATHS, PRESETS, SapConfig
from sap_common.constants import FUSED_AUTO_MAX_REGISTERS
from sap_gpu.precompile import (
    compile_variant,
    find_cuobjdump,
    find_nvdisasm,
    kernel_lives,
    kernel_resources,
    ncu_kernel_names,
    ncu_source_samples,
    step_variants,
)
from sap_tools.precompile import configurations, launched_resources

ARCH = 90  # an H100/H200

# MuJoCo Warp's heaviest kernels of its humanoid step (sm_90, measured with sap-precompile
# --vs-mjwarp, mujoco-warp 4.0.0 and 3.x alike): registers of its Cholesky factor-and-solve, and
# the stack of its kinematics branch. No sap_gpu kernel of the humanoid step may use more...
MJWARP_MAX_REG = 175  # registers per thread
MJWARP_MAX_STACK = 32  # bytes per thread
# ...except these (kernel name prefix: (REG limit, STACK limit, reason)). A limit here is what
# the kernel needs today; a change that needs more fails the test and must say why.
FLOAT64_SINCOS_STACK = 40  # bytes: see below
# The fused kernel's budgets below (AUTO_BUDGET, LANE_CHOLESKY_BUDGET, TILE_CHOLESKY_BUDGET,
# TILE_HESSIAN_BUDGET, FUSED_CODE_BUDGET) and their history are those of monotone_decay's kernel,
# the default line search while they were measured and the one whose probes cost least on a GPU;
# the default line search's own, exact_root's, are EXACT_ROOT_BUDGET.
BUDGETED_LINE_SEARCH = "monotone_decay"
BUDGET_EXCEPTIONS = {
    "fused_newton_kernel": (168, 272, "one block per world runs the whole Newton loop (evaluation, H, the register "
                                      "elimination, the line search) in one kernel, the friction cone's branches "
                                      "inlined. Uncapped, drake's float64 rows of H in the lanes' registers and the "
                                      "shared tiles' pointers take 211 registers (approx32 164; LANE_CHOLESKY_BUDGET); "
                                      "SapConfig.fused_max_registers='auto', the default, caps it at 168 (float64 "
                                      "solve) and 128 (float32), spilling 40 and 144 B (56 and 160 B when an H100 "
                                      "measured the caps), which an H100 ran 1.07x and "
                                      "1.03x faster at 8192 humanoid worlds: by registers 12 and 16 worlds per "
                                      "multiprocessor instead of 10 and 12 (docs/benchmarks.md, Register caps by "
                                      "default). Those are monotone_decay's kernels (MONOTONE_BUDGETS below); the "
                                      "default line search, exact_root, evaluates phi' and phi'' at every probe and "
                                      "keeps its bracket across them, and spills 272 and 128 B under the same caps "
                                      "(EXACT_ROOT_BUDGET)"),
    "_forward_kinematics": (MJWARP_MAX_REG, FLOAT64_SINCOS_STACK,
                            "float64 sin/cos of a joint angle: CUDA's double-precision sin/cos reserve 40 B of "
                            "local memory for their slow path (Payne-Hanek reduction of very large arguments), "
                            "which joint angles never take; MuJoCo Warp computes in float32"),
    "_motion_subspaces": (MJWARP_MAX_REG, FLOAT64_SINCOS_STACK, "float64 sin/cos, as _forward_kinematics"),
    "_integrate": (MJWARP_MAX_REG, FLOAT64_SINCOS_STACK,
                   "float64 sin/cos of the quaternion increment, as _forward_kinematics"),
}


def test_configurations_list_each_compiled_combination_once():
    """PCR always runs the staged loop, so fused/PCR is staged/PCR and is listed once."""
    assert configurations(["drake"], list(NEWTON_PATHS), list(LINEAR_SOLVERS)) == [
        ("drake", "fused", "cholesky", "sap"), ("drake", "staged", "pcr", "sap"),
        ("drake", "staged", "cholesky", "sap")]
    assert configurations(["drake"], ["fused"], ["cholesky"], ["sap", "lagged"]) == [
        ("drake", "fused", "cholesky", "sap"), ("drake", "fused", "cholesky", "lagged")]


def test_launched_resources_keep_the_launched_forward_kernels():
    found = {"_a_1234abcd_cuda_kernel_forward": {"REG": 1}, "_a_1234abcd_cuda_kernel_backward": {"REG": 2},
             "_a_b_99887766_cuda_kernel_forward": {"REG": 3}, "_other_00000000_cuda_kernel_forward": {"REG": 4}}
    assert launched_resources(found, ["_a", "_a_b"]) == {"_a": {"REG": 1}, "_a_b": {"REG": 3}}


def test_kernel_resources_says_how_to_get_cuobjdump(monkeypatch, tmp_path):
    import sap_gpu.precompile as pre

    monkeypatch.setattr(pre, "find_cuobjdump", lambda: None)
    with pytest.raises(RuntimeError, match=r"cuda-tools"):
        pre.kernel_resources(str(tmp_path / "x.cubin"))


def test_kernel_lives_says_how_to_get_nvdisasm(monkeypatch, tmp_path):
    import sap_gpu.precompile as pre

    monkeypatch.setattr(pre, "find_nvdisasm", lambda: None)
    with pytest.raises(RuntimeError, match=r"nvdisasm not found.*cuda-tools"):
        pre.kernel_lives(str(tmp_path / "x.cubin"))


def test_line_information_never_goes_into_the_kernel_cache():
    """A variant compiled with line information keeps the variant's file name: it needs a folder of
    its own, refused before anything compiles."""
    with pytest.raises(ValueError, match=r"lineinfo: give an out_dir"):
        compile_variant(None, 32, ARCH, None, lineinfo=True)


def _listings(root: str) -> tuple[str, str]:
    """A kernel's machine code as nvdisasm lists it (--print-life-ranges --life-range-mode count, and
    --print-line-info-inline), cut down: a loop (.L_x_1 back from 0x30) around a local load and a
    call of a __noinline__ function foo::run, a local store after the loop; run's code comes from
    a wp.func_native snippet (a line past its Python file's end), the kernel's load from a wp.func
    line (contact_problem.py:7) inlined at the kernel line contact_solve_fused.py:9."""
    k = "k_1234abcd_cuda_kernel_forward"
    fused, rows = f"{root}/sap_gpu/contact_solve_fused.py", f"{root}/sap_gpu/contact_problem.py"
    native = f"{root}/sap_gpu/lane_cholesky.py"
    lives = f"""
.text.{k}:                                                      // |       |        |
        /*0000*/                   LDC R1, c[0x0][0x28] ;       // |    2  |    1   |
.L_x_1:                                                         // |       |        |
        /*0010*/                   LDL R2, [R1] ;               // |   10  |    1   |
        /*0020*/                   CALL.REL.NOINC `(${k}$_ZN3foo3runEPKfxi) ;  // |   12  |    1   |
        /*0030*/               @P0 BRA `(.L_x_1) ;              // |    5  |    2   |
        /*0040*/                   STL [R1], R2 ;               // |    3  |    1   |
        /*0050*/                   EXIT ;                       // |    1  |        |
${k}$_ZN3foo3runEPKfxi:                                         // +.......+
        /*0060*/                   FADD R3, R4, R5 ;            // |   40  |        |
        /*0070*/                   RET.REL.NODEC R20 `({k}) ;   // |   40  |        |
"""
    lines = f"""
.text.{k}:
	//## File "{fused}", line 5
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
	//## File "/warp/native/array.h", line 390 inlined at "{rows}", line 7
	//## File "{rows}", line 7 inlined at "{fused}", line 9
	//## File "{fused}", line 9
        /*0010*/                   LDL R2, [R1] ;
        /*0020*/                   CALL.REL.NOINC `(${k}$_ZN3foo3runEPKfxi) ;
        /*0030*/               @P0 BRA `(.L_x_1) ;
	//## File "{fused}", line 9
        /*0040*/                   STL [R1], R2 ;
        /*0050*/                   EXIT ;
${k}$_ZN3foo3runEPKfxi:
	//## File "{native}", line 99999
        /*0060*/                   FADD R3, R4, R5 ;
        /*0070*/                   RET.REL.NODEC R20 `({k}) ;
"""
    return lives, lines


def test_kernel_lives_reads_peaks_lines_loops_and_spills(monkeypatch):
    import pathlib

    import sap_gpu.precompile as pre

    lives, lines = _listings(str(pathlib.Path(pre.__file__).resolve().parents[1]))

    def nvdisasm(cmd, **kw):
        assert cmd[0] == "nvdisasm" and cmd[-1] == "k.cubin"
        return subprocess.CompletedProcess(cmd, 0, lives if "--print-life-ranges" in cmd else lines, "")

    monkeypatch.setattr(pre.subprocess, "run", nvdisasm)
    (name, k), = kernel_lives("k.cubin", "nvdisasm").items()
    assert name == "k_1234abcd_cuda_kernel_forward"
    assert k["peak"] == 40 and k["functions"] == {"kernel": 12, "foo::run": 40}
    by_where = {(x.where, x.called_from, x.depth): x for x in k["lines"]}
    assert k["lines"][0].where == "lane_cholesky.py (native code)" and k["lines"][0].function == "foo::run"
    assert k["lines"][0].depth == 1  # called from inside the loop
    inner = by_where[("contact_problem.py:7", "contact_solve_fused.py:9", 1)]
    assert (inner.peak, inner.instructions, inner.local_loads, inner.local_stores) == (12, 3, 1, 0)
    after = by_where[("contact_solve_fused.py:9", "contact_solve_fused.py:9", 0)]
    assert (after.peak, after.instructions, after.local_loads, after.local_stores) == (3, 2, 0, 1)
    assert by_where[("contact_solve_fused.py:5", "contact_solve_fused.py:5", 0)].peak == 2

    # sap-precompile --lives' code size: every instruction counted once, by the kernel line it is
    # inlined at; a subroutine's under its name in brackets; the most first
    from sap_tools.precompile import _code_by_kernel_line

    code = _code_by_kernel_line(k["lines"])
    assert sum(code.values()) == sum(x.instructions for x in k["lines"])
    assert code["contact_solve_fused.py:9"] == sum(x.instructions for x in k["lines"] if x.function == "kernel"
                                                  and x.called_from == "contact_solve_fused.py:9") == 5
    assert code["[foo::run]"] == sum(x.instructions for x in k["lines"] if x.function == "foo::run") > 0
    assert list(code.values()) == sorted(code.values(), reverse=True)


def _ncu_csv(kernel: str, opcodes: list[str], rows: list[tuple]) -> str:
    """The source page of an Nsight Compute report as ``ncu --page source --csv --print-source sass``
    writes it, cut down to the columns read and two stall reasons (with their not-issued twins,
    which are not read): one row per instruction (samples, executed, no_inst, long_sb), the
    kernel loaded at a device address."""
    head = ['"Kernel Name","%s",' % kernel,
            '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
            '"Instructions Executed","stall_long_sb","stall_no_inst","stall_long_sb (Not Issued)",'
            '"stall_no_inst (Not Issued)"']
    body = [f'"0x{0x7FF744A48000 + 16 * i:x}","{op} R1, R2 ;","{n:,}","0","{e:,}","{lsb}","{ni}","0","0"'
            for i, (op, (n, e, ni, lsb)) in enumerate(zip(opcodes, rows))]
    return "\n".join(head + body) + "\n"


SYNTHETIC_OPCODES = ["LDC", "LDL", "CALL.REL.NOINC", "@P0 BRA", "STL", "EXIT", "FADD", "RET.REL.NODEC"]


def test_ncu_samples_go_to_the_python_lines_of_the_same_machine_code(monkeypatch):
    """ncu_source_samples: each instruction's samples, executed count and stall reasons go to its
    Python line (innermost, and the kernel line it is inlined at) by its offset in the kernel,
    checked opcode by opcode against the listing; another build's code is refused."""
    import pathlib

    import sap_gpu.precompile as pre

    _, lines = _listings(str(pathlib.Path(pre.__file__).resolve().parents[1]))
    monkeypatch.setattr(pre.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, lines, ""))
    k = "k_1234abcd_cuda_kernel_forward"
    rows = [(5, 10, 3, 0), (40, 100, 10, 25), (2, 100, 1, 0), (3, 100, 0, 0), (1, 10, 0, 1), (0, 10, 0, 0),
            (7, 20, 7, 0), (2, 20, 0, 0)]
    text = _ncu_csv(k, SYNTHETIC_OPCODES, rows)
    assert ncu_kernel_names(text) == [k]
    (name, v), = ncu_source_samples(text, "k.cubin", "nvdisasm").items()
    assert name == k and v["samples"] == 60 and v["executed"] == 370
    assert v["stalls"] == {"no_inst": 21, "long_sb": 26}  # the not-issued columns are not read
    by = {(x.where, x.called_from): x for x in v["lines"]}
    inner = by[("contact_problem.py:7", "contact_solve_fused.py:9")]
    assert (inner.instructions, inner.samples, inner.executed, inner.stalls) == \
        (3, 45, 300, {"no_inst": 11, "long_sb": 25})
    assert v["lines"][0] is inner  # most samples first
    native = by[("lane_cholesky.py (native code)", "lane_cholesky.py (native code)")]
    assert (native.function, native.samples, native.instructions) == ("foo::run", 9, 2)
    other = SYNTHETIC_OPCODES[:6] + ["FMUL", "RET.REL.NODEC"]
    with pytest.raises(RuntimeError, match="1 of 8 instructions differ"):
        ncu_source_samples(_ncu_csv(k, other, rows), "k.cubin", "nvdisasm")
    with pytest.raises(RuntimeError, match="are not in k.cubin"):
        ncu_source_samples(_ncu_csv("k_99999999_cuda_kernel_forward", SYNTHETIC_OPCODES, rows), "k.cubin", "nvdisasm")
    with pytest.raises(RuntimeError, match="no kernel table"):
        ncu_source_samples("not,a,report\n", "k.cubin", "nvdisasm")


def test_ncu_source_that_holds_no_kernel_table_fails_before_any_work(tmp_path):
    bad = tmp_path / "empty.csv"
    bad.write_text("==PROF== Connected to process\n")
    run = subprocess.run([sys.executable, "-m", "sap_tools.precompile", "humanoid", "--ncu-source", str(bad)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "--ncu-source: no kernel table in" in run.stderr, run.stderr


@pytest.mark.parametrize("argv, message", [
    (["humanoid", "--preset", "fast"], "--preset/--line-search: contact_preset_variant: 'fast' is not valid"),
    (["humanoid", "--line-search", "exact_root", "newton"],
     "--preset/--line-search: line_search_variant: 'newton' is not valid"),
    (["humanoid", "--newton-path", "graph"], "--newton-path: 'graph' is not valid; valid: fused, staged"),
    (["humanoid", "--linear-solver", "lu"], "--linear-solver: 'lu' is not valid; valid: cholesky, pcr"),
    (["humanoid", "--approximation", "tamsi"], "--approximation: 'tamsi' is not valid; valid: sap, lagged, similar"),
    (["humanoid", "--fused-hessian", "dense"], "--fused-hessian: 'dense' is not valid; valid: rows, tiles"),
    (["humanoid", "--fused-cholesky", "lu"], "--fused-cholesky: 'lu' is not valid; valid: auto, tile, lanes"),
    (["humanoid", "--resources", "--cuda-output", "ptx"], "--resources: cuobjdump reads CUBIN files"),
    (["humanoid", "--lives", "--cuda-output", "ptx"], "--lives: nvdisasm reads CUBIN files"),
    (["humanoid", "--ncu-source", "/no/such/report.csv"], "--ncu-source: cannot read /no/such/report.csv"),
    (["humanoid", "--arch", "9"], "--arch: an SM architecture such as 80, 90 or 100, got 9"),
    (["no_such_scene"], "no_such_scene"),
])
def test_bad_flags_fail_in_one_line_before_any_work(argv, message):
    run = subprocess.run([sys.executable, "-m", "sap_tools.precompile", *argv], capture_output=True, text=True)
    assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_dry_run_lists_the_step_without_compiling_for_the_cpu(monkeypatch):
    """step_variants runs collide + step as a dry run: no kernel is loaded on the CPU device."""
    from warp._src import context

    loaded = []
    real = context.Module.load
    monkeypatch.setattr(context.Module, "load", lambda self, *a, **k: loaded.append(self.name) or real(self, *a, **k))
    scene = scenes.get("box_stack", num_worlds=1)
    record = step_variants(scene.sap_model, scene.max_rigid_contact)
    assert not loaded and len(record.variants) >= 8
    names = [n for n, _ in record.variants]
    assert any("fused_newton" in n for n in names) and "sap_gpu.kinematics" in names


# ---------------------------------------------------------------------------- CUDA compile (no GPU)

def _humanoid_variants():
    scene = scenes.get("humanoid", num_worlds=1)
    variants, used_by = {}, {}
    for preset, path, solver, _ in configurations(list(PRESETS), list(NEWTON_PATHS), list(LINEAR_SOLVERS)):
        record = step_variants(scene.sap_model, scene.max_rigid_contact, contact_preset_variant=preset,
                               newton_path=path, contact_linear_solver=solver)
        for key, module in record.variants.items():
            variants.setdefault(key, (module, record.kernels[key]))
            used_by.setdefault(key, []).append(f"{preset}/{path}/{solver}")
    return variants, used_by


@pytest.fixture(scope="module")
def humanoid_sm90(tmp_path_factory):
    """Every (module, block size) variant of the humanoid step in every configuration, compiled for
    sm_90 into an empty folder (so nothing comes from a cache): {variant: (kernels, result)}."""
    out = str(tmp_path_factory.mktemp("sm90"))
    variants, used_by = _humanoid_variants()
    compiled, failures = {}, []
    for key, (module, kernels) in variants.items():
        try:
            compiled[key] = (kernels, compile_variant(module, key[1], ARCH, out))
        except Exception as e:  # every failing module is reported, not only the first
            failures.append(f"{key[0]} (block {key[1]}, {', '.join(used_by[key])}): {' '.join(str(e).split())[:500]}")
    return compiled, failures


@pytest.mark.cuda_compile
def test_every_kernel_of_the_humanoid_step_compiles_for_sm90(humanoid_sm90):
    compiled, failures = humanoid_sm90
    assert not failures, "modules that do not compile for sm_90:\n" + "\n".join(failures)
    assert all(r.path and r.path.endswith(".sm90.cubin") for _, r in compiled.values())
    total = sum(r.seconds for _, r in compiled.values())
    print(json.dumps({"variants": len(compiled), "compile_seconds": round(total, 1)}))


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump not installed (pip install -e \".[cuda-tools]\")")
def test_humanoid_step_kernels_stay_within_mujoco_warps_heaviest(humanoid_sm90):
    compiled, failures = humanoid_sm90
    assert not failures
    over, seen = [], set()
    for (name, block_dim), (kernels, result) in compiled.items():
        for kernel, res in launched_resources(kernel_resources(result.path), kernels).items():
            seen.add(kernel)
            exception = next((v for k, v in BUDGET_EXCEPTIONS.items() if kernel.startswith(k)), None)
            reg_max, stack_max = (exception[0], exception[1]) if exception else (MJWARP_MAX_REG, MJWARP_MAX_STACK)
            if res["REG"] > reg_max or res["STACK"] > stack_max:
                over.append(f"{kernel} ({name}): REG {res['REG']} (limit {reg_max}), STACK {res['STACK']} B "
                            f"(limit {stack_max})")
    assert not over, "kernels over their resource budget:\n" + "\n".join(over)
    unused = [k for k in BUDGET_EXCEPTIONS if not any(s.startswith(k) for s in seen)]
    assert not unused, f"budget exceptions for kernels the step no longer launches: {unused}"


def _default_fused_variant(preset: str, line_search: str = BUDGETED_LINE_SEARCH):
    """The fused Newton kernel's (module, block size) variant of the humanoid step in the default
    configuration of ``preset`` with ``line_search``: ``(module, block_dim, kernels)``."""
    scene = scenes.get("humanoid", num_worlds=1)
    step = step_variants(scene.sap_model, scene.max_rigid_contact, contact_preset_variant=preset,
                         line_search_variant=line_search)
    (key,) = [k for k in step.variants if "fused_newton" in k[0]]
    return step.variants[key], key[1], step.kernels[key]


def _fused_variant(**config):
    """The one (module, block size) variant of the humanoid step that ``config`` changes against
    the default configuration of the same preset and line search (BUDGETED_LINE_SEARCH unless
    ``config`` names one; it must be the fused Newton kernel's): ``(module, block_dim, kernels)``."""
    scene = scenes.get("humanoid", num_worlds=1)
    config.setdefault("line_search_variant", BUDGETED_LINE_SEARCH)
    preset = {k: v for k, v in config.items() if k in ("contact_preset_variant", "line_search_variant")}
    plain = step_variants(scene.sap_model, scene.max_rigid_contact, **preset)
    changed_step = step_variants(scene.sap_model, scene.max_rigid_contact, **config)
    changed = sorted(set(changed_step.variants) - set(plain.variants))
    assert len(changed) == 1 and "fused_newton" in changed[0][0], changed
    (key,) = changed
    return changed_step.variants[key], key[1], changed_step.kernels[key]


def _fused_kernel_resources(out_dir, **config):
    """Compile for sm_90 the fused Newton kernel of ``config`` (:func:`_fused_variant`) and return
    its cuobjdump resources."""
    module, block_dim, kernels = _fused_variant(**config)
    result = compile_variant(module, block_dim, ARCH, str(out_dir))
    (res,) = launched_resources(kernel_resources(result.path), kernels).values()
    return res


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump not installed (pip install -e \".[cuda-tools]\")")
def test_a_register_cap_reaches_the_fused_kernel(tmp_path):
    """SapConfig.fused_max_registers compiles the humanoid's fused kernel for sm_90 within the cap
    (it spills what does not fit); no other kernel of the step changes."""
    cap = 128  # drake's own ("auto") is 168
    res = _fused_kernel_resources(tmp_path, contact_preset_variant="drake", fused_max_registers=cap)
    assert res["REG"] <= cap, res
    print(json.dumps({"fused_max_registers": cap, **res}))


# SapConfig.fused_hessian="tiles": what its fused kernel needs today on sm_90 (REG, STACK B), per
# preset. The tile assembly (J and G J slabs, the shared products, A + diag(d) through the
# scratch) adds to the row kernel's loop state; the compiler takes every register and spills the
# rest; the dense passes over the shared A took approx32's spill from 144 to 80 B, and slabs of 16
# rows instead of 32 to 64 B (drake: 144 to 56 B) (docs/benchmarks.md § Forming H by tiles), and
# the loop state kept in memory between stages to 16 B (both); the rolled sums over non-zero
# lists (their loops keep the arrays' bases and strides in registers) to 24 B, and those loops
# through row pointers to 32 B (both): this kernel already takes all 255 registers, and each loop
# now keeps its row pointers live across the loop where it recomputed every address from the
# array (docs/benchmarks.md § Address arithmetic in the Newton loops); the scalar rows walked term
# by term, drives as rows of the slabs, took it to no stack at all
# (docs/benchmarks.md § The scalar rows' loops). A change that needs more fails here and must say why.
TILE_HESSIAN_BUDGET = {"approx32": (255, 0), "drake": (255, 0)}


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump not installed (pip install -e \".[cuda-tools]\")")
@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_the_tile_hessian_kernel_compiles_within_its_budget(tmp_path, preset):
    """fused_hessian="tiles" changes only the humanoid's fused kernel, which compiles for sm_90
    within TILE_HESSIAN_BUDGET."""
    res = _fused_kernel_resources(tmp_path, contact_preset_variant=preset, fused_hessian="tiles")
    reg, stack = TILE_HESSIAN_BUDGET[preset]
    assert res["REG"] <= reg and res["STACK"] <= stack, res
    print(json.dumps({"fused_hessian": "tiles", "preset": preset, **res}))


# SapConfig.fused_cholesky="lanes" (a GPU's default) without a register cap
# (fused_max_registers="none"): what its fused kernel needs on sm_90 (REG, STACK B), per preset.
# The register elimination is a call CUDA does not inline (sap_gpu/lane_cholesky.py), and the
# kernel's peak of live registers is inside it (approx32: 159 there, 129 in the rest of the
# kernel; test_where_the_lanes_kernel_holds_its_registers_and_where_a_cap_spills).
# Drake's float64 rows take 64 registers and the shuffled column as many again (160 with the
# steps unrolled; 170 rolled, the select of a step's column taking the rest: rolled, the call is
# 1,240 instructions instead of 3,241). Inlined, the elimination took approx32 to 255 registers
# and a 264 B stack. The rolled sums over non-zero lists (sap_gpu.contact_problem.rolled_sums)
# took approx32 from 153 to 162 and drake from 170 to 180 (docs/benchmarks.md § Rolled sums in the fused kernel);
# their loops through pointers and the step's column picked by a tree of selects took approx32
# to 160, drake staying at 180 (docs/benchmarks.md § Address arithmetic in the Newton loops); the
# world's A, v* and Δv in shared tiles to 168 and 193, which the default cap
# (AUTO_BUDGET) brings back down (docs/benchmarks.md § Register caps by default). The scalar
# rows walked term by term with φ's sums carried as a vector took drake to 211 and approx32 to 164
# (docs/benchmarks.md § The scalar rows' loops): drake stays in the bracket of 169 to 256
# registers, two warps per scheduler, 8 worlds per multiprocessor, as at 193, and the capped
# kernels of the default spill 16 B less each.
# Worlds per H100 multiprocessor (a scheduler's 16,384 registers hold three warps of up to 168
# registers, two of up to 256): approx32 12 (with the tile Cholesky 8), drake 8 (8)
# (docs/benchmarks.md § Rolled sums and the register elimination on an H100).
# A change that needs more fails here and must say why (see
# docs/benchmarks.md § Factoring in registers).
LANE_CHOLESKY_BUDGET = {"approx32": (164, 0), "drake": (211, 0)}
# The same kernel as the default compiles it (fused_max_registers="auto": FUSED_AUTO_MAX_REGISTERS by
# the linear-solve precision): within the cap, with the spill it takes today.
AUTO_BUDGET = {"approx32": (FUSED_AUTO_MAX_REGISTERS["fp32"], 144), "drake": (FUSED_AUTO_MAX_REGISTERS["fp64"], 40)}
# SapConfig.fused_cholesky="tile": Warp's tile Cholesky in the same kernel. 164 (both presets)
# before the rolled sums, 173 and 172 after, 174 with the loops through pointers; above 168 an
# H100 multiprocessor holds 8 worlds instead of 12.
TILE_CHOLESKY_BUDGET = {"approx32": (174, 0), "drake": (174, 0)}


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump not installed (pip install -e \".[cuda-tools]\")")
@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_the_fused_kernel_compiles_within_its_budget_with_either_factorization(tmp_path, preset):
    """The humanoid step's fused kernel compiles for sm_90 within AUTO_BUDGET as the default
    configuration compiles it, and within LANE_CHOLESKY_BUDGET without a cap; fused_cholesky="tile"
    changes only that kernel, which the default leaves uncapped and which stays within
    TILE_CHOLESKY_BUDGET. Only the capped kernel has a stack."""
    module, block_dim, kernels = _default_fused_variant(preset)
    result = compile_variant(module, block_dim, ARCH, str(tmp_path / "auto"))
    (auto,) = launched_resources(kernel_resources(result.path), kernels).values()
    lanes = _fused_kernel_resources(tmp_path / "lanes", contact_preset_variant=preset, fused_max_registers="none")
    tile = _fused_kernel_resources(tmp_path / "tile", contact_preset_variant=preset, fused_cholesky="tile")
    for res, (reg, stack) in ((auto, AUTO_BUDGET[preset]), (lanes, LANE_CHOLESKY_BUDGET[preset]),
                              (tile, TILE_CHOLESKY_BUDGET[preset])):
        assert res["REG"] <= reg and res["STACK"] <= stack, (res, reg, stack)
    print(json.dumps({"preset": preset, "auto": auto, "lanes": lanes, "tile": tile}))


# Loops of the fused kernel's machine code around an instruction (SourceLives.depth): Warp's loop
# over the launch's threads (1) and the Newton loop (2); deeper are the loops inside one Newton
# iteration (the line search's trials and φ(α)'s rows, the rows of the evaluation and of H).
NEWTON_LOOP_DEPTH = 2
LANES_REGISTER_CAP = 128  # 16 blocks (worlds) of 32 lanes per SM by registers: 65,536 / (32 · 128)


def _lines_of_call(path: str, function: str) -> set[str]:
    """``file:line`` (as SourceLives names lines) of every line of the one statement of ``path``
    that calls ``function``: line information may name any line of a statement split over several."""
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == function]
    assert len(calls) == 1, (function, [c.lineno for c in calls])
    return {f"{pathlib.Path(path).name}:{i}" for i in range(calls[0].lineno, calls[0].end_lineno + 1)}


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_cuobjdump() is None or find_nvdisasm() is None,
                    reason="cuobjdump or nvdisasm not installed (pip install -e \".[cuda-tools]\")")
def test_where_the_lanes_kernel_holds_its_registers_and_where_a_cap_spills(tmp_path):
    """approx32's fused kernel with fused_cholesky="lanes" (a GPU's default), read with kernel_lives
    (docs/benchmarks.md § Where the registers are live): line information leaves the machine code
    as it was (the same REG and STACK); without a cap the most registers are live inside the
    register elimination (a __noinline__ subroutine), not in the kernel's own code; a cap of 128
    (approx32's default, fused_max_registers="auto") spills, but nothing inside the line search's
    loop, which evaluates φ(α) for every trial step (the most often run code of a step: 23
    evaluations against 8.5 Newton iterations per step on the H100's humanoid runs)."""
    import sap_gpu.contact_solve_fused as fused

    search = _lines_of_call(fused.__file__, "search")
    assert FUSED_AUTO_MAX_REGISTERS["fp32"] == LANES_REGISTER_CAP  # approx32's default is the capped kernel
    found = {}
    for cap in (None, LANES_REGISTER_CAP):
        module, block_dim, kernels = (_default_fused_variant("approx32") if cap is not None else
                                      _fused_variant(contact_preset_variant="approx32", fused_max_registers="none"))
        plain = compile_variant(module, block_dim, ARCH, str(tmp_path / f"plain{cap}"))
        lined = compile_variant(module, block_dim, ARCH, str(tmp_path / f"lines{cap}"), lineinfo=True)
        (res,) = launched_resources(kernel_resources(plain.path), kernels).values()
        (res_lined,) = launched_resources(kernel_resources(lined.path), kernels).values()
        assert res_lined == res, (cap, res, res_lined)
        (lives,) = launched_resources(kernel_lives(lined.path), kernels).values()
        assert lives["peak"] <= res["REG"], (cap, lives["peak"], res)
        found[cap] = (res, lives)
    res, lives = found[None]
    assert res["STACK"] == 0 and lives["functions"]["sap_lane_cholesky::run"] == lives["peak"]
    assert lives["functions"]["kernel"] < lives["peak"], lives["functions"]
    res, lives = found[LANES_REGISTER_CAP]
    assert res["REG"] <= LANES_REGISTER_CAP, res
    spills = [x for x in lives["lines"] if x.local_loads or x.local_stores]
    in_search = [x for x in lives["lines"] if x.called_from in search and x.depth > NEWTON_LOOP_DEPTH]
    assert in_search, f"no instruction of the line search's loop found at {search}"
    assert spills and not [x for x in in_search if x.local_loads or x.local_stores], spills
    print(json.dumps({"uncapped": {"REG": found[None][0]["REG"], **found[None][1]["functions"]},
                      "capped": {**res, "local_loads": sum(x.local_loads for x in spills),
                                 "local_stores": sum(x.local_stores for x in spills)}}))


# The fused kernel's machine instructions on sm_90 (the default register elimination), as
# kernel_lives counts them: what its code takes today. On an H100 the kernel's warps waited for
# their next instruction to be fetched more than for anything else
# (docs/benchmarks.md § The fused kernel under Nsight Compute),
# so its code size is held like its registers: a change that needs more fails here and must say
# why. With the tile Cholesky: 10,889 (approx32) and 11,628 (drake) before the sums over non-zero
# lists became loops the compiler keeps rolled, 9,072 and 9,806 after
# (docs/benchmarks.md § Rolled sums in the fused kernel). With the register elimination: 7,793
# and 7,930, then 7,282 and 7,416 with the loops through pointers and the tree of selects
# (docs/benchmarks.md § Address arithmetic in the Newton loops). With A, v* and Δv in shared tiles
# (dense passes over A's rows, the tiles' loads) 8,251 and 8,324 without a cap, and as the default
# compiles it (fused_max_registers="auto", its spills included) 8,375 and 8,381; on the H100 the
# step with that kernel (and the coalesced set-up kernels of the same change) ran 1.12x (approx32)
# and 1.13x (drake) faster than with the 7,282/7,416-instruction one
# (docs/benchmarks.md § Register caps by default).
FUSED_CODE_BUDGET = {"approx32": 8375, "drake": 8381}


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed (pip install -e \".[cuda-tools]\")")
@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_the_fused_kernel_code_stays_within_its_budget(tmp_path, preset):
    """The humanoid's fused Newton kernel, compiled for sm_90 with line information, has at most
    FUSED_CODE_BUDGET machine instructions."""
    module, block_dim, kernels = _default_fused_variant(preset)
    lined = compile_variant(module, block_dim, ARCH, str(tmp_path), lineinfo=True)
    (lives,) = launched_resources(kernel_lives(lined.path), kernels).values()
    code = sum(x.instructions for x in lives["lines"])
    assert code <= FUSED_CODE_BUDGET[preset], (preset, code)
    print(json.dumps({"preset": preset, "instructions": code}))


# exact_root, the default line search (docs/presets.md § Accuracy and work of the line searches): its
# fused kernel on sm_90 today, per preset, as the budgets above hold monotone_decay's: REG and
# STACK of the default (capped) kernel, of fused_max_registers="none" (the register elimination),
# of fused_cholesky="tile" and of fused_hessian="tiles", and its machine instructions. Each probe
# of the exact search needs φ' and φ'' (monotone_decay reads φ alone, so the compiler drops the
# other two sums and the rows' Hessian terms from its φ), and its Newton-with-bisection bracket
# (six float64 values) lives across every probe: uncapped, approx32 needs 198 registers against
# 164, and under the default caps approx32 spills 272 B against 144 and drake 128 B against 40,
# four loads and four stores of them inside the search's loop; the code is 1,642 (approx32) and
# 1,689 (drake) instructions longer. What this costs a GPU step, against the 16 % fewer Newton
# iterations, is for a GPU run to measure (scripts/gpu_check.sh). A change that needs more fails
# here and must say why.
# Re-measured with per-world parameters (the drives' effort limit read per world, a 2-D array in
# the Newton problem's struct): approx32 tile 206 -> 222 registers, code 9,680 -> 9,752; drake auto
# stack 128 -> 136 B, lanes 196 -> 198, tile 198 -> 200, tiles stack 104 -> 112 B, code 9,770 -> 9,803.
EXACT_ROOT_BUDGET = {
    "approx32": dict(auto=(FUSED_AUTO_MAX_REGISTERS["fp32"], 272), lanes=(198, 0), tile=(222, 0), tiles=(255, 112),
                     code=9752),
    "drake": dict(auto=(FUSED_AUTO_MAX_REGISTERS["fp64"], 136), lanes=(198, 0), tile=(200, 0), tiles=(255, 112),
                  code=9803),
}


@pytest.mark.cuda_compile
@pytest.mark.skipif(find_cuobjdump() is None or find_nvdisasm() is None,
                    reason="cuobjdump or nvdisasm not installed (pip install -e \".[cuda-tools]\")")
@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_the_default_line_searchs_fused_kernel_stays_within_its_budget(tmp_path, preset):
    """The humanoid's fused kernel with the default line search (exact_root), compiled for sm_90
    as the default configuration compiles it and with each of the kernel's options, within
    EXACT_ROOT_BUDGET."""
    assert SapConfig().line_search_variant == "exact_root"
    budget = EXACT_ROOT_BUDGET[preset]
    module, block_dim, kernels = _default_fused_variant(preset, "exact_root")
    lined = compile_variant(module, block_dim, ARCH, str(tmp_path / "lines"), lineinfo=True)
    (lives,) = launched_resources(kernel_lives(lined.path), kernels).values()
    plain = compile_variant(module, block_dim, ARCH, str(tmp_path / "auto"))
    found = {"auto": next(iter(launched_resources(kernel_resources(plain.path), kernels).values()))}
    for name, option in (("lanes", dict(fused_max_registers="none")), ("tile", dict(fused_cholesky="tile")),
                         ("tiles", dict(fused_hessian="tiles"))):
        found[name] = _fused_kernel_resources(tmp_path / name, contact_preset_variant=preset,
                                              line_search_variant="exact_root", **option)
    over = {k: (found[k], budget[k]) for k in ("auto", "lanes", "tile", "tiles")
            if found[k]["REG"] > budget[k][0] or found[k]["STACK"] > budget[k][1]}
    code = sum(x.instructions for x in lives["lines"])
    assert not over and code <= budget["code"], (preset, over, code)
    print(json.dumps({"preset": preset, "instructions": code, **{k: found[k] for k in budget if k != "code"}}))
