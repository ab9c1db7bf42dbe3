"""Fast indexing: the int8 embedder, length-bucketed batches, BM25 searchable while vectors fill in,
and the rate `agentrt index` shows. Real MiniLM (fp32 and int8), real Chroma, real HotpotQA text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memory.corpus import bm25_dir, open_corpus
from memory.embeddings import MiniLM, length_buckets
from memory.fill import fill_file, read_fill
from memory.indexer import index_corpus
from memory.ingest import hotpotqa_chunks, make_chunk

RARE = "The minutes of the harbour board were filed under the reference 7QX9ZK on a wet Monday."


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    return [c.embed_text() for c in hotpotqa_chunks(limit=3)]


def test_int8_embeddings_are_close_to_fp32(paragraphs):
    texts = paragraphs[:12]
    fp32, int8 = MiniLM().embed_array(texts), MiniLM(int8=True).embed_array(texts)
    cos = (fp32 * int8).sum(1)  # both unit vectors
    assert cos.min() > 0.98, cos
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)


def test_bucketed_batches_keep_each_vector_with_its_text(paragraphs):
    # Lengths deliberately interleaved, batches of 2 run on 2 threads: row i must still be text i.
    texts = [paragraphs[0], "Paris.", paragraphs[5], "A cat.", paragraphs[9], "Lyon is a city in France.", paragraphs[2]]
    batched = MiniLM(threads=2, batch_size=2).embed_array(texts)
    alone = np.stack([MiniLM().embed_array([t])[0] for t in texts])
    assert ((batched * alone).sum(1) > 0.9999).all()
    assert [t for t, v in zip(texts, batched, strict=True) if (v @ alone.T).argmax() != texts.index(t)] == []


def test_length_buckets_sort_by_length_and_cover_every_index():
    lengths = [5, 1, 9, 1, 3, 7, 2]
    buckets = length_buckets(lengths, 3)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in buckets for i in b]
    assert flat == sorted(lengths) and [len(b) for b in buckets] == [3, 3, 1]


def test_bm25_finds_a_just_indexed_chunk_before_its_vector_exists(tmp_path):
    loc = tmp_path / "mem"
    planted = make_chunk("Harbour board", RARE, "planted")
    chunks = hotpotqa_chunks(limit=2) + [planted]  # the planted chunk is in the last window
    corpus = open_corpus(loc, "filling", create=True)
    seen = []

    def progress(n: int) -> None:
        if seen:
            return
        # Another reader (a fresh Corpus, as a second process would open) after the first window only.
        other = open_corpus(loc, "filling")
        hits = other.search("7QX9ZK", k=3)
        seen.append((hits[0].id if hits else None, hits.vector_fill, hits.note, other.store.get([planted.id])))

    report = index_corpus(corpus, chunks, threads=1, window=8, progress=progress)
    top, fill, note, stored = seen[0]
    assert top == planted.id and stored == []  # found by BM25 while Chroma does not hold it yet
    assert 0 < fill < 1 and note.startswith("vectors ") and "hybrid uses BM25 for the rest" in note
    assert report.added == len(chunks) and report.bm25_seconds > 0
    done = open_corpus(loc, "filling").search("7QX9ZK", k=3)
    assert done[0].id == planted.id and done.vector_fill == 1.0 and done.note is None
    assert not fill_file(corpus).exists()
    assert len(json.loads((bm25_dir(str(loc), "filling") / "ids.json").read_text())) == corpus.count()


def test_a_failed_fill_leaves_a_store_that_search_and_a_rerun_repair(tmp_path):
    chunks = hotpotqa_chunks(limit=2)
    corpus = open_corpus(tmp_path / "mem", "broken", create=True)
    real = MiniLM()

    class Dies:
        calls = 0

        def embed_array(self, texts):
            Dies.calls += 1
            if Dies.calls == 2:
                raise RuntimeError("killed")
            return real.embed_array(texts)

    with pytest.raises(RuntimeError):
        index_corpus(corpus, chunks, window=6, embedder=Dies())
    assert read_fill(corpus) is None and corpus.count() == 6
    fresh = open_corpus(tmp_path / "mem", "broken")
    assert len(fresh.bm25().ids) == 6  # rebuilt from what the store holds, not the announced chunks
    again = index_corpus(fresh, chunks, threads=1)
    assert (again.skipped_existing, again.added) == (6, len(chunks) - 6) and fresh.count() == len(chunks)


def test_index_command_shows_progress_with_rate_and_eta(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, c in enumerate(hotpotqa_chunks(limit=2)):
        (docs / f"p{i}.txt").write_text(c.text)
    exe = Path(sys.executable).with_name("agentrt")
    env = {**os.environ, "AGENTRT_HOME": str(tmp_path / "home")}
    out = subprocess.run([str(exe), "index", str(docs), "--threads", "2"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [line for line in out.stderr.splitlines() if line.startswith("indexing default: ")]
    assert steps and re.match(r"indexing default: (\d+)/\1 chunks, [\d.]+ chunks/s, ETA 0:00:00$", steps[-1]), steps
    summary = out.stdout.splitlines()[0]
    assert " chunks/s, MiniLM int8, 2 thread(s); BM25 searchable after " in summary
    fp32 = subprocess.run([str(exe), "index", str(docs), "--collection", "plain", "--no-quantize"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert fp32.returncode == 0 and "MiniLM fp32" in fp32.stdout, fp32.stderr[-2000:]
