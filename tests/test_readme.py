"""Every code block of README.md runs, as a reader would run it (like examples/ in test_sdk_examples.py).

* ```python blocks run with the repo's Python; ```bash blocks as bash scripts (``set -euo pipefail``),
  ```console blocks as their ``$ `` lines; all with ``.venv/bin`` first on PATH, in a scratch folder
  that sees the repo's files (links), under a temporary HOME whose ``~/.cache/agentrt`` is AGENTRT_HOME
  (the converted model is shared through AGENTRT_MODELS_DIR, as in every test).
* A block that cannot run in a test (``make``, a GPU server, a hosted API, a server that runs until
  stopped) is preceded by ``<!-- readme-test: skip REASON -->``; the skip list stays short, each with its
  reason. Blocks in other languages (toml, plain text) are not run; a toml block must still load as
  settings.
* Blocks run in README order in one workspace, so a later block may use what an earlier one indexed;
  each block still sets up what it needs itself (indexing is idempotent), so one can run alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s+(.*?)\s*-->")
RUN = ("python", "bash", "console")
MAX_SKIPPED = 5


@dataclass
class Block:
    lang: str
    code: str
    line: int  # where the block starts in README.md (1-based, the fence line)
    skip: str | None  # the reason, when marked
    above: str = ""  # the non-empty line right above the fence (where a marker sits)
    source: str = "README.md"  # the file it comes from (tests/test_docs.py reads docs/*.md the same way)

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang}"


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of ``text``, each with the skip reason of a marker right above it."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = SKIP.search(above)
        blocks.append(Block(m.group(1), "\n".join(body) + "\n", start + 1, mark.group(1) if mark else None, above))
        i += 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b.lang in RUN and b.skip is None]


def test_the_skip_list_is_short_and_every_skip_says_why():
    skipped = [b for b in BLOCKS if b.skip is not None]
    assert len(skipped) <= MAX_SKIPPED, [b.id for b in skipped]
    for b in skipped:
        assert b.lang in RUN, f"{b.id}: only runnable blocks need a skip marker"
        assert len(b.skip.split()) >= 3, f"{b.id}: say why it cannot run in a test, got {b.skip!r}"
    assert len(RUNNABLE) >= 4 and {"python", "bash"} <= {b.lang for b in RUNNABLE}
    unmarked_langs = {b.lang for b in BLOCKS} - set(RUN) - {"", "toml", "text"}
    assert not unmarked_langs, f"blocks in {unmarked_langs}: run them here or mark them text"


def test_readme_toml_blocks_are_valid_settings(tmp_path):
    from agentrt.core.config import load_settings

    tomls = [b for b in BLOCKS if b.lang == "toml"]
    for b in tomls:
        path = tmp_path / f"{b.id}.toml"
        path.write_text(b.code)
        load_settings(path)  # a bad key or value raises, naming it


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A scratch folder that sees the repo's files, and the environment a reader has after install."""
    base = tmp_path_factory.mktemp("readme")
    work, home = base / "work", base / "home"
    work.mkdir()
    home.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "runs") and not entry.name.startswith(".pytest"):
            (work / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRT_", "OPENAI_", "PYTEST_"))}
    env.update(HOME=str(home), AGENTRT_HOME=str(home / ".cache" / "agentrt"),
               AGENTRT_MODELS_DIR=os.environ["AGENTRT_MODELS_DIR"],  # set by tests/conftest.py
               PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(ROOT), TERM="dumb", COLUMNS="160")
    return work, env


def run_block(block: Block, work: Path, env: dict[str, str]) -> str:
    if block.lang == "python":
        cmd = [sys.executable, "-c", block.code]
    else:
        code = block.code
        if block.lang == "console":
            code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ "))
        cmd = ["bash", "-c", "set -euo pipefail\n" + code]
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    shown = (out.stdout + out.stderr)[-4000:]
    assert out.returncode == 0, f"{block.source} block at line {block.line} ({block.lang}) failed ({out.returncode}):\n{shown}"
    assert "Traceback" not in out.stderr, shown
    return out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_readme_block_runs(block, workspace):
    work, env = workspace
    stdout = run_block(block, work, env)
    if re.search(r"agentrt run .*--corpus sample", block.code):
        # the plan example answers from the corpus it names, and says which passages it used
        assert "sources (sample):" in stdout, stdout[-2000:]
