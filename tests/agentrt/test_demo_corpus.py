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
