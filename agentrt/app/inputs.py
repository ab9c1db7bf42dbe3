"""Request validation shared by the SDK, the CLI and the server: one clear error before any work."""

from __future__ import annotations

import json
from typing import Any

from agentrt.core.errors import InputError
from agentrt.core.types import Message, as_messages
from agentrt.routes import check_route


def check_text(text: Any, what: str) -> str:
    """``text`` if it is a non-empty string of valid Unicode, else ``InputError``."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"the {what} is empty; pass a non-empty {what}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"the {what} is not valid Unicode (it holds a lone surrogate); send UTF-8 text") from None
    return text


def check_request(question: Any, history: Any, system: Any, budget: Any, route: str | None,
                  thinking_cap: Any, samples: Any, temperature: Any, metadata: Any = None) -> list[Message]:
    """Validate a run's arguments; returns its messages (the history, then the question as the user's turn)."""
    check_text(question, "question")
    if metadata is not None:
        try:  # it goes into the record as JSON: refuse now what the writer could not write later
            json.dumps(metadata, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError) as e:
            raise InputError(f"metadata must be JSON-serializable UTF-8 text and numbers ({e}); "
                             "pass plain str/int/float/bool/list/dict values") from None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise InputError(f"budget must be a positive number of tokens, got {budget!r}")
    if route is not None:
        check_route(route)
    if thinking_cap is not None and (isinstance(thinking_cap, bool) or not isinstance(thinking_cap, int)
                                     or thinking_cap < 0):
        raise InputError(f"thinking_cap must be an integer >= 0, got {thinking_cap!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 64:
        raise InputError(f"samples must be an integer from 1 to 64, got {samples!r}")
    if temperature is not None and not 0 <= temperature <= 2:
        raise InputError(f"temperature must be between 0 and 2, got {temperature}")
    if system is not None:
        check_text(system, "system prompt")
    try:
        turns = as_messages(list(history or []))
    except (KeyError, TypeError, AttributeError):
        raise InputError("history must be a list of messages ({'role': 'user'|'assistant', 'content': str})") from None
    for m in turns:
        if m.role not in ("user", "assistant"):
            raise InputError(f"history holds a {m.role!r} message; use role 'user' or 'assistant' (pass system= apart)")
        check_text(m.content, "history message")
    return turns + [Message("user", question)]


def check_answer_options(max_tokens: Any, stop: Any, top_p: Any, n: Any, json_schema: Any) -> dict[str, Any]:
    """Validate the answer knobs of a run (``Agent.arun``'s max_tokens, stop, top_p, n, json_schema);
    returns them as ``RouteOptions`` fields."""
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise InputError(f"max_tokens must be a positive number of tokens, got {max_tokens!r}")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if not all(isinstance(s, str) and s for s in stops):
        raise InputError(f"stop must be a non-empty string or a list of them, got {stop!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise InputError(f"top_p must be in (0, 1], got {top_p!r}")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise InputError(f"n must be an integer from 1 to 64, got {n!r}")
    if json_schema is not None and not isinstance(json_schema, dict):
        raise InputError("json_schema must be a JSON schema object (a dict)")
    return {"answer_max_tokens": max_tokens, "stop": stops, "top_p": top_p, "n": n, "json_schema": json_schema}
