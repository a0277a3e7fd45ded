"""Run INSIDE the container with the venv's python: a real generation check against the local server.

Reads the API key from /etc/sglang/sglang.env (never from argv). Prints one JSON line. Shipped after
orchestrator/redact.py's source (steps/checks.py `smoke_source`), whose `redact` it calls.
Usage: python - ARGS_JSON < this_file
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request


def api_key():
    try:
        with open("/etc/sglang/sglang.env") as fh:
            for line in fh:
                if line.startswith("SGLANG_API_KEY="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def call(base, path, body, key, timeout):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": "Bearer " + key} if key else {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "null")


def main():
    args = json.loads(sys.argv[1])
    base, key, timeout = args["base"], api_key(), float(args["timeout"])
    out: dict = {"models": [], "answer": "", "latency_s": None, "usage": None, "error": ""}
    try:
        models = call(base, "/v1/models", None, key, timeout)
        out["models"] = [m.get("id") for m in models.get("data", [])]
        body = {"model": args["model"], "messages": [{"role": "user", "content": args["prompt"]}],
                "temperature": 0, "max_tokens": int(args["max_tokens"]),
                "chat_template_kwargs": {"enable_thinking": False}}
        start = time.monotonic()
        chat = call(base, "/v1/chat/completions", body, key, timeout)
        out["latency_s"] = round(time.monotonic() - start, 3)
        out["answer"] = chat["choices"][0]["message"].get("content") or ""
        out["usage"] = chat.get("usage")
        if args.get("server_info_path"):
            info = call(base, "/server_info", None, key, timeout)
            path = args["server_info_path"]
            # /server_info lists the server's own API keys (internal_states: vars(server_args) per DP rank): never
            # store them. `redact` is orchestrator/redact.py's, run before this file (steps/checks.py smoke_source).
            info = redact(info)  # type: ignore[name-defined]  # noqa: F821
            if os.path.isdir(os.path.dirname(path)):
                with open(path + ".tmp", "w") as fh:
                    json.dump(info, fh, sort_keys=True)
                os.replace(path + ".tmp", path)
                out["server_info_saved"] = path
    except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
