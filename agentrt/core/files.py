"""Reading the small files agentrt trusts (router files, registry state, config) with a size cap.

``read_capped`` refuses what is not a regular file (a directory, a FIFO, ``/dev/zero``) before reading a
byte, and a file over its cap after reading at most cap + 1 bytes: a bad path in a config costs one
``ConfigError`` line, never a blocked process or gigabytes of memory. Opening is non-blocking, so a
FIFO's open does not wait for a writer.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentrt.core.errors import ConfigError

MiB = 1 << 20


def read_capped(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), else ``ConfigError`` naming ``what``.

    ``FileNotFoundError`` passes through (callers word "does not exist" themselves)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be opened ({e.strerror}); check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {path} is not a regular file; give the path of a file")
        if info.st_size > limit:
            raise ConfigError(f"{what} {path} is {info.st_size} bytes, over the {limit}-byte limit; "
                              "is it the right file?")
        chunks, got = [], 0
        while got <= limit:  # the size can change under us: read at most limit + 1 bytes whatever fstat said
            chunk = os.read(fd, min(limit + 1 - got, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise ConfigError(f"{what} {path} is over the {limit}-byte limit; is it the right file?")
        return b"".join(chunks)
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def read_text_capped(path: str | Path, limit: int, what: str = "file") -> str:
    """``read_capped`` decoded as UTF-8 (a ``UnicodeDecodeError`` passes through, as from ``read_text``)."""
    return read_capped(path, limit, what).decode("utf-8")


__all__ = ["MiB", "read_capped", "read_text_capped"]
