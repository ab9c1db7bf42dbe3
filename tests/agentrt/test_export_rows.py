"""Exports and training data (issue 18, item 7): verl's data_source names for eval runs, trl-sft keeps only runs
worth imitating, verl-tokens says once that runs were split, and train-router reads a store's folder and says
when its data cannot support the fit."""

from __future__ import annotations

import json
import time

import pytest

from agentrt.app.cli import main
from agentrt.trajectory import RewardBreakdown, TaskInfo, TrajectoryRecord, TrajectoryWriter, new_run_id
from agentrt.trajectory.export import (
    VERL_DATA_SOURCES,
    ExportReport,
    eval_suite,
    export,
    rows_trl_sft,
    rows_verl,
    rows_verl_tokens,
    verl_data_source,
)
from agentrt.trajectory.rewards import verifier_for
from agentrt.train.router import MIN_QUESTIONS, MIN_RUNS_PER_ACTION

# verl.utils.reward_score.default_compute_score's names, and the scorer each selects
VERL_DEFAULT = {"openai/gsm8k": "gsm8k", "lighteval/MATH": "math", "DigitalLearningGmbH/MATH-lighteval": "math",
                "HuggingFaceH4/MATH-500": "math"}


def call(prompt_ids, completion_ids, text="7", messages=None):
    return {"kind": "model_call", "name": "answer", "backend": "t", "model": "m",
            "messages": messages or [{"role": "user", "content": "q"}], "prompt_token_ids": prompt_ids,
            "completion_token_ids": [completion_ids], "completion_logprobs": [[-0.1] * len(completion_ids)],
            "completions": [text], "finish_reasons": ["stop"], "loss_mask": [[1] * len(completion_ids)],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)}, "latency_s": 0.1}


def rec(run_id="r", *, answer="7", status="ok", reward=None, source="agentrt-eval", prompt_id=None, verifier="numeric",
        ability="math", task_key=None, steps=None, route="direct", question="What is 3 + 4?", success=None):
    task = TaskInfo(data_source=source, ability=ability, ground_truth="7", verifier=verifier, prompt_id=prompt_id)
    rewards = {"eval": RewardBreakdown(score=reward, correct=success)} if success is not None else {}
    return TrajectoryRecord(
        run_id=run_id, created_at=time.time(), question=question, route=route,
        steps=steps if steps is not None else [call([1, 2], [3])], answer=answer,
        budget={"total": 500, "spent": 10}, usage={"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        timings={}, status=status, task=task, reward=reward, rewards=rewards,
        metadata={"task_key": task_key} if task_key else {})


# -- verl data_source ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("record, expected", [
    (rec(task_key="rules|gsm8k|gsm8k-3|0", prompt_id="gsm8k-3"), "openai/gsm8k"),
    (rec(prompt_id="gsm8k-3"), "openai/gsm8k"),  # no task_key (older records): the prompt id's prefix
    (rec(prompt_id="math500-test/algebra/1.json", verifier="math"), "HuggingFaceH4/MATH-500"),
    (rec(prompt_id="ifeval-1000", verifier="ifeval", ability="instruction"), "google/IFEval"),
    (rec(prompt_id="simpleqa-2", verifier="qa", ability="qa"), "basicv8vc/SimpleQA"),
    (rec(prompt_id="HumanEval/0", verifier="unit_tests", ability="code"), "openai/openai_humaneval"),
    (rec(task_key="fixed:plan|hotpotqa|5a8b|0", prompt_id="5a8b", verifier="qa", ability="qa"), "hotpotqa/hotpot_qa"),
    (rec(task_key="rules|mine|q1|0", prompt_id="q1"), "openai/gsm8k"),  # custom suite, numeric: verl's gsm8k scorer
    (rec(task_key="rules|mine|q1|0", prompt_id="q1", verifier="math"), "DigitalLearningGmbH/MATH-lighteval"),
    (rec(task_key="rules|mine|q1|0", prompt_id="q1", verifier="qa", ability="qa"), "agentrt/mine"),
    (rec(prompt_id="q1", verifier="qa", ability="qa"), "agentrt-eval"),  # nothing says which suite
    (rec(source="toy-capitals", prompt_id="gsm8k-3"), "toy-capitals"),  # not an eval run: its own name stays
])
def test_eval_runs_get_verls_name_for_their_suite(record, expected):
    assert verl_data_source(record) == expected
    (row,) = rows_verl([record], ExportReport("verl", ""))
    assert row["data_source"] == expected
    assert row["extra_info"]["verifier"] == record.task.verifier and row["extra_info"]["suite"] == (eval_suite(record) or "")


def test_the_names_route_to_the_right_scorer():
    """Where verl has a default scorer the names are verl's own; all of them still map back to agentrt's
    verifier (examples/verl_reward.py and train-policy read it when a row names none)."""
    assert VERL_DATA_SOURCES["gsm8k"] in VERL_DEFAULT and VERL_DEFAULT[VERL_DATA_SOURCES["gsm8k"]] == "gsm8k"
    assert VERL_DEFAULT[VERL_DATA_SOURCES["math500"]] == "math"
    expected = {"gsm8k": "numeric", "math500": "math", "ifeval": "ifeval", "simpleqa": "qa", "hotpotqa": "qa"}
    for suite, verifier in expected.items():
        assert verifier_for(VERL_DATA_SOURCES[suite]) == verifier, suite


def test_verl_tokens_rows_use_the_same_names():
    rows = rows_verl_tokens([rec(prompt_id="gsm8k-1")], ExportReport("verl-tokens", ""))
    assert rows[0]["data_source"] == "openai/gsm8k"


# -- trl-sft -------------------------------------------------------------------------------------------------

def test_trl_sft_keeps_only_ok_runs_with_an_answer(tmp_path):
    records = [rec("ok", reward=1.0), rec("ok-low", reward=0.2), rec("cancelled", status="cancelled", answer=""),
               rec("failed", status="failed", answer=""), rec("truncated", status="truncated"),
               rec("empty", answer="  ")]
    report = export(records, "trl-sft", tmp_path / "sft.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert [r["run_id"] for r in rows] == ["ok", "ok-low"]
    # runs without a real answer go before any format sees them (issue 37); trl-sft then drops the truncated one
    assert report.skipped == {"failed run: status cancelled": 1, "failed run: status failed": 1,
                              "status truncated": 1, "failed run: no real answer (empty answer)": 1}
    assert "1 (failed run: no real answer (empty answer))" in report.summary()



def test_prompt_only_formats_keep_the_prompts_of_runs_that_found_no_answer(tmp_path):
    # a prompt row holds the question and its ground truth, not the answer: a failed run is still a prompt
    records = [rec("ok", reward=1.0), rec("empty", answer="", prompt_id="gsm8k-2")]
    report = export(records, "trl-prompts", tmp_path / "p.jsonl")
    assert report.rows == 2 and not report.skipped
    report = export(records, "openai", tmp_path / "o.jsonl")  # a format with the answer leaves it out
    assert report.rows == 1 and report.skipped == {"failed run: no real answer (empty answer)": 1}

def test_trl_sft_reward_threshold_and_statuses():
    records = [rec("ok", reward=1.0), rec("ok-low", reward=0.2), rec("no-reward", source="x", prompt_id=None,
                                                                       verifier=None, ability="qa"),
               rec("truncated", status="truncated", reward=1.0)]
    report = ExportReport("trl-sft", "")
    rows = rows_trl_sft(records, report, min_reward=0.5)
    assert [r["run_id"] for r in rows] == ["ok"]
    assert report.skipped == {"reward below 0.5": 1, "no reward": 1, "status truncated": 1}
    rows = rows_trl_sft(records, ExportReport("trl-sft", ""), sft_statuses=("ok", "truncated"), min_reward=1)
    assert [r["run_id"] for r in rows] == ["ok", "truncated"]


# -- verl-tokens: one warning ----------------------------------------------------------------------------------

def test_split_runs_are_one_warning_not_one_per_run(tmp_path):
    def broken(run_id):  # the second prompt does not extend the first prompt + completion
        return rec(run_id, route="reason", steps=[call([1, 2], [3, 4]), call([1, 2, 9, 9], [5])])

    records = [broken(f"r{i}") for i in range(5)] + [rec("fine")]
    report = export(records, "verl-tokens", tmp_path / "t.jsonl")
    assert report.split == 5 and len(report.breaks) == 5 and report.rows == 11
    assert len(report.problems) == 1
    assert report.problems[0].startswith("5 of 6 runs split into token segments") and "run r0:" in report.problems[0]


# -- train-router ------------------------------------------------------------------------------------------------

def _logged(writer: TrajectoryWriter, n: int, actions=("direct",)) -> None:
    for i in range(n):
        for action in actions:
            ok = (i + len(action)) % 3 != 0
            writer.append(rec(new_run_id(), route=action, question=f"What is {i} + {i}?", reward=float(ok),
                              success=ok, prompt_id=f"q{i}"))


def test_train_router_reads_a_store_folder_and_warns_on_one_action(tmp_path, capsys):
    store = tmp_path / "trajectories"
    _logged(TrajectoryWriter(store), 13)
    assert (store / "trajectories.index.jsonl").is_file()  # the folder holds the index too: it is not read
    assert main(["train-router", "--trajectories", str(store), "--out", str(tmp_path / "router.json")]) == 0
    out = capsys.readouterr()
    warnings = [line for line in out.err.splitlines() if line.startswith("agentrt: warning: ")]
    assert any("every run took 'direct'" in w for w in warnings), out.err
    assert any(f"only 13 runs took 'direct' (want >= {MIN_RUNS_PER_ACTION})" in w for w in warnings)
    assert any(f"only 13 questions (want >= {MIN_QUESTIONS})" in w for w in warnings)
    assert "runs 13 on 13 questions" in out.out
    saved = json.loads((tmp_path / "router.json").read_text())
    assert saved["metrics"]["warnings"] and len(saved["metrics"]["warnings"]) == len(warnings)


def test_train_router_warns_when_an_actions_runs_all_agree_and_not_when_data_suffice(tmp_path, capsys):
    store = tmp_path / "a"
    writer = TrajectoryWriter(store)
    _logged(writer, max(MIN_QUESTIONS, MIN_RUNS_PER_ACTION) + 5, actions=("direct", "reason"))
    for i in range(MIN_RUNS_PER_ACTION):
        writer.append(rec(new_run_id(), route="abstain", question=f"What is {i} + {i}?", reward=0.0, success=False))
    assert main(["train-router", "--trajectories", str(store), "--out", str(tmp_path / "r.json")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("agentrt: warning: ")]
    assert warnings == ["agentrt: warning: every 'abstain' run failed: its p_success cannot be calibrated "
                        "(ECE is ~0 by construction, not a sign of a good fit)"]
    _logged(TrajectoryWriter(tmp_path / "b"), max(MIN_QUESTIONS, MIN_RUNS_PER_ACTION) + 5,
            actions=("direct", "reason"))
    assert main(["train-router", "--trajectories", str(tmp_path / "b"), "--out", str(tmp_path / "r2.json")]) == 0
    assert "warning" not in capsys.readouterr().err
