"""Weight formats of the lean decoder (``llama.py``): fp32 (exact, the default for small models) and int8.

int8 is torch's dynamic quantization kernel (fbgemm's ``quantized::linear_dynamic``, what
``torch.ao.quantization.quantize_dynamic`` puts in a ``Linear``), called directly: weights quantized once at load
per output channel (symmetric int8), activations per token (``Int8Linear``), int32 accumulation, fp32 out.
It covers the MLP, the attention output and the LM head; the query/key/value projections (small: 12% of a
Qwen2.5-0.5B step) stay fp32, as do the embeddings and norms: with them in int8 too, greedy 32-token read
answers matched fp32's on 6 of 10 prompts, with them fp32 on 8 of 10 (attention scores magnify their error).

Measured on the real Qwen2.5-Coder-0.5B (2,520 MB fp32; ``evals/bench/qwen_speed.py``), batch 1, one thread, a
600-token prompt and 32 new tokens: prefill ~2.5x and decode ~2.7x lean fp32, ~2.5x the transformers fallback
end to end. bf16 (``F.linear`` on bf16 weights, this AVX-512 CPU) was no faster than fp32 at one row (decode)
and ~2.5x at 600 rows, below int8's ~4x. On SmolLM2-135M int8 is ~2x as fast but its answers parted from
fp32's on 9 of 10 prompts: small models, fast enough in fp32, keep fp32 under ``auto``.

fbgemm on CPUs without VNNI multiplies uint8 x int8 pairs into saturating int16 sums; the full 8-bit
activation range then overflows, so ``_reduce_range`` probes once and falls back to 7-bit activations
there (what ``quantize_dynamic`` always does).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from agentrt.core.config import AUTO_INT8_BYTES
from agentrt.core.errors import ConfigError

FORMATS = ("auto", "int8", "fp32")


def int8_available() -> bool:
    """torch has fbgemm's quantized linear (x86 builds do)."""
    return "fbgemm" in torch.backends.quantized.supported_engines or "x86" in torch.backends.quantized.supported_engines


def resolve_format(setting: str, weights_file: Path) -> str:
    """The format a lean model loads with: ``int8`` or ``fp32`` (``auto``: int8 for large models where
    this torch has the kernel)."""
    setting = (setting or "auto").strip().lower()
    if setting not in FORMATS:
        raise ConfigError(f"hf_weights={setting!r}: use auto, int8 or fp32 (AGENTRT_HF_WEIGHTS)")
    if setting == "auto":
        big = weights_file.is_file() and weights_file.stat().st_size >= AUTO_INT8_BYTES
        return "int8" if big and int8_available() else "fp32"
    if setting == "int8" and not int8_available():
        raise ConfigError("hf_weights=int8: this torch build has no fbgemm quantized kernels; use fp32")
    return setting


class Int8Linear:
    """A linear layer (``x @ W.T + b``) on int8 weights through fbgemm's dynamic-quantization kernel.

    fbgemm quantizes its whole input with one scale. Qwen's activations hold a few huge values in some
    tokens' rows (the first token's, most of all), and one scale for a whole prompt then rounds every
    other row to a handful of levels: on Qwen2.5-0.5B that flipped 43% of a prompt's next-token argmaxes.
    So each row is first divided by its own largest magnitude and the output row multiplied back (the
    product is linear in each row): per-token quantization with fbgemm's speed, ~1.5% of argmaxes flipped.
    """

    __slots__ = ("packed", "bias", "out_features")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()  # symmetric, per output channel
        zero = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # torch marks quantized tensors deprecated; the kernels are what we need
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(q, None)
        # added after the rows are scaled back (inside the kernel it would be scaled with them)
        self.bias = None if bias is None else bias.detach().float()
        self.out_features = w.shape[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] == 1:  # one row (a decode step): the kernel's own scale is already per token
            out = torch.ops.quantized.linear_dynamic(rows, self.packed, _reduce_range())
        else:
            peak = torch.linalg.vector_norm(rows, float("inf"), dim=-1, keepdim=True).clamp_(min=1e-12)
            out = torch.ops.quantized.linear_dynamic(rows * peak.reciprocal(), self.packed, _reduce_range())
            out.mul_(peak)
        if self.bias is not None:
            out += self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


_REDUCE: list[bool] = []


def _reduce_range() -> bool:
    """Whether activations must keep to 7 bits: fbgemm saturates full-range products on CPUs without VNNI.
    Probed once: an all-ones product of 64 terms is exactly 64 unless the int16 sums saturate."""
    if not _REDUCE:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ones = torch.ones(4, 64)
            q = torch.quantize_per_channel(ones, torch.full((4,), 1 / 127, dtype=torch.double),
                                           torch.zeros(4, dtype=torch.long), 0, torch.qint8)
            out = torch.ops.quantized.linear_dynamic(torch.ones(1, 64), torch.ops.quantized.linear_prepack(q, None),
                                                     False)
        _REDUCE.append(not torch.allclose(out, torch.full_like(out, 64.0), rtol=1e-2))
    return _REDUCE[0]
