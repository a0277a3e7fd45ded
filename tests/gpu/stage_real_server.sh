#!/bin/bash
# Stage the GPU suite of the real server into DEST (a folder the checkout's .git/info/exclude ignores, named in
# the device call's `carry`): the packed stack SITE_TAR (site312.tar.zst, made as docs/development.md "The GPU
# suite" says), ZSTD_TGZ (the zstandard wheel's __init__.py and C backend, tar.gz: the wheel whole is 5.5 MB of the
# 64 MiB a call carries) and this worktree's tool package and suite as src.tar.gz (the device runs the session's
# checkout, not this worktree); wheels found after ZSTD_TGZ (a dependency the packed stack lacks, e.g. loguru for
# compressed-tensors 0.20) go into DEST/extra/. Usage: tests/gpu/stage_real_server.sh DEST SITE_TAR ZSTD_TGZ [WHL...]
set -e
DEST=$1 SITE_TAR=$2 ZSTD_TGZ=$3
shift 3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
rm -rf "$DEST" && mkdir -p "$DEST" "$STAGE/gpu"
cp "$SITE_TAR" "$DEST/site312.tar.zst"
cp "$ZSTD_TGZ" "$DEST/zstandard-min.tar.gz"
cp -r "$REPO/orchestrator" "$STAGE/"
find "$STAGE" -name __pycache__ -type d -prune -exec rm -rf {} +
cp "$REPO/tests/gpu/real_server.py" "$REPO/tests/gpu/tiny_models.py" "$STAGE/gpu/"
tar -czf "$DEST/src.tar.gz" -C "$STAGE" orchestrator gpu
cp "$REPO/tests/gpu/run_real_server.sh" "$DEST/"
if [ $# -gt 0 ]; then mkdir -p "$DEST/extra" && cp "$@" "$DEST/extra/"; fi
du -sh "$DEST"
