"""Signed exports: ``hypha export --sign`` / ``hypha import --verify``. A forged, re-sealed,
reordered, truncated or spliced file is refused naming the line; unsigned files import
where the user allows it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from hypha_celery import Event
from hypha_celery.errors import SignatureMismatch, SigningKeyMissing
from hypha_celery.exchange import dump_line, read_file, write_jsonl
from hypha_celery.exchange._signing import KEY_ENV, export_key
from tests.cli.conftest import DemoRun
from tests.cli.test_commands import invoke, one_line_error

KEY = b"k" * 16 + b"-signing-key-for-tests"


def signed(events: list[Event], key: bytes = KEY) -> list[str]:
    out = io.StringIO()
    write_jsonl(events, out, key=key)
    return out.getvalue().splitlines(keepends=True)


def read(lines: list[str], tmp_path: Path, key: bytes | None = KEY, verify: bool = True,
         allow_unsigned: bool = False) -> list[Event]:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(lines))
    return read_file(str(path), key=key, verify=verify, allow_unsigned=allow_unsigned).events


def refused(lines: list[str], tmp_path: Path, line: int, match: str) -> None:
    with pytest.raises(SignatureMismatch, match=rf"in\.jsonl:{line}: .*{match}"):
        read(lines, tmp_path)


def test_a_signed_export_verifies_and_reads_as_the_events(demo_run: DemoRun,
                                                          tmp_path: Path) -> None:
    lines = signed(demo_run.events)
    assert len(lines) == len(demo_run.events) + 2  # the header, the events, the trailer
    assert read(lines, tmp_path) == [e.sealed() for e in demo_run.events]
    # without the key (and without --verify) it reads as an unsigned export
    assert read(lines, tmp_path, key=None, verify=False) == [e.sealed() for e in
                                                               demo_run.events]


def test_a_resealed_line_is_refused_by_its_number(demo_run: DemoRun, tmp_path: Path) -> None:
    lines = signed(demo_run.events)
    mac = len(',"mac":"') + 64 + 3  # the member, its closing brace and the newline
    event = Event.model_validate_json(lines[3][:-mac] + "}")
    forged = dump_line(event.model_copy(update={"payload": {"forged": True}}))
    lines[3] = forged[:-1] + lines[3][-mac:]  # checksum right, the old signature kept
    refused(lines, tmp_path, 4, "signature mismatch")


def test_reordered_truncated_and_spliced_files_are_refused(demo_run: DemoRun,
                                                           tmp_path: Path) -> None:
    lines = signed(demo_run.events)
    swapped = [*lines]
    swapped[2], swapped[3] = swapped[3], swapped[2]
    refused(swapped, tmp_path, 3, "moved")
    refused(lines[:-1], tmp_path, len(lines) - 1, "without its signed trailer")
    refused([*lines[:-3], lines[-1]], tmp_path, len(lines) - 2, "lines were removed")
    other = signed(demo_run.events)  # another export: another nonce
    refused([*lines[:3], other[3], *lines[4:]], tmp_path, 4, "another file")
    refused([other[0], *lines[1:]], tmp_path, 2, "signature mismatch")
    refused([*lines, lines[1]], tmp_path, len(lines) + 1, "after the signed trailer")


def test_another_key_or_no_signature_is_refused(demo_run: DemoRun, tmp_path: Path) -> None:
    lines = signed(demo_run.events, key=b"another-key-0123456789")
    refused(lines, tmp_path, 1, "another key")
    plain = io.StringIO()
    write_jsonl(demo_run.events, plain)
    refused(plain.getvalue().splitlines(keepends=True), tmp_path, 1, "not a signed export")
    with pytest.raises(SignatureMismatch, match="not a signed export"):
        read(plain.getvalue().splitlines(keepends=True), tmp_path, verify=False)  # a key
    assert len(read(plain.getvalue().splitlines(keepends=True), tmp_path, verify=False,
                    allow_unsigned=True)) == len(demo_run.events)  # where the user allows it


def test_keys_come_from_the_environment_and_are_long_enough(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(SigningKeyMissing, match=KEY_ENV):
        export_key()
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(SigningKeyMissing, match="too short"):
        export_key()
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    assert export_key() == KEY


def test_the_cli_signs_and_verifies(demo_run: DemoRun, tmp_path: Path) -> None:
    out, fresh = tmp_path / "signed.jsonl", f"sqlite:///{tmp_path / 'fresh.db'}"
    env = {KEY_ENV: KEY.decode()}
    assert invoke("export", "--sign", "-o", str(out), store_url=demo_run.store_url,
                  **env).exit_code == 0
    done = invoke("import", "--verify", str(out), store_url=fresh, **env)
    assert done.exit_code == 0 and f"imported 1 runs ({len(demo_run.events)} events)" in (
        done.stdout)
    lines = out.read_text().splitlines(keepends=True)
    lines[2], lines[3] = lines[3], lines[2]
    out.write_text("".join(lines))
    error = one_line_error(invoke("import", "--verify", str(out), store_url=fresh, **env), 1)
    assert "signed.jsonl:3: signature mismatch" in error
    missing = one_line_error(invoke("export", "--sign", store_url=demo_run.store_url,
                                    **{KEY_ENV: ""}), 1)
    assert KEY_ENV in missing


@pytest.mark.parametrize("key", [KEY, b"x" * 64, b"long key " * 20])
def test_the_line_mac_is_rfc_2104_hmac_sha256(key: bytes) -> None:
    import hmac

    from hypha_celery.exchange._signing import _Mac

    mac = _Mac(key, "nonce")
    assert mac.hex(b"7:", b'{"a":1}') == hmac.digest(key, b'nonce:7:{"a":1}', "sha256").hex()
