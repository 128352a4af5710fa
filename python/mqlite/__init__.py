"""mqlite: an embedded durable message queue with Apache RocketMQ's storage engine, in Rust.

>>> import mqlite
>>> with mqlite.open(":memory:") as store:
...     result = store.producer().send(mqlite.Message("orders", b"hello", tags="new"))
...     [m.body for m in store.read(result.message_queue, 0)]
[b'hello']
"""

from mqlite.errors import (
    ClientClosedError,
    ClientIdInUseError,
    CompressionError,
    ConfigFileError,
    ConsumerGroupActiveError,
    ConsumerGroupNotFoundError,
    CorruptedLogError,
    FilterExpressionError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidBatchError,
    InvalidConfigError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidQueueError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    MQClientError,
    MQError,
    OffsetOutOfRangeError,
    PropertiesTooLargeError,
    QueueNotAssignedError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreNotADirectoryError,
    StoreNotFoundError,
    StoreLockedError,
    StorePoisonedError,
    StoreReadOnlyError,
    IndexUnavailableError,
    StoreUsedAfterForkError,
    TopicNotFoundError,
    TopicNotReadableError,
    TopicNotWritableError,
    TransactionError,
    TransactionNotFoundError,
    TransactionStateError,
)
from mqlite import _core
from mqlite.errors import _DEPRECATED
from mqlite.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueStrategy,
)
from mqlite.maintenance import (
    AffectedMessage,
    Damage,
    RepairReport,
    VerifyReport,
    VerifyStep,
    repair,
    verify,
)
from mqlite.message import (
    GetMessageStatus,
    Message,
    MessageExt,
    MessageQueue,
    SendBatchResult,
    SendResult,
    SendStatus,
)
from mqlite.admin import DeletedFile, FileUsage, GroupSummary, QueueStatus, StoreInfo, TopicStatus
from mqlite.offsets import QueueProgress
from mqlite.producer import MessageQueueSelector, Producer, SendCallback
from mqlite.pull import PullConsumer
from mqlite.push import PushConsumer
from mqlite.dlq import DeadLetter, DeadLetterQueue, RetryView
from mqlite.retry import SentBack
from mqlite.subgroup import SubscriptionGroupConfig
from mqlite.selector import MessageSelector
from mqlite.status import ConsumeFromWhere, ConsumeOrderlyStatus, ConsumeStatus, MessageModel, ReconsumeLater
from mqlite.store import KeyQueryResult, Store, open
from mqlite.timers import PendingTimer, TimerChange, TimerOutcome
from mqlite.topic import TopicConfig
from mqlite.transaction import (
    LocalTransactionState,
    PendingTransaction,
    Transaction,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__version__: str = _core.__version__

__all__ = [
    "__version__",
    "open",
    "verify",
    "repair",
    "VerifyReport",
    "VerifyStep",
    "RepairReport",
    "Damage",
    "AffectedMessage",
    "Store",
    "Producer",
    "MessageQueueSelector",
    "SendCallback",
    "PullConsumer",
    "PushConsumer",
    "MessageSelector",
    "ConsumeStatus",
    "ConsumeOrderlyStatus",
    "ReconsumeLater",
    "SentBack",
    "DeadLetter",
    "DeadLetterQueue",
    "RetryView",
    "SubscriptionGroupConfig",
    "PendingTimer",
    "TimerChange",
    "TimerOutcome",
    "ConsumeFromWhere",
    "MessageModel",
    "AllocateMessageQueueStrategy",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "QueueProgress",
    "QueueStatus",
    "TopicStatus",
    "GroupSummary",
    "StoreInfo",
    "FileUsage",
    "DeletedFile",
    "Message",
    "MessageQueue",
    "MessageExt",
    "KeyQueryResult",
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
    "InvalidGroupError",
    "FilterExpressionError",
    "IllegalStateError",
    "StoreClosedError",
    "StoreReadOnlyError",
    "IndexUnavailableError",
    "StoreUsedAfterForkError",
    "ClientClosedError",
    "ClientIdInUseError",
    "QueueNotAssignedError",
    "ConsumerGroupActiveError",
    "ConsumerGroupNotFoundError",
    "TopicNotFoundError",
    "TopicNotReadableError",
    "TopicNotWritableError",
    "MessageNotFoundError",
    "StoreError",
    "StoreLockedError",
    "StoreFullError",
    "StorePoisonedError",
    "CompressionError",
    "CorruptedLogError",
    "ConfigFileError",
    "StoreIOError",
    "StoreNotADirectoryError",
    "StoreNotFoundError",
    "OffsetOutOfRangeError",
    "TransactionError",
    "TransactionNotFoundError",
    "TransactionStateError",
    "TransactionProducer",
    "TransactionListener",
    "TransactionSendResult",
    "Transaction",
    "LocalTransactionState",
    "PendingTransaction",
]


# Exception classes nothing raises any more stay importable from here, without a warning
# (`mqlite.errors` warns on access). A module-level `__getattr__` would keep CPython from
# specializing attribute loads on this module: every `mqlite.Message` would become a dict
# look-up through the fallback, about three times slower.
MQTimeoutError = _DEPRECATED["MQTimeoutError"]
FlushDiskTimeoutError = _DEPRECATED["FlushDiskTimeoutError"]
