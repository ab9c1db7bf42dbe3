"""Grammar-constrained decoding for the transformers backend, with xgrammar.

xgrammar is the engine vLLM and SGLang use for structured output: it compiles a JSON schema (or a
choice list) into a token mask once, and each decode step costs a bitmask fill. We use it directly
(not its HF LogitsProcessor) because our decode loop gives every row its own grammar.
"""

from __future__ import annotations

import json
from typing import Any

from agentrt.core.errors import missing_extra
from agentrt.core.types import GenParams

try:
    import torch
    import xgrammar as xgr
except ImportError as e:  # pragma: no cover
    raise missing_extra(e.name or "xgrammar", "hf") from None


class GrammarCache:
    """Compiles grammars once per (schema or choices) and hands out fresh matchers."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=True)
        self.vocab_size = vocab_size
        self._compiled: dict[str, Any] = {}

    def matcher(self, params: GenParams) -> Any:
        if params.json_schema is not None:
            key = "json:" + json.dumps(params.json_schema, sort_keys=True)
            if key not in self._compiled:
                self._compiled[key] = self.compiler.compile_json_schema(
                    json.dumps(params.json_schema), any_whitespace=False
                )
        else:
            key = "choice:" + json.dumps(params.choices)
            if key not in self._compiled:
                alts = " | ".join(json.dumps(c) for c in params.choices or [])
                self._compiled[key] = self.compiler.compile_grammar(f"root ::= {alts}")
        return xgr.GrammarMatcher(self._compiled[key])

    def mask_rows(self, matchers: list[Any], logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Mask row ``rows[j]`` of ``logits`` (in place) with ``matchers[j]``: one bitmask for the batch and
        one apply, instead of a bitmask and a call per row (a per-row cost every decode step)."""
        bitmask = xgr.allocate_token_bitmask(logits.shape[0], self.vocab_size)
        for matcher, i in zip(matchers, rows):
            matcher.fill_next_token_bitmask(bitmask, i)
        xgr.apply_token_bitmask_inplace(logits, bitmask, indices=rows)
        return logits
