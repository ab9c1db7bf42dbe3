"""Exports: every format round-trips (export -> read back with pyarrow -> equal to the source), GRPO groups,
filters, the CLI, and the token continuity check (with the real embedded tokenizer)."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from agentrt.app.cli import main
from agentrt.core.errors import InputError
from agentrt.trajectory.export import (
    FORMATS,
    ExportReport,
    apply_filters,
    check_continuity,
    export,
    load_runs,
    token_segments,
)
from agentrt.trajectory import TaskInfo, TrajectoryRecord, TrajectoryWriter, read_trajectories, tool_call_step

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def call(name, messages, prompt_ids, completion_ids, text, logprobs=None, mask=None):
    return {
        "kind": "model_call", "name": name, "backend": "test", "model": "m", "messages": messages,
        "prompt_token_ids": prompt_ids, "completion_token_ids": [completion_ids],
        "completion_logprobs": [logprobs or [-0.5] * len(completion_ids)], "completions": [text],
        "finish_reasons": ["stop"], "loss_mask": [mask or [1] * len(completion_ids)],
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)}, "latency_s": 0.1,
    }


def record(run_id, question, answer, steps, *, gold=None, source="gsm8k", verifier="numeric", prompt_id=None,
           reward=None, tools=()):
    task = TaskInfo(data_source=source, ability="math", ground_truth=gold, verifier=verifier, prompt_id=prompt_id) \
        if gold is not None else None
    return TrajectoryRecord(
        run_id=run_id, created_at=time.time(), question=question, route="plan" if tools else "direct", steps=steps,
        answer=answer, budget={"total": 500, "spent": 100}, usage={"prompt_tokens": 60, "completion_tokens": 40,
                                                                   "total_tokens": 100},
        timings={"wall_s": 0.5}, status="ok", task=task, reward=reward, tools=list(tools),
    )


def multi_turn_record(run_id="mt", gold="#### 7") -> TrajectoryRecord:
    """A tool-using run whose second prompt extends the first prompt + completion (a continuous sequence)."""
    q = "What is 3 + 4?"
    m1 = [SYSTEM, {"role": "user", "content": q}]
    p1, c1 = [1, 2, 3, 4], [10, 11, 12]
    p2 = p1 + c1 + [20, 21]  # observation: the tool result tokens
    c2 = [30, 31]
    m2 = m1 + [{"role": "assistant", "content": "calc(3+4)"}, {"role": "tool", "content": "7"}]
    steps = [
        {"kind": "route_decision", "route": "plan", "propensity": 0.7, "probabilities": {"plan": 0.7, "direct": 0.3},
         "features": {"chars": 14}},
        call("search", m1, p1, c1, "calc(3+4)", logprobs=[-0.1, -0.2, -0.3]),
        tool_call_step("calculator", {"expression": "3+4"}, "7", latency_s=0.01),
        call("answer", m2, p2, c2, "7", logprobs=[-0.4, -0.5]),
    ]
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object",
              "properties": {"expression": {"type": "string"}}}}}]
    return record(run_id, q, "7", steps, gold=gold, prompt_id="toy-1", tools=tools)


def simple_records() -> list[TrajectoryRecord]:
    out = []
    for i, (answer, gold) in enumerate([("18", "#### 18"), ("17", "#### 18"), ("18", "#### 18"), ("5", "#### 5")]):
        q = "Janet's ducks?" if i < 3 else "2+3?"
        m = [SYSTEM, {"role": "user", "content": q}]
        steps = [call("answer", m, [1, 2, 3, i], [40 + i, 41], answer)]
        out.append(record(f"s{i}", q, answer, steps, gold=gold, prompt_id="ducks" if i < 3 else "sum"))
    out.append(record("nogold", "hi", "hello", [call("answer", [{"role": "user", "content": "hi"}], [9], [8], "hello")]))
    return out


def _clean(value):
    """Parquet fills keys missing in some rows with None: drop them to compare with the source."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "openai"])
def test_every_format_round_trips_through_parquet(fmt, tmp_path):
    records = simple_records() + [multi_turn_record()]
    out = tmp_path / f"{fmt}.parquet"
    report = export(records, fmt, out)
    source = FORMATS[fmt](records, ExportReport(fmt, ""), parquet=True, min_group=2)
    back = pq.read_table(out).to_pylist()
    assert report.rows == len(source) == len(back) > 0
    assert _clean(back) == _clean(source)


def test_jsonl_round_trip_and_openai(tmp_path):
    records = simple_records() + [multi_turn_record()]
    for fmt in ("openai", "trl-sft", "triplets"):
        out = tmp_path / f"{fmt}.jsonl"
        export(records, fmt, out)
        back = [json.loads(line) for line in out.read_text().splitlines()]
        assert back == FORMATS[fmt](records, ExportReport(fmt, ""), parquet=False)
    rows = [json.loads(line) for line in (tmp_path / "openai.jsonl").read_text().splitlines()]
    tool_row = rows[-1]
    roles = [m["role"] for m in tool_row["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert tool_row["messages"][2]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "3+4"}'}
    assert tool_row["tools"][0]["function"]["name"] == "calculator"
    assert all(r["messages"][-1]["role"] == "assistant" for r in rows)


def test_verl_rows_hold_the_prompt_and_the_rule_reward(tmp_path):
    export(simple_records(), "verl", tmp_path / "p.parquet")
    rows = pq.read_table(tmp_path / "p.parquet").to_pylist()
    assert len(rows) == 2  # ducks (3 runs, one prompt) and sum; the run without ground truth is skipped
    assert rows[0]["prompt"] == [SYSTEM, {"role": "user", "content": "Janet's ducks?"}]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "#### 18"}
    assert rows[0]["data_source"] == "gsm8k" and rows[0]["ability"] == "math"


def test_token_rows_mask_model_tokens_1_and_observations_0(tmp_path):
    rec = multi_turn_record()
    export([rec], "verl-tokens", tmp_path / "t.parquet")
    (row,) = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert row["prompt_ids"] == [1, 2, 3, 4]
    assert row["response_ids"] == [10, 11, 12, 20, 21, 30, 31]
    assert row["response_mask"] == [1, 1, 1, 0, 0, 1, 1]
    assert row["response_logprobs"] == pytest.approx([-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5])
    assert row["reward"] == 1.0  # computed from the task: answer 7, gold #### 7


def test_triplets_carry_the_reward_on_the_last_one_only(tmp_path):
    export([multi_turn_record()], "triplets", tmp_path / "t.parquet")
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert [r["reward"] for r in rows] == [None, 1.0]
    assert rows[1]["prompt"]["token_ids"] == [1, 2, 3, 4, 10, 11, 12, 20, 21]
    assert rows[1]["response"] == {"token_ids": [30, 31], "log_probs": pytest.approx([-0.4, -0.5])}


def test_grpo_groups_and_normalized_advantages(tmp_path):
    export(simple_records(), "grpo", tmp_path / "g.parquet")
    rows = pq.read_table(tmp_path / "g.parquet").to_pylist()
    assert {r["run_id"] for r in rows} == {"s0", "s1", "s2"}  # "sum" has one rollout (< min group 2)
    adv = {r["run_id"]: r["advantage"] for r in rows}
    # rewards 1, 0, 1: mean 2/3, std 0.4714
    assert adv["s0"] == pytest.approx(0.7071, abs=1e-3) and adv["s1"] == pytest.approx(-1.4142, abs=1e-3)
    assert sum(adv.values()) == pytest.approx(0.0, abs=1e-6) and {r["group_size"] for r in rows} == {3}


def test_plain_parquet_loads_with_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    import datasets
    records = simple_records()
    export(records, "parquet", tmp_path / "runs.parquet")
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "runs.parquet"), split="train")
    assert ds.num_rows == len(records)
    assert ds[1]["answer"] == "17" and ds[1]["reward"] == 0.0 and ds[4]["reward"] is None
    assert json.loads(ds[0]["steps_json"])[0]["completion_token_ids"] == [[40, 41]]


def test_filters():
    records = simple_records()
    assert [r.run_id for r in apply_filters(records, ["reward>=1"])] == ["s0", "s2", "s3"]
    assert [r.run_id for r in apply_filters(records, ["task.prompt_id=sum"])] == ["s3"]
    assert len(apply_filters(records, ["status=ok", "route!=reason"])) == 5
    with pytest.raises(InputError, match="bad filter"):
        apply_filters(records, ["reward"])


def test_cli_export_from_the_home_and_from_files(tmp_path, agentrt_home, capsys):
    w = TrajectoryWriter(agentrt_home / "trajectories")
    for r in simple_records():
        w.append(r)
    with open(w.path, "ab") as f:
        f.write(b'{"schema_version": "1", "run_id": "torn"')  # a killed writer: reported, not exported
    out = tmp_path / "v.parquet"
    assert main(["export", "--format", "verl", "--out", str(out), "--filter", "status=ok"]) == 0
    captured = capsys.readouterr()
    assert "wrote 2 verl rows from 5 runs" in captured.out and "incomplete" in captured.err
    other = tmp_path / "other.jsonl"
    TrajectoryWriter(tmp_path, "other.jsonl").append(multi_turn_record())
    assert main(["export", "--format", "openai", "--out", str(tmp_path / "o.jsonl"), "--trajectories", str(other)]) == 0
    assert main(["export", "--format", "openai", "--out", str(tmp_path / "o.parquet")]) == 2
    assert main(["export", "--format", "verl", "--out", str(out), "--trajectories", str(tmp_path / "nope")]) == 2
    assert main(["export", "--format", "verl", "--out", str(out), "--filter", "reward>5"]) == 2
    assert "no verl rows from 0 runs" in capsys.readouterr().err
    assert main(["train-policy", "--grpo", "--data", str(tmp_path / "none.parquet")]) == 2
    assert "agentrt export --format trl-prompts" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x"}\n')
    assert main(["train-policy", "--grpo", "--data", str(bad)]) == 2
    assert "need 'prompt' and 'answer'" in capsys.readouterr().err


def test_v0_records_export(tmp_path):
    from test_trajectory_store import V0_LINE

    (tmp_path / "trajectories.jsonl").write_text(json.dumps(V0_LINE) + "\n")
    records, problems = load_runs([tmp_path])
    export(records, "verl-tokens", tmp_path / "t.parquet")
    (row,) = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert row["response_mask"] == [1, 1, 1] and row["reward"] is None and not problems


# -- token continuity with the real tokenizer --------------------------------------------------------------

@pytest.mark.slow
def test_continuity_check_with_the_embedded_tokenizer_catches_a_planted_mismatch(embedded):
    from agentrt.trajectory.export_tokens import hf_tokenize
    from agentrt.core.types import as_messages

    tok = embedded.tokenizer

    def ids(messages, **kw):
        return tok(embedded.render(as_messages(messages), **kw), add_special_tokens=False).input_ids

    turn1 = [SYSTEM, {"role": "user", "content": "What is 3 + 4?"}]
    turn2 = turn1 + [{"role": "assistant", "content": "Let me add: 3 + 4 = 7."}, {"role": "user", "content": "Sure?"}]
    p1 = ids(turn1)
    p2 = ids(turn2)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    c1 = p2[len(p1): p2.index(end, len(p1)) + 1]  # what the model "generated" in turn 1, with its end token
    final = turn2 + [{"role": "assistant", "content": "Yes, 7."}]
    c2 = ids(final)[len(p2):] + [end]
    steps = [call("answer", turn1, p1, c1, "Let me add: 3 + 4 = 7."), call("answer", turn2, p2, c2, "Yes, 7.")]
    good = record("good", "What is 3 + 4?", "Yes, 7.", steps)
    segments, breaks = token_segments(good)
    assert len(segments) == 1 and not breaks
    tokenize = hf_tokenize(embedded)
    assert check_continuity(good, tokenize, {end}).ok

    planted = json.loads(good.model_dump_json())
    planted["steps"][1]["completion_token_ids"][0][2] += 1  # one wrong id in the second turn's completion
    result = check_continuity(TrajectoryRecord.model_validate(planted), tokenize, {end})
    assert not result.ok and result.mismatch_at == len(p2) + 2 and result.run_id == "good"

    broken = json.loads(good.model_dump_json())
    broken["steps"][1]["prompt_token_ids"][len(p1) + 1] += 1  # the next prompt does not extend the history
    result = check_continuity(TrajectoryRecord.model_validate(broken), tokenize, {end})
    assert not result.ok and "does not extend" in result.detail


@pytest.mark.slow
def test_real_runs_export_and_report_continuity(agent, embedded, tmp_path):
    """Runs of the real model: token rows match the recorded ids; continuity is reported per run."""
    from agentrt.trajectory.export_tokens import hf_tokenize

    agent.run("What is the capital of France?", budget=300, route="direct")
    agent.run("What is 2 + 2?", budget=400, route="reason", thinking_cap=16)
    records = read_trajectories(agent.writer.path).records
    report = export(records, "verl-tokens", tmp_path / "t.parquet")
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    direct = records[0].model_calls()[0]
    assert rows[0]["prompt_ids"] == direct.prompt_token_ids
    assert rows[0]["response_ids"] == direct.completion_token_ids[0]
    assert rows[0]["response_logprobs"] == pytest.approx(direct.completion_logprobs[0])
    results = [check_continuity(r, hf_tokenize(embedded), embedded.eos_ids) for r in records]
    assert results[0].ok, results[0].detail  # one greedy turn re-tokenizes to the same ids
    print("continuity:", [(r.ok, r.detail[:120]) for r in results], report.summary(), report.problems)


def test_a_malformed_run_is_left_out_and_reported(tmp_path):
    bad = simple_records()[0].model_copy(update={"run_id": "bad"})
    bad.steps = [{"kind": "model_call", "name": "answer"}]  # no ids, no messages
    report = export([bad] + simple_records(), "openai", tmp_path / "o.jsonl")
    assert report.rows == 5 and report.skipped == {"malformed model_call step": 1}
    assert "run bad: step 0 (model_call)" in report.problems[0]


def test_runs_without_token_ids_export_as_text_only(tmp_path):
    """Some HTTP backends cannot return token ids (None): chat formats work, token formats skip the run."""
    rec = simple_records()[0]
    rec.steps[0]["completion_token_ids"] = [None]
    rec.steps[0]["prompt_token_ids"] = None
    rec.steps[0]["loss_mask"] = [[]]
    rec = TrajectoryRecord.model_validate(rec.model_dump())
    assert rec.model_calls()[0].mask() == [] and not rec.model_calls()[0].has_ids()
    assert export([rec], "openai", tmp_path / "o.jsonl").rows == 1
    with pytest.raises(InputError, match="no verl-tokens rows .* 1 .no token ids."):
        export([rec], "verl-tokens", tmp_path / "t.parquet")
    with pytest.raises(InputError, match="no triplets rows"):
        export([rec], "triplets", tmp_path / "t.parquet")
