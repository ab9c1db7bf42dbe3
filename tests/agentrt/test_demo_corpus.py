"""The bundled sample corpus `make run` indexes: real ChromaDB + embeddings, idempotent, searchable; and
how the demo marks answers against the gold."""

import pytest

from agentrt.app.commands.demo import DEMO_CORPUS, check, load_questions
from agentrt.app.commands.demo import index_sample_corpus as _index_sample_corpus
from agentrt.core.config import Settings


@pytest.mark.slow
def test_sample_corpus_indexes_once_and_finds_its_passages(agentrt_home):
    settings = Settings()
    first = _index_sample_corpus(settings)
    assert first >= 239
    assert _index_sample_corpus(settings) == first  # a second run adds nothing
    from memory.corpus import open_corpus, resolve_location

    hits = open_corpus(resolve_location(settings), DEMO_CORPUS).search("Terry Richardson fashion photographer", k=5)
    assert any("Terry Richardson" in (h.metadata or {}).get("title", "") for h in hits)


@pytest.mark.slow
def test_the_router_sees_how_well_the_index_covers_a_question(agentrt_home):
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.routes.plan import corpus_coverage

    settings = Settings(corpus=DEMO_CORPUS)
    assert corpus_coverage(settings) is None  # nothing indexed yet: nothing is opened, no feature
    _index_sample_corpus(settings)
    from memory.corpus import open_corpus, resolve_location

    open_corpus(resolve_location(settings), DEMO_CORPUS).search("warm up", k=1, mode="bm25")  # builds the BM25 cache
    coverage = corpus_coverage(settings)
    covered = coverage("Were Scott Derrickson and Ed Wood of the same nationality?")
    assert covered >= 0.6 and coverage("How do I bake sourdough bread at home quickly?") < covered
    agent = Agent(settings, policy=ScriptedBackend(["x"]))
    r = agent.run("Were Scott Derrickson and Ed Wood of the same nationality?", budget=2000,
                  router="rules", route=None)
    assert r.decision["features"]["coverage"] == covered


def test_the_demo_marks_wrong_answers_with_their_gold():
    assert check({"answer": "42"}, "12 + 30 = 42.", "reason") == (True, "✓ right")
    assert check({"answer": "42"}, "The answer is 32.", "reason") == (False, "✗ wrong (gold: 42)")
    assert check({"answer": "no"}, "No, only one of them is.", "plan")[0] is True
    assert check({"answer": "yes"}, "They are both American, yes.", "plan") == (False, "✗ wrong (gold: yes)")
    assert check({"answer": "Paris"}, "The capital of France is Paris.", "direct")[0] is True
    assert check({"answer": "Terry Richardson"}, "Annie Morton is older.", "plan") == (
        False, "✗ wrong (gold: Terry Richardson)")
    assert check({"unanswerable": True}, "I don't know.", "abstain") == (True, "✓ abstained: nobody can know")
    assert check({"unanswerable": True}, "Number 7 will win.", "direct")[0] is False
    assert check({}, "anything", "direct") == (None, "-")


def test_the_demo_questions_say_what_a_right_answer_is():
    questions = load_questions()
    assert 3 <= len(questions) <= 8
    assert all("route" not in q for q in questions)  # the router chooses; nothing is forced
    assert all(q.get("answer") is not None or q.get("unanswerable") for q in questions)
    assert any(q.get("compare") for q in questions) and any(q.get("unanswerable") for q in questions)
