"""The MemoryStore conformance suite: every store (embedded Chroma, Chroma server, ephemeral) passes it."""

from __future__ import annotations

import pytest

from agentrt.core.errors import InputError
from memory.protocol import Hit, MemoryStore

DOCS = {
    "paris": ("The Eiffel Tower stands in Paris, the capital of France.", {"topic": "travel", "n": 1}),
    "cats": ("Cats are small domesticated carnivores that like to sleep.", {"topic": "animals", "n": 2}),
    "python": ("Python is a programming language with dynamic typing.", {"topic": "code", "n": 3}),
    "dogs": ("Dogs are loyal animals that enjoy long walks.", {"topic": "animals", "n": 4}),
}


def _fill(store: MemoryStore) -> None:
    store.add(list(DOCS), [t for t, _ in DOCS.values()], [m for _, m in DOCS.values()])


def test_is_a_memory_store(store):
    assert isinstance(store, MemoryStore)
    assert store.count() == 0


def test_add_count_get(store):
    _fill(store)
    assert store.count() == 4
    got = store.get(["python", "missing", "paris"])
    assert [h.id for h in got] == ["python", "paris"]  # order asked, missing left out
    assert got[0].text == DOCS["python"][0]
    assert got[0].metadata == {"topic": "code", "n": 3}
    assert isinstance(got[0], Hit)


def test_search_ranks_by_meaning(store):
    _fill(store)
    hits = store.search("Which city is the French capital?", k=2)
    assert len(hits) == 2
    assert hits[0].id == "paris"
    assert hits[0].score >= hits[1].score
    assert 0.3 < hits[0].score <= 1.0 + 1e-6  # cosine similarity


def test_search_where_filters(store):
    _fill(store)
    hits = store.search("a pet that sleeps a lot", k=10, where={"topic": "animals"})
    assert {h.id for h in hits} == {"cats", "dogs"}
    assert hits[0].id == "cats"
    hits = store.search("anything", k=10, where={"n": {"$gte": 3}})
    assert {h.id for h in hits} == {"python", "dogs"}


def test_k_larger_than_collection(store):
    _fill(store)
    assert len(store.search("animals", k=50)) == 4


def test_add_refuses_existing_ids_and_writes_nothing(store):
    _fill(store)
    with pytest.raises(InputError, match="already stored"):
        store.add(["new-one", "cats"], ["a new text", "another text"])
    assert store.count() == 4
    assert store.get(["new-one"]) == []


def test_duplicate_ids_in_one_call(store):
    with pytest.raises(InputError, match="more than once"):
        store.add(["a", "b", "a"], ["x one", "y two", "z three"])
    with pytest.raises(InputError, match="more than once"):
        store.upsert(["a", "a"], ["x one", "x two"])
    assert store.count() == 0


def test_upsert_replaces(store):
    _fill(store)
    store.upsert(["cats", "birds"], ["Cats purr when content.", "Birds can fly."], [{"topic": "animals"}, {"topic": "animals"}])
    assert store.count() == 5
    assert store.get(["cats"])[0].text == "Cats purr when content."
    assert store.search("which animal can fly", k=1)[0].id == "birds"


def test_delete(store):
    _fill(store)
    store.delete(["cats", "not-there"])  # unknown id: no error
    assert store.count() == 3
    assert store.get(["cats"]) == []
    assert "cats" not in {h.id for h in store.search("cats", k=10)}


@pytest.mark.parametrize("bad", ["", "   \n"])
def test_empty_text_and_query_are_errors(store, bad):
    with pytest.raises(InputError, match="empty"):
        store.add(["x"], [bad])
    with pytest.raises(InputError, match="empty"):
        store.search(bad, k=3)
    assert store.count() == 0


def test_mismatched_lengths(store):
    with pytest.raises(InputError, match="same length"):
        store.add(["a", "b"], ["only one"])


def test_get_and_delete_with_repeated_ids(store):
    _fill(store)
    assert [h.id for h in store.get(["cats", "cats", "dogs"])] == ["cats", "cats", "dogs"]
    store.delete(["cats", "cats"])
    assert store.count() == 3
