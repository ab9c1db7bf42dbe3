"""Runtime settings: where agentrt keeps its files and which models it uses.

Settings come from (lowest to highest): defaults, a TOML file (``$AGENTRT_HOME/config.toml`` or
``--config``), environment variables, explicit arguments.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt.core.errors import ConfigError

DEFAULT_BUDGET = 1024


def default_home() -> Path:
    """``$AGENTRT_HOME``, else ``~/.cache/agentrt``."""
    env = os.environ.get("AGENTRT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agentrt"


class Settings(BaseModel):
    """Validated runtime configuration."""

    model_config = ConfigDict(extra="forbid")

    home: Path = Field(default_factory=default_home)
    policy: str = "hf:embedded"
    planner: str | None = None
    torch_threads: int = Field(default_factory=lambda: int(os.environ.get("AGENTRT_TORCH_THREADS", "1")), ge=1)
    # Threads for the hf batcher's wide passes (prompts, several rows); 0 = torch_threads. One-row decode
    # steps are memory-bound and gain nothing from more threads; wide passes do, on cores of your own.
    torch_wide_threads: int = Field(default_factory=lambda: int(os.environ.get("AGENTRT_TORCH_WIDE_THREADS", "0")), ge=0)
    budget: int = Field(default=DEFAULT_BUDGET, ge=1)
    thinking_cap: int = Field(default=256, ge=0)
    answer_max_tokens: int = Field(default=128, ge=1)
    thinking_style: str = Field(default="auto", pattern="^(auto|native|prompted)$")
    # OpenTelemetry spans (extra `tracing`): none (off), console, otlp (OTEL_EXPORTER_OTLP_ENDPOINT), memory (tests).
    tracing: str = Field(default="none", pattern="^(none|console|otlp|memory)$")
    corpus: str = "default"  # the memory collection the plan route's searchers search
    memory_store: str | None = None  # vector store: a folder or http://HOST:PORT (default $AGENTRT_MEMORY, else home/memory)
    allow_python: bool = False  # the python tool (sandboxed code execution) is off unless enabled
    # Routing (agentrt.routing): which router, the utility's token price lambda, per-action floors,
    # exploration (softmax temperature / epsilon, propensities logged) and the cascade's threshold.
    router: str = "rules"
    router_lambda: float = Field(default=0.3, ge=0.0)
    router_floors: dict[str, float] = {}
    router_temperature: float = Field(default=0.0, ge=0.0)
    router_epsilon: float = Field(default=0.0, ge=0.0, le=1.0)
    cascade_threshold: float = -0.8  # mean answer-token logprob below this -> escalate
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # > 0: runs sample instead of decoding greedily
    # Episodic memory: remember every finished run in the "episodes" collection of the memory store;
    # the router reads how similar past questions went (features past_runs / past_success).
    episodic_memory: bool = False

    @property
    def trajectory_dir(self) -> Path:
        return self.home / "trajectories"

    @property
    def models_dir(self) -> Path:
        """Converted models; ``$AGENTRT_MODELS_DIR`` shares one copy between homes (tests, CI)."""
        env = os.environ.get("AGENTRT_MODELS_DIR")
        return Path(env).expanduser() if env else self.home / "models"


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from a TOML file (if any) plus explicit overrides; errors name the bad key."""
    data: dict[str, Any] = {}
    path = Path(config_file) if config_file else default_home() / "config.toml"
    if config_file and not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8")).get("agentrt", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"bad setting '{where}': {err['msg']}") from None


def ensure_writable_dir(path: Path, what: str) -> Path:
    """Create ``path`` if needed and check it is writable; a ConfigError says how to fix it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"{what} {path} is not writable ({e.strerror}); set AGENTRT_HOME to a writable directory"
        ) from None
    return path
