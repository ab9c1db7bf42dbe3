"""The model runner of the transformers batcher: the model, its forward passes and its sampler.

It loads a local Hugging Face folder (a Llama or Qwen2 through the lean ``llama.py``, in the weight format of
``lean_weights.py``; anything else through transformers with the CPU speed-ups of ``cpu_speed.py``, saying
so once), runs prompt passes (only
what the prefix cache lacks) and one-token decode steps over a ``Group`` of rows (``kvcache.py``), and picks
each row's next token: grammar mask, then greedy or temperature / top-p sampling. It holds no request state:
the scheduler (``scheduler.py``) decides what runs and records what comes out.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError, missing_extra
from agentrt.core.types import GenParams

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise missing_extra(e.name or "torch", "hf") from None

from agentrt.backends.hf.kvcache import Group, PrefixCache, joinable, new_cache
from agentrt.backends.hf.lean_weights import resolve_format
from agentrt.backends.hf.llama import ENV_IMPL, WEIGHTS, LeanLlama, lean_support
from agentrt.backends.hf.sequence import BatcherStats, Row


log = logging.getLogger("agentrt.hf")
_WARNED: set[str] = set()  # folders whose transformers fallback was announced (once per process)


class ModelRunner:
    """One causal LM on the CPU and the passes the scheduler asks for; counts them in ``stats``.

    ``weights`` is the lean model's weight format (``auto``, ``int8``, ``fp32``: ``lean_weights.py``);
    ``impl`` says what runs: ``lean-fp32``, ``lean-int8`` or ``transformers``."""

    def __init__(self, path: Path, stats: BatcherStats, *, threads: int, wide_threads: int,
                 prefix_cache_mb: int, weights: str = "auto") -> None:
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a Hugging Face model folder (no config.json)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # One thread is as fast at batch 1 and much better when the cores are shared (FACTS.md); wide
        # passes (prompts, several rows) may use more on cores of your own.
        self.threads, self.wide_threads = threads, wide_threads
        torch.set_num_threads(threads)
        self.stats = stats
        impl = (os.environ.get(ENV_IMPL) or "auto").strip().lower()
        if impl not in ("auto", "transformers"):
            raise ConfigError(f"{ENV_IMPL}={impl!r}: use auto (the lean Llama where it fits) or transformers")
        lean, why = lean_support(path) if impl == "auto" else (None, f"{ENV_IMPL}=transformers")
        self.lean = lean is not None  # the lean decoder (``llama.py``) instead of transformers' model classes
        if lean is not None:
            fmt = resolve_format(weights, path / WEIGHTS)
            self.tokenizer = _fast_tokenizer(path)
            self.model = LeanLlama.load(path, lean, fmt)
            self.impl = f"lean-{fmt}"
            log.info("agentrt: %s: %s on the lean runner, %s weights", path.name, lean.architecture, fmt)
        else:
            if impl == "auto" and str(path) not in _WARNED:  # a slower path nobody chose: say so, once
                _WARNED.add(str(path))
                log.warning("agentrt: %s: %s runs on the transformers fallback (slower, fp32)", path.name, why)
            self.tokenizer, self.model = _transformers_model(path)
            self.impl = "transformers"
        self.config = self.model.config
        self.context_length = int(getattr(self.config, "max_position_embeddings", 2048))
        self.vocab_size = int(self.config.vocab_size)
        configured = _eos_ids(self.tokenizer, self.model)
        self.eos_ids = configured | end_of_generation_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(configured)
        # Caches without sliding-window layers can be merged: late requests join a running batch and
        # prompts reuse cached prefixes. Otherwise prompts start together in one left-padded pass.
        self.mergeable = joinable(new_cache(self.config))
        self.prefix_cache = PrefixCache(self.config, prefix_cache_mb * 2**20 if self.mergeable else 0)
        self._grammars = None  # built on first structured request (xgrammar)

    # -- forward passes ----------------------------------------------------------------------------
    def prefill(self, ids: list[int], rows: list[Row]) -> tuple[Group, torch.Tensor]:
        """One prompt's pass over what the prefix cache does not hold; its rows (n choices) share the KV.
        Returns their group and last-token logits (one line per row)."""
        cached, past = self.prefix_cache.lookup(ids)
        past = past if past is not None else new_cache(self.config)
        self.stats.prompt_tokens += len(ids)
        self.stats.prefix_cached_tokens += cached
        positions = torch.arange(cached, len(ids), dtype=torch.long).unsqueeze(0)
        mask = torch.ones((1, len(ids)), dtype=torch.long)
        new_ids = torch.tensor([ids[cached:]], dtype=torch.long)
        out = self._forward(prompt=True, wide=new_ids.shape[1] > 1, input_ids=new_ids, attention_mask=mask,
                            position_ids=positions, past_key_values=past, logits_to_keep=1)
        past = out.past_key_values
        self.prefix_cache.store(ids, past)
        logits = out.logits[:, -1, :].float()
        if len(rows) > 1:  # n choices share the prompt's KV
            past.batch_repeat_interleave(len(rows))
            logits = logits.expand(len(rows), -1)
        return Group(rows, past, new_ids, positions.expand(len(rows), -1), mask.expand(len(rows), -1)), logits

    def prefill_padded(self, rows: list[Row]) -> tuple[Group, torch.Tensor]:
        """One left-padded pass over every row's prompt (sliding-window caches cannot be merged later)."""
        prompts = [r.request.prompt_ids for r in rows]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        out = self._forward(prompt=True, wide=True, input_ids=ids, attention_mask=mask, position_ids=positions,
                            logits_to_keep=1)
        return Group(rows, out.past_key_values, ids, positions, mask), out.logits[:, -1, :].float()

    def decode(self, group: Group) -> torch.Tensor:
        """One step for every row of ``group`` (its cache grows by one token); the next-token logits."""
        out = self._forward(prompt=False, wide=len(group.rows) > 1, input_ids=group.step_ids,
                            attention_mask=group.mask, position_ids=group.step_pos, past_key_values=group.past)
        group.past = out.past_key_values
        return out.logits[:, -1, :].float()

    def _forward(self, *, prompt: bool, wide: bool, **inputs: Any) -> Any:
        n = self.wide_threads if wide else self.threads
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        t0 = time.perf_counter()
        out = self.model(**inputs, use_cache=True)
        if prompt:
            self.stats.prefill_s += time.perf_counter() - t0
        else:
            self.stats.decode_s += time.perf_counter() - t0
        self.stats.forward_passes += 1
        return out

    def score(self, prefix_len: int, rows: list[list[int]]) -> list[float]:
        """Summed log-probability of each row's tokens after its first ``prefix_len`` (one batched pass).
        Stateless, so it may run beside the batcher thread."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):  # right padding: positions stay natural
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        with torch.inference_mode():
            logprobs = torch.log_softmax(self.model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        scores = []
        for i, r in enumerate(rows):
            targets = torch.tensor(r[prefix_len:])
            positions = torch.arange(prefix_len - 1, len(r) - 1)
            scores.append(float(logprobs[i, positions, targets].sum()))
        return scores

    # -- sampling ----------------------------------------------------------------------------------
    def generator(self, params: GenParams, index: int) -> torch.Generator | None:
        """The random stream of choice ``index`` of a sampled request (seeded: the same tokens every time)."""
        if params.temperature <= 0:
            return None
        gen = torch.Generator()
        gen.manual_seed((params.seed if params.seed is not None else time.time_ns()) + index)
        return gen

    def grammar(self, params: GenParams) -> Any:
        """A fresh xgrammar matcher for a structured request (JSON schema or choices); None otherwise."""
        if params.json_schema is None and params.choices is None:
            return None
        if self._grammars is None:
            from agentrt.backends.hf.grammar import GrammarCache

            # xgrammar reads transformers' tokenizer (a LeanTokenizer loads it here, once)
            self._grammars = GrammarCache(getattr(self.tokenizer, "hf", self.tokenizer), self.vocab_size)
        return self._grammars.matcher(params)

    def sample(self, rows: list[Row], logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's next token (grammar mask, repetition penalty, then greedy or temperature / top-k / top-p /
        min-p sampling) and the log-probabilities of the unmasked logits."""
        logprobs = torch.log_softmax(logits, dim=-1)
        constrained = [i for i, r in enumerate(rows) if r.grammar is not None]
        if constrained:  # every grammar row masked in one call (a clone: logprobs stay unmasked)
            logits = self._grammars.mask_rows([rows[i].grammar for i in constrained], logits.clone(), constrained)
        penalized = [i for i, r in enumerate(rows) if r.request.params.repetition_penalty != 1.0]
        if penalized:  # transformers' / vLLM's rule, over the prompt and the output so far; greedy rows too
            logits = logits if constrained else logits.clone()
            for i in penalized:
                seen = torch.tensor(sorted(set(rows[i].request.prompt_ids) | set(rows[i].tokens)), dtype=torch.long)
                picked, penalty = logits[i, seen], rows[i].request.params.repetition_penalty
                logits[i, seen] = torch.where(picked > 0, picked / penalty, picked * penalty)
        next_ids = torch.full((len(rows),), self.pad_id, dtype=torch.long)
        greedy = [i for i, r in enumerate(rows) if r.request.params.temperature <= 0]
        if greedy:
            next_ids[greedy] = logits[greedy].argmax(-1)
        for i, r in enumerate(rows):
            p = r.request.params
            if p.temperature <= 0:
                continue
            scaled = logits[i] / p.temperature
            if 0 < p.top_k < scaled.shape[-1]:  # the k likeliest tokens only (vLLM's order: top-k, top-p, min-p)
                scaled = scaled.masked_fill(scaled < scaled.topk(p.top_k).values[-1], float("-inf"))
            probs = torch.softmax(scaled, dim=-1)
            if p.top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                keep = sorted_p.cumsum(-1) - sorted_p < p.top_p
                probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
            if p.min_p > 0:
                probs = torch.where(probs < p.min_p * probs.max(), torch.zeros_like(probs), probs)
            next_ids[i] = torch.multinomial(probs, 1, generator=r.generator)[0]
        return next_ids, logprobs


def _fast_tokenizer(path: Path) -> Any:
    """The folder's tokenizer without importing transformers where ``lean_tok.py`` can answer for it, else
    transformers' fast tokenizer (without ``AutoTokenizer``'s import chain)."""
    from agentrt.backends.hf.lean_tok import lean_tokenizer

    lean = lean_tokenizer(path)
    if lean is not None:
        return lean
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise missing_extra(e.name or "transformers", "hf") from None
    return PreTrainedTokenizerFast.from_pretrained(path)


def _transformers_model(path: Path) -> tuple[Any, Any]:
    """Tokenizer and model through transformers' Auto classes, with the CPU speed-ups of ``cpu_speed.py``."""
    from agentrt.backends.hf import lean_imports  # noqa: F401 - before transformers: no scikit-learn/SciPy

    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise missing_extra(e.name or "transformers", "hf") from None
    from transformers.utils import logging as hf_logging

    from agentrt.backends.hf.cpu_speed import speed_up

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    speed_up(model)
    return tokenizer, model


# End-of-generation tokens a folder's config may leave out: a GGUF conversion keeps one eos (Qwen2.5's folder names
# <|im_end|>, not the <|endoftext|> its upstream generation config also stops on). These are the texts llama.cpp
# treats as end of generation; one counts where the tokenizer has it as one token of its own.
END_OF_GENERATION = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
                     "<end_of_turn>", "<EOT>")


def end_of_generation_ids(tokenizer: Any) -> set[int]:
    """The ids of ``END_OF_GENERATION`` texts that ``tokenizer`` encodes as one token decoding to itself."""
    ids: set[int] = set()
    for text in END_OF_GENERATION:
        try:
            one = list(tokenizer.encode(text, add_special_tokens=False))
            if len(one) == 1 and tokenizer.decode(one) == text:
                ids.add(int(one[0]))
        except Exception:  # noqa: BLE001 - a tokenizer that cannot say: the config's eos alone
            continue
    return ids


def _eos_ids(tokenizer: Any, model: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(x) for x in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
