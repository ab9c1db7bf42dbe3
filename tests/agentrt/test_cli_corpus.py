"""``--corpus NAME|PATH``: the plan route's corpus is explicit, checked before a model loads, and a plain
``agentrt run`` shows the passages an answer cites. Real ChromaDB + MiniLM embeddings throughout; the
last test runs the plan route on the real embedded model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.app.corpus import collection_for, resolve_corpus
from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError, InputError

AGENTRT = [sys.executable, "-m", "agentrt.app.cli"]
HEAVY = {"torch", "transformers", "vllm", "agentrt.backends.hf"}
NOTES = {
    "veloria.md": "# Veloria\n\nVeloria is a river town whose lighthouse keeper is Maren Holt. The town was founded in 1712.\n",
    "quill.md": "# Quill Bay\n\nQuill Bay is a harbour north of Veloria. Its ferry, the Tern, sails twice a day.\n",
}


def cli(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "AGENTRT_HOME": str(home), **env}
    return subprocess.run([*AGENTRT, *args], capture_output=True, text=True, env=full_env, timeout=600)


def cli_without_model(*args: str, home: Path) -> tuple[int, list[str]]:
    """Exit code and stderr lines, after asserting no model started loading (no torch/transformers import)."""
    out = cli(*args, home=home, PYTHONPROFILEIMPORTTIME="1")
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & HEAVY, f"a model started loading: {sorted(imported & HEAVY)}"
    lines = [line for line in out.stderr.splitlines() if line.strip() and not line.startswith("import time:")]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    return out.returncode, lines


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    return folder


def test_index_says_which_collection_it_filled_and_an_unknown_one_is_refused_early(agentrt_home, notes, tmp_path):
    out = cli("index", str(notes), "--collection", "towns", home=agentrt_home)
    assert out.returncode == 0, out.stderr
    assert "filled collection 'towns'" in out.stdout and "--corpus towns" in out.stdout
    for command in (["run", "What is Veloria?"], ["chat"], ["serve", "--port", "0"],
                    ["eval", "--suite", "gsm8k", "--out", str(tmp_path / "e")]):
        code, lines = cli_without_model(*command, "--corpus", "nosuch", home=agentrt_home)
        assert code == 2 and len(lines) == 1, (command, lines)
        assert lines[0].startswith("agentrt: error: no collection 'nosuch' in memory store") and "have: towns" in lines[0]
    code, lines = cli_without_model("run", "--corpus", str(tmp_path / "missing" / "docs"), "q?", home=agentrt_home)
    assert code == 2 and len(lines) == 1 and "no such file or folder" in lines[0] and "have: towns" in lines[0], lines
    code, lines = cli_without_model("run", "--corpus", "x", "q?", home=agentrt_home)
    assert code == 2 and "bad corpus name 'x'" in lines[0]
    assert not (agentrt_home / "trajectories" / "trajectories.jsonl").exists()


def test_a_path_is_indexed_once_into_a_collection_named_by_its_content(agentrt_home, notes):
    settings = Settings()
    name = resolve_corpus(settings, str(notes))
    assert name == collection_for(notes) and name.startswith("notes-")
    from memory.corpus import open_corpus

    corpus = open_corpus(settings, name)
    count = corpus.count()
    assert count >= 2 and any("Maren Holt" in h.text for h in corpus.search("lighthouse keeper", k=2))
    assert resolve_corpus(Settings(), str(notes)) == name and open_corpus(settings, name).count() == count
    (notes / "quill.md").write_text(NOTES["quill.md"].replace("twice", "three times"))
    changed = resolve_corpus(Settings(), str(notes))
    assert changed != name and changed.startswith("notes-")  # new content, new collection: never a stale index
    assert resolve_corpus(Settings(), name) == name  # the derived collection is a NAME like any other
    with pytest.raises(ConfigError, match=r"no collection 'nosuch'.*have: .*notes-"):
        resolve_corpus(Settings(), "nosuch")
    with pytest.raises(InputError, match="no such file or folder"):
        resolve_corpus(Settings(), "./no/such/folder")


@pytest.mark.slow
def test_plain_run_prints_the_cited_sources_and_json_carries_them(agentrt_home):
    # The bundled sample corpus given as a PATH, and the question `agentrt demo` and the README measured:
    # the plan route searches the corpus and cites what it read.
    sample = Path(__file__).resolve().parents[2] / "agentrt" / "data" / "sample_corpus.jsonl"
    question = "Who is the director of the film Sinister?"
    out = cli("run", "--corpus", str(sample), "--route", "plan", "--budget", "4000", question, home=agentrt_home)
    assert out.returncode == 0, out.stderr[-2000:]
    name = collection_for(sample)
    assert name.startswith("sample_corpus-") and f"into collection '{name}'" in out.stderr
    assert "route=plan" in out.stderr
    answer, _, sources = out.stdout.partition(f"sources ({name}):")
    assert answer.strip() and sources.strip(), out.stdout
    first = sources.strip().splitlines()[0]
    assert first.startswith("[1] ") and " id=" in first and "(untitled)" not in first  # a title, then the id
    out = cli("run", "--json", "--corpus", str(sample), "--route", "plan", "--budget", "4000", question,
              home=agentrt_home)
    assert out.returncode == 0 and "indexing" not in out.stderr  # indexed once
    result = json.loads(out.stdout)
    assert result["route"] == "plan" and result["citations"]
    assert [s["id"] for s in result["sources"]] == result["citations"]
    assert all(s["title"] for s in result["sources"])
