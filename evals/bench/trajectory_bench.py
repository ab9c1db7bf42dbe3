"""Trajectory store, rewards and exports: how fast, on this machine. Prints a table.

    .venv/bin/python evals/bench/trajectory_bench.py [--records 2000]

Rows: appends per second (1 process; 4 processes; fsync each), full read, index lookup vs scan,
reward checks per second per verifier, export rows per second (verl-tokens / trl-sft parquet).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "agentrt"))


def _record(run_id: str):
    from test_export import multi_turn_record  # the same realistic multi-turn record the tests use

    rec = multi_turn_record(run_id)
    rec.steps[1]["prompt_token_ids"] = list(range(300))  # a realistic prompt size
    rec.steps[3]["prompt_token_ids"] = list(range(300)) + [10, 11, 12, 20, 21]
    return rec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
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
