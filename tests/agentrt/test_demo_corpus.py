"""The bundled sample corpus `make run` indexes: real ChromaDB + embeddings, idempotent, searchable."""

import pytest

from agentrt.app.commands.run import DEMO_CORPUS, _index_sample_corpus
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
