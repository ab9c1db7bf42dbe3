"""Fast, early errors: every argument of a model-loading command is checked before a model loads.

The subprocess tests run the real CLI with Python's import profiler on (PYTHONPROFILEIMPORTTIME): the
proof that no model was loaded is that neither torch nor transformers was ever imported (not a timing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.app.cli import main
from agentrt.app.commands.run import check_length, preflight
from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError, InputError

AGENTRT = [sys.executable, "-m", "agentrt.app.cli"]
HEAVY = ("torch", "transformers", "vllm")


def cli_without_model(*args: str, home: Path, **env: str) -> tuple[int, list[str]]:
    """Run the CLI; return its exit code and its stderr lines other than the import profile, after
    asserting that no heavy module (a model load's first step) was imported."""
    full_env = {**os.environ, "AGENTRT_HOME": str(home), "PYTHONPROFILEIMPORTTIME": "1", **env}
    out = subprocess.run([*AGENTRT, *args], capture_output=True, text=True, env=full_env, timeout=120)
    imported, lines = set(), []
    for line in out.stderr.splitlines():
        if line.startswith("import time:"):
            imported.add(line.rsplit("|", 1)[-1].strip())
        elif line.strip():
            lines.append(line)
    assert not imported & set(HEAVY), f"a model started loading: {sorted(imported & set(HEAVY))}"
    assert "agentrt.backends.hf" not in imported and "Traceback" not in out.stderr
    return out.returncode, lines


def tiny_model_folder(path: Path, context: int = 64) -> Path:
    """A Hugging Face folder with a config and a whitespace word-level tokenizer, and no weights: if a
    command got as far as loading it, it would fail differently."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "word": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path.mkdir(parents=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": context}))
    return path


@pytest.mark.parametrize("args, message", [
    (["--router", "bogus"], "unknown router 'bogus'"),
    (["--router", "learned:/no/such/router.json"], "router file /no/such/router.json does not exist"),
    (["--router", "self", "--policy", "openai:http://127.0.0.1:9/v1#m"], "the self router scores with the policy"),
    (["--budget", "0"], "budget must be a positive number of tokens"),
    (["--thinking-cap", "-1"], "thinking_cap must be an integer >= 0"),
    (["--route", "plan"], "no collection 'default' in memory store"),
])
def test_bad_arguments_fail_before_any_model_loads(agentrt_home, args, message):
    code, lines = cli_without_model("run", *args, "What is the capital of France?", home=agentrt_home)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("agentrt: error: ") and message in lines[0], lines
    assert not (agentrt_home / "trajectories" / "trajectories.jsonl").exists()


def test_bad_settings_from_the_environment_fail_early(agentrt_home):
    code, lines = cli_without_model("run", "hi", home=agentrt_home, AGENTRT_CORPUS="x")
    assert code == 2 and lines == ["agentrt: error: bad corpus name 'x': use 3-512 letters, digits, '.', '_' or "
                                   "'-', starting and ending with a letter or digit"]
    code, lines = cli_without_model("run", "hi", home=agentrt_home, AGENTRT_BUDGET="lots")
    assert code == 2 and len(lines) == 1 and "AGENTRT_BUDGET='lots'" in lines[0]


def test_a_question_longer_than_the_context_is_counted_without_the_model(agentrt_home, tmp_path):
    folder = tiny_model_folder(tmp_path / "tiny", context=64)
    question = " ".join(["word"] * 100) + "?"
    code, lines = cli_without_model("run", "--policy", f"hf:{folder}", "--budget", "4096", question, home=agentrt_home)
    assert code == 2 and len(lines) == 1, lines
    assert "the question is 101 tokens, longer than the model's context (64)" in lines[0]
    code, lines = cli_without_model("run", "--policy", f"hf:{folder}", "--budget", "40", " ".join(["word"] * 50),
                                    home=agentrt_home)
    assert code == 2 and "budget 40 is smaller than the prompt (the question alone is 50 tokens" in lines[0]


@pytest.mark.slow
def test_an_over_long_question_on_the_embedded_model(embedded, agentrt_home):
    folder = Settings().models_dir / "SmolLM2-135M-Instruct-fp32"  # converted by the `embedded` fixture
    assert (folder / "tokenizer.json").is_file()
    code, lines = cli_without_model("run", "--route", "direct", "--budget", "100000", "word " * 9000,
                                    home=agentrt_home)
    assert code == 2 and len(lines) == 1 and "longer than the model's context (8192)" in lines[0], lines


def test_check_length_counts_only_when_it_could_matter(tmp_path, monkeypatch):
    folder = tiny_model_folder(tmp_path / "tiny", context=64)
    settings = Settings(policy=f"hf:{folder}")
    check_length(settings, "word " * 10, 1000)  # fewer bytes than both limits: not even counted
    (folder / "tokenizer.json").write_text("not a tokenizer")
    check_length(settings, "word " * 100, 1000)  # an unreadable tokenizer: the exact check after loading decides
    check_length(Settings(policy="openai:http://127.0.0.1:9/v1#m"), "word " * 100_000, 10)  # the server knows
    folder = tiny_model_folder(tmp_path / "tiny2", context=64)
    with pytest.raises(InputError, match="longer than the model's context"):
        check_length(Settings(policy=f"vllm:{folder}?max_model_len=64"), "word " * 70, 1000)


def test_preflight_passes_good_arguments_and_names_the_bad_ones(tmp_path):
    settings = Settings()
    preflight(settings, question="What is the capital of France?", budget=300, route="direct")
    preflight(settings, question="What is 2 + 2?", routers=["rules", "cascade", "fixed:reason", "self"])
    preflight(settings)  # chat: no question
    with pytest.raises(ConfigError, match="self router"):
        preflight(Settings(policy="scripted:x"), routers=["self"])
    with pytest.raises(InputError, match="unknown route 'teleport'"):
        preflight(settings, route="teleport")
    with pytest.raises(InputError, match="question is empty"):
        preflight(settings, question="   ")
    with pytest.raises(ConfigError, match="bad backend spec"):
        preflight(Settings(planner="gpt4"))


def test_chat_eval_and_rollout_check_before_loading(capsys, tmp_path):
    assert main(["chat", "--budget", "0"]) == 2
    assert "budget must be a positive number of tokens" in capsys.readouterr().err
    assert main(["chat", "--route", "teleport"]) == 2
    assert "unknown route 'teleport'" in capsys.readouterr().err
    spec = "openai:http://127.0.0.1:9/v1#m"  # nothing listens there: reaching it would be a different error
    assert main(["eval", "--suite", "gsm8k", "--router", "self", "--policy", spec, "--out", str(tmp_path / "e")]) == 2
    assert "self router" in capsys.readouterr().err
    assert main(["rollout", "--suite", "gsm8k", "--router", "self", "--policy", spec, "--out", str(tmp_path / "r")]) == 2
    assert "self router" in capsys.readouterr().err
    assert not (tmp_path / "r" / "trajectories").exists()
