"""The ``read`` route (issue 38): retrieve the top passages of the real sample corpus (ChromaDB + BM25,
hybrid), answer from them in one call of the real embedded model, cite them; inside the budget, cutting
passages to fit and truncating honestly when not even one fits. And ``read`` as an action: offered only
with an index, ``fixed:read``, and never chosen by a learned router file that has no model for it."""

from __future__ import annotations

import asyncio

import pytest

from agentrt.app.commands.demo import DEMO_CORPUS, index_sample_corpus
from agentrt.core.config import Settings
from agentrt.core.text import UNTRUSTED_NOTICE
from agentrt.routes.read import ANSWER_CUE, EXAMPLE, UNGROUNDED, cued_answer, grounded

QUESTION = "Who is the director of the film Sinister?"


@pytest.fixture
def sample_agent(embedded, agentrt_home):
    from agentrt import Agent

    settings = Settings(corpus=DEMO_CORPUS)
    index_sample_corpus(settings)
    return Agent(settings, policy=embedded)


def _search_step(result) -> dict:
    return next(s for s in result.record.steps if s["kind"] == "memory_op" and s["op"] == "search")


def test_read_answers_from_the_top_passages_and_cites_them(sample_agent):
    from memory.corpus import open_corpus, resolve_location

    result = sample_agent.run(QUESTION, budget=1500, route="read")
    assert result.route == "read" and result.status == "ok"
    # the answer is the name, not a sentence restating the question (the cue: see the route's docstring)
    assert "Scott Derrickson" in result.answer and len(result.answer.split()) <= 4, result.answer
    search = _search_step(result)
    assert search["query"] == QUESTION and len(search["ids"]) == 3 and search["shown"] == search["ids"]
    # it cites passages it was shown, and what it cites holds the answer
    corpus = open_corpus(resolve_location(sample_agent.settings), DEMO_CORPUS)
    assert result.citations and set(result.citations) <= set(search["shown"])
    assert any("Scott Derrickson" in corpus.get(c).text for c in result.citations)
    # one model call; the passages reached it quoted as data, the notice in the system part
    calls = [s for s in result.record.steps if s["kind"] == "model_call"]
    assert len(calls) == 1
    system, user, cue = (calls[0]["messages"][i]["content"] for i in (0, -2, -1))
    assert UNTRUSTED_NOTICE in system and user.count("<document id=") == 3 and user.endswith(QUESTION)
    # the worked example comes first, its answer the cue and a span of its passage; it is never cited
    example, shown = calls[0]["messages"][1:3]
    assert (example["role"], shown["role"]) == ("user", "assistant") and shown["content"] == EXAMPLE[1].content
    assert shown["content"].startswith(ANSWER_CUE) and "Gustave Eiffel" in example["content"]
    assert cue == ANSWER_CUE and calls[0]["messages"][-1]["role"] == "assistant"
    assert result.usage.total_tokens <= 1500


def test_the_cued_answer_is_the_span_after_the_cue():
    assert cued_answer(": Animorphs.") == "Animorphs"
    assert cued_answer(' "Chief of Protocol"') == "Chief of Protocol"
    assert cued_answer(" no\nQuestion: and then") == "no"
    assert cued_answer(" I don't know.") == "I don't know"
    assert cued_answer("") == ""


def test_a_yes_or_no_answer_is_the_bare_word_without_its_unchecked_clause():
    """"yes"/"no" skip the grounding check (a judgement, not a span): a clause after one would be a claim
    nothing checked, so the answer is the word alone; words that merely start with one are not cut."""
    assert cued_answer(" yes, Scott Derrickson and Ed Wood are both of Scottish descent.") == "yes"
    assert cued_answer(" No; 888 7th Avenue is an office tower.") == "No"
    assert cued_answer(" no - they are not.") == "no"
    assert cued_answer(" Yes.") == "Yes"
    assert cued_answer(' "yes, both of them"') == "yes"  # quoted: the quotes go first
    assert cued_answer(" no one knows") == "no one knows"
    assert cued_answer(" Nobody, as far as the documents say") == "Nobody, as far as the documents say"
    assert cued_answer(" yesterday") == "yesterday"


def test_an_answer_is_grounded_when_the_passages_hold_its_words():
    hits = [{"id": "p1", "title": "Sinister (film)", "text": "Sinister is a 2012 horror film directed by Scott Derrickson."}]
    assert grounded("Scott Derrickson", hits) and grounded("a 2012 film", hits)
    assert not grounded("2018", hits) and not grounded("David Weissman", hits)
    assert grounded("no", hits) and grounded("Yes, both", hits) and grounded("I don't know.", hits)
    # three of four content words found: a paraphrased word is tolerated; two of four is not
    assert grounded("Scott Derrickson directed Sinister", hits)
    assert not grounded("Derrickson wrote Evolution novels", hits)
    # the model saw the passage cut to `chars`: a word past the cut does not ground the answer
    assert not grounded("Derrickson", hits, chars=20)


def test_read_says_it_does_not_know_when_the_answer_is_not_in_the_passages():
    """The read route answers from the passages: a span found in none of them (a guessed year) becomes
    "I don't know.", and the model's answer stays in the trajectory."""
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.core.budget import Budget
    from agentrt.routes.context import RunContext
    from agentrt.routes.read import NO_ANSWER, run

    passages = [{"id": "p1", "title": "Lake Vinn", "text": "Lake Vinn lies in the north of Kestria.", "score": 1.0}]

    def read(completion: str):
        ctx = RunContext("run", "When was Lake Vinn dredged?", Budget(1500), ScriptedBackend([completion]), Settings())
        return asyncio.run(run(ctx, ctx.question, searcher=lambda q, k: passages)), ctx

    out, ctx = read(" 2018.")
    assert out.answer == NO_ANSWER and out.citations == []
    [step] = [s for s in ctx.steps if s["kind"] == "final_answer"]
    assert step["model_answer"] == "2018" and step["composed_from"] == UNGROUNDED
    out, ctx = read(" in the north of Kestria.")
    assert out.answer == "in the north of Kestria" and out.citations == ["p1"]
    assert not [s for s in ctx.steps if s["kind"] == "final_answer"]


def test_the_worked_example_is_left_out_under_a_json_schema():
    """Under a JSON schema the answer is the caller's JSON: an example answering "The answer is ..." would
    teach the wrong form, so the prompt has none."""
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.core.budget import Budget
    from agentrt.core.request import AnswerOptions
    from agentrt.routes.context import RunContext
    from agentrt.routes.read import read_messages

    hits = [{"id": "p1", "title": "Lake Vinn", "text": "Lake Vinn lies in the north of Kestria.", "score": 1.0}]
    ctx = RunContext("run", "Where is Lake Vinn?", Budget(1500), ScriptedBackend([]), Settings())
    assert [m.role for m in read_messages(ctx, ctx.question, hits, 600)] == ["system", "user", "assistant", "user"]
    ctx.options = AnswerOptions(confidence="off", json_schema={"type": "object"})
    assert [m.role for m in read_messages(ctx, ctx.question, hits, 600)] == ["system", "user"]


def test_a_small_budget_cuts_the_passages_and_a_tiny_one_truncates_honestly(sample_agent):
    cut = sample_agent.run(QUESTION, budget=300, route="read")
    assert cut.usage.total_tokens <= 300
    search = _search_step(cut)
    assert "to fit the budget" in search["budget_cut"] and search["shown"] and set(search["shown"]) <= set(search["ids"])
    assert set(cut.citations) <= set(search["shown"])
    tiny = sample_agent.run(QUESTION, budget=60, route="read")
    assert tiny.status == "truncated" and tiny.answer == "" and tiny.usage.total_tokens <= 60
    assert _search_step(tiny)["shown"] == []  # it read nothing, and says so: no answer made up


def test_read_is_an_action_only_where_there_is_an_index(embedded, agentrt_home):
    from agentrt import Agent
    from agentrt.app.cli import build_parser
    from agentrt.router import ACTIONS, make_router
    from agentrt.router.rules import FixedRouter

    assert "read" in ACTIONS
    assert isinstance(make_router("fixed:read", Settings()), FixedRouter)
    assert build_parser().parse_args(["run", "q", "--route", "read"]).route == "read"
    # no index: the rules router is not offered read (nor plan)
    bare = Agent(Settings(corpus="nothing-here"), policy=embedded).run(QUESTION, budget=800, router="rules")
    assert "read" not in bare.decision["probabilities"] and "plan" not in bare.decision["probabilities"]
    # an indexed corpus whose passages cover the question: the rules router reads it
    settings = Settings(corpus=DEMO_CORPUS)
    index_sample_corpus(settings)
    from memory.corpus import open_corpus, resolve_location

    open_corpus(resolve_location(settings), DEMO_CORPUS).search("warm up", k=1, mode="bm25")  # the BM25 cache
    indexed = Agent(settings, policy=embedded).run(QUESTION, budget=1500, router="rules")
    assert "read" in indexed.decision["probabilities"]
    assert indexed.route == "read" and indexed.citations


def test_a_learned_router_without_read_never_picks_it(tmp_path):
    from agentrt.router import ACTIONS, extract, make_router
    from test_gate import _runs  # direct / reason runs, no read
    from agentrt.train.router import train_router

    model = train_router([], folds=2, examples=_runs(60))
    path = tmp_path / "router.json"
    model.save(path)
    router = make_router(f"learned:{path}", Settings(), actions=ACTIONS)
    features = extract(QUESTION, index=lambda q: {"coverage": 1.0, "has_index": 1.0, "index_bm25": 3.0,
                                                  "index_vector": 0.8, "entity_overlap": 1.0, "entity_miss": 0.0,
                                                  "entity_titled": 1.0})
    d = asyncio.run(router.decide(QUESTION, features, 1500))
    assert d.action in ("direct", "reason") and "read" not in d.p_success and "read" not in d.probabilities
