"""One error root for agentrt.

``UserError`` is the caller's mistake (bad config, bad input): fixable by changing the call.
``RunError`` is a failure during a run (backend down, budget spent, corrupt trajectory file).
Every message says what is wrong and how to fix it, in one line.
"""

from __future__ import annotations


class AgentrtError(Exception):
    """Root of every error agentrt raises on purpose."""


class UserError(AgentrtError):
    """The caller asked for something invalid; the message says how to fix it."""


class ConfigError(UserError):
    """Bad configuration: unknown backend spec, unwritable home directory, missing extra."""


class InputError(UserError):
    """Bad input to a run: empty question, budget too small, unknown route."""


class RunError(AgentrtError):
    """A run failed for a reason outside the caller's arguments."""


class BackendError(RunError):
    """A model backend failed (unreachable, bad response, crashed)."""


class BudgetExceeded(RunError):
    """The token budget cannot cover the next step. Raised deep, caught once by the run loop."""


class TrajectoryError(RunError):
    """A trajectory file is corrupt, torn or of an unknown schema version."""


def missing_extra(package: str, extra: str) -> ConfigError:
    """The error to raise when an optional heavy dependency is not installed."""
    return ConfigError(
        f"{package} is not installed; install it with: pip install 'agentrt[{extra}]'"
    )
