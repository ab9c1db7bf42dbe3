"""Tools of an MCP server (stdio) as ordinary ``Tool``s. Needs the ``mcp`` extra (PyPI ``mcp``).

    async with mcp_tools(sys.executable, ["server.py"]) as tools:
        result = await run_tool_loop(ctx, messages, tools)

The server process lives as long as the ``async with`` block; leaving it stops the server. Each
tool's schema is the server's ``inputSchema``; the server validates arguments itself (the client
checks only required keys). A result flagged ``isError`` becomes the call's error observation.
Works with the mcp 1.x and 2.x client APIs (both have ``stdio_client`` + ``ClientSession``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from agentrt.core.errors import BackendError, missing_extra
from tools.base import Tool, ToolError, clean_schema


@asynccontextmanager
async def mcp_tools(command: str, args: Sequence[str] = (), *, env: dict[str, str] | None = None,
                    cwd: str | None = None, prefix: str = "", timeout_s: float = 30.0,
                    max_output_chars: int = 4000) -> AsyncIterator[list[Tool]]:
    """Start the stdio MCP server ``command args``, yield its tools, stop it on exit."""
    try:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise missing_extra("mcp", "mcp") from None
    params = StdioServerParameters(command=command, args=list(args), env=env, cwd=cwd)
    async with AsyncExitStack() as stack:
        try:
            streams = await stack.enter_async_context(stdio_client(params))
        except OSError as e:
            raise BackendError(f"cannot start the MCP server {command!r}: {e}; check the command") from None
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await session.initialize()
        listed = await session.list_tools()
        yield [_wrap(session, t, prefix, timeout_s, max_output_chars) for t in listed.tools]


def _field(obj: Any, name: str, old_name: str) -> Any:
    """``obj.name``, or ``obj.old_name`` from an MCP SDK before the rename (v2 renamed the camelCase fields and
    warns on every read of the old name, so the old one is read only where the new one does not exist)."""
    return getattr(obj, name) if hasattr(obj, name) else getattr(obj, old_name, None)


def _wrap(session: Any, spec: Any, prefix: str, timeout_s: float, max_output_chars: int) -> Tool:
    remote = spec.name
    schema = _field(spec, "input_schema", "inputSchema") or {"type": "object"}

    async def call(**arguments: Any) -> str:
        result = await session.call_tool(remote, arguments)
        text = "\n".join(_content_text(c) for c in result.content)
        structured = _field(result, "structured_content", "structuredContent")
        if not text and structured is not None:
            text = str(structured)
        if _field(result, "is_error", "isError"):
            raise ToolError(text or f"{remote} reported an error")
        return text

    return Tool(
        name=re.sub(r"[^A-Za-z0-9_-]", "_", prefix + remote)[:64], description=spec.description or remote,
        parameters=clean_schema(schema), fn=call, args_model=None, is_async=True, timeout_s=timeout_s,
        max_output_chars=max_output_chars,
    )


def _content_text(block: Any) -> str:
    text = getattr(block, "text", None)
    if isinstance(text, str):
        return text
    return f"[{getattr(block, 'type', 'content')} omitted]"
