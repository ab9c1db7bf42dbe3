"""The lean Llama (agentrt/backends/hf/llama.py) against transformers' own model on the real SmolLM2-135M weights:
logits, greedy tokens through the batcher, the fallback to transformers and the setting that forces it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrt.backends.hf.llama import ENV_IMPL, LeanLlama, lean_config
from agentrt.backends.hf.runner import ModelRunner
from agentrt.backends.hf.scheduler import BatcherStats
from agentrt.core.errors import ConfigError
from agentrt.core.types import GenParams, Message
from _backend_cases import PROMPTS
from _lean_cases import assert_matches_reference


def _ids(backend, prompts: list[str]) -> list[list[int]]:
    return [backend.encode([Message("user", p)]) for p in prompts]


def test_embedded_model_runs_lean(embedded):
    assert embedded.runner.lean and isinstance(embedded.model, LeanLlama)
    assert embedded.model.config.num_hidden_layers == 30 and embedded.model.groups == 3  # grouped-query heads


def test_logits_match_transformers(embedded):
    """Prompt passes, a left-padded batch with its cache and decode steps: the same logits as transformers'
    LlamaForCausalLM (with the same CPU layouts), bit for bit; batched steps on packed weights within 1e-4."""
    assert_matches_reference(embedded.model, _ids(embedded, PROMPTS[:3]), embedded.runner.pad_id, steps=4,
                             packing=True)


def test_batched_greedy_matches_generate(embedded):
    """Concurrent requests (one running batch, late joins) give transformers' generate tokens."""
    prompts = PROMPTS[:4]
    params = GenParams(max_tokens=16)

    async def together():
        return await asyncio.gather(*(embedded.chat([Message("user", p)], params) for p in prompts))

    done = asyncio.run(together())
    for r, c in zip(_ids(embedded, prompts), done):
        x = torch.tensor([r])
        ref = embedded.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=16, do_sample=False)
        assert c.choices[0].token_ids == ref[0, len(r):].tolist()[: len(c.choices[0].token_ids)]
        assert len(c.choices[0].token_ids) >= 1


def _folder_like(src: Path, dst: Path, **config_changes) -> Path:
    """A model folder that shares ``src``'s files (symlinks) with a changed config.json."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f)
    config = json.loads((src / "config.json").read_text()) | config_changes
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_non_llama_folder_falls_back_to_transformers(embedded, tmp_path):
    """A Mistral config over the same weights (Mistral's layout is Llama's): transformers runs it."""
    path = _folder_like(embedded.path, tmp_path / "mistral", architectures=["MistralForCausalLM"],
                        model_type="mistral", sliding_window=None)
    assert lean_config(path) is None
    runner = ModelRunner(path, BatcherStats(), threads=1, wide_threads=1, prefix_cache_mb=0)
    assert not runner.lean and type(runner.model).__name__ == "MistralForCausalLM"
    x = torch.tensor(_ids(embedded, PROMPTS[:1]))
    with torch.inference_mode():  # transformers' prompt pass runs on packed weights there: not bit for bit
        theirs, mine = runner.model(input_ids=x).logits, embedded.model(input_ids=x).logits
    assert (theirs - mine).abs().max().item() < 1e-3 and torch.equal(theirs.argmax(-1), mine.argmax(-1))


def test_unsupported_llama_variants_fall_back(embedded, tmp_path):
    assert lean_config(embedded.path) is not None
    scaled = _folder_like(embedded.path, tmp_path / "scaled",
                          rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 100000.0})
    biased = _folder_like(embedded.path, tmp_path / "biased", attention_bias=True)
    assert lean_config(scaled) is None and lean_config(biased) is None


def test_setting_forces_transformers(embedded, monkeypatch):
    monkeypatch.setenv(ENV_IMPL, "transformers")
    runner = ModelRunner(embedded.path, BatcherStats(), threads=1, wide_threads=1, prefix_cache_mb=0)
    assert not runner.lean and type(runner.model).__name__ == "LlamaForCausalLM"
    assert runner.eos_ids == embedded.runner.eos_ids and runner.context_length == embedded.context_length
    monkeypatch.setenv(ENV_IMPL, "fast")
    with pytest.raises(ConfigError, match=ENV_IMPL):
        ModelRunner(embedded.path, BatcherStats(), threads=1, wide_threads=1, prefix_cache_mb=0)


def test_lean_tokenizer_matches_transformers(embedded):
    """Encode, decode and chat-template rendering as transformers' tokenizer does them (ids, special tokens,
    a continued final message)."""
    lean = embedded.tokenizer
    assert type(lean).__name__ == "LeanTokenizer"
    hf = lean.hf
    assert (lean.eos_token_id, lean.pad_token_id, lean.special_tokens_map) == (
        hf.eos_token_id, hf.pad_token_id, hf.special_tokens_map)
    long = "The quick brown fox, Příliš žluťoučký kůň. " * 400  # over lean_tok._LONG: the GIL-free batch calls
    for text in [*PROMPTS, " Příliš žluťoučký kůň 😀\n\t", "<|im_start|>user\nhi<|im_end|>", "", long]:
        for special in (False, True):
            ids = lean(text, add_special_tokens=special).input_ids
            assert ids == hf(text, add_special_tokens=special).input_ids
            for skip in (False, True):
                assert lean.decode(ids + [2, 1], skip_special_tokens=skip) == hf.decode(ids + [2, 1],
                                                                                      skip_special_tokens=skip)
    chats = [([{"role": "user", "content": "hi"}], {"add_generation_prompt": True}),
             ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "Hello "}], {"continue_final_message": True}),
             ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi"},
               {"role": "user", "content": "more"}], {"add_generation_prompt": True, "enable_thinking": False})]
    for chat, kwargs in chats:
        assert lean.apply_chat_template(chat, tokenize=False, **kwargs) == hf.apply_chat_template(
            chat, tokenize=False, **kwargs)


def test_lean_path_never_imports_transformers(embedded):
    """The start-up win: loading a Llama folder and answering imports no part of transformers."""
    code = ("import sys; from agentrt.backends.hf import HFBackend; "
            "from agentrt.core.types import GenParams, Message; "
            f"b = HFBackend({str(embedded.path)!r}); c = b.chat_sync([Message('user', 'Hi')], GenParams(max_tokens=4)); "
            "b.close(); print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'sympy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
