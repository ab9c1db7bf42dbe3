"""Benchmark: `agentrt serve` on the embedded model against the SDK, driven by the real openai client over 127.0.0.1.

    .venv/bin/python -m evals.bench.server_bench [--questions 6] [--rounds 2] [--max-tokens 32]
                                                [--requests 16] [--concurrency 1 8] [--repeats 2]

Starts the server as a subprocess on a free port (stopped by PID at the end) and loads the same model
in this process for the SDK. Two tables:

1. Streaming, serve vs SDK, on the same requests (route direct, greedy, ``max_tokens``): time to the
   first answer token and completion tokens/s of each request, through ``agentrt serve`` (openai
   client, ``stream=True``) and through ``agent.astream`` in process; requests alternate between the
   two so that both see the same load. The server's overhead is the relative difference (target <= 10%).
2. Throughput, requests/s with 1 vs N concurrent clients (route direct), through the server and, for
   comparison, through the SDK (``agent.arun`` tasks in process); the gap between them is the server's,
   the rest is the batcher's (issue #23 wants 8 clients >= 3x one). Each cell runs ``--repeats`` times,
   alternating with the others, and keeps its best pass: on shared cores the other tenants' load
   moves single passes by 2x.

3. With ``--vllm``: the throughput cells again through ``agentrt serve --policy openai:<URL>#<name>`` in front of
   a vLLM CPU server (the project's ``.venv-vllm``, same model, float32, eager) and straight to that server, for
   comparison with the embedded batcher (table 2 of the same run).

The machine is shared and noisy: compare the rows of one run, not runs with each other.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from evals.bench.common import ROOT, parser, reuse_converted_model

QUESTIONS = ["What is the capital of France?", "Name a primary colour.", "What do bees make?",
             "Which planet is closest to the sun?", "What is frozen water called?", "Name a large ocean.",
             "Describe a lighthouse in one sentence.", "What is the opposite of hot?"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, port: int, env: dict[str, str], policy: str | None = None) -> subprocess.Popen:
    agentrt = str(Path(sys.executable).parent / "agentrt")
    extra = ["--policy", policy] if policy else []
    proc = subprocess.Popen([agentrt, "serve", "--port", str(port), *extra], env={**env, "AGENTRT_HOME": str(home)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited while starting")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    stop_server(proc)
    raise SystemExit("the server did not become healthy in 300 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)  # by PID, never by name
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


# -- part 1: one streamed request, serve vs SDK --------------------------------------------------------------------

def stream_serve(client, question: str, max_tokens: int) -> tuple[float, int, float]:
    """(seconds to the first answer token, completion tokens, total seconds) through the server."""
    t0 = time.perf_counter()
    first, tokens = None, 0
    for c in client.chat.completions.create(
            model="agentrt", messages=[{"role": "user", "content": question}], stream=True, max_tokens=max_tokens,
            stream_options={"include_usage": True}, extra_body={"route": "direct"}):
        if first is None and c.choices and c.choices[0].delta.content:
            first = time.perf_counter() - t0
        if c.usage is not None:
            tokens = c.usage.completion_tokens
    return first if first is not None else float("nan"), tokens, time.perf_counter() - t0


async def stream_sdk(agent, question: str, max_tokens: int) -> tuple[float, int, float]:
    """The same through ``agent.astream`` in this process."""
    from agentrt.app.streaming import Answer, TokenDelta

    t0 = time.perf_counter()
    first, tokens = None, 0
    async for ev in agent.astream(question, route="direct", max_tokens=max_tokens):
        if first is None and isinstance(ev, TokenDelta) and ev.step == "answer" and not ev.thought and ev.text:
            first = time.perf_counter() - t0
        if isinstance(ev, Answer):
            tokens = ev.result.usage.completion_tokens
    return first if first is not None else float("nan"), tokens, time.perf_counter() - t0


def part_streaming(base: str, agent, questions: list[str], rounds: int, max_tokens: int) -> dict[str, dict]:
    from openai import OpenAI

    client = OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=600, max_retries=0)
    for q in questions:  # warm-up: both prefix caches hold every prompt, as in steady serving
        stream_serve(client, q, max_tokens)
        asyncio.run(stream_sdk(agent, q, max_tokens))
    rows: dict[str, list[tuple[float, int, float]]] = {"serve": [], "sdk": []}
    for r in range(rounds):
        for i, q in enumerate(questions):
            order = ("serve", "sdk") if (i + r) % 2 == 0 else ("sdk", "serve")  # neither always goes first
            for who in order:
                rows[who].append(stream_serve(client, q, max_tokens) if who == "serve"
                                 else asyncio.run(stream_sdk(agent, q, max_tokens)))
    out = {}
    for who, samples in rows.items():
        ttft = [s[0] for s in samples]
        tok_s = [s[1] / s[2] for s in samples]
        out[who] = {"ttft": statistics.median(ttft), "tok_s": statistics.median(tok_s),
                    "tokens": statistics.mean(s[1] for s in samples), "n": len(samples)}
    return out


# -- part 2: requests/s at 1 vs N clients --------------------------------------------------------------------------

def rps_serve(base: str, concurrency: int, requests: int, max_tokens: int, model: str = "agentrt",
              extra_body: dict | None = None) -> dict[str, float]:
    """Requests/s of ``requests`` chat completions from ``concurrency`` openai clients (route direct by default)."""
    from openai import OpenAI

    clients = [OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=600, max_retries=0) for _ in range(concurrency)]
    tokens = [0] * requests

    def one(i: int) -> float:
        t0 = time.perf_counter()
        resp = clients[i % concurrency].chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
            max_tokens=max_tokens, temperature=0, extra_body={"route": "direct"} if extra_body is None else extra_body)
        tokens[i] = resp.usage.completion_tokens
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = sorted(pool.map(one, range(requests)))
    wall = time.perf_counter() - t0
    return {"rps": requests / wall, "p50": statistics.median(latencies), "tok_s": sum(tokens) / wall, "wall": wall}


def rps_sdk(agent, concurrency: int, requests: int, max_tokens: int) -> dict[str, float]:
    async def main() -> dict[str, float]:
        gate = asyncio.Semaphore(concurrency)
        latencies: list[float] = []
        tokens = [0]

        async def one(i: int) -> None:
            async with gate:
                t0 = time.perf_counter()
                result = await agent.arun(QUESTIONS[i % len(QUESTIONS)], route="direct", max_tokens=max_tokens)
                latencies.append(time.perf_counter() - t0)
                tokens[0] += result.usage.completion_tokens

        t0 = time.perf_counter()
        await asyncio.gather(*[one(i) for i in range(requests)])
        wall = time.perf_counter() - t0
        return {"rps": requests / wall, "p50": statistics.median(latencies), "tok_s": tokens[0] / wall, "wall": wall}

    return asyncio.run(main())


# -- part 3: the same through a vLLM CPU server ---------------------------------------------------------------------

def part_vllm(env: dict[str, str], home: Path, args) -> list[tuple[int, dict, dict]]:
    """Requests/s at each concurrency through ``agentrt serve --policy openai:<vLLM>`` and straight to the vLLM
    server (no agentrt in between), the same model (float32, eager) on the same cores."""
    from agentrt.backends.embedded import embedded_model_path
    from agentrt.backends.vllm_server import start_vllm_server
    from agentrt.core.config import load_settings

    name = "smollm2-135m"
    print("vllm: starting the vLLM CPU server (about a minute) ...", file=sys.stderr, flush=True)
    vllm = start_vllm_server(embedded_model_path(load_settings().models_dir), name=name, tmp=home / "vllm")
    proc = None
    try:
        port = free_port()
        proc = start_server(home / "serve-vllm", port, env, policy=f"openai:{vllm.url}#{name}")
        base = f"http://127.0.0.1:{port}"
        rps_serve(base, 1, 2, args.max_tokens)  # warm-up: first requests compile and fill caches
        best: dict[tuple[str, int], dict[str, float]] = {}
        for rep in range(args.repeats):
            for c in args.concurrency:
                print(f"vllm: {c} client(s), pass {rep + 1} ...", file=sys.stderr, flush=True)
                for who in (("serve", "vllm") if rep % 2 == 0 else ("vllm", "serve")):
                    r = (rps_serve(base, c, args.requests, args.max_tokens) if who == "serve"
                         else rps_serve(vllm.url.removesuffix("/v1"), c, args.requests, args.max_tokens, model=name,
                                        extra_body={}))
                    if (who, c) not in best or r["rps"] > best[who, c]["rps"]:
                        best[who, c] = r
        return [(c, best["serve", c], best["vllm", c]) for c in args.concurrency]
    finally:
        if proc is not None:
            stop_server(proc)
        vllm.stop()


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--questions", type=int, default=6, help="distinct questions in the streaming comparison")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the questions (each through both)")
    ap.add_argument("--max-tokens", type=int, default=32, help="the answer's max_tokens in every request")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level (bounded)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=2, help="passes over the throughput cells (best kept)")
    ap.add_argument("--vllm", action="store_true",
                    help="also: the throughput cells through `agentrt serve --policy openai:<a vLLM CPU server>` "
                         "and straight to that server (needs .venv-vllm: `make vllm-venv`)")
    args = ap.parse_args()
    env = dict(os.environ)
    reuse_converted_model(env)  # convert once
    os.environ.update(env)
    from agentrt.app.agent import Agent
    from agentrt.core.config import load_settings

    with tempfile.TemporaryDirectory() as home:
        os.environ["AGENTRT_HOME"] = str(Path(home) / "sdk")
        agent = Agent(load_settings())
        agent.policy  # noqa: B018 - load before timing
        port = free_port()
        proc = start_server(Path(home) / "serve", port, env)
        base = f"http://127.0.0.1:{port}"
        try:
            print("streaming: serve vs SDK ...", file=sys.stderr, flush=True)
            streaming = part_streaming(base, agent, QUESTIONS[:args.questions], args.rounds, args.max_tokens)
            best: dict[tuple[str, int], dict[str, float]] = {}
            for rep in range(args.repeats):  # the cells alternate and repeat; each keeps its best (least disturbed)
                for c in args.concurrency:
                    print(f"throughput: {c} client(s), pass {rep + 1} ...", file=sys.stderr, flush=True)
                    for who in (("serve", "sdk") if rep % 2 == 0 else ("sdk", "serve")):
                        r = (rps_serve(base, c, args.requests, args.max_tokens) if who == "serve"
                             else rps_sdk(agent, c, args.requests, args.max_tokens))
                        if (who, c) not in best or r["rps"] > best[who, c]["rps"]:
                            best[who, c] = r
            levels = [(c, best["serve", c], best["sdk", c]) for c in args.concurrency]
        finally:
            stop_server(proc)
            from agentrt.core.protocols import Closable

            if isinstance(agent.policy, Closable):
                agent.policy.close()
        vllm_levels = part_vllm(env, Path(home), args) if args.vllm else None
    console = Console(width=120)  # every column whole, also in a narrow terminal or a log
    t = Table(title=f"Streaming one request, route direct, max_tokens {args.max_tokens} "
                    f"({streaming['sdk']['n']} requests each, medians)")
    for col in ("path", "first token (s)", "tokens/s", "mean completion tokens"):
        t.add_column(col, justify="right")
    for who, label in (("sdk", "SDK agent.astream"), ("serve", "agentrt serve (SSE)")):
        r = streaming[who]
        t.add_row(label, f"{r['ttft']:.3f}", f"{r['tok_s']:.1f}", f"{r['tokens']:.1f}")
    s, v = streaming["sdk"], streaming["serve"]
    t.add_row("server overhead", f"{(v['ttft'] / s['ttft'] - 1) * 100:+.1f}%",
              f"{(1 - v['tok_s'] / s['tok_s']) * 100:+.1f}%", "target <= 10%")
    console.print(t)
    t = Table(title=f"Throughput, route direct, max_tokens {args.max_tokens}, {args.requests} requests per cell, "
                    f"best of {args.repeats}")
    for col in ("clients", "serve rps", "serve tok/s", "serve p50 s", "SDK rps", "SDK tok/s", "serve/SDK"):
        t.add_column(col, justify="right")
    for c, sv, sd in levels:
        t.add_row(str(c), f"{sv['rps']:.2f}", f"{sv['tok_s']:.1f}", f"{sv['p50']:.2f}", f"{sd['rps']:.2f}",
                  f"{sd['tok_s']:.1f}", f"{sv['rps'] / sd['rps']:.2f}")
    if len(levels) > 1:
        (c1, a, b), (cn, x, y) = levels[0], levels[-1]
        t.add_row(f"{cn} vs {c1}", f"{x['rps'] / a['rps']:.2f}x", "", "", f"{y['rps'] / b['rps']:.2f}x", "",
                  ">=3x wanted")
    console.print(t)
    if vllm_levels:
        t = Table(title=f"Throughput on a vLLM CPU server (same model, float32, eager), route direct, max_tokens "
                        f"{args.max_tokens}, {args.requests} requests per cell, best of {args.repeats}")
        for col in ("clients", "serve->vLLM rps", "tok/s", "p50 s", "vLLM direct rps", "tok/s", "serve/direct",
                    "serve->vLLM / serve(embedded)"):
            t.add_column(col, justify="right")
        embedded = {c: sv for c, sv, _ in levels}
        for c, sv, vd in vllm_levels:
            t.add_row(str(c), f"{sv['rps']:.2f}", f"{sv['tok_s']:.1f}", f"{sv['p50']:.2f}", f"{vd['rps']:.2f}",
                      f"{vd['tok_s']:.1f}", f"{sv['rps'] / vd['rps']:.2f}", f"{sv['rps'] / embedded[c]['rps']:.2f}x")
        if len(vllm_levels) > 1:
            (c1, a, b), (cn, x, y) = vllm_levels[0], vllm_levels[-1]
            t.add_row(f"{cn} vs {c1}", f"{x['rps'] / a['rps']:.2f}x", "", "", f"{y['rps'] / b['rps']:.2f}x", "", "", "")
        console.print(t)


if __name__ == "__main__":
    main()
