"""A real GPU load for the telemetry check on a GPU machine: bf16 matmuls on every GPU plus peer copies.

Standalone (stdlib + torch). Usage: python gpu_load.py --seconds 15
"""

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--n", type=int, default=8192)
    args = ap.parse_args()
    gpus = list(range(torch.cuda.device_count()))
    mats = []
    for g in gpus:
        with torch.cuda.device(g):
            a = torch.randn(args.n, args.n, device=f"cuda:{g}", dtype=torch.bfloat16)
            mats.append((a, torch.randn(args.n, args.n, device=f"cuda:{g}", dtype=torch.bfloat16)))
    peer = [torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{g}") for g in gpus]
    flops = 0.0
    copies = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for g, (a, b) in zip(gpus, mats, strict=True):
            with torch.cuda.device(g):
                for _ in range(8):
                    a @ b
                flops += 8 * 2 * args.n ** 3
        if len(gpus) > 1:
            for g in gpus:
                peer[(g + 1) % len(gpus)].copy_(peer[g], non_blocking=True)
                copies += 1
        for g in gpus:
            torch.cuda.synchronize(g)
    print(json.dumps({"gpus": len(gpus), "seconds": args.seconds, "tflops": round(flops / args.seconds / 1e12, 1),
                      "peer_copies_64mib": copies}))


if __name__ == "__main__":
    main()
