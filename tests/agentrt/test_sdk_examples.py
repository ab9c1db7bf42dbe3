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


# Examples that are not scripts, and the test that checks each one as written.
NOT_SCRIPTS = {"cluster.toml": "tests/evals/test_ray_executor.py", "notes": "tests/test_docs.py"}  # notes: docs/concepts.md
ELSEWHERE = {"openai_client.py": "tests/agentrt/test_server.py", "verl_reward.py": "tests/evals/test_ray_executor.py",
             "openrlhf_reward.py": "tests/evals/test_ray_executor.py"}


def test_every_example_is_covered():
    """Each entry of examples/ is run here, or named by the test that runs or loads it: a new example cannot
    go untested."""
    assert set(ELSEWHERE) == NEEDS_SERVER | TRAINER_PLUGINS
    root = EXAMPLES.parent
    for name, test in {**ELSEWHERE, **NOT_SCRIPTS}.items():
        assert (EXAMPLES / name).exists(), f"examples/{name} is gone: drop it here"
        covered = (root / test).read_text(encoding="utf-8")
        if name == "notes":  # the concepts page indexes it, and tests/test_docs.py runs the page
            covered = (root / "docs" / "concepts.md").read_text(encoding="utf-8") + covered
            assert "docs/concepts.md" in (root / test).read_text(encoding="utf-8")
        assert f"{name}" in covered, f"examples/{name}: {test} does not use it"
    entries = {p.name for p in EXAMPLES.iterdir() if not p.name.startswith((".", "__"))}
    unaccounted = entries - {p.name for p in EXAMPLES.glob("*.py")} - set(NOT_SCRIPTS)
    assert not unaccounted, f"examples/ entries no test runs: {sorted(unaccounted)} (run them here or name their test)"
    assert {p.name for p in EXAMPLES.glob("*.py")} >= NEEDS_SERVER | {"quickstart.py"}


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in NEEDS_SERVER | TRAINER_PLUGINS))
def test_example_runs(script, agentrt_home):
    out = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "AGENTRT_HOME": str(agentrt_home)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip()
    assert (agentrt_home / "trajectories" / "trajectories.jsonl").exists()
