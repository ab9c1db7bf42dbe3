"""Metric math on known inputs."""

from __future__ import annotations

import math

import pytest

from evals.metrics import brier, compute, ece, oracle_records, pass_at_k, pass_hat_k, percentile, reliability


def test_pass_at_k_formula():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))  # 0.7
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k: some success is certain
    assert pass_at_k(10, 1, 10) == 1.0


def test_pass_hat_k_formula():
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_hat_k(5, 5, 5) == 1.0
    assert pass_hat_k(4, 3, 1) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        pass_hat_k(3, 4, 1)


def test_ece_brier_reliability():
    probs, outcomes = [0.9, 0.9, 0.1, 0.1], [True, False, False, False]
    # bin 0.9: confidence 0.9, accuracy 0.5 -> 0.4; bin 0.1: 0.1 vs 0 -> 0.1; weighted by 1/2 each
    assert ece(probs, outcomes) == pytest.approx(0.25)
    assert brier(probs, outcomes) == pytest.approx((0.01 + 0.81 + 0.01 + 0.01) / 4)
    table = reliability(probs, outcomes)
    assert [r["count"] for r in table] == [2, 2]
    assert ece([1.0, 0.0], [True, False]) == 0.0


def test_percentile():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 95) == 5
    assert percentile([], 50) is None


def _rec(router, item, correct, tokens, route, fixed=True, p=None, kind="math", abstained=False):
    return {"key": f"{router}|s|{item}|0", "router": router, "suite": "s", "item_id": item, "sample": 0,
            "type": kind, "fixed": fixed, "p_success": p, "route": route, "score": float(correct),
            "correct": correct, "abstained": abstained, "status": "ok", "truncated": False,
            "prompt_tokens": tokens, "completion_tokens": 0, "thinking_tokens": 0, "tool_calls": 0, "latency_s": 0.1}


def test_oracle_best_action_in_hindsight():
    records = [
        _rec("fixed:direct", "a", True, 10, "direct"), _rec("fixed:reason", "a", True, 50, "reason"),
        _rec("fixed:direct", "b", False, 10, "direct"), _rec("fixed:reason", "b", True, 50, "reason"),
        _rec("fixed:direct", "c", False, 10, "direct"), _rec("fixed:reason", "c", False, 50, "reason"),
        _rec("rules", "a", False, 20, "direct", fixed=False, p=0.8),
    ]
    chosen = {r["item_id"]: r["route"] for r in oracle_records(records)}
    assert chosen == {"a": "direct", "b": "reason", "c": "direct"}  # ties go to fewer tokens
    m = compute(records)["policies"]
    assert m["oracle"]["s"]["accuracy"] == pytest.approx(2 / 3)
    assert m["oracle"]["s"]["total_tokens"] == pytest.approx(70 / 3)
    assert m["fixed:direct"]["s"]["accuracy"] == pytest.approx(1 / 3)
    assert m["rules"]["s"]["calibration"]["brier"] == pytest.approx(0.64)
    assert m["oracle"]["s"]["action_mix"] == {"direct": pytest.approx(2 / 3), "reason": pytest.approx(1 / 3)}


def test_abstention_precision_recall():
    records = [
        _rec("rules", "u1", True, 5, "direct", kind="unanswerable", abstained=True),
        _rec("rules", "u2", False, 5, "direct", kind="unanswerable"),
        _rec("rules", "q1", False, 5, "direct", abstained=True),
        _rec("rules", "q2", True, 5, "direct"),
    ]
    ab = compute(records)["policies"]["rules"]["s"]["abstention"]
    assert ab["precision"] == 0.5 and ab["recall"] == 0.5
