"""Exploration that covers every action (issue 38): the trainer's "too few runs of X" becomes each action's
minimum share of the runs to come, the exploring router draws from that mixture (and logs its true
propensity), so 100 runs hold enough read, plan and reason runs to learn from, even for a learned
incumbent with no estimate for an action."""

from __future__ import annotations

import random
from collections import Counter

from agentrt.core.config import Settings
from agentrt.router import ACTIONS, UtilityConfig, extract
from agentrt.router.decision import choose
from agentrt.router.rules import expected_tokens
from agentrt.train.router import MIN_RUNS_PER_ACTION, explore_shares

INDEX = {"coverage": 0.9, "has_index": 1.0, "index_bm25": 2.5, "index_vector": 0.6, "entity_overlap": 1.0,
         "entity_miss": 0.0, "entity_titled": 1.0}
QUESTIONS = [f"What is the capital of country number {i}?" for i in range(50)] + \
            [f"What is {i} * {i + 3}?" for i in range(50)]


def test_the_shares_ask_for_what_each_action_lacks_within_the_runs_planned():
    shares = explore_shares({"direct": 40, "reason": 5}, 100, ACTIONS, free=("abstain",))
    assert "direct" not in shares and "abstain" not in shares  # direct has its 30; abstain is logged for free
    assert set(shares) == {"reason", "plan", "read", "ask"}
    assert shares["reason"] < shares["plan"] == shares["read"] == shares["ask"]  # reason has 5 already
    assert abs(sum(shares.values()) - 0.75) < 1e-3  # 115 runs wanted of 100: scaled to leave the router a quarter
    assert explore_shares({}, 1000, ("direct", "read"))["read"] == MIN_RUNS_PER_ACTION / 1000  # room: exactly enough
    assert explore_shares({a: 30 for a in ACTIONS}, 100, ACTIONS) == {}  # nothing lacking, nothing imposed


# A confident incumbent (a learned router after a round on direct-heavy data): direct clearly first
CONFIDENT = {"direct": 0.60, "reason": 0.35, "plan": 0.30, "read": 0.32, "ask": 0.05, "abstain": 0.05}


def _explore(cfg: UtilityConfig, seed: int = 0) -> tuple[Counter, list]:
    rng, settings, picks, decisions = random.Random(seed), Settings(), Counter(), []
    for q in QUESTIONS:
        f = extract(q, index=lambda _q: INDEX)
        d = choose("learned", CONFIDENT, expected_tokens(f, settings), 4096, cfg, features=f, rng=rng)
        picks[d.action] += 1
        decisions.append(d)
    return picks, decisions


def test_100_exploring_runs_cover_every_action_and_log_their_true_propensity():
    base = dict(lam=0.3, temperature=0.1, epsilon=0.3, floors={a: 0.0 for a in ACTIONS})
    before, _ = _explore(UtilityConfig(**base))
    # today's mix (epsilon spread over six actions): the actions the incumbent does not favour get ~5 of 100
    assert before["direct"] >= 50 and max(before.get(a, 0) for a in ("reason", "plan", "read")) < 10, before
    shares = explore_shares({}, len(QUESTIONS), ACTIONS, free=("abstain",))
    after, decisions = _explore(UtilityConfig(**base, min_share=shares))
    assert all(after[a] >= 10 for a in ("direct", "reason", "plan", "read", "ask")), after
    for d in decisions:  # the propensity is the mixture's probability of what was drawn
        assert abs(d.propensity - d.probabilities[d.action]) < 1e-6
        assert all(d.probabilities[a] >= shares[a] - 1e-6 for a in shares)
        assert abs(sum(d.probabilities.values()) - 1.0) < 1e-4


def test_a_share_lets_exploration_draw_an_action_the_router_has_no_estimate_for():
    """A learned incumbent trained before read existed has no model for it: given a share, exploration
    draws read for that share alone; without one it never does (the runtime's behaviour)."""
    p = {"direct": 0.6, "reason": 0.4}
    tokens = {"direct": 80.0, "reason": 400.0}
    rng = random.Random(3)
    plain = UtilityConfig(actions=ACTIONS, epsilon=0.2)
    assert all(choose("learned", p, tokens, 2000, plain, rng=rng).action != "read" for _ in range(200))
    shared = UtilityConfig(actions=ACTIONS, epsilon=0.2, min_share={"read": 0.2})
    drawn = [choose("learned", p, tokens, 2000, shared, rng=rng) for _ in range(400)]
    reads = [d for d in drawn if d.action == "read"]
    assert 50 <= len(reads) <= 110  # ~20% of 400
    assert all(abs(d.propensity - 0.2) < 1e-6 and "exploring" in d.reason for d in reads)
