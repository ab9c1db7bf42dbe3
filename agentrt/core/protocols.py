"""Protocols the rooms talk through. Implementations live in one file each.

``ModelBackend`` is what every backend is. The optional abilities some backends have are declared here
too, each a small protocol a caller checks with ``isinstance`` (not a ``hasattr`` probe): ``Scorer``
(log-probabilities of given continuations: hf), ``Closable`` (resources to free: vllm, openai, hf),
``Tokenized`` (a local tokenizer: hf, vllm, openai with its model folder) and ``LocalModel`` (weights
in a local folder: hf, vllm). ``Runner`` is what the SDK's helpers (events, session) need from an agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentrt.core.config import Settings
from agentrt.core.request import RunHooks, RunRequest
from agentrt.core.types import Completion, GenParams, Message


@runtime_checkable
class ModelBackend(Protocol):
    """A chat model. Two methods and a little metadata; implementations are one file each.

    ``chat`` continues the final message when it is an assistant message (a prefill), otherwise it
    opens a new assistant turn. ``count_tokens`` uses the model's own chat template, so the budget
    can be checked before a call. A backend that can stream calls ``params.on_token`` with each new
    piece of text as it is generated (see ``GenParams``); one that cannot ignores it.
    """

    name: str
    context_length: int

    async def chat(self, messages: list[Message], params: GenParams) -> Completion: ...

    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        """Prompt tokens of ``messages`` as ``chat`` would send them (``params`` for template switches)."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """A backend that scores text: the log-probability of each continuation after ``messages``."""

    async def score(self, messages: list[Message], continuations: list[str]) -> tuple[list[float], int]:
        """Each continuation's summed log-probability, and the prompt tokens the pass cost."""
        ...


@runtime_checkable
class Completer(Protocol):
    """A backend that continues raw token ids, no chat template (the server's ``/v1/completions``)."""

    async def complete(self, prompt_ids: list[int], params: GenParams) -> Completion: ...


@runtime_checkable
class Closable(Protocol):
    """A backend holding resources (threads, an engine, connections) that ``close`` frees."""

    def close(self) -> None: ...


@runtime_checkable
class Tokenized(Protocol):
    """A backend with a local tokenizer (Hugging Face's, or a lean one with the same calls)."""

    tokenizer: Any


@runtime_checkable
class LocalModel(Protocol):
    """A backend whose weights are in a local folder (the router's fingerprint names it)."""

    path: Path


@runtime_checkable
class RunResult(Protocol):
    """What a run returns, as the SDK's helpers read it (``agentrt.app.agent.Result``)."""

    answer: str
    route: str
    trajectory_id: str


class Runner(Protocol):
    """What streaming and sessions need from an agent (``agentrt.app.agent.Agent``), so they need not import it."""

    settings: Settings

    @property
    def policy(self) -> ModelBackend: ...

    async def run_request(self, req: RunRequest, hooks: RunHooks | None = None) -> Any: ...

    def request(self, question: str, **options: Any) -> tuple[RunRequest, RunHooks]: ...


__all__ = ["Closable", "Completer", "LocalModel", "ModelBackend", "RunResult", "Runner", "Scorer", "Tokenized"]
