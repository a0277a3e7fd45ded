"""A deterministic stand-in "model" for chat smoke tests: it answers simple arithmetic correctly.

Why: the deploy tool's smoke check asks "What is 17 + 25?" and expects 42; a fixed answer would not
catch a server that mixes up requests, a computed one does.
"""

from __future__ import annotations

import re
from typing import Any

_ARITH = re.compile(r"(-?\d+(?:\.\d+)?)\s*(\+|-|\*|x|×|/|plus|minus|times|divided by)\s*(-?\d+(?:\.\d+)?)", re.I)


def count_tokens(text: str) -> int:
    """The simulator's tokenizer: one token per whitespace-separated word (at least 1)."""
    return max(len(text.split()), 1)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def answer(question: str) -> str:
    m = _ARITH.search(question)
    if not m:
        return "I am a simulated GLM-5 server. Ask me an arithmetic question such as: What is 17 + 25?"
    a, op, b = float(m.group(1)), m.group(2).lower(), float(m.group(3))
    if op in ("+", "plus"):
        r = a + b
    elif op in ("-", "minus"):
        r = a - b
    elif op in ("*", "x", "×", "times"):
        r = a * b
    else:
        if b == 0:
            return "Division by zero is undefined."
        r = a / b
    return f"{_fmt(a)} {m.group(2)} {_fmt(b)} = {_fmt(r)}. The answer is {_fmt(r)}."


def reasoning(question: str) -> str:
    return f"The user asks: {question.strip()[:200]} Let me compute it step by step and answer briefly."


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def prompt_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|{msg.get('role', 'user')}|> {content or ''}")
    return " ".join(parts) + " <|assistant|>"
