"""``agentrt serve``: the OpenAI-compatible HTTP server (see agentrt.app.server)."""

from __future__ import annotations

import argparse
import os
import sys

API_KEY_ENV = "AGENTRT_API_KEY"


def register(sub: argparse._SubParsersAction) -> None:
    from agentrt.app.commands.run import add_corpus_arg, add_tier_arg
    from agentrt.core.types import ROUTES

    p = sub.add_parser("serve", help="serve the agent over an OpenAI-compatible HTTP API",
                       description="Serve the agent over an OpenAI-compatible HTTP API (docs/server.md; the flags "
                                   "are grouped as vllm serve's, with agentrt's own apart).")
    p.add_argument("model_tag", nargs="?", metavar="MODEL",
                   help="the policy: a backend spec (hf:embedded, hf:PATH, vllm:PATH, openai:URL#MODEL) or a local "
                        "model folder (same as --model)")
    model = p.add_argument_group("ModelConfig", "the model behind the server")
    model.add_argument("--model", "--policy", dest="policy", metavar="MODEL",
                       help="the policy: a backend spec or a local model folder (default: the policy setting, "
                            "hf:embedded)")
    model.add_argument("--max-model-len", type=int, metavar="N",
                       help="cap the context: a request whose messages plus max_tokens exceed N tokens is a 400 "
                            "(default: the model's context length)")
    front = p.add_argument_group("Frontend", "the HTTP server and its door")
    front.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    front.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    add_door_args(front, guards="every path but /healthz and /health: /v1/*, /metrics, /version, /tokenize, "
                                "/detokenize", reach="run the model", body="request body")
    front.add_argument("--metrics-open", action="store_true",
                       help="leave /metrics open without the API key, for a Prometheus scraper (it shows request "
                            "counts, latencies, routes and token totals, no request content)")
    front.add_argument("--served-model-name", nargs="+", metavar="NAME",
                       help="the model name(s) /v1/models lists and requests may ask for; any other is a 404 "
                            "(default: agentrt and the policy's name)")
    front.add_argument("--chat-template", metavar="FILE|TEMPLATE",
                       help="a jinja chat template (a file, or the template itself) used instead of the model's "
                            "(hf policies)")
    front.add_argument("--max-concurrency", type=int, default=64,
                       help="runs served at once; more wait (default 64)")
    front.add_argument("--request-timeout", type=float, metavar="S",
                       help="cancel a run that takes longer than S seconds (answered 504, saved as cancelled)")
    own = p.add_argument_group("agentrt", "routing, budgets and learning (no vLLM counterpart)")
    own.add_argument("--route", choices=["auto", *ROUTES], default="auto",
                     help="the route of a request that names none: auto (the router decides, default) or a fixed "
                          "route, e.g. direct for predictable latency; requests may still pass their own")
    own.add_argument("--max-budget", type=int, metavar="N",
                     help="largest token budget one request may ask for (a request without one gets the default, "
                          "sized to its prompt, at most N)")
    own.add_argument("--explore", type=float, metavar="EPS",
                     help="share of requests routed epsilon-greedy, propensities logged, so traffic with feedback is "
                          "learnable (agentrt learn --traffic); default: the serve_explore setting (0.05); 0: off")
    add_corpus_arg(own)  # --corpus NAME|PATH: what the plan route searches
    add_tier_arg(own)  # --tier NAME=SPEC: a model tier the router may choose
    from agentrt.app.commands._vllm_flags import add_vllm_flags

    add_vllm_flags(p)  # vllm serve's launch flags: the engine's go to a vllm: policy, the rest are warned
    p.set_defaults(func=cmd_serve)



def add_door_args(group: argparse._ActionsContainer, *, guards: str, reach: str, body: str) -> None:
    """The door's flags, the same on every command that listens (serve, env serve): the key, a public bind
    without one, the pages that may call it, the body cap (``door`` and agentrt.app.server.guard check them)."""
    group.add_argument("--api-key", help=f"require 'Authorization: Bearer KEY' on {guards} (default: ${API_KEY_ENV})")
    group.add_argument("--insecure", action="store_true",
                       help=f"allow binding a non-loopback address without an API key (anyone who reaches it can "
                            f"{reach})")
    group.add_argument("--allowed-origins", nargs="+", metavar="ORIGIN", default=None,
                       help="web pages (scheme://host[:port], or *) whose browsers may call this server (CORS); by "
                            "default only pages on the bind address or loopback, and no CORS headers")
    group.add_argument("--max-body", type=int, default=1 << 20, help=f"largest {body} in bytes (default 1 MiB)")


def door(args: argparse.Namespace, what: str = "run the model",
         command: str = "agentrt serve") -> tuple[str | None, str | None]:
    """The API key (flag, else $AGENTRT_API_KEY) and a warning to print, or an InputError when the
    address is reachable from other machines and nothing locks it (``what`` anyone could do then;
    ``agentrt env serve`` shares this door)."""
    from agentrt.app.server.door import is_loopback
    from agentrt.core.errors import InputError

    key = args.api_key if args.api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    if key is not None and (not key or not key.isascii() or not key.isprintable() or any(c.isspace() for c in key)):
        raise InputError(f"the API key (--api-key or ${API_KEY_ENV}) must be non-empty printable ASCII without spaces")
    if key or is_loopback(args.host):
        return key, None
    if not args.insecure:
        raise InputError(f"refusing to serve on {args.host} without an API key: anyone who can reach it could "
                         f"{what}; pass --api-key KEY (or set {API_KEY_ENV}), bind 127.0.0.1, or add --insecure")
    return None, (f"{command}: warning: serving on {args.host} without an API key (--insecure): anyone who can "
                  f"reach this address can {what}")


def policy_spec(positional: str | None, flag: str | None) -> str | None:
    """The policy spec of ``serve [MODEL]`` / ``--model``: a backend spec as given, a local folder (or
    ``.gguf`` file, converted once) as ``hf:PATH``; None when neither is given (the settings' policy)."""
    from pathlib import Path

    from agentrt.core.errors import InputError

    if positional and flag and positional != flag:
        raise InputError(f"two models given: {positional!r} (MODEL) and {flag!r} (--model); pass one")
    value = positional or flag
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix.lower() == ".gguf"):
        return f"hf:{path.resolve()}"
    if ":" in value:
        return value
    raise InputError(f"model {value!r} is neither a backend spec (hf:embedded, hf:PATH, vllm:PATH, openai:URL#MODEL) "
                     "nor a local model folder; agentrt never downloads from a hub: pass a folder that holds the "
                     "model's files")


def chat_template(value: str) -> str:
    """``--chat-template``: the file's text, or ``value`` itself when it is a template (vLLM takes both)."""
    from pathlib import Path

    from agentrt.core.errors import InputError

    path = Path(value).expanduser()
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"--chat-template {value}: cannot read it as UTF-8 text ({e})") from None
    if "{{" in value or "{%" in value:
        return value
    raise InputError(f"--chat-template {value!r} is not a file, nor a jinja template; pass the template's path")


def cmd_serve(args: argparse.Namespace) -> int:
    from agentrt.app.agent import Agent
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.app.server import serve

    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {args.port}")
    if args.max_body < 1 or args.max_concurrency < 1:
        raise InputError("--max-body and --max-concurrency must be positive")
    if args.max_budget is not None and args.max_budget < 1:
        raise InputError(f"--max-budget must be a positive number of tokens, got {args.max_budget}")
    if args.request_timeout is not None and not 0 < args.request_timeout < float("inf"):
        raise InputError(f"--request-timeout must be a positive number of seconds, got {args.request_timeout}")
    names = args.served_model_name
    if names is not None and not all(n.strip() and n.isprintable() and not any(c.isspace() for c in n) for n in names):
        raise InputError("--served-model-name takes non-empty names without spaces, e.g. --served-model-name agentrt")
    key, warning = door(args)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    from agentrt.app.commands.run import check_corpus, tier_overrides

    if args.max_model_len is not None and args.max_model_len < 1:
        raise InputError(f"--max-model-len must be a positive number of tokens, got {args.max_model_len}")
    template = chat_template(args.chat_template) if args.chat_template is not None else None
    settings = load_settings(args.config, policy=policy_spec(args.model_tag, args.policy), **tier_overrides(args))
    from agentrt.app.commands._vllm_flags import engine_spec

    spec, ignored = engine_spec(settings.policy, args)
    if ignored:
        print(ignored, file=sys.stderr, flush=True)
    if spec != settings.policy:  # a planner on the same spec keeps sharing the one engine
        same = {"planner": spec} if settings.planner == settings.policy else {}
        settings = settings.model_copy(update={"policy": spec, **same})
    explore = settings.serve_explore if args.explore is None else args.explore
    if not 0 <= explore <= 0.5:
        raise InputError(f"--explore must be in [0, 0.5] (a share of requests), got {explore}")
    if settings.router_epsilon == 0 and explore > 0:  # an explicit router_epsilon wins
        settings = settings.model_copy(update={"router_epsilon": explore})
    check_corpus(settings, args.corpus, needed=False)  # before the model loads: exists, or indexed once
    agent = Agent(settings)
    tiers = "".join(f", tier {name}: {spec}" for name, spec in agent.settings.tiers.items())
    print(f"agentrt serve: loading {agent.settings.policy}{tiers} ...", file=sys.stderr, flush=True)
    agent.policy  # noqa: B018 - load now, so /healthz answers only when ready
    if args.max_model_len is not None and args.max_model_len > agent.policy.context_length:
        raise InputError(f"--max-model-len {args.max_model_len} is above the model's context of "
                         f"{agent.policy.context_length} tokens; pass at most that")
    if template is not None:
        from agentrt.backends.hf import HFBackend

        if not isinstance(agent.policy, HFBackend):
            raise InputError(f"--chat-template works with hf policies; {agent.settings.policy} renders its own "
                             "prompts (give the template to the server behind it)")
        agent.policy.use_chat_template(template)
        from agentrt.core.types import Message

        try:  # a template that cannot render is a startup error, not every request's 500
            agent.policy.render([Message("system", "s"), Message("user", "u")])
        except Exception as e:  # noqa: BLE001 - jinja raises many kinds
            raise InputError(f"--chat-template does not render a conversation: {type(e).__name__}: {e}") from None
    lock = " (API key required)" if key else ""
    from agentrt.app.server import served_names

    print(f"agentrt serve: listening on http://{args.host}:{args.port} (OpenAI API at /v1; models: "
          f"{', '.join(served_names(agent, names))}){lock}", file=sys.stderr, flush=True)
    serve(agent, args.host, args.port, max_body=args.max_body, max_concurrency=args.max_concurrency, api_key=key,
          max_budget=args.max_budget, request_timeout=args.request_timeout, served_model_names=names,
          allowed_origins=args.allowed_origins, default_route=None if args.route == "auto" else args.route,
          max_model_len=args.max_model_len, metrics_open=args.metrics_open)
    return 0
