"""GitHub Actions' expression language (``${{ ... }}``), the part a workflow here uses: contexts
(``matrix.x``, ``needs.plan.outputs.matrix``), string/number/boolean/null literals, ``!``,
``==``, ``!=``, ``&&``, ``||``, parentheses, and the functions ``contains``, ``startsWith``,
``endsWith``, ``format``, ``fromJSON``, ``toJSON``, ``join`` and the status functions.

Strict where GitHub is lenient: a context, a key or a function this module does not know is an
:class:`Unresolved` error instead of an empty value, so a workflow that drifts from what the tests
give it fails them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["EXPR", "Unresolved", "evaluate", "substitute", "truthy", "value_of"]

#: one ``${{ ... }}`` (no nested braces in the expressions a workflow here uses)
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.DOTALL)

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>\|\||&&|==|!=|!|\(|\)|,)"
    r"|(?P<name>[A-Za-z_][\w-]*(?:\.[\w-]+|\.\*)*))"
)


class Unresolved(Exception):
    """An expression names what the context does not have, or is not valid."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise Unresolved(f"cannot read {text[pos:]!r} in {text!r}")
        kind = match.lastgroup or ""
        out.append((kind, match[kind]))
        pos = match.end()
    return out


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and value == value  # NaN is falsy


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    if None in (a, b) and "" in (a, b):
        return True
    return bool(a == b)


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, list):
        return any(_equal(item, needle) for item in haystack)
    return _text(needle).casefold() in _text(haystack).casefold()


def _format(template: Any, *args: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: _text(args[int(m[1])]), _text(template))


def _from_json(text: Any) -> Any:
    try:
        return json.loads(_text(text))
    except json.JSONDecodeError as err:
        raise Unresolved(f"fromJSON({text!r}): {err}") from None


class _Parser:
    def __init__(self, text: str, context: Mapping[str, Any], status: Mapping[str, bool]) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0
        self.context = context
        self.functions: dict[str, Callable[..., Any]] = {
            "contains": _contains,
            "startswith": lambda a, b: _text(a).casefold().startswith(_text(b).casefold()),
            "endswith": lambda a, b: _text(a).casefold().endswith(_text(b).casefold()),
            "format": _format,
            "fromjson": _from_json,
            "tojson": lambda v: json.dumps(v, indent=2),
            "join": lambda v, sep=",": (
                _text(sep).join(_text(x) for x in v) if isinstance(v, list) else _text(v)
            ),
            **{name: (lambda v=v: v) for name, v in status.items()},
        }

    def peek(self) -> str:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise Unresolved(f"{self.text!r} ends early")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise Unresolved(f"expected {expected!r}, found {token[1]!r} in {self.text!r}")
        self.pos += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.pos != len(self.tokens):
            raise Unresolved(f"unexpected {self.peek()!r} in {self.text!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            other = self.and_()
            value = value if truthy(value) else other
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == "&&":
            self.take()
            other = self.compare()
            value = other if truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            other = self.unary()
            value = _equal(value, other) == (op == "==")
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind != "name":
            raise Unresolved(f"unexpected {text!r} in {self.text!r}")
        if self.peek() == "(":
            return self.call(text)
        literals = {"true": True, "false": False, "null": None}
        return literals[text] if text in literals else self.lookup(text)

    def call(self, name: str) -> Any:
        function = self.functions.get(name.casefold())
        if function is None:
            raise Unresolved(f"unknown function {name}() in {self.text!r}")
        self.take("(")
        args = []
        while self.peek() != ")":
            args.append(self.or_())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return function(*args)

    def lookup(self, path: str) -> Any:
        value: Any = self.context
        for i, part in enumerate(path.split(".")):
            if not isinstance(value, Mapping) or part not in value:
                where = ".".join(path.split(".")[:i]) or "the contexts"
                raise Unresolved(f"{path}: {where} has no {part!r} (in {self.text!r})")
            value = value[part]
        return value


_ALWAYS = {"success": True, "always": True, "failure": False, "cancelled": False}


def evaluate(
    expr: str, context: Mapping[str, Any], status: Mapping[str, bool] | None = None
) -> Any:
    """The value of one expression (the text between ``${{`` and ``}}``, or an ``if:``)."""
    return _Parser(expr, context, _ALWAYS if status is None else status).parse()


def substitute(
    text: str, context: Mapping[str, Any], status: Mapping[str, bool] | None = None
) -> str:
    """``text`` with every ``${{ ... }}`` replaced by its value as a string."""
    return EXPR.sub(lambda m: _text(evaluate(m[1], context, status)), text)


def value_of(value: Any, context: Mapping[str, Any]) -> Any:
    """A workflow value evaluated as GitHub does: a string that is one whole ``${{ ... }}`` keeps
    the expression's type (``fromJSON`` objects for ``matrix:``, ``runs-on:``); other strings
    are substituted; lists and mappings are evaluated item by item."""
    if isinstance(value, str):
        whole = EXPR.fullmatch(value.strip())
        return evaluate(whole[1], context) if whole else substitute(value, context)
    if isinstance(value, list):
        return [value_of(v, context) for v in value]
    if isinstance(value, dict):
        return {k: value_of(v, context) for k, v in value.items()}
    return value
