"""The ``calculator`` tool: exact arithmetic from an AST walk (no eval, no exec).

Allowed: numbers, ``+ - * / // % **``, unary ``+ -``, parentheses, the constants ``pi``, ``e``, ``tau``
and a few functions (sqrt, abs, round, floor, ceil, log, log2, log10, exp, sin, cos, tan, min, max,
factorial, gcd). Sizes are bounded so no expression can eat the machine: exponents, factorial
arguments, digits of integer results and the expression's length all have caps.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from tools.base import ToolError, tool

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 10_000
MAX_INT_DIGITS = 4_300  # Python's own int->str limit
MAX_FACTORIAL = 1_000
MAX_NODES = 200

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _factorial(n: Any) -> int:
    if not isinstance(n, int) or n < 0 or n > MAX_FACTORIAL:
        raise ToolError(f"factorial needs an integer between 0 and {MAX_FACTORIAL}")
    return math.factorial(n)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil,
    "log": math.log, "log2": math.log2, "log10": math.log10, "exp": math.exp, "sin": math.sin,
    "cos": math.cos, "tan": math.tan, "min": min, "max": max, "factorial": _factorial, "gcd": math.gcd,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; raises ``ToolError`` with a one-line reason when refused."""
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise ToolError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ToolError(f"not an arithmetic expression: {expression!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolError(f"expression has more than {MAX_NODES} parts")
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, ValueError) as e:
        raise ToolError(f"math error: {e}") from None
    if isinstance(value, int) and value.bit_length() > MAX_INT_DIGITS * 3.33:
        raise ToolError(f"result has more than {MAX_INT_DIGITS} digits")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_DIGITS * 3.33:
                raise ToolError(f"result has more than {MAX_INT_DIGITS} digits")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in CONSTANTS:
        return CONSTANTS[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        if node.keywords:
            raise ToolError("functions take positional arguments only")
        return FUNCTIONS[node.func.id](*[_eval(a) for a in node.args])
    raise ToolError(f"not allowed in an arithmetic expression: {ast.unparse(node)!r}")


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(exponent, (int, float)) and abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent larger than {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if max(1, base.bit_length()) * exponent > MAX_INT_DIGITS * 3.33:
            raise ToolError(f"result has more than {MAX_INT_DIGITS} digits")


def _format(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


# What a constrained small model may write: a number or "(" first, only digits, operators, parentheses and
# spaces, at least one operator, a digit or ")" last, 67 characters at most. Measured on SmolLM2-135M
# (arith-dev, reason route): with the plain string it wrote "" or copied this docstring's example (1 of 19
# right); with the pattern, it copied the question's numbers and operator (18 of 23). The length bound (in
# the pattern: xgrammar ignores maxLength beside a pattern) ends expressions that otherwise ran to the token
# limit ("67975*8074*1.000000000000000155555...": unterminated JSON). Callers of the tool itself may still
# use the functions.
EXPRESSION_GRAMMAR = {"pattern": r"^[0-9(][0-9 .()]{0,24}[-+*/%][0-9+*/%(). -]{0,40}[0-9)]$"}


@tool(timeout_s=5, max_output_chars=MAX_INT_DIGITS + 50, grammar={"expression": EXPRESSION_GRAMMAR})
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly, e.g. "1234*5678" or "sqrt(2)/3".

    Args:
        expression: Numbers with + - * / // % ** and parentheses; functions sqrt, abs, round, floor,
            ceil, log, exp, sin, cos, tan, min, max, factorial, gcd; constants pi, e.
    """
    return _format(evaluate(expression))
