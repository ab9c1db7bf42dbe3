"""Corpora: hybrid retrieval, idempotent/resumable indexing, reopening in a new process, the CLI, and bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrt.core.errors import ConfigError, InputError
from memory.corpus import open_corpus, rrf
from memory.ingest import MAX_WORDS, chunk_text, file_chunks, hotpotqa_chunks, ingest, iter_files, make_chunk

RARE = (
    "The committee met on Tuesday to discuss the budget for the new library wing, the parking rules and "
    "the summer reading schedule; the minutes were filed as 7QX9ZK."
)
PARAPHRASE = "The feline dozed on the rug for the whole afternoon."  # both planted by conftest.small_corpus


def _rank(hits, text: str) -> int | None:
    ids = [h.text for h in hits]
    return ids.index(text) if text in ids else None


def test_hybrid_finds_exact_rare_token_that_vectors_miss(small_corpus):
    # "7QX9ZK" means nothing to the embedding model; BM25 matches it exactly.
    assert _rank(small_corpus.search("7QX9ZK", k=5, mode="vector"), RARE) is None
    assert _rank(small_corpus.search("7QX9ZK", k=10, mode="bm25"), RARE) == 0
    assert _rank(small_corpus.search("7QX9ZK", k=3), RARE) is not None


def test_hybrid_finds_paraphrase_that_bm25_misses(small_corpus):
    # No word in common with the passage (feline/dozed/rug vs cat/sleeping/carpet).
    q = "cat sleeping on the carpet"
    assert _rank(small_corpus.search(q, k=10, mode="bm25"), PARAPHRASE) is None
    assert _rank(small_corpus.search(q, k=10, mode="vector"), PARAPHRASE) == 0
    assert _rank(small_corpus.search(q, k=3), PARAPHRASE) is not None


def test_hits_have_title_text_score_and_get(small_corpus):
    hits = small_corpus.search("Scott Derrickson director", k=5)
    assert len(hits) == 5
    assert hits[0].title == "Scott Derrickson"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    again = small_corpus.get(hits[0].id)
    assert again is not None and again.text == hits[0].text and again.title == "Scott Derrickson"
    assert small_corpus.get("no-such-id") is None


def test_rrf_fuses_ranks():
    fused = dict(rrf([["a", "b", "c"], ["b", "d"]]))
    assert max(fused, key=fused.get) == "b"
    assert fused["a"] == pytest.approx(1 / 61)


def test_reindex_is_idempotent_and_resumes(tmp_path):
    chunks = hotpotqa_chunks(limit=2)
    corpus = open_corpus(tmp_path / "mem", "resume", create=True)
    first = ingest(corpus.store, chunks[:7], batch_size=4)  # a run "killed" after 7 chunks
    assert first.added == 7
    second = ingest(corpus.store, chunks, batch_size=4)
    assert (second.added, second.skipped_existing) == (len(chunks) - 7, 7)
    third = ingest(corpus.store, chunks + chunks[:3], batch_size=4)
    assert (third.added, third.skipped_existing, third.duplicates) == (0, len(chunks), 3)
    assert corpus.count() == len(chunks)


def test_resumes_after_a_real_kill(tmp_path):
    """SIGKILL mid-ingest (after two committed batches), then rerun: only the rest is embedded."""
    code = (
        "import os, signal, sys\n"
        "from memory.corpus import open_corpus\n"
        "from memory.ingest import hotpotqa_chunks, ingest\n"
        "c = open_corpus(sys.argv[1], 'killed', create=True)\n"
        "done = []\n"
        "def progress(n):\n"
        "    done.append(n)\n"
        "    if len(done) == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
        "ingest(c.store, hotpotqa_chunks(limit=2), batch_size=5, progress=progress)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "mem")], capture_output=True, text=True, timeout=300)
    assert out.returncode == -9, out.stderr[-2000:]
    chunks = hotpotqa_chunks(limit=2)
    corpus = open_corpus(tmp_path / "mem", "killed")
    assert corpus.count() == 10
    report = ingest(corpus.store, chunks, batch_size=5)
    assert (report.skipped_existing, report.added) == (10, len(chunks) - 10)
    assert corpus.count() == len(chunks)


def test_reopen_in_a_new_process(tmp_path):
    corpus = open_corpus(tmp_path / "mem", "reopen", create=True)
    ingest(corpus.store, [make_chunk("Pets", PARAPHRASE, "t"), make_chunk("Plant", RARE, "t")])
    code = (
        "import sys; from memory.corpus import open_corpus\n"
        "c = open_corpus(sys.argv[1], 'reopen')\n"
        "print(c.count(), c.store.search('a cat asleep', k=1)[0].title, c.search('7QX9ZK', k=1)[0].title)\n"
        # Chroma itself (no embedding function passed) finds the registered one by the name stored with the collection.
        "from memory.chroma import open_client; col = open_client(sys.argv[1]).get_collection('reopen')\n"
        "print(col.query(query_texts=['a cat asleep'], n_results=1)['metadatas'][0][0]['title'])"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "mem")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "Pets", "Plant", "Pets"]


def test_cli_index_and_search(tmp_path, capsys):
    from agentrt.app.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("# Vault\n\nThe vault code is 7QX9ZK.\n\n# Pets\n\n" + PARAPHRASE + "\n")
    (docs / "facts.jsonl").write_text('{"title": "Paris", "text": "Paris is the capital of France."}\n')
    store = str(tmp_path / "mem")
    assert main(["index", str(docs), "--store", store]) == 0
    out = capsys.readouterr().out
    assert "3 added" in out
    assert main(["index", str(docs), "--store", store]) == 0
    assert "0 added, 3 already there" in capsys.readouterr().out
    assert main(["search", "7QX9ZK", "--store", store, "-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(" 1. ") and lines[0].endswith("Vault")
    assert main(["search", "x", "--store", store, "--collection", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentrt: error: no collection 'nope'") and "Traceback" not in err


def test_cli_search_without_index_is_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "agentrt.app.cli", "search", "hello", "--store", str(tmp_path / "empty")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "index something first" in out.stderr


# -- bad input -----------------------------------------------------------------------------------
def test_empty_file(tmp_path):
    (tmp_path / "e.txt").write_text("  \n")
    with pytest.raises(InputError, match="empty"):
        list(file_chunks(tmp_path / "e.txt"))


def test_non_utf8_file(tmp_path):
    (tmp_path / "latin.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin\.txt is not UTF-8 \(bad byte 0xe9 at offset 3\)"):
        list(file_chunks(tmp_path / "latin.txt"))


def test_bad_jsonl_line_names_the_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "fine"}\n{"title": "no text"}\n')
    with pytest.raises(InputError, match=r"d\.jsonl:2 has no non-empty \"text\""):
        list(file_chunks(p))
    p.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(InputError, match=r"d\.jsonl:2 is not valid JSON"):
        list(file_chunks(p))


def test_unsupported_and_missing_paths(tmp_path):
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    with pytest.raises(InputError, match="cannot index .pdf"):
        iter_files(tmp_path / "x.pdf")
    with pytest.raises(InputError, match="does not exist"):
        iter_files(tmp_path / "nope")
    with pytest.raises(InputError, match="no .txt/.md/.jsonl files"):
        iter_files(tmp_path)


def test_ten_megabyte_document_is_chunked_not_rejected(tmp_path):
    words = [f"w{i}" for i in range(1_600_000)]
    body = "\n\n".join(" ".join(words[i : i + 500]) for i in range(0, len(words), 500))
    p = tmp_path / "big.txt"
    p.write_text(body)
    assert p.stat().st_size > 10_000_000
    chunks = list(file_chunks(p))
    assert all(len(c.text.split()) <= MAX_WORDS for c in chunks)
    seen = set()
    for c in chunks:
        seen.update(c.text.split())
    assert len(seen) == len(words)  # every word is in some chunk: nothing dropped
    assert len({c.id for c in chunks}) == len(chunks)


def test_chunk_text_packs_small_paragraphs():
    assert chunk_text("a b\n\nc d\n\n\n e", max_words=4, overlap=1) == ["a b c d", "e"]
    assert chunk_text("   ") == []
    assert chunk_text(" ".join("abcdefg"), max_words=3, overlap=1) == ["a b c", "c d e", "e f g"]


def test_missing_collection_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no collection 'absent'.*agentrt index"):
        open_corpus(tmp_path / "mem", "absent")


def test_bad_collection_name(tmp_path):
    with pytest.raises(InputError, match="bad collection name"):
        open_corpus(tmp_path / "mem", "x", create=True)


def test_damaged_persist_folder(tmp_path):
    bad = tmp_path / "damaged"
    bad.mkdir()
    (bad / "chroma.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigError, match="damaged or unreadable.*move it away"):
        open_corpus(bad, "anything")
    assert (bad / "chroma.sqlite3").read_bytes().startswith(b"this is not")  # left as found


def test_store_path_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        open_corpus(f, "anything")


def test_unreachable_server_is_one_line():
    import socket

    from agentrt.core.errors import BackendError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free: nothing listens there
    with pytest.raises(BackendError, match="unreachable.*chroma run"):
        open_corpus(f"http://127.0.0.1:{port}", "anything")


def test_empty_query(small_corpus):
    with pytest.raises(InputError, match="empty"):
        small_corpus.search("  ")
    with pytest.raises(InputError, match="k must be"):
        small_corpus.search("x", k=0)


def test_store_choice_is_config(chroma_server, tmp_path, monkeypatch):
    from agentrt.core.config import Settings
    from memory.corpus import resolve_location

    served = open_corpus(Settings(memory_store=chroma_server), "via-settings", create=True)
    ingest(served.store, [make_chunk("Pets", PARAPHRASE, "t")])
    assert served.location == chroma_server and served.search("a cat asleep", k=1)[0].title == "Pets"
    monkeypatch.setenv("AGENTRT_MEMORY", str(tmp_path / "env-store"))
    assert resolve_location(Settings()) == str(tmp_path / "env-store")
    monkeypatch.delenv("AGENTRT_MEMORY")
    assert resolve_location(Settings(home=tmp_path)) == str(tmp_path / "memory")
