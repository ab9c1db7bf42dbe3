"""Trajectory store, rewards and exports: how fast, on this machine. Prints a table.

    .venv/bin/python -m evals.bench.trajectory_bench [--records 2000]

Rows: appends per second (1 process; 4 processes; fsync each), full read, index lookup vs scan,
reward checks per second per verifier, export rows per second (verl-tokens / trl-sft parquet).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evals.bench.common import parser


def _call(name: str, messages: list, prompt_ids: list[int], completion_ids: list[int], text: str,
          logprobs: list[float]) -> dict:
    return {
        "kind": "model_call", "name": name, "backend": "test", "model": "m", "messages": messages,
        "prompt_token_ids": prompt_ids, "completion_token_ids": [completion_ids],
        "completion_logprobs": [logprobs], "completions": [text], "finish_reasons": ["stop"],
        "loss_mask": [[1] * len(completion_ids)], "latency_s": 0.1,
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)},
    }


def _record(run_id: str):
    """A tool-using GSM8K-style run (search call, calculator, answer call) with 300-token prompts: the
    multi-turn record of tests/agentrt/test_export.py, built here so the bench does not import the tests."""
    from agentrt.trajectory import TaskInfo, TrajectoryRecord, tool_call_step

    q = "What is 3 + 4?"
    m1 = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": q}]
    m2 = m1 + [{"role": "assistant", "content": "calc(3+4)"}, {"role": "tool", "content": "7"}]
    p1 = list(range(300))  # a realistic prompt size
    steps = [
        {"kind": "route_decision", "route": "plan", "propensity": 0.7, "probabilities": {"plan": 0.7, "direct": 0.3},
         "features": {"chars": 14}},
        _call("search", m1, p1, [10, 11, 12], "calc(3+4)", [-0.1, -0.2, -0.3]),
        tool_call_step("calculator", {"expression": "3+4"}, "7", latency_s=0.01),
        _call("answer", m2, p1 + [10, 11, 12, 20, 21], [30, 31], "7", [-0.4, -0.5]),
    ]
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object",
              "properties": {"expression": {"type": "string"}}}}}]
    task = TaskInfo(data_source="gsm8k", ability="math", ground_truth="#### 7", verifier="numeric", prompt_id="toy-1")
    return TrajectoryRecord(
        run_id=run_id, created_at=time.time(), question=q, route="plan", steps=steps, answer="7",
        budget={"total": 500, "spent": 100}, usage={"prompt_tokens": 60, "completion_tokens": 40, "total_tokens": 100},
        timings={"wall_s": 0.5}, status="ok", task=task, reward=None, tools=tools,
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=2000)
    args = ap.parse_args()
    from agentrt.trajectory.export import export
    from agentrt.trajectory.rewards import score
    from agentrt.trajectory import TrajectoryWriter, find_record, read_trajectories

    rows: list[tuple[str, str, str]] = []
    n = args.records
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        w = TrajectoryWriter(d / "one")
        recs = [_record(f"r{i}") for i in range(n)]
        size = len(recs[0].model_dump_json())
        t = time.perf_counter()
        for r in recs:
            w.append(r)
        dt = time.perf_counter() - t
        rows.append(("append, 1 process (fsync each)", f"{n / dt:,.0f} records/s", f"{size:,} B/record"))

        per = n // 4
        t = time.perf_counter()
        pids = []
        for p in range(4):
            pid = os.fork()
            if pid == 0:
                wp = TrajectoryWriter(d / "four", max_bytes=2_000_000)
                for r in recs[p * per:(p + 1) * per]:
                    wp.append(r)
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        dt = time.perf_counter() - t
        rows.append(("append, 4 processes + rotation at 2 MB", f"{4 * per / dt:,.0f} records/s", ""))

        t = time.perf_counter()
        report = read_trajectories(d / "one")
        dt = time.perf_counter() - t
        rows.append(("read + validate all", f"{len(report.records) / dt:,.0f} records/s", ""))

        t = time.perf_counter()
        for i in range(0, n, max(1, n // 50)):
            find_record(d / "one", f"r{i}")
        dt = (time.perf_counter() - t) / len(range(0, n, max(1, n // 50)))
        rows.append(("find_record via index", f"{dt * 1000:.2f} ms", ""))
        t = time.perf_counter()
        find_record(d / "one" / "trajectories.jsonl", f"r{n - 1}")
        rows.append(("find_record by scan (last record)", f"{(time.perf_counter() - t) * 1000:.0f} ms", ""))

        for fmt in ("verl-tokens", "trl-sft"):
            t = time.perf_counter()
            rep = export(report.records, fmt, d / f"{fmt}.parquet")
            dt = time.perf_counter() - t
            rows.append((f"export {fmt} parquet", f"{rep.rows / dt:,.0f} rows/s", ""))

    ifeval = Path(__file__).resolve().parents[2] / "tests" / "data" / "ifeval-input_data-subset.jsonl"
    cases = {
        "numeric": [("#### 18", "#### 18")] * 200,
        "qa": [("The Eiffel Tower", ["Eiffel Tower"])] * 200,
        "math": [("\\boxed{\\frac{1}{2}}", "0.5")] * 50,
    }
    if ifeval.is_file():  # the project's own copy (tests/data, Apache-2.0)
        row = json.loads(ifeval.read_text().splitlines()[0])
        gt = {k: row[k] for k in ("instruction_id_list", "kwargs", "prompt")}
        cases["ifeval"] = [("*a* *b* *c* no commas here", gt)] * 50
    cases["unit_tests"] = [("def f(x):\n    return x + 1\n", {"test": "def check(c):\n    assert c(1) == 2\n", "entry_point": "f"})] * 10
    for name, items in cases.items():
        score(name, *items[0])  # warm up (imports)
        t = time.perf_counter()
        for resp, gold in items:
            score(name, resp, gold)
        dt = time.perf_counter() - t
        rows.append((f"reward {name}", f"{len(items) / dt:,.1f} checks/s", ""))

    table = Table(title=f"trajectory store / rewards / exports ({n} records)")
    for col in ("what", "speed", "note"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    Console().print(table)


if __name__ == "__main__":
    main()
