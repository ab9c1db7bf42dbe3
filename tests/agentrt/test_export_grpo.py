"""RL proof on the CPU: exported prompt rows -> TRL GRPO (1 step) on the embedded model -> parameters move.

~30-40 s on a quiet 2-core machine (TRL import + one step of 8 rollouts x 12 tokens).
"""

from __future__ import annotations

import time

import pytest

from agentrt.trajectory.export import export
from agentrt.train.grpo import read_prompt_rows, toy_capital_rows, train_grpo
from agentrt.trajectory import TaskInfo, TrajectoryRecord


@pytest.mark.slow
def test_grpo_step_on_exported_prompts_changes_the_policy(tmp_path):
    records = []
    for i, row in enumerate(toy_capital_rows(8)):
        records.append(TrajectoryRecord(
            run_id=f"r{i}", created_at=time.time(), question=row["prompt"][0]["content"], route="direct",
            steps=[], answer="", budget={"total": 1, "spent": 0}, usage={}, timings={}, status="ok",
            task=TaskInfo(data_source="toy-capitals", ability="qa", ground_truth=row["answer"], verifier="qa",
                          prompt_id=str(i)),
        ))
    export(records, "trl-prompts", tmp_path / "prompts.parquet")
    rows = read_prompt_rows(tmp_path / "prompts.parquet")
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is the capital of France?"}]
    assert rows[0]["answer"] == "Paris" and rows[0]["verifier"] == "qa"

    report = train_grpo(rows, tmp_path / "out", steps=1, batch_size=8, num_generations=4, max_completion_length=12)
    print(report.to_dict())
    assert report.steps == 1 and len(report.rewards) == 1 and 0.0 <= report.rewards[0] <= 1.0
    assert report.changed_tensors == report.total_tensors > 100 and report.max_abs_delta > 0
