"""JSONL import in one call (:func:`import_file`): what :func:`~._jsonl.read_file` then
:func:`~._jsonl.import_parsed` do, the same checks, outcome and errors, faster on
PostgreSQL, where the write would otherwise wait for the whole parse (the server idle
meanwhile) and then the parse for the write. Its trade-offs:

* **The write overlaps the parse** (:class:`_Streamed`, :class:`ImportStream`): each run's
  events are checked as they are read (the in-order checks, a slice at a time) and their
  rows go to the server by one COPY, in one transaction, while the next lines are parsed;
  the server takes them in on the other core. It is committed only once every line has
  passed. Only inputs of new runs, one after another and in ``seq`` order (what an export
  into another store is), are streamed: the store must have none of the first runs, and a
  later run it has, or an idempotency key held twice, fails the COPY on the tables' unique
  constraints. Anything else (a line out of order, a run that comes back, any check or
  statement that fails) rolls the transaction back and imports the classic way, which
  compares, names the conflict and raises what is wrong, in the classic order: the same
  outcome, errors and all, only later. So nothing is written before the whole input is
  checked, and a bad input still writes nothing; the cost is a transaction that holds its
  rows (uncommitted) while the file is read, and work thrown away when it falls back.
* **Checksums by a child process** (:class:`_LineSums`): for a regular file a child
  process (this Python, isolated, hashlib only) reads the file again and hashes each
  line while this one parses; the checksums the lines state are compared with its list at
  the end (a tenth of the parse moves to another core). A mismatch, or any error meanwhile
  (whose line may not be the first bad one), reads the file again the classic way, which
  raises the first error. Of a signed file, the child hashes the event lines without
  their ``mac`` (as the verifier hands them to the parse), and the signatures are still
  verified here, as the lines are read; a pipe or standard input is read once.
* **Lean**: while checksums are deferred, the events checked and sent are not kept (the
  classic way keeps them all: a few hundred MB for a large export).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _to_json

from hypha_celery.errors import ImportFormatError
from hypha_celery.events import Event
from hypha_celery.events.envelope import KINDS
from hypha_celery.events.fold import View
from hypha_celery.exchange._jsonl import (
    _PROJECTED,
    MAX_LINE_BYTES,
    Parsed,
    Progress,
    _InOrder,
    _line_checks_out,
    _policy,
    _read_path,
    _Run,
    _stored_fields,
    import_parsed,
)
from hypha_celery.store import RUN_ID_MAX, EventStore, ImportResult
from hypha_celery.store.imports import ImportStream, close_fold
from hypha_celery.store.rows import json_data

_type_of = attrgetter("type")
_fields_of = attrgetter("__dict__")  # an envelope's fields (pydantic's layout)
_SEND = 2048  # rows sent to the stream this many at a time

def import_file(store: EventStore, path: str, *, key: bytes | None = None,
                verify: bool = False, allow_unsigned: bool = False,
                progress: Progress | None = None) -> ImportResult:
    """:func:`read_file` then :func:`import_parsed`: the same checks, the same outcome
    and errors (a bad line, a conflict: nothing written), in less time. On PostgreSQL the
    events of an input of runs the store does not have (an export into another store)
    are written while the lines after them are read, in the one transaction, committed
    once the whole input passed (:class:`_Streamed`), and the checksums of a regular
    file's lines are computed meanwhile by a child process (:class:`_LineSums`); any
    other input is read, then imported. An input that fails is read again the classic
    way (:func:`read_file`), which raises its first error."""
    policy = _policy(key, verify, allow_unsigned)
    stream = _Streamed(ImportStream(store))
    if stream.live and path != "-":  # standard input is read once
        stream.helper = _LineSums.start(path)
    try:
        parsed = _read_path(path, policy, progress, stream if stream.live else None)
    except (ImportFormatError, _ReadAgain):
        if stream.sums is None:
            raise
        parsed = _read_path(path, policy, None, None)  # its first error, or the slow way
    finally:
        stream.drop()  # rolls back, unless it committed
        stream.close_helper()
    if stream.committed is not None:
        return stream.committed
    return import_parsed(store, parsed)


class _ReadAgain(Exception):
    """Deferred checksums did not all match: the input is read again the classic way."""


#: What :class:`_LineSums`' child process runs: for each line of the file ``argv[1]``
#: (at most ``argv[2]`` bytes; a longer one ends the list) that is not blank, the
#: checksum :func:`_line_checks_out` would compare with the stated one, or ``-`` for a
#: line not as :func:`dump_line` writes it; one a line, in order. A signed line's ``mac``
#: member (last) is left out first, as the verifier leaves it out (a signed file's header
#: and trailer give ``-``).
_SUMS_CODE = """
import hashlib, sys
head, limit, sha, out = b',"checksum":"sha256:', int(sys.argv[2]), hashlib.sha256, []
size, mac = len(head) + 66, b',"mac":"'
with open(sys.argv[1], "rb") as file:
    while line := file.readline(limit + 1):
        if len(line) > limit:
            break
        raw = line.rstrip()
        if not raw:
            continue
        if raw[-74:-66] == mac and raw[-2:] == b'"}':
            raw = raw[:-74] + b"}"
        ok = raw[-size:-66] == head and raw[-2:] == b'"}'
        out.append("sha256:" + sha(raw[:-size] + b"}").hexdigest() if ok else "-")
sys.stdout.write("\\n".join(out))
"""


class _LineSums:
    """The checksums of a file's lines (:func:`_line_checks_out`'s), computed by a child
    process (this Python, isolated, hashlib only) while this one parses the lines: the
    hashing (a tenth of the parse) runs on another core. The file is read twice (from the
    page cache); a child that cannot start or fails gives no sums (then the input is read
    again the classic way)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self._proc = proc

    @classmethod
    def start(cls, path: str) -> _LineSums | None:
        """The child for the file at ``path``, if it is a regular file (a pipe's lines are
        read once) and the child starts."""
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return None
            return cls(subprocess.Popen(  # this Python, our code, a path argument
                [sys.executable, "-I", "-S", "-c", _SUMS_CODE, path, str(MAX_LINE_BYTES)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        except (OSError, ValueError):
            return None

    def output(self, signed: bool = False) -> bytes | None:
        """The checksums, one per non-blank line in order, one a line (waits for the
        child); of a ``signed`` file, its event lines' only (the first line, its header,
        and the last, its trailer, left out). None when the child failed. (Compared with
        the stated ones joined the same way: a checksum holds no newline, so equal texts
        are equal lists.)"""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        out, _ = proc.communicate()
        if proc.returncode != 0:
            return None
        return b"\n".join(out.split(b"\n")[1:-1]) if signed else out

    def close(self) -> None:
        """Stop the child, if it still runs."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.communicate()




class _Streamed:
    """An input's events sent to an :class:`ImportStream` as they are read: each run's
    new events are checked (:class:`_InOrder`) when the run's next one starts, and every
    ``_STEP + 1`` events of a long run; then their rows go to the stream, ``_SEND`` at a
    time. :meth:`commit` (once every line is read and passed) ends the runs and commits.

    Only an input whose runs come one after another, each numbered 1..n in order and
    passing the in-order checks, is streamed: anything else (an event out of order, a run
    that comes back after another, a check that fails, a run the store has, a store that
    refuses) drops the stream (rolled back, nothing written) and the input is checked and
    imported the classic way, which raises what is wrong in its turn.

    When the lines' checksums are deferred (:meth:`defer_sums`: a regular file, read again
    if need be), the stream is *lean*: the events checked and sent are not kept (a few
    hundred MB less for a large export: less to allocate and free), and giving up raises
    :class:`_ReadAgain` at once: the file is read again the classic way."""

    __slots__ = ("check", "committed", "ended", "first", "helper", "kinds", "lean", "live",
                 "parsed", "rows", "run", "runs", "seen", "sessions", "signed", "stream",
                 "streamed", "sums", "views")

    def __init__(self, stream: ImportStream, helper: _LineSums | None = None) -> None:
        self.stream = stream
        self.helper = helper  # the lines' checksums, computed by a child process
        self.sums: list[str] | None = None  # the checksums the lines state, when deferred
        self.signed = False  # the deferred checksums are a signed file's
        self.lean = False  # the events checked and sent are not kept
        self.live = not stream.given_up
        self.parsed = Parsed("")  # the input read
        self.seen = 0  # events of the input read and not kept (lean)
        self.run: _Run | None = None  # the run being read
        self.first: Event | None = None  # its first event
        self.check = _InOrder("")
        self.rows: list[tuple[Any, ...]] = []  # to send
        self.runs: list[str] | None = []  # the runs read until the stream opens (then None)
        self.ended: list[tuple[str, View]] = []  # runs read to the end: their closed folds
        self.views: dict[str, View] = {}
        self.sessions: list[Event] = []  # events that write session rows, in log order
        self.kinds: set[str] = set()
        self.streamed = 0  # events checked and sent (or to send)
        self.committed: ImportResult | None = None  # what it wrote, once committed

    def defer_sums(self, signed: bool = False) -> None:
        """Leave the checksums of the lines (of a ``signed`` file: its event lines, their
        ``mac`` left out; the signatures are still verified as the lines are read) to
        :attr:`helper`, when there is one: each line's stated checksum is kept in
        :attr:`sums` and compared with the helper's at the end (:meth:`commit`); the
        stream is lean."""
        if self.helper is not None:
            self.sums = []
            self.lean = True
            self.signed = signed

    def start(self, parsed: Parsed) -> Callable[[str | bytes, str], bool]:
        """Read into ``parsed``; returns the check of a line's stated checksum:
        :func:`_line_checks_out`, or when the checksums are deferred, a function that keeps
        the stated one for :meth:`commit` (and says yes)."""
        self.parsed = parsed
        sums = self.sums
        if sums is None:
            return _line_checks_out

        def deferred(line: str | bytes, stated: str) -> bool:
            sums.append(stated)
            return True

        return deferred

    def step(self, run: _Run) -> None:
        """``run`` has a new event in order: at its first, the run before is ended; its
        events so far are checked and sent."""
        if not self.live:
            return
        if run is not self.run:
            if run.next != 2:  # not its first event: a run that comes back after another
                self._give_up()
                return
            self._end_run()
            self.run, self.check, self.first = run, _InOrder(run.run_id), run.events[0]
            if not 0 < len(run.run_id) <= RUN_ID_MAX:
                self._give_up()
                return
            if self.runs is not None:
                self.runs.append(run.run_id)
        self._check()
        if self.lean:  # the input's events so far are checked and sent (or the run's)
            parsed = self.parsed
            self.seen += len(parsed.events)
            parsed.events.clear()
            parsed.linenos.clear()

    def _check(self) -> None:
        """Check the current run's events since the last check and make their rows."""
        run, check = self.run, self.check
        if run is None or not self.live:
            return
        if run.next is None:  # an event came out of order
            self._give_up()
            return
        new = run.events[check.done:]
        if not check.passes(run.events):
            self._give_up()
            return
        try:
            self.rows += _rows(new)
        except Exception:  # the classic import raises it in its turn
            self._give_up()
            return
        kinds = set(map(_type_of, new))
        self.kinds |= kinds
        if kinds & _PROJECTED:
            self.sessions += [event for event in new if event.type in _PROJECTED]
        self.streamed += len(new)
        if self.lean:
            del run.events[:], run.linenos[:]
            check.done = 0
        if len(self.rows) >= _SEND:
            self._send()

    def _end_run(self) -> None:
        """Check the rest of the current run and close its fold (:func:`close_fold`)."""
        run, first = self.run, self.first
        if run is None or first is None:
            return
        self._check()
        if not self.live:
            return
        try:
            view = close_fold(self.check.view, self.check.count, first)
        except Exception:  # check_run raises it in its turn
            self._give_up()
            return
        self.ended.append((run.run_id, view))
        self.views[run.run_id] = view

    def _send(self) -> None:
        """Send the rows made; the first time, open the stream (the store must have none
        of the runs so far; later ones meet the tables' unique constraints)."""
        if self.runs is not None:
            if not self.stream.open(self.runs):
                self._give_up()
                return
            self.runs = None
        if not self.stream.send(self.rows):
            self._give_up()
            return
        self.rows = []

    def _give_up(self) -> None:
        """:meth:`drop`; a lean stream raises :class:`_ReadAgain`."""
        self.drop()
        if self.lean:
            raise _ReadAgain

    def drop(self) -> None:
        """Give the stream up: the classic way reads and imports the input."""
        if self.live:
            self.live = False
            self.stream.abort()
            self.rows, self.ended, self.sessions = [], [], []

    def close_helper(self) -> None:
        if self.helper is not None:
            self.helper.close()

    def commit(self, parsed: Parsed, runs: Mapping[str, _Run]) -> bool:
        """At the end of a read input (every line passed): end the last run, send the
        rest, commit; then ``parsed.views`` are the runs' folds. Whether it committed
        (else nothing was written). Deferred checksums are compared first: a line whose
        stated checksum is not its own raises :class:`_ReadAgain` (nothing written)."""
        if self.sums is not None and (self.helper is None or self.helper.output(self.signed)
                                      != "\n".join(self.sums).encode()):
            self._give_up()
        self._end_run()
        read = self.seen + len(parsed.events)
        if self.live and (self.streamed != read or len(self.views) != len(runs)):
            self._give_up()  # a run came back after another, in order
        if self.live and not self.kinds <= KINDS:  # UnknownEventKind, from the classic way
            self._give_up()
        if self.live:
            self._send()
        if not self.live or not self.stream.commit(self.ended, self.sessions):
            self._give_up()
            return False
        self.live = False
        self.committed = ImportResult(runs=len(self.ended), events=self.streamed, present=0)
        parsed.views = self.views
        return True


def _rows(evs: list[Event]) -> list[tuple[Any, ...]]:
    """The stored rows ``(run_id, seq, kind, ts, data, idem)`` of events, ``data`` as
    :func:`json_data` encodes it (the payloads hold JSON values only, parsed from JSON),
    here as UTF-8 bytes (what :func:`event_copy` sends): pydantic's serializer's text
    when it is ASCII with finite numbers only, else :func:`json_text`'s."""
    stored = list(map(_stored_fields, map(_fields_of, evs)))
    try:
        texts = [_to_json(payload) for _, _, _, _, payload, _ in stored]
    except PydanticSerializationError:  # a lone surrogate: one at a time
        texts = [json_data(payload).encode() for _, _, _, _, payload, _ in stored]
    return [(run_id, seq, kind, ts,
             text if text.isascii() and b"NaN" not in text and b"Infinity" not in text
             else json_data(payload).encode(), idem)
            for (run_id, seq, kind, ts, payload, idem), text in zip(stored, texts, strict=True)]


