"""The runtime's routers (agentrt.router) compared in one eval, with their success probabilities."""

from __future__ import annotations

import json
import random
import time

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.errors import InputError
from agentrt.train.router import train_router
from agentrt.trajectory import TrajectoryRecord, TrajectoryWriter, new_run_id
from evals.routers import make_router
from evals.runner import EvalConfig, evaluate


def test_rules_cascade_and_learned_routers_in_one_eval(tmp_path):
    writer = TrajectoryWriter(tmp_path)
    rng = random.Random(0)
    for i in range(30):  # logged fixed-action runs: direct is right and cheap on these
        for route, tokens, p in (("direct", 50, 0.9), ("reason", 400, 0.5)):
            writer.append(TrajectoryRecord(run_id=new_run_id(), created_at=time.time(), question=f"What is {i}+{i}?",
                                           route=route, steps=[], answer="", budget={"total": 1000, "spent": tokens},
                                           usage={"total_tokens": tokens}, timings={}, status="ok",
                                           reward=float(rng.random() < p)))
    train_router([tmp_path / "trajectories.jsonl"]).save(tmp_path / "router.json")
    suite = tmp_path / "s.jsonl"
    suite.write_text("\n".join(json.dumps({"id": str(i), "question": f"What is {i}+{i}?", "answer": str(2 * i),
                                           "type": "math", "verifier": "numeric"}) for i in range(4)) + "\n")
    agent = Agent(policy=ScriptedBackend(["#### 0"]))
    out = tmp_path / "out"
    routers = ["fixed:direct", "rules", "cascade", f"learned:{tmp_path / 'router.json'}"]
    evaluate(EvalConfig(suites=[str(suite)], routers=routers, budget=1000, workers=2, out=str(out)), agent=agent)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_router = {r["router"]: r for r in rows}
    assert set(by_router) == set(routers)
    for spec in routers[1:]:
        assert 0 < by_router[spec]["p_success"] < 1, spec  # the decision's p_success reached the metrics
    assert by_router[routers[-1]]["route"] == "direct"
    # a fixed run records its decision like any router's: propensity 1 and the question's features (index signals
    # included), so a grid of fixed runs trains and values routers that read them (evals/bench/adapt_bench.py)
    fixed = [r for r in map(json.loads, agent.writer.path.read_text().splitlines())
             if r["metadata"]["task_key"].startswith("fixed:direct|")]
    steps = [s for r in fixed for s in r["steps"] if s["kind"] == "route_decision"]
    assert len(fixed) == len(steps) == 4
    assert all(s["router"] == "fixed:direct" and s["propensity"] == 1.0 and "has_index" in s["features"]
               and s["features"]["words"] >= 3 for s in steps)
    report = json.loads((out / "report.json").read_text())
    assert set(report["policies"]) >= set(routers)


def test_learned_router_file_is_checked_before_any_model_loads(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        make_router(f"learned:{tmp_path / 'nope.json'}")
    with pytest.raises(InputError, match="unknown router"):
        make_router("oracle-of-delphi")
