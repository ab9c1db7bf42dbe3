"""ChromaDB stores: embedded (a folder), a Chroma server (a URL), or ephemeral (in-process, for tests).

One class, three clients. The store is picked by a location string:

* ``"http://host:port"`` / ``"https://..."``  -> ``chromadb.HttpClient``
* ``":memory:"``                              -> ``chromadb.EphemeralClient``
* anything else                               -> ``chromadb.PersistentClient(path)``

Collections use cosine space and the MiniLM embedding function below, registered with Chroma so a
collection reopened in a new process (or through the server) finds its embedding function by name.
"""

from __future__ import annotations

import errno
import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agentrt.core.errors import AgentrtError, BackendError, ConfigError, InputError, missing_extra
from memory.embeddings import get_embedder
from memory.protocol import Hit, Metadata

try:
    import chromadb
    from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
    from chromadb.config import Settings as ChromaSettings
    from chromadb.utils.embedding_functions import register_embedding_function
except ImportError:  # pragma: no cover - exercised only without the extra
    raise missing_extra("chromadb", "memory") from None

EPHEMERAL = ":memory:"
EF_NAME = "agentrt-minilm-onnx"


@register_embedding_function
class MiniLMEmbeddingFunction(EmbeddingFunction[Documents]):
    """all-MiniLM-L6-v2 on onnxruntime (see memory.embeddings); registered so reopened collections work."""

    def __init__(self) -> None:
        self._embedder = None

    def __call__(self, input: Documents) -> Embeddings:
        if self._embedder is None:  # lazy: opening a collection must not load the model
            self._embedder = get_embedder()
        return list(self._embedder.embed_array(list(input)))

    @staticmethod
    def name() -> str:
        return EF_NAME

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def supported_spaces(self) -> list[str]:  # type: ignore[override]
        return ["cosine"]

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbeddingFunction:
        return MiniLMEmbeddingFunction()

    def get_config(self) -> dict[str, Any]:
        return {}


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _settings() -> Any:
    return ChromaSettings(anonymized_telemetry=False, allow_reset=True)


def open_client(location: str | Path) -> Any:
    """A Chroma client for ``location`` (cached per location; Chroma itself wants one per path)."""
    loc = str(location)
    with _clients_lock:
        if loc in _clients:
            return _clients[loc]
        if loc.startswith(("http://", "https://")):
            u = urlparse(loc)
            if not u.hostname:
                raise ConfigError(f"bad Chroma server URL {loc!r}; use http://HOST:PORT")
            try:
                client = chromadb.HttpClient(
                    host=u.hostname, port=u.port or 8000, ssl=u.scheme == "https", settings=_settings()
                )
                client.heartbeat()
            except Exception as e:
                raise BackendError(
                    f"Chroma server at {loc} is unreachable ({type(e).__name__}); start it with "
                    f"`chroma run --path DIR --host {u.hostname} --port {u.port or 8000}`"
                ) from None
        elif loc == EPHEMERAL:
            client = chromadb.EphemeralClient(settings=_settings())
        else:
            path = Path(loc).expanduser()
            if path.exists() and not path.is_dir():
                raise ConfigError(f"memory store path {path} is a file; give a folder (or http://HOST:PORT)")
            try:
                path.mkdir(parents=True, exist_ok=True)
                client = chromadb.PersistentClient(path=str(path), settings=_settings())
                client.list_collections()  # touches the database: a damaged folder fails here, not later
            except Exception as e:
                if _disk_full(e):
                    raise ConfigError(_full_disk_message(path, e)) from None
                raise ConfigError(
                    f"memory store at {path} is damaged or unreadable ({type(e).__name__}: {_short(e)}); "
                    "move it away and re-index"
                ) from None
        _clients[loc] = client
        return client


def _forget_client(location: str | Path) -> None:
    with _clients_lock:
        _clients.pop(str(location), None)


def _short(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:160] if str(e).strip() else ""


def _disk_full(e: BaseException | None) -> bool:
    """Whether ``e`` (or what caused it) is a full disk or quota: SQLite and Chroma's Rust layer say it in words."""
    seen = 0
    while e is not None and seen < 8:
        text = str(e).lower()
        if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in text \
                or "no space left" in text or "quota exceeded" in text:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _full_disk_message(path: Any, e: BaseException) -> str:
    return (f"the disk holding the memory store at {path} is full ({type(e).__name__}: {_short(e)}); the store is "
            "not damaged: free disk space (or move the store to another disk) and run it again")


def _check_name(name: str) -> None:
    # Chroma's rule: 3-512 chars of [a-zA-Z0-9._-], starting and ending alphanumeric.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]", name or ""):
        raise InputError(
            f"bad collection name {name!r}: use 3-512 letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )


def _store_errors(fn: Any) -> Any:
    """Turn Chroma's own failures (a damaged segment, a server that went away) into one-line RunErrors;
    our InputErrors pass through."""
    import functools

    @functools.wraps(fn)
    def wrapper(self: ChromaStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except AgentrtError:
            raise
        except Exception as e:  # noqa: BLE001 - anything else from Chroma is a store failure
            if _disk_full(e):
                raise BackendError(_full_disk_message(self.location, e)) from None
            hint = ("check that the Chroma server is up (the next call reconnects once it is)"
                    if self.location.startswith(("http://", "https://")) else
                    "if the folder is damaged, move it away and re-index")
            raise BackendError(
                f"memory store '{self.name}' at {self.location} failed in {fn.__name__} "
                f"({type(e).__name__}: {_short(e)}); {hint}"
            ) from None

    return wrapper


class ChromaStore:
    """A MemoryStore on one Chroma collection (embedded, server or ephemeral)."""

    def __init__(self, client: Any, collection: Any, location: str) -> None:
        self._client = client
        self._col = collection
        self.location = location
        self.name: str = collection.name
        self._batch = max(1, min(int(client.get_max_batch_size()), 5000))

    def __repr__(self) -> str:
        return f"ChromaStore({self.name!r} at {self.location!r}, {self.count()} items)"

    # -- writing ---------------------------------------------------------------------------
    def add(self, ids: list[str], texts: list[str], metadatas: list[Metadata] | None = None) -> None:
        """Insert new items; an id that repeats or exists already is an InputError (nothing written)."""
        ids, texts, metadatas = _validate(ids, texts, metadatas)
        existing = self.existing_ids(ids)
        if existing:
            raise InputError(
                f"{len(existing)} id(s) already stored in '{self.name}' (e.g. {existing[0]!r}); "
                "use upsert to replace them"
            )
        self._write("add", ids, texts, metadatas, None)

    def upsert(
        self,
        ids: list[str],
        texts: list[str],
        metadatas: list[Metadata] | None = None,
        embeddings: Any = None,
    ) -> None:
        """Insert or replace. ``embeddings`` (n x 384) skips the model when the caller has vectors."""
        ids, texts, metadatas = _validate(ids, texts, metadatas)
        self._write("upsert", ids, texts, metadatas, embeddings)

    @_store_errors
    def _write(self, how: str, ids: list[str], texts: list[str], metas: list[Metadata] | None, emb: Any) -> None:
        fn = self._col.add if how == "add" else self._col.upsert
        for s in range(0, len(ids), self._batch):
            e = slice(s, s + self._batch)
            kw: dict[str, Any] = {"ids": ids[e], "documents": texts[e]}
            if metas is not None:
                kw["metadatas"] = [m or None for m in metas[e]]
            if emb is not None:
                kw["embeddings"] = emb[e]
            try:
                fn(**kw)
            except ValueError as err:  # Chroma validation (bad metadata types, ...)
                raise InputError(f"Chroma refused the items: {_short(err)}") from None

    @_store_errors
    def delete(self, ids: list[str]) -> None:
        if ids:
            self._col.delete(ids=list(dict.fromkeys(ids)))

    # -- reading ---------------------------------------------------------------------------
    @_store_errors
    def count(self) -> int:
        return int(self._col.count())

    @_store_errors
    def existing_ids(self, ids: list[str]) -> list[str]:
        """Which of ``ids`` are stored (order of ``ids``)."""
        found: set[str] = set()
        for s in range(0, len(ids), self._batch):
            found.update(self._col.get(ids=list(dict.fromkeys(ids[s : s + self._batch])), include=[])["ids"])
        return [i for i in ids if i in found]

    @_store_errors
    def get(self, ids: list[str]) -> list[Hit]:
        if not ids:
            return []
        res = self._col.get(ids=list(dict.fromkeys(ids)), include=["documents", "metadatas"])  # Chroma refuses repeats
        by_id = {
            i: Hit(i, d or "", 1.0, dict(m or {}))
            for i, d, m in zip(res["ids"], res["documents"], res["metadatas"], strict=True)
        }
        return [by_id[i] for i in ids if i in by_id]

    def search(self, query: str, k: int = 10, where: dict[str, Any] | None = None) -> list[Hit]:
        """Vector search: the ``k`` nearest items by cosine similarity (score = 1 - cosine distance)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("search query is empty; give some text to search for")
        return self.search_vector(get_embedder().embed_array([query])[0], k, where)

    @_store_errors
    def search_vector(self, vector: Any, k: int = 10, where: dict[str, Any] | None = None) -> list[Hit]:
        """Search with a precomputed query vector (the store-only part of a query)."""
        if k < 1:
            raise InputError(f"k must be >= 1, got {k}")
        try:
            res = self._col.query(
                query_embeddings=[vector], n_results=k, where=where or None,
                include=["documents", "metadatas", "distances"],
            )
        except ValueError as err:
            raise InputError(f"bad search filter {where!r}: {_short(err)}") from None
        return [
            Hit(i, d or "", 1.0 - float(dist), dict(m or {}))
            for i, d, m, dist in zip(
                res["ids"][0], res["documents"][0], res["metadatas"][0], res["distances"][0], strict=True
            )
        ]

    def iter_all(self, batch: int = 5000, include_text: bool = True) -> Any:
        """Yield (ids, texts, metadatas) pages over the whole collection (for building BM25)."""
        total = self.count()
        inc = ["documents", "metadatas"] if include_text else ["metadatas"]
        for off in range(0, total, batch):
            res = self._col.get(limit=batch, offset=off, include=inc)
            yield res["ids"], res.get("documents") or [""] * len(res["ids"]), res["metadatas"]


def _validate(
    ids: list[str], texts: list[str], metadatas: list[Metadata] | None
) -> tuple[list[str], list[str], list[Metadata] | None]:
    ids, texts = list(ids), list(texts)
    if len(ids) != len(texts) or (metadatas is not None and len(metadatas) != len(ids)):
        raise InputError("ids, texts and metadatas must have the same length")
    for i, t in zip(ids, texts, strict=True):
        if not isinstance(i, str) or not i:
            raise InputError(f"bad id {i!r}: ids are non-empty strings")
        if not isinstance(t, str) or not t.strip():
            raise InputError(f"item {i!r} has empty text; memory stores only non-empty texts")
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"id {dup!r} appears more than once in one call; ids must be unique")
    return ids, texts, list(metadatas) if metadatas is not None else None


def open_store(location: str | Path, name: str, *, create: bool = True) -> ChromaStore:
    """Open (or create) the collection ``name`` at ``location`` (folder, ``http://HOST:PORT`` or ``:memory:``).

    With ``create=False`` a missing collection is a ConfigError that lists what exists.
    """
    _check_name(name)
    client = open_client(location)
    ef = MiniLMEmbeddingFunction()
    try:
        if create:
            col = client.get_or_create_collection(name, embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
        else:
            col = client.get_collection(name, embedding_function=ef)
    except Exception as e:
        if type(e).__name__ == "NotFoundError" or (not create and "not exist" in str(e).lower()):
            have = ", ".join(sorted(list_collections(location))) or "none"
            raise ConfigError(
                f"no collection '{name}' in memory store {location} (have: {have}); create it with `agentrt index`"
            ) from None
        raise ConfigError(f"cannot open collection '{name}' at {location}: {type(e).__name__}: {_short(e)}") from None
    return ChromaStore(client, col, str(location))


def list_collections(location: str | Path) -> list[str]:
    """Names of the collections at ``location``."""
    return [c.name for c in open_client(location).list_collections()]


def drop_collection(location: str | Path, name: str) -> None:
    """Delete a collection (no error when it does not exist)."""
    try:
        open_client(location).delete_collection(name)
    except Exception:  # noqa: BLE001 - missing is fine: the goal state is reached
        pass
