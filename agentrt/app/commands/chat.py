"""``agentrt chat``: the terminal chat (see agentrt.app.repl)."""

from __future__ import annotations

import argparse

from agentrt.core.protocols import Closable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="chat with the agent in the terminal (/help inside)")
    p.add_argument("--budget", type=int, help="token budget per turn (default 1024)")
    p.add_argument("--route", help="force a route (default: the router decides)")
    p.add_argument("--policy", help="policy backend spec (default hf:embedded)")
    p.add_argument("--approve-plans", action="store_true", help="ask before running each plan")
    from agentrt.app.commands.run import add_corpus_arg

    add_corpus_arg(p)
    p.set_defaults(func=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentrt.app.commands.run import _agent
    from agentrt.app.repl import Repl

    agent = _agent(args, budget=args.budget, route=args.route)  # every argument checked before the model loads
    console = Console(highlight=False)
    from rich.markup import escape

    from agentrt.app.terminal import printable

    with console.status(f"loading {escape(printable(agent.settings.policy))} ..."):
        agent.policy  # noqa: B018 - load before the first prompt
    try:
        return Repl(agent, console=console, budget=args.budget, route=args.route, approve_plans=args.approve_plans).run()
    finally:
        _close(agent)


def _close(agent) -> None:
    """Stop the backend's worker before the interpreter exits: a cancelled turn may still be decoding in it,
    and a daemon thread inside torch at shutdown aborts the process."""
    policy = agent._policy
    if not isinstance(policy, Closable):
        return
    policy.close()  # the hf backend joins its batcher thread here
