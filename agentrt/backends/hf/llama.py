"""A lean Llama for the hf backend: plain torch, no transformers model code.

Importing transformers' modeling stack (``modeling_utils`` and what it drags in: ``torch.distributed.tensor``,
sympy, ``torch._dynamo``) and building the model through ``from_pretrained`` took most of an ``agentrt run``
on the embedded SmolLM2-135M (``evals/bench/startup_bench.py``). A Llama is small enough to write out: RMSNorm,
rotary embeddings, grouped-query attention through torch's SDPA, a SiLU-gated MLP. The weights come straight
from ``model.safetensors`` (memory-mapped) and the configuration from ``config.json``.

``LeanLlama`` is called exactly like transformers' ``LlamaForCausalLM`` by the runner (``runner.py``):
``model(input_ids=, attention_mask=, position_ids=, past_key_values=, logits_to_keep=)`` returns ``.logits``
and ``.past_key_values`` and grows the cache through ``past.update(k, v, layer_idx)`` (a ``LeanCache`` of
``kvcache.py``). Every op follows transformers' order (``LlamaRMSNorm``, ``rotate_half`` rotary, the SDPA
mask rules of ``masking_utils.sdpa_mask``) with the CPU layouts of ``cpu_speed.py``, so logits match
transformers' model with ``cpu_speed``'s speed-ups bit for bit and greedy outputs stay token-identical:

* linear weights stored transposed (the copy is made at load: ~0.3 s, the price of ~2x faster batched steps);
* one-token decode attention without repeating KV heads (query heads grouped by their KV head);
* oneDNN-packed large linears for decode steps of two rows or more, packed on the first such step (a
  single request never pays for them). Prompt passes keep the plain product.

``lean_config`` says which folders qualify (``LlamaForCausalLM``, SiLU, default rotary, no biases, a
``model.safetensors`` file); the runner falls back to transformers for the rest or when
``AGENTRT_HF_IMPL=transformers``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from agentrt.backends.hf.kvcache import LeanCache

ENV_IMPL = "AGENTRT_HF_IMPL"  # "transformers" forces transformers' model classes for every folder
WEIGHTS = "model.safetensors"


@dataclass
class LlamaConfig:
    """What the forward pass needs from ``config.json`` (``lean`` marks it for ``kvcache.new_cache``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    eos_token_id: Any = None
    pad_token_id: Any = None
    bos_token_id: Any = None
    lean: bool = field(default=True, repr=False)


def lean_config(path: Path) -> LlamaConfig | None:
    """The folder's configuration when the lean Llama can run it exactly, else None (use transformers)."""
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    rope = raw.get("rope_parameters") or {"rope_type": "default", "rope_theta": raw.get("rope_theta", 10000.0)}
    if (raw.get("architectures") != ["LlamaForCausalLM"] or raw.get("model_type") != "llama"
            or raw.get("hidden_act", "silu") != "silu" or raw.get("attention_bias") or raw.get("mlp_bias")
            or raw.get("rope_scaling") or rope.get("rope_type", rope.get("type", "default")) != "default"
            or "rope_theta" not in rope or raw.get("layer_types") or raw.get("sliding_window")
            or not (path / WEIGHTS).is_file()):
        return None
    heads = int(raw["num_attention_heads"])
    return LlamaConfig(
        vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=float(rope["rope_theta"]),
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        eos_token_id=raw.get("eos_token_id"), pad_token_id=raw.get("pad_token_id"),
        bos_token_id=raw.get("bos_token_id"))


@dataclass(slots=True)
class LeanOutput:
    logits: torch.Tensor
    past_key_values: Any


@dataclass(slots=True)
class _Layer:
    norm_in: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    norm_post: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


class LeanLlama:
    """A ``LlamaForCausalLM`` forward pass in plain torch over weights loaded by ``load``."""

    def __init__(self, path: Path, config: LlamaConfig, weights: dict[str, torch.Tensor]) -> None:
        self.path, self.config = path, config
        self.generation_config = _generation_config(path)
        c = config

        def linear(name: str) -> torch.Tensor:  # stored transposed: the same values, faster batched steps
            return weights[name].float().t().contiguous().t()

        # tied: the LM head is the embedding matrix (transposed storage serves the lookup as well)
        self.embed = linear("model.embed_tokens.weight")
        self.lm_head = self.embed if c.tie_word_embeddings else linear("lm_head.weight")
        self.norm = weights["model.norm.weight"].float()
        self.layers = []
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append(_Layer(
                weights[p + "input_layernorm.weight"].float(), linear(p + "self_attn.q_proj.weight"),
                linear(p + "self_attn.k_proj.weight"), linear(p + "self_attn.v_proj.weight"),
                linear(p + "self_attn.o_proj.weight"), weights[p + "post_attention_layernorm.weight"].float(),
                linear(p + "mlp.gate_proj.weight"), linear(p + "mlp.up_proj.weight"),
                linear(p + "mlp.down_proj.weight")))
        # transformers' default RoPE parameters, computed the same way (float32)
        self.inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float) / c.head_dim))
        self.groups = c.num_attention_heads // c.num_key_value_heads
        self.scaling = c.head_dim ** -0.5
        self._packed: dict[int, Any] | None = None  # id(weight) -> oneDNN-packed copy, made on first use
        self._reference = None

    @classmethod
    def load(cls, path: Path, config: LlamaConfig) -> LeanLlama:
        from safetensors.torch import load_file

        return cls(path, config, load_file(path / WEIGHTS))

    # -- the forward pass ----------------------------------------------------------------------------
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 position_ids: torch.Tensor | None = None, past_key_values: Any = None,
                 logits_to_keep: int = 0, use_cache: bool = True, **_: Any) -> LeanOutput:
        batch, q_len = input_ids.shape
        past = past_key_values if past_key_values is not None else LeanCache(self.config.num_hidden_layers)
        past_len = past.get_seq_length()
        if position_ids is None:
            position_ids = (torch.arange(q_len) + past_len).unsqueeze(0)
        mask = _sdpa_mask(attention_mask, q_len, past_len)
        packed = self._packed_weights() if q_len == 1 and batch > 1 else None
        freqs = position_ids[..., None].float() * self.inv_freq  # LlamaRotaryEmbedding (attention scaling 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        h = F.embedding(input_ids, self.embed)
        shape = (batch, q_len, -1, self.config.head_dim)
        for i, w in enumerate(self.layers):
            x = self._rms_norm(h, w.norm_in)
            q = F.linear(x, w.q).view(shape).transpose(1, 2)
            k = F.linear(x, w.k).view(shape).transpose(1, 2)
            v = F.linear(x, w.v).view(shape).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            k, v = past.update(k, v, i)
            attn = self._attention(q, k, v, mask).reshape(batch, q_len, -1).contiguous()
            h = h + F.linear(attn, w.o)
            x = self._rms_norm(h, w.norm_post)
            mlp = F.silu(_linear(x, w.gate, packed)) * _linear(x, w.up, packed)
            h = h + _linear(mlp, w.down, packed)
        h = self._rms_norm(h, self.norm)
        return LeanOutput(_linear(h[:, -logits_to_keep:, :], self.lm_head, packed), past)

    def _rms_norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = h.pow(2).mean(-1, keepdim=True)  # LlamaRMSNorm, fp32 throughout
        return weight * (h * torch.rsqrt(variance + self.config.rms_norm_eps))

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None) -> torch.Tensor:
        """transformers' SDPA attention (batch x tokens x heads x dim out), with ``cpu_speed``'s copy-free
        grouped-query path for one-token steps."""
        batch, heads, q_len, dim = q.shape
        if self.groups > 1 and q_len == 1:  # query heads sharing a KV head become that head's query rows
            grouped = q.reshape(batch, k.shape[1], self.groups, dim)
            out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask, scale=self.scaling)
            return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous()
        kwargs = {}
        if self.groups > 1:
            if mask is None and k.shape[-1] == v.shape[-1] <= 256:
                kwargs["enable_gqa"] = True
            else:
                k, v = _repeat_kv(k, self.groups), _repeat_kv(v, self.groups)
        is_causal = q_len > 1 and mask is None
        if is_causal and k.shape[2] > q_len:
            k, v = k[:, :, :q_len, :], v[:, :, :q_len, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.scaling,
                                             is_causal=is_causal, **kwargs)
        return out.transpose(1, 2).contiguous()

    def _packed_weights(self) -> dict[int, Any]:
        if self._packed is None:
            from agentrt.backends.hf.cpu_speed import pack_weight

            self._packed = {}
            for w in [self.lm_head, *(t for layer in self.layers for t in (layer.gate, layer.up, layer.down))]:
                packed = pack_weight(w)
                if packed is None:  # a torch build without oneDNN's packed linear: plain products
                    self._packed = {}
                    break
                self._packed[id(w)] = packed
        return self._packed

    # -- for tests and comparisons -------------------------------------------------------------------
    def reference(self) -> Any:
        """transformers' ``LlamaForCausalLM`` on the same folder with ``cpu_speed``'s layouts (transposed
        linears, copy-free decode attention; no packing, which the lean model keeps to batched steps):
        what this model must match. Loaded on first call (transformers' modeling import, ~5 s)."""
        if self._reference is None:
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging

            from agentrt.backends.hf.cpu_speed import transpose_linear_storage, use_gqa_decode

            hf_logging.disable_progress_bar()
            model = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32).eval()
            use_gqa_decode(model)
            transpose_linear_storage(model)
            self._reference = model
        return self._reference

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' ``generate`` on ``reference()`` (tests compare the batcher's tokens with it)."""
        return self.reference().generate(*args, **kwargs)


def _linear(x: torch.Tensor, weight: torch.Tensor, packed: dict[int, Any] | None) -> torch.Tensor:
    if not packed:
        return F.linear(x, weight)
    rows = x.numel() // x.shape[-1]
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, -1), packed[id(weight)], None, "none", [], "")
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    batch, kv_heads, length, dim = x.shape
    return x[:, :, None, :, :].expand(batch, kv_heads, n, length, dim).reshape(batch, kv_heads * n, length, dim)


def _sdpa_mask(attention_mask: torch.Tensor | None, q_len: int, past_len: int) -> torch.Tensor | None:
    """transformers' ``sdpa_mask`` for a causal model over a dynamic cache: None where SDPA's own causal
    flag (or no mask) gives the same attention, else a boolean batch x 1 x query x key mask."""
    kv_len = past_len + q_len
    pad = None
    if attention_mask is not None:
        pad = attention_mask.to(torch.bool)
        if pad.shape[-1] < kv_len:
            pad = torch.cat([pad, pad.new_zeros(pad.shape[0], kv_len - pad.shape[-1])], dim=-1)
        pad = pad[:, :kv_len]
    if (q_len == 1 or kv_len == q_len) and (pad is None or bool(pad.all())):
        return None
    if past_len == 0 and (pad is None or (bool(pad[:, :q_len].all()) and not bool(pad[:, q_len:].any()))):
        return None
    causal = torch.arange(kv_len)[None, :] <= (torch.arange(q_len) + past_len)[:, None]
    mask = causal[None, None] if pad is None else causal[None, None] & pad[:, None, None, :]
    batch = 1 if pad is None else pad.shape[0]
    return mask.expand(batch, 1, q_len, kv_len)


def _generation_config(path: Path) -> Any:
    """``generation_config.json`` as attributes (``eos_token_id`` is what the runner reads)."""
    from types import SimpleNamespace

    try:
        raw = json.loads((path / "generation_config.json").read_text())
    except (OSError, ValueError):
        raw = {}
    return SimpleNamespace(eos_token_id=raw.get("eos_token_id"), pad_token_id=raw.get("pad_token_id"))
