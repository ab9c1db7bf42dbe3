"""Reports from a whole eval (scripted backend for the control flow; the real model in test_real_model.py)."""

from __future__ import annotations

import json

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.trajectory import iter_records
from evals.runner import EvalConfig, evaluate


def _reply(messages, params):
    q = messages[-1].content if messages[-1].role == "user" else messages[-2].content
    return "I don't know" if "thinking" in q else "#### 4"


def test_report_files_and_numbers(tmp_path):
    suite = tmp_path / "s.jsonl"
    suite.write_text("\n".join(json.dumps(x) for x in [
        {"id": "a", "question": "What is 2+2?", "answer": "4", "type": "math", "verifier": "numeric"},
        {"id": "b", "question": "What is 2+3?", "answer": "5", "type": "math", "verifier": "numeric"},
        {"id": "u", "question": "What number am I thinking of?", "type": "unanswerable"},
    ]) + "\n")
    agent = Agent(policy=ScriptedBackend([_reply]))
    out = tmp_path / "out"
    report = evaluate(EvalConfig(suites=[str(suite)], routers=["fixed:direct", "fixed:reason", "rules"], budget=300,
                                 samples=3, workers=2, out=str(out)), agent=agent)
    for name in ("report.md", "report.json", "results.jsonl", "config.json"):
        assert (out / name).stat().st_size > 0
    for name in ("pareto.png", "reliability.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    on_disk = json.loads((out / "report.json").read_text())
    direct = on_disk["policies"]["fixed:direct"]["s"]
    assert direct["items"] == 3 and direct["runs"] == 9
    assert direct["accuracy"] == 2 / 3 and direct["pass@3"] == 2 / 3 and direct["pass^3"] == 2 / 3
    assert direct["abstention"] == {"abstained": 3, "unanswerable": 3, "precision": 1.0, "recall": 1.0}
    assert set(on_disk["policies"]) == {"fixed:direct", "fixed:reason", "rules", "oracle"}
    assert report["policies"]["oracle"]["s"]["accuracy"] == 2 / 3
    assert "| oracle |" in (out / "report.md").read_text()
    # Every run left a trajectory carrying its task and reward; results point at it.
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    trajectories = {r.run_id: r for r in iter_records(agent.writer.path)}
    assert len(results) == 27 and {r["trajectory_id"] for r in results} <= set(trajectories)
    for r in results:
        t = trajectories[r["trajectory_id"]]
        assert t.reward == r["score"] and t.task.prompt_id == r["item_id"]
        assert t.rewards["eval"].correct == r["correct"]  # the verdict, next to the (partial-credit) score
    assert sorted({r["seed"] for r in results if r["item_id"] == "a"}) == sorted({r["seed"] for r in results if r["item_id"] == "a"})
    assert len({r["seed"] for r in results if r["item_id"] == "a"}) == 3  # one seed per sample, shared by routers
