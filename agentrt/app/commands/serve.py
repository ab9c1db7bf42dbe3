"""``agentrt serve``: the OpenAI-compatible HTTP server (see agentrt.app.server)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the agent over an OpenAI-compatible HTTP API")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--policy", help="policy backend spec (default hf:embedded)")
    p.add_argument("--max-body", type=int, default=1 << 20, help="largest request body in bytes (default 1 MiB)")
    p.add_argument("--max-concurrency", type=int, default=64, help="runs served at once; more wait (default 64)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from agentrt.app.agent import Agent
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.app.server import serve

    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {args.port}")
    if args.max_body < 1 or args.max_concurrency < 1:
        raise InputError("--max-body and --max-concurrency must be positive")
    agent = Agent(load_settings(args.config, policy=args.policy))
    print(f"agentrt serve: loading {agent.settings.policy} ...", file=sys.stderr, flush=True)
    agent.policy  # noqa: B018 - load now, so /healthz answers only when ready
    print(f"agentrt serve: listening on http://{args.host}:{args.port} (OpenAI API at /v1)", file=sys.stderr, flush=True)
    serve(agent, args.host, args.port, max_body=args.max_body, max_concurrency=args.max_concurrency)
    return 0
