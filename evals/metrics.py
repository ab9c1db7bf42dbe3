"""Eval metrics from result records: accuracy, pass@k / pass^k, tokens, latency, action mix,
calibration (ECE, Brier, reliability table), abstention precision/recall, and the oracle policy.

Plain functions over lists of dicts (the lines of results.jsonl); no numpy needed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), from n samples with c correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k (all k of k tries succeed), unbiased: C(c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def reliability(probs: list[float], outcomes: list[bool], bins: int = 10) -> list[dict[str, Any]]:
    """Equal-width bins over [0, 1]: count, mean confidence, accuracy per non-empty bin."""
    table = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, p in enumerate(probs) if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        if idx:
            table.append({"bin": f"[{lo:.1f}, {hi:.1f}{']' if b == bins - 1 else ')'}", "count": len(idx),
                          "confidence": sum(probs[i] for i in idx) / len(idx),
                          "accuracy": sum(outcomes[i] for i in idx) / len(idx)})
    return table


def ece(probs: list[float], outcomes: list[bool], bins: int = 10) -> float:
    """Expected calibration error: sum over bins of |accuracy - confidence| weighted by bin size."""
    if not probs:
        raise ValueError("ece needs at least one prediction")
    n = len(probs)
    return sum(r["count"] / n * abs(r["accuracy"] - r["confidence"]) for r in reliability(probs, outcomes, bins))


def brier(probs: list[float], outcomes: list[bool]) -> float:
    if not probs:
        raise ValueError("brier needs at least one prediction")
    return sum((p - float(o)) ** 2 for p, o in zip(probs, outcomes)) / len(probs)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _ks(samples: int) -> list[int]:
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples]
    return ks + ([samples] if samples not in ks else [])


def no_answer(record: dict[str, Any]) -> bool:
    """A result line of a run that ended without a real answer (status no_answer, or truncated with none)."""
    return record.get("status") == "no_answer" or (record.get("status") == "truncated" and not record.get("answer"))


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every number for one group of records (one policy on one suite, or one action of it)."""
    by_item: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_item[r["item_id"]].append(r)
    n_samples = min((len(v) for v in by_item.values()), default=0)
    out: dict[str, Any] = {
        "items": len(by_item), "runs": len(records),
        "accuracy": _mean([_mean([float(r["correct"]) for r in v]) for v in by_item.values()]),
        "mean_score": _mean([r["score"] for r in records]),
        "errors": sum(1 for r in records if r.get("status") == "error"),
        # runs that ended without a real answer (agentrt.core.answer): wrong, and apart from abstentions
        "no_answer": _mean([float(no_answer(r)) for r in records]),
        "truncated": _mean([float(bool(r.get("truncated"))) for r in records]),
    }
    if n_samples >= 1:
        for k in _ks(n_samples):
            out[f"pass@{k}"] = _mean([pass_at_k(len(v), sum(r["correct"] for r in v), k) for v in by_item.values()])
            out[f"pass^{k}"] = _mean([pass_hat_k(len(v), sum(r["correct"] for r in v), k) for v in by_item.values()])
    for key in ("prompt_tokens", "completion_tokens", "thinking_tokens", "tool_calls"):
        out[key] = _mean([r[key] for r in records])
    out["total_tokens"] = _mean([r["prompt_tokens"] + r["completion_tokens"] for r in records])
    lat = [r["latency_s"] for r in records if r.get("status") != "error"]
    out["latency_p50_s"], out["latency_p95_s"] = percentile(lat, 50), percentile(lat, 95)
    mix: dict[str, int] = defaultdict(int)
    for r in records:
        mix[r["route"] or "?"] += 1
    out["action_mix"] = {k: v / len(records) for k, v in sorted(mix.items())} if records else {}
    cal = [(r["p_success"], bool(r["correct"])) for r in records if r.get("p_success") is not None]
    if cal:
        probs, outcomes = [p for p, _ in cal], [o for _, o in cal]
        out["calibration"] = {"n": len(cal), "ece": ece(probs, outcomes), "brier": brier(probs, outcomes),
                              "reliability": reliability(probs, outcomes)}
    if any(r.get("turns") for r in records):
        out["per_turn"] = per_turn(records)
    unanswerable = [r for r in records if r["type"] == "unanswerable"]
    abstained = [r for r in records if r.get("abstained")]
    if unanswerable or abstained:
        hits = sum(1 for r in abstained if r["type"] == "unanswerable")
        out["abstention"] = {"abstained": len(abstained), "unanswerable": len(unanswerable),
                             "precision": hits / len(abstained) if abstained else None,
                             "recall": hits / len(unanswerable) if unanswerable else None}
    return out


def per_turn(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Multi-turn items: accuracy of turn 1, 2, ... (a turn never asked, after a failed one, counts as
    wrong) and of the plan check, with the share of plan checks whose plan had a dependent step."""
    multi = [r for r in records if r.get("turns")]
    out: dict[str, Any] = {"items": len({r["item_id"] for r in multi})}
    scores: dict[str, float | None] = {}  # mean verifier score (e.g. QA F1): signal below full accuracy
    for n in range(1, max(r.get("n_turns", len(r["turns"])) for r in multi) + 1):
        asked = [r for r in multi if r.get("n_turns", len(r["turns"])) >= n]
        out[f"turn {n}"] = _mean([float(any(t["turn"] == n and t["correct"] for t in r["turns"])) for r in asked])
        scores[f"turn {n}"] = _mean([next((t["score"] for t in r["turns"] if t["turn"] == n), 0.0) for r in asked])
    checked = [r for r in multi if r.get("plan_check")]
    if checked:
        out["plan"] = _mean([float(bool(r.get("plan") and r["plan"]["correct"])) for r in checked])
        scores["plan"] = _mean([r["plan"]["score"] if r.get("plan") else 0.0 for r in checked])
        plans = [r["plan"] for r in checked if r.get("plan") and r["plan"].get("status") != "error"]
        out["plan_dependent"] = _mean([float(p.get("dependent_steps", 0) > 0) for p in plans])
    out["mean_score"] = scores
    return out


def oracle_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The best fixed action in hindsight per (suite, item): highest accuracy, then fewest tokens.

    Returns the chosen action's records, relabelled ``router="oracle"``; empty without fixed runs.
    """
    groups: dict[tuple[str, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("fixed"):
            groups[(r["suite"], r["item_id"])][r["router"]].append(r)
    chosen = []
    for per_router in groups.values():
        def rank(name: str) -> tuple[float, float]:
            rs = per_router[name]
            return (-sum(r["correct"] for r in rs) / len(rs), sum(r["prompt_tokens"] + r["completion_tokens"] for r in rs) / len(rs))
        best = min(sorted(per_router), key=rank)
        chosen.extend({**r, "router": "oracle", "p_success": None} for r in per_router[best])
    return chosen


def compute(records: list[dict[str, Any]]) -> dict[str, Any]:
    """All metrics: per policy (each router, plus the oracle) x suite, and per action within each."""
    records = records + oracle_records(records)
    policies: dict[str, Any] = {}
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        grouped[(r["router"], r["suite"])].append(r)
        grouped[(r["router"], "all")].append(r)
    for (router, suite), rs in sorted(grouped.items()):
        entry = summarize(rs)
        by_action: dict[str, list[dict]] = defaultdict(list)
        for r in rs:
            by_action[r["route"] or "?"].append(r)
        entry["per_action"] = {a: summarize(v) for a, v in sorted(by_action.items())}
        policies.setdefault(router, {})[suite] = entry
    return {"policies": policies, "runs": len([r for r in records if r["router"] != "oracle"])}
