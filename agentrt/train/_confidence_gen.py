"""Generate an answer and its stated confidence with a transformers model: GRPO rollouts and held-out scoring.

The policy answers freely (sampled in training, greedy in scoring). If it wrote its own
``<confidence>q</confidence>`` the completion stands as written (a malformed tag stays malformed and is
penalized). If it wrote none, the runtime adds the tail the way a route asks for one (issue 21): the fixed
text ``\\n<confidence>`` and then a number the model picks under a grammar (``CONFIDENCE_CHOICES``, then
``</confidence>``). Only the tokens the model chose are trained (``env_mask`` 1); the fixed ones (the open tag,
tokens the grammar leaves no choice on, the end token) are masked out of the loss.

``rollout_func`` builds TRL's ``GRPOTrainer(rollout_func=...)`` hook from this (TRL's public, experimental API;
no subclassing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrt.core.confidence import CONFIDENCE_CHOICES, split_confidence, with_instruction

OPEN_TEXT = "\n<confidence>"


@dataclass
class Rollout:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    mask: list[int]          # 1: the model chose the token (trained); 0: fixed by the runtime
    text: str                # the completion as a user would see it (answer + confidence tail)
    tail_added: bool         # the runtime added the confidence tail (the model wrote none)
    hit_limit: bool = False  # the answer ran to the token limit without an end token


class ConfidenceTail:
    """The token trie of ``q</confidence>`` for every allowed q, and the fixed open tag."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos = tokenizer.eos_token_id
        self.open_ids = tokenizer(OPEN_TEXT, add_special_tokens=False).input_ids
        self.trie: dict[tuple[int, ...], set[int]] = {}
        for q in CONFIDENCE_CHOICES:
            ids = tokenizer(f"{q}</confidence>", add_special_tokens=False).input_ids
            for i in range(len(ids)):
                self.trie.setdefault(tuple(ids[:i]), set()).add(ids[i])
            self.trie.setdefault(tuple(ids), set())
        self.max_len = max(len(k) for k in self.trie) + 1

    def allowed(self, done: tuple[int, ...]) -> list[int]:
        nxt = self.trie.get(done)
        return sorted(nxt) if nxt else [self.eos]


def _generate(model: Any, tokenizer: Any, rows: list[list[int]], *, max_new_tokens: int, sample: bool,
              temperature: float, allowed: Any = None) -> tuple[list[list[int]], list[list[float]]]:
    """Batch ``generate`` from token rows (left padding); new ids per row cut after the first end token."""
    import torch

    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device  # the trainer may have moved the policy to a GPU
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    kwargs: dict[str, Any] = {"do_sample": sample, "max_new_tokens": max_new_tokens, "pad_token_id": pad,
                              "output_scores": True, "return_dict_in_generate": True}
    if sample:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    if allowed is not None:
        kwargs["prefix_allowed_tokens_fn"] = lambda b, seq: allowed(tuple(seq[width:].tolist()))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attn, **kwargs)
        scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    if was_training:
        model.train()
    new, logps = [], []
    for seq, lp in zip(out.sequences[:, width:].cpu().tolist(), scores.cpu().tolist()):
        cut = seq.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in seq else len(seq)
        new.append(seq[:cut])
        logps.append([float(x) for x in lp[:cut]])
    return new, logps


def generate_with_confidence(model: Any, tokenizer: Any, prompt_rows: list[list[int]], *, max_answer_tokens: int,
                             sample: bool, temperature: float = 1.0, tail: ConfidenceTail | None = None,
                             force_tail: bool = True, tail_temperature: float | None = None,
                             train_answer: bool = True) -> list[Rollout]:
    """Answer every prompt (token ids, chat template applied); add the grammar tail where no confidence was stated.

    ``force_tail=False``: free generation only (the model must write the tag itself; used to measure that).
    ``tail_temperature``: sampling temperature of the confidence number alone (exploration: a small model prompted
    with one example number puts nearly all its mass on it, and GRPO can only reweight what it samples).
    ``train_answer=False``: only the confidence number is trained (the answer's tokens, and a tag the policy wrote
    itself, get mask 0)."""
    tail = tail or ConfidenceTail(tokenizer)
    answers, answer_lps = _generate(model, tokenizer, prompt_rows, max_new_tokens=max_answer_tokens, sample=sample,
                                    temperature=temperature)
    eos = tokenizer.eos_token_id
    out: list[Rollout] = []
    need: list[int] = []
    for i, (ids, lps) in enumerate(zip(answers, answer_lps)):
        text = tokenizer.decode(ids, skip_special_tokens=True)
        status = split_confidence(text).status
        out.append(Rollout(prompt_rows[i], list(ids), list(lps), [int(train_answer)] * len(ids), text, False,
                           hit_limit=not ids or ids[-1] != eos))
        if status == "missing" and force_tail:
            need.append(i)
    if not need:
        return out
    bases = []
    for i in need:
        r = out[i]
        body = r.completion_ids[:-1] if r.completion_ids and r.completion_ids[-1] == eos else r.completion_ids
        r.completion_ids, r.logprobs, r.mask = list(body), r.logprobs[:len(body)], [int(train_answer)] * len(body)
        bases.append(r.prompt_ids + r.completion_ids + tail.open_ids)
    tails, tail_lps = _generate(model, tokenizer, bases, max_new_tokens=tail.max_len, sample=sample,
                                temperature=tail_temperature or temperature, allowed=tail.allowed)
    for i, t_ids, t_lps in zip(need, tails, tail_lps):
        r = out[i]
        if not t_ids or t_ids[-1] != eos:
            t_ids, t_lps = t_ids + [eos], t_lps + [0.0]
        chose = [int(len(tail.allowed(tuple(t_ids[:k]))) > 1) for k in range(len(t_ids))]
        r.completion_ids += tail.open_ids + t_ids
        r.logprobs += [0.0] * len(tail.open_ids) + t_lps
        r.mask += [0] * len(tail.open_ids) + chose
        r.text = tokenizer.decode(r.completion_ids, skip_special_tokens=True)
        r.tail_added = True
    return out


def prompt_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def rollout_func(*, max_answer_tokens: int, temperature: float = 1.0, force_tail: bool = True,
                 tail_temperature: float | None = None, train_answer: bool = True) -> Any:
    """A TRL ``rollout_func``: one sampled completion (answer + confidence) per prompt it is given."""
    state: dict[str, Any] = {}

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tokenizer = trainer.processing_class
        if "tail" not in state:
            state["tail"] = ConfidenceTail(tokenizer)
        rows = [prompt_ids(tokenizer, p) if isinstance(p, list) else tokenizer(p).input_ids for p in prompts]
        rolls = generate_with_confidence(trainer.model, tokenizer, rows, max_answer_tokens=max_answer_tokens,
                                         sample=True, temperature=temperature, tail=state["tail"],
                                         force_tail=force_tail, tail_temperature=tail_temperature,
                                         train_answer=train_answer)
        return {"prompt_ids": [r.prompt_ids for r in rolls], "completion_ids": [r.completion_ids for r in rolls],
                "logprobs": [r.logprobs for r in rolls], "env_mask": [r.mask for r in rolls],
                "tail_added": [r.tail_added for r in rolls]}

    return rollout
