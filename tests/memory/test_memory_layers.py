"""Episodic memory (past runs) and semantic memory (facts with conflict handling)."""

from __future__ import annotations

import pytest

from agentrt.core.errors import InputError
from memory.episodic import EpisodicMemory
from memory.semantic import SemanticMemory


def _is_step(step: dict) -> None:
    assert step["kind"] == "memory_op" and isinstance(step["op"], str) and step["ts"] > 0


# -- episodic ------------------------------------------------------------------------------------
def test_episodes_are_found_by_similar_questions(mem_store):
    ep = EpisodicMemory(mem_store)
    _is_step(ep.add_run("What is the capital of France?", "direct", "Paris", reward=1.0, tokens=40, trajectory_id="t1"))
    ep.add_run("Integrate x^2 from 0 to 3", "reason", "9", reward=0.0, tokens=300, trajectory_id="t2")
    ep.add_run("Which magazine was started first, Arthur's or First for Women?", "plan", "Arthur's", tokens=900)
    got = ep.similar("What's the capital city of Germany?", k=2)
    assert got[0].question == "What is the capital of France?"
    assert (got[0].route, got[0].answer, got[0].reward, got[0].tokens, got[0].trajectory_id) == ("direct", "Paris", 1.0, 40, "t1")
    assert got[0].score > got[1].score
    assert ep.last_step["op"] == "episode.similar" and ep.last_step["ids"] == [e.id for e in got]
    only_plan = ep.similar("capital of France", k=5, route="plan")
    assert [e.route for e in only_plan] == ["plan"] and only_plan[0].reward is None  # unknown reward stays None
    good = ep.similar("math", k=5, min_reward=0.5)
    assert [e.trajectory_id for e in good] == ["t1"]


def test_same_trajectory_updates_the_episode(mem_store):
    ep = EpisodicMemory(mem_store)
    ep.add_run("2+2?", "direct", "4", trajectory_id="t9")
    ep.add_run("2+2?", "direct", "4", reward=1.0, trajectory_id="t9")  # the reward arrives later
    assert mem_store.count() == 1
    assert ep.similar("2+2?", k=1)[0].reward == 1.0


def test_add_result_takes_an_agent_result(mem_store):
    from agentrt.app.agent import Result
    from agentrt.core.types import Usage

    ep = EpisodicMemory(mem_store)
    r = Result(answer="Paris", route="direct", usage=Usage(30, 5), budget=512, truncated=False, trajectory_id="tr-1")
    step = ep.add_result("Capital of France?", r, reward=1.0)
    assert step["op"] == "episode.add" and step["trajectory_id"] == "tr-1"
    e = ep.similar("France capital", k=1)[0]
    assert (e.answer, e.tokens, e.reward, e.trajectory_id) == ("Paris", 35, 1.0, "tr-1")


def test_episode_bad_input(mem_store):
    ep = EpisodicMemory(mem_store)
    with pytest.raises(InputError, match="empty question"):
        ep.add_run(" ", "direct", "x")
    with pytest.raises(InputError, match="unknown route"):
        ep.add_run("q?", "teleport", "x")
    with pytest.raises(InputError, match="tokens"):
        ep.add_run("q?", "direct", "x", tokens=-1)
    assert mem_store.count() == 0


# -- semantic ------------------------------------------------------------------------------------
def test_fact_add_and_duplicate_is_noop(mem_store):
    sm = SemanticMemory(mem_store)
    step = sm.assert_fact("Alice", "lives in", "Paris", source="turn 2")
    _is_step(step)
    assert step["op"] == "fact.add"
    dup = sm.assert_fact("alice", "Lives  in", "paris ", source="turn 5")
    assert dup["op"] == "fact.duplicate" and dup["id"] == step["id"]
    assert mem_store.count() == 1
    f = sm.current("Alice", "lives in")
    assert (f.value, f.source, f.version, f.valid) == ("Paris", "turn 2", 1, True)


def test_contradiction_updates_and_keeps_history(mem_store):
    sm = SemanticMemory(mem_store)
    first = sm.assert_fact("Alice", "lives in", "Paris", source="turn 2")
    upd = sm.assert_fact("Alice", "lives in", "Berlin", source="turn 9")
    assert upd["op"] == "fact.update"
    assert upd["replaced"] == [{"id": first["id"], "value": "Paris"}]
    cur = sm.current("Alice", "lives in")
    assert (cur.value, cur.version) == ("Berlin", 2)
    hist = sm.history("Alice", "lives in")
    assert [(f.value, f.valid, f.superseded_by) for f in hist] == [("Paris", False, cur.id), ("Berlin", True, None)]
    # The old value is not served as current knowledge, but it is kept for the record.
    assert [f.value for f in sm.search("Where does Alice live?", k=5)] == ["Berlin"]
    assert {f.value for f in sm.search("Where does Alice live?", k=5, include_invalid=True)} == {"Paris", "Berlin"}
    # Going back to an old value is a new version, not a resurrection of the old record.
    back = sm.assert_fact("Alice", "lives in", "Paris", source="turn 12")
    assert back["op"] == "fact.update" and back["id"] != first["id"]
    assert [f.version for f in sm.history("Alice", "lives in")] == [1, 2, 3]
    assert mem_store.count() == 3


def test_other_subjects_and_relations_do_not_conflict(mem_store):
    sm = SemanticMemory(mem_store)
    sm.assert_fact("Alice", "lives in", "Paris")
    assert sm.assert_fact("Bob", "lives in", "Rome")["op"] == "fact.add"
    assert sm.assert_fact("Alice", "works at", "CERN")["op"] == "fact.add"
    assert sm.current("Alice", "lives in").value == "Paris"


def test_multi_valued_relation_and_retract(mem_store):
    sm = SemanticMemory(mem_store)
    sm.assert_fact("Alice", "likes", "tea", multi=True)
    assert sm.assert_fact("Alice", "likes", "chess", multi=True)["op"] == "fact.add"
    assert {f.value for f in sm.history("Alice", "likes") if f.valid} == {"tea", "chess"}
    step = sm.retract("Alice", "likes", source="user said so")
    assert step["op"] == "fact.retract" and len(step["ids"]) == 2
    assert sm.current("Alice", "likes") is None
    assert len(sm.history("Alice", "likes")) == 2


def test_fact_bad_input(mem_store):
    sm = SemanticMemory(mem_store)
    with pytest.raises(InputError, match="non-empty value"):
        sm.assert_fact("Alice", "lives in", "  ")
    assert mem_store.count() == 0


def test_notes_fit_the_memory_tools(mem_store):
    from memory.notes import Notes
    from tools.memory import make_memory_tools

    notes = Notes(mem_store)
    nid = notes.add("The user prefers answers in French.", {"source": "turn 3"})
    assert notes.add("The user prefers answers in French.", {"source": "turn 7"}) == nid  # stored once
    assert mem_store.count() == 1
    hits = notes.search("which language does the user want?", k=2)
    assert hits[0].id == nid and hits[0].metadata["source"] == "turn 7"
    assert notes.last_step["op"] == "note.search"
    read, write = make_memory_tools(notes)  # the tools/ room's protocol, over this store
    assert str(write.fn("Alice's locker code is 4417.")).startswith("saved as note-")
    found = read.fn("locker code", 1)
    assert "4417" in found.output and any("4417" in hit["text"] for hit in found.data)
    with pytest.raises(InputError):
        notes.add("  ")
