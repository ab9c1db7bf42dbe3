"""``@tool``: a typed function with a Google-style docstring becomes a frozen ``Tool``.

The signature gives the argument model (pydantic validates every call), the docstring gives the
descriptions, and ``Tool.openai_schema()`` is the OpenAI function format. No class hierarchy: a tool is
data (a frozen dataclass) around a plain function, sync or async.

    @tool
    def add(a: int, b: int = 1) -> int:
        '''Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        '''
        return a + b
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agentrt.core.errors import InputError

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_OUTPUT = 4000


class ToolError(Exception):
    """Raised by a tool to report a failure as an observation (the message is what the model sees)."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one call: ``output`` (truncated to the tool's cap) or ``error`` (never both).

    ``data`` is the same result as structured values for the runtime (the model only ever sees
    ``output``): e.g. the search tool's hits as ``{id, title, text, score}`` dicts, so a caller that
    needs them never parses the text back. A tool returns a ``ToolResult`` to set it.
    """

    output: str = ""
    error: str | None = None
    truncated: bool = False
    data: Any = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def observation(self) -> str:
        return f"error: {self.error}" if self.error is not None else self.output


@dataclass(frozen=True, eq=False)  # identity equality: tools hold functions and dict schemas
class Tool:
    """A callable tool: name, description, JSON schema of its arguments, and limits.

    ``args_model`` validates arguments (None for tools whose schema comes from elsewhere, e.g. MCP;
    their arguments are checked against ``parameters``' required keys only).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] = field(repr=False)
    args_model: type[BaseModel] | None = field(default=None, repr=False)
    is_async: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT
    ends_turn: bool = False  # the loop stops after this tool (e.g. ask_user)
    # Narrower JSON-schema constraints (``{argument: {keyword: value}}``) for constrained decoding only: what
    # a small model may emit, not what the tool accepts (validation and the description use ``parameters``)
    grammar: dict[str, dict[str, Any]] | None = None

    def decoding_schema(self) -> dict[str, Any]:
        """``parameters`` with the ``grammar`` constraints merged into its properties."""
        if not self.grammar:
            return self.parameters
        props = {k: {**v, **self.grammar.get(k, {})} for k, v in self.parameters.get("properties", {}).items()}
        return {**self.parameters, "properties": props}

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise InputError(f"bad tool name {self.name!r}: use letters, digits, '_' or '-' (max 64)")
        if self.timeout_s <= 0 or self.max_output_chars <= 0:
            raise InputError(f"tool {self.name!r}: timeout_s and max_output_chars must be > 0")

    def openai_schema(self) -> dict[str, Any]:
        """The tool in the OpenAI function-calling format."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check arguments; returns the keyword arguments for ``fn``. Raises ``ToolError`` when invalid."""
        if not isinstance(arguments, dict):
            raise ToolError(f"arguments of {self.name} must be a JSON object, got {type(arguments).__name__}")
        if self.args_model is None:
            missing = [k for k in self.parameters.get("required", []) if k not in arguments]
            if missing:
                raise ToolError(f"{self.name}: missing required argument(s): {', '.join(missing)}")
            return dict(arguments)
        try:
            model = self.args_model.model_validate(arguments)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'arguments'}: {err['msg']}"
                                 for err in e.errors()[:3])
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        # Keep nested models as models (the function was typed with them); top level as kwargs.
        return {name: getattr(model, name) for name in type(model).model_fields}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation, no limits)."""
        return self.fn(*args, **kwargs)


async def execute(tool: Tool, arguments: Any) -> ToolResult:
    """Validate and run one call within the tool's timeout; every failure becomes ``ToolResult.error``.

    A sync tool runs in a worker thread; on timeout the loop stops waiting, but Python cannot kill the
    thread, so tools that may hang (python) enforce their own limits in a separate process.
    """
    try:
        kwargs = tool.validate(arguments)
        if tool.is_async:
            value = await asyncio.wait_for(tool.fn(**kwargs), tool.timeout_s)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(tool.fn, **kwargs), tool.timeout_s)
    except ToolError as e:
        return ToolResult(error=str(e))
    except (asyncio.TimeoutError, TimeoutError):
        return ToolResult(error=f"{tool.name} timed out after {tool.timeout_s:g} s")
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a tool's bug is the model's observation, not the run's crash
        return ToolResult(error=f"{tool.name} failed: {type(e).__name__}: {e}")
    if isinstance(value, ToolResult):  # text plus structured data; the text cap applies all the same
        if value.error is not None:
            return ToolResult(error=value.error)
        text, data = value.output, value.data
    else:
        text, data = render_output(value), None
    if len(text) > tool.max_output_chars:
        return ToolResult(text[: tool.max_output_chars] + " [truncated]", truncated=True, data=data)
    return ToolResult(text, data=data)


def render_output(value: Any) -> str:
    """Tool return values as text: strings as-is, models and containers as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         timeout_s: float = DEFAULT_TIMEOUT_S, max_output_chars: int = DEFAULT_MAX_OUTPUT,
         ends_turn: bool = False, grammar: dict[str, dict[str, Any]] | None = None) -> Any:
    """Make a ``Tool`` from a typed function; use as ``@tool`` or ``@tool(name=..., timeout_s=...)``.

    Every parameter needs a type hint; ``*args``/``**kwargs`` are refused. Descriptions come from the
    docstring's first paragraph and its ``Args:`` section. ``grammar``: extra JSON-schema keywords per
    argument that constrained decoding applies (``Tool.grammar``).
    """

    def build(f: Callable[..., Any]) -> Tool:
        doc = parse_docstring(inspect.getdoc(f) or "")
        model = args_model_for(f, doc.args)
        return Tool(
            name=name or f.__name__, description=description or doc.summary or f.__name__,
            parameters=model_schema(model), fn=f, args_model=model,
            is_async=inspect.iscoroutinefunction(f), timeout_s=timeout_s,
            max_output_chars=max_output_chars, ends_turn=ends_turn, grammar=grammar,
        )

    return build(fn) if fn is not None else build


@dataclass(slots=True)
class Docstring:
    summary: str
    args: dict[str, str]


_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?):\s*$")
_ARG_RE = re.compile(r"^(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> Docstring:
    """Google style: summary paragraph(s) up to the first section; ``Args:`` lines ``name (type): text``
    with indented continuation lines."""
    lines = doc.splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section, current, arg_indent = None, None, None
    for raw in lines:
        line = raw.strip()
        header = _SECTION_RE.match(line)
        if header and (raw[: len(raw) - len(raw.lstrip())] == ""):
            section, current, arg_indent = header.group(1), None, None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line:
            indent = len(raw) - len(raw.lstrip())
            match = _ARG_RE.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                args[current] = match.group(3).strip()
            elif current:
                args[current] = (args[current] + " " + line).strip()
    text = "\n".join(summary).strip()
    return Docstring(re.sub(r"\s*\n\s*(?!\n)", " ", text.split("\n\n")[0]).strip() if text else "", args)


def args_model_for(fn: Callable[..., Any], descriptions: dict[str, str]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (extra keys forbidden)."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise InputError(f"cannot read the type hints of {fn.__name__}: {e}") from None
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InputError(f"tool {fn.__name__}: *args/**kwargs cannot be described to a model; name each argument")
        if pname not in hints:
            raise InputError(f"tool {fn.__name__}: argument {pname!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints[pname], Field(default, description=descriptions.get(pname)))
    return create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """JSON schema of ``model`` with ``$ref``s inlined and titles dropped (small and grammar-friendly)."""
    return clean_schema(model.model_json_schema())


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline local ``$ref``s (``#/$defs/...``) and drop ``title`` keywords; objects become closed."""
    schema = dict(schema)
    defs = schema.pop("$defs", {})
    return _clean(_inline(schema, defs, 0))


def _inline(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if depth > 20:
        raise InputError("tool argument types nest too deeply (recursive model?); flatten them")
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = copy.deepcopy(defs[ref.split("/")[-1]])
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **rest}, defs, depth + 1)
        return {k: _inline(v, defs, depth) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs, depth) for v in node]
    return node


def _clean(node: Any) -> Any:
    """Drop ``title`` keywords (but not properties named "title") and mark objects closed."""
    if isinstance(node, list):
        return [_clean(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {prop: _clean(sub) for prop, sub in value.items()}
        else:
            out[key] = _clean(value)
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out
