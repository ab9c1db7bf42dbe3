"""Which corpus the plan route searches: ``--corpus NAME|PATH`` (run, chat, serve, eval) and the setting.

* ``NAME``: a collection that exists in the memory store (``agentrt index ... --collection NAME``).
* ``PATH``: a .txt/.md/.jsonl file or a folder of them, indexed once into a collection named after it
  and its content (``<stem>-<sha1 of the files, 10 hex>``): the same files reuse the collection, changed
  files get a new one, so a stale index is never searched.

Everything here runs before a model loads, so a missing path or an unknown collection costs a second
(opening the store), not the model load: one line naming the collections that exist, exit code 2.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from pathlib import Path

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError, InputError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]")  # Chroma's rule (memory.chroma._check_name)
_SUFFIXES = (".txt", ".md", ".jsonl")
_LOCK = threading.Lock()  # concurrent eval tasks wait for one indexing
_INDEXED: dict[tuple[str, str], int] = {}  # (store, collection) -> passages, indexed by this process
_WROTE: list[str] = []  # collections this process wrote to (a fast exit waits for none of them)


def wrote_this_process() -> bool:
    """True once this process has written passages into a store (``index_path``)."""
    return bool(_WROTE)


def looks_like_path(spec: str) -> bool:
    """Written like a path: a separator, a leading ``.`` or ``~``, or an indexable suffix. A bare word is
    a collection NAME first; ``resolve_corpus`` indexes a file or folder of that name only when no
    collection has it."""
    return "/" in spec or spec.startswith(("~", ".")) or spec.endswith(_SUFFIXES)


def check_name(name: str) -> None:
    """A valid collection name, else an InputError that says the rule."""
    if not _NAME.fullmatch(name or ""):
        raise InputError(f"bad corpus name {name!r}: use 3-512 letters, digits, '.', '_' or '-', starting and ending "
                         "with a letter or digit")


def content_digest(files: list[Path], root: Path) -> str:
    """sha1 over each file's path (relative to ``root``) and bytes, in sorted order: the cache key."""
    h = hashlib.sha1()
    for f in sorted(files):
        rel = f.name if f == root else str(f.relative_to(root))
        h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def collection_for(path: Path) -> str:
    """The collection a file or folder is indexed into: its stem and a digest of its content."""
    from memory.ingest import iter_files

    path = path.expanduser().resolve()
    files = iter_files(path)  # InputError: missing, empty folder, a suffix it cannot index
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.stem if path.is_file() else path.name)[:40].strip("-_")
    return f"{stem or 'corpus'}-{content_digest(files, path)[:10]}"


def existing(location: str) -> list[str]:
    """The collections in the store at ``location``; none when a local store folder does not exist yet
    (it is not created just to be listed)."""
    if location != ":memory:" and not location.startswith(("http://", "https://")) \
            and not Path(location).expanduser().exists():
        return []
    from memory.chroma import list_collections

    return sorted(list_collections(location))


def require_collection(settings: Settings, name: str) -> None:
    """A ConfigError (exit 2) naming the collections that exist, unless ``name`` is one of them."""
    from memory.corpus import resolve_location

    check_name(name)
    location = resolve_location(settings)
    have = existing(location)
    if name not in have:
        raise ConfigError(f"no collection {name!r} in memory store {location} (have: {', '.join(have) or 'none'}); "
                          f"pass --corpus with one of those, --corpus PATH to index files, or create it with "
                          f"`agentrt index PATH --collection {name}`")


def index_path(settings: Settings, path: str | Path, *, name: str | None = None,
               progress: Callable[[int], None] | None = None,
               announce: Callable[[str], None] | None = None) -> tuple[str, int]:
    """Index a file or folder (once: a collection that already holds its passages is reused) and build
    its BM25 cache (the router's coverage feature reads it). Returns (collection, passages)."""
    from memory.corpus import open_corpus, resolve_location
    from memory.ingest import file_chunks, ingest, iter_files

    path = Path(path).expanduser().resolve()
    name = name or collection_for(path)
    location = resolve_location(settings)
    key = (location, name)
    with _LOCK:
        if key in _INDEXED:
            return name, _INDEXED[key]
        chunks = [c for f in iter_files(path) for c in file_chunks(f)]  # bad files fail before anything is written
        corpus = open_corpus(location, name, create=True)
        if corpus.count() < len({c.id for c in chunks}):  # new, or a killed earlier index: continue it
            if announce is not None:
                announce(f"indexing {path} into collection '{name}' (once: reused while the files are unchanged)")
            _WROTE.append(name)
            ingest(corpus.store, chunks, progress=progress)
            corpus.invalidate()
        corpus.bm25()
        _INDEXED[key] = corpus.count()
        return name, _INDEXED[key]


def resolve_corpus(settings: Settings, spec: str | None, *, announce: Callable[[str], None] | None = None) -> str:
    """The collection ``--corpus spec`` names (``spec`` None: ``settings.corpus``, unchecked here).

    A PATH is indexed (once) and its derived collection returned; a NAME must exist in the store (a bare
    word that names no collection but an existing file or folder is indexed as a PATH). ``announce(line)``
    hears when files are being indexed (the CLI prints it to stderr).
    """
    from memory.corpus import resolve_location

    if spec is None:
        return settings.corpus
    spec = spec.strip()
    if not spec:
        raise InputError("--corpus is empty; give a collection name or a file/folder to index")
    path = Path(spec).expanduser()
    if not looks_like_path(spec):
        check_name(spec)
        if spec in existing(resolve_location(settings)) or not path.exists():
            require_collection(settings, spec)
            return spec
    if not path.exists():
        location = resolve_location(settings)
        have = ", ".join(existing(location)) or "none"
        raise InputError(f"--corpus {spec}: no such file or folder; give a .txt/.md/.jsonl file, a folder of them, "
                         f"or a collection of memory store {location} (have: {have})")
    return index_path(settings, path, announce=announce)[0]


def titles(settings: Settings, ids: list[str]) -> list[dict[str, str]]:
    """``[{id, title}]`` for cited passage ids, looked up in ``settings.corpus`` (ids it lacks keep an
    empty title). Never raises: citations are shown even when the store cannot be read."""
    if not ids:
        return []
    found: dict[str, str] = {}
    try:
        from memory.corpus import open_corpus

        corpus = open_corpus(settings, settings.corpus)
        for hit in corpus.store.get(list(ids)):
            found[hit.id] = str((hit.metadata or {}).get("title", ""))
    except Exception:  # noqa: BLE001 - a label, not the answer: fall back to the bare ids
        pass
    return [{"id": i, "title": found.get(i, "")} for i in ids]


__all__ = ["check_name", "collection_for", "content_digest", "existing", "index_path", "looks_like_path",
           "require_collection", "resolve_corpus", "titles", "wrote_this_process"]
