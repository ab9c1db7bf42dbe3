"""``agentrt tools`` list / call: exit codes and one-line errors."""

from __future__ import annotations

import json

from agentrt.app.cli import main


def test_list_and_route_allowlist(capsys):
    assert main(["tools", "list"]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == ["calculator", "ask_user"]
    assert main(["tools", "list", "--route", "plan", "--allow-python", "--json"]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert [s["function"]["name"] for s in schemas] == ["calculator", "python"]


def test_call_ok_and_errors(capsys):
    assert main(["tools", "call", "calculator", '{"expression": "1234*5678"}']) == 0
    assert capsys.readouterr().out == "7006652\n"
    assert main(["tools", "call", "python", '{"code": "print(1)"}']) == 2
    assert "python needs --allow-python" in capsys.readouterr().err
    assert main(["tools", "call", "calculator", "{bad"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["tools", "call", "calculator", '{"expression": "1/0"}']) == 1
    assert capsys.readouterr().err == "error: division by zero\n"
    assert main(["tools", "call", "python", '{"code": "print(6*7)"}', "--allow-python"]) == 0
    assert capsys.readouterr().out == "exit code 0\n42\n"
