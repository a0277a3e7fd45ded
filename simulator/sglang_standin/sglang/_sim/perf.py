"""The performance and power model of the simulated SGLang server (documented in ../../README.md).

All times are MODEL milliseconds; the server sleeps model_time / time_scale. The model is deliberately
simple and monotone so that a flag change measurably moves a benchmark:

- a decode step over a batch of b requests costs  t_step(b) = t0 + k * b
  (t0: reading the weights once per step, shrinks with tp; k: per-request attention/MoE work);
  batches above the CUDA-graph max bs run eagerly and pay +50 % of t0 per step;
- every scheduling round costs CPU overhead  o(b) = O0 + O1 * b  during which the GPU idles;
  a round runs `num_continuous_decode_steps` decode steps, so more steps amortise o(b);
- a round admits waiting requests up to max-running-requests and a prefill budget (chunked prefill),
  costing  P0 + P1 * prefill_tokens;
- GPU power fraction = busy_fraction * intensity(b), intensity(b) = 0.12 + 0.30 * b / (b + 256)
  (bigger batches do more math per weight byte); prefill time counts at intensity 0.8.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

T0_TP8_MS = 25.0  # per-step fixed cost at tp 8
K_TP8_MS = 0.12  # per-request per-step cost at tp 8
O0_MS = 4.0
O1_MS = 0.044
P0_MS = 6.0
P1_TP8_MS = 0.012
NO_CUSTOM_AR_MS = 4.0
DEFAULT_MAX_RUNNING = 1024
DEFAULT_CUDA_GRAPH_MAX_BS = 256
DEFAULT_CHUNKED_PREFILL = 8192
#: A decode step with FlashInfer's autotuned MoE tactic (flashinfer_cutlass, sglang/_sim/autotune.py) is this much
#: faster than with the default tactic: flashinfer#3537's 14-16 % end-to-end tactic gap.
AUTOTUNE_STEP_SPEEDUP = 1.15


@dataclass(frozen=True)
class PerfModel:
    tp: int
    max_running: int
    decode_steps: int
    cuda_graph_max_bs: int
    chunked_prefill: int
    custom_all_reduce: bool
    fp8_kv: bool
    moe_autotuned: bool = False  # sglang/_sim/autotune.py: the release (or a patch) autotuned flashinfer_cutlass
    step_factor: float = 1.0  # sglang/_sim/regression.py: a `slow` build in the venv makes every step longer

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> PerfModel:
        """Read the resolved server args (dest names of either sglang version)."""
        tp = int(args.get("tp_size") or args.get("tensor_parallel_size") or 1)
        cgbs = args.get("cuda_graph_max_bs") or args.get("cuda_graph_max_bs_decode") or DEFAULT_CUDA_GRAPH_MAX_BS
        return cls(
            tp=max(tp, 1),
            max_running=int(args.get("max_running_requests") or DEFAULT_MAX_RUNNING),
            decode_steps=max(int(args.get("num_continuous_decode_steps") or 1), 1),
            cuda_graph_max_bs=int(cgbs),
            chunked_prefill=int(args.get("chunked_prefill_size") or DEFAULT_CHUNKED_PREFILL),
            custom_all_reduce=not bool(args.get("disable_custom_all_reduce")),
            fp8_kv=str(args.get("kv_cache_dtype") or "").startswith("fp8"),
        )

    @property
    def t0(self) -> float:
        t = T0_TP8_MS * 8.0 / self.tp
        return t if self.custom_all_reduce else t + NO_CUSTOM_AR_MS

    def step_ms(self, batch: int) -> float:
        k = K_TP8_MS * 8.0 / self.tp * (0.85 if self.fp8_kv else 1.0)
        eager = 0.5 * self.t0 if batch > self.cuda_graph_max_bs else 0.0
        step = self.t0 + eager + k * batch
        step *= self.step_factor
        return step / AUTOTUNE_STEP_SPEEDUP if self.moe_autotuned else step

    @staticmethod
    def overhead_ms(batch: int) -> float:
        return O0_MS + O1_MS * batch

    def prefill_ms(self, tokens: int) -> float:
        return P0_MS + P1_TP8_MS * 8.0 / self.tp * tokens if tokens else 0.0

    def round(self, decode_batch: int, prefill_tokens: int) -> tuple[float, float]:
        """(round model ms, GPU power fraction during it) for one scheduling round."""
        decode = self.decode_steps * self.step_ms(decode_batch) if decode_batch else 0.0
        prefill = self.prefill_ms(prefill_tokens)
        total = decode + prefill + self.overhead_ms(decode_batch)
        intensity = 0.12 + 0.30 * decode_batch / (decode_batch + 256.0)
        power = (decode * intensity + prefill * 0.8) / total if total else 0.0
        return total, power

    def steps_round(self, batch: int) -> float:
        """A decode-only round over `batch` requests (model ms)."""
        return self.round(batch, 0)[0]

    def busy_fraction(self, decode_batch: int, prefill_tokens: int) -> float:
        decode = self.decode_steps * self.step_ms(decode_batch) if decode_batch else 0.0
        prefill = self.prefill_ms(prefill_tokens)
        total = decode + prefill + self.overhead_ms(decode_batch)
        return (decode + prefill) / total if total else 0.0

    def steady_output_tok_s(self, batch: int) -> float:
        """Decode-only output token rate at a constant batch (for the README table and tests)."""
        b = min(batch, self.max_running)
        ms, _ = self.round(b, 0)
        return b * self.decode_steps / ms * 1000.0


@dataclass(frozen=True)
class Latency:
    """The model's steady-state figures for a closed loop of `concurrency` clients (model milliseconds)."""

    concurrency: int
    batch: int
    ttft_ms: float  # the p99: the last of a wave of arrivals to be admitted, plus its prefill round
    tpot_ms: float
    output_tok_s: float


def latency(model: PerfModel, concurrency: int, input_len: int, output_len: int) -> Latency:
    """The closed form the tune search is checked against (README, "The knee").

    b = min(c, max_running). A decode round costs R(b) = steps·t_step(b) + o(b), so TPOT = R(b)/steps.
    Arrivals are admitted at round boundaries, at most chunked_prefill prompt tokens a round, so the last of
    min(c, mrr) arrivals waits n_adm = ceil(min(c, mrr)·in / chunk) rounds of R(b) + prefill(chunk'): more decode
    steps lower TPOT but raise TTFT. Past max-running-requests the rest queue for a free slot, a whole request's
    decode: TTFT += ceil((c − mrr)/mrr) · out · TPOT — the knee.
    """
    c = max(int(concurrency), 1)
    b = min(c, model.max_running)
    decode_round = model.steps_round(b)
    tpot = decode_round / model.decode_steps
    per_round = max(model.chunked_prefill // max(input_len, 1), 1)
    rounds = math.ceil(b / per_round)
    ttft = rounds * (decode_round + model.prefill_ms(min(per_round, b) * input_len))
    if c > model.max_running:
        ttft += math.ceil((c - model.max_running) / model.max_running) * output_len * tpot
    return Latency(c, b, ttft, tpot, b * 1000.0 / tpot if tpot else 0.0)


def noise_factor(seed: int, sigma: float, period: int) -> float:
    """A busy period's slowdown: deterministic given (seed, period), mean 1, spread sigma, clipped to [0.5, 2]."""
    if sigma <= 0:
        return 1.0
    return min(max(random.Random(f"{seed}:{period}").gauss(1.0, sigma), 0.5), 2.0)
