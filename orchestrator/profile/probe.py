"""Run in the container beside bench_serving (standard library only): sglang's profiler over N decode steps.

argv: URL OUT_DIR NUM_STEPS DELAY_S PREFIX RANKS WAIT_S DONE_FILE GRACE_S. It waits DELAY_S (the bench reaches
its load), POSTs sglang's /start_profile (ProfileReqInput: output_dir, num_steps, activities, with_stack and
record_shapes off, profile_by_stage, profile_prefix; the API key, if any, from $SGLANG_API_KEY, never argv),
waits until RANKS `PREFIX-…-TP-r-DECODE.trace.json.gz` files are there (at most WAIT_S, and at most GRACE_S after
DONE_FILE appears: the bench ended, no more decode steps will come), keeps of each only the GPU events, the CUDA
calls, the annotations and the metadata (the CPU ops of a real trace are hundreds of MB), removes the raw files,
and prints one JSON document: {"ok", "message", "files": [{"name", "gz_b64"}]}.
"""

import base64
import glob
import gzip
import json
import os
import sys
import time
import urllib.error
import urllib.request

KEEP = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation",
        "user_annotation"}


def post(url, path, body):
    """POST to the server, with its API key from the environment (never argv)."""
    req = urllib.request.Request(url.rstrip("/") + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    key = os.environ.get("SGLANG_API_KEY")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def main(argv):
    url, out_dir, num_steps, delay_s, prefix, ranks, wait_s, done_file, grace_s = argv
    ranks, deadline = int(ranks), time.time() + float(wait_s)
    time.sleep(float(delay_s))
    body = json.dumps({"output_dir": out_dir, "num_steps": int(num_steps), "activities": ["CPU", "GPU"],
                       "with_stack": False, "record_shapes": False, "profile_by_stage": True,
                       "profile_prefix": prefix}).encode()
    try:
        post(url, "/start_profile", body)
    except (urllib.error.URLError, OSError) as exc:
        return {"ok": False, "message": f"POST /start_profile failed: {exc}", "files": []}
    pattern = os.path.join(out_dir, prefix + "-*-TP-*-DECODE.trace.json.gz")
    found, done_at = [], None
    while time.time() < deadline:
        found = sorted(glob.glob(pattern))
        if len(found) >= ranks:
            time.sleep(0.5)  # the last rank's file is renamed into place whole; its neighbours may still write
            found = sorted(glob.glob(pattern))
            break
        if done_at is None and os.path.exists(done_file):
            done_at = time.time()
        if done_at is not None and time.time() - done_at > float(grace_s):
            # the bench ended before N decode steps: sglang writes what it recorded at /stop_profile
            try:
                post(url, "/stop_profile", b"")
            except (urllib.error.URLError, OSError):
                break
            stop_deadline = time.time() + 10
            while len(glob.glob(pattern)) < ranks and time.time() < stop_deadline:
                time.sleep(0.2)
            time.sleep(0.5)
            found = sorted(glob.glob(pattern))
            break
        time.sleep(0.2)
    files = []
    for path in found:
        try:
            with gzip.open(path, "rt") as f:
                doc = json.load(f)
        except (OSError, ValueError, EOFError):
            continue  # still being written when the wait ran out
        doc["traceEvents"] = [e for e in doc.get("traceEvents", []) if e.get("cat") in KEEP or e.get("ph") == "M"]
        data = gzip.compress(json.dumps(doc).encode())
        files.append({"name": os.path.basename(path), "gz_b64": base64.b64encode(data).decode()})
        os.remove(path)
    ok = len(files) >= ranks
    msg = "" if ok else f"{len(files)} of {ranks} ranks' traces came back"
    return {"ok": ok, "message": msg, "files": files}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1:])) + "\n")
