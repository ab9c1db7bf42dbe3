"""Which runs an export keeps: ``KEY=VALUE`` filters over records, and a run's reward (recorded or computed).

    >>> apply_filters(records, ["status=ok", "reward>=0.5"])
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from typing import Any

from agentrt.core.errors import InputError
from agentrt.trajectory.schema import TrajectoryRecord

__all__ = ["apply_filters", "parse_filter", "reward_of"]


_OPS = {"=": operator.eq, "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
        ">": operator.gt, "<": operator.lt}
_FILTER = re.compile(r"^\s*([\w.]+)\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


def parse_filter(text: str) -> Callable[[TrajectoryRecord], bool]:
    """``status=ok``, ``route!=reason``, ``reward>=0.5``, ``task.data_source=gsm8k``, ``usage.total_tokens<500``."""
    m = _FILTER.match(text)
    if not m:
        raise InputError(f"bad filter {text!r}; write KEY=VALUE, KEY!=VALUE, KEY>=NUMBER ... (e.g. status=ok)")
    key, op, raw = m.groups()
    fn = _OPS[op]

    def keep(record: TrajectoryRecord) -> bool:
        value: Any = record.model_dump() if key != "reward" else {"reward": reward_of(record)}
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return op == "!="
        try:
            return bool(fn(float(value), float(raw)))
        except (TypeError, ValueError):
            return bool(fn(str(value), raw)) if op in ("=", "==", "!=") else False

    return keep


def apply_filters(records: list[TrajectoryRecord], filters: Iterable[str]) -> list[TrajectoryRecord]:
    """The records every filter keeps (see ``parse_filter``)."""
    keeps = [parse_filter(f) for f in filters]
    return [r for r in records if all(k(r) for k in keeps)]


def reward_of(record: TrajectoryRecord) -> float | None:
    """The run's reward: recorded, else computed from its task's verifier and ground truth (if any)."""
    if record.reward is not None:
        return record.reward
    task = record.task
    if task is None or task.ground_truth is None:
        return None
    from agentrt.trajectory import rewards

    verifier = task.verifier or rewards.verifier_for(task.data_source)
    if verifier is None:
        return None
    r = rewards.score(verifier, record.answer, task.ground_truth)
    record.rewards.setdefault(verifier, r)
    record.reward = r.score
    return r.score
