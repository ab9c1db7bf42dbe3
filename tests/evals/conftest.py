"""Fixtures for the tests of evals/bench."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def import_bench() -> Callable[[str], ModuleType]:
    """Imports ``evals.bench.NAME`` without the thread defaults a bench sets for itself on import (they would stay
    in this test process)."""

    def load(name: str) -> ModuleType:
        saved = dict(os.environ)
        try:
            return importlib.import_module(f"evals.bench.{name}")
        finally:
            os.environ.clear()
            os.environ.update(saved)

    return load
