"""The runner hands each run its task: records are complete when written, through the Agent's own writer."""

from __future__ import annotations

import json

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.trajectory import TrajectoryWriter, iter_records
from evals.runner import EvalConfig, evaluate


class _Watching(TrajectoryWriter):
    """The agent's writer: notes, at the moment each record is written, what it already carries."""

    def __init__(self, directory, agent_ref: list) -> None:
        super().__init__(directory)
        self.agent_ref = agent_ref
        self.seen: list[dict] = []

    def append(self, record) -> None:
        self.seen.append({"run_id": record.run_id, "status": record.status,
                          "writer_is_agents": self.agent_ref[0].writer is self,
                          "prompt_id": record.task.prompt_id if record.task else None, "reward": record.reward,
                          "eval": record.rewards.get("eval"), "task_key": record.metadata.get("task_key")})
        super().append(record)


def _reply(messages, params):
    if "boom" in messages[-1].content:
        raise RuntimeError("backend fell over")
    return "#### 7" if "7" in messages[-1].content else "I don't know"


def test_records_carry_task_and_reward_without_writer_swapping(tmp_path):
    suite = tmp_path / "s.jsonl"
    rows = [{"id": "a", "question": "What is 3 + 4? (7)", "answer": "7", "type": "math", "verifier": "numeric"},
            {"id": "b", "question": "What is 5 + 5?", "answer": "10", "type": "math", "verifier": "numeric"},
            {"id": "u", "question": "What am I thinking of?", "type": "unanswerable"},
            {"id": "x", "question": "boom: what is 1 + 6?", "answer": "7", "type": "math", "verifier": "numeric"}]
    suite.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ref: list = []
    agent = Agent(policy=ScriptedBackend([_reply]))
    ref.append(agent)
    writer = _Watching(tmp_path / "trajectories", ref)
    agent.writer = writer
    out = tmp_path / "out"
    evaluate(EvalConfig(suites=[str(suite)], routers=["fixed:direct", "rules"], budget=300, samples=2, workers=3,
                        temperature=0.7, out=str(out)), agent=agent)

    assert agent.writer is writer  # never swapped, not even for a moment (writer_is_agents below)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 16 and len(writer.seen) == 16
    seen = {s["run_id"]: s for s in writer.seen}
    on_disk = {r.run_id: r for r in iter_records(writer.path)}
    for r in results:
        if r["status"] == "error":  # the failed run's record is written too, tagged with its task key
            assert r["item_id"] == "x" and "backend fell over" in r["error"] and r["trajectory_id"] is None
            continue
        s = seen[r["trajectory_id"]]
        assert s["writer_is_agents"] and s["task_key"] == r["key"]
        assert s["prompt_id"] == r["item_id"] and s["reward"] == r["score"]  # complete at the moment it was written
        assert s["eval"].correct == r["correct"] and s["eval"].abstained == r["abstained"]
        t = on_disk[r["trajectory_id"]]
        assert t.task.prompt_id == r["item_id"] and t.task.data_source == "agentrt-eval"
        assert t.reward == r["score"] and t.rewards["eval"].verifier == t.task.verifier
    failed = [s for s in writer.seen if s["status"] == "failed"]
    assert len(failed) == 4 and {s["task_key"].split("|")[2] for s in failed} == {"x"}
    scores = {r["item_id"]: r["score"] for r in results if r["status"] != "error"}
    assert scores == {"a": 1.0, "b": 0.0, "u": 1.0}
    assert all(r["abstained"] for r in results if r["item_id"] == "u")
