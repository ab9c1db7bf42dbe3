"""Token streaming on the embedded model: does asking for tokens slow the batcher, and when does text arrive?

    .venv/bin/python -m evals.bench.stream_bench [--requests 4] [--tokens 64] [--rounds 3]

Part 1, the batcher: ``--requests`` concurrent greedy chats of ``--tokens`` tokens, without and with a
``GenParams.on_token`` callback (rounds alternate, best round kept), same prompts, same tokens. Prints
tokens/s, the time to the first piece of text, and pieces per completion token.

Part 2, the SDK: ``agent.astream`` on the direct route; the time to the first answer token and to the
Answer event, and how many answer deltas the answer came in. On shared cores the numbers move with
the load; compare the two columns of one run, not runs with each other.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from evals.bench.common import parser

PROMPTS = ["Write a short poem about the sea.", "Explain what a lighthouse does.", "Describe a city at night.",
           "Tell a story about a robot learning to paint.", "What is the capital of France?",
           "List three uses of copper.", "Describe the first snow of winter.", "Explain how a train works."]


async def _round(backend, params, n: int, stream: bool) -> tuple[float, int, float, int]:
    """(wall seconds, completion tokens, seconds to the first piece, pieces) for n concurrent chats."""
    from agentrt.core.types import Message

    first: list[float] = []
    pieces = [0]

    def on_token(index: int, text: str) -> None:
        if not first:
            first.append(time.perf_counter())
        pieces[0] += 1

    p = dataclasses.replace(params, on_token=on_token) if stream else params
    t0 = time.perf_counter()
    outs = await asyncio.gather(*[backend.chat([Message("user", PROMPTS[i % len(PROMPTS)])], p) for i in range(n)])
    wall = time.perf_counter() - t0
    return wall, sum(o.usage.completion_tokens for o in outs), (first[0] - t0) if first else float("nan"), pieces[0]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from agentrt import Agent
    from agentrt.app.streaming import Answer, TokenDelta
    from agentrt.backends import close_backends, load_backend
    from agentrt.core.config import Settings
    from agentrt.core.types import GenParams

    backend = load_backend("hf:embedded", Settings())
    params = GenParams(max_tokens=args.tokens)
    asyncio.run(_round(backend, params, 1, False))  # warm-up
    best: dict[bool, tuple[float, int, float, int]] = {}
    for _ in range(args.rounds):
        for stream in (False, True):
            r = asyncio.run(_round(backend, params, args.requests, stream))
            if stream not in best or r[1] / r[0] > best[stream][1] / best[stream][0]:
                best[stream] = r
    print(f"batcher: {args.requests} concurrent greedy chats x {args.tokens} tokens, best of {args.rounds} rounds")
    print(f"{'on_token':<10}{'tok/s':>8}{'first text s':>14}{'wall s':>9}{'pieces/token':>14}")
    for stream in (False, True):
        wall, tokens, first, pieces = best[stream]
        first_s = f"{first:.3f}" if stream else "-"
        per = f"{pieces / tokens:.2f}" if stream else "-"
        print(f"{'yes' if stream else 'no':<10}{tokens / wall:>8.1f}{first_s:>14}{wall:>9.2f}{per:>14}")
    ratio = (best[True][1] / best[True][0]) / (best[False][1] / best[False][0])
    print(f"streaming / plain throughput: {ratio:.3f}")

    agent = Agent(policy=backend)

    async def sdk(question: str) -> tuple[float, float, int, int]:
        t0, first, deltas = time.perf_counter(), None, 0
        async for event in agent.astream(question, budget=400, route="direct"):
            if isinstance(event, TokenDelta) and not event.thought:
                first = first or time.perf_counter()
                deltas += 1
            if isinstance(event, Answer):
                tokens = event.result.usage.completion_tokens
                return (first or t0) - t0, time.perf_counter() - t0, deltas, tokens
        raise RuntimeError("no answer")

    print("\nSDK astream, direct route")
    print(f"{'question':<40}{'first token s':>14}{'answer s':>10}{'deltas':>8}{'tokens':>8}")
    for q in PROMPTS[:4]:
        first, total, deltas, tokens = asyncio.run(sdk(q))
        print(f"{q[:38]:<40}{first:>14.3f}{total:>10.3f}{deltas:>8}{tokens:>8}")
    close_backends()


if __name__ == "__main__":
    main()
