"""Benchmark: `agentrt serve` on the embedded model, driven by the real openai client over 127.0.0.1.

    .venv/bin/python evals/bench/server_bench.py [--requests 16] [--concurrency 1 8] [--budget 160]

Starts the server as a subprocess on a free port, waits on /healthz, sends a bounded number of
chat completions (route=direct) at each concurrency level, prints requests/s and latency
percentiles, and stops the server by PID. The machine is shared and noisy: compare rows of one run.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ["What is the capital of France?", "Name a primary colour.", "What do bees make?",
             "Which planet is closest to the sun?", "What is frozen water called?", "Name a large ocean."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, port: int) -> subprocess.Popen:
    agentrt = str(Path(sys.executable).parent / "agentrt")
    proc = subprocess.Popen([agentrt, "serve", "--port", str(port)], env={**os.environ, "AGENTRT_HOME": str(home)},
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
    os.kill(proc.pid, signal.SIGKILL)
    raise SystemExit("the server did not become healthy in 300 s")


def run_level(base: str, concurrency: int, requests: int, budget: int) -> dict[str, float]:
    from openai import OpenAI

    clients = [OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=600, max_retries=0) for _ in range(concurrency)]

    def one(i: int) -> float:
        t0 = time.perf_counter()
        clients[i % concurrency].chat.completions.create(
            model="agentrt", messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
            extra_body={"budget": budget, "route": "direct"})
        return time.perf_counter() - t0

    one(0)  # warm-up, not counted
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = sorted(pool.map(one, range(requests)))
    wall = time.perf_counter() - t0
    return {"rps": requests / wall, "p50": statistics.median(latencies),
            "p90": latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))], "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level (bounded)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--budget", type=int, default=160, help="token budget per request")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        proc = start_server(Path(home), port)
        try:
            rows = [(c, run_level(f"http://127.0.0.1:{port}", c, args.requests, args.budget)) for c in args.concurrency]
        finally:
            os.kill(proc.pid, signal.SIGTERM)  # by PID
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
    table = Table(title=f"agentrt serve, embedded model, route=direct, budget {args.budget}, {args.requests} requests/level")
    for col in ("clients", "requests/s", "p50 latency (s)", "p90 latency (s)", "wall (s)"):
        table.add_column(col, justify="right")
    for c, r in rows:
        table.add_row(str(c), f"{r['rps']:.2f}", f"{r['p50']:.2f}", f"{r['p90']:.2f}", f"{r['wall']:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
