"""MATH answers with math-verify: ``\\frac{1}{2}`` equals ``0.5``, ``\\boxed{3}`` equals ``3``, ...

math-verify guards parsing with ``signal.alarm``, which only works in the main thread: in worker
threads we pass ``parsing_timeout=None`` / ``timeout_seconds=None`` (measured: it fails otherwise).
"""

from __future__ import annotations

import re
import threading

from agentrt.core.errors import missing_extra
from agentrt.trajectory.rewards._base import HEDGE_PENALTY, Reward, penalized

_BOXED = re.compile(r"\\(?:boxed|fbox)\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\}")


def math_match(response: str, gold: str) -> Reward:
    """1.0 when the response's final answer is mathematically equal to ``gold`` (a MATH ``answer``)."""
    try:
        from math_verify import parse, verify
    except ImportError:
        raise missing_extra("math-verify", "rewards") from None
    main = threading.current_thread() is threading.main_thread()
    timeouts = {} if main else {"parsing_timeout": None}
    boxed = list(dict.fromkeys(b.strip() for b in _BOXED.findall(response)))
    if len(boxed) > 1 and not _same(boxed, parse, verify, main):
        return penalized(0.0, {"match": 0.0}, {"hedge": HEDGE_PENALTY},
                         f"hedges between {len(boxed)} different boxed answers", "math")
    gold_parsed = parse(f"${gold}$", **timeouts)
    answer = parse(f"$\\boxed{{{boxed[-1]}}}$" if boxed else response, **timeouts)
    if not answer:
        return Reward(score=0.0, components={"match": 0.0, "boxed": float(bool(boxed))},
                      reason="no parsable answer", verifier="math")
    ok = bool(verify(gold_parsed, answer, **({} if main else {"timeout_seconds": None})))
    return Reward(score=float(ok), components={"match": float(ok), "boxed": float(bool(boxed))},
                  reason=f"{'equal to' if ok else 'not equal to'} the gold answer {gold!r}", verifier="math")


def _same(values: list[str], parse, verify, main: bool) -> bool:
    """Several boxed values that are all equal (``\\boxed{1/2}`` and ``\\boxed{0.5}``) are not a hedge."""
    kw = {} if main else {"parsing_timeout": None}
    first = parse(f"$\\boxed{{{values[0]}}}$", **kw)
    return all(verify(first, parse(f"$\\boxed{{{v}}}$", **kw), **({} if main else {"timeout_seconds": None}))
               for v in values[1:])
