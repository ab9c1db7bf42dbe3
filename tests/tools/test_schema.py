"""@tool: schema derivation from signatures + Google docstrings, validation, execution limits."""

from __future__ import annotations

import asyncio
import dataclasses
from enum import Enum
from typing import Literal, Optional

import pytest
from pydantic import BaseModel

from agentrt.core.errors import InputError
from tools import Tool, ToolError, execute, tool


class Unit(str, Enum):
    C = "celsius"
    F = "fahrenheit"


class Point(BaseModel):
    x: float
    y: float = 0.0


class Shape(BaseModel):
    name: str
    points: list[Point]


@tool
def weather(city: str, days: int = 1, unit: Literal["c", "f"] = "c", tags: Optional[list[str]] = None) -> str:
    """Get the weather forecast.

    A second paragraph that is not part of the summary.

    Args:
        city (str): The city name,
            for example "Paris".
        days: How many days ahead.
        unit: Temperature unit.
        tags: Optional labels.

    Returns:
        The forecast text.
    """
    return f"{city} {days} {unit} {tags}"


@tool
def area(shape: Shape, unit: Unit = Unit.C) -> float:
    """Area of a polygon.

    Args:
        shape: The polygon.
        unit: A unit enum.
    """
    return float(len(shape.points))


def test_simple_signature_to_openai_schema():
    schema = weather.openai_schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "weather"
    assert fn["description"] == "Get the weather forecast."
    params = fn["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["city"]
    props = params["properties"]
    assert props["city"] == {"type": "string", "description": 'The city name, for example "Paris".'}
    assert props["days"]["type"] == "integer" and props["days"]["default"] == 1
    assert props["unit"]["enum"] == ["c", "f"]
    tag_types = {opt.get("type") for opt in props["tags"]["anyOf"]}
    assert tag_types == {"array", "null"}
    assert {"type": "array", "items": {"type": "string"}} in props["tags"]["anyOf"]
    assert "title" not in str(params)


def test_nested_models_and_enums_are_inlined():
    params = area.parameters
    assert "$defs" not in str(params) and "$ref" not in str(params)
    shape = params["properties"]["shape"]
    assert shape["type"] == "object" and shape["required"] == ["name", "points"]
    point = shape["properties"]["points"]["items"]
    assert point["properties"]["x"] == {"type": "number"}
    assert point["additionalProperties"] is False
    assert params["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert params["properties"]["unit"]["description"] == "A unit enum."


def test_tool_is_frozen_and_callable_directly():
    assert isinstance(weather, Tool)
    with pytest.raises(dataclasses.FrozenInstanceError):
        weather.name = "other"  # type: ignore[misc]
    assert weather("Oslo") == "Oslo 1 c None"


def test_validation_coerces_and_rejects():
    assert weather.validate({"city": "Rome", "days": "3"})["days"] == 3
    kwargs = area.validate({"shape": {"name": "tri", "points": [{"x": 1}, {"x": 2, "y": 1}]}})
    assert isinstance(kwargs["shape"], Shape) and kwargs["shape"].points[1].y == 1
    for bad, needle in [({}, "city"), ({"city": "a", "unit": "k"}, "unit"), ({"city": "a", "extra": 1}, "extra"),
                        ([1, 2], "JSON object")]:
        with pytest.raises(ToolError, match=needle):
            weather.validate(bad)


def test_decorator_options_and_refusals():
    @tool(name="add-two", timeout_s=2, max_output_chars=10)
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert add.name == "add-two" and add.timeout_s == 2 and add.max_output_chars == 10
    with pytest.raises(InputError, match="type hint"):
        @tool
        def untyped(a):  # noqa: ANN001
            """x"""
    with pytest.raises(InputError, match=r"\*args"):
        @tool
        def star(*a: int) -> None:
            """x"""
    with pytest.raises(InputError, match="bad tool name"):
        tool(name="has space")(lambda: None)


def test_execute_sync_async_errors_timeout_truncation():
    @tool(timeout_s=0.2)
    async def slow(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return "done"

    @tool(max_output_chars=5)
    def long(n: int) -> list[int]:
        """Numbers."""
        return list(range(n))

    @tool
    def broken(x: int) -> int:
        """Fails."""
        raise RuntimeError("boom")

    @tool
    def refuses(x: int) -> int:
        """Refuses."""
        raise ToolError("x must be even")

    async def go():
        return await asyncio.gather(
            execute(slow, {"seconds": 0.01}), execute(slow, {"seconds": 5}), execute(long, {"n": 100}),
            execute(broken, {"x": 1}), execute(refuses, {"x": 1}), execute(weather, {"days": 2}),
        )

    ok, timed_out, cut, crashed, refused, invalid = asyncio.run(go())
    assert ok.ok and ok.output == "done"
    assert timed_out.error == "slow timed out after 0.2 s"
    assert cut.truncated and cut.output == "[0, 1 [truncated]"
    assert crashed.error == "broken failed: RuntimeError: boom"
    assert refused.error == "x must be even" and refused.observation() == "error: x must be even"
    assert "city" in invalid.error
