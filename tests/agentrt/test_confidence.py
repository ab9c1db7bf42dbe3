"""Stated confidence (issue 21): the parser, the tail and grammar modes of the routes, the record, the budget,
the cascade's stated signal. The embedded model (SmolLM2-135M) for behavior; a scripted backend for control flow."""

from __future__ import annotations

import json

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.confidence import (
    CONFIDENCE_CHOICES, CONFIDENCE_INSTRUCTION, brier, split_confidence,
)
from agentrt.core.config import load_settings
from agentrt.core.errors import ConfigError, InputError
from agentrt.core.events import TokenDelta
from agentrt.router.decision import cascade_unsure
from agentrt.trajectory import TrajectoryRecord, find_record, read_trajectories

# ---- the parser ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, answer, confidence, status", [
    ("Paris.\n<confidence>0.9</confidence>", "Paris.", 0.9, "ok"),
    ("Paris. <confidence>.7</confidence>", "Paris.", 0.7, "ok"),
    ("Paris.\n<confidence>70%</confidence>", "Paris.", 0.7, "ok"),
    ("Paris.\n<confidence>1</confidence>", "Paris.", 1.0, "ok"),
    ("Paris.\n<confidence>0</confidence>", "Paris.", 0.0, "ok"),
    ("Paris.\n< Confidence > 0.25 </ CONFIDENCE >", "Paris.", 0.25, "ok"),  # case and spaces
    ("Paris.\n<confidence>0.6", "Paris.", 0.6, "ok"),  # stopped at the close tag (a stop string)
    ("Paris.", "Paris.", None, "missing"),
    ("", "", None, "missing"),
    ("Paris.\n<confidence>high</confidence>", "Paris.", None, "malformed"),
    ("Paris.\n<confidence>1.5</confidence>", "Paris.", None, "malformed"),  # out of [0, 1]
    ("Paris.\n<confidence>150%</confidence>", "Paris.", None, "malformed"),
    ("Paris.\n<confidence>-0.2</confidence>", "Paris.", None, "malformed"),
    ("Paris.\n<confidence></confidence>", "Paris.", None, "malformed"),
    ("Paris.\n<confidence>0.", "Paris.", None, "malformed"),  # ran out of tokens inside the number
    # the instruction's example echoed first, the model's own last: the last wins, every tag goes
    ("Form: <confidence>0.7</confidence>. Paris.\n<confidence>0.95</confidence>", "Form: . Paris.", 0.95, "ok"),
])
def test_split_confidence(text, answer, confidence, status):
    stated = split_confidence(text)
    assert (stated.answer, stated.status) == (answer, status)
    assert stated.confidence == pytest.approx(confidence) if confidence is not None else stated.confidence is None
    assert "<confidence>" not in stated.answer.lower()


def test_choices_parse_and_brier():
    assert len(CONFIDENCE_CHOICES) == 21 and CONFIDENCE_CHOICES[0] == "0.0" and CONFIDENCE_CHOICES[-1] == "1.0"
    values = [split_confidence(f"x <confidence>{c}</confidence>").confidence for c in CONFIDENCE_CHOICES]
    assert values == pytest.approx([i / 20 for i in range(21)])
    assert brier(0.8, 1.0) == pytest.approx(0.04) and brier(0.8, 0.0) == pytest.approx(0.64)


def test_setting_and_mode_are_validated(monkeypatch):
    monkeypatch.setenv("AGENTRT_CONFIDENCE", "grammar")
    assert load_settings().confidence == "grammar"
    assert load_settings(confidence="tail").confidence == "tail"  # an explicit value beats the environment
    monkeypatch.setenv("AGENTRT_CONFIDENCE", "sometimes")
    with pytest.raises(ConfigError, match="AGENTRT_CONFIDENCE"):
        load_settings()
    monkeypatch.delenv("AGENTRT_CONFIDENCE")
    with pytest.raises(InputError, match="confidence must be one of off, tail, grammar, scored"):
        Agent(policy=ScriptedBackend(["x"])).run("hi", route="direct", budget=100, confidence="yes")


# ---- control flow (scripted backend) --------------------------------------------------------------------


def test_tail_mode_strips_the_tag_from_answer_and_stream_and_records_it(agentrt_home):
    backend = ScriptedBackend(["Paris.\n<confidence>0.9</confidence> trailing chatter"])
    agent = Agent(policy=backend)
    deltas: list[TokenDelta] = []
    r = agent.run("What is the capital of France?", route="direct", budget=300, confidence="tail",
                  on_event=lambda e: deltas.append(e) if isinstance(e, TokenDelta) else None)
    assert (r.answer, r.confidence, r.confidence_status) == ("Paris.", 0.9, "ok")
    messages, params = backend.calls[0]
    assert messages[-1].content.endswith("\n\n" + CONFIDENCE_INSTRUCTION)  # the trainer's convention
    assert "</confidence>" in params.stop and len(backend.calls) == 1  # no second call in tail mode
    assert "".join(d.text for d in deltas if not d.thought) == "Paris."  # the tail is never shown
    rec = find_record(agent.writer.path, r.trajectory_id)
    assert rec.answer == "Paris." and (rec.confidence, rec.confidence_status) == (0.9, "ok")
    assert "<confidence>0.9" in rec.steps[-1]["completions"][0]  # the model's own text stays in the step


def test_tail_mode_without_a_tag_is_missing_and_grammar_mode_asks_after_the_answer(agentrt_home):
    r = Agent(policy=ScriptedBackend(["Paris."])).run("Capital of France?", route="direct", budget=300,
                                                      confidence="tail")
    assert (r.answer, r.confidence, r.confidence_status) == ("Paris.", None, "missing")
    backend = ScriptedBackend(["Paris.", "0.85"])
    r = Agent(policy=backend).run("Capital of France?", route="direct", budget=300, confidence="grammar")
    assert (r.answer, r.confidence, r.confidence_status) == ("Paris.", 0.85, "ok")
    messages, params = backend.calls[1]
    assert params.choices == CONFIDENCE_CHOICES and messages[-1].role == "assistant"
    assert messages[-1].content == "Paris.\n<confidence>" and CONFIDENCE_INSTRUCTION in messages[-2].content
    assert [s["name"] for s in r.record.steps if s["kind"] == "model_call"] == ["answer", "confidence"]
    assert json.loads(json.dumps(r.to_dict()))["confidence"] == 0.85
    # scored on a backend that cannot score: the grammar call instead
    r = Agent(policy=ScriptedBackend(["Paris.", "0.85"])).run("Capital of France?", route="direct", budget=300,
                                                              confidence="scored")
    assert (r.confidence, r.confidence_status) == (0.85, "ok")
    off = Agent(policy=ScriptedBackend(["Paris."])).run("Capital of France?", route="direct", budget=300)
    assert (off.confidence, off.confidence_status, off.record.confidence_status) == (None, None, None)


def test_confidence_call_is_refused_when_it_does_not_fit_and_never_overspends(agentrt_home):
    # scripted tokens are words + 4 per message: the answer call costs (9 + 4) + (3 + 4) + 1 = 21 tokens here;
    # the confidence call's prompt alone (the instruction, the answer) is over 40
    backend = ScriptedBackend(["Paris.", "0.9"])
    r = Agent(policy=backend).run("Capital of France?", route="direct", budget=40, confidence="grammar")
    assert r.answer == "Paris." and r.status == "ok"  # the answer stands
    assert (r.confidence, r.confidence_status) == (None, "over_budget")
    assert len(backend.calls) == 1 and r.record.budget["spent"] == 21
    # a budget spent by the answer itself (cut at its one affordable token): truncated, and no confidence call
    backend = ScriptedBackend(["Paris is the capital.", "0.9"])
    r = Agent(policy=backend).run("Capital of France?", route="direct", budget=21, confidence="grammar")
    assert (r.answer, r.status, r.confidence_status) == ("Paris", "truncated", "over_budget")
    assert len(backend.calls) == 1 and r.usage.total_tokens == 21


def test_cascade_reads_the_stated_confidence(agentrt_home):
    assert cascade_unsure("logprob", -1.0, 0.9, logprob_threshold=-0.8, stated_threshold=0.5)
    assert not cascade_unsure("stated", -1.0, 0.9, logprob_threshold=-0.8, stated_threshold=0.5)
    assert cascade_unsure("stated", -1.0, None, logprob_threshold=-0.8, stated_threshold=0.5)  # falls back
    assert cascade_unsure("both", -0.1, 0.2, logprob_threshold=-0.8, stated_threshold=0.5)
    assert not cascade_unsure("logprob", None, None, logprob_threshold=-0.8, stated_threshold=0.5)
    # the scripted answer's logprob (-0.1 a token) says sure; its stated 0.2 says unsure: stated escalates
    replies = ["maybe Paris", "0.2", "<think>hmm</think>", "Paris", "0.9"]
    sure = Agent(policy=ScriptedBackend(list(replies)), router="cascade")
    assert sure.run("What is the capital of France?", budget=2000, confidence="grammar").route == "direct"
    agent = Agent(policy=ScriptedBackend(list(replies)), router="cascade", cascade_signal="stated")
    r = agent.run("What is the capital of France?", budget=2000, confidence="grammar")
    step = next(s for s in r.record.steps if s["kind"] == "escalation")
    assert (step["from"], step["to"], step["signal"], step["stated_confidence"]) == ("direct", "reason", "stated", 0.2)
    assert r.route == "reason" and r.answer == "Paris" and r.confidence == 0.9 and r.usage.total_tokens <= 2000


def test_records_without_confidence_still_read():
    old = {"schema_version": "1", "run_id": "x", "created_at": 0.0, "question": "q", "route": "direct",
           "steps": [], "answer": "a", "budget": {"total": 1, "spent": 1}, "usage": {}, "timings": {}, "status": "ok"}
    rec = TrajectoryRecord.model_validate(old)
    assert rec.confidence is None and rec.confidence_status is None
    assert TrajectoryRecord.model_validate({**old, "schema_version": "0"}).confidence is None


# ---- the embedded model ---------------------------------------------------------------------------------


def test_embedded_grammar_confidence_in_unit_interval_and_in_the_record(agent):
    r = agent.run("What is the capital of France?", route="direct", budget=400, confidence="grammar")
    assert "Paris" in r.answer and "confidence" not in r.answer.lower()
    assert r.confidence_status == "ok" and 0.0 <= r.confidence <= 1.0
    assert f"{r.confidence:g}" in {f"{float(c):g}" for c in CONFIDENCE_CHOICES}
    assert r.usage.total_tokens <= 400 and r.record.budget["spent"] <= 400
    report = read_trajectories(agent.writer.path)
    rec = next(x for x in report.records if x.run_id == r.trajectory_id)
    assert (rec.confidence, rec.confidence_status) == (r.confidence, "ok")
    call = rec.model_calls()[-1]
    assert call.name == "confidence" and call.completions[0].strip() in CONFIDENCE_CHOICES


def test_embedded_scored_confidence_is_an_expectation_paid_from_the_budget(agent):
    r = agent.run("What is the capital of France?", route="direct", budget=600, confidence="scored")
    assert "Paris" in r.answer and r.confidence_status == "ok" and 0.0 < r.confidence < 1.0
    step = r.record.steps[-1]
    assert step["kind"] == "score" and step["name"] == "confidence" and len(step["continuations"]) == 21
    assert r.usage.total_tokens == r.record.budget["spent"] <= 600
    assert r.usage.prompt_tokens >= step["usage"]["prompt_tokens"] > 21  # the pass is counted in the run's usage


@pytest.mark.parametrize("mode", ["grammar", "scored"])
def test_embedded_confidence_call_refused_when_the_budget_is_spent(agent, mode):
    plain = agent.run("What is the capital of France?", route="direct", budget=400)
    # room for the same answer, not for the confidence call (its prompt alone is the answer's and more)
    budget = plain.usage.total_tokens + 10
    r = agent.run("What is the capital of France?", route="direct", budget=budget, confidence=mode)
    assert r.answer == plain.answer and r.status == "ok"
    assert (r.confidence, r.confidence_status) == (None, "over_budget")
    assert r.usage.total_tokens == plain.usage.total_tokens <= budget
    assert [s.get("name") for s in r.record.steps] == ["answer"]
