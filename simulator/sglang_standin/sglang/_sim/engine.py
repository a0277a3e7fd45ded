"""The simulated scheduler: continuous batching driven by the performance model (perf.py).

One asyncio task runs scheduling rounds. Each round admits waiting requests (up to max-running-requests and
the chunked-prefill budget), runs `num_continuous_decode_steps` decode steps for the running batch, sleeps
the round's model time divided by the time scale, then hands every request its new tokens. Streams
therefore arrive in bursts of `steps` tokens, like the real server with continuous decode steps.

Two faults live here: `stall_after` (after that many finished requests no round runs again: requests hang and
every counter stops, while /health, which does not go through this loop, stays 200) and `slow_prefill_s` (each
prefill takes that many real seconds, in chunks that advance the prefill counter as real chunked prefill does).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang._sim.perf import PerfModel, noise_factor
from sglang._sim.powercap import PowerCap

VOCAB = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "they", "you", "were",
    "her", "she", "there", "one", "all", "we", "their", "can", "has", "more", "when", "will", "would", "if",
    "no", "what", "so", "out", "up", "said", "about", "into", "than", "them", "only", "other", "time",
    "new", "some", "could", "these", "two", "may", "first", "then", "do", "any", "like", "my", "now",
    "over", "such", "our", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before",
    "must", "through", "back", "years", "where", "much", "your", "way", "well", "down"
]


def token_word(seed: int, i: int) -> str:
    return VOCAB[(seed * 31 + i * 7) % len(VOCAB)]


@dataclass
class Req:
    """One generation request inside the engine."""

    rid: str
    input_len: int
    max_new: int
    words: list[str] | None = None  # scripted output (chat answers); else vocabulary words
    seed: int = 0
    out: list[str] = field(default_factory=list)
    chunks: asyncio.Queue[list[str] | None] = field(default_factory=asyncio.Queue)
    created: float = field(default_factory=time.time)
    first_token_at: float | None = None
    finished: bool = False

    def next_words(self, n: int) -> list[str]:
        start = len(self.out)
        if self.words is not None:
            return self.words[start:start + n]
        return [token_word(self.seed, start + i) for i in range(n)]


class Engine:
    """Continuous-batching loop plus counters for /metrics and the GPU load report."""

    def __init__(self, perf: PerfModel, time_scale: float, noise: float = 0.0, seed: int = 0,
                 stall_after: int | None = None, slow_prefill_s: float = 0.0) -> None:
        self.perf = perf
        self.scale = time_scale
        # A noisy machine: each busy period (idle → work) runs slower or faster by one seeded factor, so a bench
        # run moves as a whole, as on a shared host, and the same seed replays the same sequence.
        self.noise = noise
        self.seed = seed
        self.period = 0
        self.factor = 1.0
        self.stall_after = stall_after
        self.slow_prefill_s = slow_prefill_s
        self.finished_total = 0
        #: sglang:realtime_tokens_total by mode: the scheduler's live counters (advance during a request).
        self.realtime = {"prefill_compute": 0.0, "prefill_cache": 0.0, "decode": 0.0}
        self.waiting: collections.deque[Req] = collections.deque()
        self.running: list[Req] = []
        self.admitted: list[Req] = []  # taken from the queue by the round now running (its prefill)
        self.wake = asyncio.Event()
        self.ids = itertools.count(1)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.gen_throughput = 0.0  # tokens per model second over the last round
        self.power_fraction = 0.0  # EMA over recent rounds, read by the load reporter
        self.busy_fraction = 0.0
        self.last_round_wall = 0.0
        self._deadline = 0.0
        #: Called after each round's decode steps with (batch, steps, model ms per step): the profiler's window.
        self.on_decode: Callable[[int, int, float], None] | None = None
        self.cap: PowerCap | None = None  # the GPUs' power limits (set by the server once it knows its GPUs)

    def submit(self, input_len: int, max_new: int, words: list[str] | None = None) -> Req:
        n = next(self.ids)
        req = Req(rid=uuid.uuid4().hex, input_len=max(input_len, 1), max_new=max(max_new, 0), words=words,
                  seed=input_len + n)
        if words is not None:
            req.max_new = min(req.max_new, len(words)) if max_new else len(words)
        self.waiting.append(req)
        self.wake.set()
        return req

    def abort(self, req: Req) -> None:
        if req in self.waiting:
            self.waiting.remove(req)
        req.finished = True

    @property
    def in_flight(self) -> list[Req]:
        """Every request not finished: queued, in the running batch, or in the prefill of the current round (the
        tokenizer manager's rid_to_state)."""
        return [r for r in (*self.waiting, *self.admitted, *self.running) if not r.finished]

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_queued(self) -> int:
        return len(self.waiting)

    @property
    def stalled(self) -> bool:
        return self.stall_after is not None and self.finished_total >= self.stall_after

    async def run(self) -> None:
        while True:
            if self.stalled:
                self.gen_throughput = 0.0
                await asyncio.Event().wait()  # alive but never scheduling again (sglang#22779)
            if not self.waiting and not self.running:
                self.wake.clear()
                self.gen_throughput = 0.0
                await self.wake.wait()
                self._deadline = time.monotonic()
                self.period += 1
                self.factor = noise_factor(self.seed, self.noise, self.period)
            await self._round()

    async def _round(self) -> None:
        decode = [r for r in self.running if not r.finished]
        admitted: list[Req] = []
        budget = self.perf.chunked_prefill
        while self.waiting and len(decode) + len(admitted) < self.perf.max_running and (budget > 0 or not admitted):
            req = self.waiting.popleft()
            admitted.append(req)
            budget -= req.input_len
        self.admitted = admitted
        prefill_tokens = sum(r.input_len for r in admitted)
        if admitted and self.slow_prefill_s > 0:
            chunks = max(1, round(self.slow_prefill_s / 0.5))
            for _ in range(chunks):  # one chunk of the prompt at a time: the counter moves while it runs
                await asyncio.sleep(self.slow_prefill_s / chunks)
                self.realtime["prefill_compute"] += prefill_tokens / chunks
            self._deadline = time.monotonic()
        else:
            self.realtime["prefill_compute"] += prefill_tokens
        ms, power = self.perf.round(len(decode), prefill_tokens)
        if self.cap is not None:  # a GPU power limit below the round's draw slows it (powercap.py, modelled)
            ms, power = self.cap.apply(ms, power)
        ms *= self.factor
        busy = self.perf.busy_fraction(len(decode), prefill_tokens)
        self._deadline = max(self._deadline, time.monotonic()) + ms / 1000.0 / self.scale
        delay = self._deadline - time.monotonic()
        await asyncio.sleep(max(delay, 0.0))
        produced = 0
        for req in decode:
            produced += self._emit(req, self.perf.decode_steps)
        for req in admitted:
            produced += self._emit(req, 1)
        self.running = [r for r in decode + admitted if not r.finished]
        self.admitted = []
        self.realtime["decode"] += produced
        self.gen_throughput = produced / (ms / 1000.0) if ms else 0.0
        self.power_fraction = 0.7 * self.power_fraction + 0.3 * power
        self.busy_fraction = 0.7 * self.busy_fraction + 0.3 * busy
        self.last_round_wall = time.time()
        if decode and self.on_decode is not None:
            self.on_decode(len(decode), self.perf.decode_steps, self.perf.step_ms(len(decode)) * self.factor)

    def _emit(self, req: Req, n: int) -> int:
        if req.finished:
            return 0
        words = req.next_words(min(n, req.max_new - len(req.out)))
        if words:
            if req.first_token_at is None:
                req.first_token_at = time.time()
            req.out.extend(words)
        if len(req.out) >= req.max_new or not words:
            req.finished = True
        req.chunks.put_nowait(words)
        if req.finished:
            # Like the tokenizer manager's observe_one_finished_request: the per-request counters move when a
            # request finishes (a stuck request never moves them); realtime_tokens_total moves every round.
            self.finished_total += 1
            self.requests_total += 1
            self.prompt_tokens_total += req.input_len
            self.generation_tokens_total += len(req.out)
            req.chunks.put_nowait(None)
        return len(words)
