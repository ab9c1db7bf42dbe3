"""Text from a model, a tool or a document, made safe to print on a terminal.

A terminal obeys the control characters in what it prints: ``ESC ] 0 ;`` retitles the window, ``ESC ] 52 ;``
writes the clipboard, ``ESC [ 2K`` erases the line, a carriage return overwrites what was shown. So every
CLI and REPL line that shows such text goes through ``printable``: control characters (C0, DEL, C1) other
than newline and tab become visible escapes (``\\x1b``, ``\\r``, ``\\x9b``). JSON outputs (``--json``) keep
the raw text: JSON escapes control characters itself, and a program reading it wants the exact bytes.
"""

from __future__ import annotations

from typing import Any

_NAMED = {"\r": "\\r", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\0": "\\0"}
_KEPT = {"\n", "\t"}
_TABLE = {c: _NAMED.get(chr(c), f"\\x{c:02x}")
          for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if chr(c) not in _KEPT}


def printable(text: Any) -> str:
    """``text`` (any value: ``str()`` of it) with every control character but newline and tab escaped."""
    return str(text).translate(_TABLE)


__all__ = ["printable"]
