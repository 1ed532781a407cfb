#!/usr/bin/env bash
# Packs the named CUDA binaries into carry/pk.tar.xz for the device tool (pack_gpu_binaries.sh: all of them; the
# carry limit with the tracked tree is tight, so a call often takes only what it runs):
#   tools/pack_some.sh BUILD_DIR NAME...   (NAME: a binary of BUILD_DIR or of BUILD_DIR/tests)
# On the device tools/run_packed.sh unpacks it and runs tools/gpu_check.sh's sections over it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$1; shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in "$@"; do
    if [ -x "$BUILD/$b" ]; then strip -o "$tmp/$b" "$BUILD/$b"; else strip -o "$tmp/$b" "$BUILD/tests/$b"; fi
done
# The Debian-package libraries the binaries link that the device image lacks (grimoire: the HTTP server's).
for lib in libutf8proc.so.2 libcpp-httplib.so.0.11 libpcre2-8.so.0 libbrotlidec.so.1 libbrotlienc.so.1 \
    libbrotlicommon.so.1; do
    # awk reads all of ldconfig's output (an early exit would end ldconfig with SIGPIPE, and pipefail the script)
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found {print $NF; found = 1}')
    [ -n "$path" ] && cp "$path" "$tmp/"
done
# The commit the binaries were built at (tools/gpu_check.sh labels its records with it); "-dirty" when the tree
# had uncommitted changes.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench || echo -dirty)" > "$tmp/COMMIT"
mkdir -p carry
(cd "$tmp" && tar cf - ./*) | xz -9e -T2 --lzma2=preset=9e,dict=192MiB > carry/pk.tar.xz
ls -la carry/pk.tar.xz
# The device tool refuses a call whose tracked tree, untracked files and carry exceed 64 MiB together: say so here
# rather than at the call. Counted as disk blocks, which matched the refusals (session 32: every test binary
# packed, 11.1 MB, beside the tree's 55.7 MB of bytes but 57.0 MB of blocks, was refused).
tree=$(git ls-files -z | xargs -0 du -k | awk '{s += $1} END {print s * 1024}')
carry=$(($(du -sk carry | cut -f1) * 1024))
total=$((tree + carry))
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
    echo "pack_some: tracked tree $tree + carry/ $carry = $total bytes, over the device tool's 64 MiB: pack fewer" >&2
fi
