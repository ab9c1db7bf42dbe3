"""Token streaming end to end: the hf batcher's per-token text, the door (RunContext.call_model) turning it
into TokenDelta events marked as thought or answer, and the SDK's stream on the real embedded model."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentrt import Agent
from agentrt.app.streaming import Answer, StepFinished, TokenDelta
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.types import Completion, GenParams, Message
from agentrt.routes.thinking import ANSWER_CUE, THINK_CLOSE

QUESTION = "What is the capital of France?"


def _records(home: Path) -> list[dict]:
    return [json.loads(x) for x in (home / "trajectories" / "trajectories.jsonl").read_text().splitlines()]


def _deltas(events: list, **match) -> list[TokenDelta]:
    return [e for e in events if isinstance(e, TokenDelta) and all(getattr(e, k) == v for k, v in match.items())]


def _model_calls(record: dict) -> list[dict]:
    """A record's model-call steps without their timings (which differ from run to run)."""
    return [{k: v for k, v in s.items() if k not in ("latency_s", "t_start_s")}
            for s in record["steps"] if s["kind"] == "model_call"]


# -- the door, on the scripted backend (control flow) ------------------------------------------------------
def test_a_direct_answer_streams_word_by_word_before_its_step_is_recorded(agentrt_home):
    agent = Agent(policy=ScriptedBackend(["Paris is the capital of France."]))
    events = list(agent.stream(QUESTION, budget=200, route="direct"))
    deltas = _deltas(events)
    assert [d.text for d in deltas] == ["Paris ", "is ", "the ", "capital ", "of ", "France."]
    assert {(d.step, d.route, d.thought) for d in deltas} == {("answer", "direct", False)}
    assert "".join(d.text for d in deltas) == events[-1].answer
    finished = next(i for i, e in enumerate(events) if isinstance(e, StepFinished) and e.kind == "model_call")
    assert events.index(deltas[-1]) < finished  # every delta arrives before the call is recorded


def test_reason_streams_its_thought_as_thought_and_its_answer_as_answer(agentrt_home):
    agent = Agent(policy=ScriptedBackend(["Two and two make four.", "4"]))
    events = list(agent.stream("What is 2 + 2?", budget=400, route="reason", thinking_cap=32, tools=[]))
    assert "".join(d.text for d in _deltas(events, step="think", thought=True)) == "Two and two make four."
    assert [d.text for d in _deltas(events, thought=False)] == ["4"]
    assert {d.route for d in _deltas(events)} == {"reason"}


def test_routes_without_streamed_answer_text_say_their_answer_once(agentrt_home):
    abstained = list(Agent(policy=ScriptedBackend(["x"])).stream(QUESTION, budget=100, route="abstain"))
    assert [(d.text, d.route, d.thought) for d in _deltas(abstained)] == [("I don't know.", "abstain", False)]
    # parallel samples: the samples are thoughts, the voted answer is said once
    backend = ScriptedBackend([f"two plus two {THINK_CLOSE} {ANSWER_CUE} 4"])
    sampled = list(Agent(policy=backend).stream("What is 2 + 2?", budget=900, route="reason", samples=3, tools=[]))
    assert all(d.thought for d in _deltas(sampled, step="sample"))
    assert [d.text for d in _deltas(sampled, thought=False)] == [sampled[-1].answer] == ["4"]


def test_text_inside_think_tags_is_a_thought_even_in_an_answer_call():
    from agentrt.routes._deltas import CallDeltas
    from agentrt.routes.context import RunContext
    from agentrt.core.budget import Budget

    seen: list[TokenDelta] = []

    async def main():
        ctx = RunContext("r", "q", Budget(10), ScriptedBackend(), None, on_event=seen.append, route="direct")
        d = CallDeltas(ctx.say, "answer", thought=False)
        for piece in ["<th", "ink>I should", " say Paris</", "think>", "Paris", "<", "!"]:
            d.on_token(0, piece)
        d.on_token(1, "another choice")  # only the first choice streams
        d.close(Completion([], None, None))

    asyncio.run(main())
    assert [(e.text, e.thought) for e in seen] == [("I should", True), (" say Paris", True), ("Paris", False),
                                                   ("<!", False)]


class _Silent(ScriptedBackend):
    """A backend that cannot stream: it ignores on_token."""

    async def chat(self, messages, params):
        return await super().chat(messages, dataclasses.replace(params, on_token=None))


def test_a_backend_that_cannot_stream_gives_one_delta_per_call(agentrt_home):
    events = list(Agent(policy=_Silent(["Paris is the capital."])).stream(QUESTION, budget=200, route="direct"))
    assert [(d.text, d.thought) for d in _deltas(events)] == [("Paris is the capital.", False)]


def test_streaming_leaves_the_trajectory_as_it_was(agentrt_home):
    agent = Agent(policy=ScriptedBackend(["Paris is the capital of France."]))
    agent.run(QUESTION, budget=200, route="direct")
    list(agent.stream(QUESTION, budget=200, route="direct"))
    plain, streamed = _records(agentrt_home)
    assert _model_calls(plain) == _model_calls(streamed)


# -- an OpenAI-compatible reasoning server (vLLM's --reasoning-parser convention) over real HTTP -----------
THINKING, SAID = ["Two", " and two", " make four."], ["The answer", " is 4."]


class _ReasoningServer(BaseHTTPRequestHandler):
    """Answers like `vllm serve --reasoning-parser ...`: the thinking in `reasoning`, the answer in `content`."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._send(json.dumps({"data": [{"id": "thinker"}]}).encode(), "application/json")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        usage = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}
        if not body.get("stream"):
            message = {"role": "assistant", "reasoning": "".join(THINKING), "content": "".join(SAID)}
            data = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}
            return self._send(json.dumps(data).encode(), "application/json")
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
        chunks += [{"choices": [{"index": 0, "delta": {"reasoning": p}}]} for p in THINKING]
        chunks += [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in SAID]
        chunks += [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, {"choices": [], "usage": usage}]
        self._send(b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n",
                   "text/event-stream")

    def _send(self, data: bytes, kind: str):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def reasoning_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ReasoningServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_a_reasoning_servers_thinking_streams_as_thought(reasoning_server, agentrt_home):
    from agentrt.backends.openai import OpenAIBackend

    backend = OpenAIBackend([reasoning_server], "thinker")
    try:
        msgs = [Message("user", "What is 2 + 2?")]
        pieces: list[str] = []
        plain = asyncio.run(backend.chat(msgs, GenParams(max_tokens=32)))
        streamed = asyncio.run(backend.chat(msgs, GenParams(max_tokens=32, on_token=lambda i, t: pieces.append(t))))
        assert plain.text == streamed.text == "<think>Two and two make four.</think>The answer is 4."
        assert "".join(pieces) == streamed.text and len(pieces) == len(THINKING) + len(SAID)
        events = list(Agent(policy=backend).stream("What is 2 + 2?", budget=300, route="direct"))
    finally:
        backend.close()
    assert [d.text for d in _deltas(events, thought=True)] == THINKING
    assert [d.text for d in _deltas(events, thought=False)] == SAID
    assert events[-1].answer == "The answer is 4."


# -- the hf batcher's incremental text (real tokenizer, real model) ----------------------------------------
@pytest.mark.slow
def test_incremental_text_equals_the_full_decode(embedded):
    from agentrt.backends.hf.detok import TextStream

    tok = embedded.tokenizer
    rng = random.Random(7)
    texts = ["Emoji 🙂🎉, naïve café, 東京タワー, Ελληνικά ✓", "def f(x):\n    return {'a': [1, 2]}  # 💡",
             "  spaced   out  \n\n"]
    sequences = [tok(t, add_special_tokens=False).input_ids for t in texts]
    sequences += [[rng.randrange(embedded.vocab_size) for _ in range(rng.randrange(1, 40))] for _ in range(200)]
    for ids in sequences:
        stream = TextStream(tok)
        pieces = [stream.push(i) for i in ids]
        full = tok.decode(ids, skip_special_tokens=True)
        assert "".join(pieces) + stream.finish(full) == full
        if "\ufffd" not in full:  # (random ids can spell invalid UTF-8 for good)
            assert "\ufffd" not in "".join(pieces)  # a character is sent whole, never half of it
    # text that may start a stop string waits; the stop string itself is never sent
    stream = TextStream(tok, ["Final answer:"])
    pieces = [stream.push(i) for i in tok("x = 4\nFinal answer", add_special_tokens=False).input_ids]
    assert "".join(pieces) == "x = 4\n"


@pytest.mark.slow
def test_the_batcher_streams_every_row_token_by_token_and_decodes_the_same_tokens(embedded):
    prompts = ["Write a haiku about the sea, with emoji.", "List three primes.", QUESTION]
    cases = [GenParams(max_tokens=40), GenParams(max_tokens=40, stop=[".", "\n"]),
             GenParams(max_tokens=24, n=3, temperature=0.8, seed=5),
             GenParams(max_tokens=40, json_schema={"type": "object", "properties": {"city": {"type": "string"}},
                                                   "required": ["city"]})]

    async def both(prompt: str, params: GenParams):
        pieces: dict[int, list[str]] = {}
        streaming = dataclasses.replace(params, on_token=lambda i, text: pieces.setdefault(i, []).append(text))
        plain, streamed = await asyncio.gather(embedded.chat([Message("user", prompt)], params),
                                               embedded.chat([Message("user", prompt)], streaming))
        return plain, streamed, pieces

    async def main():
        return await asyncio.gather(*[both(p, c) for p in prompts for c in cases])

    for plain, streamed, pieces in asyncio.run(main()):
        assert [c.token_ids for c in streamed.choices] == [c.token_ids for c in plain.choices]
        assert [c.text for c in streamed.choices] == [c.text for c in plain.choices]
        for i, choice in enumerate(streamed.choices):
            assert "".join(pieces.get(i, [])) == choice.text
            # about one piece per token: a piece waits only for a whole character or a possible stop string
            assert len(pieces.get(i, [])) >= len(choice.text.split()) - 1


# -- the SDK on the real embedded model ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_direct_answer_arrives_token_by_token(agent, agentrt_home):
    events = list(agent.stream(QUESTION, budget=300, route="direct"))
    answer = events[-1]
    assert isinstance(answer, Answer)
    deltas = _deltas(events, thought=False)
    tokens = len(_records(agentrt_home)[-1]["steps"][-1]["completion_token_ids"][0])
    print(f"direct answer: {tokens} tokens in {len(deltas)} deltas: {[d.text for d in deltas]}")
    assert len(deltas) >= 5 and len(deltas) >= tokens - 2  # the end-of-turn token has no text
    assert "".join(d.text for d in deltas).strip() == answer.answer
    assert {(d.step, d.route) for d in deltas} == {("answer", "direct")}


@pytest.mark.slow
def test_reason_on_the_embedded_model_marks_the_thought(agent, agentrt_home):
    events = list(agent.stream("A farmer has 3 pens with 4 sheep each. How many sheep?", budget=600,
                               route="reason", thinking_cap=48))
    thought, answer = _deltas(events, step="think"), _deltas(events, step="answer")
    print(f"reason: {len(thought)} thought deltas, {len(answer)} answer deltas")
    assert len(thought) >= 5 and all(d.thought for d in thought)
    assert answer and not any(d.thought for d in answer)
    assert events.index(thought[-1]) < events.index(answer[0])
    record = _records(agentrt_home)[-1]
    think_step = next(s for s in record["steps"] if s.get("name") == "think")
    assert "".join(d.text for d in thought).strip() == think_step["completions"][0].replace(THINK_CLOSE, "").strip()
    assert "".join(d.text for d in answer).strip() == events[-1].answer
