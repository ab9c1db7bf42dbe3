"""A searchable corpus: a Chroma collection plus a BM25 index over the same chunks, fused by
reciprocal rank fusion (RRF). Exact rare tokens (ids, names, codes) are BM25's strength; paraphrases
are the vectors'; RRF needs no score calibration between the two.

The BM25 index is a cache: it lives beside the store (``<store>.bm25/<collection>/``, or under
``$AGENTRT_HOME/bm25/`` for a server) and is rebuilt from the collection when its item count differs.
While ``memory.indexer.index_corpus`` fills in vectors, BM25 already knows every new chunk: hybrid search
fuses BM25 with the vectors written so far, and the result says so (``Hits.vector_fill`` < 1, a log line).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any, Literal

from agentrt.core.errors import InputError, missing_extra
from memory.protocol import Hit

Mode = Literal["hybrid", "vector", "bm25"]
RRF_K = 60  # the constant from Cormack et al. (2009); robust across corpora
log = logging.getLogger("memory.corpus")


class Hits(list):  # type: ignore[type-arg]
    """A search result: a list of Hits, best first, plus ``vector_fill`` (the share of the collection
    that has vectors: < 1.0 while `agentrt index` is still embedding) and ``note`` (why, when < 1)."""

    vector_fill: float = 1.0
    note: str | None = None


def default_location() -> str:
    """``$AGENTRT_MEMORY`` if set (a folder or http://HOST:PORT), else ``$AGENTRT_HOME/memory``."""
    env = os.environ.get("AGENTRT_MEMORY")
    if env:
        return env
    home = os.environ.get("AGENTRT_HOME")
    return str((Path(home).expanduser() if home else Path.home() / ".cache" / "agentrt") / "memory")


def resolve_location(settings_or_path: Any = None) -> str:
    """A store location from a path/URL string, a Settings-like object (its ``memory_store``, else
    ``$AGENTRT_MEMORY``, else ``home``/memory), or None (the default)."""
    if settings_or_path is None:
        return default_location()
    if isinstance(settings_or_path, (str, Path)):
        return str(settings_or_path)
    loc = getattr(settings_or_path, "memory_store", None) or os.environ.get("AGENTRT_MEMORY")
    if loc:
        return str(loc)
    home = getattr(settings_or_path, "home", None)
    if home is None:
        raise InputError(f"cannot find a memory location in {type(settings_or_path).__name__}; pass a path or URL")
    return str(Path(home) / "memory")


def bm25_dir(location: str, name: str) -> Path | None:
    """Where the BM25 cache of ``name`` lives; None for an ephemeral store (kept in memory only)."""
    if location == ":memory:":
        return None
    if location.startswith(("http://", "https://")):
        home = os.environ.get("AGENTRT_HOME")
        base = (Path(home).expanduser() if home else Path.home() / ".cache" / "agentrt") / "bm25"
        slug = re.sub(r"[^A-Za-z0-9]+", "_", location).strip("_") + "-" + hashlib.sha1(location.encode()).hexdigest()[:8]
        return base / slug / name
    p = Path(location).expanduser()
    return p.parent / f"{p.name}.bm25" / name


def _tokenize(texts: list[str]) -> Any:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", show_progress=False, return_ids=False)


class BM25Index:
    """bm25s over (id, text) pairs, saved as files so reopening costs ~1 s instead of a rebuild."""

    def __init__(self, retriever: Any, ids: list[str]) -> None:
        self.retriever = retriever
        self.ids = ids

    @classmethod
    def build(cls, ids: list[str], texts: list[str]) -> BM25Index:
        try:
            import bm25s
        except ImportError:
            raise missing_extra("bm25s", "memory") from None
        r = bm25s.BM25()
        if texts:
            r.index(_tokenize(texts), show_progress=False)
        return cls(r, ids)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.ids:
            self.retriever.save(str(tmp), show_progress=False)
        (tmp / "ids.json").write_text(json.dumps(self.ids))
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)  # readers see the old index or the new one, never half of one

    @classmethod
    def load(cls, path: Path) -> BM25Index | None:
        try:
            import bm25s

            ids = json.loads((path / "ids.json").read_text())
            r = bm25s.BM25.load(str(path), show_progress=False) if ids else bm25s.BM25()
            return cls(r, ids)
        except (OSError, ValueError):
            return None  # missing or damaged cache: the caller rebuilds it

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        if not self.ids:
            return []
        toks = [t for t in _tokenize([query])[0] if t in self.retriever.vocab_dict]
        if not toks:
            return []
        docs, scores = self.retriever.retrieve([toks], k=min(k, len(self.ids)), show_progress=False, n_threads=1)
        return [(self.ids[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def rrf(rankings: list[list[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank), rank from 1."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda x: -x[1])


class Corpus:
    """Hybrid search over one collection. ``search(query, k)`` -> best-first Hits (id, title, text, score)."""

    def __init__(self, store: Any, location: str) -> None:
        self.store = store
        self.name: str = store.name
        self.location = location
        self._bm25: BM25Index | None = None
        self._lock = threading.Lock()
        self._fill_cache: tuple[Any, dict[str, Any]] | None = None
        self._noted: str | None = None

    def __repr__(self) -> str:
        return f"Corpus({self.name!r} at {self.location!r})"

    @property
    def bm25_path(self) -> Path | None:
        """Where the BM25 cache lives (None for an ephemeral store)."""
        return bm25_dir(self.location, self.name)

    def count(self) -> int:
        return self.store.count()

    def get(self, id: str) -> Hit | None:
        """The chunk with this id, or None."""
        hits = self.store.get([id])
        return hits[0] if hits else None

    def bm25(self) -> BM25Index:
        """The BM25 index, loaded from its cache or rebuilt when stale (item count changed; while
        vectors fill in, the count the indexer announced)."""
        from memory.fill import read_fill

        with self._lock:
            fill = read_fill(self)
            n = fill["before"] + fill["total"] if fill else self.store.count()
            if self._bm25 is not None and len(self._bm25.ids) == n:
                return self._bm25
            path = bm25_dir(self.location, self.name)
            if path is None:
                self._bm25 = self._build()
                return self._bm25
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.parent / f".{self.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one process builds; the others load its result
                idx = BM25Index.load(path)
                if idx is None or len(idx.ids) != n:
                    idx = self._build()
                    if not fill:  # while filling, only the indexer saves (its index has the new chunks)
                        idx.save(path)
            self._bm25 = idx
            return idx

    def begin_fill(self, new: list[tuple[str, str]]) -> None:
        """Build and save the BM25 index over the stored items plus ``new`` (id, text) pairs before
        their vectors exist (called by memory.indexer before it writes its fill record)."""
        ids, texts = self._stored_texts()
        known = set(ids)
        for i, t in new:
            if i not in known:
                ids.append(i)
                texts.append(t)
        idx = BM25Index.build(ids, texts)
        path = bm25_dir(self.location, self.name)
        with self._lock:
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path.parent / f".{self.name}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    idx.save(path)
            self._bm25 = idx

    def vector_fill(self) -> float:
        """Share of the collection with vectors: 1.0 unless an indexing run is still embedding."""
        from memory.fill import read_fill

        fill = read_fill(self)
        if not fill:
            return 1.0
        done = self.store.count() - fill["before"]
        return max(0.0, min(1.0, done / max(fill["total"], 1)))

    def _build(self) -> BM25Index:
        return BM25Index.build(*self._stored_texts())

    def _stored_texts(self) -> tuple[list[str], list[str]]:
        ids: list[str] = []
        texts: list[str] = []
        for page_ids, docs, metas in self.store.iter_all():
            for i, d, m in zip(page_ids, docs, metas, strict=True):
                title = (m or {}).get("title", "")
                ids.append(i)
                texts.append(f"{title}: {d}" if title else (d or ""))
        return ids, texts

    def invalidate(self) -> None:
        """Forget the BM25 index (call after writing to the collection from this process)."""
        with self._lock:
            self._bm25 = None

    def search(self, query: str, k: int = 10, mode: Mode = "hybrid", *, depth: int | None = None) -> Hits:
        """Top ``k`` chunks for ``query``. ``mode``: "hybrid" (BM25 + vectors, RRF), "vector" or "bm25".
        ``depth`` is how many candidates each retriever contributes to the fusion (default max(50, 5k)).
        While vectors are still being filled in, hybrid fuses what is there and BM25 covers the rest:
        the result's ``vector_fill`` and ``note`` say so."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("search query is empty; give some text to search for")
        if k < 1:
            raise InputError(f"k must be >= 1, got {k}")
        if mode not in ("hybrid", "vector", "bm25"):
            raise InputError(f"unknown search mode {mode!r}; use hybrid, vector or bm25")
        fill = self.vector_fill() if mode != "bm25" else 1.0
        if mode == "vector":
            out = Hits(self.store.search(query, k))
        else:
            depth = depth or max(50, 5 * k)
            lexical = self.bm25().search(query, depth if mode == "hybrid" else k)
            if mode == "bm25":
                out = self._hits(lexical[:k])
            else:
                dense = self.store.search(query, depth)
                fused = rrf([[i for i, _ in lexical], [h.id for h in dense]])[:k]
                out = self._hits(fused, {h.id: h for h in dense})
        if fill < 1.0:
            rest = "hybrid uses BM25 for the rest" if mode == "hybrid" else "vector search sees only those"
            out.vector_fill, out.note = fill, f"vectors {fill:.0%} filled: {rest}"
            if out.note != self._noted:  # once per step, not once per search of a busy plan route
                self._noted = out.note
                log.warning("collection '%s': %s", self.name, out.note)
        return out

    def _pending(self) -> dict[str, Any]:
        """Texts of chunks the running indexer has announced (BM25 knows them; Chroma may not yet)."""
        from memory.fill import fill_file, read_pending

        path = fill_file(self)
        try:
            stamp = path.stat().st_mtime_ns if path is not None else None
        except OSError:
            return {}
        if stamp is None or self._fill_cache is None or self._fill_cache[0] != stamp:
            self._fill_cache = (stamp, read_pending(self))
        return self._fill_cache[1]

    def _hits(self, ranked: list[tuple[str, float]], known: dict[str, Hit] | None = None) -> Hits:
        known = dict(known or {})
        missing = [i for i, _ in ranked if i not in known]
        for h in self.store.get(missing):
            known[h.id] = h
        if any(i not in known for i in missing):
            pending = self._pending()
            for i in missing:
                if i not in known and i in pending:
                    title, text, meta = pending[i]
                    known[i] = Hit(i, text, 1.0, dict(meta or {"title": title}))
        out = Hits()
        for i, score in ranked:
            h = known.get(i)
            if h is not None:  # an id BM25 knows but the store lost (deleted since): skip it
                out.append(Hit(h.id, h.text, score, h.metadata))
        return out


def open_corpus(settings_or_path: Any = None, name: str = "default", *, create: bool = False) -> Corpus:
    """Open the corpus ``name`` at a location (path, http://HOST:PORT, ``:memory:``, a Settings, or
    None for ``$AGENTRT_MEMORY`` / ``$AGENTRT_HOME/memory``). A missing collection is a ConfigError
    unless ``create``."""
    from memory.chroma import open_store

    loc = resolve_location(settings_or_path)
    return Corpus(open_store(loc, name, create=create), loc)
