"""vLLM's extra chat-completions fields, and multimodal content, before the body meets ``ChatRequest``.

A client written for ``vllm serve`` sends fields OpenAI does not define (``extra_body``). The server
honours those its backends can (``top_k``, ``min_p``, ``repetition_penalty``: declared on ``ChatRequest``
and applied to the answer calls); the others in ``IGNORED`` are taken out of the body and answered with a
line in the response's ``agentrt.warnings`` (never a 400): a client that sends vLLM's default value for
one gets no warning, since it asks for nothing agentrt does differently. Any other unknown field stays a
400 (a typo should not pass silently).

Content parts other than text (``image_url``, ``input_audio``, ``file``, ...) are a 400 naming the part:
the policy models are text-only.
"""

from __future__ import annotations

from typing import Any

from agentrt.app.server.request import RequestError

# vLLM's ChatCompletionRequest fields that agentrt accepts without acting on them: name -> vLLM's default
# (vllm/entrypoints/openai/chat_completion/protocol.py), and OpenAI fields of the same kind.
IGNORED: dict[str, Any] = {
    # sampling
    "best_of": None, "use_beam_search": False, "length_penalty": 1.0, "stop_token_ids": [],
    "include_stop_str_in_output": False, "ignore_eos": False, "min_tokens": 0, "skip_special_tokens": True,
    "spaces_between_special_tokens": True, "truncate_prompt_tokens": None, "prompt_logprobs": None,
    "allowed_token_ids": None, "bad_words": [],
    # templates and prompts
    "echo": False, "add_generation_prompt": True, "continue_final_message": False, "add_special_tokens": False,
    "documents": None, "chat_template": None, "chat_template_kwargs": None, "mm_processor_kwargs": None,
    # structured output (agentrt's is response_format / tools), engine knobs, reasoning
    "structured_outputs": None, "guided_json": None, "guided_regex": None, "guided_choice": None,
    "guided_grammar": None, "guided_decoding_backend": None, "guided_whitespace_pattern": None,
    "structural_tag": None, "priority": 0, "request_id": None, "logits_processors": None,
    "return_tokens_as_token_ids": None, "return_token_ids": None, "cache_salt": None, "kv_transfer_params": None,
    "vllm_xargs": None, "reasoning_effort": None, "include_reasoning": True,
    "max_repetition_pattern_size": 0, "min_repetition_pattern_size": 0, "repetition_min_count": 0,
    # OpenAI fields with no meaning for a local text model
    "modalities": None, "audio": None, "prediction": None, "web_search_options": None, "verbosity": None,
    "prompt_cache_key": None, "safety_identifier": None,
}

_WHY = {
    "chat_template": "the template is the operator's choice (agentrt serve --chat-template)",
    "chat_template_kwargs": "the routes set the template's switches themselves (thinking on or off per call)",
    "reasoning_effort": "the router decides how much to think (pass route/budget to steer it)",
    "include_reasoning": "reasoning always goes to reasoning_content",
    "best_of": "one candidate per choice is generated", "use_beam_search": "the backends sample, never beam-search",
}


def take_vllm_fields(data: dict[str, Any]) -> list[str]:
    """Remove ``IGNORED`` fields from ``data`` (a chat body) and return a warning for each that asks for
    something other than vLLM's default; ``RequestError`` for a non-text content part."""
    check_text_only(data.get("messages"))
    warnings = []
    for name, default in IGNORED.items():
        if name not in data:
            continue
        value = data.pop(name)
        if value is None or value == default or (isinstance(default, list) and value == []):
            continue
        why = _WHY.get(name, "agentrt's backends do not implement it")
        warnings.append(f"{name} is ignored: {why}")
    return warnings


def check_text_only(messages: Any) -> None:
    """A 400 naming the first content part that is not text (``messages[i].content[j]``)."""
    if not isinstance(messages, list):
        return  # ChatRequest says what is wrong with it
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if isinstance(kind, str) and kind != "text":
                raise RequestError(f"messages[{i}].content[{j}]: {kind[:64]} parts are not supported: the model is "
                                   "text-only; send the content as text parts", f"messages.{i}.content.{j}",
                                   code="unsupported_content")


__all__ = ["IGNORED", "check_text_only", "take_vllm_fields"]
