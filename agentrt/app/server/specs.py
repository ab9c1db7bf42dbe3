"""The router specs a request may name (``request_router``): a request never names a server-side file.

``learned:PATH``, ``self:PATH`` (or anything else that is not ``auto``, ``rules``, ``self``, ``cascade``, ``fixed:<action>``
or a registry version ``learned:r003`` / ``learned:shipped:NAME``) is refused from its text alone, before
any file system call, so the answer tells nothing about the server's files either. Specs that read a file
come only from the server's own config and flags. ``parse_body`` (the door every endpoint's body goes
through) applies it to a body's top-level ``router``.
"""

from __future__ import annotations

import re
from typing import Any

_VERSION = r"(?:r\d{1,9}|shipped:[A-Za-z0-9_.-]{1,64})"
_REQUEST_ROUTER = re.compile(rf"auto|rules|self|cascade|fixed:[a-z_]{{1,32}}|learned:{_VERSION}")
ALLOWED_ROUTERS = "auto, rules, self, cascade, fixed:<route>, learned:<registry version> (e.g. learned:r003)"


def request_router(spec: Any) -> str | None:
    """Why a request's ``router`` value is refused (a 400 message), or None when it may be used.

    Decided on the text alone: no path is looked at, so the answer says nothing about the server's files."""
    if spec is None:
        return None
    if isinstance(spec, str) and _REQUEST_ROUTER.fullmatch(spec) and ".." not in spec:
        return None
    return (f"a request may name one of these routers: {ALLOWED_ROUTERS}; routers read from a file are "
            "set by the server's operator (agentrt serve --config, [agentrt] router), not by a request")


__all__ = ["ALLOWED_ROUTERS", "request_router"]
