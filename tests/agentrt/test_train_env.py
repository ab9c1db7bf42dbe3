"""``agentrt train-policy --grpo --env search:squad`` (issue 36): TRL's GRPOTrainer steps the search environment
through its ``environment_factory`` (``agentrt.envs.trl``) on the real embedded model and the real squad index,
the saved policy loads as ``hf:PATH`` and answers, and a checkpointed run resumes. Plus the pieces the trainer
relies on: the tool template renders plain chats as SmolLM2's own does, and a ``<tool_call>`` the policy writes
is parsed by TRL's parser and runs the environment's tool on the index.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from agentrt.backends.embedded import embedded_model_path
from agentrt.core.config import load_settings

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "And now?"}],
]


def _tokenizers():
    from transformers import AutoTokenizer

    path = embedded_model_path(load_settings().models_dir)
    return AutoTokenizer.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_tool_template_renders_plain_chats_exactly_as_smollm2_does():
    from agentrt.envs.trl import use_tool_template

    own, tooled = _tokenizers()
    use_tool_template(tooled)
    assert tooled.chat_template != own.chat_template and tooled.response_template is not None
    for chat in CHATS:
        for gen in (True, False):
            assert tooled.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen) == \
                own.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)


def _squad_env():
    from agentrt.app.commands.train_env import search_questions
    from agentrt.envs.trl import SearchTools

    ns = argparse.Namespace(holdout=0.2, env_max_steps=4, env_budget=1024, k=3)
    questions, make_episode = search_questions("squad", ns, load_settings())
    table = {q.id: q for q in questions}
    return questions, (lambda: SearchTools(table, make_episode))


@pytest.mark.slow
def test_a_tool_call_the_policy_writes_is_parsed_by_trl_and_searches_the_real_index():
    from trl.chat_template_utils import parse_response

    from agentrt.envs.trl import SYSTEM, episode_reward, use_tool_template

    _, tokenizer = _tokenizers()
    use_tool_template(tokenizer)
    questions, make_env = _squad_env()
    item = next(q for q in questions if q.question.startswith("Which name is also used to describe the Amazon"))
    env = make_env()
    chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": env.reset(id=item.id)}]
    tools = [env.search, env.open, env.answer]
    prompt = tokenizer.apply_chat_template(chat, tools=tools, add_generation_prompt=True, return_dict=False)
    assert '"name": "search"' in tokenizer.decode(prompt) and item.question in tokenizer.decode(prompt)

    written = '<tool_call>\n{"name": "search", "arguments": {"query": "Amazon rainforest English name"}}\n</tool_call><|im_end|>'
    message = parse_response(tokenizer, tokenizer(written, add_special_tokens=False).input_ids, prefix=prompt, tools=tools)
    call = message["tool_calls"][0]["function"]
    assert call == {"name": "search", "arguments": {"query": "Amazon rainforest English name"}}
    observation = getattr(env, call["name"])(**call["arguments"])  # as TRL's tool loop runs it
    assert "Amazonia" in observation and observation.startswith("[")

    # The policy then replies without a tool call: that reply is its answer, scored by the item's verifier.
    rollout = [message, {"role": "tool", "name": "search", "content": observation},
               {"role": "assistant", "content": "Amazonia"}]
    assert episode_reward([rollout], environments=[env]) == [1.0]
    assert env.episode.searched_before_answer and env.episode.record.status == "ok" and not env.answered_by_tool
    # Answering through the tool, without a search: the same verifier, and the episode says it did not search.
    direct = make_env()
    direct.reset(id=item.id)
    written = '<tool_call>\n{"name": "answer", "arguments": {"text": "Amazonia"}}\n</tool_call><|im_end|>'
    message = parse_response(tokenizer, tokenizer(written, add_special_tokens=False).input_ids, prefix=prompt, tools=tools)
    call = message["tool_calls"][0]["function"]
    observation = getattr(direct, call["name"])(**call["arguments"])
    rollout = [message, {"role": "tool", "name": "answer", "content": observation},
               {"role": "assistant", "content": "Thanks."}]
    assert episode_reward([rollout], environments=[direct]) == [1.0]
    assert direct.answered_by_tool and not direct.episode.searched_before_answer
    wrong = make_env()
    wrong.reset(id=item.id)
    assert episode_reward([[{"role": "assistant", "content": "Mount Everest"}]], environments=[wrong]) == [0.0]
    assert not wrong.episode.searched_before_answer


def _cli(*args: str, home) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "AGENTRT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "agentrt.app.cli", *args], capture_output=True, text=True, env=env,
                          timeout=3000)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 20 GRPO steps took 27 min on the shared 2-core machine under a load of 5
def test_train_policy_env_search_runs_20_steps_saves_a_loadable_policy_and_resumes(agentrt_home, tmp_path):
    out = tmp_path / "policy"
    small = ["--num-generations", "2", "--batch-size", "2", "--max-completion-length", "24", "--env-max-steps", "2",
             "--train-layers", "2"]
    done = _cli("train-policy", "--grpo", "--env", "search:squad", "--steps", "20", "--out", str(out), *small,
                "--checkpoint-every", "10", "--watch", "2", "--watch-every", "10", "--json", home=agentrt_home)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["steps"] == 20 and len(report["rewards"]) == 20
    # The verifier's reward: squad's unanswerable questions cost a wrong answer (below 0).
    assert all(-1.0 <= r <= 1.0 for r in report["rewards"])
    assert "training questions" in done.stderr and (out / "checkpoint-20").is_dir()
    # The watch scored held-out episodes at the start, at step 10 and at step 20.
    watch = json.loads((out / "watch.json").read_text())
    assert [e["step"] for e in watch["entries"]] == [0, 10, 20]
    assert all(e["n"] == 2 and -1.0 <= e["value"] <= 1.0 and e["kl"] >= 0.0 for e in watch["entries"])
    # Every training episode is a trajectory in our schema, from the search environment.
    records = _env_records(agentrt_home)
    assert len(records) >= 20 * 2 and all(r["task"]["data_source"] == "agentrt-env:search" for r in records)

    answered = _cli("run", "--json", "--policy", f"hf:{out}", "What is the capital of France?", home=agentrt_home)
    assert answered.returncode == 0, answered.stderr[-3000:]
    result = json.loads(answered.stdout)
    assert result["status"] == "ok" and result["answer"].strip()

    trained_episodes = len(_env_records(agentrt_home))
    resumed = _cli("train-policy", "--grpo", "--env", "search:squad", "--steps", "21", "--out", str(out), *small,
                   "--checkpoint-every", "10", "--json", home=agentrt_home)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = json.loads(resumed.stdout.strip().splitlines()[-1])
    # Resumed from checkpoint-20: one more step (its 2 episodes), not 21 steps from scratch.
    assert again["steps"] == 21
    assert len(_env_records(agentrt_home)) - trained_episodes == 2


def _env_records(home) -> list[dict]:
    lines = (home / "trajectories" / "trajectories.jsonl").read_text().splitlines()
    return [r for r in (json.loads(line) for line in lines if line.strip()) if r["route"] == "env:search"]


@pytest.mark.slow
def test_warm_start_imitates_searches_that_found_the_answer_on_training_questions_only(tmp_path):
    """``--warm-start``'s two halves: the environment builds demonstrations from training questions (a real
    search whose result shows the answer), the loss covers exactly the calls TRL's parser reads back, and a few
    epochs on them lower that loss and save a policy that loads with its tool template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import parse_response

    from agentrt.envs.trl import demonstrations, split_questions, use_tool_template
    from agentrt.train.sft import assistant_tokens, train_sft

    questions, make_env = _squad_env()
    train, held = split_questions(questions, 0.2)
    demos = demonstrations(train[:16], make_env)
    assert 3 <= len(demos) < 16  # some searches miss the answer: those questions give no demonstration
    _, tokenizer = _tokenizers()
    use_tool_template(tokenizer)
    held_questions = {q.question for q in held}
    for messages, tools in demos:
        query = messages[2]["tool_calls"][0]["function"]["arguments"]["query"]
        answer = messages[4]["tool_calls"][0]["function"]["arguments"]["text"]
        assert query in {q.question for q in train[:16]} and query not in held_questions
        assert messages[3]["role"] == "tool" and answer and answer.lower() in messages[3]["content"].lower()
        ids, labels = assistant_tokens(tokenizer, messages, tools)
        spans, start = [], None
        for i, label in enumerate(labels + [-100]):
            if label != -100 and start is None:
                start = i
            elif label == -100 and start is not None:
                spans.append((start, i))
                start = None
        # Learned: the search call, the answer call and the closing reply; the question and the results are context.
        assert len(spans) == 3
        parsed = [parse_response(tokenizer, ids[a:b], prefix=ids[:a], tools=tools) for a, b in spans]
        assert [m["tool_calls"][0]["function"] for m in parsed[:2]] == [
            {"name": "search", "arguments": {"query": query}}, {"name": "answer", "arguments": {"text": answer}}]
        assert not parsed[2].get("tool_calls") and parsed[2]["content"].strip() == answer

    out = tmp_path / "warm"
    report = train_sft(demos[:2], out, epochs=3, learning_rate=1e-4, batch_size=2, train_layers=2,
                       prepare_tokenizer=use_tool_template, progress=False)
    assert report.examples == 2 and len(report.losses) == 3 and report.losses[-1] < report.losses[0]
    assert 0 < report.target_tokens < report.tokens
    saved = AutoTokenizer.from_pretrained(out)
    use_tool_template(saved)
    assert saved.apply_chat_template(demos[0][0], tools=demos[0][1], return_dict=False) == \
        tokenizer.apply_chat_template(demos[0][0], tools=demos[0][1], return_dict=False)
    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers > 0


def test_warm_start_is_refused_outside_search_environments_with_one_line(agentrt_home):
    done = _cli("train-policy", "--grpo", "--env", "strategy", "--warm-start", "1", home=agentrt_home)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--warm-start" in done.stderr and "search:CORPUS" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_rollouts_outside_the_trainer_list_the_tools_as_trls_trainer_does(tmp_path):
    """The bench, the watch and the warm start render the tools in TRL's order: a policy imitating or trained on
    one listing reads another as a different prompt (a warm start on search-first listings answered without
    searching when TRL listed answer first)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    from agentrt.app.commands.train_env import search_questions
    from agentrt.envs.trl import environment_run, rows_for, tools_of
    from agentrt.train.grpo import cpu_grpo_config

    ns = argparse.Namespace(holdout=0.2, env_max_steps=4, env_budget=1024, k=3)
    questions, make_episode = search_questions("squad", ns, load_settings())
    run = environment_run(questions[:2], make_episode)
    _, tokenizer = _tokenizers()
    run.prepare_tokenizer(tokenizer)
    rows = rows_for(questions[:2])
    config = cpu_grpo_config(tmp_path, steps=1, batch_size=2, num_generations=2, max_completion_length=16,
                             learning_rate=1e-5, save_steps=0, seed=0, temperature=1.0, gpu=False)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(embedded_model_path(load_settings().models_dir)),
                          reward_funcs=[run.reward], args=config, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({k: [r[k] for r in rows] for k in rows[0]}),
                          environment_factory=run.factory)
    shown = [tool.__name__ for tool in trainer.tools]
    assert shown == [tool.__name__ for tool in tools_of(run.factory())] and sorted(shown) == ["answer", "open", "search"]
