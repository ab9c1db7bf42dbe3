"""``suite:NAME``: a single-turn verifiable task per episode.

``reset`` shows the question (the prompt); ``answer(text)`` scores it with the item's verifier and ends
the episode. The budget counts the prompt and the answer (``token_counter``); an answer that does not
fit is cut off: the episode ends ``truncated`` with reward 0 and reason ``budget``.

    >>> ep = SuiteEpisode(token_budget=512)
    >>> ep.reset("What is 6 * 7?", "42", "numeric", item_id="a1")
    >>> ep.answer("#### 42"); ep.reward    # 1.0
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentrt.core.answer import check_answer
from agentrt.core.errors import UserError
from agentrt.envs.episode import (EpisodeLog, Recorder, Scorer, answered, check_verifier, score_answer,
                                   token_counter, verifier_name, write)
from agentrt.trajectory import RewardBreakdown, TrajectoryRecord

ROUTE = "env:suite"
ACTIONS = ("answer",)
OVER = "error: the episode is over; call reset() to start another"


class SuiteEpisode:
    """One question answered once, within ``token_budget`` tokens (prompt + answer); ``recorder`` (a
    ``TrajectoryWriter``) receives one record when it ends."""

    def __init__(self, *, token_budget: int = 1024, recorder: Recorder | None = None,
                 count_tokens: Callable[[str], int] | None = None) -> None:
        if token_budget < 1:
            raise UserError(f"token_budget must be >= 1 (got {token_budget})")
        self.token_budget = token_budget
        self.recorder = recorder
        self._count = token_counter(count_tokens)
        self._log: EpisodeLog | None = None
        self._clear()

    def _clear(self) -> None:
        self.done = False
        self.reward = 0.0
        self.steps = 0
        self.tokens_used = 0
        self.answer_text: str | None = None
        self.end_reason: str | None = None  # answer | budget
        self.verdict: RewardBreakdown | None = None
        self.record: TrajectoryRecord | None = None

    def reset(self, question: str, answer: Any, verifier: str | Scorer, item_id: str = "") -> str:
        """Start an episode on ``question`` (``answer``: the verifier's ground truth; ``verifier``: a name in
        ``agentrt.trajectory.rewards.VERIFIERS`` or a function (answer, route) -> RewardBreakdown).
        Returns the prompt: the question as the suite asks it."""
        if not isinstance(question, str) or not question.strip():
            raise UserError("the question is empty; give the episode a question to answer")
        check_verifier(verifier)
        self._clear()
        self._log = EpisodeLog("suite", question, answer, verifier, item_id)
        n = self._count(question)
        self.tokens_used = n
        self._log.prompt_tokens = n
        return question

    def answer(self, text: str) -> str:
        """Score ``text`` with the verifier and end the episode; a short observation."""
        if self._log is None:
            raise UserError("call reset(question, answer, verifier) before answering")
        if self.done:
            return OVER
        log = self._log
        t0 = time.perf_counter()
        text = (text if isinstance(text, str) else "").strip()
        cost = self._count(text)
        self.steps = 1
        left = self.token_budget - self.tokens_used
        if cost > left:
            why = f"budget: the answer needs {cost} tokens, {max(left, 0)} remain"
            self.verdict = RewardBreakdown(score=0.0, correct=False, reason=why, verifier=verifier_name(log.verifier))
            self._end("budget", "", "truncated", why)
            return f"The episode is over: {why[8:]}. Reward 0."
        self.tokens_used += cost
        log.completion_tokens = cost
        self.answer_text = text
        self.verdict = score_answer(log.verifier, log.ground_truth, text, ROUTE, log.question)
        self.reward = float(self.verdict.score)
        real = check_answer(text, log.question)
        self._end("answer", text, "ok" if real.ok else "no_answer", None if real.ok else f"no answer: {real.reason}",
                  latency_s=round(time.perf_counter() - t0, 4))
        return answered(self.reward)

    def state(self) -> dict[str, Any]:
        """The episode's counters (what OpenEnv's ``state`` shows)."""
        log = self._log
        return {"episode_id": log.run_id if log else None, "item_id": log.item_id if log else "", "steps": self.steps,
                "tokens_used": self.tokens_used, "token_budget": self.token_budget, "done": self.done,
                "reward": self.reward, "end_reason": self.end_reason}

    def _end(self, reason: str, answer: str, status: str, error: str | None, latency_s: float = 0.0) -> None:
        log = self._log
        if log is None:
            raise UserError("call reset(question, answer, verifier) before answering")
        self.done, self.end_reason = True, reason
        self.record = log.record(route=ROUTE, answer=answer, status=status, error=error, budget=self.token_budget,
                                 spent=self.tokens_used, reward=self.verdict,
                                 metadata={"token_budget": self.token_budget, "tokens_used": self.tokens_used,
                                           "end_reason": reason, "latency_s": latency_s})
        write(self.recorder, self.record)



__all__ = ["ACTIONS", "ROUTE", "SuiteEpisode"]
