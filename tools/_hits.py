"""Read search hits and documents that come as dicts or as objects with attributes."""

from __future__ import annotations

from typing import Any


def field(item: Any, name: str, default: Any = None) -> Any:
    """``item[name]`` for a dict, ``item.name`` for an object; ``default`` when absent."""
    if isinstance(item, dict):
        return item.get(name, default)
    return getattr(item, name, default)


def clip(text: str, limit: int) -> str:
    """``text`` with its whitespace collapsed, cut to ``limit`` characters (an ellipsis marks a cut)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def as_hit(item: Any, passage_chars: int) -> dict[str, Any]:
    """A hit (dict or object) as a plain ``{id, title, text, score}`` dict, its text clipped as the
    model is shown it. ``score`` is a float or None (some stores give none)."""
    score = field(item, "score")
    return {"id": str(field(item, "id", "?")), "title": str(field(item, "title", "") or ""),
            "text": clip(field(item, "text", "") or "", passage_chars),
            "score": float(score) if isinstance(score, (int, float)) else None}
