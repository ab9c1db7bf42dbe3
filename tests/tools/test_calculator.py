"""The calculator: exact arithmetic from an AST walk, bounded, nothing else."""

from __future__ import annotations

import asyncio

import pytest

from tools import ToolError, execute
from tools.calculator import calculator, evaluate


@pytest.mark.parametrize("expression, expected", [
    ("1234*5678", 7006652), ("2**10", 1024), ("-3 + 4*(2-1)", 1), ("10//3", 3), ("7 % 3", 1),
    ("7/2", 3.5), ("sqrt(16)", 4.0), ("factorial(5)", 120), ("max(1, 9, 3)", 9), ("2^8", 256),
    ("+5", 5), ("round(pi, 2)", 3.14), ("1_000 * 3", 3000),
])
def test_values(expression, expected):
    assert evaluate(expression) == expected


@pytest.mark.parametrize("expression, needle", [
    ("__import__('os').system('id')", "not allowed"),
    ("(lambda: 1)()", "not allowed"),
    ("x + 1", "not allowed"),
    ("'a' * 3", "not allowed"),
    ("[1, 2]", "not allowed"),
    ("9**9**9", "exponent"),
    ("10**5000", "digits"),
    ("(10**4000)*(10**4000)", "digits"),
    ("factorial(100000)", "factorial"),
    ("1/0", "division by zero"),
    ("2.0**5000", "math error"),
    ("sqrt(-1)", "math error"),
    ("1 +", "not an arithmetic expression"),
    ("", "empty"),
    ("1+" * 400 + "1", "longer than"),
])
def test_refusals(expression, needle):
    with pytest.raises(ToolError, match=needle):
        evaluate(expression)


def test_tool_formats_and_reports_errors():
    ok = asyncio.run(execute(calculator, {"expression": "1234*5678"}))
    assert ok.output == "7006652"
    assert asyncio.run(execute(calculator, {"expression": "3.0*2"})).output == "6"
    bad = asyncio.run(execute(calculator, {"expression": "open('/etc/passwd')"}))
    assert bad.error.startswith("not allowed in an arithmetic expression")
