"""Benchmark: the Ray executor vs the local executor — items per minute and the per-item overhead Ray adds.

    .venv/bin/python -m evals.bench.ray_bench [--items 300] [--model-items 20] [--cpus 2]

Starts its own local Ray cluster (temp dir, no dashboard, 127.0.0.1) and shuts it down at the end.

* Scripted backend (``scripted:#### 7``, no model): the runtime's own cost per item. With one task
  in flight (local workers=1 vs 1 actor, max_inflight=1) the difference per item is the overhead Ray
  adds: pickling the task, the actor round trip, the result and trajectory coming back.
* Embedded model (SmolLM2-135M, direct route, 12 answer tokens), ``--model-items`` items: the local
  executor (2 workers sharing one model) vs 1 and 2 actors (2 in flight each). On a 2-core machine
  expect little gain: the actors share the same two cores.

Actor start-up (loading the runtime) is timed apart from the run. Prints one table.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


from rich.console import Console
from rich.table import Table

from evals.bench.common import parser, reuse_converted_model

FACTS = ["What is the capital of France?", "What is the capital of Italy?", "What color is grass?",
         "How many days are in a week?", "What do bees make?", "Which animal says meow?",
         "What is frozen water called?", "What is the opposite of hot?", "Who wrote Romeo and Juliet?",
         "What is the largest planet in our solar system?"]
ANSWERS = ["Paris", "Rome", "green", "7", "honey", "cat", "ice", "cold", "Shakespeare", "Jupiter"]


def _suite(path: Path, n: int, model: bool) -> Path:
    with path.open("w") as f:
        for i in range(n):
            if model:
                row = {"id": i, "question": FACTS[i % len(FACTS)] + " " * (i // len(FACTS)), "answer": ANSWERS[i % len(FACTS)], "type": "qa"}
            else:
                row = {"id": i, "question": f"What is {i} + 7 - {i}?", "answer": "7", "type": "math", "verifier": "numeric"}
            f.write(json.dumps(row) + "\n")
    return path


def _run(mode: str, actors: int, inflight: int, suite: Path, policy: str, root: Path) -> dict:
    from agentrt import Agent
    from agentrt.core.config import Settings
    from agentrt.batch.executors import LocalExecutor
    from agentrt.batch.ray import RayExecutor
    from agentrt.trajectory import TrajectoryWriter
    from evals.routers import make_router
    from evals.runner import EvalConfig, EvalJob, plan_tasks, run_tasks
    from evals.suites import load_suite

    out = Path(tempfile.mkdtemp(dir=root))
    settings = Settings(home=out / "home", policy=policy, answer_max_tokens=12)
    agent = Agent(settings)
    agent.writer = TrajectoryWriter(out / "trajectories")
    config = EvalConfig(suites=[str(suite)], routers=["fixed:direct"], budget=120, workers=inflight, policy=policy,
                        out=str(out / "out"))
    tasks = plan_tasks([load_suite(str(suite))], [make_router("fixed:direct")], 1, None)
    started = time.perf_counter()
    if mode == "local":
        executor = LocalExecutor()
        agent.policy  # load now: start-up is timed apart
    else:
        executor = RayExecutor(actors=actors, max_inflight=inflight, respawn=0)
        executor.start(EvalJob(config, settings.model_dump(mode="json")), str(agent.writer.path))
    startup = time.perf_counter() - started
    try:
        started = time.perf_counter()
        records = asyncio.run(run_tasks(agent, tasks, config, executor=executor))
        wall = time.perf_counter() - started
    finally:
        executor.close()
    if len(records) != len(tasks) or len({r["key"] for r in records}) != len(tasks):
        raise SystemExit(f"{mode}: {len(records)} records for {len(tasks)} tasks")
    return {"startup_s": startup, "wall_s": wall, "n": len(tasks),
            "correct": sum(r["correct"] for r in records), "errors": sum(r["status"] == "error" for r in records)}


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--items", type=int, default=300, help="scripted-backend items per configuration")
    ap.add_argument("--model-items", type=int, default=20, help="embedded-model items per configuration (0: skip)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    args = ap.parse_args()
    reuse_converted_model()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    root = Path(tempfile.mkdtemp(prefix="raybench"))
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    t0 = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=temp_dir,
             object_store_memory=80 * 1024 * 1024, log_to_driver=False, logging_level="WARNING")
    cluster_s = time.perf_counter() - t0
    rows = []
    try:
        scripted = _suite(root / "scripted.jsonl", args.items, model=False)
        for label, mode, actors, inflight in (("local, 1 worker", "local", 0, 1), ("ray, 1 actor x 1", "ray", 1, 1),
                                              ("local, 2 workers", "local", 0, 2), ("ray, 1 actor x 2", "ray", 1, 2),
                                              ("ray, 2 actors x 2", "ray", 2, 2)):
            rows.append(("scripted", label, _run(mode, actors, inflight, scripted, "scripted:#### 7", root)))
        if args.model_items:
            model = _suite(root / "model.jsonl", args.model_items, model=True)
            for label, mode, actors, inflight in (("local, 2 workers", "local", 0, 2), ("ray, 1 actor x 2", "ray", 1, 2),
                                                  ("ray, 2 actors x 2", "ray", 2, 2)):
                rows.append(("embedded", label, _run(mode, actors, inflight, model, "hf:embedded", root)))
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    table = Table(title=f"Ray executor vs local (local Ray cluster: {args.cpus} CPUs, started in {cluster_s:.1f} s)")
    for col in ("backend", "executor", "items", "start-up s", "wall s", "items/min", "ms/item", "correct"):
        table.add_column(col, justify="right" if col not in ("backend", "executor") else "left")
    for backend, label, r in rows:
        table.add_row(backend, label, str(r["n"]), f"{r['startup_s']:.1f}", f"{r['wall_s']:.2f}",
                      f"{60 * r['n'] / r['wall_s']:.0f}", f"{1000 * r['wall_s'] / r['n']:.1f}", f"{r['correct']}/{r['n']}")
    console = Console(width=130)
    console.print(table)
    per = {label: r["wall_s"] / r["n"] for backend, label, r in rows if backend == "scripted"}
    console.print(f"Ray overhead per item, one in flight: {1000 * (per['ray, 1 actor x 1'] - per['local, 1 worker']):.1f} ms "
                  f"(scripted backend; the round trip, pickling and the driver's writes)")
    console.print(f"  two in flight on one actor: {1000 * (per['ray, 1 actor x 2'] - per['local, 2 workers']):.1f} ms per item")
    return 0


if __name__ == "__main__":
    sys.exit(main())
