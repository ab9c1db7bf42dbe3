"""``agentrt index`` (ingest files or the HotpotQA corpus into a collection) and ``agentrt search``.

The store is ``--store`` (a folder or http://HOST:PORT), else ``$AGENTRT_MEMORY``, else
``$AGENTRT_HOME/memory``. ``search`` without ``--collection`` uses the collection last indexed there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="index .txt/.md/.jsonl files (or --hotpotqa) into a memory collection")
    p.add_argument("path", nargs="?", help="a file or folder of .txt/.md/.jsonl files")
    p.add_argument("--hotpotqa", action="store_true", help="index the pooled HotpotQA dev corpus (CC BY-SA 4.0)")
    p.add_argument("--limit", type=int, help="with --hotpotqa: only the paragraphs of the first N questions")
    p.add_argument("--collection", help="collection name (default: hotpotqa for --hotpotqa, else default)")
    p.add_argument("--store", help="store folder or http://HOST:PORT (default: setting memory_store, $AGENTRT_MEMORY, $AGENTRT_HOME/memory)")
    p.add_argument("--threads", type=int, help="embedding threads (default: setting embed_threads; 0 = all cores)")
    p.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=None,
                   help="int8 MiniLM for the document vectors (default: setting embed_quantize)")
    p.set_defaults(func=cmd_index)

    s = sub.add_parser("search", help="hybrid (BM25 + vector) search of an indexed collection")
    s.add_argument("query", help="what to search for")
    s.add_argument("--collection", help="collection name (default: the one last indexed)")
    s.add_argument("-k", type=int, default=10, help="number of hits (default 10)")
    s.add_argument("--mode", choices=["hybrid", "vector", "bm25"], default="hybrid",
                   help="hybrid: BM25 and vectors fused by reciprocal rank (default); vector or bm25 alone")
    s.add_argument("--store", help="store folder or http://HOST:PORT (default: setting memory_store, $AGENTRT_MEMORY, $AGENTRT_HOME/memory)")
    s.add_argument("--json", action="store_true", help="print hits as JSON lines")
    s.set_defaults(func=cmd_search)


def _location(args: argparse.Namespace) -> str:
    from agentrt.core.config import load_settings
    from memory.corpus import resolve_location

    if args.store:
        return args.store
    return resolve_location(load_settings(args.config))


def _last_file(location: str) -> Path | None:
    from memory.corpus import bm25_dir

    d = bm25_dir(location, "x")
    return d.parent / "LAST_INDEXED" if d else None


def cmd_index(args: argparse.Namespace) -> int:
    import time

    from agentrt.core.config import all_cores, load_settings
    from memory.corpus import open_corpus
    from memory.indexer import index_corpus
    from memory.ingest import file_chunks, hotpotqa_chunks, iter_files

    t0 = time.perf_counter()
    if bool(args.path) == bool(args.hotpotqa):
        raise ConfigError("give either a PATH to index or --hotpotqa (see: agentrt index --help)")
    if args.threads is not None and args.threads < 0:
        raise ConfigError(f"--threads must be >= 0 (0 = all cores), got {args.threads}")
    settings = load_settings(args.config)
    threads = (args.threads if args.threads is not None else settings.embed_threads) or all_cores()
    int8 = settings.embed_quantize if args.quantize is None else args.quantize
    loc = _location(args)
    name = args.collection or ("hotpotqa" if args.hotpotqa else "default")
    if args.hotpotqa:
        chunks, files = hotpotqa_chunks(limit=args.limit), 1
    else:
        paths = iter_files(Path(args.path))
        chunks, files = [c for p in paths for c in file_chunks(p)], len(paths)  # reads all first: bad files fail early
    corpus = open_corpus(loc, name, create=True)
    with _progress(name, len(chunks), t0) as advance:
        report = index_corpus(corpus, chunks, threads=threads, int8=int8, progress=advance)
    report.files = files
    corpus.bm25()  # saved by the indexer; loading it here checks it matches the store
    last = _last_file(loc)
    if last:
        last.parent.mkdir(parents=True, exist_ok=True)
        last.write_text(name)
        # Kept for evals/bench/memory_bench.py (ingest speed of the run that built the index).
        (last.parent / f"{name}.ingest.json").write_text(json.dumps(report.to_dict()))
    wall = time.perf_counter() - t0
    model = f"MiniLM {'int8' if int8 else 'fp32'}, {threads} thread(s)"
    print(
        f"indexed {report.chunks_seen} chunks from {files} file(s) into '{name}' at {loc}: "
        f"{report.added} added, {report.skipped_existing} already there, {report.duplicates} duplicates; "
        f"{corpus.count()} in the collection ({wall:.1f} s, {report.chunks_seen / max(wall, 1e-9):.1f} chunks/s, "
        f"{model}; BM25 searchable after {report.bm25_seconds:.1f} s)"
    )
    print(f"filled collection '{name}': ask over it with `agentrt run --corpus {name} \"QUESTION\"`")
    return 0


class _progress:
    """Progress of an index run: a rich bar (chunks/s, ETA) on a terminal, else one line per step on
    stderr (logs and CI see the rate too). ``with _progress(...) as advance: advance(n)``."""

    def __init__(self, name: str, total: int, t0: float) -> None:
        self.name, self.total, self.t0 = name, total, t0
        self.done = 0
        self.first: tuple[float, int] | None = None  # (time, done) at the first step: rate excludes setup
        self.bar: Any = None

    def __enter__(self) -> Any:
        from rich.console import Console

        console = Console(stderr=True)
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            cols = (TextColumn("indexing {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TextColumn("ETA"), TimeRemainingColumn())
            self.bar = Progress(*cols, console=console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.name, total=self.total, rate="")
        return self.advance

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def advance(self, n: int) -> None:
        import time

        now = time.perf_counter()
        self.done += n
        ref = self.first or (self.t0, 0)
        rate = (self.done - ref[1]) / max(now - ref[0], 1e-9)
        if self.first is None:
            self.first = (now, self.done)
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        text = f"{rate:.1f} chunks/s"
        if self.bar is not None:
            self.bar.update(self.task, advance=n, rate=text)
        else:
            print(f"indexing {self.name}: {self.done}/{self.total} chunks, {text}, ETA {_clock(eta)}",
                  file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def cmd_search(args: argparse.Namespace) -> int:
    from memory.chroma import list_collections
    from memory.corpus import open_corpus

    loc = _location(args)
    name = args.collection
    if not name:
        last = _last_file(loc)
        name = last.read_text().strip() if last and last.is_file() else None
    if not name:
        have = list_collections(loc)
        if len(have) != 1:
            raise ConfigError(
                f"no collection given and {len(have)} in {loc} ({', '.join(sorted(have)) or 'none'}); "
                "pass --collection NAME or index something first with `agentrt index`"
            )
        name = have[0]
    hits = open_corpus(loc, name).search(args.query, k=args.k, mode=args.mode)
    from agentrt.app.terminal import printable

    for rank, h in enumerate(hits, 1):
        if args.json:
            print(json.dumps({"rank": rank, **h.to_dict()}, ensure_ascii=False))
            continue
        snippet = " ".join(h.text.split())
        snippet = snippet[:157] + "..." if len(snippet) > 160 else snippet
        print(printable(f"{rank:2d}. {h.score:.4f}  {h.id}  {h.title}\n    {snippet}"))  # documents: shown, not obeyed
    if not hits:
        print("no hits", file=sys.stderr)
    return 0
