"""The private index as the routes and the router see it: the corpus ``settings.corpus`` of the run's memory
store, opened once per (location, name) and kept (reopening Chroma and the BM25 cache costs seconds).

The plan route's searchers, the reason route's search tool (``toolcall.safe_tools``) and the router's index
features (``corpus_signals``) all read it through here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError
from agentrt.router.features import index_signals

_CORPORA: dict[tuple[str, str], Any] = {}


def open_corpus_for(settings: Settings) -> Any:
    """The corpus ``settings.corpus`` (opened on first use; a missing collection is a ConfigError)."""
    from memory.corpus import resolve_location

    key = (resolve_location(settings), getattr(settings, "corpus", "default"))
    if key not in _CORPORA:
        _CORPORA[key] = open_corpus_at(*key)
    return _CORPORA[key]


def local_corpus(settings: Settings) -> Any:
    """The corpus ``settings.corpus`` when a local index of it exists (kept open per location and name), else
    None; nothing is opened or created when there is none."""
    from memory.corpus import bm25_dir, resolve_location

    location = resolve_location(settings)
    name = getattr(settings, "corpus", "default")
    if location == ":memory:" or location.startswith(("http://", "https://")) or not Path(location).exists():
        return None
    cache = bm25_dir(location, name)
    if cache is None or not cache.exists():  # never indexed and searched here: no lexical index to ask
        return None
    key = (location, name)
    if key not in _CORPORA:
        try:
            _CORPORA[key] = open_corpus_at(location, name)
        except ConfigError:
            return None
    return _CORPORA[key]


def can_search(settings: Settings) -> bool:
    """Whether the corpus ``settings.corpus`` can be searched: a server's collections are not checked here
    (its search reports a missing one), a local one must have been indexed."""
    from memory.corpus import resolve_location

    location = resolve_location(settings)
    return location.startswith(("http://", "https://")) or local_corpus(settings) is not None


def routable(settings: Settings) -> tuple[str, ...] | None:
    """The actions a router may choose over ``settings.corpus``: all (None) when it can be searched, else every
    action but the index routes (plan and read search it: with nothing to search they would only fail)."""
    from agentrt.core.types import INDEX_ROUTES, ROUTES

    return None if can_search(settings) else tuple(a for a in ROUTES if a not in INDEX_ROUTES)


def corpus_signals(settings: Settings) -> Callable[[str], dict[str, float]] | None:
    """The router's index features over the corpus ``settings.corpus`` (``agentrt.router.features.index_signals``):
    its top 10 BM25 passages (word coverage, entities found, the best score) and the best vector hit's cosine
    similarity. None when no local index exists (nothing is opened then). About 15 ms a question: one BM25
    query, one query embedding, one vector lookup."""
    corpus = local_corpus(settings)
    if corpus is None:
        return None

    def signals(question: str) -> dict[str, float]:
        lexical = [(h.title, h.text, h.score) for h in corpus.search(question, 10, mode="bm25")]
        try:
            dense = corpus.search(question, 1, mode="vector")
        except Exception:  # noqa: BLE001 - no vectors yet (still filling) or no embedder: BM25 alone decides
            dense = []
        return index_signals(question, lexical, dense[0].score if dense else None)

    return signals


def open_corpus_at(location: str, name: str) -> Any:
    from memory.corpus import open_corpus

    return open_corpus(location, name)
