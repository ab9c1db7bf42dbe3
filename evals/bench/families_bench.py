"""Benchmark: every model-specific part on both embedded model families (issue 58), the heavier forms of
tests/agentrt/test_families.py: default thinking caps, four samples, a GRPO step over more layers, the search
environment's greedy episodes through TRL's tool template, and vLLM (the CPU build) serving each folder.

    .venv/bin/python -m evals.bench.families_bench [--family smollm2 qwen] [--part PART ...]

Prints one table: family x part, ok / failed (with the first line of what failed) and seconds. "ok" means what a
user would check held (the answer names Paris, the tool result is in the answer, the JSON parses, the token ids
decode back, the saved policy answers); the answers themselves are shown beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.bench.common import ROOT, parser, show, table

SPECS = {"smollm2": "hf:embedded", "qwen": "hf:embedded:qwen2.5-coder-0.5b"}
MODEL_DIRS = {"smollm2": "embedded", "qwen": "embedded:qwen2.5-coder-0.5b"}
PARTS = ("stop", "reason", "samples", "confidence", "tools", "json", "export", "env-strategy", "env-search", "grpo",
         "vllm")


def check(ok: bool, what: Any) -> str:
    if not ok:
        raise AssertionError(str(what))
    return str(what)


def part_stop(b, agent, fam) -> str:
    from agentrt.core.types import GenParams, Message

    c = b.chat_sync([Message("user", "What is the capital of France?")], GenParams(max_tokens=32)).choices[0]
    return check("Paris" in c.text and c.finish_reason == "stop" and c.token_ids[-1] in b.eos_ids
                 and "<|im_" not in c.text, c.text)


def part_reason(b, agent, fam) -> str:
    r = agent.run("What is 12 + 30?", route="reason", budget=1024, tools=[])
    return check("<think>" not in r.answer and r.status in ("ok", "no_answer", "truncated"), f"{r.status}: {r.answer}")


def part_samples(b, agent, fam) -> str:
    r = agent.run("What is 12 + 30?", route="reason", samples=4, thinking_cap=64, budget=2048, seed=0, tools=[])
    return check(r.status in ("ok", "no_answer"), f"{r.status}: {r.answer!r}")


def part_confidence(b, agent, fam) -> str:
    got = []
    for mode in ("grammar", "scored", "tail"):
        r = agent.run("What is the capital of France?", route="direct", confidence=mode, max_tokens=24, budget=800)
        check(r.confidence is None or 0 <= r.confidence <= 1, r.confidence)
        got.append(f"{mode} {r.confidence} ({r.confidence_status})")
    return "; ".join(got)


def part_tools(b, agent, fam) -> str:
    r = agent.run("What is 1234 * 5678? Use the calculator.", route="reason", budget=1500)
    return check("7006652" in r.answer.replace(",", ""), r.answer)


def part_json(b, agent, fam) -> str:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    r = agent.run("Give the capital of France.", route="direct", json_schema=schema, max_tokens=24)
    return check("city" in json.loads(r.answer), r.answer)


def part_export(b, agent, fam) -> str:
    from agentrt.app.commands.export import folder_tokenize
    from agentrt.core.config import Settings
    from agentrt.trajectory.export import check_continuity
    from agentrt.trajectory.export_tokens import token_segments

    r = agent.run("What is the capital of France?", route="direct", max_tokens=16)
    [seg], _ = token_segments(r.record)
    text = b.tokenizer.decode(seg.response_ids, skip_special_tokens=True).strip()
    tokenize, eos = folder_tokenize(SPECS[fam], Settings().models_dir)
    result = check_continuity(r.record, tokenize, eos)
    return check(text == r.answer and len(seg.response_mask) == len(seg.response_ids) and result.ok,
                 f"{len(seg.prompt_ids)}+{len(seg.response_ids)} ids, continuity {result.ok} {result.detail}")


def part_env_strategy(b, agent, fam) -> str:
    from agentrt.envs.strategy import StrategyEpisode

    ep = StrategyEpisode(agent, budget=512)
    ep.reset("What is the capital of France?", ["Paris"], "qa", item_id="f1")
    ep.choose("direct")
    return check(ep.done and ep.tokens > 0, f"reward {ep.reward:.3f}, {ep.tokens} tokens")


def part_env_search(b, agent, fam) -> str:
    """Two greedy episodes of ``search:squad`` through TRL's tool template (what --env search trains on)."""
    import argparse

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.app.commands.train_env import search_questions
    from agentrt.core.config import load_settings
    from agentrt.envs.trl import SearchTools, play, rows_for, split_questions, use_tool_template

    settings = load_settings()
    ns = argparse.Namespace(holdout=0.2, env_max_steps=4, env_budget=1024, k=3)
    questions, make_episode = search_questions("squad", ns, settings)
    held = split_questions(questions, 0.2)[1][:2]
    model = AutoModelForCausalLM.from_pretrained(b.path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(b.path)
    use_tool_template(tokenizer)
    table_ = {q.id: q for q in held}
    played = play(model, tokenizer, [SearchTools(table_, make_episode) for _ in held], rows_for(held),
                  max_new_tokens=48, max_turns=4)
    calls = sum(p.tool_calls for p in played)
    return check(len(played) == 2, f"{calls} tool calls, answers {[p.answer[:30] for p in played]}")


def part_grpo(b, agent, fam) -> str:
    """One RLCR step (the confidence tail) of the top two layers through the CLI; the saved policy answers."""
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings
    from agentrt.core.types import GenParams, Message

    with tempfile.TemporaryDirectory(prefix="families-grpo-") as tmp:
        data = Path(tmp) / "prompts.jsonl"
        data.write_text(json.dumps({"prompt": [{"role": "user", "content": "What is the capital of France?"}],
                                    "answer": ["Paris"], "verifier": "qa"}) + "\n")
        out = Path(tmp) / "policy"
        done = subprocess.run([sys.executable, "-m", "agentrt.app.cli", "train-policy", "--grpo", "--reward", "rlcr",
                               "--train-layers", "2", "--model-dir", MODEL_DIRS[fam], "--data", str(data), "--out",
                               str(out), "--steps", "1", "--num-generations", "2", "--batch-size", "2",
                               "--max-completion-length", "8", "--json"], capture_output=True, text=True, cwd=ROOT)
        check(done.returncode == 0, done.stderr.strip().splitlines()[-1:] if done.returncode else "")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        trained = load_backend(f"hf:{out}", Settings(), cache=False)
        try:
            text = trained.chat_sync([Message("user", "What is the capital of France?")], GenParams(max_tokens=16)).text
        finally:
            trained.close()
    return check("Paris" in text, f"{report['changed_tensors']}/{report['total_tensors']} tensors moved; {text}")


def part_vllm(b, agent, fam) -> str:
    """vLLM's CPU build (.venv-vllm) serving the family's folder in process: one greedy chat answer."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    check(python.is_file(), "no .venv-vllm: run `make vllm-venv`")
    code = ("import sys; from agentrt.backends import load_backend; from agentrt.core.config import Settings; "
            "from agentrt.core.types import GenParams, Message; "
            "b = load_backend(sys.argv[1], Settings()); "
            "print(b.chat_sync([Message('user', 'What is the capital of France?')], GenParams(max_tokens=16)).text)")
    with tempfile.TemporaryDirectory(prefix="vllm-") as tmp:  # a short path: vLLM's ZMQ socket lives there
        env = {**os.environ, "TMPDIR": tmp, "VLLM_CACHE_ROOT": tmp, "VLLM_NO_USAGE_STATS": "1"}
        done = subprocess.run([str(python), "-c", code, f"vllm:{b.path}"], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=1800)
    text = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    return check(done.returncode == 0 and "Paris" in text, text)


RUNNERS: dict[str, Callable[..., str]] = {
    "stop": part_stop, "reason": part_reason, "samples": part_samples, "confidence": part_confidence,
    "tools": part_tools, "json": part_json, "export": part_export, "env-strategy": part_env_strategy,
    "env-search": part_env_search, "grpo": part_grpo, "vllm": part_vllm}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--family", nargs="+", choices=list(SPECS), default=list(SPECS))
    ap.add_argument("--part", nargs="+", choices=PARTS, default=list(PARTS))
    args = ap.parse_args(argv)
    from agentrt import Agent
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings

    rows = []
    for fam in args.family:
        started = time.perf_counter()
        backend = load_backend(SPECS[fam], Settings())
        rows.append((fam, "load", "ok", f"{time.perf_counter() - started:.1f}", type(backend.model).__name__))
        agent = Agent(policy=backend)
        for part in args.part:
            started = time.perf_counter()
            try:
                rows.append((fam, part, "ok", "", RUNNERS[part](backend, agent, fam)[:90]))
            except Exception as e:  # noqa: BLE001 - one part failing is a row of the table, not the end
                rows.append((fam, part, "failed", "", f"{type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''}"))
            rows[-1] = (*rows[-1][:3], f"{time.perf_counter() - started:.1f}", rows[-1][4])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    show(table(f"model-specific parts on both embedded families ({os.cpu_count()} CPU cores, load "
               f"{os.getloadavg()[0]:.1f})", ("family", "part", "result", "seconds", "what"), rows), width=200)
    return 0 if all(r[2] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
