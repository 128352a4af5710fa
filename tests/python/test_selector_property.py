"""Property tests of the SQL92 selector against a reference evaluator written here.

Hypothesis draws an expression tree and a property map; the tree is rendered as SQL92 text
(keywords in either case, parentheses only where precedence needs them or at random) and
compiled by ``mqlite.selector``, while ``reference`` evaluates the tree itself. The verdicts
must agree: a message matches exactly when the expression is TRUE.

The reference is RocketMQ's semantics for string-valued message properties:
- logic is three-valued (TRUE, FALSE, UNKNOWN=None); AND is FALSE if any side is FALSE, else
  UNKNOWN if any side is UNKNOWN; OR is TRUE if any side is TRUE, else UNKNOWN if any side is
  UNKNOWN; NOT UNKNOWN is UNKNOWN (RocketMQ's LogicExpression and UnaryExpression);
- a missing property makes every test of it UNKNOWN except IS [NOT] NULL;
- a property is a number only when its whole text is one, as Java parses it (an integer is a
  long, anything with a point or an exponent a double; no spaces, separators or non-ASCII
  digits); a numeric comparison or BETWEEN on a property that is not a number is UNKNOWN;
- ``= 'text'`` and ``IN`` compare strings exactly; ``= TRUE`` reads ``true``/``false`` in any
  case, anything else is UNKNOWN; two properties compare as strings for ``=``/``<>`` and as
  numbers (or UNKNOWN) for ordering;
- ``NOT BETWEEN``, ``NOT IN`` and ``NOT CONTAINS`` are the negation of a known result and
  UNKNOWN stays UNKNOWN.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqlite import FilterExpressionError, MessageSelector
from mqlite.selector import compile_sql

Truth = Union[bool, None]
Props = dict[str, str]

NAMES = ["a", "b", "region", "flag", "missing", "TAGS", "x.y", "$id", "and_x", "Not1"]
VALUES = ["7", "-3", "0", "10", "2.5", "7.0", "1e1", "+5", ".5", "1.", "-0.5e1", " 7 ", "1_000",
          "nan", "inf", "\u0663", "eu", "us", "it's", "true", "FALSE", "TagA", "e", "7a"]
STRINGS = ["eu", "us", "it's", "", "7", "true", "TagA", "e", "u", "'", "a b"]
NUMBERS = ["0", "1", "7", "-1", "-3", "10", "2.5", "0.5", ".5", "1e1", "-1.5", "7.0", "3E0"]
ORDER_OPS = ["<", "<=", ">", ">="]
EQ_OPS = ["=", "<>", "!="]


# ---------------------------------------------------------------------------------------------
# the expression tree


@dataclass(frozen=True)
class Prop:
    name: str


@dataclass(frozen=True)
class Lit:
    text: str  # as written in the expression
    kind: str  # "num", "str" or "bool"


Operand = Union[Prop, Lit]


@dataclass(frozen=True)
class Cmp:
    op: str
    left: Operand
    right: Operand


@dataclass(frozen=True)
class Between:
    prop: Prop
    low: str
    high: str
    negate: bool


@dataclass(frozen=True)
class In:
    prop: Prop
    items: tuple[str, ...]
    negate: bool


@dataclass(frozen=True)
class IsNull:
    prop: Prop
    negate: bool


@dataclass(frozen=True)
class Text:
    word: str  # CONTAINS, STARTSWITH or ENDSWITH
    prop: Prop
    needle: str
    negate: bool


@dataclass(frozen=True)
class Not:
    inner: Expr


@dataclass(frozen=True)
class Logic:
    op: str  # AND or OR
    parts: tuple[Expr, ...]


@dataclass(frozen=True)
class Paren:
    inner: Expr


Expr = Union[Cmp, Between, In, IsNull, Text, Not, Logic, Paren]


# ---------------------------------------------------------------------------------------------
# the reference evaluator


def java_number(text: str) -> int | float | None:
    """The number a property's text is for Java's Long/Double parsing, else None."""
    if not text or not all(c in "0123456789+-.eE" for c in text):
        return None
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def literal_value(lit: Lit) -> int | float | str | bool:
    if lit.kind == "num":
        n = java_number(lit.text)
        assert n is not None, lit
        return n
    if lit.kind == "bool":
        return lit.text.upper() == "TRUE"
    return lit.text


def operand_value(o: Operand, props: Props) -> int | float | str | bool | None:
    return props.get(o.name) if isinstance(o, Prop) else literal_value(o)


def order(op: str, x: float, y: float) -> bool:
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "=": x == y}.get(op, x != y)


def compare(op: str, left: Operand, right: Operand, props: Props) -> Truth:
    a, b = operand_value(left, props), operand_value(right, props)
    if a is None or b is None:
        return None
    if isinstance(a, bool) or isinstance(b, bool):
        flags = [v if isinstance(v, bool) else {"true": True, "false": False}.get(str(v).lower())
                 for v in (a, b)]
        if flags[0] is None or flags[1] is None:
            return None
        return (flags[0] == flags[1]) == (op == "=")
    if isinstance(a, str) and isinstance(b, str):
        if op in EQ_OPS:
            return (a == b) == (op == "=")
        na, nb = java_number(a), java_number(b)
        return None if na is None or nb is None else order(op, na, nb)
    na = java_number(a) if isinstance(a, str) else a
    nb = java_number(b) if isinstance(b, str) else b
    return None if na is None or nb is None else order(op, na, nb)


def negated(r: Truth, negate: bool) -> Truth:
    return None if r is None else r != negate


def reference(e: Expr, props: Props) -> Truth:
    if isinstance(e, Paren):
        return reference(e.inner, props)
    if isinstance(e, Cmp):
        return compare(e.op, e.left, e.right, props)
    if isinstance(e, IsNull):
        return (props.get(e.prop.name) is None) != e.negate
    value = props.get(e.prop.name) if isinstance(e, (Between, In, Text)) else None
    if isinstance(e, Between):
        n = None if value is None else java_number(value)
        lo, hi = java_number(e.low), java_number(e.high)
        assert lo is not None and hi is not None
        return negated(None if n is None else lo <= n <= hi, e.negate)
    if isinstance(e, In):
        return negated(None if value is None else value in e.items, e.negate)
    if isinstance(e, Text):
        if value is None:
            return None
        test = {"CONTAINS": str.__contains__, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}
        return test[e.word](value, e.needle) != e.negate
    if isinstance(e, Not):
        r = reference(e.inner, props)
        return None if r is None else not r
    results = [reference(p, props) for p in e.parts]
    decisive = e.op == "OR"  # TRUE decides an OR, FALSE an AND
    if decisive in results:
        return decisive
    return None if None in results else not decisive


# ---------------------------------------------------------------------------------------------
# rendering


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def render_operand(o: Operand) -> str:
    if isinstance(o, Prop):
        return o.name
    return quote(o.text) if o.kind == "str" else o.text


def render(e: Expr, kw: dict[str, str]) -> str:
    not_ = f"{kw['NOT']} "
    if isinstance(e, Paren):
        return f"({render(e.inner, kw)})"
    if isinstance(e, Cmp):
        return f"{render_operand(e.left)} {e.op} {render_operand(e.right)}"
    if isinstance(e, IsNull):
        return f"{e.prop.name} {kw['IS']} {not_ if e.negate else ''}{kw['NULL']}"
    if isinstance(e, Between):
        return (f"{e.prop.name} {not_ if e.negate else ''}{kw['BETWEEN']} {e.low} "
                f"{kw['AND']} {e.high}")
    if isinstance(e, In):
        return f"{e.prop.name} {not_ if e.negate else ''}{kw['IN']} ({', '.join(map(quote, e.items))})"
    if isinstance(e, Text):
        return f"{e.prop.name} {not_ if e.negate else ''}{kw[e.word]} {quote(e.needle)}"
    if isinstance(e, Not):
        inner = e.inner
        text = render(inner, kw)
        return not_ + (f"({text})" if isinstance(inner, Logic) else text)
    # AND binds tighter than OR: an OR inside an AND needs parentheses, and so does any
    # Logic inside a Logic of the same kind only to keep the tree's shape visible (no effect).
    parts = [f"({render(p, kw)})" if isinstance(p, Logic) and (p.op == "OR" or e.op == "OR") and p.op != e.op
             else render(p, kw) for p in e.parts]
    return f" {kw[e.op]} ".join(parts)


KEYWORDS = ["AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "CONTAINS",
            "STARTSWITH", "ENDSWITH"]


# ---------------------------------------------------------------------------------------------
# strategies

props_st = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=len(NAMES))
prop_st = st.builds(Prop, st.sampled_from(NAMES))
num_st = st.builds(Lit, st.sampled_from(NUMBERS), st.just("num"))
str_st = st.builds(Lit, st.sampled_from(STRINGS), st.just("str"))
bool_st = st.builds(Lit, st.sampled_from(["TRUE", "FALSE", "true", "False"]), st.just("bool"))


@st.composite
def comparison(draw: st.DrawFn) -> Cmp:
    op = draw(st.sampled_from(ORDER_OPS + EQ_OPS))
    if op in ORDER_OPS:
        other: Operand = draw(st.one_of(num_st, prop_st))
    else:
        other = draw(st.one_of(num_st, str_st, bool_st, prop_st))
    prop = draw(prop_st)
    # a literal may stand on either side
    return Cmp(op, other, prop) if draw(st.booleans()) else Cmp(op, prop, other)


predicate_st = st.one_of(
    comparison(),
    st.builds(Between, prop_st, st.sampled_from(NUMBERS), st.sampled_from(NUMBERS), st.booleans()),
    st.builds(In, prop_st, st.lists(st.sampled_from(STRINGS), min_size=1, max_size=4).map(tuple),
              st.booleans()),
    st.builds(IsNull, prop_st, st.booleans()),
    st.builds(Text, st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]), prop_st,
              st.sampled_from(STRINGS), st.booleans()),
)

expr_st: st.SearchStrategy[Expr] = st.recursive(
    predicate_st,
    lambda inner: st.one_of(
        st.builds(Not, inner),
        st.builds(Paren, inner),
        st.builds(Logic, st.sampled_from(["AND", "OR"]), st.lists(inner, min_size=2, max_size=4).map(tuple)),
    ),
    max_leaves=12,
)

keyword_case_st = st.fixed_dictionaries(
    {k: st.sampled_from([k, k.lower(), k.capitalize()]) for k in KEYWORDS}
)


# ---------------------------------------------------------------------------------------------
# properties


@settings(max_examples=300, deadline=None, derandomize=True)
@given(expr=expr_st, props=props_st, kw=keyword_case_st)
def test_verdict_matches_the_reference(expr: Expr, props: Props, kw: dict[str, str]) -> None:
    text = render(expr, kw)
    want = reference(expr, props) is True
    assert compile_sql(text)(props) is want, f"{text!r} on {props!r}: reference says {want}"
    assert MessageSelector.by_sql(text).matches(props) is want


@settings(max_examples=150, deadline=None, derandomize=True)
@given(expr=expr_st, props=props_st, kw=keyword_case_st)
def test_negation_is_the_complement_when_known(expr: Expr, props: Props, kw: dict[str, str]) -> None:
    text = render(expr, kw)
    truth = reference(expr, props)
    matches = MessageSelector.by_sql(text).matches(props)
    not_matches = MessageSelector.by_sql(f"NOT ({text})").matches(props)
    if truth is None:
        assert not matches and not not_matches, f"UNKNOWN {text!r} matched on {props!r}"
    else:
        assert matches != not_matches, f"{text!r} on {props!r}"


# Token soup: fragments of the grammar in any order, to reach the parser's error paths.
SOUP = ["a", "b", "'x'", "'", "7", "-1", "2.5", "1e", ".", "(", ")", ",", "=", "<>", "<", ">=",
        "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "CONTAINS", "ENDSWITH", "$",
        "\t", "\u00e9", "\u0663", "9" * 5000, "''", "!", "==", ";", "--"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(parts=st.lists(st.sampled_from(SOUP) | st.text(max_size=4), max_size=14), props=props_st)
def test_any_text_compiles_or_raises_filter_expression_error(parts: list[str], props: Props) -> None:
    text = " ".join(parts)
    try:
        selector = MessageSelector.by_sql(text)
    except FilterExpressionError:
        with pytest.raises(FilterExpressionError):
            compile_sql(text)
        return
    assert type(selector.matches(props)) is bool
