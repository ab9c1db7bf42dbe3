"""A custom suite's ``corpus`` file is indexed once (real ChromaDB + embeddings) and searched by the plan
route for single-turn items too: ``--router fixed:plan`` runs with no errored run (it used to fail every
run with "no collection 'default' in memory store")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.app.corpus import collection_for
from agentrt.trajectory import iter_records

PASSAGES = [
    {"title": "Veloria", "text": "Veloria is a river town whose lighthouse keeper is Maren Holt. It was founded in 1712."},
    {"title": "Quill Bay", "text": "Quill Bay is a harbour north of Veloria. Its ferry, the Tern, sails twice a day."},
    {"title": "Tern (ferry)", "text": "The Tern is a ferry built in 1988 that links Quill Bay and Veloria."},
]
ITEMS = [
    {"id": "keeper", "question": "Who is the lighthouse keeper of Veloria?", "answer": "Maren Holt", "type": "qa"},
    {"id": "founded", "question": "When was Veloria founded?", "answer": "1712", "type": "qa"},
    {"id": "ferry", "question": "What is the name of the Quill Bay ferry?", "answer": "the Tern", "type": "qa"},
]


def write_suite(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "towns.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    suite = folder / "towns-suite.jsonl"
    suite.write_text("".join(json.dumps({**i, "corpus": "towns.jsonl"}) + "\n" for i in ITEMS))
    return suite, corpus


def plan_reply(messages, params) -> str:
    """A scripted model that answers each plan call by its schema (as tests/agentrt/_plan_script.py)."""
    props = (params.json_schema or {}).get("properties", {})
    if "steps" in props:
        return json.dumps({"steps": [{"id": "s1", "question": "what", "depends_on": []}]})
    if "citations" in props:
        ids = props["citations"].get("items", {}).get("enum", [])[:1]
        return json.dumps({"answer": props["answer"].get("enum", ["Maren Holt"])[0], "citations": ids})
    last = messages[-1].content
    if "<tool_response" in last:
        return json.dumps({"name": "final_answer", "arguments": {"answer": "found"}})
    query = last.split("Find out:", 1)[-1].splitlines()[0].strip()
    return json.dumps({"name": "search", "arguments": {"query": query, "k": 2}})


def searched(trajectories: Path) -> list[tuple[str, list[str]]]:
    """(store, ids) of every search the plan runs made."""
    return [(s["store"], s["ids"]) for r in iter_records(trajectories) for s in r.steps
            if s.get("kind") == "memory_op" and s.get("op") == "search"]


def test_fixed_plan_searches_the_suites_corpus_for_single_turn_items(tmp_path, agentrt_home):
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend
    from evals.runner import EvalConfig, evaluate

    suite, corpus = write_suite(tmp_path / "suite")
    agent = Agent(policy=ScriptedBackend([plan_reply]))
    config = EvalConfig(suites=[str(suite)], routers=["fixed:plan"], budget=3000, workers=2, out=str(tmp_path / "out"))
    report = evaluate(config, agent=agent)
    name = collection_for(corpus)
    assert agent.settings.corpus == name and name.startswith("towns-")
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 3 and not [r for r in records if r.get("error") or r["status"] == "error"], records
    assert report["policies"]["fixed:plan"]["all"]["items"] == 3
    searches = searched(agent.writer.path.parent)
    assert searches and {store for store, _ in searches} == {f"corpus:{name}"}
    from memory.corpus import open_corpus

    stored = open_corpus(agent.settings, name)
    assert stored.count() == 3 and all(stored.get(i) for _, ids in searches for i in ids)
    # a second eval indexes nothing new: the same file is the same collection
    again = Agent(policy=ScriptedBackend([plan_reply]))
    evaluate(EvalConfig(suites=[str(suite)], routers=["fixed:plan"], budget=3000, out=str(tmp_path / "out2")),
             agent=again)
    assert again.settings.corpus == name and open_corpus(again.settings, name).count() == 3


def test_suites_naming_different_corpora_are_refused_before_anything_runs(tmp_path, agentrt_home, capsys):
    from agentrt.app.cli import main

    a, _ = write_suite(tmp_path / "a")
    b, corpus_b = write_suite(tmp_path / "b")
    corpus_b.write_text(corpus_b.read_text().replace("1712", "1713"))
    code = main(["eval", "--suite", str(a), "--suite", str(b), "--router", "fixed:plan", "--out", str(tmp_path / "o")])
    assert code == 2 and "an eval searches one corpus" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_agentrt_eval_on_fixed_plan_with_the_embedded_model_has_no_errored_run(tmp_path, agentrt_home, embedded,
                                                                               capsys):
    from agentrt.app.cli import main

    suite, corpus = write_suite(tmp_path / "suite")
    out = tmp_path / "out"
    code = main(["eval", "--suite", str(suite), "--router", "fixed:plan", "--limit", "2", "--budget", "3000",
                 "--workers", "2", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["route"] == "plan" for r in records)
    assert not [r for r in records if r.get("error") or r["status"] == "error"], records
    name = collection_for(corpus)
    searches = searched(agentrt_home / "trajectories")
    assert searches and {store for store, _ in searches} == {f"corpus:{name}"}
    assert all(ids for _, ids in searches)  # every search found passages of the suite's corpus


def test_agentrt_eval_without_routers_compares_what_users_get_with_the_baselines(tmp_path, agentrt_home, capsys):
    """No --router: the default router (auto: what a user's runs get) beside rules, direct and reason, and over
    a corpus the read route too, each with its rows in the report; a suite without a corpus has no read row."""
    from agentrt.app.cli import main

    suite, _ = write_suite(tmp_path / "suite")
    code = main(["eval", "--suite", str(suite), "--limit", "1", "--policy", "scripted:Maren Holt", "--budget", "1500",
                 "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    rows = {line.split()[0] for line in capsys.readouterr().out.splitlines() if " accuracy " in line}
    assert rows == {"auto", "rules", "fixed:direct", "fixed:reason", "fixed:read", "oracle"}, rows
    records = [json.loads(line) for line in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert {r["router"] for r in records} == {"auto", "rules", "fixed:direct", "fixed:reason", "fixed:read"}
    read = next(r for r in records if r["router"] == "fixed:read")
    assert read["route"] == "read" and read["status"] == "ok" and read["correct"], read
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"id": "p", "question": "What is 2 + 2?", "answer": "4", "type": "math"}) + "\n")
    code = main(["eval", "--suite", str(plain), "--policy", "scripted:4", "--out", str(tmp_path / "p"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    rows = {line.split()[0] for line in capsys.readouterr().out.splitlines() if " accuracy " in line}
    assert rows == {"auto", "rules", "fixed:direct", "fixed:reason", "oracle"}, rows
