"""The Ray executor on a real local Ray cluster with the real embedded model (SmolLM2-135M).

The cluster (2 CPUs, no dashboard, 127.0.0.1, its own temp dir) is started by this module and shut
down by it: ``ray.shutdown()`` stops exactly the processes this ``ray.init`` started, and the test
checks that none of them is left. Two actors at most (each loads the model, ~1.2 GB).

* 20 short questions through ``evaluate`` on Ray give the same answers and scores as the local
  executor; the trajectories come back complete, one per task, written by the driver.
* One actor is SIGKILLed (by its PID) mid-run: its tasks run again on the other one, the final
  counts are exact, nothing is lost or written twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agentrt.core.config import Settings
from agentrt.trajectory import TrajectoryWriter, read_trajectories

QUESTIONS = [
    ("What is the capital of France?", "Paris"), ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Germany?", "Berlin"), ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of Japan?", "Tokyo"), ("What is the capital of England?", "London"),
    ("What is the capital of Russia?", "Moscow"), ("What is the capital of Egypt?", "Cairo"),
    ("What is the capital of Greece?", "Athens"), ("What is the capital of Canada?", "Ottawa"),
    ("What color is the sky on a clear day?", "blue"), ("What color is grass?", "green"),
    ("How many days are in a week?", "7"), ("How many legs does a spider have?", "8"),
    ("What is the largest planet in our solar system?", "Jupiter"), ("What do bees make?", "honey"),
    ("What is frozen water called?", "ice"), ("Which animal says meow?", "cat"),
    ("What is the opposite of hot?", "cold"), ("Who wrote Romeo and Juliet?", "Shakespeare"),
]
BUDGET = 120


def _settings(home: Path) -> Settings:
    # Short answers keep 20 items cheap; everything else as a user would have it.
    return Settings(home=home, policy="hf:embedded", answer_max_tokens=12)


def _config(out: Path, suite: Path, workers: int = 2):
    from evals.runner import EvalConfig

    return EvalConfig(suites=[str(suite)], routers=["fixed:direct"], budget=BUDGET, workers=workers,
                      policy="hf:embedded", out=str(out))


def _ray_processes(temp_dir: str) -> list[int]:
    """PIDs of processes whose command line names this cluster's temp dir (raylet, gcs, workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "facts.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answer": a, "type": "qa"}) + "\n"
                            for i, (q, a) in enumerate(QUESTIONS)))
    return path


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=temp_dir,
             object_store_memory=80 * 1024 * 1024, log_to_driver=False, logging_level="WARNING")
    try:
        yield temp_dir
    finally:
        ray.shutdown()
        left = _ray_processes(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"Ray processes still running after shutdown: {left}"


@pytest.fixture(scope="module")
def executor(ray_cluster):
    from agentrt.batch.ray import RayExecutor

    ex = RayExecutor(actors=2, max_inflight=2, respawn=0)  # respawn 0: at most 2 models in memory
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def local_results(embedded, suite_file, tmp_path_factory) -> dict[str, dict]:
    """The reference: the same eval on the local executor (asyncio workers on the shared model)."""
    from agentrt import Agent
    from evals.runner import RESULTS, evaluate, read_results

    root = tmp_path_factory.mktemp("local")
    agent = Agent(_settings(root / "home"), policy=embedded)
    evaluate(_config(root / "out", suite_file), agent=agent)
    records = read_results(root / "out" / RESULTS)
    assert len(records) == len(QUESTIONS)
    return {r["key"]: r for r in records}


def _run_on_ray(executor, suite_file: Path, root: Path, on_result=None):
    import asyncio

    from agentrt import Agent
    from evals.routers import make_router
    from evals.runner import plan_tasks, run_tasks
    from evals.suites import load_suite

    agent = Agent(_settings(root / "home"))  # the driver never loads the model: the actors do
    agent.writer = TrajectoryWriter(root / "trajectories")
    config = _config(root / "out", suite_file)
    tasks = plan_tasks([load_suite(str(suite_file))], [make_router("fixed:direct")], 1, None)
    records = asyncio.run(run_tasks(agent, tasks, config, executor=executor, on_result=on_result))
    report = read_trajectories(root / "trajectories")
    assert not report.problems
    return records, report.records


def _check_complete(records, trajectories, local_results):
    keys = [r["key"] for r in records]
    assert len(keys) == len(QUESTIONS) and set(keys) == set(local_results)  # every task exactly once
    for r in records:
        ref = local_results[r["key"]]
        assert (r["answer"], r["score"], r["correct"], r["status"]) == (ref["answer"], ref["score"], ref["correct"], ref["status"]), r["key"]
    assert len(trajectories) == len(QUESTIONS)
    by_key = {t.metadata["task_key"]: t for t in trajectories}
    assert set(by_key) == set(keys)  # one trajectory per task, none twice
    assert len({t.run_id for t in trajectories}) == len(QUESTIONS)
    for r in records:
        t = by_key[r["key"]]
        assert t.run_id == r["trajectory_id"] and t.answer == r["answer"] and t.reward == r["score"]
        assert t.task is not None and t.task.prompt_id == r["item_id"] and t.task.ground_truth
        calls = t.model_calls()
        assert calls and calls[0].completion_token_ids[0]  # token ids came back for the trainer


@pytest.mark.slow
def test_ray_eval_matches_local(local_results, executor, suite_file, tmp_path):
    from evals.runner import RESULTS, evaluate, read_results
    from agentrt import Agent

    agent = Agent(_settings(tmp_path / "home"))
    agent.writer = TrajectoryWriter(tmp_path / "trajectories")
    report = evaluate(_config(tmp_path / "out", suite_file), agent=agent, executor=executor)
    records = read_results(tmp_path / "out" / RESULTS)
    trajectories = read_trajectories(tmp_path / "trajectories").records
    _check_complete(records, trajectories, local_results)
    assert {r["worker"] for r in records} == {0, 1}  # both actors did work
    assert report["policies"]["fixed:direct"]["all"]["items"] == len(QUESTIONS)
    assert sum(r["correct"] for r in local_results.values()) == sum(r["correct"] for r in records)
    assert executor.stats["actor_deaths"] == 0 and executor.stats["retried"] == 0


@pytest.mark.slow
def test_killed_actor_tasks_redone_elsewhere(local_results, executor, suite_file, tmp_path):
    victim = executor.slots[0]
    killed: list[int] = []

    def kill_once(record: dict) -> None:
        if len(killed) == 0 and record["worker"] == 0:  # actor 0 is busy: it holds more tasks in flight
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    before = dict(executor.stats)
    records, trajectories = _run_on_ray(executor, suite_file, tmp_path, on_result=kill_once)
    assert killed and not victim.alive
    assert executor.stats["actor_deaths"] - before["actor_deaths"] == 1
    retried = executor.stats["retried"] - before["retried"]
    assert retried >= 1 and executor.stats["gave_up"] == 0
    redone = [r for r in records if r["attempt"] > 1]
    assert len(redone) == retried and all(r["worker"] == 1 for r in redone)  # redone on the other actor
    _check_complete(records, trajectories, local_results)
    lines = (tmp_path / "out" / "results.jsonl").read_bytes().splitlines()
    assert len(lines) == len(QUESTIONS)  # on disk too: nothing counted twice

    # Resuming a finished run does nothing (and needs no actor).
    again, _ = _run_on_ray(executor, suite_file, tmp_path)
    assert len(again) == len(QUESTIONS)
    assert (tmp_path / "out" / "results.jsonl").read_bytes().splitlines() == lines


def test_executor_choice_errors(tmp_path, agentrt_home):
    """Bad executor options fail in one line with exit code 2, before any model or cluster starts."""
    suite = tmp_path / "s.jsonl"
    suite.write_text(json.dumps({"id": 1, "question": "2+5?", "answer": "7", "type": "math"}) + "\n")
    base = [sys.executable, "-m", "agentrt.app.cli"]
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home)}
    run = lambda *a: subprocess.run([*base, *a], env=env, capture_output=True, text=True, timeout=120)  # noqa: E731
    p = run("eval", "--suite", str(suite), "--out", str(tmp_path / "o"), "--actors", "2")
    assert p.returncode == 2 and "only apply to --executor ray" in p.stderr and p.stderr.count("\n") == 1
    config = tmp_path / "cluster.toml"
    config.write_text('[executor]\nkind = "ray"\nactorz = 2\n')
    p = run("--config", str(config), "rollout", "--suite", str(suite), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "unknown [executor] option(s) actorz" in p.stderr and p.stderr.count("\n") == 1
    config.write_text('[executor]\nkind = "ray"\nactors = 0\n')
    p = run("--config", str(config), "eval", "--suite", str(suite), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "actors must be an integer >= 1" in p.stderr


def test_rollout_local_resumes(tmp_path, agentrt_home):
    """``agentrt rollout`` writes S scored trajectories per item (prompt_id groups them) and resumes."""
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps({"id": i, "question": f"What is {i} + 7 - {i}?", "answer": "7",
                                         "type": "math", "verifier": "numeric"}) + "\n" for i in range(5)))
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home)}
    cmd = [sys.executable, "-m", "agentrt.app.cli", "rollout", "--suite", str(suite), "--samples", "3",
           "--router", "fixed:direct", "--policy", "scripted:#### 7", "--budget", "100", "--out", str(tmp_path / "r")]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "rollouts: 15 (5 items x 3 samples), mean reward 1.000, errors 0, executor local" in p.stdout
    records = read_trajectories(tmp_path / "r" / "trajectories").records
    assert len(records) == 15 and all(r.reward == 1.0 for r in records)
    assert sorted(r.task.prompt_id for r in records) == sorted([str(i) for i in range(5)] * 3)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and len(read_trajectories(tmp_path / "r" / "trajectories").records) == 15


def test_trainer_handoff_rewards(tmp_path, agentrt_home):
    """rollout -> ``agentrt export --format verl`` -> examples/verl_reward.py scores like the rollout did."""
    import importlib.util

    suite = tmp_path / "s.jsonl"
    rows = [{"id": "m", "question": "What is 3 + 4?", "answer": "7", "type": "math", "verifier": "numeric"},
            {"id": "q", "question": "Say seven.", "answers": ["7", "seven"], "type": "qa"},
            {"id": "w", "question": "What is 2 + 2?", "answer": "4", "type": "math", "verifier": "numeric"}]
    suite.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home)}
    cli = [sys.executable, "-m", "agentrt.app.cli"]
    p = subprocess.run([*cli, "rollout", "--suite", str(suite), "--samples", "2", "--router", "fixed:direct",
                        "--policy", "scripted:7", "--budget", "100", "--out", str(tmp_path / "r")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    traj = tmp_path / "r" / "trajectories"
    recorded = {r.task.prompt_id: r.reward for r in read_trajectories(traj).records}
    assert recorded == {"m": 1.0, "q": 1.0, "w": 0.0}
    p = subprocess.run([*cli, "export", "--trajectories", str(traj), "--format", "verl", "--out", str(tmp_path / "v.jsonl")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    spec = importlib.util.spec_from_file_location("verl_reward", Path(__file__).resolve().parents[2] / "examples" / "verl_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exported = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(exported) == 3  # one row per prompt
    for row in exported:
        got = module.compute_score(row["data_source"], "7", row["reward_model"]["ground_truth"], row["extra_info"])
        assert got == recorded[_pid(row, rows)]
    # The OpenRLHF reward file scores the trl-prompts labels the same way.
    spec = importlib.util.spec_from_file_location("orl", Path(__file__).resolve().parents[2] / "examples" / "openrlhf_reward.py")
    orl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(orl)
    qa = next(r for r in exported if r["extra_info"]["verifier"] == "qa")["reward_model"]["ground_truth"]
    out = orl.reward_func(["Q: say it. A: seven", "Q: say it. A: nine"], ["Q: say it. A:"] * 2, [qa, qa])
    assert out["rewards"].tolist() == [1.0, 0.0]


def _pid(row: dict, rows: list[dict]) -> str:
    return next(r["id"] for r in rows if r["question"] == row["extra_info"]["question"])


def test_cluster_example_config():
    """examples/cluster.toml parses: settings, backend spec and executor options as docs/scale.md says."""
    from agentrt.backends import parse_spec
    from agentrt.core.config import load_settings
    from agentrt.batch.executors import executor_table, make_executor

    path = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"
    settings = load_settings(path)
    assert parse_spec(settings.policy)[0] == "openai" and settings.policy.count("http://") == 4
    assert settings.memory_store == "http://chroma-1:8000" and str(settings.home) == "/shared/agentrt"
    table = executor_table(path)
    executor = make_executor(table.pop("kind"), **table)
    assert (executor.name, executor.address, executor.actors, executor.max_inflight) == ("ray", "auto", 16, 8)
    assert executor.env["HF_HUB_OFFLINE"] == "1" and not executor.slots  # nothing started


def test_worker_returns_failed_runs_trajectory(tmp_path):
    """An actor's body (plain class, no cluster): a run that fails mid-way comes back as an error record
    plus its ``failed`` trajectory, tagged with the task key; an ok run with its scored trajectory."""
    import asyncio

    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.batch import BatchTask
    from agentrt.batch.ray import Worker
    from evals.routers import make_router
    from evals.runner import EvalJob, Task
    from evals.suites import Item

    def reply(messages, params):
        if "boom" in messages[-1].content:
            raise RuntimeError("backend fell over")
        return "#### 7"

    config = _config(tmp_path / "out", tmp_path / "unused.jsonl")
    job = EvalJob(config, Settings(home=tmp_path / "home", policy="scripted:x").model_dump(mode="json"))
    worker = Worker(job, str(tmp_path / "t.jsonl"))
    worker.runtime._policy = ScriptedBackend([reply])
    router = make_router("fixed:direct")
    good = Task(router, "s", Item(id="1", question="What is 3 + 4?", type="math", answers=["7"], verifier="numeric"), 0)
    bad = Task(router, "s", Item(id="2", question="boom: what is 1 + 6?", type="math", answers=["7"], verifier="numeric"), 0)

    async def both():
        return await asyncio.gather(worker.run(job, BatchTask(good.key, good)), worker.run(job, BatchTask(bad.key, bad)))

    ok, failed = asyncio.run(both())
    assert ok["result"]["score"] == 1.0 and len(ok["trajectories"]) == 1
    t = ok["trajectories"][0]
    assert t["metadata"]["task_key"] == good.key and t["reward"] == 1.0 and t["run_id"] == ok["result"]["trajectory_id"]
    assert failed["result"]["status"] == "error" and "backend fell over" in failed["result"]["error"]
    assert [t["status"] for t in failed["trajectories"]] == ["failed"]
    assert failed["trajectories"][0]["metadata"]["task_key"] == bad.key
    assert not worker.buffer.by_key  # nothing left behind on the actor


@pytest.mark.slow
def test_respawn_after_death_scripted(ray_cluster, tmp_path):
    """Control flow of a death with respawn on (scripted backend, light actors that reserve no CPU):
    a replacement actor is started, every task is written exactly once, nothing is given up."""
    import asyncio

    from agentrt import Agent
    from agentrt.batch.ray import RayExecutor
    from evals.routers import make_router
    from evals.runner import EvalConfig, plan_tasks, run_tasks
    from evals.suites import load_suite

    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps({"id": i, "question": f"What is {i} + 7 - {i}?", "answer": "7", "type": "math",
                                         "verifier": "numeric"}) + "\n" for i in range(200)))
    agent = Agent(Settings(home=tmp_path / "home", policy="scripted:#### 7"))
    agent.writer = TrajectoryWriter(tmp_path / "trajectories")
    config = EvalConfig(suites=[str(suite)], routers=["fixed:direct"], budget=100, policy="scripted:#### 7",
                        out=str(tmp_path / "out"))
    tasks = plan_tasks([load_suite(str(suite))], [make_router("fixed:direct")], 1, None)
    ex = RayExecutor(actors=2, max_inflight=2, respawn=1, actor_cpus=0)
    killed: list[int] = []

    def kill_once(record: dict) -> None:
        if not killed and record["worker"] == 0:
            os.kill(ex.slots[0].pid, signal.SIGKILL)
            killed.append(ex.slots[0].pid)

    try:
        records = asyncio.run(run_tasks(agent, tasks, config, executor=ex, on_result=kill_once))
        stats, slots = dict(ex.stats), len(ex.slots)
    finally:
        ex.close()
    assert killed and stats["actor_deaths"] == 1 and stats["respawned"] == 1 and slots == 3
    assert stats["retried"] >= 1 and stats["gave_up"] == 0
    assert len(records) == 200 and len({r["key"] for r in records}) == 200
    assert all(r["correct"] for r in records)
    trajectories = read_trajectories(tmp_path / "trajectories").records
    assert sorted(t.metadata["task_key"] for t in trajectories) == sorted(r["key"] for r in records)


def test_executors_import_light():
    """Choosing an executor and building the CLI import no Ray (or torch): only --executor ray does."""
    code = ("import sys, agentrt.batch.executors, agentrt.app.cli; agentrt.app.cli.build_parser(); "
            "print(sorted(m for m in ('ray', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
