"""Run INSIDE the container with the venv's python: the correctness gate's golden prompts against the local server.

Each prompt goes to sglang's native /generate at temperature 0 with return_logprob, top_logprobs_num and
return_text_in_logprobs; meta_info's output_token_logprobs ([logprob, token_id, text] per token) and
output_top_logprobs (a list of those per token) become one answer. The answers are written (atomically) to
`record_path` when given (golden.json of the release under test), and the reference release's golden.json and
verdict.json (in `reference_dir`) are read back, so the gate needs one round trip. The API key comes from
/etc/sglang/sglang.env, never argv.
Prints one JSON line (strict JSON: a non-finite logprob is the string "NaN").
Usage: python - ARGS_JSON < this_file
"""

import hashlib
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request

ENV_FILE = "/etc/sglang/sglang.env"


def bearer():
    try:
        with open(ENV_FILE) as fh:
            keys = [ln.split("=", 1)[1].strip().strip('"') for ln in fh if ln.startswith("SGLANG_API_KEY=")]
    except OSError:
        return {}
    return {"Authorization": "Bearer " + keys[0]} if keys else {}


def lp(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else "NaN"


def generate(base, prompt, args):
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": int(args["max_new_tokens"])},
            "return_logprob": True, "top_logprobs_num": int(args["top_logprobs"]), "logprob_start_len": -1,
            "return_text_in_logprobs": True, "stream": False}
    req = urllib.request.Request(base + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **bearer()})
    with urllib.request.urlopen(req, timeout=float(args["timeout"])) as resp:
        return json.loads(resp.read().decode() or "null")


def answer(spec, data):
    meta = data.get("meta_info") or {}
    tokens = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    ids = [int(t[1]) for t in tokens if isinstance(t, list) and len(t) >= 2]
    if not ids and data.get("output_ids"):
        ids = [int(i) for i in data["output_ids"]]
    return {"name": spec["name"], "ids": ids,
            "texts": [str(t[2] or "") if isinstance(t, list) and len(t) > 2 else "" for t in tokens],
            "logprobs": [lp(t[0]) if isinstance(t, list) and t else None for t in tokens],
            "top": [[[int(c[1]), lp(c[0])] for c in (row or []) if isinstance(c, list) and len(c) >= 2]
                    for row in tops],
            "text": str(data.get("text") or "")}


def read_json(path):
    """(content, problem): (None, "") when there is no file; a file that is there but no JSON says why."""
    try:
        with open(path) as fh:
            return json.load(fh), ""
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"it cannot be read ({exc.strerror})"
    except ValueError as exc:
        return None, f"it is not JSON ({exc})"


def main():
    args = json.loads(sys.argv[1])
    out: dict = {"answers": [], "error": "", "seconds": None, "reference": None, "reference_verdict": None,
                 "reference_problem": "", "recorded": ""}
    start = time.monotonic()
    try:
        for spec in args["prompts"]:
            repeat = int(spec.get("context_repeat", 0))  # GoldenPrompt.full_text, spelt out: no deploy import here
            prompt = spec["text"] + spec.get("context", "") * repeat + spec.get("question", "")
            one = answer(spec, generate(args["base"], prompt, args))
            one["prompt_sha"] = hashlib.sha256(prompt.encode()).hexdigest()[:16]
            out["answers"].append(one)
    except (urllib.error.URLError, OSError, KeyError, ValueError, TypeError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.monotonic() - start, 3)
    if args.get("reference_dir"):  # the reference counts only beside a "kept" verdict: the step checks that
        out["reference"], out["reference_problem"] = read_json(os.path.join(args["reference_dir"], "golden.json"))
        out["reference_verdict"] = read_json(os.path.join(args["reference_dir"], "verdict.json"))[0]
    path = args.get("record_path")
    if path and not out["error"] and os.path.isdir(os.path.dirname(path)):
        record = {"version": 1, "release": args.get("release"), "answers": out["answers"]}
        with open(path + ".tmp", "w") as fh:
            json.dump(record, fh, sort_keys=True)
        os.replace(path + ".tmp", path)
        out["recorded"] = path
    print(json.dumps(out))


if __name__ == "__main__":
    main()
