"""Observe mode keeps an undecided candidate under observation (issue 39): a candidate whose only fault is a value
interval straddling 0 is judged again on more traffic, each look at a stricter level so that looking again does not
raise the chance of promoting a no-better router; a clearly worse one is refused at once; the last look decides."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from agentrt.app.cli import main
from agentrt.core.config import Settings
from agentrt.router import registry
from agentrt.train.router import Example, train_router
from agentrt.train.traffic import MAX_LOOKS, judge_observed, look_alpha
from test_gate import ARITH, DIM, _runs


def _traffic(n: int, start: int, seed: int, good: float, *, wrong: bool = False) -> list[Example]:
    """``n`` served questions logged by a router that explores (direct 0.6, reason 0.4; its greedy pick is direct),
    each decided in shadow by the candidate r001: reason on arithmetic questions, direct on the others (``wrong``:
    the other way round). The right action succeeds with probability ``good``, the other with 1 - good."""
    rng = random.Random(seed)
    rows = []
    for i in range(start, start + n):
        x = [0.0] * DIM
        math_q = i % 2 == 0
        x[ARITH] = float(math_q)
        pick = ("reason" if math_q else "direct") if not wrong else ("direct" if math_q else "reason")
        action = "direct" if rng.random() < 0.6 else "reason"
        ok = float(rng.random() < (good if (action == "reason") == math_q else 1 - good))
        rows.append(Example(question=f"t{i}", x=x, action=action, propensity=0.6 if action == "direct" else 0.4,
                            probs={"direct": 0.6, "reason": 0.4}, success=ok, reward=ok,
                            tokens=60.0 if action == "direct" else 300.0, budget=1000,
                            shadow={"router_version": "r001", "action": pick,
                                    "p_success": {"direct": 0.3 if math_q else 0.7, "reason": 0.7 if math_q else 0.3}},
                            logged={"probabilities": {"direct": 0.6, "reason": 0.4},
                                    "p_success": {"direct": 0.5, "reason": 0.5}}))
    return rows


@pytest.fixture
def observed(agentrt_home):
    """A home whose candidate r001 is under observation, the shipped router in use."""
    settings = Settings(home=agentrt_home)
    fingerprint = registry.policy_fingerprint(None, settings.policy)
    model = train_router([], folds=3, examples=_runs(60))
    model.provenance = {"policy": fingerprint.to_dict()}
    entry = registry.add(Path(agentrt_home), model)
    registry.set_observe(Path(agentrt_home), fingerprint.id, {"version": entry.version, "status": "observing",
                                                          "since": 0, "incumbent": "shipped"})
    return settings, fingerprint, entry


def _state(settings: Settings, fingerprint) -> dict:
    return registry.observe_state(Path(settings.home))[fingerprint.id]


def test_an_undecided_candidate_stays_under_observation_and_is_promoted_on_more_traffic(observed, capsys):
    settings, fingerprint, entry = observed
    home = Path(settings.home)
    first = _traffic(12, 0, seed=3, good=0.7)
    # fewer than 10 questions: no look is spent (a bootstrap over so few is overconfident)
    waiting = judge_observed(settings, fingerprint, entry, first[:9])
    assert waiting.step == "observing" and waiting.look == 0 and "wants >= 10 questions" in waiting.warnings[0]
    one = judge_observed(settings, fingerprint, entry, first)
    assert one.step == "undecided" and one.look == 1 and not one.promoted
    lo, hi = one.verdict.interval
    assert lo <= 0 < hi and one.verdict.difference > 0
    assert one.verdict.alpha == pytest.approx(look_alpha(1)) and "96.96% interval" in one.verdict.lines()[0]
    state = _state(settings, fingerprint)
    assert state["status"] == "observing" and state["looks"] == 1 and state["verdict"]["undecided"] is True
    assert registry.observing(home, fingerprint.id).version == entry.version  # still deciding in shadow
    capsys.readouterr()
    assert main(["router", "list", "--json"]) == 0  # what the user sees
    listed = json.loads(capsys.readouterr().out)
    row = next(r for r in listed["routers"] if r["version"] == entry.version)
    assert listed["observing"] == entry.version and row["status"] == "observing (shadow)"
    assert row["observe"]["verdict"]["undecided"] is True and row["observe"]["verdict"]["look"] == 1
    assert main(["router", "list"]) == 0
    assert "look 1" in capsys.readouterr().out
    # the same traffic again, or a few more questions: not a new look
    assert judge_observed(settings, fingerprint, entry, first + _traffic(5, 12, seed=2, good=0.85)).step == "observing"
    two = judge_observed(settings, fingerprint, entry, first + _traffic(40, 12, seed=101, good=0.85))
    assert two.step == "judged" and two.promoted and two.look == 2 and two.verdict.interval[0] > 0
    assert two.verdict.alpha == pytest.approx(look_alpha(2)) and look_alpha(2) < look_alpha(1)
    assert _state(settings, fingerprint)["status"] == "promoted" and registry.observing(home, fingerprint.id) is None
    promoted = registry.resolve_default(home, fingerprint)
    assert promoted is not None and promoted.version == entry.version


def test_a_clearly_worse_candidate_is_refused_at_the_first_look(observed):
    settings, fingerprint, entry = observed
    report = judge_observed(settings, fingerprint, entry, _traffic(30, 0, seed=3, good=0.85, wrong=True))
    assert report.step == "judged" and not report.promoted and report.verdict.interval[1] <= 0
    assert _state(settings, fingerprint)["status"] == "refused"
    assert registry.observing(Path(settings.home), fingerprint.id) is None


def test_the_last_look_decides(observed):
    settings, fingerprint, entry = observed
    registry.set_observe(Path(settings.home), fingerprint.id, {**_state(settings, fingerprint),
                                                               "looks": MAX_LOOKS - 1, "looked_at": 2})
    report = judge_observed(settings, fingerprint, entry, _traffic(12, 0, seed=3, good=0.7))
    assert report.look == MAX_LOOKS and report.step == "judged" and not report.promoted
    assert report.verdict.interval[0] <= 0 < report.verdict.interval[1]  # as undecided as the first look above
    assert _state(settings, fingerprint)["status"] == "refused"


def test_the_looks_spend_no_more_than_one_95_percent_judgment():
    spent = sum(look_alpha(k) for k in range(1, 10_000))
    assert spent < 0.05 and look_alpha(1) < 0.05 and all(look_alpha(k + 1) < look_alpha(k) for k in range(1, 10))
