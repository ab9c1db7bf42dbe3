"""Which tools each route may call. Deny by default: a route not listed gets no tools.

The allowlist is fixed by configuration before a run; nothing a model reads (a tool result, a
retrieved document) can widen it. The python tool is dropped unless ``allow_python`` is set (true or "unsafe").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tools.base import Tool

DEFAULT_ALLOWLIST: dict[str, tuple[str, ...]] = {
    "direct": (),
    "reason": ("calculator", "search"),
    "plan": ("search", "fetch", "calculator", "memory_read", "python"),
    "search": ("search", "fetch", "calculator", "memory_read", "python"),  # a plan's searchers
    "ask": ("ask_user",),
    "abstain": (),
}


def allowed_names(route: str, *, allow_python: bool | str = False,
                  allowlist: Mapping[str, Sequence[str]] | None = None) -> frozenset[str]:
    """Tool names ``route`` may call."""
    names = set((allowlist if allowlist is not None else DEFAULT_ALLOWLIST).get(route, ()))
    if not allow_python:
        names.discard("python")
    return frozenset(names)


def allowed_tools(route: str, tools: Sequence[Tool], *, allow_python: bool | str = False,
                  allowlist: Mapping[str, Sequence[str]] | None = None) -> list[Tool]:
    """The subset of ``tools`` that ``route`` may call, in the given order."""
    names = allowed_names(route, allow_python=allow_python, allowlist=allowlist)
    return [t for t in tools if t.name in names]
