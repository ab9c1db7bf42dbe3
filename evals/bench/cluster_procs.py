"""Processes and servers of the cluster bench (``evals.bench.cluster_bench``): what it starts, each in its own process group,
and how it stops them (by group id, and by PID what left the group), and the vLLM servers' own counters."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.bench.common import ROOT, embedded_path

MODEL_NAME = "smol"

# -- processes we own ---------------------------------------------------------------------------------

@dataclass
class Owned:
    """Every process this bench started: groups it created (killed by group id) and the descendants of
    the driver it saw (Ray's processes; killed by PID if still alive with the same start time)."""

    groups: list[subprocess.Popen] = field(default_factory=list)
    seen: dict[int, float] = field(default_factory=dict)  # pid -> create_time
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spawn(self, cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        with self.lock, open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                    start_new_session=True)
            self.groups.append(proc)
        return proc

    def track(self, proc: subprocess.Popen) -> list[Any]:
        """Note the live descendants of ``proc`` (so they are stopped even if they leave its group)."""
        import psutil

        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            return []
        for k in kids:
            try:
                self.seen.setdefault(k.pid, k.create_time())
            except psutil.Error:
                pass
        return kids

    def stop_group(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 20.0) -> None:
        if proc.poll() is None:
            _killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        _killpg(proc.pid, signal.SIGKILL)  # stragglers left in the group
        if proc.poll() is None:
            proc.wait(timeout=10)

    def stop_all(self) -> list[int]:
        """Stop everything; returns the PIDs still alive afterwards (should be none)."""
        import psutil

        for proc in reversed(self.groups):
            self.track(proc)
            try:
                self.stop_group(proc)
            except Exception as e:  # noqa: BLE001 - keep stopping the others
                print(f"warning: stopping pid {proc.pid}: {e}", file=sys.stderr)
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created:
                    p.kill()
            except psutil.Error:
                pass
        time.sleep(0.5)
        left = []
        for pid, created in self.seen.items():
            try:
                if psutil.Process(pid).create_time() == created and psutil.Process(pid).status() != "zombie":
                    left.append(pid)
            except psutil.Error:
                pass
        left += [p.pid for p in self.groups if p.poll() is None]
        return left


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)  # a group this bench created (start_new_session): its leader's pid
    except (ProcessLookupError, PermissionError):
        pass


# -- servers ------------------------------------------------------------------------------------------

def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> float:
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}): {log.read_text(errors='replace')[-1500:]}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s; see {log}")


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def start_vllm(owned: Owned, tmp: Path, port: int, name: str, kv_gib: int) -> Server:
    """``python -m vllm.entrypoints.openai.api_server`` (agentrt.backends.vllm_server's command) in its own group."""
    from agentrt.backends.vllm_server import private_env, vllm_python
    from agentrt.core.config import Settings

    model = embedded_path(Settings().models_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    env = private_env(tmp)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_gib)
    log = tmp / f"vllm-{name}.log"
    cmd = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", MODEL_NAME, "--dtype", "float32", "--enforce-eager",
           "--max-model-len", "2048", "--max-num-seqs", "16",
           "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
    return Server(name, port, owned.spawn(cmd, log, env), log)


def served(server: Server, names: tuple[str, ...] = ("vllm:request_success_total",)) -> int | None:
    """Requests the server finished (vLLM's own counters, from /metrics; ``names``: which to add up);
    None when it does not answer."""
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return None
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(names)))


ARRIVED = ("vllm:request_success_total", "vllm:num_requests_running{", "vllm:num_requests_waiting{")


__all__ = ["ARRIVED", "MODEL_NAME", "Owned", "Server", "served", "start_vllm", "wait_http"]
