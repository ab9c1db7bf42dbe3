"""A progress bar for a batch (rich, on stderr): done / total, a running metric, elapsed and ETA."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class ProgressBar:
    """What the bar shows: ``label``, and the running mean of ``value(record)`` as ``metric`` (if given).

    >>> ProgressBar("eval", "acc", lambda r: float(r["correct"]))
    """

    label: str = "batch"
    metric: str = ""
    value: Callable[[dict[str, Any]], float] | None = None

    @contextmanager
    def track(self, total: int, completed: int = 0) -> Iterator[Callable[[dict[str, Any]], None]]:
        """Show the bar while the block runs; yields the callback to call with each finished record."""
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        columns = [TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn()]
        if self.value is not None:
            columns.append(TextColumn(f"{self.metric} {{task.fields[metric]}}"))
        columns += [TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
        running = {"sum": 0.0, "n": 0}
        with Progress(*columns, console=Console(stderr=True)) as bar:
            task_id = bar.add_task(self.label, total=total, completed=completed, metric="-")

            def on_result(record: dict[str, Any]) -> None:
                fields: dict[str, Any] = {}
                if self.value is not None:
                    running["sum"] += self.value(record)
                    running["n"] += 1
                    fields["metric"] = f"{running['sum'] / running['n']:.3f}"
                bar.update(task_id, advance=1, **fields)

            yield on_result
