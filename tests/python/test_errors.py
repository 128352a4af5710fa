"""The exception tree: names, bases, codes, and construction as the Rust side does it."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import mqlite
from mqlite import errors as E

ALL = [getattr(E, name) for name in E.__all__]

BASES: list[tuple[type[BaseException], tuple[type[BaseException], ...]]] = [
    (E.MQError, (Exception,)),
    (E.MQClientError, (E.MQError,)),
    (E.IllegalArgumentError, (E.MQClientError, ValueError)),
    (E.InvalidTopicError, (E.IllegalArgumentError,)),
    (E.InvalidQueueError, (E.IllegalArgumentError,)),
    (E.InvalidMessageError, (E.IllegalArgumentError,)),
    (E.MessageTooLargeError, (E.InvalidMessageError,)),
    (E.PropertiesTooLargeError, (E.InvalidMessageError,)),
    (E.InvalidBatchError, (E.IllegalArgumentError,)),
    (E.InvalidConfigError, (E.IllegalArgumentError,)),
    (E.InvalidGroupError, (E.IllegalArgumentError,)),
    (E.FilterExpressionError, (E.IllegalArgumentError,)),
    (E.IllegalStateError, (E.MQClientError, RuntimeError)),
    (E.StoreClosedError, (E.IllegalStateError,)),
    (E.StoreReadOnlyError, (E.IllegalStateError,)),
    (E.IndexUnavailableError, (E.IllegalStateError,)),
    (E.StoreUsedAfterForkError, (E.IllegalStateError,)),
    (E.ClientClosedError, (E.IllegalStateError,)),
    (E.ClientIdInUseError, (E.IllegalStateError,)),
    (E.QueueNotAssignedError, (E.IllegalStateError, LookupError)),
    (E.ConsumerGroupActiveError, (E.IllegalStateError,)),
    (E.ConsumerGroupNotFoundError, (E.MQClientError, LookupError)),
    (E.TopicNotFoundError, (E.MQClientError, LookupError)),
    (E.TopicNotWritableError, (E.MQClientError,)),
    (E.TopicNotReadableError, (E.MQClientError,)),
    (E.MessageNotFoundError, (E.MQClientError, LookupError)),
    (E.StoreError, (E.MQError,)),
    (E.StoreLockedError, (E.StoreError,)),
    (E.StoreFullError, (E.StoreError, OSError)),
    (E.StorePoisonedError, (E.StoreError,)),
    (E.CorruptedLogError, (E.StoreError,)),
    (E.ConfigFileError, (E.StoreError,)),
    (E.CompressionError, (E.MQError,)),
    (E.StoreIOError, (E.StoreError, OSError)),
    (E.StoreNotFoundError, (E.StoreIOError, FileNotFoundError)),
    (E.StoreNotADirectoryError, (E.StoreIOError, NotADirectoryError)),
    (E.OffsetOutOfRangeError, (E.MQError, LookupError)),
    (E.TransactionError, (E.MQClientError,)),
    (E.TransactionNotFoundError, (E.TransactionError, LookupError)),
    (E.TransactionStateError, (E.TransactionError,)),
]


def test_every_class_is_listed_and_exported() -> None:
    assert {cls for cls, _ in BASES} == set(ALL)
    for cls in ALL:
        assert getattr(mqlite, cls.__name__) is cls
        assert cls.__name__ in mqlite.__all__
        assert cls.__module__ == "mqlite.errors"


@pytest.mark.parametrize(("cls", "bases"), BASES, ids=lambda v: getattr(v, "__name__", ""))
def test_bases(cls: type[BaseException], bases: tuple[type[BaseException], ...]) -> None:
    for base in bases:
        assert issubclass(cls, base)
    assert issubclass(cls, E.MQError)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_constructed_like_rust_does(cls: type[E.MQError]) -> None:
    exc = cls("queue id 9 out of range [0, 4)")
    assert str(exc) == "queue id 9 out of range [0, 4)"
    assert exc.message == "queue id 9 out of range [0, 4)"
    assert exc.args == ("queue id 9 out of range [0, 4)",)
    assert exc.code == cls.default_code
    assert isinstance(exc.retriable, bool)
    exc.code = "FROM_RUST"
    assert exc.code == "FROM_RUST"
    with pytest.raises(cls) as info:
        raise exc
    assert info.value.code == "FROM_RUST"


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_code_keyword_and_pickle(cls: type[E.MQError]) -> None:
    exc = cls("boom", code="X1")
    assert exc.code == "X1"
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert (str(back), back.code) == ("boom", "X1")


def test_default_codes_are_distinct_upper_snake() -> None:
    codes = [cls.default_code for cls in ALL]
    assert len(set(codes)) == len(codes)
    for code in codes:
        assert code.replace("_", "").isalpha() and code.isupper()


def test_only_store_locked_is_retriable() -> None:
    assert [cls for cls in ALL if cls.retriable] == [E.StoreLockedError]
    assert E.StoreLockedError("held").retriable is True


def test_builtin_catch_sites_work() -> None:
    with pytest.raises(ValueError):
        raise E.MessageTooLargeError("too big")
    with pytest.raises(LookupError):
        raise E.TopicNotFoundError("nope")
    with pytest.raises(OSError):
        raise E.StoreFullError("ENOSPC")
    with pytest.raises(RuntimeError):
        raise E.StoreClosedError("closed")


def test_errors_module_imports_nothing_from_the_extension() -> None:
    tree = ast.parse(Path(E.__file__).read_text(encoding="utf-8"))
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert set(imported) <= {"__future__", "warnings"}


# ---- file-system errors: typed, with errno and path -------------------------------------------


def test_consumer_files_under_a_file_raise_store_not_a_directory(tmp_path: Path) -> None:
    """``consumer_groups`` being a file: subscribe raises StoreNotADirectoryError (errno ENOTDIR,
    the path named), not a bare NotADirectoryError."""
    import errno

    root = tmp_path / "store"
    with mqlite.open(root) as store:
        store.create_topic("t", 1)
        (root / "consumer_groups").write_bytes(b"")
        with store.pull_consumer("g") as consumer:
            with pytest.raises(E.StoreNotADirectoryError) as info:
                consumer.subscribe("t")
    assert info.value.errno == errno.ENOTDIR
    assert info.value.filename and info.value.filename.startswith(str(root / "consumer_groups"))
    assert info.value.code == "STORE_NOT_A_DIRECTORY"


def test_an_unreadable_offsets_file_raises_store_io_error(tmp_path: Path) -> None:
    """``config/consumerOffset.json`` being a directory: reading the group offsets raises
    StoreIOError (errno EISDIR, the path named)."""
    import errno

    root = tmp_path / "store"
    with mqlite.open(root) as store:
        (root / "config" / "consumerOffset.json").mkdir()
        with pytest.raises(E.StoreIOError) as info:
            store.consumer_groups()
    assert info.value.errno == errno.EISDIR
    assert info.value.filename == str(root / "config" / "consumerOffset.json")
    assert str(root / "config" / "consumerOffset.json") in str(info.value)


@pytest.mark.parametrize("name", ["commitlog", "config"])
def test_a_symlink_loop_at_a_store_directory_keeps_its_errno(tmp_path: Path, name: str) -> None:
    """A symlink where the store keeps a directory is refused with ELOOP (the errno an
    ``O_NOFOLLOW`` open gives), so the error's text is not "[Errno None] None"."""
    import errno
    import shutil

    root = tmp_path / "store"
    mqlite.open(root).close()
    shutil.rmtree(root / name)
    (root / name).symlink_to(root / name)  # a loop
    with pytest.raises(E.StoreIOError) as info:
        mqlite.open(root)
    assert info.value.errno == errno.ELOOP
    assert info.value.filename == str(root / name)
    text = str(info.value)
    assert "None" not in text and "symbolic link" in text and str(root / name) in text, text
