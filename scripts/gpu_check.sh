#!/usr/bin/env bash
# The GPU check: sap_gpu's tests and the humanoid benchmark against MuJoCo Warp on a CUDA device,
# from a kernel cache compiled beforehand on any machine, so that the GPU's minutes measure
# instead of compiling. Everything it produces goes into one folder.
#
#   scripts/gpu_check.sh prepare CACHE            # on any machine (no GPU needed), ~15 min on 2 cores
#   scripts/gpu_check.sh run OUT [CACHE]          # on the GPU machine, under 8 min
#   scripts/gpu_check.sh run OUT "" --smoke       # the same steps on the CPU device, tiny sizes
#
# prepare: compiles for sm_90 (GPU_CHECK_ARCH) into CACHE every kernel of the humanoid step
#   (approx32 and drake, fused, with each line search of GPU_CHECK_LINE_SEARCHES, each register
#   cap of GPU_CHECK_REGISTER_CAPS, each way of
#   forming H of GPU_CHECK_HESSIANS and of factoring it of GPU_CHECK_CHOLESKYS) and of MuJoCo
#   Warp's step (sap-precompile --vs-mjwarp), then runs the tests that take the device fixture on
#   the CPU with --precompile-arch, which compiles every sap_gpu kernel they launch. Copy CACHE to
#   the GPU machine beside the checkout (only its *.cubin and *.meta files are read there).
# run: with WARP_CACHE_PATH=CACHE and Warp told to load CUBIN (what prepare wrote), runs first
#   sap-benchmark humanoid --num-worlds 1024 4096 8192 --preset approx32 drake --vs-mjwarp
#       --line-search GPU_CHECK_LINE_SEARCHES
#       --fused-max-registers GPU_CHECK_REGISTER_CAPS --fused-hessian GPU_CHECK_HESSIANS
#       --fused-cholesky GPU_CHECK_CHOLESKYS
#   then, where Nsight Compute's ncu is on PATH, a profile of the fused Newton kernel (one launch
#   after 20 steps at 8192 humanoid worlds, --set full) for each preset of GPU_CHECK_NCU_PRESETS,
#   written as OUT/ncu_<preset>.csv (the source page, per machine instruction: read it on any
#   machine with sap-precompile humanoid --preset <preset> --newton-path fused --linear-solver
#   cholesky --ncu-source OUT/ncu_<preset>.csv) and OUT/ncu_<preset>.txt (ncu's log and details page),
#   then the per-world parameters on the GPU: sap-benchmark humanoid --num-worlds 8192 --preset approx32
#   --randomize (OUT/randomize.{log,json}: each run plain and with per-world parameters, their ratio) and
#   examples/domain_randomization.py --num-worlds 4096 (its resets under CUDA graph capture,
#   OUT/domain_randomization.{log,json}), each under GPU_CHECK_EXTRA_SECONDS (120),
#   then pytest --device cuda:0 -m "device and not slow"    (the tests of sap_gpu on the GPU)
#   each under its own time limit (the benchmark first: its figures do not wait on the tests),
#   and writes OUT/{env.txt, benchmark.log, benchmark.json, pytest.log, pytest.xml, summary.txt}.
#   Exit status: 0 if the benchmark and the tests passed (a failed profile is reported, not fatal).
# GPU_CHECK_TESTS limits both steps' pytest to some test paths (default: the whole tests/ folder);
# GPU_CHECK_LINE_SEARCHES (default "exact_root monotone_decay": the default line search since it
# was found to stop at the minimiser, and the one before, whose probes cost less) sweeps
# SapConfig.line_search_variant, and must be the same for prepare and run;
# GPU_CHECK_REGISTER_CAPS (default "auto": SapConfig's default caps; e.g. "auto none 128" adds the
# compiler's choice and 16 worlds per SM) sweeps SapConfig.fused_max_registers likewise; GPU_CHECK_HESSIANS
# (default "rows"; "rows tiles" adds the tile assembly, timed on an H100 at 0.83x) sweeps
# SapConfig.fused_hessian likewise, GPU_CHECK_CHOLESKYS (default "lanes", a GPU's default; "tile
# lanes" adds Warp's tile Cholesky) SapConfig.fused_cholesky;
# GPU_CHECK_PYTEST_ARGS adds arguments to the GPU run's pytest (e.g. "-n 4 --timeout 120");
# GPU_CHECK_NCU_PRESETS (default "approx32"; "" for no profile) the profiles, GPU_CHECK_NCU_SECONDS
# (120) the limit of each; GPU_CHECK_ARCH (90), GPU_CHECK_DEVICE (cuda:0), GPU_CHECK_PYTEST_SECONDS
# (300) and GPU_CHECK_BENCH_SECONDS (240) set the rest. Needs the project installed (pip install -e ".[test]")
# or importable (PYTHONPATH).
set -uo pipefail
cd "$(dirname "$0")/.."

ARCH="${GPU_CHECK_ARCH:-90}"
DEVICE="${GPU_CHECK_DEVICE:-cuda:0}"
PYTEST_LIMIT="${GPU_CHECK_PYTEST_SECONDS:-300}"
BENCH_LIMIT="${GPU_CHECK_BENCH_SECONDS:-240}"
PY="${PYTHON:-python3}"
read -r -a TESTS <<< "${GPU_CHECK_TESTS:-tests}"
read -r -a LINE_SEARCHES <<< "${GPU_CHECK_LINE_SEARCHES:-exact_root monotone_decay}"
read -r -a CAPS <<< "${GPU_CHECK_REGISTER_CAPS:-auto}"
read -r -a HESSIANS <<< "${GPU_CHECK_HESSIANS:-rows}"
read -r -a CHOLESKYS <<< "${GPU_CHECK_CHOLESKYS:-lanes}"
read -r -a PYTEST_EXTRA <<< "${GPU_CHECK_PYTEST_ARGS:-}"
read -r -a NCU_PRESETS <<< "${GPU_CHECK_NCU_PRESETS-approx32}"
NCU_LIMIT="${GPU_CHECK_NCU_SECONDS:-120}"
EXTRA_LIMIT="${GPU_CHECK_EXTRA_SECONDS:-120}"

usage() { sed -n '2,48p' "$0" >&2; exit 2; }

prepare() {
    local cache="$1"
    mkdir -p "$cache" || exit 2
    cache="$(cd "$cache" && pwd)"
    export WARP_CACHE_PATH="$cache"
    echo "== sap-precompile humanoid for sm_$ARCH into $cache"
    "$PY" -m sap_tools.precompile humanoid --arch "$ARCH" --preset approx32 drake --newton-path fused \
        --linear-solver cholesky --line-search "${LINE_SEARCHES[@]}" --fused-max-registers "${CAPS[@]}" \
        --fused-hessian "${HESSIANS[@]}" --fused-cholesky "${CHOLESKYS[@]}" --vs-mjwarp || exit 1
    echo "== the device tests on the CPU, their sap_gpu kernels compiled for sm_$ARCH"
    "$PY" -m pytest -q -p no:cacheprovider -m "device and not slow" --precompile-arch "$ARCH" "${TESTS[@]}" || exit 1
    du -sh "$cache"
    # The tests' variants compile after pytest's summary line (--precompile-arch compiles at the end
    # of the run): a cache copied before this line lacks them, and the GPU machine compiles them.
    echo "== prepare done: $(find "$cache" -name '*.cubin' | wc -l) CUBIN files in $cache; copy it now"
}

run() {
    local out="$1" cache="${2:-}" smoke="${3:-}"
    mkdir -p "$out" || exit 2
    out="$(cd "$out" && pwd)"
    if [ -n "$cache" ]; then export WARP_CACHE_PATH="$(cd "$cache" && pwd)"; fi
    local nw=(1024 4096 8192) bench_extra=() pytest_args=(-m "device and not slow" "${TESTS[@]}")
    local rand_nw=8192 dr_args=(--num-worlds 4096)
    if [ "$smoke" = "--smoke" ]; then
        DEVICE=cpu
        nw=(2)
        bench_extra=(--steps 2 --warmup 1 --structure-steps 1)
        rand_nw=2 dr_args=(--num-worlds 2 --steps 20 --reset-every 5)
        [ -n "${GPU_CHECK_TESTS:-}" ] || pytest_args=(-m "device and not slow" tests/test_gpu_launch.py)
    elif [ -n "$smoke" ]; then
        usage
    fi
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "device: $DEVICE, arch sm_$ARCH, WARP_CACHE_PATH=${WARP_CACHE_PATH:-}"
        command -v nvidia-smi >/dev/null && nvidia-smi
        "$PY" -c "import sys, warp as wp; wp.init(); print(sys.version); print('warp', wp.__version__, [str(d) for d in wp.get_devices()])"
    } > "$out/env.txt" 2>&1
    local cuda_output=()
    [ "$DEVICE" != cpu ] && cuda_output=(--cuda-output cubin)
    local t0=$SECONDS
    timeout "$BENCH_LIMIT" "$PY" -m sap_tools.benchmark humanoid --num-worlds "${nw[@]}" --preset approx32 drake \
        --vs-mjwarp --line-search "${LINE_SEARCHES[@]}" --fused-max-registers "${CAPS[@]}" \
        --fused-hessian "${HESSIANS[@]}" \
        --fused-cholesky "${CHOLESKYS[@]}" --device "$DEVICE" \
        "${cuda_output[@]}" "${bench_extra[@]}" \
        --out "$out/benchmark.json" > "$out/benchmark.log" 2>&1
    local bench_rc=$? bench_s=$((SECONDS - t0))
    local ncu_note="ncu: no profile (CPU device)"
    if [ "$DEVICE" != cpu ] && ! command -v ncu >/dev/null; then
        ncu_note="ncu: no profile (ncu not on PATH)"
    elif [ "$DEVICE" != cpu ]; then
        ncu_note="ncu:"
        for preset in "${NCU_PRESETS[@]}"; do
            local t=$SECONDS rep="$out/ncu_$preset"
            timeout -k 10 "$NCU_LIMIT" ncu --clock-control none -k regex:fused_newton --launch-skip 20 --launch-count 1 \
                --set full -f -o "$rep" "$PY" -m sap_tools.benchmark humanoid --num-worlds 8192 --preset "$preset" \
                --steps 1 --warmup 25 --structure-steps 1 --no-graph --device "$DEVICE" "${cuda_output[@]}" \
                > "$rep.txt" 2>&1
            local rc=$?
            if [ -f "$rep.ncu-rep" ]; then
                ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2>> "$rep.txt"
                ncu --import "$rep.ncu-rep" --page details --print-details all >> "$rep.txt" 2>&1
                rm -f "$rep.ncu-rep"
            fi
            ncu_note+=" $preset exit $rc in $((SECONDS - t)) s;"
        done
    fi
    [ "$ncu_note" = "ncu:" ] && ncu_note="ncu: no profile (GPU_CHECK_NCU_PRESETS is empty)"
    local te=$SECONDS
    timeout "$EXTRA_LIMIT" "$PY" -m sap_tools.benchmark humanoid --num-worlds "$rand_nw" --preset approx32 --randomize \
        --device "$DEVICE" "${cuda_output[@]}" "${bench_extra[@]}" --out "$out/randomize.json" > "$out/randomize.log" 2>&1
    local rand_rc=$? rand_s=$((SECONDS - te))
    te=$SECONDS
    timeout "$EXTRA_LIMIT" "$PY" examples/domain_randomization.py "${dr_args[@]}" --device "$DEVICE" \
        --out "$out/domain_randomization.json" > "$out/domain_randomization.log" 2>&1
    local dr_rc=$? dr_s=$((SECONDS - te))
    local t1=$SECONDS
    # SIGINT at the limit: pytest stops as on Ctrl-C and still writes its summary and pytest.xml.
    timeout -s INT -k 30 "$PYTEST_LIMIT" "$PY" -m pytest -q -p no:cacheprovider --device "$DEVICE" "${cuda_output[@]}" \
        "${PYTEST_EXTRA[@]}" "${pytest_args[@]}" --junitxml "$out/pytest.xml" > "$out/pytest.log" 2>&1
    local pytest_rc=$? t2=$SECONDS
    {
        echo "benchmark: exit $bench_rc in $bench_s s (limit $BENCH_LIMIT s)"
        echo "$ncu_note"
        echo "randomize: exit $rand_rc in $rand_s s; domain_randomization.py: exit $dr_rc in $dr_s s (limit $EXTRA_LIMIT s each)"
        echo "pytest: exit $pytest_rc in $((t2 - t1)) s (limit $PYTEST_LIMIT s): $(tail -n 1 "$out/pytest.log")"
    } | tee "$out/summary.txt"
    [ "$pytest_rc" = 0 ] && [ "$bench_rc" = 0 ]
}

case "${1:-}" in
    prepare) [ $# -eq 2 ] || usage; prepare "$2" ;;
    run) [ $# -ge 2 ] && [ $# -le 4 ] || usage; run "$2" "${3:-}" "${4:-}" ;;
    *) usage ;;
esac
