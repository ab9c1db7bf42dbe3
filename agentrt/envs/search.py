"""``search:CORPUS``: multi-turn search over a private index, one episode per question.

The policy acts with ``search(query)`` (the top ``k`` passages of a hybrid BM25 + vector search of the
corpus, the same ``memory.corpus.Corpus.search`` the ``read`` route and ``agentrt search`` use), ``open(id)``
(one passage in full) and ``answer(text)``, which ends the episode and is scored by the item's verifier.

The budget is the environment's, not the policy's: every action and every observation is counted
(``token_counter``: the project's offline o200k count unless the trainer passes its tokenizer's), an
observation is cut to what the budget has left, and the episode ends, reward 0 and reason ``budget``,
when the step cap or the token budget is reached before an answer. That end is recorded ``truncated`` with
no answer, never ``ok``.

    >>> ep = SearchEpisode(open_search_corpus("evals/data/hotpotqa-index-corpus.jsonl", settings))
    >>> ep.reset("Who directed ...?", ["Jane Doe"], "qa", item_id="hi01")
    >>> ep.search("director of ...")        # '[p12] Title: text ...' lines
    >>> ep.answer("Jane Doe"); ep.reward    # 1.0
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agentrt.core.answer import check_answer
from agentrt.core.config import Settings
from agentrt.core.errors import UserError
from agentrt.envs.episode import (EpisodeLog, Recorder, Scorer, answered, check_verifier, score_answer,
                                   token_counter, verifier_name, write)
from agentrt.trajectory import RewardBreakdown, TrajectoryRecord, tool_call_step

ROUTE = "env:search"
PASSAGE_CHARS = 300  # a search hit's snippet (about 70 tokens: a few searches fit 1024); open() shows it whole
ANSWER_RESERVE = 32  # tokens an observation always leaves for the answer (at most a quarter of the budget)
OPEN_CHARS = 4000  # an opened passage longer than this is cut (a chunk rarely is)
ACTIONS = ("search", "open", "answer")
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?]) ")
_STOP = frozenset("a an the of in on at to and or is are was were be by for with from as it its that this what who "
                  "which when where why how did does do".split())
OVER = "error: the episode is over; call reset() to start another"


def open_search_corpus(name_or_path: str, settings: Settings) -> Any:
    """The corpus a ``search`` episode reads: a collection NAME of the memory store, or a PATH (a .jsonl /
    .txt / .md file or a folder of them) indexed once into a collection named after its content, exactly as
    ``--corpus`` resolves it (``agentrt.app.corpus.resolve_corpus``; a missing name is a ConfigError naming
    the collections there are). The eval families (hotpotqa-index, squad, docs) are files under evals/data/:
    the CLI maps those names to their files (``agentrt.app.commands.env``) before calling this."""
    from agentrt.app.corpus import resolve_corpus
    from agentrt.routes.index import open_corpus_at
    from memory.corpus import resolve_location

    name = resolve_corpus(settings, name_or_path)
    return open_corpus_at(resolve_location(settings), name)


class SearchEpisode:
    """One question, searched over ``corpus`` (anything with ``search(query, k)`` -> hits with id, title and
    text, and ``get(id)`` -> a hit or None: ``memory.corpus.Corpus``) within ``max_steps`` actions and
    ``token_budget`` tokens; ``recorder`` (a ``TrajectoryWriter``) receives one record when it ends."""

    def __init__(self, corpus: Any, *, max_steps: int = 6, token_budget: int = 1024, k: int = 3,
                 recorder: Recorder | None = None, count_tokens: Callable[[str], int] | None = None,
                 passage_chars: int = PASSAGE_CHARS) -> None:
        if max_steps < 1 or token_budget < 1 or k < 1 or passage_chars < 1:
            raise UserError(f"max_steps, token_budget, k and passage_chars must be >= 1 (got {max_steps}, "
                            f"{token_budget}, {k}, {passage_chars})")
        self.corpus = corpus
        self.max_steps, self.token_budget, self.k, self.passage_chars = max_steps, token_budget, k, passage_chars
        self.recorder = recorder
        self._count = token_counter(count_tokens)
        self._reserve = min(ANSWER_RESERVE, token_budget // 4)
        self._log: EpisodeLog | None = None
        self._clear()

    def _clear(self) -> None:
        self.done = False
        self.reward = 0.0
        self.steps = 0
        self.tokens_used = 0
        self.searched_before_answer = False  # a search ran, then the episode ended with an answer
        self._searched = False
        self.answer_text: str | None = None
        self.end_reason: str | None = None  # answer | budget
        self.verdict: RewardBreakdown | None = None
        self.record: TrajectoryRecord | None = None  # the record written at the end
        self.opened: list[str] = []

    # -- the episode ------------------------------------------------------------------------------

    def reset(self, question: str, answer: Any, verifier: str | Scorer, item_id: str = "") -> str:
        """Start an episode on ``question`` (``answer``: the verifier's ground truth; ``verifier``: a name in
        ``agentrt.trajectory.rewards.VERIFIERS`` or a function (answer, route) -> RewardBreakdown).
        Returns the first observation: the question, the actions and the limits."""
        if not isinstance(question, str) or not question.strip():
            raise UserError("the question is empty; give the episode a question to answer")
        check_verifier(verifier)
        self._clear()
        self._log = EpisodeLog("search", question, answer, verifier, item_id)
        obs = (f"Question: {question}\n"
               f"Find the answer in the index, then answer. Actions: search(query) shows the top {self.k} "
               "passages as '[id] title: text'; open(id) shows one passage in full; answer(text) ends the "
               f"episode. Limits: {self.max_steps} actions, {self.token_budget} tokens.")
        return self._observe(obs)

    def search(self, query: str) -> str:
        """The top ``k`` passages for ``query`` as ``[id] title: text`` lines (a one-line error observation
        for an empty query or a failed search)."""
        query = query if isinstance(query, str) else ""
        if (early := self._act("search", {"query": query})) is not None:
            return early
        t0 = self._need().t()
        try:
            hits = list(self.corpus.search(query, self.k))[: self.k] if query.strip() else None
        except Exception as e:  # noqa: BLE001 - a failed search is an observation, not a crash
            return self._tool("search", {"query": query}, error=f"search failed: {type(e).__name__}: {e}", t0=t0)
        if hits is None:
            return self._tool("search", {"query": query}, error="empty query; search(query) needs some words", t0=t0)
        self._searched = True
        text = "\n".join(f"[{h.id}] {_title(h)}: {snippet(h.text, query, self.passage_chars)}" for h in hits) \
            or f"no passages match {query!r}"
        return self._tool("search", {"query": query}, text, t0=t0)

    def open(self, doc_id: str) -> str:
        """Passage ``doc_id`` in full, or a one-line error observation when there is none."""
        doc_id = str(doc_id or "").strip().strip("[]")
        if (early := self._act("open", {"id": doc_id})) is not None:
            return early
        t0 = self._need().t()
        try:
            hit = self.corpus.get(doc_id) if doc_id else None
        except Exception as e:  # noqa: BLE001
            return self._tool("open", {"id": doc_id}, error=f"open failed: {type(e).__name__}: {e}", t0=t0)
        if hit is None:
            return self._tool("open", {"id": doc_id}, t0=t0,
                              error=f"no passage {doc_id!r}; open one of the ids a search showed")
        self.opened.append(doc_id)
        return self._tool("open", {"id": doc_id}, f"[{hit.id}] {_title(hit)}: {_cut(hit.text, OPEN_CHARS)}", t0=t0)

    def answer(self, text: str) -> str:
        """End the episode with ``text`` as the answer, scored by the verifier; a short observation."""
        text = (text if isinstance(text, str) else "").strip()
        if (early := self._act("answer", {"text": text})) is not None:
            return early
        log = self._need()
        self.answer_text = text
        self.searched_before_answer = self._searched
        self.verdict = score_answer(log.verifier, log.ground_truth, text, ROUTE, log.question)
        self.reward = float(self.verdict.score)
        real = check_answer(text, log.question)
        self._end("answer", status="ok" if real.ok else "no_answer",
                  error=None if real.ok else f"no answer: {real.reason}")
        return answered(self.reward)

    def state(self) -> dict[str, Any]:
        """The episode's counters (what OpenEnv's ``state`` shows)."""
        log = self._log
        return {"episode_id": log.run_id if log else None, "item_id": log.item_id if log else "", "steps": self.steps,
                "max_steps": self.max_steps, "tokens_used": self.tokens_used, "token_budget": self.token_budget,
                "done": self.done, "reward": self.reward, "end_reason": self.end_reason,
                "searched_before_answer": self.searched_before_answer}

    # -- accounting -------------------------------------------------------------------------------

    def _need(self) -> EpisodeLog:
        if self._log is None:
            raise UserError("call reset(question, answer, verifier) before acting")
        return self._log

    def _act(self, name: str, args: dict[str, str]) -> str | None:
        """Charge an action (one step, its tokens); an observation when it cannot be taken, else None."""
        log = self._need()
        if self.done:
            return OVER
        cost = self._count(f"{name}({next(iter(args.values()))})")  # the call as the policy writes it
        # a search or open must leave room for its observation and the answer; an answer only has to fit
        left = self.token_budget - self.tokens_used - cost
        if left < 0 or (name != "answer" and left <= self._reserve):
            log.steps.append(tool_call_step(name, args, error="over the token budget"))
            remain = self.token_budget - self.tokens_used
            return self._end_budget(f"the answer needs {cost} tokens, {remain} remain" if name == "answer" else
                                    f"{remain} tokens remain, too few for another {name} and an answer")
        self.steps += 1
        self.tokens_used += cost
        log.completion_tokens += cost
        return None

    def _observe(self, text: str) -> str:
        """Charge an observation, cut so that the answer reserve stays free."""
        log = self._need()
        room = max(0, self.token_budget - self.tokens_used - self._reserve)
        n = self._count(text)
        while text and n > room:  # cut by characters: any counter works, no decode needed
            text = text[: max(0, len(text) * room // n - 1)]
            n = self._count(text) if text else 0
        self.tokens_used += n
        log.prompt_tokens += n
        return text

    def _tool(self, name: str, args: dict[str, Any], result: str | None = None, *, error: str | None = None,
              t0: float = 0.0) -> str:
        """Observe a tool's result (or error line), record the step, and end at the caps."""
        obs = self._observe(result if error is None else f"error: {error}")
        log = self._need()
        step = tool_call_step(name, args, obs if error is None else None, error=error,
                              latency_s=log.t() - t0)
        step["t_start_s"] = t0
        log.steps.append(step)
        if self.steps >= self.max_steps:
            return obs + "\n" + self._end_budget(f"the step cap ({self.max_steps} actions) is reached")
        return obs

    def _end_budget(self, why: str) -> str:
        self.reward = 0.0
        self._end("budget", status="truncated", error=f"budget: {why} before an answer")
        return f"The episode is over before an answer: {why}. Reward 0."

    def _end(self, reason: str, *, status: str, error: str | None) -> None:
        log = self._need()
        self.done, self.end_reason = True, reason
        self.record = log.record(
            route=ROUTE, answer=(self.answer_text or "") if reason == "answer" else "", status=status, error=error,
            budget=self.token_budget, spent=self.tokens_used, reward=self.verdict if reason == "answer" else
            RewardBreakdown(score=0.0, correct=False, reason=error or "", verifier=verifier_name(log.verifier)),
            metadata={"max_steps": self.max_steps, "token_budget": self.token_budget, "k": self.k,
                      "steps": self.steps, "tokens_used": self.tokens_used, "end_reason": reason,
                      "searched_before_answer": self.searched_before_answer,
                      "opened": list(self.opened)})
        write(self.recorder, self.record)


def _title(hit: Any) -> str:
    return str(getattr(hit, "title", "") or (getattr(hit, "metadata", None) or {}).get("title", "") or "")


def snippet(text: str, query: str, chars: int) -> str:
    """At most ``chars`` characters of ``text`` around its sentence that shares the most words with ``query``
    (a passage's head often lacks what was asked: with the question as the query, the gold answer was in the
    top-3 heads of 300 characters for 16 of 40 SQuAD questions, in these windows for 30, in the whole passages
    for 38; HotpotQA's short paragraphs: 20, 19, 21 of 40); ``…`` marks a cut."""
    text = " ".join(str(text or "").split())
    if len(text) <= chars:
        return text
    words = {w for w in _WORD.findall(query.lower()) if w not in _STOP}
    sentences = _SENTENCE.split(text)
    best = max(range(len(sentences)), key=lambda i: (len(words & set(_WORD.findall(sentences[i].lower()))), -i))
    start = sum(len(x) + 1 for x in sentences[:best])
    lo, hi = start, min(len(text), start + chars)
    if hi - lo < chars:  # the best sentence ends the text: take the rest from before it
        lo = max(0, hi - chars)
    out = text[lo:hi]
    return ("…" if lo > 0 else "") + out.strip() + ("…" if hi < len(text) else "")


def _cut(text: str, chars: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"



__all__ = ["ACTIONS", "ROUTE", "SearchEpisode", "open_search_corpus", "snippet"]
