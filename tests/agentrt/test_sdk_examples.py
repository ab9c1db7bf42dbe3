"""Every script in examples/ runs, on the embedded model (openai_client.py runs in test_server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NEEDS_SERVER = {"openai_client.py"}
# Reward functions that trainers import (tested in tests/evals/test_ray_executor.py), not scripts to run.
TRAINER_PLUGINS = {"verl_reward.py", "openrlhf_reward.py"}

pytestmark = pytest.mark.slow


def test_every_example_is_covered():
    assert {p.name for p in EXAMPLES.glob("*.py")} >= NEEDS_SERVER | {"quickstart.py"}


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in NEEDS_SERVER | TRAINER_PLUGINS))
def test_example_runs(script, agentrt_home):
    out = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "AGENTRT_HOME": str(agentrt_home)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip()
    assert (agentrt_home / "trajectories" / "trajectories.jsonl").exists()
