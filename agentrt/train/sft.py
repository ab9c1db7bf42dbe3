"""A supervised warm start before GRPO (``agentrt train-policy --env search:CORPUS --warm-start EPOCHS``).

GRPO learns only from differences inside a group: a policy that never writes a tool call gets the same reward for
every sample and no gradient (the embedded SmolLM2-135M wrote 0 parseable calls in 32 samples). The usual cure,
before RL on tools, is a short imitation phase on demonstrations (a "cold start"): here, conversations in the
chat format TRL's environment loop speaks (assistant turns with ``tool_calls``, ``tool`` turns with results),
built by the environment itself from training questions only (``agentrt.envs.trl.demonstrations``).

The loss is the next-token loss on the assistant turns alone (the system line, the question and the tool results
are context, not targets). A plain PyTorch loop: a few dozen short conversations do not need a trainer.

Needs ``agentrt[train,hf]`` (torch, transformers).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.errors import InputError

Conversation = tuple[list[dict[str, Any]], list[Any]]  # (messages, the tools the chat template shows)


@dataclass
class SFTReport:
    """What a warm start did: the mean loss per epoch on the demonstrations, and where the policy is."""

    examples: int
    epochs: int
    losses: list[float]
    tokens: int  # tokens per epoch, context included
    target_tokens: int  # of which the assistant's (the loss)
    wall_s: float
    output_dir: str
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        losses = ", ".join(f"{x:.3f}" for x in self.losses)
        return (f"warm start: {self.examples} demonstrations x {self.epochs} epochs in {self.wall_s:.0f} s; loss per "
                f"epoch {losses}; policy: {self.output_dir}")


def assistant_tokens(tokenizer: Any, messages: list[dict[str, Any]], tools: list[Any] | None = None
                     ) -> tuple[list[int], list[int]]:
    """(token ids, labels) of a conversation as the chat template renders it with ``tools``: labels are the ids
    on the assistant turns (what the policy writes, its end token included) and -100 elsewhere. Raises
    InputError when the template does not render a conversation as a prefix of its continuation (then the
    assistant turns cannot be told apart)."""
    ids: list[int] = []
    labels: list[int] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = tokenizer.apply_chat_template(messages[:i], tools=tools, add_generation_prompt=True,
                                               return_dict=False)
        upto = tokenizer.apply_chat_template(messages[: i + 1], tools=tools, return_dict=False)
        if before[: len(ids)] != ids or upto[: len(before)] != before:
            raise InputError("the chat template does not render a conversation as a prefix of its continuation; "
                             "give the policy a ChatML tool template (agentrt.envs.trl.use_tool_template)")
        context, written = before[len(ids):], upto[len(before):]
        ids += context + written
        labels += [-100] * len(context) + written
    if not any(t != -100 for t in labels):
        raise InputError("a demonstration has no assistant turn to learn from")
    return ids, labels


def train_sft(conversations: Sequence[Conversation], output_dir: str | Path, *, model_dir: str | Path | None = None,
              epochs: int = 2, learning_rate: float = 3e-5, batch_size: int = 4, train_layers: int = 0,
              seed: int = 0, prepare_tokenizer: Callable[[Any], None] | None = None,
              progress: bool = True) -> SFTReport:
    """Fine-tune the policy (default: the embedded SmolLM2-135M) on ``conversations`` for ``epochs`` epochs with
    AdamW, the loss on assistant turns only (``assistant_tokens``), and save it with its tokenizer at
    ``output_dir`` (load it with ``--policy hf:OUTPUT_DIR`` or start GRPO from it). ``prepare_tokenizer`` gives the
    tokenizer its tool template first (``agentrt.envs.trl.use_tool_template``); ``train_layers`` > 0 trains only
    the top that many decoder layers."""
    if not conversations:
        raise InputError("no demonstrations to warm-start on; give more training questions (or check that a search "
                         "with the question finds its answer in this corpus)")
    if epochs < 1 or batch_size < 1 or learning_rate <= 0:
        raise InputError("the warm start needs epochs >= 1, batch_size >= 1 and a learning rate > 0")
    import torch

    from agentrt.train.grpo import load_trainable

    started = time.perf_counter()
    _, model, tokenizer, _ = load_trainable(model_dir, seed, train_layers)
    if prepare_tokenizer is not None:
        prepare_tokenizer(tokenizer)
    data = [assistant_tokens(tokenizer, messages, tools) for messages, tools in conversations]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    model.train()
    losses: list[float] = []
    batches = (len(data) + batch_size - 1) // batch_size
    for epoch in range(epochs):
        random.Random(seed + epoch).shuffle(data)
        total = 0.0
        for b in range(batches):
            chunk = data[b * batch_size:(b + 1) * batch_size]
            width = max(len(ids) for ids, _ in chunk)
            input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in chunk])
            labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in chunk])
            mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in chunk])
            loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total += float(loss.item())
            if progress:
                print(f"\rwarm start: epoch {epoch + 1}/{epochs}, batch {b + 1}/{batches}, loss {loss.item():.3f}",
                      end="", file=sys.stderr, flush=True)
        losses.append(total / batches)
    if progress:
        print(file=sys.stderr)
    model.eval()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return SFTReport(examples=len(data), epochs=epochs, losses=losses, tokens=sum(len(i) for i, _ in data),
                     target_tokens=sum(sum(t != -100 for t in lab) for _, lab in data),
                     wall_s=round(time.perf_counter() - started, 1), output_dir=str(out))


__all__ = ["Conversation", "SFTReport", "assistant_tokens", "train_sft"]
