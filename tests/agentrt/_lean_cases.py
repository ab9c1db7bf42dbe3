"""What the lean runner's tests of both families share: a left-padded batch, and the check that a lean model's
logits are transformers' own (prompt passes, a batch with its cache, decode steps)."""

from __future__ import annotations

import torch

from agentrt.backends.hf.kvcache import LeanCache, new_cache

# One row matches transformers bit for bit on every CPU measured. A batch of rows did too on the AVX2 machines, but on
# an AVX-512 one (2026-12-06) the batched passes differ by rounding (also with equal rows and no padding): 1.4e-6 on
# the tiny Qwen2, 1.4e-5 on Qwen2.5-Coder-0.5B, 5e-5 on SmolLM2-135M, whose logits reach ~30; oneDNN-packed products
# differ by more. So the bound is relative to the largest logit. A key masked wrongly shows as ~2 on the tiny Qwen2.
BATCH_TOLERANCE = 1e-5
PACKED_TOLERANCE = 1e-4


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def assert_matches_reference(lean, rows: list[list[int]], pad: int, steps: int = 3, packing: bool = False) -> None:
    """Prompt passes, a left-padded batch with its cache and ``steps`` decode steps: transformers' logits, one row
    bit for bit; a batch of rows within ``BATCH_TOLERANCE`` of the largest logit (``PACKED_TOLERANCE`` on
    oneDNN-packed weights). ``packing``: also that the weights were packed exactly when asked and oneDNN is there."""
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
            tolerance = (PACKED_TOLERANCE if packed else BATCH_TOLERANCE) * max(1.0, b.logits.abs().max().item())
            diff = (a.logits - b.logits).abs().max().item()
            assert diff < tolerance, f"batched prompt pass (packed={packed}): logits differ by {diff:.2e}"
            for _ in range(steps):
                step = a.logits[:, -1].argmax(-1, keepdim=True)
                pos, mask = pos[:, -1:] + 1, torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], -1)
                a = lean(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=mine)
                b = ref(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=theirs)
                diff = (a.logits - b.logits).abs().max().item()
                assert diff < tolerance, f"decode step (packed={packed}): logits differ by {diff:.2e}"
            if packing:
                assert bool(lean._packed) == (packed and torch.backends.mkldnn.is_available())
