"""agentrt: a hybrid-reasoning agent runtime.

``import agentrt`` is light: no torch, transformers, vllm or chromadb, and no runtime module until a
name below is used (``agentrt.Agent`` loads the app layer on first access). Backends load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it; resolved on first attribute access (PEP 562), so that importing
# a lower layer (``agentrt.core.errors`` from tools/, say) never drags in the agent.
_EXPORTS = {
    "Agent": "agentrt.app.agent", "Result": "agentrt.app.agent",
    "Budget": "agentrt.core.budget", "Settings": "agentrt.core.config", "load_settings": "agentrt.core.config",
    "ModelBackend": "agentrt.core.protocols",
    "Message": "agentrt.core.types", "GenParams": "agentrt.core.types", "Completion": "agentrt.core.types",
    "Usage": "agentrt.core.types",
    **{name: "agentrt.core.errors" for name in (
        "AgentrtError", "UserError", "ConfigError", "InputError", "RunError", "BackendError", "BudgetExceeded",
        "TrajectoryError")},
}

if TYPE_CHECKING:
    from agentrt.app.agent import Agent, Result
    from agentrt.core.budget import Budget
    from agentrt.core.config import Settings, load_settings
    from agentrt.core.errors import (
        AgentrtError, BackendError, BudgetExceeded, ConfigError, InputError, RunError, TrajectoryError, UserError,
    )
    from agentrt.core.protocols import ModelBackend
    from agentrt.core.types import Completion, GenParams, Message, Usage


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [*_EXPORTS, "__version__"]
