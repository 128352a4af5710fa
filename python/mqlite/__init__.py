"""mqlite: an embedded durable message queue with Apache RocketMQ's storage engine, in Rust.

>>> import mqlite
>>> with mqlite.open(":memory:") as store:
...     result = store.producer().send(mqlite.Message("orders", b"hello", tags="new"))
...     [m.body for m in store.read(result.message_queue, 0)]
[b'hello']
"""

from mqlite.errors import (
    CorruptedLogError,
    FlushDiskTimeoutError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidBatchError,
    InvalidConfigError,
    InvalidMessageError,
    InvalidQueueError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    MQClientError,
    MQError,
    MQTimeoutError,
    OffsetOutOfRangeError,
    PropertiesTooLargeError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StorePoisonedError,
    StoreReadOnlyError,
    StoreUsedAfterForkError,
    TopicNotFoundError,
    TopicNotWritableError,
    TransactionError,
)
from mqlite import _core
from mqlite.message import (
    GetMessageStatus,
    Message,
    MessageExt,
    MessageQueue,
    SendBatchResult,
    SendResult,
    SendStatus,
)
from mqlite.producer import Producer
from mqlite.store import Store, open
from mqlite.topic import TopicConfig

__version__: str = _core.__version__

__all__ = [
    "__version__",
    "open",
    "Store",
    "Producer",
    "Message",
    "MessageQueue",
    "MessageExt",
    "SendResult",
    "SendBatchResult",
    "SendStatus",
    "GetMessageStatus",
    "TopicConfig",
    "MQError",
    "MQClientError",
    "IllegalArgumentError",
    "InvalidTopicError",
    "InvalidQueueError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "InvalidBatchError",
    "InvalidConfigError",
    "IllegalStateError",
    "StoreClosedError",
    "StoreReadOnlyError",
    "StoreUsedAfterForkError",
    "TopicNotFoundError",
    "TopicNotWritableError",
    "MessageNotFoundError",
    "StoreError",
    "StoreLockedError",
    "StoreFullError",
    "StorePoisonedError",
    "CorruptedLogError",
    "StoreIOError",
    "OffsetOutOfRangeError",
    "MQTimeoutError",
    "FlushDiskTimeoutError",
    "TransactionError",
]
