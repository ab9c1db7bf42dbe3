"""What the benches share: their argument parser, where they find the converted model and their results,
the resume caches (JSON lines) and the tables they print.

Every bench runs as a module from the checkout (``python -m evals.bench.<name>``), so each imports the
project, this module and its sibling benches by their package names; none edits ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: benches start subprocesses and read data from it
DEFAULT_HOME = Path.home() / ".cache" / "agentrt"  # the CLI's default AGENTRT_HOME


def parser(doc: str | None, *, whole: bool = False) -> argparse.ArgumentParser:
    """The bench's parser: its docstring's first paragraph as the description (``whole``: all of it, as written)."""
    if whole:
        return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0].strip() or None)


def home() -> Path:
    """``$AGENTRT_HOME`` or the CLI's default: where ``agentrt`` itself keeps its models and indexes."""
    from agentrt.core.config import default_home

    return default_home()


def reuse_converted_model(env: dict[str, str] | None = None) -> dict[str, str]:
    """Point ``AGENTRT_MODELS_DIR`` at the default home's models unless it is set, so a bench with its own
    scratch home converts the embedded model once, not per run. Changes ``env`` (default: this process's
    environment) and returns it."""
    target: Any = os.environ if env is None else env
    target.setdefault("AGENTRT_MODELS_DIR", str(DEFAULT_HOME / "models"))
    return target


def embedded_path(models_dir: Path | str) -> Path:
    """The embedded model's converted folder under ``models_dir`` (converted on first use, ~30 s)."""
    from agentrt.backends.embedded import embedded_model_path  # the one place the benches name it

    return embedded_model_path(Path(models_dir))


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file (a bench's resume cache); none when it does not exist yet."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_jsonl(path: Path | str, row: Mapping[str, Any]) -> None:
    """Add one row to a resume cache at once, so a killed bench keeps what it finished."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def results_file(name: str) -> tuple[Path, dict[str, Any]]:
    """``$AGENTRT_HOME/bench/<name>.json`` and what it holds: sections a run skips keep their last figures."""
    path = home() / "bench" / f"{name}.json"
    return path, (json.loads(path.read_text()) if path.is_file() else {})


def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]] = (), *, right: bool = False) -> Any:
    """A rich table with these columns (``right``: right-aligned, for numbers) and rows."""
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="right" if right else "left")
    for row in rows:
        t.add_row(*(str(v) for v in row))
    return t


def show(*tables: Any, width: int | None = None) -> None:
    """Print tables (``width``: wide ones unwrapped, e.g. 200)."""
    from rich.console import Console

    console = Console(width=width)
    for t in tables:
        console.print(t)
