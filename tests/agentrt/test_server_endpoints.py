"""`agentrt serve`'s endpoints beside chat (#34): /v1/completions, /v1/embeddings, /tokenize, /detokenize, /health,
/version and /metrics, driven by real clients (the `openai` SDK, LiteLLM, Prometheus' own text parser) against a
real server on 127.0.0.1 with the embedded model and an API key."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from _servers import running_server

AGENTRT = str(Path(sys.executable).parent / "agentrt")
KEY = "r2-test-key"
EMBED = "all-MiniLM-L6-v2"
PROMPT = "The capital of France is"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    home = tmp_path_factory.mktemp("endpoints-home")
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    with running_server([AGENTRT, "serve", "--api-key", KEY], home, env, poll_s=0.5) as base:
        yield base, home


@pytest.fixture(scope="module")
def server(served):
    return served[0]


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=600)


def _post(server: str, path: str, body: dict, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server}{path}", json=body, headers=headers, timeout=600)


def _metrics(server: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, read with Prometheus' own parser: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(f"{server}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# -- /v1/completions -------------------------------------------------------------------------------------------

def test_completion_continues_the_raw_prompt_greedily(server, client):
    first = client.completions.create(model="agentrt", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=1)
    again = client.completions.create(model="agentrt", prompt=[PROMPT], max_tokens=8, temperature=0)
    choice = first.choices[0]
    assert first.object == "text_completion" and first.model == "agentrt"
    assert choice.text.strip() and choice.text == again.choices[0].text  # greedy: the same text twice
    assert "Paris" in choice.text  # the model continues the sentence (no chat template wrapped around it)
    assert choice.finish_reason in ("stop", "length")
    # usage: the prompt as /tokenize counts it (no template), and one logprob per generated token
    count = _post(server, "/tokenize", {"prompt": PROMPT}).json()["count"]
    assert first.usage.prompt_tokens == count
    assert first.usage.completion_tokens == len(choice.logprobs.tokens) <= 8
    assert "".join(choice.logprobs.tokens) == choice.text
    assert all(lp <= 0 for lp in choice.logprobs.token_logprobs)
    assert [list(t) for t in choice.logprobs.top_logprobs] == [[t] for t in choice.logprobs.tokens]


def test_a_completion_is_a_trajectory_that_learning_and_chat_exports_leave_out(served, client, tmp_path):
    from agentrt.core.errors import InputError
    from agentrt.train.router import load_examples
    from agentrt.trajectory import TrajectoryWriter, read_trajectories
    from agentrt.trajectory.export import export

    server, home = served
    done = client.completions.create(model="agentrt", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=1)
    run_id = done.model_extra["agentrt"]["trajectory_id"]
    assert done.id == f"cmpl-{run_id}"
    # a client's verdict on a completion is refused (no route was decided: nothing for the router to learn, and the
    # server takes verdicts only on the chat / Responses runs it served); the operator may still judge it on the host
    verdict = httpx.post(f"{server}/v1/feedback", json={"id": done.id, "correct": True}, timeout=60,
                         headers={"Authorization": f"Bearer {KEY}"})
    assert verdict.status_code == 404 and "/v1/completions" in verdict.text, verdict.text
    from agentrt.trajectory.feedback import record_feedback

    record_feedback(home / "trajectories", done.id, correct=True, source="cli")
    [record] = [r for r in read_trajectories(home / "trajectories", strict=True).records if r.run_id == run_id]
    [call] = record.model_calls()
    choice = done.choices[0]
    assert record.metadata["endpoint"] == "completions" and record.status == "ok" and record.reward == 1.0
    assert record.question == PROMPT == call.prompt and record.answer == choice.text == call.completions[0]
    assert record.usage == call.usage == done.usage.model_dump(exclude_none=True)
    count = _post(server, "/tokenize", {"prompt": PROMPT}).json()
    assert call.prompt_token_ids == count["tokens"] and len(call.completion_token_ids[0]) == done.usage.completion_tokens
    shown = choice.logprobs.token_logprobs  # the response leaves out a special token's (an end of text)
    assert call.completion_logprobs[0][:len(shown)] == pytest.approx(shown, abs=1e-4)
    assert call.params["max_tokens"] == 6 and call.params["top_k"] == 0
    # no route was decided: the router does not learn from it, even rewarded; chat exports leave it out
    alone = tmp_path / "alone"
    TrajectoryWriter(alone).append(record)
    with pytest.raises(InputError, match="no trajectories with rewards"):
        load_examples([alone])
    with pytest.raises(InputError, match="completions call"):
        export([record], "openai", tmp_path / "chat.jsonl")
    report = export([record], "triplets", tmp_path / "tokens.jsonl")  # its token ids are learnable as they are
    assert report.rows == 1


def test_completion_stream_sends_the_same_text_piece_by_piece(client):
    whole = client.completions.create(model="agentrt", prompt="Once upon a time", max_tokens=12, temperature=0)
    chunks = list(client.completions.create(model="agentrt", prompt="Once upon a time", max_tokens=12,
                                            temperature=0, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert len(pieces) >= 5, pieces  # token by token, not the whole text at the end
    assert "".join(pieces) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completion_seed_and_n(client):
    kw = {"model": "agentrt", "prompt": "My favourite fruit is", "max_tokens": 6, "temperature": 1.0, "seed": 7}
    a, b = client.completions.create(n=3, **kw), client.completions.create(n=3, **kw)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]  # same seed, same samples
    assert len({c.text for c in a.choices}) > 1  # n samples, not one copied


@pytest.mark.parametrize("extra, param, words", [
    ({"echo": True}, "echo", "echo is not supported"),
    ({"suffix": "!"}, "suffix", "suffix"),
    ({"prompt": ["a", "b"]}, "prompt", "one prompt per request"),
    ({"max_tokens": 10_000}, "max_tokens", "context of 8192"),
    ({"stream": True, "logprobs": 1}, "logprobs", "stream"),
    ({"model": "gpt-3.5-turbo-instruct"}, "model", "does not exist"),
])
def test_completion_refusals_say_what_to_change(server, extra, param, words):
    resp = _post(server, "/v1/completions", {"model": "agentrt", "prompt": PROMPT, **extra})
    assert resp.status_code in (400, 404), resp.text
    err = resp.json()["error"]
    assert err["param"] == param and words in err["message"], err


# -- /v1/embeddings --------------------------------------------------------------------------------------------

def test_embeddings_float_and_base64_are_the_memory_embedders_vectors(client):
    from memory.embeddings import get_embedder

    texts = ["A cat sat on the mat.", "A kitten was sitting on the rug.", "Quarterly tax filing deadlines"]
    floats = client.embeddings.create(model=EMBED, input=texts, encoding_format="float")
    raw = client.embeddings.create(model=EMBED, input=texts, encoding_format="base64")
    decoded = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    vectors = np.array([d.embedding for d in floats.data], dtype=np.float32)
    assert vectors.shape == (3, 384) and [d.index for d in floats.data] == [0, 1, 2]
    assert np.array_equal(decoded, vectors)  # base64 carries the same float32 bits
    assert np.allclose(vectors, get_embedder().embed_array(texts), atol=1e-5)  # the memory store's embedder
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2  # the paraphrase is nearer than the tax text
    assert floats.model == EMBED and floats.usage.prompt_tokens == floats.usage.total_tokens >= 3 * 5
    one = client.embeddings.create(model=EMBED, input=texts[0])  # the SDK's default: base64, decoded by it
    assert np.allclose(one.data[0].embedding, vectors[0], atol=1e-6)


def test_embedding_model_is_listed_and_its_refusals(server, client):
    assert [m.id for m in client.models.list().data][-1] == EMBED
    for body, param in (({"input": "hi", "dimensions": 64}, "dimensions"), ({"input": ["ok", " "]}, "input"),
                        ({"input": "hi", "model": "text-embedding-3-small"}, "model")):
        resp = _post(server, "/v1/embeddings", {"model": EMBED, **body})
        assert resp.status_code in (400, 404) and resp.json()["error"]["param"] == param, resp.text


# -- LiteLLM ---------------------------------------------------------------------------------------------------

def test_litellm_text_completion_and_embedding(server, client, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: the bundled price map, no fetch
    import litellm

    expected = client.completions.create(model="agentrt", prompt=PROMPT, max_tokens=8, temperature=0)
    resp = litellm.text_completion(model="openai/agentrt", prompt=PROMPT, max_tokens=8, temperature=0,
                                   api_base=f"{server}/v1", api_key=KEY)
    assert resp.choices[0].text == expected.choices[0].text
    assert resp.usage.prompt_tokens == expected.usage.prompt_tokens
    emb = litellm.embedding(model=f"openai/{EMBED}", input=["hello world", "good morning"],
                            api_base=f"{server}/v1", api_key=KEY)
    direct = client.embeddings.create(model=EMBED, input=["hello world", "good morning"], encoding_format="float")
    assert len(emb.data) == 2
    assert np.allclose([d["embedding"] for d in emb.data], [d.embedding for d in direct.data], atol=1e-6)


# -- /tokenize, /detokenize, /health, /version -----------------------------------------------------------------

def test_tokenize_detokenize_round_trip(server):
    text = "Tokens: héllo, 世界! 123"
    tok = _post(server, "/tokenize", {"model": "agentrt", "prompt": text, "return_token_strs": True}).json()
    assert tok["count"] == len(tok["tokens"]) == len(tok["token_strs"]) > 5 and tok["max_model_len"] == 8192
    assert _post(server, "/detokenize", {"tokens": tok["tokens"]}).json() == {"prompt": text}
    chat = _post(server, "/tokenize", {"messages": [{"role": "user", "content": "Hi there"}]}).json()
    rendered = _post(server, "/detokenize", {"tokens": chat["tokens"]}).json()["prompt"]
    assert "<|im_start|>user\nHi there<|im_end|>" in rendered and rendered.endswith("<|im_start|>assistant\n")
    bad = _post(server, "/detokenize", {"tokens": [1, 10**9]})
    assert bad.status_code == 400 and "tokens[1]" in bad.json()["error"]["message"]
    both = _post(server, "/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "b"}]})
    assert both.status_code == 400


def test_health_is_open_and_version_names_agentrt(server):
    from agentrt import __version__

    health = httpx.get(f"{server}/health", timeout=30)  # no key: a liveness probe has none
    assert health.status_code == 200 and health.content == b""
    assert httpx.get(f"{server}/version", timeout=30).status_code == 401
    assert httpx.get(f"{server}/version", headers={"Authorization": f"Bearer {KEY}"},
                     timeout=30).json() == {"version": __version__}


# -- /metrics --------------------------------------------------------------------------------------------------

def test_metrics_need_the_key(server):
    resp = httpx.get(f"{server}/metrics", timeout=30)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"


def test_metrics_count_the_real_requests(server, client):
    before = _metrics(server)
    done = client.completions.create(model="agentrt", prompt=PROMPT, max_tokens=5, temperature=0)
    chat = client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": "Say hi"}],
                                          max_tokens=6, extra_body={"route": "direct"})
    streamed = list(client.chat.completions.create(
        model="agentrt", messages=[{"role": "user", "content": "Say bye"}], max_tokens=6, stream=True,
        stream_options={"include_usage": True}, extra_body={"route": "direct"}))[-1].usage
    emb = client.embeddings.create(model=EMBED, input="count me", encoding_format="float")
    assert httpx.get(f"{server}/metrics", timeout=30).status_code == 401
    after = _metrics(server)

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert moved("agentrt_http_requests_total", endpoint="/v1/completions", method="POST", status="200") == 1
    assert moved("agentrt_http_requests_total", endpoint="/v1/chat/completions", method="POST", status="200") == 2
    assert moved("agentrt_http_requests_total", endpoint="/v1/embeddings", method="POST", status="200") == 1
    assert moved("agentrt_http_requests_total", endpoint="/metrics", method="GET", status="401") == 1
    assert moved("agentrt_http_request_duration_seconds_count", endpoint="/v1/chat/completions") == 2
    assert moved("agentrt_http_request_duration_seconds_bucket", endpoint="/v1/completions", le="+Inf") == 1
    # tokens: exactly what the responses' usage says, by endpoint
    assert moved("agentrt_prompt_tokens_total", endpoint="/v1/completions") == done.usage.prompt_tokens
    assert moved("agentrt_generation_tokens_total", endpoint="/v1/completions") == done.usage.completion_tokens
    assert moved("agentrt_prompt_tokens_total", endpoint="/v1/chat/completions") == \
        chat.usage.prompt_tokens + streamed.prompt_tokens
    assert moved("agentrt_generation_tokens_total", endpoint="/v1/chat/completions") == \
        chat.usage.completion_tokens + streamed.completion_tokens
    assert moved("agentrt_prompt_tokens_total", endpoint="/v1/embeddings") == emb.usage.prompt_tokens
    # the runs: their route, status and budget
    route = chat.model_extra["agentrt"]
    assert moved("agentrt_runs_total", route="direct", status=route["status"]) >= 1
    assert sum(v for (name, labels), v in after.items() if name == "agentrt_runs_total") - \
        sum(v for (name, labels), v in before.items() if name == "agentrt_runs_total") == 2
    assert moved("agentrt_budget_spent_tokens_total") == chat.usage.total_tokens + streamed.total_tokens
    assert moved("agentrt_budget_granted_tokens_total") >= route["budget"]
    assert moved("agentrt_budget_used_ratio_count") == 2
