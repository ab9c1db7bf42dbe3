"""KV-cache bookkeeping for the transformers batcher: the running batch and the prefix cache.

Both work on caches whose layers are plain growing ones (``keys``/``values`` shaped batch x heads x seq x
dim): transformers' ``DynamicCache`` for models transformers runs, ``LeanCache`` (the same interface, no
transformers import) for the lean Llama of ``llama.py``. Models with sliding-window layers still decode,
but without joining a running batch and without prefix reuse (``joinable`` is false for them).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch


class _Growing:
    """Appends in place into spare capacity instead of concatenating (mixed into a cache layer class).

    transformers' layer copies the whole cache on every decode step (``torch.cat``); at batch 8 with a few
    hundred cached tokens that copy is a large part of a CPU step. Here ``keys``/``values`` are views of
    buffers that double when full. Code that assigns new ``keys``/``values`` (batch selection, merging)
    is noticed on the next update, which adopts them into fresh buffers.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kbuf = self._vbuf = self._view = None
        self._len = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self._view is None or self.keys is not self._view or self._len + n > self._kbuf.shape[-2]:
            self._adopt(key_states, n)
        self._kbuf[..., self._len:self._len + n, :] = key_states
        self._vbuf[..., self._len:self._len + n, :] = value_states
        self._len += n
        self.keys = self._view = self._kbuf[..., : self._len, :]
        self.values = self._vbuf[..., : self._len, :]
        return self.keys, self.values

    def _adopt(self, template: torch.Tensor, extra: int) -> None:
        """Fresh buffers holding the current keys/values with room for ``extra`` more tokens and then some."""
        old = self.keys.shape[-2] if self.keys is not None and self.keys.numel() else 0
        capacity = old + extra + max(64, old)
        shape = (*template.shape[:-2], capacity, template.shape[-1])
        self._kbuf, self._vbuf = template.new_empty(shape), template.new_empty(shape)
        if old:
            self._kbuf[..., :old, :] = self.keys
            self._vbuf[..., :old, :] = self.values
        self._len = old


class _PlainLayer:
    """The part of transformers' ``DynamicLayer`` the batcher uses, without importing transformers."""

    is_sliding = False

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.is_initialized = False

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.keys, self.values = key_states.new_empty(0), value_states.new_empty(0)
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return 0 if not self.is_initialized or self.keys.numel() == 0 else self.keys.shape[-2]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self.keys = self.keys.repeat_interleave(repeats, dim=0)
            self.values = self.values.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self.keys, self.values = self.keys[indices, ...], self.values[indices, ...]


class LeanLayer(_Growing, _PlainLayer):
    """A growing cache layer of ``LeanCache``."""


class LeanCache:
    """``DynamicCache``'s interface as the batcher and ``llama.py`` use it: ``layers``, ``update``,
    ``get_seq_length`` and the batch operations; every layer grows in place (``_Growing``)."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [LeanLayer() for _ in range(num_layers)]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layers[layer_idx].update(key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].get_seq_length()

    def batch_repeat_interleave(self, repeats: int) -> None:
        for layer in self.layers:
            layer.batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for layer in self.layers:
            layer.batch_select_indices(indices)


_GROWING_DYNAMIC: list[type] = []  # transformers' DynamicLayer with _Growing mixed in, made on first use


def _growing_dynamic_layer() -> type:
    if not _GROWING_DYNAMIC:
        from transformers.cache_utils import DynamicLayer

        _GROWING_DYNAMIC.append(type("GrowingLayer", (_Growing, DynamicLayer), {"__doc__": _Growing.__doc__}))
    return _GROWING_DYNAMIC[0]


def new_cache(config: Any) -> Any:
    """An empty cache for ``config`` whose plain layers grow in place: a ``LeanCache`` for the lean Llama's
    config (``llama.LlamaConfig``), else transformers' ``DynamicCache`` (sliding layers stay as they are)."""
    if getattr(config, "lean", False):
        return LeanCache(config.num_hidden_layers)
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    past = DynamicCache(config=config)
    growing = _growing_dynamic_layer()
    past.layers = [growing() if type(layer) is DynamicLayer else layer for layer in past.layers]
    return past


def joinable(past: Any) -> bool:
    """Every cache layer is a plain growing one, so caches can be padded, merged and sliced."""
    plain: tuple[type, ...] = (_Growing,)
    if "transformers.cache_utils" in sys.modules:  # a transformers model's cache: its plain layers count too
        plain += (sys.modules["transformers.cache_utils"].DynamicLayer,)
    return all(isinstance(layer, plain) and not layer.is_sliding for layer in past.layers)


def _zeros_like_columns(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.new_zeros(*t.shape[:-2], n, t.shape[-1])


@dataclass(slots=True)
class Group:
    """Rows decoding together and their tensors: the next input ids, positions, the attention mask (one
    column per cached token plus the next one) and the KV cache."""

    rows: list[Any]
    past: Any
    step_ids: torch.Tensor
    step_pos: torch.Tensor
    mask: torch.Tensor

    @property
    def joinable(self) -> bool:
        return joinable(self.past)

    def advance(self, next_ids: torch.Tensor) -> None:
        """Feed ``next_ids`` on the next forward pass."""
        self.step_ids = next_ids.unsqueeze(-1)
        self.step_pos = self.step_pos[:, -1:] + 1
        self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=torch.long)], dim=-1)

    def select(self, keep: list[int]) -> None:
        """Keep only rows ``keep``; then drop the leading cache columns no remaining row attends to."""
        index = torch.tensor(keep, dtype=torch.long)
        self.past.batch_select_indices(index)
        self.step_ids, self.step_pos, self.mask = self.step_ids[index], self.step_pos[index], self.mask[index]
        self.rows = [self.rows[i] for i in keep]
        first = int(self.mask.any(0).long().argmax())
        if first > 0 and self.joinable:
            self.mask = self.mask[:, first:]
            for layer in self.past.layers:
                layer.keys, layer.values = layer.keys[..., first:, :], layer.values[..., first:, :]

    def merge(self, other: Group) -> Group:
        """Append ``other``'s rows; the shorter cache is left-padded with masked-out zeros."""
        width = max(self.mask.shape[1], other.mask.shape[1])
        for g in (self, other):
            pad = width - g.mask.shape[1]
            if pad:
                g.mask = torch.cat([torch.zeros((len(g.rows), pad), dtype=torch.long), g.mask], dim=-1)
                for layer in g.past.layers:
                    layer.keys = torch.cat([_zeros_like_columns(layer.keys, pad), layer.keys], dim=-2)
                    layer.values = torch.cat([_zeros_like_columns(layer.values, pad), layer.values], dim=-2)
        for mine, theirs in zip(self.past.layers, other.past.layers):
            mine.keys = torch.cat([mine.keys, theirs.keys], dim=0)
            mine.values = torch.cat([mine.values, theirs.values], dim=0)
        self.rows = self.rows + other.rows
        self.step_ids = torch.cat([self.step_ids, other.step_ids])
        self.step_pos = torch.cat([self.step_pos, other.step_pos])
        self.mask = torch.cat([self.mask, other.mask])
        return self


class PrefixCache:
    """The KV of recently prefilled prompts, so a prompt that starts like one of them (the same system
    prompt, the next step of a tool loop, the next turn of a conversation) prefills only what is new.

    Only for caches that ``joinable`` accepts (sliding-window layers cannot be sliced into prefixes; the
    backend passes ``max_bytes=0`` for those). Least recently used entries go first once their KV passes
    ``max_bytes``. Entries are never modified
    in place: caches built from them grow by concatenation, which makes new tensors.
    """

    def __init__(self, config: Any, max_bytes: int, min_tokens: int = 16) -> None:
        self.config = config
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self.enabled = max_bytes > 0
        self._entries: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self._bytes = 0

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
        self._bytes = 0

    def lookup(self, ids: list[int]) -> tuple[int, Any]:
        """The longest cached prefix of ``ids`` (leaving at least one token to compute) and a fresh
        ``DynamicCache`` holding it; ``(0, None)`` when nothing long enough matches."""
        if not self.enabled:
            return 0, None
        best, best_key = 0, None
        for key in self._entries:
            n = _common_prefix(key, ids)
            if n > best:
                best, best_key = n, key
        best = min(best, len(ids) - 1)
        if best < self.min_tokens or best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        past = new_cache(self.config)
        for i, (k, v) in enumerate(self._entries[best_key]):
            past.update(k[..., :best, :], v[..., :best, :], i)
        return best, past

    def store(self, ids: list[int], past: Any) -> None:
        """Remember the KV of prompt ``ids`` from a one-row prefill (before any decoding)."""
        if not self.enabled:
            return
        key = tuple(ids)
        if key in self._entries or len(ids) < self.min_tokens:
            return
        self._add(key, [(layer.keys.clone(), layer.values.clone()) for layer in past.layers])  # not live views

    def store_row(self, ids: list[int], group: Group, row: int) -> None:
        """Remember the KV of row ``row`` of a decoding ``group``: its prompt and generated tokens ``ids``
        (all but the last token, whose KV no pass has computed yet). The next turn of a conversation (or
        the reason route's answer call after its thinking) starts with those tokens when the rendered
        answer re-tokenizes the same way, so it prefills only what is new. Grammar-constrained JSON often
        does not (xgrammar lets the model spell ``{"`` as two tokens; the template re-encodes it as one)."""
        if not self.enabled or len(ids) < self.min_tokens or tuple(ids) in self._entries:
            return
        cached = group.mask.shape[1] - 1  # the mask has one column per cached token plus the next one
        # left padding only: the row's tokens are the last len(ids) cached columns, every one of them real
        if int(group.mask[row, :cached].sum()) != len(ids) or len(ids) > cached:
            return
        self._add(tuple(ids), [(layer.keys[row:row + 1, :, cached - len(ids):cached, :].clone(),
                                layer.values[row:row + 1, :, cached - len(ids):cached, :].clone())
                               for layer in group.past.layers])

    def _add(self, key: tuple[int, ...], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if size > self.max_bytes:
            return
        self._entries[key] = kv
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in old)


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
