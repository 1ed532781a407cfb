#!/usr/bin/env bash
# The device side of tools/pack_some.sh: unpacks carry/pk.tar.xz into a folder laid out like a build directory
# (benchmarks at its top, test_* under tests/) and runs tools/gpu_check.sh's sections over it, so a session
# needs no script of its own in the git-ignored carry/ folder (those are lost with the checkout).
#
#   tools/pack_some.sh build/cuda-dev bench_quant_kernels bench_qwen35_27b     # here
#   run: GRIMOIRE_CHECK=quant,e2e bash tools/run_packed.sh                     # on the device, carry ["carry"]
#
# GRIMOIRE_CHECK: gpu_check.sh's sections (default quant,e2e: the issue-5 kernel record and the 27B INT4 / FP8
# decode records). GRIMOIRE_ONLY_ON (optional, e.g. H200): run nothing unless the card's name contains it (a
# call that may get another card then costs only its start). Writes gpu_check's files under $OUT (past eight
# files, all but the issue-5 records and the log bundled in $OUT/more.tar.gz) and prints every record's ratios.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "card: ${card:-none}"
if [ -n "${GRIMOIRE_ONLY_ON:-}" ] && [[ "$card" != *"$GRIMOIRE_ONLY_ON"* ]]; then
    echo "not a ${GRIMOIRE_ONLY_ON}: nothing run"
    exit 0
fi
B=$PWD/.packed
rm -rf "$B"
mkdir -p "$B/tests"
tar xJf carry/pk.tar.xz -C "$B" || exit 1
for f in "$B"/test_*; do [ -e "$f" ] && mv "$f" "$B/tests/"; done
# The GPU tests find their fixtures through the source path compiled in (this checkout's path on the build
# machine, /work/main).
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
GRIMOIRE_PREBUILT=$B GRIMOIRE_PREBUILT_LIBS=$B GRIMOIRE_CHECK=${GRIMOIRE_CHECK:-quant,e2e} OUT=$OUT \
    bash tools/gpu_check.sh > "$OUT/run_packed.log" 2>&1
rc=$?
python3 - "$OUT" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        d = json.load(open(p))
    except (OSError, ValueError):
        continue
    if not isinstance(d, dict) or "ratios" not in d:
        continue
    print("==", os.path.basename(p), d.get("card"), d.get("commit"))
    for k, v in sorted(d["ratios"].items()):
        print("  %-52s %.4f" % (k, v))
PY
grep -E "FAILED|^\[  PASSED" "$OUT/run_packed.log" | head -40
# The device tool returns at most eight files from $OUT (a call of several sections writes dozens; session 49
# lost records to that limit): the issue-5 records and the log stay as files, the rest go into one more.tar.gz.
keep=(run_packed.log quant_kernels.json qwen35_27b_int4.json qwen35_27b_fp8.json decode_step_ablation.json)
if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
    list=$(mktemp)
    (cd "$OUT" && find . -type f | sed 's|^\./||' | grep -vxF -f <(printf '%s\n' "${keep[@]}") > "$list" &&
        tar czf more.tar.gz -T "$list" && xargs -d '\n' rm -f < "$list" && find . -mindepth 1 -type d -empty -delete)
    rm -f "$list"
    echo "files beyond the records bundled in more.tar.gz ($(tar tzf "$OUT/more.tar.gz" | wc -l) files)"
fi
echo "gpu_check exit status $rc"
exit $rc
