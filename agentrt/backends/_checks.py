"""Request checks every local backend applies before queueing a request."""

from __future__ import annotations

from agentrt.errors import InputError
from agentrt.types import GenParams


def check_request(prompt_tokens: int, params: GenParams, context_length: int, model: str) -> None:
    """``n`` and ``max_tokens`` are sane and the prompt plus ``max_tokens`` fits the model's context."""
    if params.n < 1 or params.max_tokens < 0:
        raise InputError("n must be >= 1 and max_tokens >= 0")
    if prompt_tokens + params.max_tokens > context_length:
        raise InputError(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({params.max_tokens}) exceeds the "
            f"context of {model} ({context_length} tokens); shorten the input"
        )
