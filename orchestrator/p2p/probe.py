#!/usr/bin/env python3
"""GPU-to-GPU copy bandwidth probe, shipped over SSH and run with the container venv's python.

Standalone on purpose: it imports only the standard library and torch, never the `orchestrator` package, so the
tool can copy this one file into the container and run it there.

For every ordered pair (src, dst) of visible GPUs it records `torch.cuda.can_device_access_peer`, allocates
SIZE MiB on src and on dst, warms up, then times ITERS copies src->dst with CUDA events on the source device's
current stream (PyTorch runs a cross-device copy on the source's stream and makes the destination stream wait),
and reports GB/s = bytes x ITERS / seconds / 1e9. Pairs without peer access are still timed: the copy then goes
through host memory, and its low figure is the evidence.

stdout carries one JSON document and nothing else:
{"n": 2, "pairs": [{"src": 0, "dst": 1, "can_access_peer": true, "GBps": 378.5}, ...],
 "torch_version": "...", "device_names": [...], "size_mib": 256, "iters": 20}
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GPU-to-GPU copy bandwidth for every ordered pair of GPUs")
    ap.add_argument("--size-mib", type=int, default=256, help="copy size in MiB (default 256)")
    ap.add_argument("--iters", type=int, default=20, help="timed copies per pair (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed copies per pair first (default 3)")
    args = ap.parse_args(argv)
    if args.size_mib < 1 or args.iters < 1 or args.warmup < 0:
        print("size-mib and iters must be >= 1, warmup >= 0", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as exc:
        print(f"torch is not importable with {sys.executable}: {exc}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch.cuda.is_available() is False: no GPU visible to this process", file=sys.stderr)
        return 4

    n = torch.cuda.device_count()
    nbytes = args.size_mib * 1024 * 1024
    names = [torch.cuda.get_device_name(i) for i in range(n)]
    pairs = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            peer = bool(torch.cuda.can_device_access_peer(src, dst))
            a = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{src}")
            b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
            with torch.cuda.device(src):
                for _ in range(args.warmup):
                    b.copy_(a, non_blocking=True)
                torch.cuda.synchronize(src)
                torch.cuda.synchronize(dst)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.iters):
                    b.copy_(a, non_blocking=True)
                end.record()
                end.synchronize()
                torch.cuda.synchronize(dst)
                ms = start.elapsed_time(end)
            gbps = nbytes * args.iters / (ms / 1000.0) / 1e9 if ms > 0 else 0.0
            pairs.append({"src": src, "dst": dst, "can_access_peer": peer, "GBps": round(gbps, 1)})
            del a, b
            torch.cuda.empty_cache()
    doc = {"n": n, "pairs": pairs, "torch_version": torch.__version__, "device_names": names,
           "size_mib": args.size_mib, "iters": args.iters}
    sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
