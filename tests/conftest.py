"""Shared fixtures.

* Every test gets its own ``AGENTRT_HOME`` (a tmp dir), so trajectories never mix.
* Converted models live in one shared folder (``AGENTRT_MODELS_DIR``, default ``~/.cache/agentrt/models``)
  so the GGUF -> fp32 conversion happens once per machine, not once per test.
* ``embedded`` is the real SmolLM2-135M backend, loaded once per session (per test process) and shared;
  ``qwen_model_path`` the second embedded model's converted folder (Qwen2.5-Coder-0.5B-Instruct).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("AGENTRT_MODELS_DIR", str(Path.home() / ".cache" / "agentrt" / "models"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# `make test` runs two test processes on a 2-core machine: each keeps to one torch thread (the default, 0,
# would give every process all cores for prompt passes and batched steps, and oversubscribe them).
os.environ.setdefault("AGENTRT_TORCH_WIDE_THREADS", "1")
# The default policy runs with the second embedded model as a tier (agentrt.core.config.default_tiers). Tests pin
# the policy alone, so a test of one route on one model loads one model; the tiered default has its own tests
# (tests/agentrt/test_tiers.py: `default`), which unset this.
os.environ.setdefault("AGENTRT_TIERS", "{}")

# Real data the tests read ships inside the project: tests/data and evals/data (licences noted there).


def pytest_configure(config: pytest.Config) -> None:
    """Under `make test` (several test processes), convert the default large tier's model (Qwen2.5-Coder-1.5B)
    before the processes start, where it is not converted yet: its conversion holds ~7 GB of fp32 weights and
    more, and beside another process's tests (a vLLM engine, two loaded models) it could exhaust a 24 GB machine.
    Once per machine; a test that needs it then loads the folder."""
    import importlib.util

    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return  # a test process, or one process alone: conversions happen where a test needs them
    from agentrt.backends.embedded import QWEN_1_5B, embedded_model_path
    from agentrt.core.config import DEFAULT_TIER_PACKAGE, Settings

    if importlib.util.find_spec(DEFAULT_TIER_PACKAGE) is not None:
        embedded_model_path(Settings().models_dir, model=QWEN_1_5B)


@pytest.fixture(autouse=True)
def agentrt_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "agentrt-home"
    monkeypatch.setenv("AGENTRT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def embedded():
    """The real embedded model (SmolLM2-135M-Instruct, fp32, CPU), shared by the whole session."""
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings

    backend = load_backend("hf:embedded", Settings())
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def qwen_model_path() -> Path:
    """The second embedded model's fp32 folder (Qwen2.5-Coder-0.5B-Instruct, from its six wheels): assembled,
    checked and converted once per machine into the shared models folder (~3 min the first time)."""
    from agentrt.backends.embedded import QWEN, embedded_model_path
    from agentrt.core.config import Settings

    return embedded_model_path(Settings().models_dir, model=QWEN)


@pytest.fixture
def agent(embedded, agentrt_home):
    """An Agent on the shared embedded model, writing into this test's home."""
    from agentrt import Agent

    return Agent(policy=embedded)
