"""Deterministic answers with logprobs for /generate at temperature 0, and the `output=`/`drift=` faults.

Why: the deploy tool's correctness gate records a release's answers to its golden prompts (token ids, their
logprobs, the top logprobs at each position) and compares the next release's answers with them. A real model at
temperature 0 gives the same answer to the same prompt; so does this one: every token and logprob comes from a
generator seeded by the model path and the prompt text. The top-1 token leads the runner-up by at least 0.9 nats,
as a confident model's greedy choice does, so a small `drift` never flips it.

Faults (ct state.json, honouring `match=` like the other server knobs; only the native /generate path with
return_logprob is affected, so a regex smoke check on /v1/chat/completions still passes, as it did upstream):
- output=garbage: random token ids from the whole vocabulary, text with control characters, flat logprobs
  (an FP4 MoE producing garbage);
- output=zeros: logits all zero: token 0 at every position, every logprob -ln(vocab) (an NVFP4 GEMM returning zeros);
- output=nan: NaN logits: token 0 everywhere, logprobs NaN, which sglang's orjson writes as null;
- output=repeat: three right tokens, then the fourth repeated to the end (a decode loop);
- drift=D: each chosen token's logprob moves by up to D, a few low-probability alternatives by up to 5·D and the
  last one is sometimes another token: batched-kernel nondeterminism, which the gate must tolerate (D ≤ 0.1).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from sglang._sim.engine import VOCAB

VOCAB_SIZE = 151552  # GLM-5's vocabulary
CANDIDATES = 20  # alternatives drawn at every position (the most top_logprobs_num returns)


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    logprob: float
    top: tuple[tuple[float, int, str], ...]  # (logprob, id, text), best first


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def word_id(index: int) -> int:
    return 1000 + index * 13


def _clean(model: str, prompt: str, n: int) -> list[Token]:
    rng = _rng("answer", model, prompt)
    out: list[Token] = []
    prev = -1
    for _ in range(n):
        order = rng.sample(range(len(VOCAB)), CANDIDATES)
        if order[0] == prev:  # a confident model does not stutter
            order[0], order[1] = order[1], order[0]
        lps = [-rng.uniform(0.02, 0.7)]
        for _ in range(CANDIDATES - 1):
            lps.append(lps[-1] - rng.uniform(0.9, 2.5) if len(lps) == 1 else lps[-1] - rng.uniform(0.05, 1.2))
        top = tuple((lp, word_id(w), " " + VOCAB[w]) for lp, w in zip(lps, order, strict=True))
        out.append(Token(top[0][1], top[0][2], top[0][0], top))
        prev = order[0]
    return out


def _drifted(tokens: list[Token], drift: float, model: str, prompt: str) -> list[Token]:
    rng = _rng("drift", model, prompt)
    out = []
    for tok in tokens:
        lp = tok.logprob + drift * rng.uniform(-1, 1)
        rest = [(a + 5 * drift * rng.uniform(-1, 1) if i >= 2 else a + drift * rng.uniform(-1, 1), t, s)
                for i, (a, t, s) in enumerate(tok.top[1:], start=1)]
        if rng.random() < 0.3:  # a low-probability alternative swapped for another word
            w = rng.randrange(len(VOCAB))
            rest[-1] = (rest[-1][0], word_id(w), " " + VOCAB[w])
        rest.sort(key=lambda c: -c[0])
        out.append(Token(tok.id, tok.text, lp, ((lp, tok.id, tok.text), *rest)))
    return out


def _garbage(model: str, prompt: str, n: int) -> list[Token]:
    rng = _rng("garbage", model, prompt)
    out = []
    for _ in range(n):
        top = tuple(sorted(((-rng.uniform(9.5, 12.5), rng.randrange(VOCAB_SIZE),
                             "".join(chr(rng.choice((rng.randrange(0x20), rng.randrange(0x370, 0x3ff),
                                                     rng.randrange(0x4e00, 0x4e80)))) for _ in range(2)))
                            for _ in range(CANDIDATES)), key=lambda c: -c[0]))
        out.append(Token(top[0][1], top[0][2], top[0][0], top))
    return out


def _uniform(n: int, lp: float) -> list[Token]:
    top = tuple((lp, i, "!" if i == 0 else f"<tok{i}>") for i in range(CANDIDATES))
    return [Token(0, "!", lp, top) for _ in range(n)]


def tokens(model: str, prompt: str, n: int, output: str = "ok", drift: float = 0.0) -> list[Token]:
    """The answer to `prompt` at temperature 0: `n` tokens, shaped by the output fault and drift."""
    if output == "garbage":
        return _garbage(model, prompt, n)
    if output == "zeros":
        return _uniform(n, -math.log(VOCAB_SIZE))
    if output == "nan":
        return _uniform(n, math.nan)
    clean = _clean(model, prompt, n)
    if output == "repeat":
        clean = clean[:3] + [clean[min(3, n - 1)]] * max(n - 3, 0) if n > 3 else clean
    return _drifted(clean, drift, model, prompt) if drift else clean


def _json_lp(x: float) -> float | None:
    """sglang serialises with orjson, which writes a NaN or infinity as null."""
    return x if math.isfinite(x) else None


def logprob_fields(toks: list[Token], top_n: int, input_id: int, *, with_text: bool) -> dict[str, object]:
    """meta_info's logprob fields as sglang returns them: [logprob, token_id, text] triples, the text None unless
    return_text_in_logprobs; logprob_start_len -1 gives the last prompt token only, whose logprob is None."""
    def txt(s: str) -> str | None:
        return s if with_text else None

    return {
        "input_token_logprobs": [[None, input_id, None]],
        "input_top_logprobs": [None],
        "output_token_logprobs": [[_json_lp(t.logprob), t.id, txt(t.text)] for t in toks],
        "output_top_logprobs": [[[_json_lp(a), i, txt(s)] for a, i, s in t.top[:top_n]] for t in toks],
    }
