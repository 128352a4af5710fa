"""Message filters: RocketMQ tag expressions and a SQL92 subset over message properties.

The SQL subset (RocketMQ's ``MessageSelector.bySql``): comparisons ``= <> != < <= > >=``,
``AND``/``OR``/``NOT``, parentheses, ``[NOT] BETWEEN a AND b``, ``[NOT] IN (...)``,
``IS [NOT] NULL``, ``[NOT] CONTAINS | STARTSWITH | ENDSWITH 'text'``, string literals in single
quotes (``''`` escapes a quote), integer and decimal literals, ``TRUE``/``FALSE``. Identifiers
name message properties (including the system ones, such as ``TAGS`` and ``KEYS``). Logic is
three-valued as in SQL: a comparison with a missing property, or a numeric comparison with a
value that is not a number, is unknown, and a message matches only when the whole expression is
true. The expression is parsed into closures; nothing is ever evaluated as Python code.

Bad expressions raise ``FilterExpressionError``, including parentheses and NOTs nested more than
``MAX_NESTING`` deep and numeric literals of more digits than CPython converts (4,300 by
default). A message whose properties a filter cannot evaluate (say a property holding a number
of more digits than that) does not match, as in RocketMQ's evaluator, and is logged as a
warning on ``mqlite.consumer``; filtering never raises because of a message's content.
``MemoryError`` and ``RecursionError`` are the process's trouble, not the message's: they
propagate (the poll that filters then moves no cursor).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Union

from mqlite.errors import FilterExpressionError
from mqlite.topic import parse_tags

if TYPE_CHECKING:
    from mqlite.message import MessageExt

__all__ = ["MAX_NESTING", "MessageSelector", "compile_sql"]

log = logging.getLogger("mqlite.consumer")

# Parentheses and NOTs nest at most this deep: the parser and the compiled closures recurse
# once or a few frames per level, so a bound here keeps both far from Python's recursion limit.
MAX_NESTING = 100
# Errors of the process rather than of a message: evaluating a message never turns them into
# "no match" (the message may match once the process has recovered).
_PROCESS_ERRORS = (MemoryError, RecursionError)

Value = Union[str, int, float, bool, None]
Props = Mapping[str, str]
Predicate = Callable[[Props], Union[bool, None]]
Operand = Callable[[Props], Value]

_KEYWORDS = frozenset(
    "AND OR NOT BETWEEN IN IS NULL TRUE FALSE CONTAINS STARTSWITH ENDSWITH".split()
)
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(?![A-Za-z0-9_$])
    | (?P<str>'(?:[^']|'')*')
    | (?P<op><>|!=|>=|<=|=|<|>|\(|\)|,)
    | (?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
    )""",
    re.VERBOSE,
)
_CMP_OPS = frozenset(("=", "<>", "!=", "<", "<=", ">", ">="))


_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _number(text: str) -> int | float | None:
    """A property's value as a number when it is written as one (Java's parse rules: no
    surrounding spaces, no ``_`` separators, no ``nan``/``inf``); else None."""
    if not _NUMBER.fullmatch(text):
        return None
    if "." in text or "e" in text or "E" in text:
        return float(text)
    return int(text)


def _coerce(a: Value, b: Value) -> tuple[Value, Value] | None:
    """Bring two non-null values to one comparable type; None when they cannot be."""
    if isinstance(a, bool) or isinstance(b, bool):
        a2 = a if isinstance(a, bool) else ({"true": True, "false": False}.get(str(a).lower()))
        b2 = b if isinstance(b, bool) else ({"true": True, "false": False}.get(str(b).lower()))
        return None if a2 is None or b2 is None else (a2, b2)
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    a3 = _number(a) if isinstance(a, str) else a
    b3 = _number(b) if isinstance(b, str) else b
    return None if a3 is None or b3 is None else (a3, b3)


def _compare(op: str, a: Value, b: Value) -> bool | None:
    if a is None or b is None:
        return None
    pair = _coerce(a, b)
    if pair is None:
        return None
    x, y = pair
    if op == "=":
        return x == y
    if op in ("<>", "!="):
        return x != y
    if isinstance(x, str) or isinstance(x, bool):
        # Ordering of two property strings: only numbers order.
        nx, ny = _number(str(x)), _number(str(y))
        if nx is None or ny is None or isinstance(x, bool):
            return None
        x, y = nx, ny
    if isinstance(x, str) or isinstance(y, str) or x is None or y is None:
        return None  # a string never orders against a number: UNKNOWN
    if op == "<":
        return x < y
    if op == "<=":
        return x <= y
    if op == ">":
        return x > y
    return x >= y


class _Parser:
    """Recursive descent over the token list; builds closures."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise FilterExpressionError(f"unexpected character at {pos} in {text!r}")
            group = m.lastgroup or ""
            kind, value, at = group, m.group(group), m.start(group)
            if kind == "id" and value.upper() in _KEYWORDS:
                kind, value = "kw", value.upper()
            self.tokens.append((kind, value, at))
            pos = m.end()
        self.i = 0
        self.depth = 0  # parentheses and NOTs open around the current token

    def _nest(self) -> None:
        """Enters one more level of parentheses or NOT (``self.depth -= 1`` leaves it)."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self._fail(f"parentheses and NOTs nested more than {MAX_NESTING} deep")

    def _fail(self, what: str) -> FilterExpressionError:
        if self.i < len(self.tokens):
            _, value, at = self.tokens[self.i]
            return FilterExpressionError(f"{what}, found {value!r} at {at} in {self.text!r}")
        return FilterExpressionError(f"{what}, found the end of {self.text!r}")

    def _peek(self) -> tuple[str, str]:
        if self.i < len(self.tokens):
            kind, value, _ = self.tokens[self.i]
            return kind, value
        return "", ""

    def _accept(self, kind: str, value: str | None = None) -> str | None:
        k, v = self._peek()
        if k == kind and (value is None or v == value):
            self.i += 1
            return v
        return None

    def _expect(self, kind: str, value: str | None = None, what: str = "") -> str:
        got = self._accept(kind, value)
        if got is None:
            raise self._fail(f"expected {what or value or kind}")
        return got

    def parse(self) -> Predicate:
        if not self.tokens:
            raise FilterExpressionError("empty SQL92 expression")
        pred = self._or()
        if self.i != len(self.tokens):
            raise self._fail("expected AND, OR or the end")
        return pred

    def _or(self) -> Predicate:
        parts = [self._and()]
        while self._accept("kw", "OR"):
            parts.append(self._and())
        if len(parts) == 1:
            return parts[0]

        def any_of(p: Props) -> bool | None:
            unknown = False
            for part in parts:
                r = part(p)
                if r:
                    return True
                unknown = unknown or r is None
            return None if unknown else False

        return any_of

    def _and(self) -> Predicate:
        parts = [self._not()]
        while self._accept("kw", "AND"):
            parts.append(self._not())
        if len(parts) == 1:
            return parts[0]

        def all_of(p: Props) -> bool | None:
            unknown = False
            for part in parts:
                r = part(p)
                if r is False:
                    return False
                unknown = unknown or r is None
            return None if unknown else True

        return all_of

    def _not(self) -> Predicate:
        if self._accept("kw", "NOT"):
            self._nest()
            inner = self._not()
            self.depth -= 1
            return lambda p: None if (r := inner(p)) is None else not r
        return self._predicate()

    def _literal(self) -> Value:
        kind, value = self._peek()
        if kind == "num":
            at = self.tokens[self.i][2]
            self.i += 1
            try:
                num = _number(value)
            except ValueError as exc:  # CPython's limit on the digits int() converts
                raise FilterExpressionError(f"numeric literal at {at} has too many digits: {exc}") from exc
            if num is None:  # the tokenizer only lets numbers through as "num"
                raise FilterExpressionError(f"invalid numeric literal {value!r} at {at}")
            return num
        if kind == "str":
            self.i += 1
            return value[1:-1].replace("''", "'")
        if kind == "kw" and value in ("TRUE", "FALSE"):
            self.i += 1
            return value == "TRUE"
        raise self._fail("expected a literal")

    def _operand(self) -> tuple[Operand, Value, bool]:
        """(getter, literal value, is_literal)."""
        kind, value = self._peek()
        if kind == "id":
            self.i += 1
            name = value
            return (lambda p: p.get(name)), None, False
        lit = self._literal()
        return (lambda p: lit), lit, True

    def _predicate(self) -> Predicate:
        if self._accept("op", "("):
            self._nest()
            inner = self._or()
            self._expect("op", ")")
            self.depth -= 1
            return inner
        left, lit, is_lit = self._operand()
        kind, value = self._peek()
        if kind == "op" and value in _CMP_OPS:
            self.i += 1
            right, rlit, r_is_lit = self._operand()
            if value not in ("=", "<>", "!=") and any(
                isinstance(v, (str, bool)) for v, flag in ((lit, is_lit), (rlit, r_is_lit)) if flag
            ):
                raise FilterExpressionError(
                    f"{value} needs numbers; strings and booleans compare only with = and <> "
                    f"in {self.text!r}"
                )
            op = value
            return lambda p: _compare(op, left(p), right(p))
        if self._accept("kw", "IS"):
            negate = bool(self._accept("kw", "NOT"))
            self._expect("kw", "NULL")
            return (lambda p: left(p) is not None) if negate else (lambda p: left(p) is None)
        negate = bool(self._accept("kw", "NOT"))
        if self._accept("kw", "BETWEEN"):
            low = self._literal()
            self._expect("kw", "AND")
            high = self._literal()
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
                raise FilterExpressionError(f"BETWEEN needs numeric bounds in {self.text!r}")

            def between(p: Props) -> bool | None:
                lo, hi = _compare(">=", left(p), low), _compare("<=", left(p), high)
                if lo is None or hi is None:
                    return None
                return (lo and hi) != negate

            return between
        if self._accept("kw", "IN"):
            self._expect("op", "(")
            items = [self._literal()]
            while self._accept("op", ","):
                items.append(self._literal())
            self._expect("op", ")")

            def in_list(p: Props) -> bool | None:
                v = left(p)
                if v is None:
                    return None
                hit = any(_compare("=", v, item) for item in items)
                return hit != negate

            return in_list
        for word, test in (
            ("CONTAINS", str.__contains__),
            ("STARTSWITH", str.startswith),
            ("ENDSWITH", str.endswith),
        ):
            if self._accept("kw", word):
                needle = self._literal()
                if not isinstance(needle, str):
                    raise FilterExpressionError(f"{word} needs a string literal in {self.text!r}")
                return self._text_test(left, test, needle, negate)
        raise self._fail("expected a comparison, IS, BETWEEN, IN or CONTAINS")

    @staticmethod
    def _text_test(
        left: Operand, test: Callable[[str, str], bool], needle: str, negate: bool
    ) -> Predicate:
        def run(p: Props) -> bool | None:
            v = left(p)
            if not isinstance(v, str):
                return None
            return test(v, needle) != negate

        return run


def compile_sql(expression: str) -> Callable[[Props], bool]:
    """Compile a SQL92 filter into ``fn(properties) -> bool``; raises FilterExpressionError.

    ``fn`` lets an error evaluating the properties propagate (``MessageSelector.matches`` turns
    one into "no match")."""
    if not isinstance(expression, str):
        raise FilterExpressionError(f"a SQL92 expression must be a str, not {type(expression).__name__}")
    try:
        pred = _Parser(expression).parse()
    except RecursionError as exc:
        # Within MAX_NESTING, but the caller's own stack left too little room for it.
        raise FilterExpressionError(
            "expression nested too deeply for the stack left to parse it"
        ) from exc
    return lambda props: pred(props) is True


@dataclass(frozen=True)
class MessageSelector:
    """A subscription filter: ``by_tag("TagA || TagB")`` or ``by_sql("a > 5 AND b = 'x'")``."""

    type: Literal["TAG", "SQL92"]
    expression: str
    _tags: list[str] | None = field(init=False, repr=False, compare=False)
    _sql: Callable[[Props], bool] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.type == "TAG":
            if not isinstance(self.expression, str):
                raise FilterExpressionError(
                    f"a tag expression must be a str, not {type(self.expression).__name__}"
                )
            object.__setattr__(self, "_tags", parse_tags(self.expression))
            object.__setattr__(self, "_sql", None)
        elif self.type == "SQL92":
            object.__setattr__(self, "_tags", None)
            object.__setattr__(self, "_sql", compile_sql(self.expression))
        else:
            raise FilterExpressionError(f"selector type must be 'TAG' or 'SQL92', got {self.type!r}")

    @staticmethod
    def by_tag(expression: str = "*") -> MessageSelector:
        """Match messages whose tag is one of ``"TagA || TagB"``; ``"*"`` matches all."""
        return MessageSelector("TAG", expression)

    @staticmethod
    def by_sql(expression: str) -> MessageSelector:
        """Match messages whose properties satisfy the SQL92 expression."""
        return MessageSelector("SQL92", expression)

    @property
    def tags(self) -> list[str] | None:
        """The tag list of a TAG selector (None: every tag, or a SQL92 selector)."""
        return self._tags

    def matches(self, properties: Mapping[str, str], tags: str | None = None) -> bool:
        """Whether a message with these properties (and tag) passes the filter.

        Properties a SQL92 filter cannot evaluate (a number of more digits than CPython
        converts, say) do not match; that is logged as a warning, not raised."""
        if not isinstance(properties, Mapping):
            raise TypeError(f"properties must be a mapping, not {type(properties).__name__}")
        if self._sql is not None:
            return self._sql_matches(self._sql, properties, None)
        if self._tags is None:
            return True
        tag = tags if tags is not None else properties.get("TAGS")
        return tag in self._tags

    def _accepts(self, message: MessageExt) -> bool:
        """A consumer's SQL92 filter step (``_core``'s poll calls it for each message read under
        a SQL92 selector): ``matches`` on the message's properties, with the message's place in
        the warning when they cannot be evaluated."""
        if self._sql is None:
            return self.matches(message.properties)
        return self._sql_matches(self._sql, message.properties, message)

    def _sql_matches(
        self, sql: Callable[[Props], bool], properties: Props, message: MessageExt | None
    ) -> bool:
        """``sql(properties)``, or False (logged) when an error of the content stops it."""
        try:
            return sql(properties)
        except _PROCESS_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the content: no match
            where = "properties" if message is None else (
                f"message {message.msg_id} at offset {message.queue_offset} of {message.message_queue}"
            )
            log.warning(
                "SQL92 filter %.200r cannot be evaluated on %s (%s: %.200s); it does not match",
                self.expression, where, type(exc).__name__, exc,
            )
            return False
