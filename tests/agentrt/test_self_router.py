"""The ``self:PATH`` router (issue 36): a policy folder routes its own requests by its route-label probabilities."""

from __future__ import annotations

import json
import math

import pytest

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError
from agentrt.router import ROUTER_SPECS, make_router
from agentrt.router.evidence import CALIBRATED, INSUFFICIENT
from agentrt.router.selfpolicy import (CALIBRATION_FILE, ActionCalibration, SelfCalibration, SelfPolicyRouter,
                                       messages, parse_label, signals)
from agentrt.router.selfscore import SelfRouter
from agentrt.trajectory import find_record


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """A saved Hugging Face policy: the embedded model's files, linked into a folder of its own (so a test can
    put a calibration file beside them without touching the shared converted model)."""
    from agentrt.backends.embedded import embedded_model_path

    source = embedded_model_path(Settings().models_dir)
    folder = tmp_path_factory.mktemp("self-policy")
    for f in source.iterdir():
        (folder / f.name).symlink_to(f)
    return folder


SURE = {"direct": math.exp(-1.0), "reason": 0.3, "plan": 0.0, "read": 0.0, "ask": 0.0, "abstain": 0.0}


def _calibration(runs: int = 40) -> SelfCalibration:
    """Hand-set maps on unstandardized signals (mean 0, std 1): direct succeeds as the policy grows sure of it,
    abstain rarely; every training signal of the sample sits where ``SURE`` puts them."""
    at = [[round(v, 3) for v in signals(SURE)]] * 20
    one = lambda i, w: [w if j == i else 0.0 for j in range(6)]  # noqa: E731
    acts = {"direct": ActionCalibration(w=one(0, 2.0), b=2.0, runs=runs, base_rate=0.4, tokens=80.0, sample=at),
            "reason": ActionCalibration(w=one(1, 1.0), b=-1.0, runs=runs, base_rate=0.2, tokens=600.0, sample=at),
            "abstain": ActionCalibration(w=[0.0] * 6, b=-3.0, runs=runs, base_rate=0.05, tokens=0.0, sample=at)}
    return SelfCalibration(acts, [0.0] * 6, [1.0] * 6, bandwidth=0.5, lam=0.3)


def test_spec_parsing(policy_dir, tmp_path):
    router = make_router(f"self:{policy_dir}", Settings())
    assert isinstance(router, SelfPolicyRouter) and router.name == "self" and router.calibration is None
    assert isinstance(make_router("self", Settings()), SelfRouter)  # the run's own policy, as before
    assert "self:PATH" in ROUTER_SPECS
    with pytest.raises(ConfigError, match="train-policy --grpo --env strategy"):
        make_router(f"self:{tmp_path / 'nothing-here'}", Settings())
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "config.json").write_text("{}")
    (tmp_path / "p" / CALIBRATION_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="not a self-router calibration"):
        make_router(f"self:{tmp_path / 'p'}", Settings())


def test_a_request_may_not_name_a_policy_folder():
    from agentrt.app.server.door import BadBody, parse_body
    from agentrt.app.server.specs import request_router

    assert request_router("self") is None
    for spec in ("self:/etc", "self:policy", "self:../x"):
        assert request_router(spec) is not None
        with pytest.raises(BadBody, match="set by the server's operator"):
            parse_body(json.dumps({"messages": [], "router": spec}).encode())


def test_labels_are_read_from_the_first_label_word():
    assert parse_label("Abstain.") == "abstain" and parse_label("I would READ the docs") == "read"
    assert parse_label("directly") is None and parse_label("") is None
    assert "abstain" in messages("Who?")[-1].content and messages("Who?")[-1].content.startswith("Who?")


def test_calibrated_decision_and_its_fallback_out_of_evidence(policy_dir):
    router = SelfPolicyRouter(str(policy_dir), Settings())
    router.calibration = _calibration()
    d = router.decide_from(SURE, {}, 1000)
    # p_success(direct) = sigmoid(2 * log pi(direct) + 2) at log pi = -1: 0.5; 20 training signals there: calibrated
    assert d.action == "direct" and d.state == CALIBRATED and d.calibrated and d.fallback == ""
    assert d.p_success["direct"] == pytest.approx(0.5, abs=1e-3) and d.evidence["direct"] >= 3
    assert d.features["label_p_direct"] == pytest.approx(math.exp(-1.0), abs=1e-3) and d.propensity == 1.0
    # far from every training signal: no evidence, the estimates shrink toward the base rates
    unsure = {"direct": math.exp(-9.0), "reason": math.exp(-9.0), "abstain": 1.0, "plan": 0.0, "read": 0.0, "ask": 0.0}
    d = router.decide_from(unsure, {}, 1000)
    assert d.state == INSUFFICIENT and not d.calibrated and d.fallback == "prior"
    # the decision is the policy's own top label, not a re-ranking by the calibrated estimates
    assert d.action == "abstain" and d.propensity == 1.0
    assert d.p_success["direct"] == pytest.approx(0.4, abs=0.02)  # ~ the base rate, not sigmoid(-16)


def test_a_saved_policy_routes_a_real_run_and_logs_its_propensities(agent, policy_dir):
    r = agent.run("What is the capital of France?", budget=800, router=f"self:{policy_dir}")
    rec = find_record(agent.writer.path, r.trajectory_id)
    step = next(s for s in rec.steps if s["kind"] == "route_decision")
    assert step["router"] == "self" and step["route"] == r.route
    label_p = {a: step["features"][f"label_p_{a}"] for a in ("direct", "reason", "plan", "read", "ask", "abstain")}
    assert sum(label_p.values()) == pytest.approx(1.0, abs=0.01) and all(0 <= p <= 1 for p in label_p.values())
    # uncalibrated folder: the label probability is the estimate, and the decision says it is not calibrated
    assert step["propensity"] == step["probabilities"][r.route] == 1.0
    assert step["state"] == INSUFFICIENT and step["calibrated"] is False
    assert step["router_version"] == f"self:{policy_dir}"


def test_a_calibrated_policy_folder_marks_its_decisions_calibrated(agent, policy_dir, tmp_path):
    folder = tmp_path / "calibrated"
    folder.mkdir()
    for f in policy_dir.iterdir():
        (folder / f.name).symlink_to(f.resolve())
    cal = _calibration()
    # every signal the real policy can give counts as evidence here: a wide bandwidth over the whole range
    cal.bandwidth = 50.0
    cal.save(folder / CALIBRATION_FILE)
    r = agent.run("What is 12 * 12?", budget=900, router=f"self:{folder}")
    step = next(s for s in find_record(agent.writer.path, r.trajectory_id).steps if s["kind"] == "route_decision")
    assert step["state"] == CALIBRATED and step["calibrated"] is True
    assert set(step["p_success"]) == {"direct", "reason", "abstain"} and r.route in ("direct", "reason")
    assert step["expected_tokens"]["reason"] == 600.0 and step["evidence"]["direct"] >= 3
