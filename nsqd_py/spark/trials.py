"""Which messages are dead letters: suspects, tried apart from the others.

nsqd's `attempts` counts every delivery, and most deliveries that do not end in a FIN are not the message's fault:
the source's own hand-backs (beyond a quota, after an availableNow cutoff, a losing attempt's chunk, what a failing
task held), a storage outage that fails the publish, an nsqd that went away. Rows are published before their FIN,
so nothing downstream (a UDF, a sink) ever makes nsqd deliver a message again. What can be the message's fault is
a task that dies (out of memory, a crash) while it holds the message before publishing it.

So a message delivered more than maxAttempts times is only a *suspect*. A task that takes suspects tries them
apart: it writes down which ones (a trial, `LOCATION/<query>/_trials/<topic>/<uuid>.json`, the topic encoded as in
slice paths), publishes them as a chunk of their own, and removes the trial when their FIN is sent, when it hands
them back, or when it fails in any way it survives (a storage error, a lost connection, a batch that closed). A
trial that stays therefore means the task died holding just those messages: a trial's messages are tried again one
at a time.

A task can also die because Spark ends it: a speculative copy that lost, a cancelled stage, `query.stop()`. Spark
then has the worker killed (SIGKILL, spark.python.task.killTimeout after the task's cancellation, plus up to two
seconds), and before that nothing reaches the Python worker: no signal, no closed socket, no exception. Measured
with Spark 4 in local mode; PySpark's daemon kills the worker on the JVM's request. So no task can tell its
trial was cut short by Spark, and a trial that stayed proves nothing alone: a message is a dead letter only when
two trials holding it stayed, one of them with it alone. A dead letter explains the trials that listed it, which
then count against none of their other messages.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from ..client.protocol import Message
from .slices import SliceStore, path_component

_TRIALS = "_trials"
#: trials that stayed holding a message before it is a dead letter (one of them with it alone)
_DEATHS = 2


@dataclass
class Trial:
    """A trial file: the ids of the suspects one task tried together."""

    fs: pafs.FileSystem
    path: str
    nsqd: str
    ids: frozenset[bytes]
    #: how many messages were tried together (ids shrink as they are settled elsewhere; the size stays)
    size: int
    #: the trials that stayed and listed some of these messages (forgotten once this one ends)
    earlier: list[Trial] = field(default_factory=list)

    def write(self) -> None:
        with self.fs.open_output_stream(self.path) as out:
            out.write(json.dumps({"nsqd": self.nsqd, "size": self.size,
                                  "ids": sorted(i.decode() for i in self.ids)}).encode())

    def end(self) -> None:
        """The task is alive after the trial: remove it, and its messages from the earlier trials."""
        _delete(self.fs, self.path)
        forget(self.ids, self.earlier)


@dataclass(frozen=True)
class Verdicts:
    """A take's suspects, judged by the trials that stayed."""

    #: two trials holding them stayed, one with them alone: dead letters
    dead: list[Message]
    #: in a trial that stayed, not yet convicted: to be tried one at a time
    alone: list[Message]
    #: never tried: to be tried together
    untried: list[Message]

    def next_trial(self) -> list[Message]:
        """The messages to try now: the first to try alone (there are only as many as trials that stayed), else
        the untried together."""
        return self.alone[:1] or self.untried


class Trials:
    """The trial files of one topic's messages from one nsqd, in a query's write-ahead location."""

    def __init__(self, store: SliceStore, topic: str, nsqd: str) -> None:
        self.fs = store.fs
        self.directory = f"{store.root}/{_TRIALS}/{path_component(topic)}"
        self.nsqd = nsqd

    def failed(self) -> list[Trial]:
        """The trials of this nsqd's messages that did not end: a task died during them (or one runs now, on other
        messages)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.directory, allow_not_found=True))
        trials = []
        for info in infos:
            if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
                trial = self._read(info.path)
                if trial is not None and trial.nsqd == self.nsqd:
                    trials.append(trial)
        return trials

    def judge(self, suspects: list[Message], failed: list[Trial]) -> Verdicts:
        """A suspect is dead when it died twice, once alone: one trial that stayed may be Spark's kill."""
        deaths: dict[bytes, int] = {}
        alone: set[bytes] = set()
        for trial in failed:
            for msg_id in trial.ids:
                deaths[msg_id] = deaths.get(msg_id, 0) + 1
                if trial.size == 1:
                    alone.add(msg_id)
        dead = {msg_id for msg_id, count in deaths.items() if count >= _DEATHS and msg_id in alone}
        return Verdicts(dead=[m for m in suspects if m.id in dead],
                        alone=[m for m in suspects if m.id in deaths and m.id not in dead],
                        untried=[m for m in suspects if m.id not in deaths])

    def start(self, messages: list[Message], failed: Iterable[Trial] = ()) -> Trial:
        """Write down a trial of ``messages`` before they are published."""
        ids = frozenset(m.id for m in messages)
        self.fs.create_dir(self.directory, recursive=True)
        trial = Trial(self.fs, f"{self.directory}/{uuid.uuid4().hex}.json", self.nsqd, ids, len(ids),
                      [t for t in failed if t.ids & ids])
        trial.write()
        return trial

    def _read(self, path: str) -> Trial | None:
        try:
            with self.fs.open_input_stream(path) as source:
                data = json.loads(source.read())
        except FileNotFoundError:  # ended meanwhile
            return None
        return Trial(self.fs, path, data["nsqd"], frozenset(i.encode() for i in data["ids"]), data["size"])


def explained(dead: frozenset[bytes], trials: list[Trial]) -> list[Trial]:
    """Remove the trials that listed these dead letters: a task that died holding one of them died of it, so those
    trials count against none of their other messages (a second culprit among them takes a group trial again).
    Returns the trials left."""
    for trial in trials:
        if trial.ids & dead:
            _delete(trial.fs, trial.path)
    return [trial for trial in trials if not trial.ids & dead]


def forget(ids: frozenset[bytes], trials: Iterable[Trial]) -> None:
    """Remove ``ids`` from these trials' files (a file left empty goes; the size stays). Two tasks rewriting one
    file at once may bring back settled ids or drop some: that changes whether a message of a group is tried alone
    again, and a brought-back id is one false death of a message, which makes no dead letter unless a trial of it
    alone stays too."""
    for trial in trials:
        if trial.ids & ids:
            trial.ids -= ids
            if trial.ids:
                trial.write()
            else:
                _delete(trial.fs, trial.path)


def _delete(fs: pafs.FileSystem, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)
