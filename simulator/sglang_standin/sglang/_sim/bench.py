"""`python -m sglang.bench_serving` (simulated): real requests, real summary block, real JSONL keys.

It really sends the requests, concurrently, to the (simulated) server and measures them; wall-clock
durations are multiplied by the simulated host's time_scale so every reported figure is in MODEL time
(the server sleeps model_time / time_scale). The printed block follows reference/sglang.md §3.2 (labels,
"{:<40} {:<10.2f}" formatting, separators) and the appended JSON line has the §3.3 keys.
Tokens are whitespace-separated words (the simulator's tokenizer), so no tokenizer download is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sglang._sim import env
from sglang._sim.engine import VOCAB
from sglang._sim.http_client import Client as HTTPClient
from sglang._sim.http_client import ClientError

SHAREGPT_URL = ("https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/main/"
                "ShareGPT_V3_unfiltered_cleaned_split.json")
BACKENDS = ["sglang", "sglang-native", "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat", "lmdeploy",
            "lmdeploy-chat", "trt", "gserver", "truss"]
DATASETS = ["sharegpt", "random", "random-ids", "generated-shared-prefix", "mmmu", "random-image", "mooncake"]
REQUEST_TIMEOUT_S = 6 * 3600  # bench_serving's AIOHTTP_TIMEOUT: a request's whole exchange


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Benchmark the online serving throughput.")
    a = p.add_argument
    a("--backend", type=str, choices=BACKENDS, default="sglang")
    a("--base-url", type=str, default=None)
    a("--host", type=str, default="0.0.0.0")
    a("--port", type=int)
    a("--dataset-name", type=str, default="sharegpt", choices=DATASETS)
    a("--dataset-path", type=str, default="")
    a("--model", type=str)
    a("--served-model-name", type=str)
    a("--tokenizer", type=str)
    a("--num-prompts", type=int, default=1000)
    a("--sharegpt-output-len", type=int, default=None)
    a("--sharegpt-context-len", type=int, default=None)
    a("--random-input-len", type=int, default=1024)
    a("--random-output-len", default=1024, type=int)
    a("--random-range-ratio", type=float, default=0.0)
    a("--request-rate", type=float, default=float("inf"))
    a("--max-concurrency", type=int, default=None)
    a("--output-file", type=str)
    a("--output-details", action="store_true")
    a("--disable-tqdm", action="store_true")
    a("--disable-stream", action="store_true")
    a("--return-logprob", action="store_true")
    a("--seed", type=int, default=1)
    a("--disable-ignore-eos", action="store_true")
    a("--extra-request-body", metavar='{"key1": "value1", "key2": "value2"}', type=str)
    a("--apply-chat-template", action="store_true")
    a("--profile", action="store_true")
    a("--lora-name", type=str, nargs="*", default=None)
    a("--prompt-suffix", type=str, default="")
    a("--pd-separated", action="store_true")
    a("--flush-cache", action="store_true")
    a("--warmup-requests", type=int, default=1)
    a("--tokenize-prompt", action="store_true")
    a("--tag", type=str, default=None)
    a("--plot-throughput", action="store_true")
    return p


@dataclass
class Out:
    """One request's measured outcome (model-time seconds)."""

    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_len: int = 0
    output_len: int = 0
    generated_text: str = ""
    error: str = ""
    start: float = 0.0
    chunk_times: list[tuple[float, int]] = field(default_factory=list)  # (model time since bench start, tokens)


def fail_download(path: str = "/tmp/ShareGPT_V3_unfiltered_cleaned_split.json") -> int:
    """What an offline host sees when bench_serving tries to fetch ShareGPT (nothing is really contacted)."""
    print(f"Downloading from {SHAREGPT_URL} to {path}")
    host = "huggingface.co"
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "sglang/bench_serving.py", line 904, in download_and_cache_file\n'
        "    response = requests.get(url, stream=True)\n"
        f"requests.exceptions.ConnectionError: HTTPSConnectionPool(host='{host}', port=443): Max retries exceeded "
        f"with url: {urlparse(SHAREGPT_URL).path} (Caused by NameResolutionError(\"<urllib3.connection."
        f"HTTPSConnection object>: Failed to resolve '{host}' ([Errno -3] Temporary failure in name resolution)\"))\n"
        "(simulated offline host: use --dataset-name random-ids, or --dataset-path with a local ShareGPT JSON)\n"
    )
    return 1


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(max(n, 1)))


def make_dataset(args: argparse.Namespace) -> list[tuple[str, int, int]] | int:
    """(prompt, prompt_len, output_len) per request, or an exit code."""
    rng = random.Random(args.seed)
    name = args.dataset_name
    if name in ("random", "sharegpt"):
        if not args.dataset_path or not Path(args.dataset_path).is_file():
            return fail_download()
        try:
            data = json.loads(Path(args.dataset_path).read_text())
            assert isinstance(data, list)
        except (ValueError, AssertionError, OSError):
            print(f"Error: {args.dataset_path} is not a ShareGPT-format JSON list", file=sys.stderr)
            return 1
    elif name != "random-ids":
        print(f"Error: dataset {name!r} is not supported by the simulated bench_serving", file=sys.stderr)
        return 1
    if name == "sharegpt":
        out = []
        for conv in data:
            turns = conv.get("conversations") or conv.get("conversation") or []
            if len(turns) < 2:
                continue
            prompt = str(turns[0].get("value", ""))
            olen = args.sharegpt_output_len or max(len(str(turns[1].get("value", "")).split()), 1)
            out.append((prompt, len(prompt.split()) or 1, olen))
            if len(out) >= args.num_prompts:
                break
        return out
    lo_in = max(int(args.random_input_len * args.random_range_ratio), 1)
    lo_out = max(int(args.random_output_len * args.random_range_ratio), 1)
    result = []
    for _ in range(args.num_prompts):
        ilen = rng.randint(lo_in, max(args.random_input_len, lo_in))
        olen = rng.randint(lo_out, max(args.random_output_len, lo_out))
        result.append((_words(rng, ilen), ilen, olen))
    return result


def base_url(args: argparse.Namespace) -> str:
    if args.base_url:
        url = args.base_url.rstrip("/")
    else:
        host = "127.0.0.1" if args.host in ("0.0.0.0", "localhost") else args.host
        url = f"http://{host}:{args.port or 30000}"
    host = urlparse(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not env.real_container():  # a real container's own network namespace is fine
        raise SystemExit(f"simulated bench_serving: refusing non-loopback server address {host!r}")
    return url


class Client:
    def __init__(self, args: argparse.Namespace, url: str, scale: float) -> None:
        self.args, self.url, self.scale = args, url, scale
        self.model = args.served_model_name or args.model or "default"
        self.extra = json.loads(args.extra_request_body) if args.extra_request_body else {}
        self.in_flight = 0
        self.t0 = time.perf_counter()

    def _payload(self, prompt: str, olen: int) -> tuple[str, dict[str, Any]]:
        a, stream, eos = self.args, not self.args.disable_stream, not self.args.disable_ignore_eos
        if a.backend in ("sglang", "sglang-native"):
            return "/generate", {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": olen,
                                                                     "ignore_eos": eos}, "stream": stream, **self.extra}
        if a.backend.endswith("-chat"):
            return "/v1/chat/completions", {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                                            "temperature": 0.0, "max_completion_tokens": olen, "stream": stream,
                                            "ignore_eos": eos, **self.extra}
        return "/v1/completions", {"model": self.model, "prompt": prompt, "temperature": 0.0, "max_tokens": olen,
                                   "stream": stream, "ignore_eos": eos, **self.extra}

    def now(self) -> float:
        return (time.perf_counter() - self.t0) * self.scale

    async def request(self, http: HTTPClient, prompt: str, plen: int, olen: int) -> Out:
        path, payload = self._payload(prompt, olen)
        out = Out(prompt_len=plen)
        self.in_flight += 1
        out.start = self.now()
        try:
            await asyncio.wait_for(self._exchange(http, path, payload, out), REQUEST_TIMEOUT_S)
        except (TimeoutError, ClientError, ConnectionError, ValueError) as exc:
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.in_flight -= 1
        return out

    async def _exchange(self, http: HTTPClient, path: str, payload: dict[str, Any], out: Out) -> None:
        """One request measured into `out` (success and latency only when its response came whole)."""
        st = last = out.start
        text = ""
        tokens = 0
        async with http.request("POST", self.url + path, payload) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return
            if not payload.get("stream"):
                body = await resp.json()
                text, tokens = _final_text(body)
                out.ttft = self.now() - st
                out.chunk_times.append((self.now(), tokens))
            else:
                async for raw in resp.lines():
                    line = raw.decode().strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    new_text, new_tokens = _chunk(json.loads(data), text, tokens)
                    if new_tokens <= tokens and not new_text:
                        continue
                    t = self.now()
                    gained = max(new_tokens - tokens, 1)
                    if out.ttft == 0.0:
                        out.ttft = t - st
                    else:
                        out.itl.extend([(t - last) / gained] * gained)
                    out.chunk_times.append((t, gained))
                    last, text, tokens = t, new_text, new_tokens
        out.latency = self.now() - st
        out.generated_text, out.output_len, out.success = text, tokens, True


def _final_text(body: dict[str, Any]) -> tuple[str, int]:
    if "meta_info" in body:
        return str(body.get("text", "")), int(body["meta_info"].get("completion_tokens", 0))
    choice = (body.get("choices") or [{}])[0]
    text = choice.get("text") or (choice.get("message") or {}).get("content") or ""
    return str(text), int((body.get("usage") or {}).get("completion_tokens") or len(str(text).split()))


def _chunk(data: dict[str, Any], text: str, tokens: int) -> tuple[str, int]:
    """(cumulative text, cumulative tokens) after one SSE event of any backend."""
    if "meta_info" in data:  # sglang /generate: cumulative text
        return str(data.get("text", "")), int(data["meta_info"].get("completion_tokens", tokens))
    choices = data.get("choices") or []
    if not choices:
        return text, tokens
    c = choices[0]
    piece = c.get("text") or (c.get("delta") or {}).get("content") or (c.get("delta") or {}).get(
        "reasoning_content") or ""
    return text + piece, tokens + len(str(piece).split())


def _pct(xs: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    f = math.floor(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def _stats(xs: list[float], prefix: str, scale: float = 1000.0) -> dict[str, float]:
    ms = [x * scale for x in xs]
    return {f"mean_{prefix}_ms": statistics.fmean(ms) if ms else 0.0,
            f"median_{prefix}_ms": statistics.median(ms) if ms else 0.0,
            f"std_{prefix}_ms": statistics.pstdev(ms) if ms else 0.0,
            f"p90_{prefix}_ms": _pct(ms, 90), f"p95_{prefix}_ms": _pct(ms, 95), f"p99_{prefix}_ms": _pct(ms, 99)}


def bucket_peak(outs: list[Out]) -> int:
    """bench_serving's "Peak concurrent requests" (0.5.12.post1, `calculate_metrics`): the most successful
    requests that overlap one 1 s bucket from the first start, a request counted in every bucket from its start's to
    its end's. Not the requests in flight at once: short requests make it exceed --max-concurrency (142 at 32 on a
    real H100, tests/fixtures/sglang/real-h100/bench_random_ids.stdout.txt)."""
    ok = [o for o in outs if o.success]
    if not ok:
        return 0
    t0 = min(o.start for o in ok)
    buckets = [0] * (math.ceil(max(o.start + o.latency for o in ok) - t0) + 1)
    for o in ok:
        for second in range(int(o.start - t0), min(int(o.start + o.latency - t0) + 1, len(buckets))):
            buckets[second] += 1
    return max(buckets)


def metrics(outs: list[Out], duration: float) -> dict[str, Any]:
    ok = [o for o in outs if o.success]
    peak = bucket_peak(outs)
    total_in = sum(o.prompt_len for o in ok)
    total_out = sum(o.output_len for o in ok)
    retok = sum(len(o.generated_text.split()) for o in ok)
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in ok if o.output_len > 1]
    itls = [x for o in ok for x in o.itl]
    bins: dict[int, int] = {}
    for o in ok:
        for t, n in o.chunk_times:
            bins[int(t)] = bins.get(int(t), 0) + n
    m: dict[str, Any] = {
        "completed": len(ok), "total_input_tokens": total_in, "total_input_text_tokens": total_in,
        "total_input_vision_tokens": 0, "total_output_tokens": total_out, "total_output_tokens_retokenized": retok,
        "request_throughput": len(ok) / duration, "input_throughput": total_in / duration,
        "output_throughput": total_out / duration, "total_throughput": (total_in + total_out) / duration,
        "max_output_tokens_per_s": float(max(bins.values(), default=0)), "max_concurrent_requests": peak,
        "concurrency": sum(o.latency for o in ok) / duration, "accept_length": None,
    }
    m.update(_stats([o.latency for o in ok], "e2e_latency"))
    m.update(_stats([o.ttft for o in ok], "ttft"))
    m.update(_stats(tpots, "tpot"))
    m.update(_stats(itls, "itl"))
    m["max_itl_ms"] = max(itls, default=0.0) * 1000.0
    return m


STAT_LABELS = {"mean": "Mean", "median": "Median", "p90": "P90", "p95": "P95", "p99": "P99"}
#: Rows of the latency sections per release. 0.5.12.post1 is the single-file v0.5.x bench_serving.py (E2E
#: Mean/Median/P90/P99, TTFT and TPOT Mean/Median/P99, ITL Mean/Median/P95/P99); 0.5.23 prints the newer block
#: with Mean/Median/P90/P95/P99 in every section (docs/simulator.md says what was checked).
ROWS_0_5_12: dict[str, tuple[str, ...]] = {
    "e2e_latency": ("mean", "median", "p90", "p99"), "ttft": ("mean", "median", "p99"),
    "tpot": ("mean", "median", "p99"), "itl": ("mean", "median", "p95", "p99")}
ROWS_NEW: dict[str, tuple[str, ...]] = dict.fromkeys(ROWS_0_5_12, ("mean", "median", "p90", "p95", "p99"))


def summary_rows(version: str) -> dict[str, tuple[str, ...]]:
    return ROWS_0_5_12 if version == "0.5.12.post1" else ROWS_NEW


def json_keys(version: str) -> list[str]:
    """The JSONL keys: v0.5.x's list, plus the P90/P95 keys of every latency metric in newer releases."""
    if version == "0.5.12.post1":
        return JSON_KEYS
    extra = [f"{k}_{metric}_ms" for metric in ROWS_NEW for k in ("p90", "p95")]
    return JSON_KEYS + [k for k in extra if k not in JSON_KEYS]


def print_summary(args: argparse.Namespace, m: dict[str, Any], duration: float) -> None:
    def line(label: str, value: Any, fmt: str = "{:<10}") -> None:
        print(("{:<40} " + fmt).format(label, value))

    def f2(label: str, value: float) -> None:
        line(label, value, "{:<10.2f}")

    def sect(title: str, ch: str = "-") -> None:
        print("{s:{c}^{n}}".format(s=title, n=50, c=ch))

    sect(" Serving Benchmark Result ", "=")
    line("Backend:", args.backend)
    line("Traffic request rate:", args.request_rate)
    line("Max request concurrency:", args.max_concurrency if args.max_concurrency else "not set")
    line("Successful requests:", m["completed"])
    f2("Benchmark duration (s):", duration)
    line("Total input tokens:", m["total_input_tokens"])
    line("Total input text tokens:", m["total_input_text_tokens"])
    line("Total generated tokens:", m["total_output_tokens"])
    line("Total generated tokens (retokenized):", m["total_output_tokens_retokenized"])
    f2("Request throughput (req/s):", m["request_throughput"])
    f2("Input token throughput (tok/s):", m["input_throughput"])
    f2("Output token throughput (tok/s):", m["output_throughput"])
    f2("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"])
    line("Peak concurrent requests:", m["max_concurrent_requests"])
    f2("Total token throughput (tok/s):", m["total_throughput"])
    f2("Concurrency:", m["concurrency"])
    rows = summary_rows(env.installed_version())
    for title, metric, label in (("End-to-End Latency", "e2e_latency", "E2E Latency"), ("Time to First Token", "ttft",
                                 "TTFT"), ("Time per Output Token (excl. 1st token)", "tpot", "TPOT"),
                                 ("Inter-Token Latency", "itl", "ITL")):
        sect(title)
        for k in rows[metric]:
            f2(f"{STAT_LABELS[k]} {label} (ms):", m[f"{k}_{metric}_ms"])
    f2("Max ITL (ms):", m["max_itl_ms"])
    print("=" * 50)


JSON_KEYS = [
    "duration", "completed", "total_input_tokens", "total_input_text_tokens", "total_input_vision_tokens",
    "total_output_tokens", "total_output_tokens_retokenized", "request_throughput", "input_throughput",
    "output_throughput", "total_throughput", "mean_e2e_latency_ms", "median_e2e_latency_ms",
    "std_e2e_latency_ms", "p90_e2e_latency_ms", "p99_e2e_latency_ms", "mean_ttft_ms", "median_ttft_ms",
    "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p95_itl_ms", "p99_itl_ms", "concurrency",
    "accept_length", "max_output_tokens_per_s", "max_concurrent_requests"
]


async def fetch_server_info(http: HTTPClient, url: str) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info"):
        try:
            async with http.request("GET", url + path) as resp:
                if resp.status == 200:
                    data = await resp.json()
                    if isinstance(data, dict):
                        return data
        except (ClientError, ValueError):
            continue
    return {}


async def run(args: argparse.Namespace, dataset: list[tuple[str, int, int]]) -> int:
    url = base_url(args)
    scale = env.time_scale()
    headers = {}
    if env_key := __import__("os").environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {env_key}"
    http = HTTPClient(headers)
    client = Client(args, url, scale)
    if args.warmup_requests > 0:
        print(f"Starting warmup with {args.warmup_requests} sequences...")
        p, plen, olen = dataset[0]
        warm = await asyncio.gather(*[client.request(http, p, plen, min(olen, 32))
                                      for _ in range(args.warmup_requests)])
        if not any(o.success for o in warm):
            raise SystemExit("Warmup failed - Please make sure benchmark arguments are correctly specified. "
                             f"Error: {warm[0].error}")
        print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...")
    if args.flush_cache:
        async with http.request("POST", url + "/flush_cache"):
            pass
    server_info = await fetch_server_info(http, url)
    sem = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
    rng = random.Random(args.seed)
    client.t0 = time.perf_counter()

    async def one(item: tuple[str, int, int]) -> Out:
        if sem is None:
            return await client.request(http, *item)
        async with sem:
            return await client.request(http, *item)

    tasks = []
    for item in dataset:
        tasks.append(asyncio.create_task(one(item)))
        if not math.isinf(args.request_rate):
            await asyncio.sleep(rng.expovariate(args.request_rate) / scale)
    outs = await asyncio.gather(*tasks)
    duration = client.now()
    m = metrics(outs, max(duration, 1e-9))
    print_summary(args, m, duration)
    record: dict[str, Any] = {
        "tag": args.tag, "backend": args.backend, "dataset_name": args.dataset_name,
        "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len, "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len, "random_range_ratio": args.random_range_ratio,
        "server_info": server_info, "duration": duration,
    }
    record.update({k: m[k] for k in json_keys(env.installed_version()) if k != "duration"})
    if args.output_details:
        record.update(input_lens=[o.prompt_len for o in outs], output_lens=[o.output_len for o in outs],
                      ttfts=[o.ttft for o in outs], itls=[o.itl for o in outs],
                      generated_texts=[o.generated_text for o in outs], errors=[o.error for o in outs])
    out_file = args.output_file or _auto_name(args)
    with open(out_file, "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return 0


def _auto_name(args: argparse.Namespace) -> str:
    day = datetime.now().strftime("%m%d")
    if args.dataset_name.startswith("random"):
        return f"{args.backend}_{day}_{args.num_prompts}_{args.random_input_len}_{args.random_output_len}.jsonl"
    return f"{args.backend}_{day}_{args.num_prompts}_sharegpt.jsonl"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"benchmark_args={args}")
    dataset = make_dataset(args)
    if isinstance(dataset, int):
        return dataset
    if not dataset:
        print("Error: the dataset produced no requests", file=sys.stderr)
        return 1
    print(f"#Input tokens: {sum(d[1] for d in dataset)}")
    print(f"#Output tokens: {sum(d[2] for d in dataset)}")
    return asyncio.run(run(args, dataset))
