"""MessageSelector: tag expressions and the SQL92 subset (three-valued logic, no eval)."""

from __future__ import annotations

import logging
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mqlite
from mqlite import FilterExpressionError, Message, MessageQueue, MessageSelector
from mqlite.selector import MAX_NESTING, compile_sql

# A legal property value (5,000 bytes) that no filter can read as a number: int() of a text of
# more than 4,300 digits raises ValueError (CPython's integer-string conversion limit).
POISON = "9" * 5000

PROPS = {"a": "7", "b": "2.5", "region": "eu", "flag": "true", "name": "it's", "TAGS": "TagA",
         "sep": "1_000", "padded": " 7 ", "nan": "nan", "indic": "\u0663"}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("a > 5", True),
        ("a > 5 AND region = 'eu'", True),
        ("a < 5 OR region = 'us'", False),
        ("NOT a = 7", False),
        ("a <> 7", False),
        ("a != 8", True),
        ("a >= 7 AND a <= 7", True),
        ("b > 2.4 AND b < 2.6", True),
        ("a BETWEEN 1 AND 7", True),
        ("a NOT BETWEEN 1 AND 7", False),
        ("region IN ('us', 'eu')", True),
        ("region NOT IN ('us', 'eu')", False),
        ("a IN (1, 7)", True),
        ("missing IS NULL", True),
        ("region IS NOT NULL", True),
        ("flag = TRUE", True),
        ("flag = FALSE", False),
        ("name = 'it''s'", True),
        ("region CONTAINS 'u'", True),
        ("region STARTSWITH 'e' AND region ENDSWITH 'u'", True),
        ("region NOT CONTAINS 'x'", True),
        ("TAGS = 'TagA'", True),
        ("(a > 5 OR a < 0) AND NOT (region = 'us')", True),
        ("a > -1", True),
        ("a = 7.0", True),
        ("5 < a", True),
        ("and_x IS NULL or a = 7", True),
        # three-valued logic: unknown is never a match, and NOT unknown stays unknown
        ("missing > 1", False),
        ("NOT missing > 1", False),
        ("missing > 1 OR a = 7", True),
        ("missing > 1 AND a = 7", False),
        ("region > 1", False),  # not a number: unknown
        ("NOT region > 1", False),
        ("missing IN ('x')", False),
        ("missing NOT IN ('x')", False),
        # a value is a number only when written as one (Java's parsing): otherwise unknown
        ("sep > 1", False),
        ("sep = '1_000'", True),
        ("padded = 7", False),
        ("nan > 1 OR nan <= 1", False),
        ("indic = 3", False),
    ],
)
def test_sql_truth_table(expr: str, expected: bool) -> None:
    assert compile_sql(expr)(PROPS) is expected
    assert MessageSelector.by_sql(expr).matches(PROPS) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "a >",
        "a > 5 AND",
        "(a > 5",
        "a > 5)",
        "a = 'unterminated",
        "a BETWEEN 'x' AND 'y'",
        "region > 'eu'",
        "a IN ()",
        "a ~ 3",
        "__import__('os').system('true')",
        "a IS 5",
        "region CONTAINS 5",
        "5abc = 1",
        "a > \u0663",  # a digit, but not an ASCII one
        pytest.param("(" * 400 + "a = 1" + ")" * 400, id="400 parentheses"),
        pytest.param("(" * 400 + "a = 1" + ")" * 200, id="400 parentheses, 200 closed"),
        pytest.param("NOT " * 1000 + "a = 1", id="1000 NOTs"),
        pytest.param("a > " + POISON, id="5000-digit literal"),
        pytest.param("a IN (1, " + POISON + ")", id="5000-digit IN item"),
        pytest.param("a BETWEEN 1 AND " + POISON, id="5000-digit BETWEEN bound"),
    ],
)
def test_sql_syntax_errors(expr: str) -> None:
    with pytest.raises(FilterExpressionError) as info:
        MessageSelector.by_sql(expr)
    assert isinstance(info.value, ValueError)
    assert str(info.value)


def test_keywords_are_case_insensitive() -> None:
    assert compile_sql("a > 5 and region in ('eu') and not missing is not null")(PROPS)


def test_tag_selector() -> None:
    s = MessageSelector.by_tag("TagA || TagB ")
    assert s.tags == ["TagA", "TagB"]
    assert s.matches({}, "TagB") and not s.matches({}, "TagC")
    assert s.matches({"TAGS": "TagA"})
    assert MessageSelector.by_tag("*").tags is None
    assert MessageSelector.by_tag("*").matches({}, None)
    assert MessageSelector.by_tag("A") == MessageSelector.by_tag("A")
    with pytest.raises(FilterExpressionError):
        MessageSelector("XPATH", "x")  # type: ignore[arg-type]


def test_sql_filter_end_to_end(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 1)
    p = mem_store.producer()
    for i in range(30):
        p.send(Message("t", str(i).encode(), properties={"a": str(i), "region": "eu" if i % 3 else "us"}))
    with mem_store.pull_consumer("g", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
        c.subscribe("t", MessageSelector.by_sql("a > 5 AND region = 'eu'"))
        got = [int(m.body) for m in c.poll(1, 100)]
    assert got == [i for i in range(6, 30) if i % 3]
    assert c.closed and c.committed(MessageQueue("t", 0)) == 30


def test_nesting_limit() -> None:
    """Parentheses and NOTs nest up to MAX_NESTING levels; one more is a typed error naming the
    limit, raised before the parser's recursion could exhaust the stack."""
    deepest = "(" * (MAX_NESTING - 1) + "NOT a = 1" + ")" * (MAX_NESTING - 1)
    assert MessageSelector.by_sql(deepest).matches({"a": "2"})
    for too_deep in ("(" * MAX_NESTING + "NOT a = 1" + ")" * MAX_NESTING, "NOT " * (MAX_NESTING + 1) + "a = 1"):
        with pytest.raises(FilterExpressionError, match=f"nested more than {MAX_NESTING}"):
            MessageSelector.by_sql(too_deep)


def test_nesting_error_is_typed_on_a_deep_caller_stack() -> None:
    """A caller already deep in its stack, with too little of it left for a nesting the limit
    allows, still gets the typed error, not RecursionError."""

    def depth() -> int:
        frame, n = sys._getframe(), 0
        while frame is not None:
            frame, n = frame.f_back, n + 1  # type: ignore[assignment]
        return n

    def at_depth(n: int) -> None:
        if n:
            at_depth(n - 1)
            return
        with pytest.raises(FilterExpressionError, match="nested"):
            MessageSelector.by_sql("(" * (MAX_NESTING - 1) + "a = 1" + ")" * (MAX_NESTING - 1))

    at_depth(sys.getrecursionlimit() - depth() - 40)  # 40 frames left for the parser


@pytest.mark.parametrize(
    ("expr", "matches_8"),
    [("a > 5", True), ("a = 7", False), ("NOT a > 5", False), ("a BETWEEN 1 AND 9", True),
     ("a NOT IN (1, 2)", True), ("a > 5 OR region = 'eu'", True)],
)
def test_a_value_the_filter_cannot_evaluate_does_not_match(
    expr: str, matches_8: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """As in RocketMQ's evaluator: an error while evaluating a message's properties is no
    match (whatever NOT or OR surround it), logged once, and never an exception."""
    selector = MessageSelector.by_sql(expr)
    with caplog.at_level(logging.WARNING, logger="mqlite.consumer"):
        assert selector.matches({**PROPS, "a": POISON}) is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "cannot be evaluated" in warnings[0] and expr in warnings[0]
    # the same selector still evaluates other messages
    assert selector.matches({**PROPS, "a": "8"}) is matches_8


def test_matches_needs_a_mapping() -> None:
    with pytest.raises(TypeError, match="properties"):
        MessageSelector.by_sql("a > 5").matches(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="properties"):
        MessageSelector.by_sql("a > 5").matches([("a", "7")])  # type: ignore[arg-type]


def test_poison_message_is_skipped_and_its_batch_delivered(
    mem_store: mqlite.Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A message the filter cannot evaluate is filtered out (logged once, naming it); the rest
    of its batch is delivered and the committed offset passes all three."""
    mem_store.create_topic("t", 1)
    p = mem_store.producer()
    for body, a in ((b"good-1", "10"), (b"poison", POISON), (b"good-2", "20")):
        p.send(Message("t", body, properties={"a": a}), queue_id=0)
    mq = MessageQueue("t", 0)
    with caplog.at_level(logging.WARNING, logger="mqlite.consumer"):
        with mem_store.pull_consumer("g", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
            c.subscribe("t", MessageSelector.by_sql("a > 5"))
            assert [m.body for m in c.poll(1)] == [b"good-1", b"good-2"]
            assert c.position(mq) == 3
    assert c.committed(mq) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "offset 1 of" in warnings[0] and str(mq) in warnings[0]


# Tokens of the SQL subset, some near-misses, and the inputs that once escaped as untyped errors.
_SQL_TOKENS = st.sampled_from(
    ["a", "b", "region", "missing", "TAGS", "5", "-1.5", "2e3", "'eu'", "''", "TRUE", "FALSE",
     "NULL", "(", ")", ",", "=", "<>", "!=", "<", "<=", ">", ">=", "AND", "OR", "NOT", "IS",
     "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH", "'", "~", "\u0663", POISON,
     "(" * 150, ")" * 150, "NOT " * 150]
)
_PROP_VALUES = st.one_of(
    st.sampled_from(["7", "-2.5", "eu", "true", "nan", "1e999", " 7", POISON, "-" + POISON, POISON + ".5"]),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    tokens=st.lists(_SQL_TOKENS, max_size=14),
    props=st.dictionaries(st.sampled_from(["a", "b", "region", "TAGS"]), _PROP_VALUES, max_size=4),
)
def test_sql_fuzz_only_typed_errors_and_booleans(tokens: list[str], props: dict[str, str]) -> None:
    """Any text: by_sql either compiles it or raises FilterExpressionError; a compiled filter
    answers True or False for any properties and never raises."""
    logging.getLogger("mqlite.consumer").disabled = True
    try:
        try:
            selector = MessageSelector.by_sql(" ".join(tokens))
        except FilterExpressionError:
            return
        assert selector.matches(props) in (True, False)
    finally:
        logging.getLogger("mqlite.consumer").disabled = False
