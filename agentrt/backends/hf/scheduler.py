"""The scheduler of the transformers batcher: requests, admission, late joins and finishing rows.

One thread owns the model runner (``runner.py``). Requests that arrive within the batch window start
together; requests that arrive while a batch decodes are prefilled on their own and join the running batch
(continuous batching; their KV left-padded to its length, ``kvcache.Group.merge``). After every pass the
scheduler records each row's token, checks its stop conditions, answers each request the moment its rows
are done and takes finished rows out of the batch so they cost nothing. Every row keeps its own max_tokens,
stop strings, sampling parameters, seed and grammar. A request with ``params.on_token`` gets each row's
new text after every pass (``detok.TextStream``); without one, nothing is decoded until a row ends.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from typing import Any

import torch

from agentrt.backends.hf.detok import TextStream
from agentrt.backends.hf.kvcache import Group
from agentrt.backends.hf.runner import ModelRunner
from agentrt.backends.hf.sequence import BatcherStats, Request, Row
from agentrt.core.errors import BackendError
from agentrt.core.types import Choice, Completion, GenParams, Usage


class Scheduler:
    """The batcher thread: takes queued requests, runs them through ``runner``, resolves their futures."""

    def __init__(self, runner: ModelRunner, stats: BatcherStats, *, name: str, max_batch: int,
                 batch_window_s: float) -> None:
        self.runner = runner
        self.stats = stats
        self.name = name
        self.max_batch = max_batch
        self.batch_window_s = batch_window_s
        self._queue: queue.Queue[Request | None] = queue.Queue()
        self._inflight: list[Request] = []  # owned by the batcher thread
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name=f"agentrt-batcher-{name}", daemon=True)
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: GenParams) -> concurrent.futures.Future:
        """Queue a request; the future resolves to a Completion."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put(Request(prompt_ids, params, fut, time.perf_counter()))
        return fut

    def close(self, timeout: float | None = 120.0) -> None:
        """Stop after the batch in flight (cancelled requests stop at once) and wait for the thread."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- the batcher thread --------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first] + self._take(first.params.n, wait=True)
            try:
                with torch.inference_mode():
                    self._run(batch)
            except Exception as e:  # a model failure fails the requests in flight, not the thread
                for req in self._inflight:
                    _settle(req.future, BackendError(f"{self.name}: decoding failed: {e}"))
            self._inflight = []
            if self._closing:
                return

    def _take(self, rows: int, *, wait: bool) -> list[Request]:
        """More queued requests while there is room: within the batch window when a batch forms, only
        those already waiting while it runs."""
        taken: list[Request] = []
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

    def _run(self, batch: list[Request]) -> None:
        """Decode ``batch`` and every request that joins it until all their rows are done."""
        self.stats.batches += 1
        group: Group | None = None
        while batch or group is not None:
            if batch:
                if group is not None:
                    self.stats.joined += len(batch)
                joined = self._admit(batch)
                if joined is not None:
                    group = joined if group is None else group.merge(joined)
                group = self._drop_finished(group)
            if group is not None:
                self._step(group, self.runner.decode(group))
                group = self._drop_finished(group)
            size = len(group.rows) if group is not None else 0
            batch = self._take(size, wait=False) if group is None or self.runner.mergeable else []
            self.stats.max_batch_rows = max(self.stats.max_batch_rows, size + sum(r.params.n for r in batch))

    def _admit(self, batch: list[Request]) -> Group | None:
        """Give ``batch`` its rows and prefill it: each prompt's pass picks its rows' first tokens and the
        prompts' groups merge into one; caches that cannot merge take one left-padded pass instead."""
        rows: list[Row] = []
        for req in batch:
            for i in range(req.params.n):
                row = Row(req, i, self.runner.generator(req.params, i), self.runner.grammar(req.params))
                if req.params.on_token is not None:
                    row.stream = TextStream(self.runner.tokenizer, req.params.stop)
                if req.params.max_tokens <= 0:
                    row.finish = "length"
                req.rows.append(row)
                rows.append(row)
            self._inflight.append(req)
        self.stats.requests += len(batch)
        self.stats.rows += len(rows)
        if not self.runner.mergeable:
            live = [r for r in rows if r.finish is None]
            if not live:
                return None
            group, logits = self.runner.prefill_padded(live)
            self._step(group, logits)
            return group
        groups = []
        for req in batch:
            live = [r for r in req.rows if r.finish is None]
            if live:
                group, logits = self.runner.prefill(req.prompt_ids, live)
                self._step(group, logits)
                groups.append(group)
        if not groups:
            return None
        for g in groups[1:]:
            groups[0].merge(g)
        return groups[0]

    def _step(self, group: Group, logits: torch.Tensor) -> None:
        """Pick every row's next token, record it, and feed it to the group's next pass."""
        next_ids, logprobs = self.runner.sample(group.rows, logits)
        # one gather and two lists for the whole batch: per-row tensor indexing is a per-row cost every step
        chosen = logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1).tolist()
        for i, (r, tok) in enumerate(zip(group.rows, next_ids.tolist())):
            if r.request.future.cancelled():  # the caller gave up (Ctrl-C): stop its rows
                r.finish = "length"
                continue
            r.tokens.append(tok)
            r.logprobs.append(chosen[i])
            self.stats.tokens_generated += 1
            if r.grammar is not None:
                r.grammar.accept_token(tok)
            self._check_finished(r)
            if r.stream is not None:
                _send(r, r.stream.finish(r.text) if r.finish is not None else r.stream.push(tok))
        group.advance(next_ids)

    def _check_finished(self, r: Row) -> None:
        p = r.request.params
        tok = r.tokens[-1]
        if tok in self.runner.eos_ids and r.grammar is None:
            r.finish = "stop"
        elif r.grammar is not None and r.grammar.is_terminated():
            r.finish = "stop"
        if p.stop or r.finish is not None or len(r.tokens) >= p.max_tokens:
            r.text = self.runner.tokenizer.decode(r.tokens, skip_special_tokens=True)
        if p.stop and r.finish is None:
            cut = min((r.text.find(s) for s in p.stop if s in r.text), default=-1)
            if cut >= 0:
                r.text = r.text[:cut]
                r.finish = "stop"
        if r.finish is None and len(r.tokens) >= p.max_tokens:
            r.finish = "length"

    def _drop_finished(self, group: Group | None) -> Group | None:
        """Answer the requests whose rows are all done, and take their rows out of the batch."""
        for i, r in enumerate(group.rows if group is not None else []):
            # before answering: the caller's next turn usually starts with these tokens (see store_row)
            if r.finish is not None and r.tokens and not r.request.future.cancelled():
                self.runner.prefix_cache.store_row(r.request.prompt_ids + r.tokens[:-1], group, i)
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

    def _completion(self, req: Request) -> Completion:
        choices = [
            Choice(r.text, r.tokens, r.logprobs if req.params.logprobs else None, r.finish or "length")
            for r in req.rows
        ]
        usage = Usage(len(req.prompt_ids), sum(len(r.tokens) for r in req.rows))
        return Completion(choices, list(req.prompt_ids), usage, self.name, time.perf_counter() - req.submitted)


def _send(r: Row, piece: str) -> None:
    """Hand a row's new text to its request's ``on_token``; a failing callback never stops the batcher."""
    if piece:
        try:
            r.request.params.on_token(r.index, piece)
        except Exception:  # noqa: BLE001 - the caller's hook; the completion still arrives
            pass


def _settle(future: concurrent.futures.Future, outcome: Any) -> None:
    """Resolve a request's future unless its caller already cancelled it (that is not an error)."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass
