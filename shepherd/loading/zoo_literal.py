"""The Python expressions of RL Zoo's hyperparameter files (``dict(net_arch=[64, 64])``, ``nn.Tanh``, ``lin_0.001``)
read as literal values, never evaluated."""

from __future__ import annotations

import ast
from typing import Any

_ACTIVATIONS = {"Tanh": "tanh", "ReLU": "relu", "ELU": "elu", "LeakyReLU": "leaky_relu", "GELU": "gelu"}


class ExpressionError(ValueError):
    """A zoo file's Python expression holds something that is not plain data."""


def literal(text: str) -> Any:
    """A zoo file's Python expression (``dict(net_arch=[64, 64], activation_fn=nn.ReLU)``,
    ``"{'norm_obs': True}"``) as plain data, read with `ast` and never evaluated: numbers, strings,
    booleans, None, lists, tuples, ``{...}`` and ``dict(...)``; ``nn.ReLU`` (or ``th.nn.ReLU``,
    ``torch.nn.ReLU``) becomes the activation's name Shepherd's ``activation_fn`` takes (``relu``).

    Raises:
        ExpressionError: anything else (a call, a name, an unknown class), naming it.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"not a Python expression: {error.msg}") from None
    return _node(tree.body)


def _node(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _node(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_node(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        found = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                raise ExpressionError("** in a mapping is not plain data")
            found[_key(key)] = _node(value)
        return found
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if any(keyword.arg is None for keyword in node.keywords):
            raise ExpressionError("** in dict(...) is not plain data")
        return {str(keyword.arg): _node(keyword.value) for keyword in node.keywords}
    dotted = _dotted(node)
    if dotted is not None:
        module, _, name = dotted.rpartition(".")
        if module in ("nn", "th.nn", "torch.nn") and name in _ACTIVATIONS:
            return _ACTIVATIONS[name]
        raise ExpressionError(f"{dotted} is not one of the activations Shepherd takes "
                              f"({', '.join('nn.' + key for key in _ACTIVATIONS)})")
    raise ExpressionError(f"{ast.unparse(node)!r} is not plain data")


def _key(node: ast.AST) -> str:
    key = _node(node)
    if not isinstance(key, str):
        raise ExpressionError(f"mapping keys must be strings, not {key!r}")
    return key


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


# -- mapping an entry into a preset -----------------------------------------------------------------------
