"""Checks the backends share: request limits, and the typed options of a backend spec."""

from __future__ import annotations

from typing import Any

from agentrt.core.errors import ConfigError, InputError
from agentrt.core.types import GenParams


def check_request(prompt_tokens: int, params: GenParams, context_length: int, model: str) -> None:
    """``n`` and ``max_tokens`` are sane and the prompt plus ``max_tokens`` fits the model's context."""
    if params.n < 1 or params.max_tokens < 0:
        raise InputError("n must be >= 1 and max_tokens >= 0")
    if prompt_tokens + params.max_tokens > context_length:
        raise InputError(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({params.max_tokens}) exceeds the "
            f"context of {model} ({context_length} tokens); shorten the input"
        )


def parse_options(query: str, allowed: dict[str, type], what: str) -> dict[str, Any]:
    """``a=1&b=true`` (the part of a backend spec after ``?``) -> typed options; ConfigError names the bad one."""
    options: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        key, sep, value = part.partition("=")
        if not sep or key not in allowed:
            raise ConfigError(f"bad {what} option {part!r}; use KEY=VALUE with KEY one of {', '.join(allowed)}")
        kind = allowed[key]
        try:
            if kind is bool:
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                options[key] = value.lower() in ("1", "true", "yes")
            else:
                options[key] = kind(value)
        except ValueError:
            raise ConfigError(f"bad {what} option {part!r}: {key} must be a {kind.__name__}") from None
    return options
