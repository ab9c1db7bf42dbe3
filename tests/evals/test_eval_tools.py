"""`agentrt eval --tools` / `--no-tools` (issue 20): the eval's runs get the tools a user's runs get (the safe
defaults, or the built-in set with --tools, or none), as `agentrt run` does. Real embedded model, real
calculator, the CLI as a user calls it."""

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
    assert json.loads((out / "config.json").read_text())["tools"] == "builtin"
    assert "tools on (built-in)" in (out / "report.md").read_text()
    capsys.readouterr()
    # The folder holds runs with the built-in tools: continuing it without them would mix two settings.
    assert main(args + ["--no-tools"]) == 2
    err = capsys.readouterr().err
    assert "tools='builtin'" in err and err.count("\n") == 1


@pytest.mark.slow
def test_an_eval_by_default_gets_what_a_user_gets_and_no_tools_means_none(tmp_path, agentrt_home, capsys):
    from agentrt.app.cli import main

    suite = tmp_path / "arith.jsonl"
    suite.write_text(json.dumps({"id": "mul", "question": "What is 94838 * 278?", "answer": "26364964",
                                 "type": "math", "verifier": "numeric"}) + "\n")
    base = ["eval", "--suite", str(suite), "--router", "fixed:reason", "--budget", "1024", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "safe")]) == 0, capsys.readouterr().err
    safe = json.loads((tmp_path / "safe" / "results.jsonl").read_text().splitlines()[0])
    assert safe["tool_calls"] == 1 and safe["correct"], safe  # the calculator, by default, as `agentrt run`
    assert json.loads((tmp_path / "safe" / "config.json").read_text())["tools"] == "safe"
    assert main(base + ["--out", str(tmp_path / "none"), "--no-tools"]) == 0
    none = json.loads((tmp_path / "none" / "results.jsonl").read_text().splitlines()[0])
    assert none["tool_calls"] == 0 and not none["correct"], none


def test_a_folder_from_before_the_tools_setting_resumes_without_tools_only(tmp_path):
    from agentrt.batch.results import pin_config
    from agentrt.core.errors import InputError

    (tmp_path / "config.json").write_text(json.dumps({"budget": 512, "seed": 0}))  # written before `tools` existed
    pin_config(tmp_path, {"budget": 512, "seed": 0, "tools": False}, ("budget", "seed", "tools"))
    (tmp_path / "config.json").write_text(json.dumps({"budget": 512, "seed": 0}))
    with pytest.raises(InputError, match="tools=None, not True"):
        pin_config(tmp_path, {"budget": 512, "seed": 0, "tools": True}, ("budget", "seed", "tools"))
