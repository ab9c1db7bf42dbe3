"""What the batcher passes between its scheduler and its runner: a request, its rows, the counters.

Kept apart from both (as nano-vllm's ``sequence.py``) so the scheduler (``scheduler.py``) and the model
runner (``runner.py``) each import it and neither imports the other's module for its types.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.core.types import GenParams

if TYPE_CHECKING:  # torch and the detokenizer are only named in annotations here
    import torch

    from agentrt.backends.hf.detok import TextStream


@dataclass(slots=True)
class BatcherStats:
    """What the batcher did; tests read it to prove requests shared forward passes."""

    requests: int = 0
    batches: int = 0
    rows: int = 0
    forward_passes: int = 0
    max_batch_rows: int = 0
    tokens_generated: int = 0
    joined: int = 0  # requests that joined a batch already decoding
    prompt_tokens: int = 0
    prefix_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache, not a forward pass
    prefill_s: float = 0.0  # time in prompt forward passes
    decode_s: float = 0.0  # time in one-token forward passes


@dataclass(slots=True)
class Request:
    """One ``chat`` call: its prompt, parameters, the future its caller awaits and its n rows."""

    prompt_ids: list[int]
    params: GenParams
    future: concurrent.futures.Future
    submitted: float
    rows: list[Row] = field(default_factory=list)


@dataclass(slots=True)
class Row:
    """One choice of a request as it decodes."""

    request: Request
    index: int
    generator: torch.Generator | None
    grammar: Any = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish: str | None = None
    stream: TextStream | None = None  # only when the request streams (params.on_token)
