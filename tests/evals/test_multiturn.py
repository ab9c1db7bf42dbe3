"""Multi-turn items (hotpotqa-multiturn): loading and validation, the memory path between turns on the
scripted backend (turn 2 gets turn 1 as history messages), resume of a conversation as one unit, and
one real conversation + plan check on the embedded model."""

from __future__ import annotations

import json

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.app.cli import main
from evals.multiturn import CORPUS_FILE, derive
from evals.runner import EvalConfig, evaluate
from evals.suites import DATA_DIR, load_suite

KISS = {"_id": "k1", "type": "bridge", "answer": "Chief of Protocol",
        "question": "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
        "supporting_facts": [["Kiss and Tell (1945 film)", 0], ["Shirley Temple", 0], ["Shirley Temple", 1]],
        "context": [["Kiss and Tell (1945 film)", ["Kiss and Tell is a 1945 comedy film starring Shirley Temple as Corliss Archer."]],
                    ["Shirley Temple", ["Shirley Temple Black was an American actress and diplomat.",
                                        " She served as Chief of Protocol of the United States."]],
                    ["Meet Corliss Archer", ["Meet Corliss Archer was a radio program."]]]}


def test_multiturn_suite_loads_and_derivation_is_honest():
    suite = load_suite("hotpotqa-multiturn")
    assert 50 <= len(suite.items) <= 100 and len({i.id for i in suite.items}) == len(suite.items)
    for item in suite.items:
        t1, t2 = item.turns
        assert item.type == "qa" and item.plan_check and item.corpus == str(CORPUS_FILE)
        assert t2.answers == item.answers and t1.id == f"{item.id}#t1"
        assert not any(g.lower() in t2.question.lower() for g in t1.answers)  # turn 2 needs turn 1
    assert (DATA_DIR / "LICENSES.md").read_text().count("hotpotqa-multiturn.jsonl") == 1
    item = derive(KISS)
    assert item["turns"] == [
        {"question": "What is the name of the woman who portrayed Corliss Archer in the film Kiss and Tell?",
         "answers": ["Shirley Temple"]},
        {"question": "What government position was held by that woman?", "answer": "Chief of Protocol"}]
    assert derive({**KISS, "type": "comparison"}) is None
    assert derive({**KISS, "supporting_facts": [["Shirley Temple", 0]]}) is None  # one paragraph: no bridge


GOOD = {"id": "m", "type": "qa", "question": "q?", "turns": [{"question": "a?", "answer": "x"}]}
BAD_TURNS = [
    ({**GOOD, "turns": "a?"}, "field 'turns' must be a list of 1 to 8 objects"),
    ({**GOOD, "turns": []}, "field 'turns' must be a list of 1 to 8 objects"),
    ({**GOOD, "turns": ["a?"]}, "field 'turns' item 1: expected a JSON object"),
    ({**GOOD, "turns": [{"question": "a?", "answer": "x"}, {"answer": "y"}]}, "field 'turns' item 2: missing field 'question'"),
    ({**GOOD, "turns": [{"question": "a?"}]}, "field 'turns' item 1: missing field 'answer'"),
    ({**GOOD, "turns": [{"question": "a?", "answer": "x", "id": 3}]}, "field 'turns' item 1: a turn cannot have its own field 'id'"),
    ({**GOOD, "plan_check": "yes"}, "field 'plan_check' must be true or false"),
    ({**GOOD, "plan_check": True}, "missing field 'answer'"),
    ({"id": "m", "type": "qa", "question": "q?", "answer": "x", "plan_check": True}, "field 'plan_check' needs a field 'turns'"),
]


@pytest.mark.parametrize("bad,message", BAD_TURNS)
def test_multiturn_bad_turns_name_line_and_field(tmp_path, capsys, bad, message):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    code = main(["eval", "--suite", str(path), "--router", "fixed:direct", "--policy", "scripted:4", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path}:2:" in err and message in err


def _remembering(messages, params):
    """Answers turn 1 with the bridge; turn 2 right only when turn 1's answer is in its conversation."""
    if "that woman" in messages[-1].content:
        earlier = " ".join(m.content for m in messages[:-1])
        return "Chief of Protocol" if "Shirley Temple" in earlier else "I do not know"
    return "Shirley Temple"


def test_multiturn_memory_path_scores_and_resume(tmp_path, agentrt_home):
    suite = tmp_path / "mt.jsonl"
    items = [{"id": "k1", "type": "qa", "question": KISS["question"], "answer": "Chief of Protocol",
              "turns": [{"question": "What is the name of the woman who portrayed Corliss Archer in Kiss and Tell?",
                         "answers": ["Shirley Temple"]},
                        {"question": "What government position was held by that woman?", "answer": "Chief of Protocol"}]},
             {"id": "k2", "type": "qa", "question": "Who?", "turns": [{"question": "Name that woman.", "answer": "Ada"}]}]
    suite.write_text("".join(json.dumps(i) + "\n" for i in items))
    backend = ScriptedBackend([_remembering])
    out = tmp_path / "out"
    config = EvalConfig(suites=[str(suite)], routers=["fixed:direct"], budget=400, workers=2, out=str(out))
    report = evaluate(config, agent=Agent(policy=backend))

    # The memory path: turn 2 gets turn 1 as history messages, its own question left as asked.
    second = next(m for m, _ in backend.calls if "that woman?" in m[-1].content)
    assert second[-1].content == "What government position was held by that woman?"
    assert [(m.role, m.content) for m in second if m.role != "system"][-3:-1] == [
        ("user", items[0]["turns"][0]["question"]), ("assistant", "Shirley Temple")]
    results = {r["item_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    k1 = results["k1"]
    assert [t["score"] for t in k1["turns"]] == [1.0, 1.0] and k1["score"] == 1.0 and k1["n_turns"] == 2
    assert k1["prompt_tokens"] == sum(t["prompt_tokens"] for t in k1["turns"]) and k1["plan"] is None
    assert results["k2"]["score"] == 0.0  # a first turn that refers to nothing: the scripted model does not know
    per_turn = report["policies"]["fixed:direct"]["mt"]["per_turn"]
    assert per_turn == {"items": 2, "turn 1": 0.5, "turn 2": 1.0, "mean_score": {"turn 1": 0.5, "turn 2": 1.0}}
    assert "| fixed:direct | 2 | 0.500 / 0.500 | 1.000 / 1.000 | - | - |" in (out / "report.md").read_text()

    trajectories = [json.loads(line) for line in (agentrt_home / "trajectories" / "trajectories.jsonl").read_text().splitlines()]
    k1_runs = sorted((t for t in trajectories if t["metadata"].get("eval_item") == "k1"), key=lambda t: t["metadata"]["turn"])
    assert [(t["metadata"]["turn"], t["task"]["prompt_id"], t["reward"]) for t in k1_runs] == [(1, "k1#t1", 1.0), (2, "k1#t2", 1.0)]
    assert {t["run_id"] for t in k1_runs} == {t["trajectory_id"] for t in k1["turns"]}

    calls = len(backend.calls)
    evaluate(config, agent=Agent(policy=backend))  # resume: both conversations are done, nothing reruns
    assert len(backend.calls) == calls
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow
def test_multiturn_item_and_plan_check_on_the_embedded_model(embedded, tmp_path, agentrt_home):
    # The first shipped item with only its own ten paragraphs as corpus (indexing all 599 takes ~40 s).
    first = (DATA_DIR / "hotpotqa-multiturn.jsonl").read_text().splitlines()[0]
    item = json.loads(first)
    passages = [p for p in CORPUS_FILE.read_text().splitlines() if json.loads(p)["first_item"] == item["id"]]
    assert len(passages) == 10
    (tmp_path / "passages.jsonl").write_text("\n".join(passages) + "\n")
    (tmp_path / "one.jsonl").write_text(json.dumps({**item, "corpus": "passages.jsonl"}) + "\n")
    agent = Agent(policy=embedded, answer_max_tokens=32)
    out = tmp_path / "out"
    report = evaluate(EvalConfig(suites=[str(tmp_path / "one.jsonl")], routers=["fixed:direct"], budget=1024,
                                 out=str(out)), agent=agent)
    [r] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert r["status"] in ("ok", "truncated") and [t["turn"] for t in r["turns"]] == [1, 2]
    assert all(t["route"] == "direct" and t["answer"] and t["trajectory_id"] for t in r["turns"])
    assert r["score"] == r["turns"][-1]["score"]
    plan = r["plan"]
    assert plan["route"] == "plan" and plan["error"] is None and plan["budget"] == 3072
    assert plan["plan_steps"] >= 2 and plan["dependent_steps"] >= 1  # the bridge: s2 waits for s1
    per_turn = report["policies"]["fixed:direct"]["one"]["per_turn"]
    assert set(per_turn) == {"items", "turn 1", "turn 2", "plan", "plan_dependent", "mean_score"} and per_turn["plan_dependent"] == 1.0
    trajectories = [json.loads(line) for line in (agentrt_home / "trajectories" / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(str(t["metadata"]["turn"]) for t in trajectories) == ["1", "2", "plan"]
    searched = [s for t in trajectories for s in t["steps"] if s.get("kind") == "tool_call"]
    assert searched, "the plan's searchers searched the item's corpus"
