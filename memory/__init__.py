"""Vector memory on ChromaDB: stores, embeddings, corpora (hybrid BM25 + vector search), episodic and
semantic memory, context compression.

Importing ``memory`` is light (no chromadb, onnxruntime or numpy); the heavy parts load on first use.

    from memory import open_corpus, open_store, EpisodicMemory, SemanticMemory, compress_messages
    corpus = open_corpus(settings_or_path, "hotpotqa")      # memory.corpus.Corpus
    hits = corpus.search("Which magazine was started first?", k=10)   # [Hit(id, text, score, metadata)]

Stores are picked by location: a folder (embedded Chroma), ``http://HOST:PORT`` (a Chroma server) or
``":memory:"`` (in-process, for tests).
"""

from __future__ import annotations

from typing import Any

from memory.protocol import Hit, MemoryStore, memory_op

__all__ = [
    "Hit",
    "MemoryStore",
    "memory_op",
    "open_store",
    "open_corpus",
    "index_corpus",
    "EpisodicMemory",
    "SemanticMemory",
    "compress_messages",
    "Notes",
]

_LAZY = {
    "open_store": "memory.chroma",
    "open_corpus": "memory.corpus",
    "index_corpus": "memory.indexer",
    "Corpus": "memory.corpus",
    "EpisodicMemory": "memory.episodic",
    "SemanticMemory": "memory.semantic",
    "compress_messages": "memory.compress",
    "Notes": "memory.notes",
}


def __getattr__(name: str) -> Any:
    # PEP 562: heavy submodules are imported the first time one of their names is used.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memory' has no attribute {name!r}")
