"""The router's view of the index and the conversation (issue 20), router files from before those features, and
the safe tools a run gets by default."""

from __future__ import annotations

import json

import pytest

from agentrt.router.features import (INDEX_FEATURES, NUMERIC_FEATURES, entities, entity_overlap, entity_titled,
                                      extract, index_signals, vectorize)


def test_entities_are_the_named_things_a_question_asks_about():
    assert entities("Were Scott Derrickson and Ed Wood of the same nationality?") == ["scott derrickson", "ed wood"]
    assert entities('Who wrote "The Old Man and the Sea"?') == ["the old man and the sea"]
    assert entities("What is 1234*5678?") == []  # numbers are not names
    assert entities("What is the capital of France?") == ["france"]  # the question word is not a name


def test_entity_overlap_and_titles_tell_a_page_about_a_name_from_one_that_mentions_it():
    q = "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert entity_overlap(q, ["Scott Derrickson is an American director.", "Ed Wood was a filmmaker."]) == (1.0, 0.0)
    assert entity_overlap(q, ["Scott Derrickson is an American director."]) == (0.5, 1.0)
    assert entity_overlap("What is 2+2?", []) == (1.0, 0.0)  # nothing named: nothing the index could lack
    assert entity_titled(q, ["Scott Derrickson", "Ed Wood (film)"]) == 1.0
    assert entity_titled(q, ["Sinister (film)", "Doctor Strange"]) == 0.0
    assert entity_titled(q, ["", "—"]) == 0.0  # an empty title is about nothing


def test_index_signals_and_extract_read_no_index_apart_from_an_index_that_lacks_it():
    q = "Were Scott Derrickson and Ed Wood of the same nationality?"
    held = index_signals(q, [("Scott Derrickson", "Scott Derrickson is an American director.", 12.0),
                             ("Ed Wood", "Edward Davis Wood Jr. was an American filmmaker.", 9.0)], 0.71)
    lacking = index_signals(q, [("Sinister (film)", "Sinister is a 2012 horror film.", 3.0)], 0.32)
    assert set(held) == set(INDEX_FEATURES) and held["has_index"] == lacking["has_index"] == 1.0
    assert held["entity_titled"] == 1.0 and lacking["entity_titled"] == 0.0
    assert held["entity_miss"] == 0.0 and lacking["entity_miss"] == 2.0
    assert held["index_vector"] == 0.71 and held["index_bm25"] > lacking["index_bm25"] > 0
    none = extract(q)
    assert all(none[k] == 0.0 for k in INDEX_FEATURES)  # no index consulted: every index feature is 0
    with_index = extract(q, index=lambda _q: lacking)
    assert {k: with_index[k] for k in INDEX_FEATURES} == lacking
    assert list(none) == list(NUMERIC_FEATURES) == list(with_index)


def test_conversation_state_features():
    history = [{"role": "user", "content": "Who directed Sinister?"}, {"role": "assistant", "content": "Scott Derrickson."}]
    follow_up = extract("Where was he born?", history=history)
    assert follow_up["turn"] == 1.0 and follow_up["refers_back"] == 1.0 and follow_up["ambiguous"] == 0.0
    alone = extract("Where was he born?")
    assert alone["refers_back"] == 0.0 and alone["turn"] == 0.0


def test_a_router_file_from_before_the_new_features_decides_exactly_as_before(tmp_path):
    """Files fit on an earlier feature list load with weight 0 on what they never saw: same decisions."""
    from agentrt.router.learned import RouterModel

    old_features = [f for f in NUMERIC_FEATURES if f not in ("refers_back",) + INDEX_FEATURES[1:]]
    k, dim = len(old_features), len(old_features) + 128
    weights = [0.1 * (i % 7) - 0.3 for i in range(dim)]
    old = {"format": "agentrt-router", "version": 1, "features": old_features, "hash_dim": 128,
           "mean": [0.5] * k + [0.0] * 128, "std": [2.0] * k + [1.0] * 128, "temperature": 1.2, "lam": 0.3,
           "actions": {"direct": {"w": weights, "b": -1.0, "tok_w": [0.01] * dim, "tok_b": 4.0}}, "metrics": {},
           "provenance": {}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    model = RouterModel.load(path)
    q = "Who directed the film Sinister?"
    f = extract(q, index=lambda _q: {"coverage": 0.8, "has_index": 1.0, "index_bm25": 2.0, "index_vector": 0.6,
                                     "entity_overlap": 1.0, "entity_miss": 0.0, "entity_titled": 1.0})
    # by hand, over the old features only
    x_old = [f[name] for name in old_features] + vectorize(f, q)[len(NUMERIC_FEATURES):]
    z = [(xi - m) / s for xi, m, s in zip(x_old, old["mean"], old["std"])]
    logit = sum(w * zi for w, zi in zip(weights, z)) - 1.0
    import math

    assert model.predict(vectorize(f, q))[0]["direct"] == pytest.approx(1 / (1 + math.exp(-logit / 1.2)))
    old["features"] = old_features + ["a_feature_from_the_future"]
    path.write_text(json.dumps(old))
    from agentrt.core.errors import ConfigError

    with pytest.raises(ConfigError, match="another agentrt version"):
        RouterModel.load(path)


def test_runs_get_the_safe_tools_by_default_and_none_when_told(agentrt_home):
    """The calculator for a question with a number in it, nothing else without an index; `tools=[]` and the
    `tools = "off"` setting give none; a caller's own list replaces the defaults."""
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.core.config import Settings

    def prompt(backend):
        return "\n".join(m.content for m in backend.calls[0][0])

    call = '{"name": "calculator", "arguments": {"expression": "1234*5678"}}'
    final = '{"name": "final_answer", "arguments": {"answer": "7006652"}}'
    backend = ScriptedBackend([call, final])
    r = Agent(Settings(), policy=backend).run("What is 1234*5678?", route="reason", budget=2048)
    assert r.answer == "7006652" and any(s.get("kind") == "tool_call" and s["name"] == "calculator"
                                         and s["result"] == "7006652" for s in r.record.steps)
    assert "calculator" in prompt(backend) and "search" not in prompt(backend)  # no index: no search tool
    # no number: no calculator offered, the route thinks instead of calling tools
    backend = ScriptedBackend(["Paris is the capital.", "Paris"])
    r = Agent(Settings(), policy=backend).run("What is the capital of France?", route="reason", budget=2048)
    assert not any(s.get("kind") == "tool_call" for s in r.record.steps) and "calculator" not in prompt(backend)
    for settings, tools in ((Settings(tools="off"), None), (Settings(), [])):
        r = Agent(settings, policy=ScriptedBackend(["think", "12345678"])).run(
            "What is 1234*5678?", route="reason", budget=2048, tools=tools)
        assert r.answer == "12345678" and not any(s.get("kind") == "tool_call" for s in r.record.steps)


def test_ambiguous_items_are_right_when_the_run_asks():
    from evals.suites import Item
    from evals.verifiers import score_item

    item = Item(id="a", question="Which one should I buy?", type="ambiguous", verifier="ask")
    assert score_item(item, "Which products are you choosing between?", "ask").correct
    assert score_item(item, "What is your budget?", "direct").correct  # a clarifying question, whatever route
    assert not score_item(item, "Buy the red one.", "direct").correct
    assert not score_item(item, "I don't know.", "abstain").correct


def test_the_dev_sets_are_what_their_builder_makes():
    """arith-dev is the builder's output and its answers are right; in hotpotqa-index no paragraph an
    unanswerable item needs is indexed."""
    import re

    from evals.devsets import ARITH_SUITE, INDEX_CORPUS, INDEX_SUITE, build_arith
    from evals.suites import load_jsonl

    assert [json.loads(line) for line in ARITH_SUITE.read_text().splitlines()] == build_arith()
    for item in build_arith():
        q = item["question"]
        a, b = map(int, re.findall(r"\d+", q))
        op = "*" if ("*" in q or "times" in q) else "/" if "divided" in q else "-" if " - " in q else "+"
        assert item["answer"] == str({"*": a * b, "/": a // b, "-": a - b, "+": a + b}[op]), item
        assert op != "/" or a % b == 0
    titles = {json.loads(line)["title"] for line in INDEX_CORPUS.read_text().splitlines()}
    rows = [json.loads(line) for line in INDEX_SUITE.read_text().splitlines()]
    lacking = [r for r in rows if r["type"] == "unanswerable"]
    assert len(rows) == 160 and len(lacking) == 80
    assert all(t not in titles for r in lacking for t in r["index_lacks"])
    suite = load_jsonl(INDEX_SUITE, "hotpotqa-index")
    assert {i.type for i in suite.items} == {"qa", "unanswerable"} and all(i.corpus for i in suite.items)


def test_the_held_out_families_are_new_to_the_shipped_router():
    """squad-heldout and hotpotqa-heldout (adapt_bench's) share no question or passage with the families the
    shipped router was trained on, half their items are unanswerable from their own index, and the shipped
    router's provenance does not name them."""
    from agentrt.router import registry
    from agentrt.router.learned import RouterModel
    from evals.devsets import HELDOUT, INDEX_CORPUS, INDEX_SUITE, SQUAD_CORPUS, SQUAD_SUITE
    from evals.suites import load_suite

    def lines(path):
        return [json.loads(line) for line in path.read_text().splitlines()]

    seen_questions = {r["question"] for r in lines(INDEX_SUITE) + lines(SQUAD_SUITE)}
    seen_passages = {r["text"] for r in lines(INDEX_CORPUS) + lines(SQUAD_CORPUS)}
    provenance = RouterModel.load(registry.shipped()[0].path).provenance
    for family, (suite_path, corpus_path) in HELDOUT.items():
        items, passages = lines(suite_path), lines(corpus_path)
        assert len(items) == 160 and sum(r["type"] == "unanswerable" for r in items) == 80
        assert not seen_questions & {r["question"] for r in items}
        assert not seen_passages & {p["text"] for p in passages}
        titles = {p["title"] for p in passages}
        assert all(t not in titles for r in items for t in r.get("index_lacks", []))
        assert all(i.corpus == str(corpus_path) for i in load_suite(family).items)
        assert family not in provenance["suites"]


def test_an_action_with_few_runs_is_held_near_its_base_rate():
    """A rare action's few runs (weighted up by 1/propensity) must not let it memorize one question's words."""
    import random

    from agentrt.router.features import extract, vectorize
    from agentrt.train.router import MIN_RUNS_PER_ACTION, Example, train_router

    rng = random.Random(0)
    words = ["capital", "river", "mountain", "author", "painter", "city", "king", "battle", "planet", "ocean"]
    examples = []
    for i in range(120):
        q = f"What is the {rng.choice(words)} of place {i}?"
        x = vectorize(extract(q), q)
        # direct succeeds on some kinds of question (learnable, so the calibration temperature stays near 1)
        ok = any(w in q for w in ("river", "mountain", "ocean"))
        examples.append(Example(q, x, "direct", 0.9, {"direct": 0.9, "plan": 0.1}, float(ok), 0.0, 60.0, 1024))
        if i < MIN_RUNS_PER_ACTION - 12:  # a handful of rare plan runs; the one success names a "capital"
            win = "capital" in q and not any(e.action == "plan" and e.success for e in examples)
            examples.append(Example(q, x, "plan", 0.05, {"direct": 0.95, "plan": 0.05}, float(win), 0.0, 900.0, 1024))
    model = train_router([], examples=examples, folds=3)
    from agentrt.train.router import HOLD

    assert tuple(model.metrics["l2"]["plan"]) == HOLD
    rates = {model.predict(vectorize(extract(q), q))[0]["plan"] for q in ("What is the capital of place 999?",
                                                                         "What is the river of place 3?")}
    assert max(rates) < 0.2 and max(rates) - min(rates) < 0.02  # its base rate (1 of 18), whatever is asked


def test_without_an_index_to_search_no_router_chooses_plan(agentrt_home):
    """plan searches the private index; with none (no collection indexed here) it could only fail, so the
    Agent's router does not consider it (the rules would pick it for this comparison question)."""
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.core.config import Settings
    from agentrt.router import make_router
    from agentrt.router.features import extract

    q = "Which magazine was started first, Arthur's Magazine or First for Women?"
    import asyncio

    unrestricted = asyncio.run(make_router("rules", Settings()).decide(q, extract(q), 4000))
    assert unrestricted.action == "plan"
    r = Agent(Settings(), policy=ScriptedBackend(["Arthur's Magazine"])).run(q, router="rules", budget=4000)
    assert r.route != "plan" and r.status == "ok" and "plan" not in r.decision["probabilities"]
