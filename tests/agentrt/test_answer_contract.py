"""The answer contract (issue 37): a run without a real answer never ends ``ok``; control flow on the
scripted backend (the real-model harness is tests/agentrt/test_answer_quality.py)."""

import json

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.answer import answer_span, check_answer
from agentrt.routes.toolcall import builtin_tools, repair_final
from agentrt.router.decision import UtilityConfig, choose
from agentrt.router.features import extract, is_chitchat
from agentrt.trajectory import find_record

DOCS = '<document id="p1" source="search" title="Sinister">\nSinister is a 2012 horror film.\n</document>'


@pytest.mark.parametrize("text, reason", [
    ("", "empty answer"),
    ("   \n", "empty answer"),
    (DOCS, "raw tool output or frame tags in the answer"),
    ("[1] search: &lt;document id=p1>", "raw tool output or frame tags in the answer"),
    ('{"name": "final_answer", "arguments": {"answer": "Sinis', "tool-call JSON instead of an answer"),
    ("?!...", "no words in the answer"),
    ("what is 12 + 30", "the answer repeats the question"),
])
def test_what_is_no_answer(text, reason):
    verdict = check_answer(text, "What is 12 + 30?")
    assert (verdict.ok, verdict.reason) == (False, reason)


@pytest.mark.parametrize("text", ["42", "Paris.", "Hello Kai, nice to meet you!", "I don't know.",
                                  "Could you say which film you mean?"])
def test_real_answers_pass(text):
    assert check_answer(text, "What is 12 + 30?").ok


def test_answer_span_is_the_verifiers_extractor():
    from agentrt.trajectory.rewards import score

    assert answer_span("<think>12 plus 30\nFinal answer: 42") == ("42", True)
    assert answer_span("Some thought.\nThe result is 42") == ("The result is 42", False)
    assert score("numeric", "<think>12 plus 30\nFinal answer: 42", "42").score == 1.0


def test_a_run_whose_route_leaks_tool_output_ends_no_answer_with_the_text_kept_apart():
    agent = Agent(policy=ScriptedBackend([DOCS]))
    r = agent.run("Who directed Sinister?", route="direct", budget=300)
    leaked = " ".join(DOCS.split())  # the scripted backend joins words with single spaces
    assert (r.status, r.answer, r.partial) == ("no_answer", "", leaked)
    assert r.error == "no answer: raw tool output or frame tags in the answer"
    rec = find_record(agent.writer.path, r.trajectory_id)
    assert (rec.status, rec.answer, rec.partial) == ("no_answer", "", leaked)
    assert r.to_dict()["status"] == "no_answer" and r.to_dict()["partial"] == leaked


def test_an_empty_answer_is_no_answer_and_a_real_one_stays_ok():
    assert Agent(policy=ScriptedBackend([""])).run("What is 2 + 2?", route="direct", budget=300).status == "no_answer"
    r = Agent(policy=ScriptedBackend(["4"])).run("What is 2 + 2?", route="direct", budget=300)
    assert (r.status, r.answer, r.partial, r.error) == ("ok", "4", None, None)


def test_a_final_answer_cut_at_its_cap_is_repaired_never_leaked():
    cut = '{"name": "final_answer", "arguments": {"answer": "Kai is a name. It is short and'
    assert repair_final(cut) == "Kai is a name."
    assert repair_final('{"name": "calculator", "arguments": {"expr') is None
    backend = ScriptedBackend([json.dumps({"name": "calculator", "arguments": {"expression": "2+2"}}), cut])
    agent = Agent(policy=backend)
    r = agent.run("What is 2+2 in words?", route="reason", budget=3000, tools=builtin_tools(agent.settings))
    assert r.status == "ok" and r.answer.startswith("Kai is a name.") and "{" not in r.answer
    rec = find_record(agent.writer.path, r.trajectory_id)
    assert [s["composed_from"] for s in rec.steps if s["kind"] == "final_answer"] == ["repaired"]


def test_a_loop_that_ends_on_search_output_has_no_answer():
    from tools.search import make_search_tool

    def searcher(query, k):
        return [{"id": "p1", "text": "Sinister is a 2012 horror film.", "title": "Sinister", "score": 1.0}]

    search = make_search_tool(searcher)
    call = json.dumps({"name": "search", "arguments": {"query": "Sinister"}})
    agent = Agent(policy=ScriptedBackend([call, call, call, '{"name": "final_answer", "arguments": {"answer": "']))
    r = agent.run("Who directed Sinister?", route="reason", budget=4000, tools=[search])
    assert r.status == "no_answer" and r.answer == "" and "<document" not in (r.answer + (r.error or ""))


def test_after_two_tool_errors_the_model_must_answer_without_the_tool():
    bad = json.dumps({"name": "calculator", "arguments": {"expression": "2 +* 2"}})
    backend = ScriptedBackend([bad, bad, json.dumps({"name": "final_answer", "arguments": {"answer": "4"}})])
    agent = Agent(policy=backend)
    r = agent.run("What is 2 + 2?", route="reason", budget=4000, tools=builtin_tools(agent.settings))
    assert (r.status, r.answer) == ("ok", "4")
    third_schema = json.dumps(backend.calls[2][1].json_schema)
    assert "calculator" not in third_schema  # the third step could only be final_answer


class Batch(ScriptedBackend):  # n choices from one call, one reply each
    async def chat(self, messages, params):
        from agentrt.core.types import Choice, Completion, Usage
        self.calls.append((messages, params))
        return Completion([Choice(t, None, None, "stop") for t in self.replies[:params.n]], None, Usage(10, 40))


def test_samples_vote_on_the_answer_span_and_record_the_winner():
    agent = Agent(policy=Batch(["12 and 30 make 42.\nFinal answer: 42", "Let me add.\nFinal answer: 42 ",
                                "<think>unclosed, but it says Final answer: 42",
                                "I think about logic.\nFinal answer: 32"]))
    r = agent.run("What is 12 + 30?", route="reason", samples=4, budget=4000, tools=[])
    assert (r.status, r.answer) == ("ok", "42")
    step = next(s for s in find_record(agent.writer.path, r.trajectory_id).steps if s["kind"] == "sample_selection")
    assert step["won"] == "42" and step["votes"]["42"] == 3 and step["answers"][3] == "32"


def test_a_vote_without_a_majority_finds_no_answer():
    agent = Agent(policy=Batch(["Final answer: 42", "Final answer: 32", "Final answer: 32",
                                "No idea, thinking forever about logical thinking"]))
    r = agent.run("What is 12 + 30?", route="reason", samples=4, budget=4000, tools=[])
    assert (r.status, r.answer, r.partial) == ("no_answer", "", "32")
    assert r.error == "no answer: the samples' vote found no majority answer (its best text is in partial)"
    step = next(s for s in r.record.steps if s["kind"] == "sample_selection")
    assert step["won"] is None
    assert step["votes"] == {"42": 1, "32": 2, "no idea thinking forever about logical thinking": 1}


def test_chitchat_goes_direct_and_gets_no_tools():
    assert is_chitchat("Hi, my name is Kai.") and is_chitchat("Thanks!") and is_chitchat("How are you?")
    assert not is_chitchat("Hi, what is the capital of France?") and not is_chitchat("OK, compute 3*4")
    f = extract("Hi, my name is Kai.")
    p = {"direct": 0.3, "reason": 0.9, "plan": 0.9, "ask": 0.1, "abstain": 0.1}
    d = choose("t", p, {a: 50.0 for a in p}, 1024, UtilityConfig(), features=f)
    assert d.action == "direct" and "small talk" in d.excluded["reason"]
    from agentrt.core.config import Settings
    from agentrt.routes.toolcall import safe_tools

    assert safe_tools(Settings(), "Hi, my name is Kai.") == []


def test_a_short_question_the_index_does_not_cover_never_goes_to_plan():
    f = extract("What is the capital of France?")
    p = {"direct": 0.4, "reason": 0.2, "plan": 0.9, "ask": 0.1, "abstain": 0.1}
    d = choose("t", p, {a: 50.0 for a in p}, 1024, UtilityConfig(floors={"ask": 0.5}), features=f)
    assert d.action == "direct" and d.excluded["plan"].startswith("a short question the index does not cover")
    assert d.excluded["ask"] == "p_success 0.10 below its floor 0.50"
    covered = {**f, "coverage": 0.9, "has_index": 1.0}
    assert choose("t", p, {a: 50.0 for a in p}, 1024, UtilityConfig(), features=covered).action == "plan"


def test_exports_leave_failed_runs_out_unless_asked(tmp_path):
    from agentrt.trajectory.export import export, load_runs

    agent = Agent(policy=ScriptedBackend(["Paris is the capital."]))
    agent.run("What is the capital of France?", route="direct", budget=300)
    Agent(policy=ScriptedBackend([DOCS])).run("Who directed Sinister?", route="direct", budget=300)
    records, _ = load_runs(home=agent.settings.home)
    old = records[0].model_copy(update={"run_id": "old", "answer": DOCS})  # an older record marked ok over junk
    report = export(records + [old], "openai", tmp_path / "sft.jsonl")
    assert report.rows == 1
    assert report.skipped == {"failed run: status no_answer": 1,
                              "failed run: no real answer (raw tool output or frame tags in the answer)": 1}
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert rows[0]["messages"][-1]["content"] == "Paris is the capital."
    everything = export(records + [old], "parquet", tmp_path / "all.jsonl", include_failed=True)
    assert (everything.rows, everything.skipped) == (3, {})


def test_evals_count_no_answer_as_wrong_never_as_abstaining():
    from evals.metrics import summarize
    from evals.verifiers import is_abstention

    assert not is_abstention("") and is_abstention("I don't know.")
    rec = {"item_id": "a", "type": "math", "correct": False, "score": 0.0, "abstained": False, "status": "no_answer",
           "answer": "", "truncated": False, "prompt_tokens": 9, "completion_tokens": 3, "thinking_tokens": 0,
           "tool_calls": 0, "latency_s": 1.0, "route": "reason", "p_success": None}
    out = summarize([rec, {**rec, "item_id": "b", "correct": True, "score": 1.0, "status": "ok", "answer": "4"}])
    assert out["no_answer"] == 0.5 and out["accuracy"] == 0.5 and "abstention" not in out


def test_the_server_withholds_no_answer_and_says_why():
    from agentrt.app.server.request import RunPlan
    from agentrt.app.server.response import agentrt_extra, choices

    r = Agent(policy=ScriptedBackend([DOCS])).run("Who directed Sinister?", route="direct", budget=300)
    plan = RunPlan(request=None)
    (choice,) = choices(r, plan)
    assert (choice.content, choice.finish_reason) == ("", "content_filter")
    extra = agentrt_extra(r)
    assert extra["status"] == "no_answer" and extra["error"].startswith("no answer: raw tool output")
    ok = Agent(policy=ScriptedBackend(["Scott Derrickson."])).run("Who directed Sinister?", route="direct", budget=300)
    assert [(c.content, c.finish_reason) for c in choices(ok, plan)] == [("Scott Derrickson.", "stop")]
    assert "error" not in agentrt_extra(ok)


def test_a_tool_loop_the_budget_cuts_before_any_answer_ends_truncated_with_the_reason():
    agent = Agent(policy=ScriptedBackend(["x"]))
    r = agent.run("What is 2 + 2?", route="reason", budget=40, tools=builtin_tools(agent.settings))
    assert (r.status, r.answer, r.truncated) == ("truncated", "", True)
    assert r.error.startswith("the budget ran out in the tool loop before an answer")
