"""``agentrt tools``: list the built-in tools, call one, or let the policy model answer with them.

    agentrt tools list [--route plan] [--json]
    agentrt tools call calculator '{"expression": "1234*5678"}'
    agentrt tools ask "What is 1234*5678?" [--allow-python] [--max-steps 3] [--budget 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from agentrt.core.errors import InputError
from agentrt.core.protocols import Closable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tools", help="list, call or use the built-in tools")
    tsub = p.add_subparsers(dest="tools_command", metavar="ACTION", required=True)

    ls = tsub.add_parser("list", help="the built-in tools and their JSON schemas")
    ls.add_argument("--route", help="only the tools this route may call (per-route allowlist)")
    ls.add_argument("--allow-python", action="store_true", help="include the python sandbox tool")
    ls.add_argument("--json", action="store_true", help="print OpenAI function schemas as JSON")
    ls.set_defaults(func=cmd_list)

    call = tsub.add_parser("call", help="run one tool with JSON arguments")
    call.add_argument("name", help="the tool to run (see: agentrt tools list)")
    call.add_argument("arguments", help='JSON object, e.g. \'{"expression": "2+2"}\'')
    call.add_argument("--allow-python", action="store_true", help="enable the python sandbox tool")
    call.set_defaults(func=cmd_call)

    ask = tsub.add_parser("ask", help="answer a question with the policy model calling tools")
    ask.add_argument("question", help="the question the model answers with tools")
    ask.add_argument("--allow-python", action="store_true", help="let the model run sandboxed python")
    ask.add_argument("--max-steps", type=int, default=3, help="model calls in the tool loop at most (default 3)")
    ask.add_argument("--budget", type=int, default=4096, help="token budget of the tool loop")
    ask.add_argument("--policy", help="policy backend spec (default: hf:embedded)")
    ask.add_argument("--json", action="store_true", help="print the result and tool calls as JSON")
    ask.set_defaults(func=cmd_ask)


def _settings(args: argparse.Namespace):
    from agentrt.core.config import load_settings

    settings = load_settings(args.config, policy=getattr(args, "policy", None))
    if getattr(args, "allow_python", False) and not settings.allow_python:  # the flag keeps a configured "unsafe"
        settings = settings.model_copy(update={"allow_python": True})
    return settings


def cmd_list(args: argparse.Namespace) -> int:
    from agentrt.routes.toolcall import builtin_tools, tools_for_route

    settings = _settings(args)
    tools = builtin_tools(settings)
    if args.route:
        tools = tools_for_route(args.route, tools, settings)
    if args.json:
        print(json.dumps([t.openai_schema() for t in tools], ensure_ascii=False, indent=2))
    else:
        for t in tools:
            print(f"{t.name}: {t.description}")
    return 0


def cmd_call(args: argparse.Namespace) -> int:
    from agentrt.routes.toolcall import builtin_tools
    from tools.base import execute

    tools = {t.name: t for t in builtin_tools(_settings(args))}
    if args.name not in tools:
        raise InputError(f"unknown tool {args.name!r}; choose one of: {', '.join(tools)} "
                         "(python needs --allow-python)")
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as e:
        raise InputError(f"arguments are not valid JSON ({e.msg}); pass an object like '{{\"x\": 1}}'") from None
    result = asyncio.run(execute(tools[args.name], arguments))
    from agentrt.app.terminal import printable

    if result.error is not None:
        print(printable(f"error: {result.error}"), file=sys.stderr)
        return 1
    print(printable(result.output))  # a tool's output (a page, a program's print): shown, not obeyed
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from agentrt.backends import load_backend, parse_spec
    from agentrt.routes.toolcall import builtin_tools, run_tool_loop

    if not args.question.strip():
        raise InputError("the question is empty; pass a non-empty question")
    if args.max_steps < 1 or args.budget < 1:
        raise InputError("--max-steps and --budget must be >= 1")
    settings = _settings(args)
    parse_spec(settings.policy)
    backend = load_backend(settings.policy, settings)
    try:
        result = asyncio.run(run_tool_loop(backend, [{"role": "user", "content": args.question}],
                                           builtin_tools(settings), max_steps=args.max_steps, budget=args.budget))
    finally:
        if isinstance(backend, Closable):
            backend.close()
    from agentrt.app.terminal import printable

    if args.json:
        print(json.dumps({"answer": result.answer, "stopped": result.stopped, "steps": result.steps,
                          "errors": result.errors, "calls": result.calls}, ensure_ascii=False))
    else:
        print(printable(result.answer))
        for c in result.calls:
            print(printable(f"[tool {c['name']} {json.dumps(c['args'])} -> {c['error'] or c['result']}]"),
                  file=sys.stderr)
        print(f"[stopped={result.stopped} steps={result.steps} errors={result.errors}]", file=sys.stderr)
    return 0
