"""MessageSelector: tag expressions and the SQL92 subset (three-valued logic, no eval)."""

from __future__ import annotations

import pytest

import mqlite
from mqlite import FilterExpressionError, Message, MessageQueue, MessageSelector
from mqlite.selector import compile_sql

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
