"""The ``search`` environment as TRL GRPOTrainer's ``environment_factory`` (``train-policy --env search:CORPUS``).

TRL (>= 1.16) builds one ``SearchTools`` per rollout, calls ``reset(**row)`` (the row's ``id`` names the question;
the returned observation is appended to the prompt's user message) and exposes the public methods ``search``,
``open`` and ``answer`` as tools: their type hints and docstrings are the JSON schema the chat template shows the
policy. The policy calls them by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; TRL parses
that with the tokenizer's response template, runs the method, appends its result as a ``tool`` turn and lets the
policy go on. We subclass nothing: the trainer is TRL's as is.

The reward (``episode_reward``, a reward function, not ``get_reward``: it needs the rollout's last message) is the
episode's verifier score: at ``answer(text)`` when the policy called it; otherwise its last reply without a tool
call is its answer (the convention of the runtime's own tool loops, and of OpenAI-style agents) and is scored the
same way. A rollout that ends on a tool call, or that the environment ended at its step or token cap, scores 0.
No bonus is paid for calling a tool: searching pays only through a better answer.

Tool calling needs a chat template that renders tools and tool turns, and a response template that parses the
calls. ``use_tool_template`` gives a ChatML tokenizer (SmolLM2's) TRL's Qwen2.5 tool template, with the model's own
default system line, and TRL's Qwen response template; the trained policy is saved with it, and it renders a chat
without tools exactly as SmolLM2's own template does, so ``--policy hf:OUT`` runs as before.

``play`` runs episodes greedily outside the trainer (the held-out watch and ``evals/bench/env_bench.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrt.core.errors import InputError

SYSTEM = ("You answer a question from a document index with tools. Call search with a few keywords, read the "
          "passages, open one if you need all of it, then call answer with a short answer. A reply without a tool "
          "call is your answer: then reply with the answer alone, in a few words.")
_QWEN_LINE = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
_FALLBACK_LINE = "You are a helpful assistant."


def use_tool_template(tokenizer: Any) -> None:
    """Make ``tokenizer`` render tools and parse tool calls (see the module docstring). A tokenizer that already
    has a response template is left as it is; a chat template that is not ChatML is an InputError (give the model
    a tool-calling template TRL knows: ``trl.chat_template_utils.add_response_schema``)."""
    if getattr(tokenizer, "response_template", None) is not None:
        return
    from trl.chat_template_utils import qwen2_5_chat_template, qwen3_template

    own = str(tokenizer.chat_template or "")
    if "<|im_start|>" not in own:
        raise InputError("the policy's chat template is not ChatML (<|im_start|> ... <|im_end|>): give it a chat "
                         "template that renders tools and a response template (trl.chat_template_utils."
                         "add_response_schema lists the ones TRL knows), or train a ChatML model (SmolLM2, Qwen)")
    if "tools" in own:  # the model has its own tool template: keep it, and parse with the Qwen/Hermes format
        tokenizer.response_template = qwen3_template
        return
    found = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", own, re.S)
    line = found.group(1) if found and "{" not in found.group(1) else _FALLBACK_LINE
    tokenizer.chat_template = qwen2_5_chat_template.replace(_QWEN_LINE, line.replace("'", "\\'"))
    tokenizer.response_template = qwen3_template


@dataclass(frozen=True, slots=True)
class Question:
    """A question an episode can be reset to: its ground truth and verifier (a name or a scoring function)."""

    id: str
    question: str
    ground_truth: Any
    verifier: Any


class SearchTools:
    """A ``search`` episode (``agentrt.envs.search.SearchEpisode``) as TRL's environment: ``reset(**row)`` and
    the three tools. ``questions``: id -> ``Question`` (rows carry only the id: a verifier may be a function,
    which a dataset column cannot hold); ``make_episode``: a fresh ``SearchEpisode`` (corpus, budgets and
    recorder bound). Only the tools are public methods: TRL turns every other public method into a tool."""

    def __init__(self, questions: Mapping[str, Question], make_episode: Callable[[], Any]) -> None:
        self._questions = questions
        self.episode = make_episode()
        self.answered_by_tool = False  # the policy called answer(text), rather than replying without a tool call

    def reset(self, **row: Any) -> str:
        """Start the episode of the row's ``id``; the first observation (the question, the actions, the limits)."""
        item = self._questions.get(str(row.get("id", "")))
        if item is None:
            raise InputError(f"no question with id {row.get('id')!r} in this environment; rows need an 'id' "
                             "column naming one of its questions")
        self.answered_by_tool = False
        return self.episode.reset(item.question, item.ground_truth, item.verifier, item.id)

    def search(self, query: str) -> str:
        """Search the document index and show the best passages as '[id] title: text' lines.

        Args:
            query: a few keywords naming what to find
        """
        return self.episode.search(query)

    def open(self, doc_id: str) -> str:
        """Show one passage in full.

        Args:
            doc_id: the id of a passage a search showed, e.g. p12
        """
        return self.episode.open(doc_id)

    def answer(self, text: str) -> str:
        """Give the final answer; this ends the episode.

        Args:
            text: the short answer
        """
        self.answered_by_tool = self.answered_by_tool or not self.episode.done
        return self.episode.answer(text)

    def _finish(self, completion: Any) -> float:
        """End the episode from the rollout's messages (a reply without a tool call is the answer); its reward."""
        ep = self.episode
        if not ep.done:
            ep.answer(final_text(completion))
        return float(ep.reward)


def final_text(completion: Any) -> str:
    """The last assistant reply that calls no tool ('' when the rollout ends on a tool call or a tool result)."""
    if isinstance(completion, str):
        return completion
    last = completion[-1] if completion else {}
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return ""
    content = last.get("content") or ""
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content if isinstance(p, dict))


def episode_reward(completions: list[Any], environments: list[SearchTools] | None = None,
                   log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float]:
    """TRL reward function: each rollout's episode reward (see the module docstring); logs the share of
    episodes answered through the tool, that searched before answering, and the mean steps."""
    if not environments:
        raise InputError("episode_reward scores environment rollouts: pass environment_factory to the trainer")
    rewards = [env._finish(c) for env, c in zip(environments, completions)]
    if log_metric is not None and environments:
        n = len(environments)
        log_metric("env/searched_before_answer", sum(e.episode.searched_before_answer for e in environments) / n)
        log_metric("env/answer_tool", sum(e.answered_by_tool for e in environments) / n)
        log_metric("env/steps", sum(e.episode.steps for e in environments) / n)
    return rewards


def split_questions(questions: list[Question], holdout: float = 0.2) -> tuple[list[Question], list[Question]]:
    """(train, held-out): a stable hash share ``holdout`` of the questions is held out (``agentrt env serve
    --split``'s rule, ``agentrt.envs.episode.held_out``): training never sees those, the watch and the bench
    score on them."""
    from agentrt.envs.episode import held_out

    train, held = [], []
    for q in questions:
        (held if held_out(q.question, holdout) else train).append(q)
    return train, held


def rows_for(questions: list[Question]) -> list[dict[str, Any]]:
    """The trainer's rows: the system message and an empty user turn (``reset`` appends the question and the
    rules to it), and the question's ``id``."""
    return [{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ""}], "id": q.id}
            for q in questions]


def tools_of(env: SearchTools) -> list[Callable[..., str]]:
    """The environment's tools in the order TRL shows them to the policy (``inspect.getmembers`` on the class: by
    name, every public method but ``reset``). Rollouts outside the trainer and the warm start's demonstrations
    render them in this order too: a policy trained on one tool listing reads another as a different prompt."""
    import inspect

    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def demonstrations(questions: list[Question], make_env: Callable[[], SearchTools]) -> list[tuple[list[dict], list]]:
    """Demonstrations for ``--warm-start`` (``agentrt.train.sft``), built by the environment from ``questions``
    (pass training questions only): the episode is reset, searched with the question as the query, and kept only
    when a ground-truth answer appears in what the search showed (rejection: the demonstration is a search that
    worked); the conversation is then the search call, its real result, ``answer`` with the shortest such
    answer, the environment's reply to it, and the answer again as a reply without a tool call (TRL's loop goes
    on while the policy writes calls: this teaches it to stop). Each is (messages, the episode's tools), in the
    chat format TRL's environment loop writes. No episode is answered, so none is recorded as a run."""
    from agentrt.envs.episode import answered

    out = []
    for q in questions:
        env = make_env()
        first = env.reset(id=q.id)
        shown = env.search(q.question)
        found = [a for a in _answers(q.ground_truth) if a.strip() and a.strip().lower() in shown.lower()]
        if not found or env.episode.done:
            continue
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first},
                    _call("search", query=q.question), {"role": "tool", "name": "search", "content": shown},
                    _call("answer", text=(best := min(found, key=len).strip())),
                    {"role": "tool", "name": "answer", "content": answered(1.0)},
                    {"role": "assistant", "content": best}]
        out.append((messages, tools_of(env)))
    return out


def _answers(truth: Any) -> list[str]:
    """A ground truth's answers as the ``qa`` verifier reads them: a list of aliases, else one answer."""
    return [str(a) for a in truth] if isinstance(truth, list) else [str(truth)]


def _call(name: str, **arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def environment_run(questions: list[Question], make_episode: Callable[[], Any], *, max_tool_calls: int = 6) -> Any:
    """The ``agentrt.train.grpo.EnvironmentRun`` of a search environment over ``questions``."""
    from agentrt.train.grpo import EnvironmentRun

    table = {q.id: q for q in questions}
    return EnvironmentRun(factory=lambda: SearchTools(table, make_episode), reward=episode_reward,
                          prepare_tokenizer=use_tool_template, max_tool_calls=max_tool_calls)


# -- greedy episodes outside the trainer (the watch, the bench) ----------------------------------------------------

@dataclass
class Played:
    """One greedy episode: its reward and outcome, and the tokens of its first turn (for the KL)."""

    id: str
    reward: float
    correct: bool
    searched: bool
    answer: str
    turns: int
    tool_calls: int
    tokens: int
    truncated: bool
    prompt_ids: list[int]
    completion_ids: list[int]


def play(model: Any, tokenizer: Any, envs: list[SearchTools], rows: list[dict[str, Any]], *,
         max_new_tokens: int = 64, max_turns: int = 6, batch: int = 8, pass_score: float = 0.5) -> list[Played]:
    """Run one greedy episode per row (each in its own ``SearchTools`` of ``envs``), batching the turns: the policy
    writes, its tool calls run, their results are appended, until it replies without a tool call (its answer),
    the episode ends, or ``max_turns`` turns were taken. ``tokenizer`` must have the tool template
    (``use_tool_template``)."""
    import torch
    from trl.chat_template_utils import parse_response

    out: list[Played] = []
    for start in range(0, len(rows), batch):
        chunk_rows, chunk_envs = rows[start:start + batch], envs[start:start + batch]
        convs = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": env.reset(**row)}]
                 for env, row in zip(chunk_envs, chunk_rows)]
        tools = [tools_of(e) for e in chunk_envs]
        stats = [{"turns": 0, "calls": 0, "tokens": 0, "truncated": False, "first": None} for _ in chunk_rows]
        active = [i for i, e in enumerate(chunk_envs) if not e.episode.done]
        for _turn in range(max_turns):
            if not active:
                break
            prompts = [tokenizer.apply_chat_template(convs[i], tools=tools[i], add_generation_prompt=True,
                                                     return_dict=False) for i in active]
            completions = _generate(model, tokenizer, prompts, max_new_tokens, torch)
            still = []
            for i, prompt, ids in zip(active, prompts, completions):
                s = stats[i]
                s["turns"] += 1
                s["tokens"] += len(ids)
                s["truncated"] = s["truncated"] or (not ids or ids[-1] not in _eos(tokenizer))
                if s["first"] is None:
                    s["first"] = (list(prompt), list(ids))
                msg = parse_response(tokenizer, ids, prefix=prompt, tools=tools[i]) if ids else {"content": ""}
                calls = msg.get("tool_calls") or []
                convs[i].append({"role": "assistant", "content": msg.get("content") or "",
                                 **({"tool_calls": calls} if calls else {})})
                env = chunk_envs[i]
                if not calls:
                    env._finish(convs[i])
                    continue
                for call in calls:
                    s["calls"] += 1
                    convs[i].append({"role": "tool", "name": _call_name(call), "content": _run(env, call)})
                if not env.episode.done:
                    still.append(i)
            active = still
        for i, (env, row) in enumerate(zip(chunk_envs, chunk_rows)):
            if not env.episode.done:
                env._finish([])  # out of turns: no answer
            ep, s = env.episode, stats[i]
            verdict = getattr(ep, "verdict", None)
            correct = bool(verdict.correct) if verdict is not None and verdict.correct is not None \
                else ep.reward >= pass_score
            first = s["first"] or ([], [])
            out.append(Played(str(row.get("id", "")), float(ep.reward), correct, bool(ep.searched_before_answer),
                              ep.answer_text or "", s["turns"], s["calls"], s["tokens"], s["truncated"],
                              first[0], first[1]))
    return out


def _call_name(call: dict[str, Any]) -> str:
    return str((call.get("function") or {}).get("name", call.get("name", "")))


def _run(env: SearchTools, call: dict[str, Any]) -> str:
    """One tool call, as TRL runs it: an unknown tool or bad arguments is an error observation, not a crash."""
    fn = call.get("function") or {}
    name, args = fn.get("name"), fn.get("arguments") or {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {}
    if name not in ("search", "open", "answer") or not isinstance(args, dict):
        return str({"error": f"Tool {name} not found."})
    try:
        return str(getattr(env, name)(**args))
    except Exception as e:  # noqa: BLE001 - TRL turns a failing tool into an error observation too
        return str({"error": str(e)})


def _eos(tokenizer: Any) -> set[int]:
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    return {i for i in ids if isinstance(i, int)}


def _generate(model: Any, tokenizer: Any, prompts: list[list[int]], max_new_tokens: int, torch: Any) -> list[list[int]]:
    """Greedy completions of ``prompts`` (left-padded batch), each cut after its first end token."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=pad)
    if was_training:
        model.train()
    stops = _eos(tokenizer)
    out = []
    for row in gen[:, width:].tolist():
        cut = next((j + 1 for j, t in enumerate(row) if t in stops), len(row))
        out.append(row[:cut])
    return out


@dataclass
class SearchHeldOut:
    """The overoptimization watch's held-out scorer for ``--env search`` (``agentrt.train.watch.make_watch`` calls
    ``score(model)``): greedy episodes on questions training never sees; value = mean episode reward, accuracy,
    the share that searched before answering, the KL to the reference on the first turn, and the answers'
    collapse signals (same answer, empty, cut at the token limit)."""

    rows: list[dict[str, Any]]
    tokenizer: Any
    make_env: Callable[[], SearchTools]
    reference: Any = None
    max_new_tokens: int = 64
    max_turns: int = 6

    def score(self, model: Any, *, records: bool = False) -> dict[str, Any]:
        envs = [self.make_env() for _ in self.rows]
        played = play(model, self.tokenizer, envs, self.rows, max_new_tokens=self.max_new_tokens,
                      max_turns=self.max_turns)
        n = max(1, len(played))
        answers = [p.answer.strip().lower() for p in played]
        top = max((answers.count(a) for a in set(answers)), default=0)
        out: dict[str, Any] = {
            "value": sum(p.reward for p in played) / n, "accuracy": sum(p.correct for p in played) / n,
            "searched_before_answer": sum(p.searched for p in played) / n, "n": len(played),
            "tool_calls": sum(p.tool_calls for p in played) / n, "mean_length": sum(p.tokens for p in played) / n,
            "truncated": sum(p.truncated for p in played) / n, "same_answer": top / n,
            "empty": sum(not a for a in answers) / n,
            "kl": self._kl(model, played) if self.reference is not None else None,
        }
        if records:
            out["records"] = [vars(p) | {"prompt_ids": None, "completion_ids": None} for p in played]
        return out

    def _kl(self, model: Any, played: list[Played]) -> float:
        from agentrt.train.watch import HeldOut

        # The watch's per-token KL(policy || reference) over the first turn's completion tokens.
        return HeldOut([], self.tokenizer, reference=self.reference)._kl(model, [p for p in played if p.completion_ids])


__all__ = ["SYSTEM", "Played", "Question", "SearchHeldOut", "SearchTools", "demonstrations", "environment_run",
           "episode_reward", "final_text", "play", "rows_for", "split_questions", "tools_of", "use_tool_template"]
