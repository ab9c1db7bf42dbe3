"""The OpenAI-compatible server, as a real subprocess on a free port, driven by the real `openai` client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from _servers import running_server

ROOT = Path(__file__).resolve().parents[2]
AGENTRT = str(Path(sys.executable).parent / "agentrt")

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("serve-home")
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    with running_server([AGENTRT, "serve", "--max-body", "20000"], home, env, poll_s=0.5) as base:
        yield base, home


def _records(home: Path) -> dict[str, dict]:
    path = home / "trajectories" / "trajectories.jsonl"
    return {r["run_id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_models_and_health(server):
    base, _ = server
    from openai import OpenAI

    client = OpenAI(base_url=f"{base}/v1", api_key="unused")
    # by default: agentrt, and the policy's own name (vLLM's default served name)
    assert [m.id for m in client.models.list().data] == ["agentrt", "SmolLM2-135M-Instruct", "all-MiniLM-L6-v2"]
    assert httpx.get(f"{base}/healthz").json()["status"] == "ok"


def test_chat_completion_with_openai_client(server):
    base, home = server
    from openai import OpenAI

    client = OpenAI(base_url=f"{base}/v1", api_key="unused")
    resp = client.chat.completions.create(
        model="agentrt", messages=[{"role": "user", "content": "What is the capital of France?"}],
        extra_body={"budget": 300, "route": "direct"})
    assert resp.choices[0].message.content.strip()
    extra = resp.model_extra["agentrt"]
    assert extra["route"] == "direct"
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens <= 300
    record = _records(home)[extra["trajectory_id"]]
    assert record["answer"] == resp.choices[0].message.content
    assert resp.id == f"chatcmpl-{extra['trajectory_id']}"


def test_streaming_sse(server):
    base, home = server
    from openai import OpenAI

    client = OpenAI(base_url=f"{base}/v1", api_key="unused")
    chunks = list(client.chat.completions.create(
        model="agentrt", stream=True, stream_options={"include_usage": True, "include_agentrt_events": True},
        messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "Name a color."}], extra_body={"budget": 400, "route": "direct"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    events = [c.model_extra["agentrt_event"]["type"] for c in chunks if c.model_extra.get("agentrt_event")]
    assert events[0] == "run_started" and "step_started" in events and "budget" in events
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish and finish[-1].model_extra["agentrt"]["route"] == "direct"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens <= 400
    record = _records(home)[finish[-1].model_extra["agentrt"]["trajectory_id"]]
    # the prior turn went in as messages before the question, not folded into it
    assert record["question"] == "Name a color."
    call = [st for st in record["steps"] if st["kind"] == "model_call"][-1]
    assert [m["content"] for m in call["messages"][-3:]] == ["Hi", "Hello!", "Name a color."]


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "bogus": 1}).encode(), 400, "bogus"),
    (json.dumps({"messages": []}).encode(), 400, "messages"),
    (json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}).encode(), 400, "role 'user'"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "route": "nope"}).encode(), 400, "unknown route"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "budget": 3}).encode(), 400, "budget"),
    (json.dumps({"messages": [{"role": "user", "content": "x" * 30000}]}).encode(), 413, "limit"),
])
def test_bad_input_is_4xx_with_a_message(server, body, status, words):
    base, _ = server
    r = httpx.post(f"{base}/v1/chat/completions", content=body, headers={"content-type": "application/json"},
                   timeout=120)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


def test_unknown_path_is_404_json(server):
    base, _ = server
    r = httpx.get(f"{base}/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["message"]


def test_32_concurrent_openai_clients(server):
    base, home = server
    from openai import OpenAI

    def ask(i: int) -> str:
        client = OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=600, max_retries=0)
        resp = client.chat.completions.create(
            model="agentrt", messages=[{"role": "user", "content": f"Say the number {i}."}],
            max_tokens=16, extra_body={"budget": 120, "route": "direct"})
        return resp.model_extra["agentrt"]["trajectory_id"]

    with ThreadPoolExecutor(32) as pool:
        ids = list(pool.map(ask, range(32)))
    assert len(set(ids)) == 32
    records = _records(home)
    assert all(records[i]["status"] in ("ok", "truncated") for i in ids)


def test_openai_client_example(server):
    base, _ = server
    script = ROOT / "examples" / "openai_client.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "AGENTRT_URL": f"{base}/v1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "trajectory_id" in out.stdout and "[run_started]" in out.stdout


def test_conversation_and_samples_reach_the_run_as_messages(server):
    base, home = server
    from openai import OpenAI

    client = OpenAI(base_url=f"{base}/v1", api_key="unused")
    resp = client.chat.completions.create(
        model="agentrt", messages=[{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "My name is Ada."},
                                   {"role": "assistant", "content": "Nice to meet you."},
                                   {"role": "user", "content": "What is 2 + 2?"}],
        extra_body={"budget": 900, "route": "reason", "samples": 3})
    record = _records(home)[resp.model_extra["agentrt"]["trajectory_id"]]
    assert record["question"] == "What is 2 + 2?"  # the history is not folded into the question
    assert record["metadata"]["system"] == "Be brief."
    assert [m["content"] for m in record["metadata"]["history"]] == ["My name is Ada.", "Nice to meet you."]
    [sample] = [s for s in record["steps"] if s["kind"] == "model_call"]
    assert sample["params"]["n"] == 3 and sample["messages"][0]["content"].startswith("Be brief.")
    assert [s["method"] for s in record["steps"] if s["kind"] == "sample_selection"] == ["majority"]
