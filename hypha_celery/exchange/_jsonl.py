"""JSONL export / import: one sealed event envelope per line.

``hypha export`` writes :meth:`EventStore.export <hypha_celery.store.EventStore.export>`
through :func:`write_jsonl`. A line is the envelope's canonical JSON (sorted keys, no
spaces: :func:`hypha_celery.events.envelope.canonical`) without its ``checksum``, with
``"checksum":"sha256:<hex>"`` appended as the last member; the hex digest is that of the
canonical JSON, so ``checksum == Event.sealed().checksum`` and anyone can check a line
by hashing it with its checksum member removed.

An import checks the whole input: every line must be an envelope of a known type whose
checksum matches; every run's events must be numbered 1..n, start with ``run.created``,
fold into a projection, and carry the derived fields (``id``, ``correlation_id``,
``causation_id``, ...) their events give. The classic way, :func:`read_file` (or
:func:`parse_jsonl`) then :func:`import_parsed`, reads and checks it all before anything
is written, then :meth:`EventStore.import_events` writes it in one transaction. Every
refusal is an :class:`~hypha_celery.errors.ImportFormatError` naming ``FILE:LINE``.

:func:`import_file` (:mod:`._stream`) does the same in one call, faster on PostgreSQL.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import IO, TYPE_CHECKING, Any

from pydantic import ValidationError

from hypha_celery.errors import (
    ChecksumMismatch,
    DerivedFieldMismatch,
    EmptyImport,
    ImportSourceMissing,
    InvalidRun,
    MalformedLine,
    SignatureMismatch,
    UnknownEventType,
)
from hypha_celery.events import Event
from hypha_celery.events.envelope import (
    DERIVED_FIELDS,
    Row,
    bodies,
    canonical,
    derive,
    deriver,
)
from hypha_celery.events.fold import View, apply_event, new_view
from hypha_celery.events.payloads import parse_payload
from hypha_celery.exchange._signing import (
    KEY_ENV,
    Signer,
    Verifier,
    export_key,
    is_signed,
    unsigned,
)
from hypha_celery.store import (
    IDEM_MAX,
    RUN_ID_MAX,
    EventStore,
    ImportResult,
    check_run,
    close_run,
    export_rows,
    gc_paused,
)

if TYPE_CHECKING:  # the stream calls back into the parse (never imported at run time)
    from hypha_celery.exchange._stream import _Streamed

_derived = attrgetter(*DERIVED_FIELDS)
_stored = attrgetter("run_id", "seq", "type", "timestamp", "payload", "idempotency_key")
# the same of an envelope's fields (its ``__dict__``): cheaper than its attributes
_derived_fields = itemgetter(*DERIVED_FIELDS)
_stored_fields = itemgetter("run_id", "seq", "type", "timestamp", "payload", "idempotency_key")
_fold_fields = itemgetter("type", "timestamp", "payload", "idempotency_key")
_SUFFIX_HEAD = b',"checksum":"sha256:'
_HEX = 64
_SUFFIX = len(_SUFFIX_HEAD) + _HEX + 2  # ,"checksum":"sha256:<hex>"}
_CHUNK = 1000  # lines per write
_STEP = 1023  # a streamed run's events are checked and sent every _STEP + 1 of them
#: Longest line an import reads (bytes, newline included): four times the default bound of
#: a run's input (``HYPHA_MAX_INPUT_BYTES``), which ``run.created`` carries. A longer line
#: is refused as it is read (``MalformedLine``), never held whole.
MAX_LINE_BYTES = 32 * 1024 * 1024
_sha256 = hashlib.sha256
#: A progress callback: ``progress(done, more)``, two counts of work done so far (each
#: function says which); it is called often, so it should be cheap.
Progress = Callable[[int, int], None]



#: Event types the store's import projects into rows of their own (sessions): their
#: payloads must validate (the fast fold reads passive kinds without looking).
_PROJECTED = frozenset({"session.created", "session.updated", "session.closed"})
_LOOKED_AT = _PROJECTED | {"run.created"}  # and a run.created after a run's first event


def _digest(body: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()


def dump_line(event: Event) -> str:
    """``event`` sealed, as one line of JSON (no newline): canonical JSON, the checksum
    (recomputed) last. Parses back to ``event.sealed()``."""
    body = dict(event.__dict__)
    del body["checksum"]
    return _sealed(body)


def _sealed(body: dict[str, Any]) -> str:
    """The line of the envelope whose fields but ``checksum`` are ``body``."""
    text = canonical(body)
    return f'{text[:-1]},"checksum":"sha256:{_sha256(text.encode()).hexdigest()}"}}'


def _line_checks_out(line: str | bytes, stated: str) -> bool:
    """Whether ``line``, as written by :func:`dump_line`, hashes to ``stated`` (then it
    is the canonical text of the envelope it parses to, unchanged since export)."""
    raw = (line.encode() if isinstance(line, str) else line).rstrip()
    if raw[-_SUFFIX:-_HEX - 2] != _SUFFIX_HEAD or raw[-2:] != b'"}':
        return False
    return stated == "sha256:" + _sha256(raw[:-_SUFFIX] + b"}").hexdigest()


def write_jsonl(events: Iterable[Event], out: IO[str], *, key: bytes | None = None,
                ) -> tuple[int, int]:
    """Write ``events`` as JSONL, each sealed (and signed with ``key``, see
    :mod:`~hypha_celery.exchange._signing`); returns (runs, events) written."""
    runs: set[str] = set()
    count = 0
    chunk: list[str] = []
    signer = _begin(out, key)
    with gc_paused():
        for event in events:
            line = dump_line(event)
            chunk.append(line if signer is None else signer.line(line))
            runs.add(event.run_id)
            count += 1
            if len(chunk) >= _CHUNK:
                out.write("\n".join(chunk) + "\n")
                chunk.clear()
        if chunk:
            out.write("\n".join(chunk) + "\n")
    _end(out, signer, len(runs))
    return len(runs), count


def export_jsonl(store: EventStore, out: IO[str], run_ids: Iterable[str] | None = None, *,
                 session: tuple[str, str] | None = None, since: float | None = None,
                 key: bytes | None = None, progress: Progress | None = None,
                 ) -> tuple[int, int]:
    """:meth:`EventStore.export` of the selected runs to ``out``, as :func:`write_jsonl`
    writes it (from the stored rows: no envelopes are built; signed with ``key``);
    returns (runs, events). ``progress(runs, events)`` is called after each run written."""
    runs = count = 0
    signer = _begin(out, key)
    with gc_paused():
        for run, rows in export_rows(store, run_ids, session=session, since=since):
            if not rows:
                continue
            lines = [_sealed(body) for body in bodies(rows, run)]
            if signer is not None:
                lines = [signer.line(line) for line in lines]
            runs += 1
            count += len(lines)
            for i in range(0, len(lines), _CHUNK):
                out.write("\n".join(lines[i:i + _CHUNK]) + "\n")
            if progress is not None:
                progress(runs, count)
    _end(out, signer, runs)
    return runs, count


def _begin(out: IO[str], key: bytes | None) -> Signer | None:
    if key is None:
        return None
    signer = Signer(key)
    out.write(signer.header() + "\n")
    return signer


def _end(out: IO[str], signer: Signer | None, runs: int) -> None:
    if signer is not None:
        out.write(signer.trailer(runs) + "\n")


@dataclass
class Parsed:
    """A checked JSONL input: its events and where each came from."""

    source: str
    events: list[Event] = field(default_factory=list)
    linenos: list[int] = field(default_factory=list)  # the line of each event
    views: dict[str, View] = field(default_factory=dict)  # run id -> check_run's fold
    _lines: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def lines(self) -> dict[str, int]:
        """``"<run_id>:<seq>"`` (what the event's ``id`` must be) -> its line number (made
        when first asked: error messages ask)."""
        if len(self._lines) != len(self.events):
            self._lines = {f"{e.run_id}:{e.seq}": n
                           for e, n in zip(self.events, self.linenos, strict=True)}
        return self._lines

    def where(self, event: Event) -> str:
        """``FILE:LINE`` of ``event``."""
        return f"{self.source}:{self.lines[f'{event.run_id}:{event.seq}']}"


def parse_jsonl(lines: Iterable[str | bytes], source: str = "<input>", *,
                first_lineno: int = 1) -> Parsed:
    """Parse and check a whole JSONL export (see the module docstring). Blank lines are
    ignored; any problem raises an :class:`~hypha_celery.errors.ImportFormatError`
    naming the line (``first_lineno`` is the first one's number), so a bad input imports
    nothing."""
    return _parse(lines, source, first_lineno, None)


def _parse(lines: Iterable[str | bytes], source: str, first_lineno: int,
           stream: _Streamed | None) -> Parsed:
    """:func:`parse_jsonl`; with a ``stream``, each run's events are also checked and
    sent to it as they are read (:class:`_Streamed`), and when it commits, the runs are
    not checked again. When the stream's ``sums`` is a list, each line's stated checksum
    goes there instead of being checked (:class:`_LineSums` checks them all at the end:
    an error raised meanwhile may not be the first one; the caller reads the input again
    the classic way)."""
    parsed = Parsed(source)
    events = parsed.events
    linenos = parsed.linenos
    checks_out = _line_checks_out if stream is None else stream.start(parsed)
    runs: dict[str, _Run] = {}
    run, last = _Run(""), None  # the run of the line before (none yet)
    with _kept():
        for lineno, line in enumerate(lines, first_lineno):
            try:
                event = _validate_json(line)
            except ValidationError:
                if not line.strip():
                    continue
                event = _parse_line(line, source, lineno)  # the error, or the slow way
            else:
                stated = event.checksum
                if stated is None or not checks_out(line, stated):
                    event = _parse_line(line, source, lineno)
                elif len(event.__pydantic_fields_set__) == _ALL_SET:
                    _share(event, "__pydantic_fields_set__", _ALL_FIELDS)
            run_id = event.run_id
            if run_id != last:  # else the run of the line before
                last = run_id
                run = runs.get(run_id) or runs.setdefault(run_id, _Run(run_id))
            seq = event.seq
            if seq == run.next:  # the run's events so far are 1..seq - 1, in order
                run.next = seq + 1
                run.events.append(event)
                run.linenos.append(lineno)
                if stream is not None and (seq == 1 or not seq & _STEP):
                    stream.step(run)
            else:  # out of order (the stream drops a run that is)
                first = run.take(event, lineno)
                if first:
                    raise InvalidRun(f"{source}:{lineno}: duplicate event seq {seq} of run "
                                     f"{run_id} (first on line {first})")
            events.append(event)
            linenos.append(lineno)
        _checked(parsed, runs, stream)
    return parsed


def _checked(parsed: Parsed, runs: Mapping[str, _Run], stream: _Streamed | None) -> None:
    """The end of :func:`_parse`: an input with events, its runs checked in order of
    appearance (unless a stream checked them all and committed), their folds kept."""
    if not parsed.events and (stream is None or not stream.seen):
        raise EmptyImport(f"{parsed.source}: no events")
    if stream is not None and stream.commit(parsed, runs):
        return
    for run_id, run in runs.items():
        parsed.views[run_id] = run.checked(parsed.where)


@contextmanager
def _kept() -> Iterator[None]:
    """:func:`gc_paused` for making objects that are kept (a parsed input): at the end they
    join the collector's oldest generation at once (``gc.freeze`` then ``gc.unfreeze``,
    when nothing else is frozen) rather than after a pass over them all (10-20% of the
    time to parse an export; they hold no reference cycles)."""
    with gc_paused():
        yield
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()


class _Run:
    """One run's events as they are read, and their line numbers. While they come in
    ``seq`` order from 1 (as an export lists them: ``next`` is the ``seq`` the next one
    has), the run is checked in one pass once the whole input is read
    (:func:`_checked_in_order`: folded, its derived fields compared, what
    :func:`check_run` and :func:`_check_derived` check, in a tight loop). Any other
    order, or any of those checks failing, leaves the run to those two, so that the error
    is theirs, raised in its turn (after every line's own)."""

    __slots__ = ("events", "linenos", "next", "run_id", "seqs")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[Event] = []
        self.linenos: list[int] = []
        self.next: int | None = 1  # None: the events came in another order
        self.seqs: dict[int, int] | None = None  # seq -> line, once not 1..n in order

    def take(self, event: Event, lineno: int) -> int:
        """Add ``event`` (read on line ``lineno``), whose ``seq`` is not the next one;
        but when the run has an event with its ``seq`` already, add nothing and return
        that one's line."""
        evs = self.events
        seq = event.seq
        seqs = self.seqs
        if seqs is None:  # the events so far are numbered 1..len(evs)
            if 0 < seq <= len(evs):
                return self.linenos[seq - 1]
            seqs = self.seqs = {e.seq: n for e, n in zip(evs, self.linenos, strict=True)}
            self.next = None
        first = seqs.setdefault(seq, lineno)
        if first != lineno:
            return first
        evs.append(event)
        self.linenos.append(lineno)
        return 0

    def checked(self, where: Callable[[Event], str]) -> View:
        """The run's projection, its events checked (:func:`check_run`,
        :func:`_check_derived`)."""
        if self.next is not None and 0 < len(self.run_id) <= RUN_ID_MAX:
            view = _checked_in_order(self.run_id, self.events)
            if view is not None:
                return close_run(view, self.events, where)
        view = check_run(self.run_id, self.events, where)
        _check_derived(self.events, view, where)
        return view


def _checked_in_order(run_id: str, evs: list[Event]) -> View | None:
    """The fold of one run's events, numbered 1..n in order, if they pass what
    :func:`check_run` and :func:`_check_derived` check of them (:class:`_InOrder`),
    else ``None``."""
    check = _InOrder(run_id)
    return check.view if check.passes(evs) else None


class _InOrder:
    """What :func:`check_run` and :func:`_check_derived` check of one run's events
    numbered 1..n in order, a slice at a time (``run.created`` first, each folds, no
    idempotency key longer than ``IDEM_MAX``, the derived fields are what their events
    give), in a tight loop. The payloads of the kinds the store's import projects into
    rows of their own are validated; the fold reads the others trusted, as it reads the
    store's (a payload it cannot read fails the fold). The derived fields take the run's
    owner and graph from ``run.created``: a run with another ``run.created`` (which
    would change them) is left to those two functions."""

    __slots__ = ("count", "derive", "done", "view")

    def __init__(self, run_id: str) -> None:
        self.view = new_view(run_id)
        self.derive: Callable[[Row], tuple[Any, ...]] | None = None
        self.done = 0  # the events of the caller's list checked so far
        self.count = 0  # the run's events checked so far

    def passes(self, evs: list[Event]) -> bool:
        """Whether ``evs[self.done:]`` (the run's events that came since the last call)
        pass; a failed check leaves the object spent."""
        fields = [event.__dict__ for event in evs[self.done:]]  # pydantic's layout
        if not fields:
            return True
        view = self.view
        first = self.count == 0
        try:
            if first and not _folds_first(view, fields[0]):
                return False
            kinds = list(map(_fold_fields, fields))
            for kind, ts, payload, idem in kinds[first:]:
                if kind in _LOOKED_AT:
                    if kind == "run.created":
                        return False
                    parse_payload(kind, payload)  # the import reads their fields
                apply_event(view, kind, payload, ts)
                if idem is not None and len(idem) > IDEM_MAX:
                    return False
            derive = self.derive = self.derive or deriver(view)
            if list(map(derive, map(_stored_fields, fields))) != list(map(_derived_fields,
                                                                          fields)):
                return False
        except Exception:  # check_run raises it in its turn
            return False
        self.done = len(evs)
        self.count += len(fields)
        return True


def _folds_first(view: View, fields: dict[str, Any]) -> bool:
    """Fold a run's first event into ``view``: whether it is a ``run.created`` that folds,
    with an idempotency key of at most ``IDEM_MAX`` characters."""
    kind, ts, payload, idem = _fold_fields(fields)
    if kind != "run.created" or (idem is not None and len(idem) > IDEM_MAX):
        return False
    apply_event(view, kind, payload, ts)
    return True


def read_jsonl(lines: Iterable[str | bytes], source: str = "<input>") -> list[Event]:
    """The events of a checked JSONL export (:func:`parse_jsonl`), in input order."""
    return parse_jsonl(lines, source).events


def read_file(path: str, *, key: bytes | None = None, verify: bool = False,
              allow_unsigned: bool = False, progress: Progress | None = None) -> Parsed:
    """:func:`parse_jsonl` of a file (``-``: standard input), verified when an export key
    is configured: ``key``, else ``$HYPHA_EXPORT_KEY`` (:func:`~.signing.export_key`).

    With a key, a signed file is verified as it is read and an unsigned one is refused
    (:class:`SignatureMismatch`) unless ``allow_unsigned``: anyone can strip a signed
    export's header, trailer and MACs and change a line. ``verify`` also demands a key
    (:class:`SigningKeyMissing`) and a signed file; it contradicts ``allow_unsigned``
    (``ValueError``). With no key and no ``verify``, an unsigned file is read by its
    checksums, and so is a signed one (its signatures unchecked).
    ``progress(lines, bytes)`` is called as lines are read (every 1,024, and at the end)."""
    return _read_path(path, _policy(key, verify, allow_unsigned), progress, None)


def _policy(key: bytes | None, verify: bool, allow_unsigned: bool) -> _Policy:
    if verify and allow_unsigned:
        raise ValueError("read_file: verify=True and allow_unsigned=True contradict "
                         "each other")
    if key is None and (verify or os.environ.get(KEY_ENV)):
        key = export_key()
    return _Policy(key, allow_unsigned)


def _read_path(path: str, policy: _Policy, progress: Progress | None,
               stream: _Streamed | None) -> Parsed:
    if path == "-":
        return _read(sys.stdin.buffer, "<stdin>", policy, progress, stream)
    try:
        with open(path, "rb") as file:
            return _read(file, path, policy, progress, stream)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise ImportSourceMissing(f"{path}: cannot read it: {exc.strerror}") from None


def bounded_lines(file: IO[bytes], source: str, limit: int = MAX_LINE_BYTES
                  ) -> Iterator[bytes]:
    """``file``'s lines, each read with at most ``limit`` bytes: a longer line is a
    :class:`MalformedLine` naming it, before more of it is read."""
    lineno = 0
    while line := file.readline(limit + 1):
        lineno += 1
        if len(line) > limit:
            raise MalformedLine(f"{source}:{lineno}: line longer than {limit} bytes "
                                "(exchange.MAX_LINE_BYTES); nothing was imported")
        yield line


def _reported(lines: Iterator[bytes], progress: Progress) -> Iterator[bytes]:
    """``lines``, reporting ``progress(lines, bytes)`` every 1,024 lines and at the end."""
    count = size = 0
    for line in lines:
        count += 1
        size += len(line)
        if not count & 1023:
            progress(count, size)
        yield line
    progress(count, size)


@dataclass(frozen=True)
class _Policy:
    """What :func:`read_file` accepts: with a ``key``, signed files (verified) and, when
    ``allow_unsigned``, unsigned ones; with none, both (checksums only)."""

    key: bytes | None
    allow_unsigned: bool


def _read(file: IO[bytes], source: str, policy: _Policy, progress: Progress | None,
          stream: _Streamed | None) -> Parsed:
    lines = bounded_lines(file, source)
    if progress is not None:
        lines = _reported(lines, progress)
    first = next(lines, b"")
    key = policy.key
    if not is_signed(first):
        if key is not None and not policy.allow_unsigned:
            raise SignatureMismatch(
                f"{source}:1: not a signed export, and an export key is configured: sign "
                "it (`hypha export --sign`) or accept unsigned files explicitly "
                "(`hypha import --allow-unsigned`, read_file(allow_unsigned=True))")
        if stream is not None:
            stream.defer_sums()
        return _parse(itertools.chain([first], lines), source, 1, stream)
    if stream is not None:
        stream.defer_sums(signed=True)
    if key is None:
        return _parse(unsigned(lines), source, 2, stream)
    return _parse(Verifier(key, source).lines(itertools.chain([first], lines)), source, 2,
                  stream)


def import_parsed(store: EventStore, parsed: Parsed) -> ImportResult:
    """:meth:`EventStore.import_events` of a checked input (one transaction)."""
    with gc_paused():
        return store.import_events(parsed.events, where=parsed.where, checked=parsed.views,
                                   json_payloads=True)


_validate_json = Event.__pydantic_validator__.validate_json  # Event.model_validate_json
# An envelope that sets every field (each line of an export does) gets this one set as its
# ``model_fields_set`` in place of its own: a set per event is a quarter of a parsed
# export's memory and walked by the garbage collector. Events are frozen, and pydantic
# copies the set before it changes it (``model_copy``), so it is never changed.
_ALL_FIELDS = set(Event.model_fields)
_ALL_SET = len(_ALL_FIELDS)
_share = object.__setattr__


def _validate(line: str | bytes) -> Event:
    """The fast parser; pydantic's refuses a lone surrogate escape (``\ud800``) that
    Python's JSON accepts (and node output may hold), so such a line goes the slow way."""
    try:
        return Event.model_validate_json(line)
    except ValidationError as exc:
        if "escape" not in str(exc):
            raise
        try:
            data = json.loads(line)
        except ValueError:
            raise exc from None
        return Event.model_validate(data)


def _parse_line(line: str | bytes, source: str, lineno: int) -> Event:
    try:
        event = _validate(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["loc"] == ("type",) and first["type"] == "literal_error":
            raise UnknownEventType(f"{source}:{lineno}: unknown event type {first['input']!r} "
                                   "(not one of hypha's event types)") from None
        where = ".".join(str(p) for p in first["loc"])
        detail = f"{where}: {first['msg']}" if where else first["msg"]
        raise MalformedLine(f"{source}:{lineno}: not a hypha event ({detail})") from None
    stated = event.checksum
    if stated is None:
        raise ChecksumMismatch(f"{source}:{lineno}: event {event.run_id}:{event.seq} has no "
                               "checksum (every line of `hypha export` has one)")
    if _line_checks_out(line, stated):
        return event
    body = dict(event.__dict__)  # not as written by export (reformatted?): the slow way
    del body["checksum"]
    try:
        actual = _digest(body)
    except (ValueError, UnicodeError) as exc:  # NaN / Infinity, a lone surrogate
        raise MalformedLine(f"{source}:{lineno}: not a hypha event ({exc})") from None
    if actual != stated:
        raise ChecksumMismatch(f"{source}:{lineno}: checksum mismatch: event {event.run_id}:"
                               f"{event.seq} was changed after export")
    return event


def _check_derived(evs: list[Event], run: Mapping[str, Any], where: Callable[[Event], str],
                   ) -> None:
    """The derived fields of one run's events (in ``seq`` order) are what
    :func:`~hypha_celery.events.envelope.derive` computes from the events and the run
    (``user_id``, ``session_id``, ``graph_id``)."""
    wanted = list(derive(map(_stored, evs), run))
    got = list(map(_derived, evs))
    if got == wanted:
        return
    for event, mine, theirs in zip(evs, got, wanted, strict=True):
        for name, value, want in zip(DERIVED_FIELDS, mine, theirs, strict=True):
            if value != want:
                raise DerivedFieldMismatch(f"{where(event)}: event {theirs[0]}: {name} is "
                                           f"{value!r}, but the run's events give {want!r}")
