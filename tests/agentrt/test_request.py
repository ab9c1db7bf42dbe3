"""A run request is one type (issue 33): every door takes RunRequest's fields with RunRequest's limits, and
the code keeps the names and types that make that hold (no ``settings: Any``, no private imports across rooms)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from agentrt.app.agent import Agent
from agentrt.app.server.request import ChatRequest, RequestError, plan_run
from agentrt.core.errors import InputError
from agentrt.core.request import AnswerOptions, RunHooks, RunRequest, option_names

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentrt", "planners", "memory", "tools", "evals")


def _limits(field) -> list:
    """A field's constraints (ge, le, gt, lt, strict ...) as comparable values."""
    return sorted(repr(m) for m in field.metadata)


def test_arun_takes_exactly_the_request_and_hook_fields():
    params = inspect.signature(Agent.arun).parameters
    assert list(params)[:2] == ["self", "question"]
    fields = set(RunRequest.model_fields) - {"question", "answer"}
    fields |= set(AnswerOptions.model_fields) | {f.name for f in dataclasses.fields(RunHooks)}
    assert set(list(params)[2:]) == fields == set(option_names())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[2:])
    assert params["samples"].default == 1 and params["n"].default == 1 and params["budget"].default is None


def test_the_server_body_declares_the_shared_fields_with_the_same_limits():
    shared = {"temperature": RunRequest, "budget": RunRequest, "route": RunRequest, "router": RunRequest,
              "top_p": AnswerOptions, "max_tokens": AnswerOptions, "max_completion_tokens": AnswerOptions,
              "n": AnswerOptions, "samples": AnswerOptions, "thinking_cap": AnswerOptions}
    for name, model in shared.items():
        source = model.model_fields["max_tokens" if name == "max_completion_tokens" else name]
        mine = ChatRequest.model_fields[name]
        assert _limits(mine) == _limits(source) and mine.default == source.default, name
        assert mine.description == source.description, name
    # the body's JSON schema documents them as the request's does
    body, request = ChatRequest.model_json_schema(), RunRequest.model_json_schema()
    assert body["properties"]["n"] == request["$defs"]["AnswerOptions"]["properties"]["n"]
    assert body["properties"]["budget"] == request["properties"]["budget"]


@pytest.mark.parametrize("options, message", [
    ({"n": 17}, "n must be an integer from 1 to 16, got 17"),
    ({"samples": 65}, "samples must be an integer from 1 to 64, got 65"),
    ({"budget": 0}, "budget must be a positive number of tokens, got 0"),
    ({"temperature": 3}, "temperature must be between 0 and 2, got 3"),
    ({"route": "teleport"}, "unknown route 'teleport'; choose one of: direct, reason"),
])
def test_one_limit_one_message_at_every_door(options, message):
    with pytest.raises(InputError) as sdk:
        RunRequest.from_kwargs("hi", **options)
    assert str(sdk.value).startswith(message) and "\n" not in str(sdk.value)
    from pydantic import ValidationError

    from agentrt.core.request import explain

    with pytest.raises(ValidationError) as server:
        ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **options})
    assert explain(server.value, ChatRequest)[0].startswith(message)  # the server's 400 says the same


def test_the_server_turns_a_body_into_a_request(agentrt_home):
    from agentrt.backends.scripted import ScriptedBackend

    agent = Agent(policy=ScriptedBackend(["ok"]))
    body = ChatRequest.model_validate({"messages": [{"role": "system", "content": "Be brief."},
                                                    {"role": "user", "content": "hi"}],
                                       "max_tokens": 7, "stop": "END", "n": 2, "seed": 2**40 + 3, "samples": 1,
                                       "route": "reason", "thinking_cap": 32})
    req = plan_run(body, agent, None).request
    assert isinstance(req, RunRequest)
    assert (req.question, req.system, req.route, req.seed) == ("hi", "Be brief.", "reason", 3)
    assert (req.answer.max_tokens, req.answer.stop, req.answer.n, req.answer.thinking_cap) == (7, ["END"], 2, 32)
    with pytest.raises(RequestError) as e:  # the run's own checks answer 400 with the field they concern
        plan_run(ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}],
                                             "stop": [""]}), agent, None)
    assert e.value.param == "stop" and "stop must be a non-empty string" in str(e.value)


def test_unknown_options_name_the_known_ones(agentrt_home):
    from agentrt.backends.scripted import ScriptedBackend

    with pytest.raises(InputError, match="unknown option 'budgt'; known options: history, system, budget"):
        Agent(policy=ScriptedBackend(["ok"])).run("hi", budgt=10)


def test_a_session_amends_the_request_with_its_history(agentrt_home):
    from agentrt.backends.scripted import ScriptedBackend

    backend = ScriptedBackend(["Hello Ada.", "Ada."])
    chat = Agent(policy=backend).session(budget=400)
    chat.ask("My name is Ada.", route="direct")
    result = chat.ask("What is my name?", route="direct")
    assert "Ada." in result.answer
    sent = [m.content for m in backend.calls[-1][0]]
    assert sent[1:4] == ["My name is Ada.", "Hello Ada.", "What is my name?"]  # after the system prompt



def test_a_turn_without_an_answer_is_not_history(agentrt_home):
    from agentrt.backends.scripted import ScriptedBackend

    backend = ScriptedBackend(["", "Hello Ada."])
    chat = Agent(policy=backend).session(budget=400)
    first = chat.ask("My name is Ada.", route="direct")
    assert first.status == "no_answer" and first.answer == ""
    chat.ask("Hi again.", route="direct")
    sent = [m.content for m in backend.calls[-1][0]]
    assert "" not in sent and sent[-1] == "Hi again."  # the failed turn left no empty assistant message
    assert [t.answer for t in chat.turns] == ["Hello Ada."]

# -- the code's names and types -----------------------------------------------------------------------------

def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _room(module: str) -> str:
    """The package a private name is private to: agentrt's subpackage (agentrt.app), else the top package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "agentrt" and len(parts) > 1 else parts[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_a_private_module_or_name_of_another_package():
    found = []
    for module, path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against this module's package
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [(base, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [(a.name, "") for a in node.names]
            else:
                continue
            for target, name in targets:
                if target.split(".")[0] not in PACKAGES or _room(target) == _room(module):
                    continue
                if any(_private(p) for p in target.split(".")) or _private(name):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target} {name}".strip())
    assert not found, "\n".join(found)


def test_settings_is_never_annotated_any():
    found = []
    for _, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.arg) and node.arg == "settings" and node.annotation is not None:
                annotation = ast.unparse(node.annotation)
            elif isinstance(node, ast.AnnAssign) and ast.unparse(node.target).endswith("settings"):
                annotation = ast.unparse(node.annotation)
            else:
                continue
            if "Any" in annotation.replace("'", "").replace('"', "").split(" | "):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: settings: {annotation}")
    assert not found, "\n".join(found)


def test_optional_backend_abilities_are_declared_not_probed():
    # score / close / tokenizer / path are core.protocols' Scorer, Closable, Tokenized, LocalModel
    found = []
    for _, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in ("score", "close", "tokenizer", "path")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_the_abilities_match_the_backends_that_have_them(embedded):
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.core.protocols import Closable, LocalModel, ModelBackend, Scorer, Tokenized

    scripted = ScriptedBackend(["ok"])
    assert isinstance(scripted, ModelBackend) and not isinstance(scripted, Scorer | Closable | LocalModel)
    assert all(isinstance(embedded, p) for p in (ModelBackend, Scorer, Closable, Tokenized, LocalModel))
    assert (embedded.path / "config.json").is_file()
    from agentrt.backends import can_score

    assert can_score("hf:embedded") and not can_score("openai:http://127.0.0.1:9/v1#m")
