"""One short real eval: 4 GSM8K items on the embedded SmolLM2-135M, 4 workers sharing the model."""

from __future__ import annotations

import json

import pytest

from agentrt import Agent
from evals.runner import EvalConfig, evaluate


@pytest.mark.slow
def test_gsm8k_four_items_on_the_embedded_model(embedded, tmp_path):
    agent = Agent(policy=embedded, answer_max_tokens=48)  # short answers keep the test quick on 2 cores
    out = tmp_path / "out"
    report = evaluate(EvalConfig(suites=["gsm8k"], routers=["fixed:direct"], budget=400, limit=4, workers=4,
                                 out=str(out)), agent=agent)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 4 and {r["item_id"] for r in results} == {f"gsm8k-{i}" for i in range(4)}
    for r in results:
        assert r["status"] in ("ok", "truncated") and r["error"] is None
        assert r["answer"] and r["route"] == "direct"
        assert 0 < r["prompt_tokens"] + r["completion_tokens"] <= 400
        assert r["score"] in (0.0, 1.0, -0.5)  # numeric verifier: match, no match, or a penalized hedge
    m = report["policies"]["fixed:direct"]["gsm8k"]
    assert m["items"] == 4 and m["latency_p50_s"] > 0
    assert m["accuracy"] == sum(r["correct"] for r in results) / 4
