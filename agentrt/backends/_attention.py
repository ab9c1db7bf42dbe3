"""Grouped-query attention for one-token decode steps without copying the KV cache.

transformers' SDPA path repeats every key/value head ``num_key_value_groups`` times whenever an
attention mask is present (always, in a left-padded batch). At batch 8 with ~700 cached tokens that
copy moves hundreds of MB per step on SmolLM2 and dominates the step on a CPU. For a single query token
the query heads that share a KV head can instead be laid out as that head's query rows: the same
attention, no copy. Prompt passes (several query tokens) take transformers' own path.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "agentrt_sdpa_gqa"


def sdpa_gqa_decode(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    if groups == 1 or q_len != 1 or dropout:
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
    AttentionInterface.register(NAME, sdpa_gqa_decode)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
