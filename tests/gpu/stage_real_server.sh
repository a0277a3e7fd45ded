#!/bin/bash
# Stage the GPU suite of the real server into DEST (a folder the checkout's .git/info/exclude ignores, named in
# the device call's `carry`): the packed stack SITE_TAR (site312.tar.zst, made as ../shared/device/README.md says),
# the zstandard wheel ZSTD_WHL, and this worktree's tool package and suite (the device runs the session's checkout,
# not this worktree). Usage: tests/gpu/stage_real_server.sh DEST SITE_TAR ZSTD_WHL
set -e
DEST=$1 SITE_TAR=$2 ZSTD_WHL=$3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$DEST" && mkdir -p "$DEST/src/gpu"
cp "$SITE_TAR" "$ZSTD_WHL" "$DEST/"
cp -r "$REPO/orchestrator" "$DEST/src/"
find "$DEST/src" -name __pycache__ -type d -prune -exec rm -rf {} +
cp "$REPO/tests/gpu/real_server.py" "$REPO/tests/gpu/tiny_models.py" "$DEST/src/gpu/"
cp "$REPO/tests/gpu/run_real_server.sh" "$DEST/"
du -sh "$DEST"
