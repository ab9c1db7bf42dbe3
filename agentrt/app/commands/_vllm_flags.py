"""``vllm serve``'s launch flags on ``agentrt serve``, so a vLLM launch line works with ``agentrt`` in its place.

The engine flags (``ENGINE_FLAGS``) mean something to an in-process vLLM policy (``vllm:PATH``,
agentrt.backends.vllm): they are passed on as the spec's engine options (``vllm:PATH?dtype=bfloat16&...``).
The others (``IGNORED_FLAGS``), and the engine flags under any other policy, are accepted and named in one
warning line: agentrt renders prompts with the model's own template, parses tool calls itself, never runs a
model's remote code and logs no requests.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

# flag dest -> the vLLM engine option it sets (agentrt.backends.vllm.ENGINE_OPTIONS)
ENGINE_FLAGS = ("dtype", "gpu_memory_utilization", "tensor_parallel_size", "enable_prefix_caching", "max_num_seqs",
                "seed", "enforce_eager", "quantization")
# flag dest -> why agentrt has no use for it
IGNORED_FLAGS = {
    "tokenizer": "the tokenizer is the model folder's",
    "trust_remote_code": "agentrt never runs a model's own code",
    "enable_auto_tool_choice": "tool calls are always parsed",
    "tool_call_parser": "agentrt parses tool calls itself",
    "reasoning_parser": "thoughts come back as reasoning_content already",
    "disable_log_requests": "requests are not logged",
    "disable_log_stats": "no stats are logged",
    "uvicorn_log_level": "the server logs warnings only",
    "generation_config": "sampling defaults are agentrt's settings",
}
_VALUE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")  # a spec option's value cannot hold & or =


def add_vllm_flags(p: argparse.ArgumentParser) -> None:
    """The ``vllm serve`` flags, in a group of their own."""
    g = p.add_argument_group("vLLM compatibility", "vllm serve's launch flags: the engine flags go to a vllm: "
                             "policy (e.g. agentrt serve vllm:FOLDER); the rest are accepted with a warning")
    g.add_argument("--dtype", metavar="DTYPE", help="the engine's dtype (auto, bfloat16, float16, float32)")
    g.add_argument("--gpu-memory-utilization", type=float, metavar="F", help="share of GPU memory the engine takes")
    g.add_argument("--tensor-parallel-size", "-tp", type=int, metavar="N", help="GPUs one model is split over")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="reuse the KV of shared prompt prefixes")
    g.add_argument("--max-num-seqs", type=int, metavar="N", help="sequences the engine batches at once")
    g.add_argument("--seed", type=int, metavar="N", help="the engine's random seed")
    g.add_argument("--enforce-eager", action="store_true", default=None, help="no CUDA graphs")
    g.add_argument("--quantization", "-q", metavar="METHOD", help="the engine's quantization method")
    switches = {"trust_remote_code", "enable_auto_tool_choice", "disable_log_requests", "disable_log_stats"}
    for dest, why in IGNORED_FLAGS.items():
        kind: dict[str, Any] = ({"action": "store_true", "default": None} if dest in switches
                                else {"metavar": dest.split("_")[-1].upper()})
        g.add_argument("--" + dest.replace("_", "-"), help=f"accepted and ignored, with a warning ({why})", **kind)


def _shown(dest: str, value: Any) -> str:
    flag = "--" + dest.replace("_", "-")
    return flag if value is True else f"--no-{flag[2:]}" if value is False else f"{flag} {value}"


def engine_spec(spec: str, args: argparse.Namespace) -> tuple[str, str | None]:
    """``spec`` with the engine flags given as its options when it is a ``vllm:`` policy (``--max-model-len``
    too: vLLM sizes its KV cache by it), and the warning line naming the flags that do nothing here (None
    when all did something). A value a spec cannot carry is an InputError."""
    from agentrt.core.errors import InputError

    given = {d: getattr(args, d) for d in ENGINE_FLAGS if getattr(args, d, None) is not None}
    ignored = [_shown(d, getattr(args, d)) for d in IGNORED_FLAGS if getattr(args, d, None) is not None]
    if spec.startswith("vllm:") and (given or args.max_model_len is not None):
        if args.max_model_len is not None:
            given["max_model_len"] = args.max_model_len
        for dest, value in given.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if not _VALUE.match(text):
                raise InputError(f"--{dest.replace('_', '-')} {value!r}: not a valid value; pass a plain word or "
                                 "number (e.g. --dtype bfloat16)")
        query = "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in given.items())
        spec = f"{spec}{'&' if '?' in spec else '?'}{query}"
    elif given:
        ignored = [_shown(d, v) for d, v in given.items()] + ignored
    if not ignored:
        return spec, None
    engine = f"engine flags apply to a vllm: policy only, this one is {spec.split('?')[0]}; " if (
        given and not spec.startswith("vllm:")) else ""
    return spec, (f"agentrt serve: warning: ignoring {', '.join(ignored)} ({engine}why each: agentrt serve "
                  "--help, 'vLLM compatibility')")


__all__ = ["ENGINE_FLAGS", "IGNORED_FLAGS", "add_vllm_flags", "engine_spec"]
