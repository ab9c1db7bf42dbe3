"""``strategy``: one step. The policy names a route; the runtime runs the question on it; the reward is the
verifier's score minus ``lam * tokens / budget`` (the router's utility: ``agentrt.router.UtilityConfig``).

``reset`` shows the route-label prompt the ``self:PATH`` router scores (``agentrt.router.selfpolicy.messages``:
the labels of ``agentrt.router.ACTIONS``, direct, reason, plan, read, ask, abstain, around the question);
``choose(label)`` runs ``agent`` (an ``agentrt.app.agent.Agent``, given by the caller) with that route fixed
and the episode's budget, exactly as ``agentrt run --route LABEL --budget N`` does, and ends the episode.
The reply's first label word is the choice (``selfpolicy.parse_label``, as the trainer and the router read
it); a reply that names none ends the episode with reward 0.

``outcomes(item_id_or_question, route) -> (score, tokens) | None`` (optional: an outcome cache from
exploration logs) answers without running; the runtime runs only on a miss.

    >>> ep = StrategyEpisode(Agent(), budget=512)
    >>> ep.reset("What is 6 * 7?", "42", "numeric", item_id="a1")
    >>> ep.choose("direct"); ep.reward     # 1.0 - 0.3 * tokens / 512 when the answer is right
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentrt.core.answer import check_answer
from agentrt.core.errors import UserError
from agentrt.envs.episode import (EpisodeLog, Recorder, Scorer, check_verifier, score_answer, verifier_name,
                                   write)
from agentrt.router import ACTIONS as LABELS
from agentrt.router.selfpolicy import messages, parse_label
from agentrt.trajectory import RewardBreakdown, RouteStep, RunTask, TrajectoryRecord

ROUTE = "env:strategy"
LAM = 0.3  # the router's default token weight (UtilityConfig.lam): the same trade-off the router makes
OVER = "error: the episode is over; call reset() to start another"
Outcomes = Callable[[str, str], "tuple[float, int] | None"]


class StrategyEpisode:
    """One question, one route label, one run of ``agent`` within ``budget`` tokens; ``recorder`` (a
    ``TrajectoryWriter``) receives the episode's record (the agent writes the run's own record as usual)."""

    def __init__(self, agent: Any, *, budget: int = 1024, lam: float = LAM, recorder: Recorder | None = None,
                 outcomes: Outcomes | None = None, labels: tuple[str, ...] = LABELS) -> None:
        if budget < 1 or lam < 0:
            raise UserError(f"budget must be >= 1 and lam >= 0 (got {budget}, {lam})")
        unknown = [x for x in labels if x not in LABELS]
        if unknown or not labels:
            raise UserError(f"unknown route labels {unknown}; choose among {', '.join(LABELS)}")
        self.agent, self.budget, self.lam, self.labels = agent, budget, lam, tuple(labels)
        self.recorder, self.outcomes = recorder, outcomes
        self._log: EpisodeLog | None = None
        self._clear()

    def _clear(self) -> None:
        self.done = False
        self.reward = 0.0
        self.score = 0.0  # the verifier's score of the run's answer
        self.tokens = 0  # the run's tokens (prompt + completion)
        self.steps = 0
        self.route: str | None = None
        self.answer_text: str | None = None
        self.cached = False  # the outcome came from ``outcomes``, nothing ran
        self.end_reason: str | None = None  # answer | invalid | failed
        self.result: Any = None  # the agent's Result (None when cached or invalid)
        self.verdict: RewardBreakdown | None = None
        self.record: TrajectoryRecord | None = None
        self.prompt: list[Any] = []

    def reset(self, question: str, answer: Any, verifier: str | Scorer, item_id: str = "") -> str:
        """Start an episode on ``question`` (``answer``: the verifier's ground truth; ``verifier``: a name in
        ``agentrt.trajectory.rewards.VERIFIERS`` or a function (answer, route) -> RewardBreakdown).
        Returns the observation: the question and the route labels to choose from."""
        if not isinstance(question, str) or not question.strip():
            raise UserError("the question is empty; give the episode a question to answer")
        check_verifier(verifier)
        self._clear()
        self._log = EpisodeLog("strategy", question, answer, verifier, item_id)
        self.prompt = messages(question)  # the chat the self router scores (system + user), for a trainer in process
        return "\n\n".join(m.content for m in self.prompt)

    def choose(self, label: str, *, propensity: float | None = None) -> str:
        """Run the question on route ``label`` and end the episode (``propensity``: the policy's probability
        of that label, recorded for off-policy learning). Not inside an event loop: use ``achoose`` there."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.achoose(label, propensity=propensity))
        raise UserError("StrategyEpisode.choose() was called inside an event loop; use `await episode.achoose(...)`")

    async def achoose(self, label: str, *, propensity: float | None = None) -> str:
        """The async form of ``choose``."""
        log = self._log
        if log is None:
            raise UserError("call reset(question, answer, verifier) before choosing")
        if self.done:
            return OVER
        self.steps = 1
        route = parse_label(label) if isinstance(label, str) else None
        route = route if route in self.labels else None
        if route is None:
            why = f"no route label in {str(label)[:40]!r}; reply with one of {', '.join(self.labels)}"
            self.verdict = RewardBreakdown(score=0.0, correct=False, reason=why, verifier=verifier_name(log.verifier))
            self._end("invalid", "", "no_answer", why, propensity)
            return f"error: {why}. Reward 0."
        self.route = route
        hit = self.outcomes(log.item_id or log.question, route) if self.outcomes is not None else None
        if hit is not None:
            self.cached = True
            self.score, self.tokens = float(hit[0]), int(hit[1])
            log.completion_tokens = self.tokens  # the cache keeps no split of the run's tokens
            self.verdict = RewardBreakdown(score=self.score, reason="cached outcome",
                                           verifier=verifier_name(log.verifier))
            self._settle()
            self._end("answer", "", "no_answer", "cached outcome: no run, no answer text", propensity)
            return self._observation()
        return await self._run(log, route, propensity)

    async def _run(self, log: EpisodeLog, route: str, propensity: float | None) -> str:
        # the run is scored as the episode is: the agent's own record carries the same reward
        task = RunTask(log.task_info(),
                       reward=lambda answer, r: score_answer(log.verifier, log.ground_truth, answer, r, log.question))
        t0 = time.perf_counter()
        try:
            result = await self.agent.arun(log.question, route=route, budget=self.budget, task=task,
                                           metadata={"env": "strategy", "item_id": log.item_id})
        except Exception as e:  # noqa: BLE001 - a route that fails scores 0; the agent recorded the failed run
            why = f"the {route} route failed: {type(e).__name__}: {e}"
            self.verdict = RewardBreakdown(score=0.0, correct=False, reason=why, verifier=verifier_name(log.verifier))
            self._end("failed", "", "failed", why, propensity)
            return f"error: {why}. Reward 0."
        self.result = result
        self.answer_text = result.answer
        self.tokens = int(result.usage.total_tokens)
        log.prompt_tokens, log.completion_tokens = result.usage.prompt_tokens, result.usage.completion_tokens
        self.verdict = result.reward or score_answer(log.verifier, log.ground_truth, result.answer, route, log.question)
        self.score = float(self.verdict.score)
        self._settle()
        real = check_answer(result.answer, log.question)
        status = result.status if result.status != "ok" or real.ok else "no_answer"
        self._end("answer", result.answer, status, result.error, propensity,
                  run_id=result.trajectory_id, latency_s=round(time.perf_counter() - t0, 4))
        return self._observation()

    def _settle(self) -> None:
        self.reward = round(self.score - self.lam * self.tokens / self.budget, 6)

    def _observation(self) -> str:
        answer = f" Answer: {self.answer_text}" if self.answer_text else ""
        return (f"Route {self.route}: score {self.score:.2f}, {self.tokens} tokens of {self.budget}; "
                f"reward {self.reward:.3f}.{answer}")

    def state(self) -> dict[str, Any]:
        """The episode's outcome so far (what OpenEnv's ``state`` shows)."""
        log = self._log
        return {"episode_id": log.run_id if log else None, "item_id": log.item_id if log else "", "steps": self.steps,
                "done": self.done, "route": self.route, "score": self.score, "tokens": self.tokens,
                "budget": self.budget, "lam": self.lam, "reward": self.reward, "cached": self.cached,
                "end_reason": self.end_reason}

    def _end(self, reason: str, answer: str, status: str, error: str | None, propensity: float | None,
             run_id: str | None = None, latency_s: float = 0.0) -> None:
        log = self._log
        if log is None:
            raise UserError("call reset(question, answer, verifier) before choosing")
        self.done, self.end_reason = True, reason
        if self.route is not None:
            log.steps.append(RouteStep(route=self.route, propensity=1.0 if propensity is None else propensity,
                                       router="policy", reason="the policy's route label", t_start_s=0.0,
                                       expected_tokens={}, p_success={}).model_dump())
        env_reward = RewardBreakdown(score=self.reward, components={"score": self.score},
                                     penalties={"tokens": round(self.lam * self.tokens / self.budget, 6)},
                                     reason=self.verdict.reason if self.verdict else "", verifier=ROUTE)
        self.record = log.record(
            route=ROUTE, answer=answer, status=status, error=error, budget=self.budget, spent=self.tokens,
            reward=self.verdict,
            metadata={"label": self.route, "lam": self.lam, "tokens": self.tokens,
                      "score": self.score, "cached": self.cached, "end_reason": reason, "run_id": run_id,
                      "propensity": propensity, "latency_s": latency_s})
        self.record.reward = self.reward
        self.record.rewards = {**self.record.rewards, "env": env_reward}
        write(self.recorder, self.record)


__all__ = ["LABELS", "LAM", "ROUTE", "StrategyEpisode"]
