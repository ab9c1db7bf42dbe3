"""agentrt: a hybrid-reasoning agent runtime.

``import agentrt`` is light: no torch, transformers, vllm or chromadb. Backends load on first use.
"""

from agentrt.agent import Agent, Result
from agentrt.budget import Budget
from agentrt.config import Settings, load_settings
from agentrt.errors import (
    AgentrtError,
    BackendError,
    BudgetExceeded,
    ConfigError,
    InputError,
    RunError,
    TrajectoryError,
    UserError,
)
from agentrt.protocols import ModelBackend
from agentrt.types import Completion, GenParams, Message, Usage

__version__ = "0.1.0"

__all__ = [
    "Agent", "Result", "Budget", "Settings", "load_settings", "ModelBackend", "Message", "GenParams",
    "Completion", "Usage", "AgentrtError", "UserError", "ConfigError", "InputError", "RunError",
    "BackendError", "BudgetExceeded", "TrajectoryError", "__version__",
]
