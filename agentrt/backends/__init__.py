"""Backend specs -> ModelBackend instances.

A spec is ``KIND:ARG``: ``hf:embedded``, ``hf:/path/to/folder``, ``scripted:...`` (tests). Each kind
maps to one module, imported only when a spec names it, so ``import agentrt`` stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentrt.errors import ConfigError

if TYPE_CHECKING:
    from agentrt.config import Settings
    from agentrt.protocols import ModelBackend

# kind -> "module:factory"; the factory takes (arg, settings) and returns a ModelBackend.
BACKEND_KINDS: dict[str, str] = {
    "hf": "agentrt.backends.hf:from_spec",
    "scripted": "agentrt.backends.scripted:from_spec",
}


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``KIND:ARG``; a ConfigError lists the kinds that exist."""
    kind, sep, arg = spec.partition(":")
    if not sep or not arg or kind not in BACKEND_KINDS:
        raise ConfigError(
            f"bad backend spec {spec!r}: expected KIND:ARG with KIND one of {', '.join(sorted(BACKEND_KINDS))} "
            "(e.g. hf:embedded)"
        )
    return kind, arg


def load_backend(spec: str, settings: Settings) -> ModelBackend:
    """Build the backend a spec names (importing its module only now)."""
    kind, arg = parse_spec(spec)
    module_name, _, factory_name = BACKEND_KINDS[kind].partition(":")
    module = importlib.import_module(module_name)
    factory: Callable[[str, Settings], ModelBackend] = getattr(module, factory_name)
    return factory(arg, settings)
