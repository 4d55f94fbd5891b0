"""Following a change topic from where the last look left off, as a long-lived consumer
does: what the soak checks the topic with.

`kafka_read.read_topic` reads a topic whole, which a test does once; the soak looked every
minute, and a look cost what the topic held (with the mirror check's ledger reads, the
soak's own CPU a commit went from 0.11 s to 0.49 s in 40 minutes, on the cores the
service shares, so the service's latency late in a run paid for the checker's history).
A `TopicFollower` keeps its positions and the folded state, and reads what came since.

What it checks is what `read_topic` + `confirmed` + `folded_images` check: the messages of
attempts a marker names (an aborted attempt's are never read, the consumer being
read_committed), no event id twice, and the images folded by key. Markers are read up to
ends taken before the change topic's: a marker read is in a transaction committed before
the change topic's ends were taken, so its messages are read in the same look.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka_read import Message, settled_ends

from meltwater.sinks.kafka_sink import DEFAULT_BATCHES_TOPIC


@dataclass
class _Followed:
    """One topic's consumer and where it is in each partition."""

    topic: str
    consumer: Consumer
    positions: dict[int, int] = field(default_factory=dict)  # where reading goes on
    taken: dict[int, int] = field(default_factory=dict)  # past the last message delivered


class TopicFollower:
    """Follows a pipeline's change topic and its markers (see the module doc)."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str,
                 batches_topic: str = DEFAULT_BATCHES_TOPIC) -> None:
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id.encode()
        self._changes = _Followed(topic, self._consumer("read_committed"))
        self._batches = _Followed(batches_topic, self._consumer("read_committed"))
        self.markers: list[dict] = []  # this pipeline's, in order
        self._confirmed: set[str] = set()  # attempts a marker names
        self._unfolded: list[str] = []  # those named since the last fold, in order
        self._pending: dict[str, list[Message]] = {}  # attempt -> its messages, unconfirmed
        self.event_ids: set[str] = set()
        self.twice: list[str] = []
        self.folded: dict[str | None, dict] = {}  # key -> the last image (`after`)
        self.events = 0  # change events (tombstones not counted) of confirmed attempts

    def _consumer(self, isolation: str) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": "meltwater-soak",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "error",
                         # its consumers live through the soak's broker cuts: their
                         # reconnect attempts are not news (syslog levels; 3 is an error)
                         "log_level": 2})

    def close(self) -> None:
        self._changes.consumer.close()
        self._batches.consumer.close()

    def advance(self, timeout: float = 30) -> bool:
        """Read what came since the last look, fold what markers confirm; False when a
        transaction is open in either topic (Tansu then hides its partitions from a
        read_committed consumer), or a partition did not read to its end in time: what
        was read is kept, the rest is read next time."""
        ends = {}
        for followed in (self._batches, self._changes):  # markers' ends first: see above
            found = settled_ends(self.bootstrap, followed.topic, timeout)
            if found is None:
                return False
            ends[followed.topic] = found
        whole = True
        for followed in (self._batches, self._changes):
            whole &= self._read(followed, ends[followed.topic], timeout)
        self._fold()
        return whole

    def _read(self, followed: _Followed, ends: dict[int, int], timeout: float) -> bool:
        """Read a topic on to `ends`. Where the consumer is comes from its own position,
        not the last offset delivered: a transaction's commit marker takes the last offset
        of a partition and is never delivered."""
        behind = {p: end for p, end in ends.items() if followed.positions.get(p, 0) < end}
        if not behind:
            return True
        assigned = [TopicPartition(followed.topic, p, followed.positions.get(p, 0))
                    for p in behind]
        followed.consumer.assign(assigned)
        deadline = time.monotonic() + timeout
        while True:
            for at in followed.consumer.position(assigned):
                if at.offset >= 0:
                    followed.positions[at.partition] = max(
                        at.offset, followed.positions.get(at.partition, 0))
            if all(followed.positions.get(p, 0) >= end for p, end in behind.items()):
                return True
            if time.monotonic() > deadline:
                return False
            message = followed.consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"{followed.topic}: {error}")
            partition, offset = message.partition(), message.offset()
            if offset < followed.taken.get(partition, 0):
                continue  # delivered before (a re-assignment's overlap)
            followed.taken[partition] = offset + 1
            self._take(followed, Message(partition, offset, message.key(), message.value(),
                                         dict(message.headers() or [])))

    def _take(self, followed: _Followed, message: Message) -> None:
        if followed is self._batches:
            if message.key == self.transactional_id:
                marker = json.loads(message.value or b"null")
                self.markers.append(marker)
                self._confirmed.add(marker["transaction"])
                self._unfolded.append(marker["transaction"])
            return
        self._pending.setdefault(message.transaction, []).append(message)

    def _fold(self) -> None:
        """Fold the messages of the attempts confirmed since the last fold, in the order
        their markers came (and any of an attempt confirmed earlier that came late, which
        the order of the ends should rule out): a look costs what came since, not what
        the topic holds."""
        late = [a for a in self._pending if a in self._confirmed and a not in self._unfolded]
        for attempt in [*self._unfolded, *late]:
            for message in sorted(self._pending.pop(attempt, []),
                                  key=lambda m: (m.partition, m.offset)):
                if message.event_id in self.event_ids:
                    self.twice.append(message.event_id)
                self.event_ids.add(message.event_id)
                event = message.event
                if event is None:
                    continue
                self.events += 1
                if event["op"] == "d":
                    self.folded.pop(message.key_text, None)
                else:
                    self.folded[message.key_text] = event["after"]
        self._unfolded.clear()

    def folded_images(self) -> list[str]:
        """What a consumer folding the topic holds: as `kafka_read.folded_images` says it."""
        return sorted(json.dumps(row, sort_keys=True) for row in self.folded.values())
