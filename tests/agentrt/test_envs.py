"""Environments (issue 36): the episode classes over a real index (ChromaDB + BM25, no model), and
`agentrt env serve` as a real subprocess stepped by OpenEnv's own client over WebSocket and by plain HTTP:
suite:arith, search:squad (the bundled SQuAD corpus), strategy (the real embedded model runs the route)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from _servers import running_server

from agentrt.app.cli import main
from agentrt.core.config import load_settings
from agentrt.envs.search import SearchEpisode, open_search_corpus
from agentrt.envs.strategy import StrategyEpisode
from agentrt.envs.suite import SuiteEpisode
from agentrt.trajectory import RewardBreakdown, TrajectoryWriter, read_trajectories

PASSAGES = [
    {"title": "Lake Vostok", "text": "Lake Vostok is the largest subglacial lake in Antarctica, buried under about "
                                      "four kilometres of ice near the Russian Vostok Station."},
    {"title": "Marlow Pike", "text": "Marlow Pike was a lighthouse keeper who kept the Greyrock light from 1881 "
                                      "to 1902 and wrote a journal of the storms he saw."},
    {"title": "Greyrock light", "text": "The Greyrock light is a stone lighthouse on a reef off the coast of "
                                         "Maine, first lit in 1879."},
    {"title": "Quince jelly", "text": "Quince jelly is made by boiling quinces with sugar until the pectin sets; "
                                       "it turns pink to red as it cooks."},
]
QUESTION = "Who kept the Greyrock light from 1881 to 1902?"


@pytest.fixture
def corpus(agentrt_home: Path):
    path = agentrt_home.parent / "passages.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    return open_search_corpus(str(path), load_settings())


def _records(home: Path, route: str) -> list:
    return [r for r in read_trajectories(home / "trajectories").records if r.route == route]


def _trajectory_dir(home: Path) -> Path:
    return Path(load_settings().trajectory_dir)


# -- the episode classes ---------------------------------------------------------------------------


def test_search_episode_searches_opens_and_scores_the_answer(corpus, agentrt_home):
    writer = TrajectoryWriter(_trajectory_dir(agentrt_home))
    ep = SearchEpisode(corpus, max_steps=4, token_budget=1024, k=2, recorder=writer)
    first = ep.reset(QUESTION, ["Marlow Pike"], "qa", item_id="g1")
    assert first.startswith(f"Question: {QUESTION}") and "search(query)" in first
    shown = ep.search("Greyrock light keeper 1881")
    lines = shown.splitlines()
    assert len(lines) == 2 and any("Marlow Pike: Marlow Pike was a lighthouse keeper" in line for line in lines)
    pid = next(line for line in lines if "Marlow Pike:" in line)[1:].split("]")[0]
    assert "journal of the storms" in ep.open(pid)
    bad = ep.open("no-such-id")
    assert bad.startswith("error: no passage 'no-such-id'") and not ep.done  # a bad id is an observation
    assert ep.answer("Marlow Pike") == "Answer recorded. Reward 1.00."
    assert (ep.done, ep.reward, ep.steps, ep.searched_before_answer, ep.end_reason) == (True, 1.0, 4, True, "answer")
    assert 0 < ep.tokens_used <= 1024
    assert ep.search("more") == "error: the episode is over; call reset() to start another"

    [rec] = [r for r in read_trajectories(writer.path.parent).records if r.route == "env:search"]
    assert (rec.status, rec.answer, rec.reward, rec.question) == ("ok", "Marlow Pike", 1.0, QUESTION)
    assert [(s["kind"], s["name"]) for s in rec.steps] == [("tool_call", "search"), ("tool_call", "open"),
                                                            ("tool_call", "open")]
    assert rec.steps[2]["error"].startswith("no passage")
    assert rec.metadata["env"]["searched_before_answer"] is True and rec.task.verifier == "qa"
    assert rec.budget == {"total": 1024, "spent": ep.tokens_used} and rec.usage["total_tokens"] == ep.tokens_used


def test_search_episode_ends_at_the_step_cap_and_the_token_budget(corpus):
    capped = SearchEpisode(corpus, max_steps=2, token_budget=4096, k=1)
    capped.reset(QUESTION, ["Marlow Pike"], "qa")
    assert not capped.done and "Greyrock" in capped.search("Greyrock")
    last = capped.search("lighthouse keeper")
    assert capped.done and "the step cap (2 actions) is reached" in last
    assert (capped.reward, capped.end_reason, capped.record.status, capped.record.answer) == (0.0, "budget",
                                                                                                "truncated", "")
    assert capped.answer("Marlow Pike").startswith("error: the episode is over")  # too late: no answer, no reward
    assert capped.reward == 0.0 and capped.answer_text is None

    tight = SearchEpisode(corpus, max_steps=10, token_budget=200, k=2)
    tight.reset(QUESTION, ["Marlow Pike"], "qa")
    observations = [tight.search("lighthouse reef Maine keeper") for _ in range(5) if not tight.done]
    assert tight.done and tight.end_reason == "budget" and tight.tokens_used <= 200
    assert "too few for another search" in observations[-1] and tight.record.status == "truncated"
    assert tight.record.error.startswith("budget:")


def test_search_episode_empty_answer_and_bad_actions(corpus):
    ep = SearchEpisode(corpus, token_budget=1024)
    ep.reset(QUESTION, ["Marlow Pike"], "qa")
    assert ep.search("   ").startswith("error: empty query") and ep.steps == 1  # a step spent, no search made
    assert ep.answer("") == "Answer recorded. Reward 0.00."
    assert (ep.record.status, ep.reward, ep.searched_before_answer) == ("no_answer", 0.0, False)
    with pytest.raises(Exception, match="unknown verifier 'nope'"):
        ep.reset(QUESTION, "x", "nope")


def test_an_episode_trajectory_exports(corpus, agentrt_home, capsys):
    writer = TrajectoryWriter(_trajectory_dir(agentrt_home))
    ep = SearchEpisode(corpus, recorder=writer)
    ep.reset(QUESTION, ["Marlow Pike"], "qa", item_id="g1")
    ep.search("Greyrock light keeper")
    ep.answer("Marlow Pike")
    out = agentrt_home.parent / "sft.jsonl"
    assert main(["export", "--format", "trl-sft", "--out", str(out), "--filter", "route=env:search"]) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"] and row["messages"][-1]["content"] == "Marlow Pike"
    assert row["messages"][1]["tool_calls"][0]["function"]["name"] == "search"
    assert "Marlow Pike" in row["messages"][2]["content"]


def test_a_search_shows_the_part_of_a_long_passage_that_matches_the_query():
    from agentrt.envs.search import snippet

    text = " ".join(f"Filler sentence number {i} says nothing at all." for i in range(30))
    text += " The keeper of the Greyrock light was Marlow Pike. " + "More filler follows here. " * 10
    shown = snippet(text, "Who was the keeper of the Greyrock light?", 120)
    assert "The keeper of the Greyrock light was Marlow Pike." in shown and shown.startswith("…")
    assert len(shown) <= 122 and snippet("short text", "query", 120) == "short text"


def test_suite_episode_scores_and_cuts_an_answer_over_budget():
    ep = SuiteEpisode(token_budget=40)
    assert ep.reset("What is 6 * 7?", "42", "numeric", "m1") == "What is 6 * 7?"
    assert ep.answer("6 * 7 = 42\n#### 42") == "Answer recorded. Reward 1.00."
    assert (ep.record.status, ep.record.route, ep.record.task.ground_truth) == ("ok", "env:suite", "42")
    ep.reset("What is 6 * 7?", "42", "numeric", "m1")
    assert ep.answer("41") == "Answer recorded. Reward 0.00." and ep.record.status == "ok"
    ep.reset("What is 6 * 7?", "42", "numeric", "m1")
    out = ep.answer("forty two " * 40)
    assert out.startswith("The episode is over: the answer needs") and ep.reward == 0.0
    assert (ep.record.status, ep.record.answer, ep.end_reason) == ("truncated", "", "budget")


class _NoAgent:
    """An agent that must not run: the outcome cache answers instead."""

    async def arun(self, *a, **k):  # pragma: no cover - failing is the point
        raise AssertionError("the agent ran despite a cached outcome")


def test_strategy_episode_reads_an_outcome_cache_and_refuses_no_label():
    cache = {("q1", "read"): (1.0, 300)}
    ep = StrategyEpisode(_NoAgent(), budget=600, lam=0.5, outcomes=lambda key, route: cache.get((key, route)))
    prompt = ep.reset("Who kept the Greyrock light?", ["Marlow Pike"], "qa", item_id="q1")
    assert "Who kept the Greyrock light?" in prompt and "abstain" in prompt
    assert ep.choose("read") == "Route read: score 1.00, 300 tokens of 600; reward 0.750."
    assert (ep.done, ep.reward, ep.cached) == (True, 0.75, True)
    assert ep.record.rewards["env"].penalties == {"tokens": 0.25} and ep.record.status == "no_answer"
    ep.reset("Who kept the Greyrock light?", ["Marlow Pike"], "qa", item_id="q1")
    assert ep.choose("banana").startswith("error: no route label in 'banana'")
    assert (ep.done, ep.reward, ep.end_reason) == (True, 0.0, "invalid")


def test_strategy_episode_runs_the_route_on_a_scripted_policy(agentrt_home):
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend

    ep = StrategyEpisode(Agent(policy=ScriptedBackend(["42"])), budget=200, lam=0.3)
    ep.reset("What is 6 * 7?", "42", "numeric", item_id="m1")
    out = ep.choose("direct")
    assert ep.route == "direct" and ep.score == 1.0 and 0 < ep.tokens <= 200
    assert ep.reward == pytest.approx(1.0 - 0.3 * ep.tokens / 200) and out.endswith("Answer: 42")
    assert ep.result.record.route == "direct" and ep.result.reward.score == 1.0  # the agent's own record


def test_a_verifier_function_scores_what_the_eval_scores():
    def ask(answer: str, route: str) -> RewardBreakdown:
        return RewardBreakdown(score=float(answer.endswith("?")), verifier="ask")

    ep = SuiteEpisode()
    ep.reset("Book a table", "", ask)
    ep.answer("For how many people?")
    assert ep.reward == 1.0 and ep.record.task.verifier is None and ep.record.rewards["eval"].verifier == "ask"


def test_served_items_split_stably_and_keep_the_suites_verdicts():
    from agentrt.app.commands.env import env_items

    every = [i.id for i in env_items(["arith"])]
    train = [i.id for i in env_items(["arith"], split="train")]
    held = [i.id for i in env_items(["arith"], split="heldout")]
    assert train and held and sorted(train + held) == sorted(every) and not set(train) & set(held)
    assert held == [i.id for i in env_items(["arith"], split="heldout")]  # the same side every time
    [item] = env_items(["unanswerable"], limit=1)
    ep = SuiteEpisode()
    ep.reset(item.question, item.ground_truth, item.verifier, item.id)
    ep.answer("I don't know.")
    assert ep.reward == 1.0 and ep.record.rewards["eval"].verifier == "abstain"  # the eval's verdict: abstained


# -- `agentrt env serve`, stepped by OpenEnv's client ------------------------------------------------


def test_env_serve_refuses_an_unknown_name(capsys):
    assert main(["env", "serve", "bogus:thing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agentrt: error: unknown environment 'bogus:thing'; use suite:SUITE, search:CORPUS or strategy "
                   "(see `agentrt env list`)"]


def test_env_list_names_the_environments(capsys):
    assert main(["env", "list"]) == 0
    out = capsys.readouterr().out
    assert "  suite:arith" in out and "  search:squad" in out and out.count("strategy") >= 1


@contextmanager
def serving(home: Path, *args: str, timeout_s: float = 600) -> Iterator[str]:
    """`agentrt env serve ARGS --port P` until /health answers; yields its URL; stopped by PID."""
    argv = [sys.executable, "-m", "agentrt.app.cli", "env", "serve", *args]
    with running_server(argv, home.parent, dict(os.environ), timeout_s=timeout_s, poll_s=0.3, health="/health") as base:
        yield base


def _client(base: str):
    from openenv.core import GenericEnvClient

    return GenericEnvClient(base_url=base, message_timeout_s=600).sync()


@pytest.mark.slow
def test_suite_env_over_websocket_and_http(agentrt_home):
    with serving(agentrt_home, "suite:arith", "--budget", "256") as base:
        with _client(base) as env:
            first = env.reset(item_id="ar01")
            assert (first.observation["text"], first.done, first.reward) == ("Compute 88443 + 1675.", False, 0.0)
            last = env.step({"tool": "answer", "text": "#### 90118"})
            assert (last.done, last.reward, last.observation["info"]["end_reason"]) == (True, 1.0, "answer")
            assert env.state()["step_count"] == 1
            wrong = env.reset(item_id="nope")
            assert wrong.done and wrong.observation["error"].startswith("no item 'nope' in suite:arith")
        # HTTP: a fresh environment per request, the episode found again by its id
        reset = httpx.post(f"{base}/reset", json={"item_id": "ar01"}, timeout=30).json()
        episode = reset["observation"]["episode_id"]
        step = httpx.post(f"{base}/step", json={"action": {"text": "90117"}, "episode_id": episode}, timeout=30)
        assert step.status_code == 200 and (step.json()["done"], step.json()["reward"]) == (True, 0.0)
        lost = httpx.post(f"{base}/step", json={"action": {"text": "1"}}, timeout=30).json()
        assert lost["observation"]["error"].startswith("no episode: call reset first")
        bad = httpx.post(f"{base}/step", json={"action": {"text": "1", "path": "/etc/passwd"}}, timeout=30)
        assert bad.status_code == 422  # OpenEnv refuses an unknown action field: no request names a file
    [ok, wrong] = sorted(_records(agentrt_home, "env:suite"), key=lambda r: -(r.reward or 0))
    assert (ok.reward, ok.status, ok.task.prompt_id) == (1.0, "ok", "ar01") and wrong.reward == 0.0


@pytest.mark.slow
def test_search_env_steps_ends_at_the_budget_and_records(agentrt_home):
    with serving(agentrt_home, "search:squad", "--budget", "700", "--max-steps", "4", "--k", "2") as base:
        with _client(base) as env:
            first = env.reset(seed=0)
            question = first.observation["text"].splitlines()[0].removeprefix("Question: ")
            shown = env.step({"tool": "search", "text": question})
            assert not shown.done and shown.observation["text"].startswith("[")
            pid = shown.observation["text"][1:].split("]")[0]
            opened = env.step({"tool": "open", "text": pid})
            assert opened.observation["text"].startswith(f"[{pid}]") and opened.observation["info"]["steps"] == 2
            assert env.step({"tool": "fly", "text": "x"}).observation["error"].startswith("unknown tool 'fly'")
            end = env.step({"tool": "answer", "text": "I think it is Paris"})
            assert end.done and end.observation["info"]["searched_before_answer"] is True
            assert end.reward == end.observation["info"]["reward"]

            env.reset(seed=1)
            steps = [env.step({"tool": "search", "text": "history of the river and the city"}) for _ in range(4)]
            assert steps[-1].done and steps[-1].reward == 0.0 and steps[-1].observation["info"]["end_reason"] == "budget"
            assert steps[-1].observation["info"]["tokens_used"] <= 700
    records = _records(agentrt_home, "env:search")
    assert sorted(r.status for r in records) == ["ok", "truncated"]
    out = agentrt_home.parent / "search.jsonl"
    assert main(["export", "--format", "trl-sft", "--out", str(out), "--filter", "route=env:search"]) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]  # the cut episode is no example
    assert [m["role"] for m in row["messages"]][:3] == ["user", "assistant", "tool"]


@pytest.mark.slow
def test_strategy_env_runs_the_route_on_the_embedded_model(agentrt_home):
    with serving(agentrt_home, "strategy", "--suite", "arith", "--limit", "2", "--budget", "256") as base:
        with _client(base) as env:
            first = env.reset(item_id="ar00")
            assert "What is 94838 * 278?" in first.observation["text"] and "direct" in first.observation["text"]
            end = env.step({"tool": "choose", "text": "direct"})
            info = end.observation["info"]
            assert end.done and info["route"] == "direct" and 0 < info["tokens"] <= 256
            assert end.reward == pytest.approx(info["score"] - 0.3 * info["tokens"] / 256, abs=1e-6)
            env.reset(item_id="ar01")
            free = env.step({"text": "abstain"})
            assert (free.reward, free.observation["info"]["tokens"]) == (0.0, 0)
    [env_run, *_] = _records(agentrt_home, "env:strategy")
    assert env_run.metadata["env"]["label"] in ("direct", "abstain") and env_run.steps[0]["kind"] == "route_decision"
    assert {r.route for r in read_trajectories(agentrt_home / "trajectories").records} >= {"direct", "abstain"}
