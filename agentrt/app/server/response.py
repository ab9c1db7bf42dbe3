"""The server's response side: a finished run as OpenAI's chat-completion choices, usage and logprobs.

The choices come from the run's record: its last answer call (``AnswerOptions.shape`` gave it ``n``) holds
every choice's text, finish reason, token ids and log-probabilities. Choice 0's content is the run's
answer as recorded (what the route made of the call's text); the others are their calls' text without a
thought. When the request offered tools, a choice whose text is a call of one of them becomes OpenAI's
``tool_calls`` (finish_reason ``"tool_calls"``; the server never executes them: the client does). A run
without a real answer (status ``no_answer``, agentrt.core.answer) has empty content, finish_reason
``"content_filter"`` (its text was withheld) and ``agentrt.status`` / ``agentrt.error`` saying why.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.core.types import split_action
from agentrt.routes.context import ANSWER_STEPS
from agentrt.routes.thinking import split_thought

if TYPE_CHECKING:
    from agentrt.app.agent import Result
    from agentrt.app.server.request import RunPlan


@dataclass
class ChoiceOut:
    """One choice of a response: its content or tool calls, finish reason and logprobs."""

    index: int
    content: str | None
    finish_reason: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = None

    def message(self, reasoning: str | None = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        if reasoning:
            msg["reasoning_content"] = reasoning
        return msg

    def logprobs_obj(self) -> dict[str, Any] | None:
        return None if self.logprobs is None else {"content": self.logprobs}


def answer_step(result: Result) -> dict[str, Any] | None:
    """The run's last answer call (a model_call step named in ANSWER_STEPS), if it made one."""
    steps = result.record.steps if result.record is not None else []
    return next((s for s in reversed(steps) if s.get("kind") == "model_call" and s.get("name") in ANSWER_STEPS),
                None)


def choices(result: Result, plan: RunPlan, tokenizer: Any = None) -> list[ChoiceOut]:
    """The response's choices (``plan.n`` of them when the answer call made them)."""
    step = answer_step(result)
    texts = list(step.get("completions") or []) if step else []
    finishes = list(step.get("finish_reasons") or []) if step else []
    out = []
    for i in range(max(1, min(plan.n, len(texts)) if step and step.get("name") == "answer" else 1)):
        content = result.answer if i == 0 else split_thought(texts[i])[1]
        finish = "length" if (result.truncated and i == 0) else (finishes[i] if i < len(finishes) else "stop")
        if i == 0 and result.status == "no_answer":  # no real answer: the content is withheld (agentrt.core.answer)
            finish = "content_filter"
        choice = ChoiceOut(i, content, finish if finish in ("length", "content_filter") else "stop")
        if plan.tools:
            calls = tool_calls(texts[i] if i < len(texts) else content, plan)
            if calls:
                choice.content, choice.tool_calls, choice.finish_reason = None, calls, "tool_calls"
        if plan.logprobs and step is not None:
            choice.logprobs = token_logprobs(step, i, plan.top_logprobs, tokenizer)
        out.append(choice)
    return out


def tool_calls(text: str, plan: RunPlan) -> list[dict[str, Any]]:
    """OpenAI ``tool_calls`` for a reply that calls the offered tools; [] for prose or a bad call."""
    from tools.calls import parse_tool_calls

    names = {t.name for t in plan.tools}
    calls = parse_tool_calls(text)
    if not calls or any(c.error is not None or c.name not in names for c in calls):
        return []
    if not plan.parallel_tool_calls:  # the client asked for at most one call per turn: the first one
        calls = calls[:1]
    return [{"id": f"call_{secrets.token_hex(12)}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in calls]


def token_logprobs(step: dict[str, Any], i: int, top: int, tokenizer: Any) -> list[dict[str, Any]] | None:
    """OpenAI's ``logprobs.content`` of choice ``i``: each sampled token with its log-probability.

    ``top_logprobs`` lists only the sampled token: the backends return its log-probability, not the
    distribution it was drawn from. None when the backend gave no token ids or log-probabilities.
    """
    ids = (step.get("completion_token_ids") or [None] * (i + 1))[i]
    lps = (step.get("completion_logprobs") or [None] * (i + 1))[i]
    if ids is None or lps is None or tokenizer is None:
        return None
    special = set(getattr(tokenizer, "all_special_ids", None) or [])  # end of turn: not part of the content
    out = []
    for tid, lp in zip(ids, lps):
        if tid in special:
            continue
        token = tokenizer.decode([tid])
        entry = {"token": token, "logprob": round(float(lp), 6), "bytes": list(token.encode("utf-8"))}
        out.append({**entry, "top_logprobs": [entry] if top else []})
    return out


def usage(result: Result) -> dict[str, Any]:
    """The run's usage (every call of the run), with its thinking, planning and search tokens as
    ``completion_tokens_details.reasoning_tokens``."""
    steps = result.record.steps if result.record is not None else []
    answer = sum(s["usage"]["completion_tokens"] for s in steps
                 if s.get("kind") == "model_call" and s.get("name") in ANSWER_STEPS)
    out: dict[str, Any] = result.usage.to_dict()
    out["completion_tokens_details"] = {"reasoning_tokens": max(0, result.usage.completion_tokens - answer)}
    return out


def agentrt_extra(result: Result, streamed: str | None = None, warnings: list[str] | None = None,
                  reason: str = "") -> dict[str, Any]:
    """The ``agentrt`` object: the run's route, reason, status, trajectory id and budget; ``warnings``: the
    request's fields that were accepted but ignored (agentrt.app.server.fields); ``reason``: why the server
    fixed the route before the run (``RunPlan.route_reason``), else the run's own (the router's)."""
    extra = {"route": result.route, "tier": split_action(result.route)[1], "reason": reason or result.reason,
             "status": result.status, "trajectory_id": result.trajectory_id, "budget": result.budget, "truncated": result.truncated}
    if not result.answer and result.status != "ok":  # why there is no answer (the partial text stays in the record)
        extra["error"] = result.error
    if result.decision:  # how sure the router was, and on what evidence (docs/routing.md)
        d = result.decision
        extra["decision"] = {"router": d.get("router"), "router_version": d.get("router_version"),
                             "state": d.get("state"), "fallback": d.get("fallback"), "propensity": d.get("propensity"),
                             "p_success": d.get("p_success"), "evidence": d.get("evidence"), "shadow": d.get("shadow"),
                             "corpus": d.get("corpus", ""), "tier": split_action(str(d.get("action", "")))[1],
                             "prices": d.get("prices") or {}}
    if result.citations:
        extra["citations"] = list(result.citations)
    if streamed is not None:  # the streamed content is not the recorded answer: say what the answer is
        extra["answer"] = result.answer
    if warnings:
        extra["warnings"] = list(warnings)
    return extra


def completion(result: Result, plan: RunPlan, model: str, created: int, tokenizer: Any = None) -> dict[str, Any]:
    """The non-streamed response body."""
    return {
        "id": f"chatcmpl-{result.trajectory_id}", "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": c.index, "message": c.message(result.thought if c.index == 0 else None),
                     "finish_reason": c.finish_reason, "logprobs": c.logprobs_obj()}
                    for c in choices(result, plan, tokenizer)],
        "usage": usage(result), "agentrt": agentrt_extra(result, warnings=plan.warnings, reason=plan.route_reason),
    }


__all__ = ["ChoiceOut", "agentrt_extra", "answer_step", "choices", "completion", "token_logprobs", "tool_calls",
           "usage"]
