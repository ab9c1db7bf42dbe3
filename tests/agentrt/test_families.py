"""Every model-specific part on both embedded families (issue 58): SmolLM2-135M-Instruct (``hf:embedded``) and
Qwen2.5-Coder-0.5B-Instruct (``hf:embedded:qwen2.5-coder-0.5b``): chat template and stop tokens, thinking tags,
stated confidence (grammar, scored, tail), the tool loop, ``--samples``, structured output, token exports and
their continuity check, an environment episode, the server's /tokenize and /detokenize, and one GRPO step that
saves a policy that loads. Short prompts, greedy, few tokens: Qwen is ~4x slower than SmolLM2 on this CPU.
The heavier checks (RLCR beside GRPO, the search environment's rollouts, vLLM) are in evals/bench/families_bench.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pyarrow.parquet as pq
import pytest

from _servers import running_server
from agentrt import Agent
from agentrt.core.answer import answer_span
from agentrt.core.confidence import OPEN_TAG
from agentrt.core.types import GenParams, Message

pytestmark = pytest.mark.slow
QWEN_SPEC = "hf:embedded:qwen2.5-coder-0.5b"
FAMILIES = ["smollm2", "qwen"]
# What each family's own chat template writes that the other's does not (its default system line).
SYSTEM_LINE = {"smollm2": "You are a helpful AI assistant named SmolLM", "qwen": "You are Qwen, created by Alibaba Cloud"}
CONTROL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


@pytest.fixture(scope="module")
def qwen(qwen_model_path):
    """The second embedded model's backend (the lean runner), loaded for this module and freed after it: ~3 GB
    a test process need not keep while the rest of the suite runs beside it on a 24 GB machine."""
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings

    backend = load_backend(QWEN_SPEC, Settings(), cache=False)
    yield backend
    backend.close()


@pytest.fixture(params=FAMILIES)
def family(request):
    """(name, backend) of each family: SmolLM2 is the shared ``embedded`` fixture."""
    return request.param, request.getfixturevalue("embedded" if request.param == "smollm2" else "qwen")


def test_the_chat_template_is_the_familys_own_and_generation_stops_on_its_end_token(family):
    name, backend = family
    prompt = backend.render([Message("user", "What is the capital of France?")])
    assert SYSTEM_LINE[name] in prompt and prompt.endswith("<|im_start|>assistant\n")
    other = SYSTEM_LINE["qwen" if name == "smollm2" else "smollm2"]
    assert other not in prompt
    end = backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end in backend.eos_ids and backend.encode([Message("user", "Hi")]).count(end) >= 1
    # <|endoftext|> ends generation too, where the folder's config names <|im_end|> alone (the converted GGUF's)
    assert backend.tokenizer.convert_tokens_to_ids("<|endoftext|>") in backend.eos_ids
    done = backend.chat_sync([Message("user", "What is the capital of France?")], GenParams(max_tokens=24))
    choice = done.choices[0]
    assert "Paris" in choice.text and choice.finish_reason == "stop"
    assert choice.token_ids[-1] in backend.eos_ids  # stopped on its own end token, not on the cap
    assert not any(c in choice.text for c in CONTROL), choice.text


def test_a_thought_is_parsed_and_closed(family, agentrt_home):
    """Neither family thinks natively (no enable_thinking): the reason route prompts a thought and the
    answer that comes back carries no think tag."""
    _, backend = family
    assert backend.supports_thinking is False
    result = Agent(policy=backend).run("What is 12 + 30?", route="reason", thinking_cap=24, budget=600, tools=[])
    assert result.status in ("ok", "truncated", "no_answer")
    assert "<think>" not in result.answer and "</think>" not in result.answer
    thought_steps = [s for s in result.record.steps if s.get("name") == "think"]
    assert thought_steps, [s.get("name") for s in result.record.steps]
    assert not any(c in result.answer for c in CONTROL)


@pytest.mark.parametrize("mode", ["grammar", "scored", "tail"])
def test_stated_confidence_is_a_number_or_an_honest_status(family, mode, agentrt_home):
    _, backend = family
    result = Agent(policy=backend).run("What is the capital of France?", route="direct", confidence=mode,
                                       max_tokens=16, budget=700)
    assert OPEN_TAG not in result.answer and "</confidence>" not in result.answer
    if mode in ("grammar", "scored"):  # asked after the answer: always a number
        assert "Paris" in result.answer and 0.0 <= result.confidence <= 1.0
        assert result.confidence_status == "ok"
    else:  # the policy writes the tag itself, or not; either way the run says which (Qwen states only the tag)
        assert result.confidence_status in ("ok", "missing", "malformed")
        assert result.confidence is None or 0.0 <= result.confidence <= 1.0
        assert result.status in ("ok", "no_answer")


def test_the_tool_loop_parses_a_calculator_call(family, agentrt_home):
    _, backend = family
    result = Agent(policy=backend).run("What is 1234 * 5678? Use the calculator.", route="reason", budget=1500)
    calls = [s for s in result.record.steps if s.get("kind") == "tool_call"]
    assert calls and calls[0]["name"] == "calculator" and "7006652" in calls[0]["result"]
    assert "7006652" in result.answer.replace(",", "")


def test_samples_vote_over_stated_answers_never_a_line_cut_at_the_cap(family, agentrt_home):
    """``--samples 2`` with a thought cap too small to finish: a sample cut at its cap has no answer (Qwen
    writes numbered steps; before the fix their "1. Identify" won the vote as the answer)."""
    _, backend = family
    result = Agent(policy=backend).run("What is 12 + 30?", route="reason", samples=2, thinking_cap=16,
                                       max_tokens=24, budget=900, seed=0, tools=[])
    [sample] = [s for s in result.record.steps if s.get("name") == "sample"]
    [selection] = [s for s in result.record.steps if s.get("kind") == "sample_selection"]
    assert len(sample["completions"]) == 2 and len(selection["answers"]) == 2
    for text, finish, span in zip(sample["completions"], sample["finish_reasons"], selection["answers"]):
        if finish == "length" and not answer_span(text)[1] and "</think>" not in text:  # cut, no answer marker
            assert span == "", (text, span)
    if result.status == "ok":
        assert result.answer in selection["answers"]
    else:
        assert result.status == "no_answer" and result.answer == ""


def test_structured_output_is_valid_json(family, agentrt_home):
    _, backend = family
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    result = Agent(policy=backend).run("Give the capital of France.", route="direct", json_schema=schema,
                                       max_tokens=24)
    assert set(json.loads(result.answer)) == {"city"}


def test_exported_token_ids_decode_to_the_recorded_text_and_continuity_uses_the_runs_tokenizer(
        family, agentrt_home, tmp_path, capsys):
    """verl-tokens rows decode, with the family's tokenizer, to the recorded prompt and answer; the mask covers
    the response; ``export --check-continuity`` re-tokenizes each run with its own model's tokenizer (before,
    always SmolLM2's: a Qwen run never matched)."""
    from agentrt.app.cli import main

    name, backend = family
    result = Agent(policy=backend).run("What is the capital of France?", route="direct", max_tokens=16)
    call = result.record.model_calls()[0]
    out = tmp_path / "tokens.parquet"
    assert main(["export", "--format", "verl-tokens", "--out", str(out), "--check-continuity"]) == 0
    captured = capsys.readouterr()
    assert "token continuity: 1/1 runs match" in captured.out, captured.err
    [row] = pq.read_table(out).to_pylist()
    tok = backend.tokenizer
    assert tok.decode(row["prompt_ids"]) == backend.render([Message(**m) for m in call.messages])
    assert tok.decode(row["response_ids"], skip_special_tokens=True).strip() == result.answer
    assert len(row["response_mask"]) == len(row["response_ids"]) == len(row["response_logprobs"])
    assert set(row["response_mask"]) == {1}  # every token of a greedy answer was sampled by the model
    assert max(row["prompt_ids"]) >= (151643 if name == "qwen" else 0)  # Qwen's specials: its own vocabulary


def test_a_strategy_environment_episode_runs_the_route(family, agentrt_home):
    from agentrt.envs.strategy import StrategyEpisode

    _, backend = family
    episode = StrategyEpisode(Agent(policy=backend), budget=256)
    episode.reset("What is the capital of France?", ["Paris"], "qa", item_id="f1")
    episode.choose("direct")
    assert episode.done and 0 < episode.tokens <= 256
    assert episode.reward == pytest.approx(episode.score - 0.3 * episode.tokens / 256, abs=1e-6)


@pytest.mark.parametrize("goes_on", ["passages", "model", "off"])
def test_a_read_answer_goes_on_past_an_initial(family, goes_on, monkeypatch):
    """The read route's cued answer stops at its sentence's end (". "): an initial would cut "Arthur C. Clarke" to
    "Arthur C". Cut there, it goes on from the passage that holds the name (no second call); where none does, the
    model is asked again with what it wrote; with both off the cut shows."""
    import asyncio

    from agentrt.core.budget import Budget
    from agentrt.core.config import Settings
    from agentrt.routes import read
    from agentrt.routes.context import RunContext

    if goes_on != "passages":
        monkeypatch.setattr(read, "from_passages", lambda *a, **k: None)
    monkeypatch.setattr(read, "MAX_CONTINUATIONS", 2 if goes_on == "model" else 0)
    _, backend = family
    passages = [{"id": "p1", "title": "2001: A Space Odyssey (novel)", "score": 1.0,
                 "text": "2001: A Space Odyssey is a 1968 science fiction novel written by the British author "
                         "Arthur C. Clarke."}]
    question = "Who wrote the novel 2001: A Space Odyssey?"
    ctx = RunContext("run", question, Budget(1500), backend, Settings())
    out = asyncio.run(read.run(ctx, question, searcher=lambda q, k: passages))
    calls = [s for s in ctx.steps if s["kind"] == "model_call"]
    assert calls[0]["completions"][0].rstrip().endswith("Arthur C")  # the sentence stop did cut it
    if goes_on == "passages":
        assert out.answer == "Arthur C. Clarke" and len(calls) == 1, out.answer
    elif goes_on == "model":
        assert "Arthur C. Clarke" in out.answer and len(calls) == 2, out.answer
        assert calls[1]["messages"][-1]["content"].endswith("Arthur C.")
    else:
        assert out.answer.endswith("Arthur C") and len(calls) == 1, out.answer


def test_the_server_tokenizes_and_detokenizes_with_qwens_vocabulary(qwen_model_path, agentrt_home):
    """A real ``agentrt serve --policy hf:embedded:qwen2.5-coder-0.5b``: /tokenize and /detokenize round-trip
    in Qwen's vocabulary, an id past its tokenizer is a 400, and a chat answer carries no control token."""
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home)}
    argv = [sys.executable, "-m", "agentrt.app.cli", "serve", "--policy", QWEN_SPEC]
    with running_server(argv, agentrt_home.parent, env, poll_s=0.5) as base:
        def post(path: str, body: dict) -> httpx.Response:
            return httpx.post(f"{base}{path}", json=body, timeout=600)

        text = "Tokens: héllo, 世界! 123"
        tok = post("/tokenize", {"prompt": text, "return_token_strs": True}).json()
        assert tok["count"] == len(tok["tokens"]) == len(tok["token_strs"]) > 5
        assert post("/detokenize", {"tokens": tok["tokens"]}).json() == {"prompt": text}
        chat = post("/tokenize", {"messages": [{"role": "user", "content": "Hi there"}]}).json()
        assert 151644 in chat["tokens"]  # <|im_start|> in Qwen's vocabulary (SmolLM2's is 1)
        rendered = post("/detokenize", {"tokens": chat["tokens"]}).json()["prompt"]
        assert SYSTEM_LINE["qwen"] in rendered and rendered.endswith("<|im_start|>assistant\n")
        beyond = post("/detokenize", {"tokens": [9707, 151936]})  # past the vocabulary (the GGUF pads it to 151936)
        assert beyond.status_code == 400 and "tokens[1]" in beyond.json()["error"]["message"]
        answer = post("/v1/chat/completions", {"model": "agentrt", "max_tokens": 16, "temperature": 0,
                                               "messages": [{"role": "user", "content": "What is the capital of France?"}]})
        content = answer.json()["choices"][0]["message"]["content"]
        assert "Paris" in content and not any(c in content for c in CONTROL)


def test_one_grpo_step_on_qwen_saves_a_policy_that_loads(qwen_model_path, agentrt_home, tmp_path):
    """``train-policy --grpo --reward rlcr --train confidence --model-dir embedded:qwen2.5-coder-0.5b`` (one step,
    the top decoder layer): the Qwen layer's tensors move (biases included), and ``hf:OUT`` answers."""
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": q}], "answer": a,
                                        "verifier": v}) + "\n"
                            for q, a, v in (("What is 2 + 3?", "5", "numeric"),
                                            ("What is the capital of France?", ["Paris"], "qa"))))
    out = tmp_path / "policy"
    done = subprocess.run([sys.executable, "-m", "agentrt.app.cli", "train-policy", "--grpo", "--reward", "rlcr",
                           "--train", "confidence", "--train-layers", "1", "--confidence-temperature", "3",
                           "--model-dir", "embedded:qwen2.5-coder-0.5b", "--data", str(data), "--out", str(out),
                           "--steps", "1", "--num-generations", "2", "--batch-size", "4",
                           "--max-completion-length", "4", "--json"],
                          capture_output=True, text=True, timeout=900, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # One Qwen2 decoder layer: q/k/v/o weights, q/k/v biases, 3 MLP weights, 2 norms; and the final norm.
    assert report["steps"] == 1 and report["changed_tensors"] == 12 + 1 and report["total_tensors"] == 291
    backend = load_backend(f"hf:{out}", Settings(), cache=False)
    try:
        assert SYSTEM_LINE["qwen"] in backend.render([Message("user", "Hi")])
        answer = backend.chat_sync([Message("user", "What is the capital of France?")], GenParams(max_tokens=16))
        assert "Paris" in answer.text and answer.choices[0].finish_reason == "stop"
    finally:
        backend.close()
