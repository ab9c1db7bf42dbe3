"""Trajectory exports: the files RL and SFT trainers read (verl, TRL, agent-lightning, OpenAI, GRPO).

    >>> from agentrt.trajectory.export import load_runs, export
    >>> records, problems = load_runs()                 # the trajectories under $AGENTRT_HOME
    >>> export(records, "verl", "train.parquet").rows

Formats (``FORMATS``; ``.parquet`` or ``.jsonl`` by the output's suffix, except ``openai``: JSONL):

* ``verl``        prompt rows {data_source, prompt (messages), ability, reward_model {style: rule,
                  ground_truth}, extra_info}; one row per distinct prompt, runs without ground truth skipped;
                  eval runs get verl's name of their suite as ``data_source`` (``verl_data_source``)
* ``verl-tokens`` {prompt_ids, response_ids, response_mask (1 model token, 0 observation), response_logprobs,
                  reward} per continuous token segment of a run (multi-turn runs are one row when continuous)
* ``trl-prompts`` TRL prompt-only rows {prompt (messages), answer} (+ data_source, verifier)
* ``trl-sft``     TRL tool-use SFT rows {messages (with tool_calls), tools}; only runs with status ``ok`` and an
                  answer (``sft_statuses``), optionally only those rewarded at least ``min_reward``
* ``triplets``    agent-lightning style {prompt.token_ids, response.token_ids, response.log_probs, reward}
                  per model call, the run's reward on the last triplet only
* ``openai``      OpenAI chat fine-tuning JSONL {messages}
* ``parquet``     one flat row per run (datasets.load_dataset("parquet", ...) reads it)
* ``grpo``        rollouts of the same prompt grouped; advantage = (reward - group mean) / group std

Failed runs are left out of every format that carries the model's answer (all but the prompt-only ``verl`` and
``trl-prompts``) unless ``include_failed`` (``agentrt export --include-failed``):
a run ended ``no_answer``, ``failed`` or ``cancelled``, or whose answer is no real answer (an older record
marked ``ok`` over raw tool output or an empty answer: ``agentrt.core.answer``); the report says how many.

In Parquet files, values whose JSON shape differs between rows (dict ground truths, tool schemas,
tool-call arguments) are JSON strings.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.answer import check_answer
from agentrt.trajectory.export_tokens import check_continuity, final_conversation, token_segments
from agentrt.core.errors import InputError, TrajectoryError, missing_extra
from agentrt.trajectory import TrajectoryRecord, read_trajectories
from agentrt.trajectory.store import ReadReport
from agentrt.trajectory.filters import apply_filters, parse_filter, reward_of


@dataclass
class ExportReport:
    """What an export wrote and what it left out, and why."""

    format: str
    out: str
    runs: int = 0
    rows: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    split: int = 0  # runs written as several token segments (a token discontinuity; see breaks)
    problems: list[str] = field(default_factory=list)  # what the CLI warns about: one line per kind of problem
    breaks: list[str] = field(default_factory=list)  # verl-tokens: where each split run breaks, per run

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def skipped_text(self) -> str:
        return ", ".join(f"{n} ({why})" for why, n in sorted(self.skipped.items())) or "none"

    def summary(self) -> str:
        text = f"wrote {self.rows} {self.format} rows from {self.runs} runs to {self.out}"
        if self.skipped:
            text += f"; skipped: {self.skipped_text()}"
        if self.split:
            text += f"; {self.split} runs split at a token discontinuity"
        return text


# -- loading and filtering -------------------------------------------------------------------------

def load_runs(paths: Iterable[str | Path] | None = None, home: str | Path | None = None) -> tuple[list[TrajectoryRecord], list[str]]:
    """Records from trajectory files/directories (default: ``$AGENTRT_HOME/trajectories``) and the
    problems found (torn records and corrupt lines: reported, skipped). ``read_runs`` gives the full report."""
    report = read_runs(paths, home)
    return report.records, report.problems + [str(q) for q in report.quarantined]


def read_runs(paths: Iterable[str | Path] | None = None, home: str | Path | None = None, *,
              strict: bool = False) -> ReadReport:
    """One ``ReadReport`` over trajectory files/directories (default: ``$AGENTRT_HOME/trajectories``):
    corrupt lines are skipped and listed in ``quarantined``, or raise with ``strict=True``."""
    if not paths:
        from agentrt.core.config import load_settings

        directory = Path(home) / "trajectories" if home else load_settings().trajectory_dir
        if not directory.is_dir():
            raise InputError(f"no trajectories under {directory}; run the agent first or pass --trajectories FILE")
        paths = [directory]
    report = ReadReport()
    for p in paths:
        try:
            report.absorb(read_trajectories(p, strict=strict))
        except TrajectoryError:
            if not Path(p).exists():
                raise InputError(f"no trajectory file or directory at {p}") from None
            raise
    return report


# -- conversations ----------------------------------------------------------------------------------

def prompt_messages(record: TrajectoryRecord) -> list[dict[str, Any]]:
    """The prompt the run started from: the first model call's messages without an assistant prefill."""
    calls = [s for s in record.steps if s.get("kind") == "model_call"]
    if not calls:
        return [{"role": "user", "content": record.question}]
    messages = [{"role": m["role"], "content": m.get("content") or ""} for m in calls[0]["messages"]]
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    return messages or [{"role": "user", "content": record.question}]


def sft_messages(record: TrajectoryRecord, *, json_args: bool = True) -> list[dict[str, Any]]:
    """The run as a chat: tool calls become assistant ``tool_calls`` + ``tool`` messages; the final
    assistant message is the last model call's output (thought included). Without tool calls it is
    the last model call's conversation."""
    tools = [s for s in record.steps if s.get("kind") == "tool_call"]
    if not tools:
        return final_conversation(record)
    messages = prompt_messages(record)
    for i, step in enumerate(tools):
        call_id = step.get("call_id") or f"call_{i}"
        args = step.get("args") or {}
        messages.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": step["name"], "arguments": json.dumps(args) if json_args else args}}]})
        result = step.get("result") if step.get("error") is None else f"error: {step['error']}"
        messages.append({"role": "tool", "tool_call_id": call_id, "name": step["name"], "content": result or ""})
    messages.append({"role": "assistant", "content": final_conversation(record)[-1]["content"]})
    return messages


def _ground_truth(record: TrajectoryRecord) -> Any:
    return record.task.ground_truth if record.task is not None else None


def _gt_text(gt: Any) -> str:
    return gt if isinstance(gt, str) else json.dumps(gt, ensure_ascii=False)


def _prompt_key(record: TrajectoryRecord) -> str:
    task = record.task
    if task is not None and task.prompt_id:
        return f"{task.data_source}:{task.prompt_id}"
    return json.dumps(prompt_messages(record), sort_keys=True)


# -- verl's data_source names -----------------------------------------------------------------------

# verl's default reward routing (verl.utils.reward_score.default_compute_score) picks a scorer by data_source:
# "openai/gsm8k" -> gsm8k; "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", (recent verl)
# "HuggingFaceH4/MATH-500" -> math; others raise. Eval runs (EVAL_DATA_SOURCE) get their suite's dataset name;
# those verl has no scorer for need examples/verl_reward.py (agentrt's verifiers, by extra_info.verifier).
EVAL_DATA_SOURCE = "agentrt-eval"
VERL_DATA_SOURCES: dict[str, str] = {
    "gsm8k": "openai/gsm8k", "math500": "HuggingFaceH4/MATH-500", "ifeval": "google/IFEval",
    "simpleqa": "basicv8vc/SimpleQA", "humaneval": "openai/openai_humaneval", "hotpotqa": "hotpotqa/hotpot_qa",
    "hotpotqa-multiturn": "hotpotqa/hotpot_qa",
}
VERL_BY_VERIFIER: dict[str, str] = {"numeric": "openai/gsm8k", "math": "DigitalLearningGmbH/MATH-lighteval"}


def eval_suite(record: TrajectoryRecord) -> str | None:
    """The eval suite a run came from: the suite field of its ``task_key`` metadata (router|suite|item|sample),
    else its ``prompt_id``'s prefix (gsm8k-0, math500-test/..., ifeval-1000, simpleqa-3, HumanEval/0)."""
    key = record.metadata.get("task_key")
    if isinstance(key, str) and key.count("|") >= 3:
        return key.split("|")[1]
    pid = (record.task.prompt_id if record.task else None) or ""
    if pid.startswith("HumanEval/"):
        return "humaneval"
    prefix = pid.split("-", 1)[0]
    return prefix if "-" in pid and prefix in VERL_DATA_SOURCES else None


def verl_data_source(record: TrajectoryRecord) -> str:
    """The record's data_source, but for eval runs their suite's name in verl's naming (``VERL_DATA_SOURCES``),
    else (a custom suite) verl's name for its verifier's kind (``VERL_BY_VERIFIER``), else ``agentrt/<suite>``."""
    task = record.task
    if task is None:
        return "agentrt"
    if task.data_source != EVAL_DATA_SOURCE:
        return task.data_source
    suite = eval_suite(record)
    if suite in VERL_DATA_SOURCES:
        return VERL_DATA_SOURCES[suite]
    verifier = task.verifier or ("math" if task.ability == "math" else None)
    if verifier in VERL_BY_VERIFIER:
        return VERL_BY_VERIFIER[verifier]
    return f"agentrt/{suite}" if suite else EVAL_DATA_SOURCE


# -- row builders -------------------------------------------------------------------------------------

def rows_verl(records: list[TrajectoryRecord], report: ExportReport, **_: Any) -> list[dict]:
    rows, seen = [], set()
    for r in records:
        gt = _ground_truth(r)
        if gt is None:
            report.skip("no ground truth")
            continue
        key = _prompt_key(r)
        if key in seen:
            report.skip("prompt already exported")
            continue
        seen.add(key)
        task = r.task
        rows.append({
            "data_source": verl_data_source(r), "prompt": prompt_messages(r), "ability": task.ability,
            "reward_model": {"style": "rule", "ground_truth": _gt_text(gt)},
            "extra_info": {"index": len(rows), "run_id": r.run_id, "split": task.split or "train",
                           "question": r.question, "verifier": task.verifier or "", "suite": eval_suite(r) or ""},
        })
    return rows


def rows_verl_tokens(records: list[TrajectoryRecord], report: ExportReport, **_: Any) -> list[dict]:
    rows = []
    for r in records:
        segments, breaks = token_segments(r)
        if not segments:
            report.skip("no token ids")
            continue
        if breaks:
            report.split += 1
            report.breaks += [f"run {r.run_id}: {b}" for b in breaks]
        reward = reward_of(r)
        for i, seg in enumerate(segments):
            rows.append({"run_id": r.run_id, "segment": i, "prompt_ids": seg.prompt_ids, "response_ids": seg.response_ids,
                         "response_mask": seg.response_mask, "response_logprobs": seg.response_logprobs,
                         "reward": reward, "n_calls": len(seg.calls), "data_source": verl_data_source(r)})
    if report.split:  # one warning for them all (every reason run breaks where its thought is re-rendered)
        report.problems.append(f"{report.split} of {len(records)} runs split into token segments where a prompt "
                               f"re-renders earlier text; first: {report.breaks[0]} (all: ExportReport.breaks)")
    return rows


def rows_trl_prompts(records: list[TrajectoryRecord], report: ExportReport, **_: Any) -> list[dict]:
    return [{"prompt": row["prompt"], "answer": row["reward_model"]["ground_truth"], "data_source": row["data_source"],
             "verifier": row["extra_info"]["verifier"]} for row in rows_verl(records, report)]


def rows_trl_sft(records: list[TrajectoryRecord], report: ExportReport, *, parquet: bool = False,
                 sft_statuses: Iterable[str] = ("ok",), min_reward: float | None = None, **_: Any) -> list[dict]:
    """Runs worth imitating: status in ``sft_statuses`` (default ``ok``: no truncated, failed or cancelled
    runs), a non-empty answer, and, with ``min_reward``, a reward at least that (runs without one are left out)."""
    rows, statuses = [], set(sft_statuses)
    for r in records:
        if r.status not in statuses:
            report.skip(f"status {r.status}")
            continue
        if not r.answer.strip():
            report.skip("empty answer")
            continue
        if min_reward is not None:
            reward = reward_of(r)
            if reward is None or reward < min_reward:
                report.skip("no reward" if reward is None else f"reward below {min_reward:g}")
                continue
        tools = [json.dumps(t) for t in r.tools] if parquet else r.tools
        rows.append({"messages": sft_messages(r), "tools": tools, "run_id": r.run_id})
    return rows


def rows_triplets(records: list[TrajectoryRecord], report: ExportReport, **_: Any) -> list[dict]:
    rows = []
    for r in records:
        calls = [c for c in r.model_calls() if c.has_ids()]
        if not calls:
            report.skip("no token ids")
            continue
        reward = reward_of(r)
        for i, c in enumerate(calls):
            ids = c.completion_token_ids[0] or []
            rows.append({"run_id": r.run_id, "index": i, "name": c.name,
                         "prompt": {"token_ids": c.prompt_token_ids},
                         "response": {"token_ids": ids, "log_probs": c.completion_logprobs[0] or [0.0] * len(ids)},
                         "reward": reward if i == len(calls) - 1 else None})
    return rows


def rows_openai(records: list[TrajectoryRecord], report: ExportReport, **_: Any) -> list[dict]:
    rows = []
    for r in records:
        messages = sft_messages(r)
        if messages[-1]["role"] != "assistant" or not messages[-1].get("content"):
            report.skip("no assistant answer")
            continue
        row: dict[str, Any] = {"messages": messages}
        if r.tools:
            row["tools"] = r.tools
        rows.append(row)
    return rows


def rows_flat(records: list[TrajectoryRecord], report: ExportReport, **_: Any) -> list[dict]:
    return [{
        "run_id": r.run_id, "schema_version": r.schema_version, "created_at": r.created_at, "question": r.question,
        "route": r.route, "answer": r.answer, "thought": r.thought, "status": r.status, "error": r.error,
        "reward": reward_of(r), "prompt_tokens": r.usage.get("prompt_tokens", 0),
        "completion_tokens": r.usage.get("completion_tokens", 0), "budget_total": r.budget.get("total", 0),
        "wall_s": r.timings.get("wall_s", 0.0), "n_steps": len(r.steps),
        "data_source": r.task.data_source if r.task else None,
        "ground_truth": _gt_text(_ground_truth(r)) if _ground_truth(r) is not None else None,
        "steps_json": json.dumps(r.steps, ensure_ascii=False),
    } for r in records]


def rows_grpo(records: list[TrajectoryRecord], report: ExportReport, *, min_group: int = 2, **_: Any) -> list[dict]:
    groups: dict[str, list[tuple[TrajectoryRecord, float]]] = defaultdict(list)
    for r in records:
        reward = reward_of(r)
        if reward is None:
            report.skip("no reward")
            continue
        groups[_prompt_key(r)].append((r, reward))
    rows = []
    for gid, (key, members) in enumerate(groups.items()):
        if len(members) < min_group:
            report.skip(f"group smaller than {min_group}")
            continue
        rewards = [rw for _, rw in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards))
        for r, rw in members:
            rows.append({"group_id": gid, "group_size": len(members), "run_id": r.run_id, "prompt": prompt_messages(r),
                         "completion": final_conversation(r)[-1]["content"], "answer": r.answer, "reward": rw,
                         "advantage": (rw - mean) / (std + 1e-6) if std > 0 else 0.0})
    return rows


FORMATS: dict[str, Callable[..., list[dict]]] = {
    "verl": rows_verl, "verl-tokens": rows_verl_tokens, "trl-prompts": rows_trl_prompts, "trl-sft": rows_trl_sft,
    "triplets": rows_triplets, "openai": rows_openai, "parquet": rows_flat, "grpo": rows_grpo,
}


# Prompt rows carry the question and its ground truth, never the model's answer: a run that found no answer
# is still a prompt to train on (often the most useful one), so these formats keep it.
PROMPT_ONLY = ("verl", "trl-prompts")
# The formats that read a /v1/completions record sanely (its prompt and completion token ids, or one flat row);
# the others are chats or prompts for a chat template, which a raw-text continuation is not.
RAW_TEXT_OK = ("verl-tokens", "triplets", "parquet")


def failed_reason(record: TrajectoryRecord) -> str | None:
    """Why ``record`` is a failed run that exports leave out by default, or None when it is not one."""
    if record.status in ("no_answer", "failed", "cancelled"):
        return f"status {record.status}"
    verdict = check_answer(record.answer, record.question)
    return None if verdict.ok else f"no real answer ({verdict.reason})"


def export(records: list[TrajectoryRecord], fmt: str, out: str | Path, *, min_group: int = 2,
           sft_statuses: Iterable[str] = ("ok",), min_reward: float | None = None,
           include_failed: bool = False) -> ExportReport:
    """Write ``records`` as ``fmt`` to ``out`` (``.parquet`` or ``.jsonl``); returns what happened.

    ``min_group``: grpo's smallest group. ``sft_statuses`` / ``min_reward``: which runs trl-sft keeps.
    ``include_failed``: keep runs without a real answer (``failed_reason``; left out by default, except by the
    prompt-only formats ``PROMPT_ONLY``, which export no answer).
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    out = Path(out)
    parquet = out.suffix == ".parquet"
    if fmt == "openai" and parquet:
        raise InputError("the openai format is JSONL; give --out a .jsonl name")
    if out.suffix not in (".parquet", ".jsonl"):
        raise InputError(f"--out {out} must end in .parquet or .jsonl")
    report = ExportReport(fmt, str(out), runs=len(records))
    valid = []
    for r in records:
        if (r.metadata or {}).get("endpoint") == "completions" and fmt not in RAW_TEXT_OK:
            report.skip("a /v1/completions call: raw text, no chat or route")  # the server's, no chat template
            continue
        why = None if include_failed or fmt in PROMPT_ONLY else failed_reason(r)
        if why is not None:  # no answer is no example: the router and the policy would learn from junk
            report.skip(f"failed run: {why}")
            continue
        try:
            r.model_calls()
            valid.append(r)
        except TrajectoryError as e:  # one malformed run must not sink the export: leave it out, say why
            report.skip("malformed model_call step")
            report.problems.append(str(e))
    rows = FORMATS[fmt](valid, report, parquet=parquet, min_group=min_group, sft_statuses=sft_statuses,
                        min_reward=min_reward)
    if not rows:
        raise InputError(f"no {fmt} rows from {len(records)} runs (skipped: {report.skipped_text()}); "
                         "check --filter and that the runs carry what the format needs (task, token ids); "
                         "runs without a real answer are left out unless --include-failed")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_rows(rows, out)
    report.rows = len(rows)
    return report


def write_rows(rows: list[dict], path: Path) -> None:
    """JSONL, or Parquet through pyarrow (written to a temporary name, then renamed: never half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise missing_extra("pyarrow", "train") from None
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


__all__ = ["FORMATS", "ExportReport", "export", "verl_data_source", "eval_suite", "VERL_DATA_SOURCES",
           "load_runs", "read_runs", "apply_filters", "parse_filter", "reward_of",
           "prompt_messages", "sft_messages", "write_rows", "check_continuity", "token_segments", "final_conversation"]
