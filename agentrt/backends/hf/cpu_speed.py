"""CPU decode speed-ups for the transformers batcher, all in one place; each measured by evals/bench/batcher.py.

``speed_up(model)`` applies them once at load to transformers' models (runner.py); the lean Llama of
``llama.py`` has the same layouts built in (and ``pack_weight`` below). Values and shapes stay what
transformers expects, so greedy output stays token-identical to ``model.generate``. transformers is imported
only inside the functions that hook into it.

* Grouped-query attention for one-token decode steps without copying the KV cache. transformers' SDPA path
  repeats every key/value head ``num_key_value_groups`` times whenever an attention mask is present (always,
  in a left-padded batch). At batch 8 with ~700 cached tokens that copy moves hundreds of MB per step on
  SmolLM2 and dominates the step on a CPU. For a single query token the query heads that share a KV head
  can instead be laid out as that head's query rows: the same attention, no copy. Prompt passes (several
  query tokens) take transformers' own path.
* Linear weights stored transposed (same values and shape to callers): ``x @ W.T`` then reads a contiguous
  matrix, which makes MKL's sgemm about 2x faster for the 4-16 row products of a batched decode step and
  no slower at 1 row or in prompt passes.
* The large linears (the LM head: vocabulary x hidden, and the MLP projections) through oneDNN-packed
  weights when a pass has several rows: ~1.5x faster at 4-8 rows; one row keeps the plain product, which
  is faster there (so are the small attention projections at any row count).

The fourth speed-up, a KV cache that grows in place instead of being copied every step, is the cache's own
layout and lives with it in ``kvcache.py`` (``GrowingLayer``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

NAME = "agentrt_sdpa_gqa"


def speed_up(model: Any) -> None:
    """Apply every CPU speed-up below to a freshly loaded ``model`` (in this order)."""
    use_gqa_decode(model)
    transpose_linear_storage(model)
    pack_wide_linears(model)


def sdpa_gqa_decode(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    if groups == 1 or q_len != 1 or dropout:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    # Query head h uses KV head h // groups (transformers' repeat_kv order), so (heads, 1) -> (kv heads, groups).
    grouped = query.reshape(batch, key.shape[1], groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def use_gqa_decode(model: Any) -> None:
    """Switch ``model`` to the copy-free decode attention (models that use transformers' SDPA path)."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sdpa_gqa_decode)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)


def transpose_linear_storage(model: Any) -> None:
    """Store every linear weight transposed in memory (values and shape unchanged)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = module.weight.data.t().contiguous().t()


def pack_wide_linears(model: Any, rows_hint: int = 8, min_weights: int = 2**19) -> None:
    """Route multi-row products of the large linears (the LM head and the MLP projections, at least
    ``min_weights`` weights) through oneDNN-packed copies of their weights, when oneDNN has them.

    At 8 rows oneDNN's packed kernel is ~1.5x faster than MKL's sgemm for these shapes; at one row (and
    for the small attention projections) the plain product is faster, so it stays. Costs a second copy
    of those weights (~430 MB for SmolLM2-135M, the LM head's 113 MB included).
    """
    if not torch.backends.mkldnn.is_available():
        return
    for module in model.modules():
        if (isinstance(module, torch.nn.Linear) and module.bias is None
                and module.in_features * module.out_features >= min_weights):
            if not _pack_linear(module, rows_hint):
                return  # a torch build without these private ops: keep every plain product


def pack_weight(weight: torch.Tensor, rows_hint: int = 8) -> Any:
    """A oneDNN-packed copy of linear ``weight`` (out x in) for ``torch.ops.mkldnn._linear_pointwise``; None
    when this torch build lacks the private ops or they disagree with the plain product."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows_hint)
        probe = torch.randn(2, weight.shape[1])
        if not torch.allclose(torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], ""),
                              torch.nn.functional.linear(probe, weight), atol=1e-3, rtol=1e-4):
            return None
    except (RuntimeError, AttributeError) as e:
        logging.getLogger(__name__).debug("linear not packed: %s", e)
        return None
    return packed


def _pack_linear(module: torch.nn.Linear, rows_hint: int) -> bool:
    """Give ``module`` a forward that takes the packed weight for two rows or more; False if it cannot."""
    packed = pack_weight(module.weight, rows_hint)
    if packed is None:
        return False
    weight = module.weight

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows < 2 or torch.is_grad_enabled():
            return torch.nn.functional.linear(x, weight)
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, -1), packed, None, "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])

    module.forward = forward
    return True
