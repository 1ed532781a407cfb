#!/usr/bin/env bash
# Packs the CUDA binaries built here into carry/pk.tar.xz for the device tool (its `carry` limit is 64 MiB with the
# tracked tree, which is ~55 MB, so each 15-20 MB binary cannot travel alone). Stripped and compressed together
# with a large xz dictionary the copies of the shared CUDA library dedupe: all GPU tests plus grimoire and the
# benchmarks took ~7-9 MB, 11.1 MB at session 32, which no longer fits beside the tree (tools/pack_some.sh warns;
# pack a call's binaries with it then). libutf8proc and the HTTP server's libraries (not on the device image) travel with them.
# The packing itself is tools/pack_some.sh; this names every GPU binary the build has.
#
#   tools/pack_gpu_binaries.sh [BUILD_DIR]      # default build/cuda-dev (cmake --preset cuda -B build/cuda-dev
#                                               #   -DCMAKE_CUDA_ARCHITECTURES=90-real -DGRIMOIRE_WERROR=ON)
# On the device: GRIMOIRE_CHECK=tests bash tools/run_packed.sh (gpu_check's sections over the pack), or by hand:
# cd carry && tar xJf pk.tar.xz && LD_LIBRARY_PATH=$PWD:$LD_LIBRARY_PATH ./test_cuda_model ...
# (the tests find the fixtures through the source path compiled in: `ln -sfn "$PWD/.." /work/main` there first).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/cuda-dev}
names=()
# bench_qmv_wgmma and bench_dequant_variants (the `variants` section's prototypes) only with GRIMOIRE_PACK_ALL=1:
# with them the pack (11.5 MB at 9ae05cf) left the carry ~0.2 MB under its limit.
benches="grimoire bench_qwen35_27b bench_quant_kernels bench_qmv_variants bench_decode_ops probe_decode_chain"
[ "${GRIMOIRE_PACK_ALL:-0}" = 1 ] && benches="$benches bench_qmv_wgmma bench_dequant_variants"
for b in $benches; do
    [ -x "$BUILD/$b" ] && names+=("$b")
done
for t in "$BUILD"/tests/test_cuda_*; do
    [ -x "$t" ] && names+=("$(basename "$t")")
done
exec tools/pack_some.sh "$BUILD" "${names[@]}"
