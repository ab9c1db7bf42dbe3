"""What the lean runner's tests of both families share: a left-padded batch, and the check that a lean model's
logits are transformers' own (prompt passes, a batch with its cache, decode steps)."""

from __future__ import annotations

import torch

from agentrt.backends.hf.kvcache import LeanCache, new_cache


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def assert_matches_reference(lean, rows: list[list[int]], pad: int, steps: int = 3, packing: bool = False) -> None:
    """Prompt passes, a left-padded batch with its cache and ``steps`` decode steps: transformers' logits bit for bit
    (batched steps on oneDNN-packed weights within 1e-4). ``packing``: also that the weights were packed exactly
    when asked and oneDNN is there."""
    ref = lean.reference()
    with torch.inference_mode():
        for r in rows:
            x = torch.tensor([r])
            assert torch.equal(lean(input_ids=x).logits, ref(input_ids=x).logits)
        for packed in (False, True):
            lean._packed = {} if not packed else None  # {}: plain products; None: packed on the next batched step
            ids, mask = left_padded(rows, pad)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            mine, theirs = LeanCache(lean.config.num_hidden_layers), new_cache(ref.config)
            a = lean(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=mine, logits_to_keep=1)
            b = ref(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=theirs, logits_to_keep=1)
            assert torch.equal(a.logits, b.logits)
            for _ in range(steps):
                step = a.logits[:, -1].argmax(-1, keepdim=True)
                pos, mask = pos[:, -1:] + 1, torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], -1)
                a = lean(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=mine)
                b = ref(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=theirs)
                diff = (a.logits - b.logits).abs().max().item()
                assert diff == 0.0 if not packed else diff < 1e-4
            if packing:
                assert bool(lean._packed) == (packed and torch.backends.mkldnn.is_available())
