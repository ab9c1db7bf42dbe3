"""A lean Llama / Qwen2 decoder for the hf backend: plain torch, no transformers model code.

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

Qwen2 (``Qwen2ForCausalLM``) is the same decoder with biases on the query/key/value projections (none on the
output projection), an untied LM head and its own RoPE base, all read from ``config.json``; transformers'
``Qwen2Attention`` differs from Llama's only by a sliding window that its configs leave off.

``lean_support`` says which folders qualify (those two architectures, SiLU, default rotary, no sliding
window, a ``model.safetensors`` file) and why a folder does not; the runner falls back to transformers for
the rest (and says so) or when ``AGENTRT_HF_IMPL=transformers``. ``load(..., weights="int8")`` puts the MLP,
attention output and LM head on int8 weights (``lean_weights.py``); fp32 is the exact format described above.
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
# architecture -> (model_type, q/k/v projections with biases)
ARCHITECTURES = {"LlamaForCausalLM": ("llama", False), "Qwen2ForCausalLM": ("qwen2", True)}


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
    architecture: str = "LlamaForCausalLM"
    qkv_bias: bool = False  # Qwen2: biases on the query/key/value projections
    eos_token_id: Any = None
    pad_token_id: Any = None
    bos_token_id: Any = None
    lean: bool = field(default=True, repr=False)


def lean_config(path: Path) -> LlamaConfig | None:
    """The folder's configuration when the lean decoder can run it exactly, else None (use transformers)."""
    return lean_support(path)[0]


def lean_support(path: Path) -> tuple[LlamaConfig | None, str]:
    """``(config, "")`` when the lean decoder can run the folder exactly, else ``(None, why not)``."""
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        return None, f"config.json unreadable ({e})"
    archs = raw.get("architectures") or ["?"]
    arch = archs[0]
    if arch not in ARCHITECTURES or len(archs) != 1:
        return None, f"architecture {arch} (the lean runner takes {', '.join(ARCHITECTURES)})"
    model_type, qkv_bias = ARCHITECTURES[arch]
    rope = raw.get("rope_parameters") or {"rope_type": "default", "rope_theta": raw.get("rope_theta", 10000.0)}
    # Qwen2 configs name a sliding window that only counts with use_sliding_window (transformers' rule)
    window = raw.get("sliding_window") if model_type == "llama" or raw.get("use_sliding_window") else None
    checks = [(raw.get("model_type") == model_type, f"model_type {raw.get('model_type')!r}"),
              (raw.get("hidden_act", "silu") == "silu", f"activation {raw.get('hidden_act')}"),
              (qkv_bias or not raw.get("attention_bias"), "attention biases"),
              (not raw.get("mlp_bias"), "MLP biases"),
              (not raw.get("rope_scaling") and "rope_theta" in rope
               and rope.get("rope_type", rope.get("type", "default")) == "default", "scaled rotary embeddings"),
              (not window and all(t == "full_attention" for t in raw.get("layer_types") or []),
               "sliding-window attention"),
              ((path / WEIGHTS).is_file(), f"no {WEIGHTS}")]
    why = next((reason for ok, reason in checks if not ok), "")
    if why:
        return None, f"{arch} with {why}"
    heads = int(raw["num_attention_heads"])
    return LlamaConfig(
        vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=float(rope["rope_theta"]),
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)), architecture=arch, qkv_bias=qkv_bias,
        eos_token_id=raw.get("eos_token_id"), pad_token_id=raw.get("pad_token_id"),
        bos_token_id=raw.get("bos_token_id")), ""


@dataclass(slots=True)
class LeanOutput:
    logits: torch.Tensor
    past_key_values: Any


Linear = Any  # an fp32 weight tensor (out x in, stored transposed) or an ``Int8Linear``


@dataclass(slots=True)
class _Layer:
    norm_in: torch.Tensor
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    norm_post: torch.Tensor
    gate: Linear
    up: Linear
    down: Linear
    q_bias: torch.Tensor | None = None  # Qwen2's
    k_bias: torch.Tensor | None = None
    v_bias: torch.Tensor | None = None


class LeanLlama:
    """A ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` forward pass in plain torch over weights loaded by
    ``load``; ``weights`` is the format of the linear layers (``fp32`` or ``int8``, ``lean_weights.py``)."""

    def __init__(self, path: Path, config: LlamaConfig, weights: Any, *, weights_format: str = "fp32") -> None:
        self.path, self.config, self.weights_format = path, config, weights_format
        self.generation_config = _generation_config(path)
        c = config
        int8 = weights_format == "int8"
        if int8:
            from agentrt.backends.hf.lean_weights import Int8Linear

        def linear(name: str, quantize: bool = True) -> Linear:
            if int8 and quantize:
                return Int8Linear(weights[name])
            return weights[name].float().t().contiguous().t()  # stored transposed: faster batched steps

        def bias(name: str | None) -> torch.Tensor | None:
            return weights[name].float() if name else None

        # tied: the LM head is the embedding matrix (transposed storage serves the lookup as well); the
        # lookup stays fp32 in every format
        self.embed = weights["model.embed_tokens.weight"].float().t().contiguous().t()
        if c.tie_word_embeddings:
            self.lm_head = Int8Linear(self.embed) if int8 else self.embed
        else:
            self.lm_head = linear("lm_head.weight")
        self.norm = weights["model.norm.weight"].float()
        self.layers = []
        for i in range(c.num_hidden_layers):
            p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
            qkv = [(a + f"{n}_proj.weight", a + f"{n}_proj.bias" if c.qkv_bias else None) for n in "qkv"]
            self.layers.append(_Layer(  # q/k/v stay fp32 in every format (``lean_weights.py`` says why)
                weights[p + "input_layernorm.weight"].float(), *(linear(w, quantize=False) for w, _ in qkv),
                linear(a + "o_proj.weight"), weights[p + "post_attention_layernorm.weight"].float(),
                linear(p + "mlp.gate_proj.weight"), linear(p + "mlp.up_proj.weight"),
                linear(p + "mlp.down_proj.weight"), *(bias(b) for _, b in qkv)))
        # transformers' default RoPE parameters, computed the same way (float32)
        self.inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float) / c.head_dim))
        self.groups = c.num_attention_heads // c.num_key_value_heads
        self.scaling = c.head_dim ** -0.5
        # id(weight) -> oneDNN-packed copy, made on first use (fp32 only: int8 kernels take any row count)
        self._packed: dict[int, Any] | None = {} if int8 else None
        self._reference = None

    @classmethod
    def load(cls, path: Path, config: LlamaConfig, weights: str = "fp32") -> LeanLlama:
        """The model from ``path/model.safetensors``, its linear layers in format ``weights`` (fp32, int8).
        Tensors are read one at a time, so a load never holds two fp32 copies of the weights."""
        from safetensors import safe_open

        with safe_open(path / WEIGHTS, framework="pt") as f:
            return cls(path, config, _Tensors(f), weights_format=weights)

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
            q = _linear(x, w.q, None, w.q_bias).view(shape).transpose(1, 2)
            k = _linear(x, w.k, None, w.k_bias).view(shape).transpose(1, 2)
            v = _linear(x, w.v, None, w.v_bias).view(shape).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            k, v = past.update(k, v, i)
            attn = self._attention(q, k, v, mask).reshape(batch, q_len, -1).contiguous()
            h = h + _linear(attn, w.o, None)
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
        """transformers' model class (``LlamaForCausalLM``, ``Qwen2ForCausalLM``) on the same folder in fp32
        with ``cpu_speed``'s layouts (transposed linears, copy-free decode attention; no packing, which the
        lean model keeps to batched steps): what this model must match in fp32. Loaded on first call (transformers' modeling import, ~5 s)."""
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


class _Tensors:
    """An open safetensors file read by name (``weights[name]``), one tensor at a time."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.handle.get_tensor(name)


def _linear(x: torch.Tensor, weight: Linear, packed: dict[int, Any] | None,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    if type(weight) is not torch.Tensor:  # an Int8Linear (its bias inside)
        return weight(x)
    if not packed:
        return F.linear(x, weight, bias)
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
