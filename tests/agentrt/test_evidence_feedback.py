"""Issue 39: every learned estimate carries its evidence (calibrated | insufficient_evidence | other_policy) and
falls back to the rules when it has none; users' feedback lands beside the trajectories as rewards (SDK, CLI,
REPL), append-only, and is what ``learn --traffic`` learns from. Control flow on the scripted backend; the
traffic loop on the real model and server is tests/agentrt/test_traffic_loop.py."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from agentrt import Agent
from agentrt.app.cli import main
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.config import Settings
from agentrt.core.errors import InputError
from agentrt.router import extract, registry
from agentrt.router.learned import LearnedRouter, RouterModel
from agentrt.router.features import NUMERIC_FEATURES, vectorize
from agentrt.train.router import load_examples, train_router
from agentrt.trajectory import RewardBreakdown, TaskInfo, TrajectoryRecord, TrajectoryWriter, new_run_id, read_trajectories


def _runs(folder: Path) -> Path:
    """Math questions reason right, capital questions go direct: 120 rewarded runs of two routes."""
    writer = TrajectoryWriter(folder)
    for i in range(30):
        for action, tokens in (("direct", 60), ("reason", 400)):
            for q, math_q in ((f"What is {i} * {i + 7}?", True), (f"What is the capital of country {i}?", False)):
                ok = (action == "reason") == math_q
                writer.append(TrajectoryRecord(
                    run_id=new_run_id(), created_at=time.time(), question=q, route=action, steps=[], answer="a",
                    budget={"total": 1000, "spent": tokens}, usage={"total_tokens": tokens}, timings={},
                    status="ok", task=TaskInfo(ability="math" if math_q else "qa"), reward=float(ok),
                    rewards={"eval": RewardBreakdown(score=float(ok), correct=ok)}))
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> RouterModel:
    return train_router([_runs(tmp_path_factory.mktemp("runs"))], folds=2)


def _for(model: RouterModel, policy_id: str) -> RouterModel:
    name, _, digest = policy_id.partition("@")
    model.provenance = {"policy": {"model": name, "digest": digest, "id": policy_id}, "runs": {"train": 120}}
    return model


def _decide(router: LearnedRouter, q: str):
    return asyncio.run(router.decide(q, extract(q), 1000))


def test_estimates_carry_evidence_and_fall_back_to_the_training_rates_without_it(trained, tmp_path):
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))
    path = tmp_path / "r.json"
    _for(trained, fp.id).save(path)
    model = RouterModel.load(path)  # the sample of training inputs travels in the file
    assert model.evidence is not None and set(model.evidence.actions) == {"direct", "reason"}
    router = LearnedRouter(model, Settings(), policy=fp)
    # like the training questions: many runs resemble it; the learned estimate decides
    d = _decide(router, "What is 3 * 12?")
    assert d.state == "calibrated" and d.calibrated and d.fallback == "" and d.action == "reason"
    assert d.evidence["reason"] >= 3 and d.router == "learned"
    d = _decide(router, "What is the capital of country 99?")
    assert d.state == "calibrated" and d.action == "direct"
    # unlike anything it was fit on: no evidence, so it claims only each action's training rate (half of the
    # runs of each action succeeded) and the step says so
    q = "Write a Python function that reverses a linked list and explain its complexity in detail, please."
    d = _decide(router, q)
    assert d.state == "insufficient_evidence" and not d.calibrated and d.fallback == "prior"
    assert max(d.evidence.values()) < 3 and d.router == "learned" and "shrunk toward" in d.reason
    assert model.base_rates == {"direct": 0.5, "reason": 0.5}
    assert all(abs(d.p_success[a] - 0.5) < 0.05 for a in ("direct", "reason"))  # ~no evidence: ~the base rate
    step = d.to_step()
    assert step["state"] == "insufficient_evidence" and step["fallback"] == "prior" and step["evidence"] == d.evidence
    # a file without base rates (written before them): the rules decide
    data = json.loads(path.read_text())
    del data["metrics"]["base_rates"]
    path.write_text(json.dumps(data))
    d = _decide(LearnedRouter(RouterModel.load(path), Settings(), policy=fp), q)
    assert d.state == "insufficient_evidence" and d.fallback == "rules" and d.router == "rules" and "rules decided" in d.reason
    # the threshold is a setting: at 0 every estimate counts
    assert _decide(LearnedRouter(model, Settings(router_min_evidence=0), policy=fp), q).state == "calibrated"
    # trained for another policy: other_policy, from the first request, with the rules deciding
    other = LearnedRouter(model, Settings(), policy=registry.Fingerprint("Other", "0123"))
    d = _decide(other, "What is 3 * 12?")
    assert d.state == "other_policy" and d.fallback == "rules" and not d.calibrated


def test_out_of_evidence_the_prior_is_the_rate_on_training_runs_sharing_the_questions_cue(trained, tmp_path):
    """Unlike every training question by its words, but arithmetic like half of them: the fallback claims what
    each action did on the arithmetic runs (reason right on all 30, direct on none), not its overall rate (0.5)."""
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))
    path = tmp_path / "r.json"
    _for(trained, fp.id).save(path)
    model = RouterModel.load(path)
    assert model.metrics["cue_rates"]["arithmetic"] == {"direct": [0.0, 30], "reason": [30.0, 30]}
    q = ("My grandmother keeps asking me, before her birthday party starts tonight, how much 1234 * 5678 "
         "comes to when her recipe cards are multiplied out?")
    d = _decide(LearnedRouter(model, Settings(), policy=fp), q)
    assert d.state == "insufficient_evidence" and d.fallback == "prior" and max(d.evidence.values()) < 3
    assert d.action == "reason" and d.p_success["reason"] > 0.85 > 0.15 > d.p_success["direct"]
    assert "'arithmetic' training runs" in d.reason
    # a file without cue rates (written before them) shrinks toward the overall rates, as it did
    data = json.loads(path.read_text())
    del data["metrics"]["cue_rates"]
    path.write_text(json.dumps(data))
    d = _decide(LearnedRouter(RouterModel.load(path), Settings(), policy=fp), q)
    assert d.fallback == "prior" and all(abs(d.p_success[a] - 0.5) < 0.05 for a in ("direct", "reason"))


def test_train_metrics_report_ece_apart_for_calibrated_and_insufficient_runs(trained):
    by = trained.metrics["by_evidence"]
    assert set(by) == {"calibrated", "insufficient_evidence"}
    assert by["calibrated"]["n"] + by["insufficient_evidence"]["n"] == trained.metrics["n"]
    assert by["calibrated"]["n"] > 0 and by["calibrated"]["ece"] is not None


def test_evidence_on_the_numeric_features_reads_the_kind_of_question_not_its_words(tmp_path, monkeypatch):
    """The kernel over the numeric features only (``train.router.EVIDENCE_DIMS``; the default reads the hashed
    words too, see docs/results/routing.md): a question of a kind the router was fit on counts its runs; one of another
    kind (code) has none; the choice travels in the file."""
    from agentrt.train import router as trainer

    monkeypatch.setattr(trainer, "EVIDENCE_DIMS", len(NUMERIC_FEATURES))
    model = train_router([_runs(tmp_path / "runs")], folds=2)
    assert model.evidence is not None and model.evidence.dims == len(NUMERIC_FEATURES)
    path = tmp_path / "r.json"
    model.save(path)
    loaded = RouterModel.load(path)
    assert loaded.evidence is not None and loaded.evidence.dims == len(NUMERIC_FEATURES)
    # numbers the training questions never had, the same kind (arithmetic): its runs count
    q = "What is 41 * 48?"
    near, method = loaded.effective_sizes(vectorize(extract(q), q))
    assert method == "kernel" and near["reason"] >= 3 and near["direct"] >= 3
    code = "```python\ndef f(x):\n    return x\n```\nWhy does this code fail? Explain step by step what changed."
    far, _ = loaded.effective_sizes(vectorize(extract(code), code))
    assert max(far.values()) < 3


def test_a_file_without_a_sample_estimates_evidence_from_its_moments(trained, tmp_path):
    """Router files from before evidence existed (the shipped one) still load; their evidence comes from the
    per-feature mean and std they store: a question unlike the training inputs gets little."""
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))
    path = tmp_path / "old.json"
    _for(trained, fp.id).save(path)
    data = json.loads(path.read_text())
    del data["evidence"]
    path.write_text(json.dumps(data))
    router = LearnedRouter(RouterModel.load(path), Settings(), policy=fp)
    near = _decide(router, "What is 4 * 11?")
    # 120 runs / 2 actions, times the share holding its rarest cue: arithmetic, half of the training questions
    assert near.state == "calibrated" and near.evidence["direct"] == pytest.approx(30.0)
    # a rare cue the router did see is not novelty: a yes/no question is a few percent of the shipped router's
    # runs, dozens of them (a z-score would have called it 6 standard deviations away and fallen back)
    shipped_model = RouterModel.load(registry.shipped()[0].path)
    yes_no = NUMERIC_FEATURES.index("yes_no")
    assert 0 < shipped_model.mean[yes_no] < 0.1
    far = _decide(router, "```python\ndef f(x):\n    return x\n```\nWhy does this code fail on my machine? Compare it "
                          "with the version from last week and then explain, step by step, what changed?")
    assert far.state == "insufficient_evidence" and far.fallback == "prior"  # its metrics carry base rates
    # the shipped router carries its sample: its decisions carry kernel evidence and a state
    entry = registry.shipped()[0]
    shipped_model = RouterModel.load(entry.path)
    assert shipped_model.evidence is not None and shipped_model.metrics["cue_rates"]["unknowable"]
    shipped = LearnedRouter(shipped_model, Settings(), policy=registry.policy_fingerprint(None, "hf:embedded"))
    d = _decide(shipped, "What is the capital of France?")
    assert d.state == "calibrated" and d.evidence[d.action] >= 3 and d.action != "abstain"
    # no training question reads like this one: it says so, and its unknowable cue's runs decide
    d = _decide(shipped, "Who will win the lottery tomorrow?")
    assert d.state == "insufficient_evidence" and d.fallback == "prior" and d.action == "abstain"
    assert "'unknowable' training runs" in d.reason


def test_feedback_from_the_sdk_and_cli_becomes_the_runs_reward(agentrt_home, capsys):
    agent = Agent(policy=ScriptedBackend(["Paris", "Rome", "Bern"]))
    first = agent.run("What is the capital of France?", budget=300, route="direct")
    second = agent.run("What is the capital of Italy?", budget=300, route="direct")
    third = agent.run("What is the capital of Switzerland?", budget=300, route="direct")
    # nothing is learnable before feedback: these runs have no reward
    with pytest.raises(InputError, match="no trajectories with rewards"):
        load_examples([agent.settings.trajectory_dir])
    entry = agent.feedback(first.trajectory_id, correct=True)
    assert entry["score"] == 1.0 and entry["source"] == "sdk"
    assert main(["feedback", second.trajectory_id, "--wrong", "--note", "it is Rome, but say so"]) == 0
    assert "reward 0 (wrong)" in capsys.readouterr().out
    assert main(["feedback", f"chatcmpl-{third.trajectory_id}", "--reward", "0.5", "--json"]) == 0  # a response id
    assert json.loads(capsys.readouterr().out)["score"] == 0.5
    # the latest verdict on a run wins; the record itself is never rewritten (append-only)
    agent.feedback(first.trajectory_id, reward=0.75)
    before = (agent.settings.trajectory_dir / "trajectories.jsonl").read_bytes()
    records = {r.run_id: r for r in read_trajectories(agent.settings.trajectory_dir).records}
    assert records[first.trajectory_id].reward == 0.75
    assert records[second.trajectory_id].reward == 0.0 and records[second.trajectory_id].rewards["feedback"].correct is False
    assert records[second.trajectory_id].rewards["feedback"].verifier == "feedback:cli"
    assert records[third.trajectory_id].reward == 0.5
    assert (agent.settings.trajectory_dir / "trajectories.jsonl").read_bytes() == before
    examples = load_examples([agent.settings.trajectory_dir])
    assert sorted(e.success for e in examples) == [0.0, 0.5, 0.75]  # learnable now
    # unknown runs and bad verdicts: one line, exit 2
    assert main(["feedback", "no-such-run", "--right"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"reward must be a number in \[0, 1\]"):
        agent.feedback(first.trajectory_id, reward=1.5)
    with pytest.raises(InputError, match="needs a verdict"):
        agent.feedback(first.trajectory_id)


def test_a_torn_feedback_line_is_skipped_and_the_next_verdict_lands(agentrt_home):
    """A writer killed mid-line leaves a torn line: the next writer ends it, readers skip it, nothing else is lost."""
    agent = Agent(policy=ScriptedBackend(["Paris", "Rome"]))
    a = agent.run("What is the capital of France?", budget=300, route="direct")
    b = agent.run("What is the capital of Italy?", budget=300, route="direct")
    agent.feedback(a.trajectory_id, correct=True)
    path = agent.settings.trajectory_dir / "feedback.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"run_id": "' + b.trajectory_id.encode() + b'", "sco')  # killed here
    agent.feedback(b.trajectory_id, correct=False)
    records = {r.run_id: r for r in read_trajectories(agent.settings.trajectory_dir).records}
    assert records[a.trajectory_id].reward == 1.0 and records[b.trajectory_id].reward == 0.0


def test_repl_good_and_bad_record_feedback_on_the_last_turn(agentrt_home):
    from io import StringIO

    from rich.console import Console

    from agentrt.app.repl import Repl

    agent = Agent(policy=ScriptedBackend(["Paris"]))
    out = StringIO()
    repl = Repl(agent, console=Console(file=out, width=120))
    repl.command("/good")
    assert "no turn yet" in out.getvalue()
    repl.route = "direct"
    repl.turn("What is the capital of France?")
    repl.command("/bad")
    run_id = repl.last.run_id
    assert f"recorded: run {run_id} wrong" in out.getvalue()
    record = next(r for r in read_trajectories(agent.settings.trajectory_dir).records if r.run_id == run_id)
    assert record.reward == 0.0 and record.rewards["feedback"].verifier == "feedback:repl"


def test_a_policy_no_router_was_trained_for_is_other_policy_and_learns_from_its_own_traffic(agentrt_home):
    """Honest defaults per policy: the shipped router was trained for the embedded model, so a scripted policy's
    decisions are other_policy from the first request; its own traffic with feedback trains a candidate for it,
    which then decides in shadow (observe mode) on its requests only."""
    from agentrt.router import make_router
    from agentrt.train.traffic import learn_traffic

    backend = ScriptedBackend(["Paris"])
    agent = Agent(policy=backend)
    fp = registry.policy_fingerprint(backend)
    first = agent.run("What is the capital of France?", budget=300)
    assert first.decision["state"] == "other_policy" and first.decision["fallback"] == "rules"
    assert first.decision["policy"] == fp.id
    for i in range(12):
        for route in ("direct", "abstain"):
            q = f"What is the capital of country {i}?" if i % 2 else f"Who was the mayor of village {i} in 1890?"
            r = agent.run(q, budget=300, route=route)
            agent.feedback(r.trajectory_id, correct=(route == "direct") == bool(i % 2))
    report = learn_traffic(agent.settings, fp, folds=2, rounds=50)
    assert report.step == "trained" and report.version == "r001"
    assert registry.observing(agentrt_home, fp.id).version == "r001"
    # the candidate decides in shadow for this policy; the router in use is unchanged
    router = make_router("auto", agent.settings, policy=backend)
    q = "What is the capital of country 31?"
    d = asyncio.run(router.decide(q, extract(q), 300))
    assert d.state == "other_policy" and d.shadow["router_version"] == "r001" and d.shadow["action"] in ("direct", "abstain")
    # too few observed runs with feedback: it keeps observing, and says how many it has
    again = learn_traffic(agent.settings, fp, folds=2, rounds=50)
    assert again.step == "observing" and again.observed == 0 and "keep serving" in again.warnings[0]
    # another policy's traffic is not this one's: for the embedded model, only the runs that made no model call
    # (the given abstains) could be anyone's; a routed or answering run names its policy
    from agentrt.train.traffic import traffic_examples

    mine = traffic_examples(agent.settings, fp)
    assert {e.action for e in mine} == {"direct", "abstain"} and len(mine) == 24
    theirs = traffic_examples(agent.settings, registry.policy_fingerprint(None, "hf:embedded"))
    assert {e.action for e in theirs} == {"abstain"} and len(theirs) == 12


def test_serve_exploration_and_learn_traffic_refuse_bad_input_in_one_line(capsys):
    assert main(["serve", "--explore", "0.9"]) == 2
    assert "--explore must be in [0, 0.5]" in capsys.readouterr().err
    assert main(["learn"]) == 2
    assert "pass --traffic" in capsys.readouterr().err
    assert main(["learn", "--traffic", "easy"]) == 2
    assert "leave the suites out" in capsys.readouterr().err
    assert main(["learn", "--traffic"]) == 2  # a fresh home: nothing served yet
    err = capsys.readouterr().err
    assert "no traffic in" in err and err.count("\n") == 1


def test_out_of_evidence_a_question_over_an_index_gets_the_rates_of_runs_over_an_index(tmp_path):
    """Without a cue, the fallback's prior is the rate of the training runs asked as this question is, over an
    index or without one: over documents `read` was right and `reason` never; without an index the reverse. The
    overall rates (0.5 each) would pick the cheaper `reason` for a document question."""
    index = {"has_index": 1.0, "coverage": 0.9, "index_bm25": 8.0, "index_vector": 0.7}
    writer = TrajectoryWriter(tmp_path / "runs")
    for i in range(30):
        for over_index in (True, False):
            q = f"Tell me about {'the filing' if over_index else 'the weather'} number {i}."
            for action, tokens in (("read", 600), ("reason", 300)):
                ok = (action == "read") == over_index
                step = {"kind": "route_decision", "route": action, "propensity": 0.5,
                        "probabilities": {"read": 0.5, "reason": 0.5},
                        "features": dict(index) if over_index else {}, "corpus": "filings-1a2b" if over_index else ""}
                writer.append(TrajectoryRecord(
                    run_id=new_run_id(), created_at=time.time(), question=q, route=action, steps=[step], answer="a",
                    budget={"total": 1000, "spent": tokens}, usage={"total_tokens": tokens}, timings={}, status="ok",
                    task=TaskInfo(ability="qa"), reward=float(ok),
                    rewards={"eval": RewardBreakdown(score=float(ok), correct=ok)}))
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))
    model = _for(train_router([tmp_path / "runs"], folds=2), fp.id)
    assert model.metrics["index_rates"] == {"over_index": {"read": [30.0, 30], "reason": [0.0, 30]},
                                            "no_index": {"read": [0.0, 30], "reason": [30.0, 30]}}
    q = ("Which of the two harbour authorities mentioned in last winter's quarterly paperwork renewed its lease "
         "agreement first?")
    router = LearnedRouter(model, Settings(corpus="filings-1a2b"), policy=fp)
    over = asyncio.run(router.decide(q, extract(q, index=lambda _: dict(index)), 1000))
    assert over.state == "insufficient_evidence" and over.fallback == "prior"
    assert over.action == "read" and over.p_success["read"] > 0.8 > 0.2 > over.p_success["reason"]
    assert "training rate over an index" in over.reason
    bare = asyncio.run(router.decide(q, extract(q), 1000))
    assert bare.fallback == "prior" and bare.action == "reason" and "training rate without an index" in bare.reason
    # a file without index rates (written before them) shrinks toward the overall rates, as it did
    del model.metrics["index_rates"]
    before = asyncio.run(router.decide(q, extract(q, index=lambda _: dict(index)), 1000))
    assert before.fallback == "prior" and abs(before.p_success["read"] - 0.5) < 0.1 and before.action == "reason"
