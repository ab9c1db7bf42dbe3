"""Tools the agent's routes and searchers call. One tool a file; ``@tool`` derives the JSON schema.

    from tools import tool
    from tools.calculator import calculator
    from tools.search import make_search_tool

Built-ins: ``calculator``, ``search`` / ``fetch`` / ``memory_read`` / ``memory_write`` (over a callable
or store the runtime hands in: tools/ never imports memory/), ``python`` (sandboxed, off unless
``Settings.allow_python``), ``ask_user``, and the tools of any MCP server (``tools.mcp``, extra ``mcp``).
The loop that lets a model call them is ``agentrt.routes.toolcall.run_tool_loop``.
"""

from tools.base import Tool, ToolError, ToolResult, execute, tool
from tools.calls import FINAL_ANSWER, ToolCall, call_schema, parse_tool_calls
from tools.policy import DEFAULT_ALLOWLIST, allowed_names, allowed_tools

__all__ = [
    "Tool", "ToolError", "ToolResult", "execute", "tool", "FINAL_ANSWER", "ToolCall", "call_schema",
    "parse_tool_calls", "DEFAULT_ALLOWLIST", "allowed_names", "allowed_tools",
]
