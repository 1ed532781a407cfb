#!/usr/bin/env bash
# One script for the GPU machine: configure the `cuda` preset and build (or use a prebuilt build directory),
# run every GPU test (tests/gpu) and the 27B-shaped benchmark (bench/gpu), and write everything under $OUT:
#   gpu_check.log              all output
#   gpu_tests.xml              gtest results of every GPU test executable (merged by name)
#   qwen35_27b_bf16.json       the benchmark record (bench/results/ format)
#   quant_kernels.json, qwen35_27b_int4.json, qwen35_27b_fp8.json   the quantized-kernel and 27B INT4/FP8 records
#   qmv_variants.json          the one-row kernel's variants, ablations and floors (bench/gpu/bench_qmv_variants.cu)
#   dequant_variants.json      the prefill dequantization pass's variants (bench/gpu/bench_dequant_variants.cu)
#   clocks.csv                 SM / memory clocks, power and throttle reasons every 20 ms beside the 27B runs (clocks)
#   decode_chain.json          the persistent decode-chain probe against per-stage launches and the library (chain)
#   nvidia-smi.txt             the card as found
#   run_<model>_<device>.txt   greedy ids of `grimoire run` on models/demo(-gptq-int4), CPU against CUDA
#
#   OUT=/tmp/out tools/gpu_check.sh                       # builds build/cuda with the preset
#   GRIMOIRE_CHECK=tests,run OUT=... tools/gpu_check.sh   # only those sections (see want() below)
#   GRIMOIRE_PREBUILT=build/cuda-dev OUT=... tools/gpu_check.sh   # uses binaries built elsewhere
# GRIMOIRE_PREBUILT_LIBS (optional) is prepended to LD_LIBRARY_PATH for libraries the build machine linked
# that the GPU machine lacks. Binaries built here travel to the device as one archive (tools/pack_gpu_binaries.sh:
# carry/pk.tar.xz, ~8 MB for all of them; unpack it into a folder laid out like a build directory's). Exit status: non-zero when any test failed or the benchmark did not run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1

BUILD=${GRIMOIRE_PREBUILT:-build/cuda}
if [ -z "${GRIMOIRE_PREBUILT:-}" ]; then
    cmake --preset cuda -DGRIMOIRE_WERROR=ON || exit 1
    cmake --build "$BUILD" --target grimoire bench_qwen35_27b bench_quant_kernels bench_qmv_variants bench_dequant_variants bench_qmv_wgmma probe_decode_chain \
        $(cd tests/gpu && ls test_*.cpp | sed 's/\.cpp$//') -j"$(nproc)" || exit 1
fi
export LD_LIBRARY_PATH="${GRIMOIRE_PREBUILT_LIBS:+$GRIMOIRE_PREBUILT_LIBS:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS may live only in a Python wheel on some images: find it there if the loader cannot.
if ldd "$BUILD/bench_qwen35_27b" 2>/dev/null | grep -q "libcublas.*not found"; then
    d=$(dirname "$(find /usr /opt -name 'libcublasLt.so.13*' -print -quit 2>/dev/null)")
    [ -n "$d" ] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH" && echo "using cuBLAS from $d"
fi
ldd "$BUILD/bench_qwen35_27b" | grep "not found" && echo "WARNING: unresolved libraries"
export GRIMOIRE_SHARED=${GRIMOIRE_SHARED:-$PWD/../shared}

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed"
head -15 "$OUT/nvidia-smi.txt"
# The binaries' commit: GRIMOIRE_COMMIT when set, else the COMMIT file tools/pack_some.sh puts beside packed
# binaries (a device machine's copy of the checkout may carry stale git metadata), else this checkout's HEAD.
COMMIT=${GRIMOIRE_COMMIT:-$(cat "$BUILD/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}

status=0
# GRIMOIRE_CHECK: the sections to run (comma-separated: tests, run, chain, bf16, quant, variants, w8a8, e2e,
# ablation, deep, f16, trace, f8h, defaults, clocks), default all.
# A device command is limited in time: the sections can be split over calls.
want() { [ "${GRIMOIRE_CHECK:-all}" = all ] || [[ ",$GRIMOIRE_CHECK," == *",$1,"* ]]; }
# rerun TAG VAR=VALUE... -- TEST...: the GPU tests named, again with the environment given (results $t_TAG.xml).
rerun() {
    local tag=$1 envs=() t exe
    shift
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    for t in "$@"; do
        exe="$BUILD/tests/$t"
        [ -x "$exe" ] || continue
        env "${envs[@]}" timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$exe" --gtest_output="xml:$OUT/${t}_$tag.xml" ||
            status=1
        echo "$t with ${envs[*]} done"
    done
}
if want tests; then
    echo "== GPU tests"
    for t in $(cd tests/gpu && ls test_*.cpp | sed 's/\.cpp$//'); do
        exe="$BUILD/tests/$t"
        [ -x "$exe" ] || { echo "missing $exe"; status=1; continue; }
        start=$SECONDS
        timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$exe" --gtest_output="xml:$OUT/$t.xml" || status=1
        echo "$t: $((SECONDS - start)) s"
    done
    # The quantized tests again with each M <= 16 kernel forced: by default M = 1..8 (INT4; FP8 1..4) take the qmv kernel
    # (quant_qmv.cuh), larger M FP8 the Hopper kernel on sm_90 and INT4 the cp.async one. GRIMOIRE_QMV=0 sends those
    # to the M <= 16 kernels too, and GRIMOIRE_QMM_TMA picks between those.
    rerun tma_0 GRIMOIRE_QMV=0 GRIMOIRE_QMM_TMA=0 -- test_cuda_quant
    rerun tma_all GRIMOIRE_QMV=0 GRIMOIRE_QMM_TMA=all -- test_cuda_quant
    # The decode-step kernels launch with programmatic dependent launch on Hopper: also check them launched plainly.
    rerun pdl0 GRIMOIRE_PDL=0 -- test_cuda_decode_ops test_cuda_model
    # INT4's earlier x-sum forms (GRIMOIRE_QMV_XSUMQ=0, the A/B of the default since session 40), against the same
    # CPU references.
    rerun xsumq0 GRIMOIRE_QMV_XSUMQ=0 -- test_cuda_quant test_cuda_quant_stack
    # The opt-in GRIMOIRE_QMV_DEEP=1 (session 41: INT4 one row, K <= 6144 one-tile weights, every chunk before the
    # programmatic-launch wait into a shared-memory ring), against the same CPU references.
    rerun deep1 GRIMOIRE_QMV_DEEP=1 -- test_cuda_quant test_cuda_quant_stack test_cuda_model
    # GRIMOIRE_QMV_CAP (session 46, on): the one-row launches at the kernels' own shared-memory size, as before it.
    rerun cap0 GRIMOIRE_QMV_CAP=0 -- test_cuda_quant test_cuda_quant_stack test_cuda_model
    # GRIMOIRE_QMV_CAP=all (the cap at 2..16 rows too, an A/B of section defaults).
    rerun capall GRIMOIRE_QMV_CAP=all -- test_cuda_quant test_cuda_quant_stack
    # Session 17's launch order and one-row dispatch switched off (the projection launched ahead of add_rmsnorm,
    # the qmv kernel's early dependents' launch, the staged blocks from 4 to 8 n-tiles per SM).
    rerun ahead0 GRIMOIRE_PDL_AHEAD=0 GRIMOIRE_QMV_EARLY=0 GRIMOIRE_QMV_MID=0 -- test_cuda_model test_cuda_graph_segments test_cuda_quant
    # FP8 prefill through the dequant pass + cuBLAS BF16 (GRIMOIRE_FP8_GEMM=0), where the default takes the W8A8
    # FP8 GEMM for 128 x 128-block weights.
    rerun dequant8 GRIMOIRE_FP8_GEMM=0 -- test_cuda_quant test_cuda_quant_stack test_cuda_model
    # The one-row FP8 MLP block in one launch is an opt-in (GRIMOIRE_MLP_FUSED=1): its Linear-level test with it on.
    rerun mlp1 GRIMOIRE_MLP_FUSED=1 -- test_cuda_mlp_fp8
    rerun mlpnorm GRIMOIRE_MLP_FUSED=1 GRIMOIRE_MLP_FUSED_NORM=1 -- test_cuda_mlp_fp8
    # The opt-in packs the MLP's FP8 weights n-tile-major, gate | up paired: the FP8 linears at every row count,
    # glu / conv parts, prefill and the models over each order, every weight packed so
    # (GRIMOIRE_FP8_NT_MAJOR=1 / =paired).
    rerun ntm GRIMOIRE_FP8_NT_MAJOR=1 -- test_cuda_quant test_cuda_w8a8 test_cuda_quant_stack test_cuda_model
    rerun ntmp GRIMOIRE_FP8_NT_MAJOR=paired -- test_cuda_quant test_cuda_w8a8 test_cuda_quant_stack test_cuda_model
    # The L2 prefetch hints (an opt-in, GRIMOIRE_L2_PREFETCH_MB): the hybrid models' greedy ids with them taken.
    rerun l2pf GRIMOIRE_L2_PREFETCH_MB=48 -- test_cuda_model test_cuda_fused
    # One XML file back instead of one per executable.
    cat "$OUT"/test_*.xml > "$OUT/gpu_tests.xml" 2>/dev/null && rm -f "$OUT"/test_*.xml

fi
if want run; then
    echo "== make_backend(\"auto\") through the CLI"
    if "$BUILD/grimoire" run --help 2>&1 | grep -q -- "--device"; then
        "$BUILD/grimoire" run --help | grep -- "--device"
    else
        echo "grimoire run has no --device option in this build (the CUDA factory is covered by test_cuda_model)"
    fi

    echo "== greedy ids: CUDA against the CPU oracle on the bundled models (48 tokens)"
    for m in demo demo-gptq-int4; do
        [ -d "models/$m" ] || continue
        for d in cpu cuda; do
            timeout 120 "$BUILD/grimoire" run --model "models/$m" --prompt "Once upon a time" --max-tokens 48 \
                --temperature 0 --output-ids --device "$d" > "$OUT/run_${m}_$d.txt" 2> "$OUT/run_${m}_$d.err" || status=1
        done
        if cmp -s "$OUT/run_${m}_cpu.txt" "$OUT/run_${m}_cuda.txt"; then echo "$m: CUDA greedy ids == CPU"
        else echo "$m: CUDA greedy ids DIFFER from CPU"; status=1; fi
    done

fi
if want chain; then
    # bench/gpu/probe_decode_chain.cu: 16 layers of the 27B INT4 MLP as one persistent kernel that streams the
    # weights across the dependent projections, against the same code launched per stage and the library's chain.
    echo "== persistent decode-chain probe (checked on 2 layers against the host first)"
    timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/probe_decode_chain" --commit "$COMMIT" \
        --out "$OUT/decode_chain.json" || status=1
fi
if want bf16; then
    echo "== benchmark: 27B-shaped Qwen3.5, BF16, random weights"
    timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights --commit "$COMMIT" --out "$OUT/qwen35_27b_bf16.json" || status=1

fi
if want quant; then
    echo "== quantized kernels (INT4 / FP8, M = 1..16 and prefill) with the torch int4 anchor of the same call"
    python3 bench/gpu/anchor_torch_int4.py --out "$OUT/anchor.json" || echo "anchor failed (no torch?)"
    timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_quant_kernels" --anchor "$OUT/anchor.json" --commit "$COMMIT" \
        --out "$OUT/quant_kernels.json" || status=1
fi
if want variants; then
    echo "== one-row INT4 kernel variants, ablations and load-only floors (timing; exact variants checked bit for bit)"
    timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qmv_variants" --commit "$COMMIT" --out "$OUT/qmv_variants.json" ||
        status=1
    if [ -x "$BUILD/bench_qmv_wgmma" ]; then
        echo "== sixteen rows on the warpgroup mma (sm_90a prototype, three schedules) against the committed kernel"
        timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qmv_wgmma" || status=1
    fi
    echo "== the prefill path's dequantization pass: variants, alone and with the cuBLAS GEMM at M = 512"
    timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_dequant_variants" --commit "$COMMIT" \
        --out "$OUT/dequant_variants.json" || status=1
fi
if want w8a8; then
    # The W8A8 FP8 prefill (the default: cuBLASLt's block-scaled FP8 GEMM) against the dequant pass + BF16 GEMM
    # (GRIMOIRE_FP8_GEMM=0): the kernel record (fp8_prefill_* beside fp8_dequant_prefill_*), then the 27B FP8
    # prompt, alternated.
    echo "== W8A8 FP8 prefill: kernel record and the 27B FP8 prompt A/B (GRIMOIRE_FP8_GEMM=0/1)"
    timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_quant_kernels" --only fp8:gate_up --commit "$COMMIT" \
        --out "$OUT/quant_kernels_w8a8.json" || status=1
    for v in 0 1 0 1; do
        for t in 512 4096; do
            echo "-- fp8 prefill $t GRIMOIRE_FP8_GEMM=$v"
            GRIMOIRE_FP8_GEMM=$v timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights \
                --quant fp8 --prefill-only --prefill-tokens $t --commit "$COMMIT" \
                --out "$OUT/qwen35_27b_fp8_p${t}_w8a8_$v.json" || status=1
        done
    done
fi
if want e2e; then
    for q in gptq fp8; do
        name=$([ "$q" = gptq ] && echo int4 || echo fp8)
        timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights --quant "$q" --commit "$COMMIT" \
            --verify-detail --out "$OUT/qwen35_27b_$name.json" || status=1
    done
fi
if want ablation; then
    # Where the 27B decode step goes (session 18's method; results wrong by design, the timing of what is left):
    # the step without logits with every op, only the quantized linears (and what feeds them), and without each
    # of the other op families in turn, INT4 and FP8. One record, $OUT/decode_step_ablation.json
    # (<format>_step1_nologits_run_ms_<tag>), the runs' own JSON and output in a scratch folder.
    echo "== 27B decode step ablation (GRIMOIRE_KEEP_OPS / GRIMOIRE_SKIP_OPS)"
    abl=$(mktemp -d)
    for q in gptq fp8; do
        name=$([ "$q" = gptq ] && echo int4 || echo fp8)
        for spec in all: linears:GRIMOIRE_KEEP_OPS=quant,zero,h2d,embed noquant:GRIMOIRE_SKIP_OPS=quant \
            nogdn:GRIMOIRE_SKIP_OPS=gdn_core nogattn:GRIMOIRE_SKIP_OPS=gattn_decode \
            noaddrms:GRIMOIRE_SKIP_OPS=add_rms all2:; do
            tag=${spec%%:*} rule=${spec#*:}  # rule: the run's one environment setting, or none
            env ${rule:+"$rule"} timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights \
                --quant "$q" --prefill-tokens 512 --decode-steps 16 --contexts 512 --commit "$COMMIT" \
                --out "$abl/${name}_$tag.json" > "$abl/${name}_$tag.log" 2>&1 || status=1
        done
    done
    python3 - "$abl" "$OUT/decode_step_ablation.json" "$COMMIT" <<'PY'
import datetime, glob, json, os, sys
src, dst, commit = sys.argv[1:4]
metrics, card = {}, ""
for p in sorted(glob.glob(os.path.join(src, "*.json"))):
    d = json.load(open(p))
    fmt, tag = os.path.basename(p)[:-5].split("_", 1)
    card = d.get("card", card)
    metrics[f"{fmt}_step1_nologits_run_ms_{tag}"] = round(d["metrics"]["step1_nologits_run_ms"], 3)
ratios = {}
for fmt in ("int4", "fp8"):
    base = metrics.get(f"{fmt}_step1_nologits_run_ms_all")
    if not base:
        continue
    for tag in ("linears", "noquant", "nogdn", "nogattn", "noaddrms"):
        v = metrics.get(f"{fmt}_step1_nologits_run_ms_{tag}")
        if v is not None:  # the step's share kept (linears, noquant) or removed (no<op>) by the tag
            ratios[f"{fmt}_{tag}_share"] = round(v / base if tag in ("linears", "noquant") else 1 - v / base, 3)
for k, v in {**metrics, **ratios}.items():
    print(k, v)
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), "commit": commit, "card": card,
           "command": "GRIMOIRE_KEEP_OPS=quant,zero,h2d,embed (linears) | GRIMOIRE_SKIP_OPS=quant|gdn_core|"
                      "gattn_decode|add_rms bench_qwen35_27b --random-weights --quant gptq|fp8 --prefill-tokens 512 "
                      "--decode-steps 16 --contexts 512 (tools/gpu_check.sh ablation; step1_nologits_run_ms of "
                      "each; results wrong by design, timing of what is left)",
           "metrics": metrics, "ratios": ratios}, open(dst, "w"), indent=1)
PY
    rm -rf "$abl"
fi
if want deep; then
    # GRIMOIRE_QMV_DEEP=1 (session 41; off: slower on the H100, session 42): INT4 one row on the K <= 6144 one-tile
    # weights asks for every chunk before the programmatic-launch wait. The INT4 tests with it (the tests
    # section's rerun, when that section is not run), then its A/B:
    # the one-row kernel record and the 27B INT4 decode, alternated 0/1/0/1.
    echo "== GRIMOIRE_QMV_DEEP=1: INT4 tests, then the A/B (one-row kernels, 27B INT4 decode)"
    want tests || rerun deep1 GRIMOIRE_QMV_DEEP=1 -- test_cuda_quant test_cuda_quant_stack test_cuda_model
    for run in 0_p1 1_p1 0_p2 1_p2; do
        GRIMOIRE_QMV_DEEP=${run%_*} timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights \
            --quant gptq --commit "$COMMIT" --out "$OUT/qwen35_27b_int4_deep$run.json" | grep -E "decode ctx +512" ||
            status=1
    done
    for v in 0 1; do
        GRIMOIRE_QMV_DEEP=$v timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_quant_kernels" --only int4 --rows 1 \
            --commit "$COMMIT" --out "$OUT/quant_kernels_int4_m1_deep$v.json" | grep -E "int4 +(o_proj|down) " || status=1
    done
fi
if want f16; then
    # INT4 one row with the mma in FP16 (bench variants msum_f16q_*: session 45, with the library's x sums; loop SASS
    # 172 -> 145 a two-chunk step of the two-tile form) and the same given x already in FP16 (msum_f16q_pre_*: no
    # conversion pass, the bound on x written in FP16 by its producer) against the library's BF16 forms, twice:
    # the H200 A/B that decides whether producers should write x in FP16 (docs/BENCHMARKS.md session 45). The
    # FP8 forms (f16_*, f16_pre_*) are in section f8h.
    echo "== INT4 one row, FP16 mma forms against the library (bench_qmv_variants)"
    l=
    for s in gate_up down q_gate gdn_qkv o_proj lm_head; do
        for v in library msum_q_ssm_ntb2_d2_mb4 msum_q_ssm_ntb2_d2 msum_q_ssm_ntb1_d4 msum_f16q_ssm_ntb2_d2_mb4 \
            msum_f16q_ssm_ntb2_d2 msum_f16q_ssm_ntb1_d4 msum_f16q_pre_ssm_ntb2_d2_mb4 msum_f16q_pre_ssm_ntb2_d2 \
            msum_f16q_pre_ssm_ntb1_d4; do l=$l,int4_m1_${s}_$v; done
    done
    for p in 1 2; do
        timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qmv_variants" --only "${l#,}" --commit "$COMMIT" \
            --out "$OUT/qmv_int4_f16q_p$p.json" | grep -E "^int4_m1|differ" || status=1
    done
fi
if want trace; then
    # Back to back, FP8 one-row one-tile blocks launched with early dependents ran up to ~30% slower than launched
    # at their end (session 44). Session 46 traced it on an H100: the early-launched blocks crowd four to an SM
    # (qmm.cu qmv_cap_smem, GRIMOIRE_QMV_CAP, now caps the library's launches). The bench's kernel forms launch
    # uncapped, so this shows the placement on this card: the traced form (per-block globaltimer: entry, wait,
    # staging, loop, reduce, exit) beside both untraced forms on down and o_proj, with blocks per SM and the
    # phase percentiles.
    echo "== FP8 one row, early dependents traced (bench_qmv_variants trace_ntb1_d4_early)"
    [ -x "$BUILD/bench_qmv_variants" ] && timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qmv_variants" \
        --only fp8_m1_down_trace,fp8_m1_o_proj_trace,fp8_m1_down_ntb1_d4,fp8_m1_o_proj_ntb1_d4 \
        --shapes down:5120:17408,o_proj:5120:6144 --commit "$COMMIT" --out "$OUT/qmv_variants_fp8_trace.json" |
        grep -vE "^ +(warp|block entry|block past)" || status=1
fi
if want f8h; then
    # GRIMOIRE_QMV_F8H=1|2|3 (session 44; off: slower in the 27B FP8 decode on the H100): FP8 one row with the mma
    # in FP16. The FP8 tests with each (when the tests section is not run), the kernels' variants, then the A/B: the
    # one-row FP8 record and the 27B FP8 decode, alternated 0/1/2/3 twice.
    echo "== GRIMOIRE_QMV_F8H: FP8 tests, the variants, then the A/B (one-row FP8 kernels, 27B FP8 decode)"
    want tests || for v in 1 2 3; do rerun "f8h$v" "GRIMOIRE_QMV_F8H=$v" -- test_cuda_quant test_cuda_quant_stack \
        test_cuda_model; done
    [ -x "$BUILD/bench_qmv_variants" ] && timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qmv_variants" \
        --only fp8_m1_ --commit "$COMMIT" --out "$OUT/qmv_variants_fp8_m1.json" |
        grep -E " (library|ntb1_d4_early|f16_)|differ" || status=1
    for v in 0 1 2 3; do
        GRIMOIRE_QMV_F8H=$v timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_quant_kernels" --only fp8 --rows 1 \
            --commit "$COMMIT" --out "$OUT/quant_kernels_fp8_m1_f8h$v.json" | grep -E "M  1" || status=1
    done
    for run in 0_p1 1_p1 2_p1 3_p1 0_p2 1_p2 2_p2 3_p2; do
        GRIMOIRE_QMV_F8H=${run%_*} timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights \
            --quant fp8 --commit "$COMMIT" --out "$OUT/qwen35_27b_fp8_f8h$run.json" | grep -E "decode ctx +512" ||
            status=1
    done
fi
if want defaults; then
    # The defaults sessions 29-46 chose on an H100 only, A/B on this card: GRIMOIRE_QMV_ACS, GRIMOIRE_QMV_M16_ONE
    # and GRIMOIRE_QMV_CAP (kernel record at 1 and 16 rows), GRIMOIRE_QMV_CAP=all (2..16 rows),
    # GRIMOIRE_PDL_AHEAD_MIXER and GRIMOIRE_QMV_CAP (27B decode), twice each.
    echo "== A/B of GRIMOIRE_QMV_ACS, GRIMOIRE_QMV_M16_ONE, GRIMOIRE_QMV_CAP, GRIMOIRE_PDL_AHEAD_MIXER"
    for p in 1 2; do
        for e in GRIMOIRE_QMV_ACS=1 GRIMOIRE_QMV_ACS=0 GRIMOIRE_QMV_M16_ONE=0 GRIMOIRE_QMV_CAP=0; do
            n=${e#GRIMOIRE_}  # the device tool returns no file whose name holds '='
            env "$e" timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_quant_kernels" --rows 1,16 --commit "$COMMIT" \
                --out "$OUT/quant_kernels_${n//=/_}_p$p.json" > /dev/null || status=1
        done
        for m in 1 0; do
            for q in gptq fp8; do
                GRIMOIRE_PDL_AHEAD_MIXER=$m timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" \
                    --random-weights --quant $q --commit "$COMMIT" --out "$OUT/qwen35_27b_${q}_mixer${m}_p$p.json" |
                    grep -E "decode ctx +512" || status=1
            done
        done
        # The cap at every row count (GRIMOIRE_QMV_CAP=all) against the default (one row only), 2..16 rows.
        for c in 1 all; do
            GRIMOIRE_QMV_CAP=$c timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_quant_kernels" --rows 2,4,8,16 \
                --commit "$COMMIT" --out "$OUT/quant_kernels_rows_cap${c}_p$p.json" > /dev/null || status=1
        done
        for c in 1 0; do
            GRIMOIRE_QMV_CAP=$c timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights \
                --quant fp8 --commit "$COMMIT" --out "$OUT/qwen35_27b_fp8_cap${c}_p$p.json" |
                grep -E "decode ctx +512" || status=1
        done
    done
fi
if want clocks; then
    # The card's SM / memory clocks, power, temperature and clock-event (throttle) reasons every 20 ms beside the
    # 27B decode and verify phases (--verify-detail prints each phase's UTC start and every timed step): session
    # 25 saw the first FP8 4-token phase's steps rise from 9.6 to 11.5 ms and back, once per process.
    echo "== clock trace beside the 27B FP8 / INT4 verify phases (clocks.csv)"
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 20 > "$OUT/clocks.csv" 2>&1 &
    smi=$!
    sleep 1
    for q in fp8 fp8 gptq; do
        timeout "${GRIMOIRE_STEP_TIMEOUT:-900}" "$BUILD/bench_qwen35_27b" --random-weights --quant "$q" --verify-detail \
            --decode-steps 64 --contexts 512 || status=1
    done
    sleep 1
    kill "$smi"
fi
exit $status
