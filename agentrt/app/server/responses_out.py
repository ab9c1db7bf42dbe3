"""The way out of ``/v1/responses``: a chat completion as a ``response`` object, and the chat path's SSE
chunks (``server.stream.sse``) retold as Responses events (``ResponseStream``).

Output items: a ``reasoning`` item (the run's thought, a plan, a searcher's work: chat's
``reasoning_content``), ``function_call`` items (chat's ``tool_calls``; the client runs them) and/or a
``message`` item with one ``output_text`` part. ``status`` is ``incomplete`` when the answer was cut
(``max_output_tokens``) or withheld (``content_filter``: no real answer, agentrt.core.answer).

The stream: the chat stream already does the run's work (the deadline, a client that leaves, the
answer's remainder, tool calls parsed from the whole reply, the usage chunk, errors in the stream's
shape); ``ResponseStream`` only renames what it says. Each item opens with ``response.output_item.added``
and closes with ``response.output_item.done``; a reasoning item streams ``response.reasoning_text.delta``,
a message ``content_part.added``, ``output_text.delta``..., ``output_text.done``, ``content_part.done``,
a function call ``function_call_arguments.delta``/``.done``. The stream starts with ``response.created``
+ ``response.in_progress`` and ends with ``response.completed`` (``response.incomplete`` for a cut or
withheld answer), or ``error`` + ``response.failed``.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from typing import Any, AsyncIterator, Callable

# ``req`` below is a ``responses.Any`` (typed Any: that module imports this one)


# -- the response: a chat completion as a Responses object --------------------------------------------------------

def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def reasoning_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"id": item_id or _new_id("rs"), "type": "reasoning", "summary": [], "status": "completed",
            "content": [{"type": "reasoning_text", "text": text}]}


def message_item(text: str, logprobs: list[dict[str, Any]] | None = None, item_id: str | None = None,
                 status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or _new_id("msg"), "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}]}


def call_item(call: dict[str, Any], item_id: str | None = None) -> dict[str, Any]:
    return {"id": item_id or _new_id("fc"), "type": "function_call", "status": "completed", "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"]}


def responses_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": usage["total_tokens"]}


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_object(rid: str, req: Any, model: str, created: int, output: list[dict[str, Any]], *,
                    finish: str | None = None, usage: dict[str, Any] | None = None,
                    agentrt: dict[str, Any] | None = None, status: str | None = None,
                    error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``response`` object, echoing the request's settings as OpenAI does."""
    if status is None:
        status = "incomplete" if finish in _INCOMPLETE else "completed"
    body = {"id": rid, "object": "response", "created_at": created, "model": model, "status": status,
            "error": error, "incomplete_details": {"reason": _INCOMPLETE[finish]} if status == "incomplete" else None,
            "instructions": req.instructions, "metadata": req.metadata or {}, "output": output,
            "parallel_tool_calls": req.parallel_tool_calls is not False, "temperature": req.temperature,
            "top_p": req.top_p, "tool_choice": req.tool_choice or "auto", "tools": req.tools or [],
            "max_output_tokens": req.max_output_tokens, "previous_response_id": req.previous_response_id,
            "store": req.store is not False, "text": req.text or {"format": {"type": "text"}},
            "truncation": req.truncation or "disabled", "usage": responses_usage(usage), "user": req.user,
            "background": False}
    if status in ("completed", "incomplete"):
        body["completed_at"] = int(time.time())
    if agentrt is not None:
        body["agentrt"] = agentrt
    return body


def from_completion(cc: dict[str, Any], req: Any, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``response`` of a chat completion, and the assistant message it adds to the conversation."""
    choice = cc["choices"][0]
    msg = choice["message"]
    output = [reasoning_item(msg["reasoning_content"])] if msg.get("reasoning_content") else []
    calls = msg.get("tool_calls") or []
    output += [call_item(c) for c in calls]
    if msg.get("content") is not None or not calls:
        output.append(message_item(msg.get("content") or "", (choice.get("logprobs") or {}).get("content")))
    rid = "resp_" + cc["id"].removeprefix("chatcmpl-")
    return (response_object(rid, req, model, cc["created"], output, finish=choice["finish_reason"],
                            usage=cc["usage"], agentrt=cc.get("agentrt")), assistant_message(output))


def assistant_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat message of a response's output (what a chained request's history holds)."""
    text = "".join(p["text"] for item in output if item["type"] == "message" for p in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call"]
    return {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}


class ResponseStream:
    """One request's event stream; ``keep(response, assistant_message)`` is called when it completes."""

    def __init__(self, req: Any, model: str, created: int,
                 keep: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
        self.req, self.model, self.created, self.keep = req, model, created, keep
        self.rid = ""
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the reasoning or message item being streamed
        self.calls: dict[int, dict[str, Any]] = {}  # a tool call's index in the chat stream -> its item
        self.finish: str | None = None
        self.agentrt: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.logprobs: list[dict[str, Any]] | None = None
        self._seq = itertools.count()

    def event(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": next(self._seq), **fields}
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"

    def response(self, **kw: Any) -> dict[str, Any]:
        return response_object(self.rid, self.req, self.model, self.created, self.output, **kw)

    async def events(self, chunks: AsyncIterator[str]) -> AsyncIterator[str]:
        failure = None
        try:
            async for frame in chunks:
                if not isinstance(frame, str):  # the chat stream's note of the route, for its headers
                    continue
                data = frame.removeprefix("data:").strip()
                if data == "[DONE]":
                    break
                payload = json.loads(data)
                if not self.rid:
                    run = str(payload.get("id") or "").removeprefix("chatcmpl-")
                    self.rid = f"resp_{run}" if run and run != "pending" else _new_id("resp")
                    yield self.event("response.created", response=self.response(status="in_progress"))
                    yield self.event("response.in_progress", response=self.response(status="in_progress"))
                if isinstance(payload.get("error"), dict):  # the chat stream's error frame; [DONE] follows
                    failure = payload["error"]
                    continue
                for choice in payload.get("choices") or []:
                    for out in self._choice(choice, payload):
                        yield out
                if payload.get("usage"):
                    self.usage = payload["usage"]
        finally:
            await chunks.aclose()  # a client that left: the chat stream cancels the run
        if failure is None and not any(item["type"] in ("message", "function_call") for item in self.output):
            for out in self._text("message", ""):  # no answer (withheld or empty): still one message, as unstreamed
                yield out
        for out in self._close():
            yield out
        if failure is not None:
            error = {"code": str(failure.get("code") or failure.get("type") or "server_error"),
                     "message": str(failure.get("message") or "the run failed")}
            yield self.event("error", code=error["code"], message=error["message"], param=failure.get("param"))
            yield self.event("response.failed", response=self.response(status="failed", error=error,
                                                                       usage=self.usage, agentrt=self.agentrt))
            return
        response = self.response(finish=self.finish, usage=self.usage, agentrt=self.agentrt)
        self.keep(response, assistant_message(self.output))
        yield self.event(f"response.{response['status']}", response=response)

    def _choice(self, choice: dict[str, Any], payload: dict[str, Any]) -> list[str]:
        if choice.get("index", 0) != 0:  # Responses has one output; n is not passed, so there is no other
            return []
        delta = choice.get("delta") or {}
        out: list[str] = []
        if delta.get("reasoning_content"):
            out += self._text("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            out += self._text("message", delta["content"])
        for call in delta.get("tool_calls") or []:
            out += self._call(call)
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]
            self.agentrt = payload.get("agentrt")
            self.logprobs = (choice.get("logprobs") or {}).get("content")
        return out

    def _text(self, kind: str, text: str) -> list[str]:
        """A text delta of a reasoning or message item, opening the item first when it is not open."""
        out: list[str] = []
        if self.open is None or self.open["type"] != kind:
            out += self._close()
            item = (reasoning_item("") if kind == "reasoning" else message_item("")) | {"status": "in_progress"}
            part, item["content"] = item["content"][0], []
            self.open = item
            self.output.append(item)
            index = len(self.output) - 1
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            out.append(self.event("response.content_part.added", item_id=item["id"], output_index=index,
                                  content_index=0, part=part))
            item["content"] = [part]
        if not text:
            return out
        self.open["content"][0]["text"] += text
        where = {"item_id": self.open["id"], "output_index": self.output.index(self.open), "content_index": 0}
        if kind == "reasoning":
            return [*out, self.event("response.reasoning_text.delta", delta=text, **where)]
        return [*out, self.event("response.output_text.delta", delta=text, logprobs=[], **where)]

    def _call(self, call: dict[str, Any]) -> list[str]:
        out: list[str] = []
        index = call.get("index", 0)
        fn = call.get("function") or {}
        if index not in self.calls:
            out += self._close()
            item = call_item({"id": call.get("id") or _new_id("call"),
                              "function": {"name": fn.get("name") or "", "arguments": ""}}) | {"status": "in_progress"}
            self.calls[index] = item
            self.output.append(item)
            out.append(self.event("response.output_item.added", output_index=len(self.output) - 1, item=dict(item)))
        item = self.calls[index]
        if fn.get("arguments"):
            item["arguments"] += fn["arguments"]
            out.append(self.event("response.function_call_arguments.delta", item_id=item["id"],
                                  output_index=self.output.index(item), delta=fn["arguments"]))
        return out

    def _close(self) -> list[str]:
        """The done events of every item still open (the streamed text item, the tool calls)."""
        out: list[str] = []
        item, self.open = self.open, None
        if item is not None:
            index, part = self.output.index(item), item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            if item["type"] == "reasoning":
                out.append(self.event("response.reasoning_text.done", text=part["text"], **where))
            else:
                if self.logprobs:
                    part["logprobs"] = self.logprobs
                out.append(self.event("response.output_text.done", text=part["text"], logprobs=part["logprobs"],
                                      **where))
            out.append(self.event("response.content_part.done", part=part, **where))
            item["status"] = "completed"
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        for item in self.calls.values():
            if item["status"] == "completed":
                continue
            index = self.output.index(item)
            out.append(self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                  name=item["name"], arguments=item["arguments"]))
            item["status"] = "completed"
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out


__all__ = ["ResponseStream", "assistant_message", "call_item", "from_completion", "message_item", "reasoning_item",
           "response_object", "responses_usage"]
