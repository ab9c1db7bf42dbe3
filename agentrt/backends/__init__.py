"""Backend specs -> ModelBackend instances.

A spec is ``KIND:ARG``: ``hf:embedded``, ``hf:/path/to/folder``, ``vllm:embedded``, ``vllm:/path``,
``openai:URL[,URL...]#MODEL``, ``scripted:...`` (tests). Each kind maps to one module, imported only
when a spec names it, so ``import agentrt`` stays light.

Loaded backends are cached by spec: the policy and the planner share one model when they name the
same spec (and a second Agent in the same process reuses it too).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentrt.core.errors import ConfigError
from agentrt.core.protocols import Closable

if TYPE_CHECKING:
    from agentrt.core.config import Settings
    from agentrt.core.protocols import ModelBackend

# kind -> "module:factory"; the factory takes (arg, settings) and returns a ModelBackend.
BACKEND_KINDS: dict[str, str] = {
    "hf": "agentrt.backends.hf:from_spec",
    "vllm": "agentrt.backends.vllm:from_spec",
    "openai": "agentrt.backends.openai:from_spec",
    "scripted": "agentrt.backends.scripted:from_spec",
}

# The kinds whose backends can score text (``core.protocols.Scorer``), known before any is loaded.
SCORING_KINDS = frozenset({"hf"})


def can_score(spec: str) -> bool:
    """Whether the backend ``spec`` names can score text (the self router, scored confidence)."""
    return parse_spec(spec.strip())[0] in SCORING_KINDS


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``KIND:ARG``; a ConfigError lists the kinds that exist."""
    kind, sep, arg = spec.partition(":")
    if not sep or not arg or kind not in BACKEND_KINDS:
        raise ConfigError(
            f"bad backend spec {spec!r}: expected KIND:ARG with KIND one of {', '.join(sorted(BACKEND_KINDS))} "
            "(e.g. hf:embedded)"
        )
    return kind, arg


# (spec, models_dir) -> backend. Loading a model is the expensive part; one copy per process.
_CACHE: dict[tuple[str, str], ModelBackend] = {}
_CACHE_LOCK = threading.Lock()


def load_backend(spec: str, settings: Settings, *, cache: bool = True) -> ModelBackend:
    """Build the backend a spec names (importing its module only now), or return the cached one."""
    if not isinstance(spec, str):
        raise ConfigError(f"a backend spec must be a string like hf:embedded, got {spec!r}")
    spec = spec.strip()
    kind, arg = parse_spec(spec)
    key = (spec, str(settings.models_dir))
    with _CACHE_LOCK:  # held while loading, so two threads asking at once load once
        if cache and key in _CACHE:
            return _CACHE[key]
        module_name, _, factory_name = BACKEND_KINDS[kind].partition(":")
        module = importlib.import_module(module_name)
        factory: Callable[[str, Settings], ModelBackend] = getattr(module, factory_name)
        backend = factory(arg, settings)
        if cache and kind != "scripted":  # scripted backends carry per-test state
            _CACHE[key] = backend
        return backend


def close_backends() -> None:
    """Close and forget every cached backend (engines, server connections, batcher threads)."""
    with _CACHE_LOCK:
        backends = list(_CACHE.values())
        _CACHE.clear()
    for backend in backends:
        if isinstance(backend, Closable):
            backend.close()
