#!/bin/bash
# The GPU suite of the real server (docs/development.md, "The GPU suite"): run on the lent GPU machine from the
# directory that holds what tests/gpu/stage_real_server.sh staged (site312.tar.zst, zstandard-min.tar.gz,
# src.tar.gz).
# Unpacks the carried sglang 0.5.12.post1 stack into /root/site, builds the tiny models, runs real_server.py.
set -o pipefail
G=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" /root/site
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
  python3 -V
  mkdir -p "$G/src" /root/zs && tar -xzf "$G/src.tar.gz" -C "$G/src" || exit 4
  if [ ! -f /root/site/sglang/__init__.py ]; then
    tar -xzf "$G/zstandard-min.tar.gz" -C /root/zs || exit 5
    PYTHONPATH=/root/zs python3 -c "
import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(open('$G/site312.tar.zst', 'rb'), sys.stdout.buffer)" \
      | tar -x -C /root/site || exit 6
  fi
  if ls "$G"/extra/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/extra "$G"/extra/*.whl || exit 9
  fi
  echo "site unpacked at $(el) s"
  export PYTHONPATH=/root/site:/root/extra:$G/src PYTHONUNBUFFERED=1
  python3 -c "import sglang, sgl_kernel, flashinfer; print('sglang', sglang.__version__)
from sglang.srt.configs.model_config import ModelConfig
import sglang.srt.entrypoints.http_server, sglang.bench_serving" || exit 7
  [ -f /root/tiny/model.safetensors ] || python3 "$G/src/gpu/tiny_models.py" > "$OUT/tiny_models.txt" 2>&1 \
    || { tail -20 "$OUT/tiny_models.txt"; exit 8; }
  echo "tiny models at $(el) s"
  SUITE_BUDGET_S=$(( ${SUITE_BUDGET_S:-540} - $(el) )) python3 "$G/src/gpu/real_server.py"
  echo "suite rc=$? at $(el) s"
} 2>&1 | tee "$OUT/suite.log"
