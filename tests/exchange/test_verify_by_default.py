"""With an export key configured (``key=`` or ``$HYPHA_EXPORT_KEY``), an import verifies
by default: a signed export stripped of its header, trailer and MACs (one result changed
and re-sealed) is an unsigned file, refused unless the caller allows unsigned files
(``allow_unsigned=True``, ``hypha import --allow-unsigned``)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from hypha_celery import Event
from hypha_celery.errors import SignatureMismatch, SigningKeyMissing
from hypha_celery.exchange import dump_line, read_file, write_jsonl
from hypha_celery.exchange._signing import KEY_ENV, unsigned
from tests.cli.test_commands import invoke, one_line_error
from tests.exchange.conftest import DemoRun

KEY = b"an-export-key-for-the-tests"


def stripped(events: list[Event], tmp_path: Path) -> Path:
    """A signed export of ``events`` with its header, trailer and MACs removed and the
    run's result changed (its checksum made again, as anyone can)."""
    out = io.StringIO()
    write_jsonl(events, out, key=KEY)
    plain = [Event.model_validate_json(line) for line in
             unsigned(out.getvalue().splitlines()[1:])]
    last = plain[-1]
    assert last.type == "run.completed"
    plain[-1] = last.model_copy(update={"payload": {"result": {"answer": "forged"}}})
    path = tmp_path / "stripped.jsonl"
    path.write_text("".join(dump_line(e) + "\n" for e in plain))
    return path


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


def test_a_stripped_signed_export_is_refused_when_a_key_is_given(
        demo_run: DemoRun, tmp_path: Path) -> None:
    path = stripped(demo_run.events, tmp_path)
    with pytest.raises(SignatureMismatch, match=r"stripped\.jsonl:1: not a signed export.*"
                                                 r"allow_unsigned"):
        read_file(str(path), key=KEY)
    allowed = read_file(str(path), key=KEY, allow_unsigned=True).events
    assert allowed[-1].payload == {"result": {"answer": "forged"}}  # as the caller allowed
    assert len(read_file(str(path)).events) == len(demo_run.events)  # no key: as before


def test_the_key_in_the_environment_turns_verification_on(
        demo_run: DemoRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = stripped(demo_run.events, tmp_path)
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    with pytest.raises(SignatureMismatch, match="not a signed export"):
        read_file(str(path))
    assert len(read_file(str(path), allow_unsigned=True).events) == len(demo_run.events)
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(SigningKeyMissing, match="too short"):
        read_file(str(path), allow_unsigned=True)  # a configured key must be a key


def test_verify_and_allow_unsigned_contradict(demo_run: DemoRun, tmp_path: Path) -> None:
    path = stripped(demo_run.events, tmp_path)
    with pytest.raises(ValueError, match="verify=True and allow_unsigned=True"):
        read_file(str(path), key=KEY, verify=True, allow_unsigned=True)


def test_the_cli_refuses_a_stripped_export_unless_allowed(demo_run: DemoRun,
                                                          tmp_path: Path) -> None:
    path, fresh = stripped(demo_run.events, tmp_path), f"sqlite:///{tmp_path / 'fresh.db'}"
    env = {KEY_ENV: KEY.decode()}
    error = one_line_error(invoke("import", str(path), store_url=fresh, **env), 1)
    assert "stripped.jsonl:1: not a signed export" in error and "--allow-unsigned" in error
    done = invoke("import", "--allow-unsigned", str(path), store_url=fresh, **env)
    assert done.exit_code == 0, done.output
    assert f"imported 1 runs ({len(demo_run.events)} events)" in done.stdout
    both = invoke("import", "--verify", "--allow-unsigned", str(path), store_url=fresh, **env)
    assert both.exit_code == 2 and "--verify" in both.stderr
    assert invoke("import", str(path), store_url=f"sqlite:///{tmp_path / 'b.db'}"
                  ).exit_code == 0  # no key configured: unsigned files import as before
