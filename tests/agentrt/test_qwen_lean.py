"""The lean runner on Qwen2 folders (agentrt/backends/hf/llama.py, lean_weights.py): q/k/v biases, an untied LM
head, its RoPE base and grouped KV heads give transformers' logits; the folder's own tokenizer and ChatML
template; int8 weights; and a fallback to transformers that says so. A tiny random Qwen2 made here with
transformers (fast), then the real embedded Qwen2.5-Coder-0.5B (slow)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from agentrt.backends.hf.lean_weights import resolve_format
from agentrt.backends.hf.llama import ENV_IMPL, WEIGHTS, LeanLlama, lean_support
from agentrt.backends.hf.runner import ModelRunner
from agentrt.backends.hf.sequence import BatcherStats
from agentrt.core.errors import ConfigError
from agentrt.core.types import GenParams, Message
from _backend_cases import PROMPTS
from _lean_cases import assert_matches_reference, left_padded

# Qwen's own template, cut to what the tests render: ChatML with its default system line
TEMPLATE = ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
            "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are "
            "a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not "
            "(message.role == 'system' and loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + "
            "message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}"
            "{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def _tiny_qwen(path: Path) -> Path:
    """A random Qwen2 with everything the lean runner must get right: q/k/v biases, 4 query heads on 2 KV
    heads, an untied head, RoPE base 1e6; a byte-level BPE tokenizer with ChatML's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([*PROMPTS, TEMPLATE, "You are Qwen, created by Alibaba Cloud."] * 4, trainer)
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "unk_token": None, "chat_template": TEMPLATE}))
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False,
                         initializer_range=0.2, eos_token_id=tok.token_to_id("<|im_end|>"),
                         pad_token_id=tok.token_to_id("<|endoftext|>"))
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return _tiny_qwen(tmp_path_factory.mktemp("qwen") / "tiny-qwen2")


def _runner(path: Path, weights: str = "auto") -> ModelRunner:
    return ModelRunner(path, BatcherStats(), threads=1, wide_threads=1, prefix_cache_mb=0, weights=weights)


def _chat_ids(tokenizer, prompt: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False).input_ids


def _int8_agrees(fp32: LeanLlama, int8: LeanLlama, rows: list[list[int]]) -> float:
    """The share of prompt positions whose next-token argmax int8 keeps; asserts the logits stay close."""
    same, total = 0, 0
    with torch.inference_mode():
        for r in rows:
            a, b = fp32(input_ids=torch.tensor([r])).logits, int8(input_ids=torch.tensor([r])).logits
            assert (a - b).abs().max().item() < 0.1 * a.abs().max().item()
            same += int((a.argmax(-1) == b.argmax(-1)).sum())
            total += len(r)
    return same / total


def test_tiny_qwen2_runs_lean_and_matches_transformers(tiny):
    config, why = lean_support(tiny)
    assert why == "" and config.architecture == "Qwen2ForCausalLM" and config.qkv_bias
    assert config.rope_theta == 1e6 and not config.tie_word_embeddings
    runner = _runner(tiny)
    assert runner.lean and runner.impl == "lean-fp32"  # small: auto keeps fp32
    lean = runner.model
    assert lean.groups == 2 and lean.lm_head is not lean.embed and lean.layers[0].q_bias is not None
    assert_matches_reference(lean, [_chat_ids(runner.tokenizer, p) for p in PROMPTS[:3]], runner.pad_id)


def test_tiny_qwen2_tokenizer_template_and_stop_come_from_the_folder(tiny):
    from transformers import AutoTokenizer

    runner = _runner(tiny)
    tok, hf = runner.tokenizer, AutoTokenizer.from_pretrained(tiny)
    assert type(tok).__name__ == "LeanTokenizer"
    # the folder's eos, and the end-of-generation tokens its config leaves out (<|endoftext|>, as upstream Qwen stops)
    assert runner.eos_ids == {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    assert hf.eos_token_id in runner.eos_ids and len(runner.eos_ids) == 2
    chat = [{"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text == hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are Qwen") and text.endswith("<|im_start|>assistant\n")
    # "e" + a combining accent: transformers' Qwen2Tokenizer normalizes to NFC whatever tokenizer.json says
    for s in (text, *PROMPTS, " Příliš žluťoučký kůň 😀\n\t", "cafe\u0301 I'M  don't\r\n\n 123"):
        ids = tok(s, add_special_tokens=False).input_ids
        assert ids == hf(s, add_special_tokens=False).input_ids
        assert tok.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)


def test_tiny_qwen2_int8_weights(tiny):
    fp32, int8 = _runner(tiny, "fp32"), _runner(tiny, "int8")
    layer = int8.model.layers[0]
    assert int8.impl == "lean-int8" and type(layer.gate).__name__ == "Int8Linear" == type(int8.model.lm_head).__name__
    assert type(layer.q) is torch.Tensor and layer.q_bias is not None  # attention inputs stay fp32
    rows = [_chat_ids(fp32.tokenizer, p) for p in PROMPTS]
    assert _int8_agrees(fp32.model, int8.model, rows) >= 0.8  # random weights: many near-ties (0.89 here)
    with torch.inference_mode():  # a left-padded batch and batched decode steps run on int8 too
        ids, mask = left_padded(rows[:3], int8.pad_id)
        out = int8.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        assert out.logits.shape == (3, ids.shape[1], fp32.vocab_size) and torch.isfinite(out.logits).all()


def test_weight_format_setting(tiny, tmp_path):
    assert resolve_format("auto", tiny / WEIGHTS) == "fp32" and resolve_format("INT8", tiny / WEIGHTS) == "int8"
    with pytest.raises(ConfigError, match="auto, int8 or fp32"):
        resolve_format("bf16", tiny / WEIGHTS)
    big = tmp_path / WEIGHTS
    with big.open("wb") as f:  # sparse: the size auto looks at, no gigabyte written
        f.truncate(1 << 30)
    assert resolve_format("auto", big) == "int8"


def test_unsupported_folder_says_it_falls_back_once(tiny, tmp_path, caplog, monkeypatch):
    """A Qwen2 with sliding-window layers (transformers runs it; the lean runner does not): one warning
    naming the architecture, the reason and the fallback; none for the same folder again, none when the
    setting asks for transformers."""
    slide = tmp_path / "sliding"
    slide.mkdir()
    for f in tiny.iterdir():
        (slide / f.name).symlink_to(f)
    config = json.loads((tiny / "config.json").read_text())
    config.update(use_sliding_window=True, sliding_window=8, max_window_layers=1)
    config.pop("layer_types", None)
    (slide / "config.json").unlink()
    (slide / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING, logger="agentrt.hf"):
        runner = _runner(slide)
        _runner(slide)
    assert runner.impl == "transformers" and type(runner.model).__name__ == "Qwen2ForCausalLM"
    said = [r.getMessage() for r in caplog.records if r.name == "agentrt.hf"]
    assert len(said) == 1 and "Qwen2ForCausalLM" in said[0] and "sliding-window" in said[0]
    assert "transformers fallback" in said[0]
    caplog.clear()
    monkeypatch.setenv(ENV_IMPL, "transformers")
    with caplog.at_level(logging.WARNING, logger="agentrt.hf"):
        assert _runner(tiny).impl == "transformers"
    assert not [r for r in caplog.records if r.name == "agentrt.hf"]


# -- the real model --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_path() -> Path:
    """The real Qwen2.5-Coder-0.5B-Instruct folder, converted from its packages on first use (~3-5 min)."""
    from agentrt.backends.embedded import resolve
    from agentrt.core.config import Settings

    return resolve("embedded:qwen2.5-coder-0.5b", Settings().models_dir)[0]


@pytest.mark.slow
def test_real_qwen_logits_match_transformers_and_int8_answers(qwen_path):
    from agentrt.backends.hf import HFBackend

    config, why = lean_support(qwen_path)
    assert why == "" and (config.num_attention_heads, config.num_key_value_heads) == (14, 2)
    fp32 = LeanLlama.load(qwen_path, config, "fp32")
    backend = HFBackend(qwen_path, threads=1, wide_threads=1, prefix_cache_mb=0)  # default settings
    try:
        assert backend.runner.impl == "lean-int8"  # 2.5 GB of fp32 weights: auto picks int8
        assert backend.render([Message("user", "hi")]).startswith(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
        rows = [backend.encode([Message("user", p)]) for p in PROMPTS[:3]]
        assert_matches_reference(fp32, rows, backend.runner.pad_id)
        assert _int8_agrees(fp32, backend.model, rows) >= 0.85
        done = backend.chat_sync([Message("user", "What is the capital of France? One word.")],
                                 GenParams(max_tokens=8))
        assert "Paris" in done.choices[0].text and done.choices[0].finish_reason == "stop"
    finally:
        backend.close()
