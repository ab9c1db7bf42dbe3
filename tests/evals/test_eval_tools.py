"""`agentrt eval --tools` (issue 20): the eval's runs get the built-in tools, as `agentrt run --tools` does, so an
eval measures what a user with tools gets. Real embedded model, real calculator, the CLI as a user calls it."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_eval_with_tools_lets_the_reason_route_use_the_calculator(tmp_path, agentrt_home, capsys):
    from agentrt.app.cli import main

    suite = tmp_path / "arith.jsonl"
    suite.write_text(json.dumps({"id": "mul", "question": "What is 1234*5678?", "answer": "7006652",
                                 "type": "math", "verifier": "numeric"}) + "\n")
    out = tmp_path / "o"
    args = ["eval", "--suite", str(suite), "--router", "fixed:reason", "--budget", "2048", "--out", str(out),
            "--no-progress"]
    assert main(args + ["--tools"]) == 0, capsys.readouterr().err
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    # The 135M model alone answers 1234*5678 wrong; through the calculator it is right.
    assert record["tool_calls"] >= 1 and record["correct"] and record["score"] == 1.0, record
    assert record["prompt_tokens"] + record["completion_tokens"] <= 2048
    assert json.loads((out / "config.json").read_text())["tools"] is True
    assert "tools on (built-in)" in (out / "report.md").read_text()
    capsys.readouterr()
    # The folder holds runs with tools: continuing it without them would mix two settings in one report.
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "tools=True" in err and err.count("\n") == 1


def test_a_folder_from_before_the_tools_setting_resumes_without_tools_only(tmp_path):
    from agentrt.batch.results import pin_config
    from agentrt.core.errors import InputError

    (tmp_path / "config.json").write_text(json.dumps({"budget": 512, "seed": 0}))  # written before `tools` existed
    pin_config(tmp_path, {"budget": 512, "seed": 0, "tools": False}, ("budget", "seed", "tools"))
    (tmp_path / "config.json").write_text(json.dumps({"budget": 512, "seed": 0}))
    with pytest.raises(InputError, match="tools=None, not True"):
        pin_config(tmp_path, {"budget": 512, "seed": 0, "tools": True}, ("budget", "seed", "tools"))
