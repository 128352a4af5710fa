"""The model of transactions the state machines share (test_state_machine.py,
test_shared_state_machine.py): which sends and decisions are refused, what a decision writes,
and which messages a commit puts in their queues, in the order they were sent."""

from __future__ import annotations

OPEN = "open"


class TxnModel:
    """Transactions by id: their state and their halves; the progress values by key. A commit
    appends its halves' bodies to ``queues`` (the state machine's model of every queue)."""

    def __init__(self, queues: dict[tuple[str, int], list[bytes]]) -> None:
        self.queues = queues
        # id -> (state, halves as (send order, topic, queue, body))
        self.txns: dict[str, tuple[str, list[tuple[int, str, int, bytes]]]] = {}
        self.halves_sent = 0
        self.progress: dict[str, str] = {}

    def send_refused(self, tid: str) -> bool:
        """A send to ``tid`` raises TransactionStateError: it is decided."""
        return self.txns.get(tid, (OPEN, []))[0] != OPEN

    def sent(self, tid: str, topic: str, queue: int, body: bytes) -> None:
        """A half of ``tid`` was stored (in no queue yet)."""
        state, halves = self.txns.get(tid, (OPEN, []))
        halves.append((self.halves_sent, topic, queue, body))
        self.halves_sent += 1
        self.txns[tid] = (state, halves)

    def refusal(self, ids: list[str], commit: bool, progress: tuple[str, str] | None) -> str | None:
        """The error class name a decision raises, or None when it is accepted (an unknown id
        is reported before a conflict)."""
        want = "committed" if commit else "rolled back"
        if not ids and progress is None:
            return "IllegalArgumentError"
        if any(i not in self.txns for i in ids):
            return "TransactionNotFoundError"
        if any(self.txns[i][0] not in (OPEN, want) for i in ids):
            return "TransactionStateError"
        return None

    def decided(self, ids: list[str], commit: bool, progress: tuple[str, str] | None) -> tuple[bool, str]:
        """Applies an accepted decision; returns whether it writes, and an event label."""
        want = "committed" if commit else "rolled back"
        opened = sorted({i for i in ids if self.txns[i][0] == OPEN})
        new_progress = progress is not None and self.progress.get(progress[0]) != progress[1]
        copies: list[tuple[int, str, int, bytes]] = []
        for i in opened:
            copies += self.txns[i][1]
            self.txns[i] = (want, self.txns[i][1])
        if commit:
            for _, topic, queue, body in sorted(copies):
                self.queues[(topic, queue)].append(body)
        if progress is not None:
            self.progress[progress[0]] = progress[1]
        return bool(opened) or new_progress, f"txn_end: {want if opened else 'nothing new'}"

    def open_ids(self) -> list[str]:
        """The undecided transactions, sorted."""
        return sorted(i for i, (state, _) in self.txns.items() if state == OPEN)
