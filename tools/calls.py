"""Tool calls from models: parse them (OpenAI ``tool_calls``, Hermes/Qwen ``<tool_call>`` text, plain
JSON) and build the JSON schema that constrains a small model to well-formed calls of allowed tools.

Parsing never raises: a malformed call comes back as a ``ToolCall`` with ``error`` set, which the
tool loop turns into an observation the model sees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tools.base import Tool

FINAL_ANSWER = "final_answer"
_TAG_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One requested call. ``arguments`` is a dict when well formed; ``error`` says what was wrong."""

    name: str
    arguments: Any = None
    id: str = ""
    error: str | None = None
    raw: str = ""


def parse_tool_calls(message: str | dict[str, Any]) -> list[ToolCall]:
    """All tool calls in a model's reply; ``[]`` when the reply is a plain answer.

    Accepts an OpenAI chat message or response dict (``tool_calls`` with JSON-string arguments), or
    text holding ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks, or a bare JSON
    object / list of objects with ``name`` and ``arguments`` (``parameters`` is accepted too).
    """
    if isinstance(message, dict):
        if "choices" in message and message["choices"]:
            message = message["choices"][0].get("message", {}) or {}
        if message.get("tool_calls"):
            return [_from_openai(c) for c in message["tool_calls"]]
        return parse_tool_calls(str(message.get("content") or ""))
    text = message.strip()
    if "<tool_call>" in text:
        return [_from_json_text(block) for block in _TAG_RE.findall(text)]
    fenced = _FENCE_RE.match(text)
    if fenced:
        text = fenced.group(1)
    if not text.startswith(("{", "[")):
        return []  # prose: a plain answer, not a call
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text)  # trailing chatter after the JSON
        except json.JSONDecodeError as e:
            return [ToolCall("", error=f"the tool call is not valid JSON ({e.msg} at char {e.pos})", raw=text)]
    objs = obj if isinstance(obj, list) else [obj]
    return [_from_obj(o, text) for o in objs]


def _from_openai(call: Any) -> ToolCall:
    if not isinstance(call, dict):
        return ToolCall("", error="a tool call must be an object", raw=str(call))
    fn = call.get("function") or {}
    name, args = str(fn.get("name") or ""), fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(name, id=str(call.get("id", "")), raw=args,
                            error=f"arguments of {name or 'the call'} are not valid JSON ({e.msg})")
    return _checked(name, args, str(call.get("id", "")), json.dumps(call, default=str))


def _from_json_text(text: str) -> ToolCall:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return ToolCall("", error=f"the tool call is not valid JSON ({e.msg} at char {e.pos})", raw=text)
    return _from_obj(obj, text)


def _from_obj(obj: Any, raw: str) -> ToolCall:
    if not isinstance(obj, dict):
        return ToolCall("", error='a tool call must be {"name": ..., "arguments": {...}}', raw=raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return _checked(str(obj.get("name") or ""), args, str(obj.get("id", "")), raw)


def _checked(name: str, args: Any, call_id: str, raw: str) -> ToolCall:
    if not name:
        return ToolCall("", args, call_id, 'the tool call has no "name"', raw)
    if not isinstance(args, dict):
        return ToolCall(name, args, call_id, f'"arguments" of {name} must be a JSON object', raw)
    return ToolCall(name, args, call_id, None, raw)


def final_answer_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 400}},
            "required": ["answer"], "additionalProperties": False}


def call_schema(tools: Sequence[Tool], *, final_answer: bool = True) -> dict[str, Any]:
    """JSON schema of one call: ``anyOf`` of ``{"name": const, "arguments": <tool schema>}`` per tool,
    plus ``final_answer`` (``{"answer": str}``) so the model can stop. Pass it as
    ``GenParams(json_schema=...)`` to constrain decoding."""
    options = [_option(t.name, t.decoding_schema()) for t in tools]
    if final_answer:
        options.append(_option(FINAL_ANSWER, final_answer_schema()))
    if not options:
        raise ValueError("call_schema needs at least one tool or final_answer=True")
    return options[0] if len(options) == 1 else {"anyOf": options}


def _option(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"name": {"const": name}, "arguments": parameters or {"type": "object"}},
            "required": ["name", "arguments"], "additionalProperties": False}


def describe_tools(tools: Sequence[Tool], *, final_answer: bool = True) -> str:
    """The tool list for a system prompt: one line of JSON per tool (name, description, parameters)."""
    lines = [json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters},
                        ensure_ascii=False) for t in tools]
    if final_answer:
        lines.append(json.dumps({"name": FINAL_ANSWER, "description": "Give the final answer to the user.",
                                 "parameters": final_answer_schema()}))
    return "\n".join(lines)
