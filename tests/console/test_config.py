"""Console settings and sessions: tokens to principals, signed cookies, CSRF tokens."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hypha_celery.console import ConsoleConfig, parse_tokens
from hypha_celery.console.auth import csrf_token, open_session, seal_session, valid_csrf
from hypha_celery.errors import ConsoleConfigError, SetupError
from hypha_celery.principals import Principal

A, B = "t" * 20, "u" * 24


def test_tokens_map_to_principals() -> None:
    found = parse_tokens(f"admin:ops={A}, user:alice={B}\n# a comment\n")
    assert found == {A: Principal.admin("ops"), B: Principal.user("alice")}
    config = ConsoleConfig(tokens=found)
    assert config.principal_for(B) == Principal.user("alice")
    assert config.principal_for("nope") is None and config.principal_for("") is None
    assert A not in repr(config) and B not in repr(config)


@pytest.mark.parametrize(("text", "message"), [
    ("admin:ops", "is not PRINCIPAL=TOKEN"),
    (f"root:ops={A}", "is not admin:ID or user:ID"),
    (f"user:a/b={A}", "principal 'user:a/b'"),
    ("user:alice=short", "shorter than 16 characters"),
    (f"user:alice={A},user:bob={A}", "a token is given twice")])
def test_bad_tokens_are_refused_without_showing_them(text: str, message: str) -> None:
    with pytest.raises(ConsoleConfigError, match=message) as caught:
        parse_tokens(text)
    assert A not in str(caught.value) and isinstance(caught.value, SetupError)


def test_from_env(tmp_path: Path) -> None:
    secrets_file = tmp_path / "tokens"
    secrets_file.write_text(f"user:bob={B}\n")
    config = ConsoleConfig.from_env({
        "HYPHA_CONSOLE_TOKENS": f"admin:ops={A}", "HYPHA_CONSOLE_TOKENS_FILE": str(secrets_file),
        "HYPHA_CONSOLE_SECRET": "s" * 32, "HYPHA_CONSOLE_SHOW_CONTENT": "1",
        "HYPHA_CONSOLE_FIXTURES": str(tmp_path)})
    assert set(config.tokens.values()) == {Principal.admin("ops"), Principal.user("bob")}
    assert config.secret == b"s" * 32 and config.show_content and config.fixtures == tmp_path
    with pytest.raises(ConsoleConfigError, match="at least 32"):
        ConsoleConfig.from_env({"HYPHA_CONSOLE_SECRET": "short"})
    with pytest.raises(ConsoleConfigError, match="not a directory"):
        ConsoleConfig.from_env({"HYPHA_CONSOLE_FIXTURES": str(tmp_path / "missing")})
    with pytest.raises(ConsoleConfigError, match="cannot read"):
        ConsoleConfig.from_env({"HYPHA_CONSOLE_TOKENS_FILE": str(tmp_path / "missing")})
    default = ConsoleConfig.from_env({})
    assert default.tokens == {} and not default.show_content and len(default.secret) == 32
    more, token = default.with_token(Principal.admin("console"))
    assert more.principal_for(token) == Principal.admin("console")


def test_sessions_are_signed_and_expire() -> None:
    key, other = b"k" * 32, b"o" * 32
    cookie = seal_session(key, Principal.user("alice"), 60)
    assert open_session(key, cookie) == Principal.user("alice")
    assert open_session(other, cookie) is None  # another console's key
    assert open_session(key, cookie.replace("alice", "admin")) is None  # changed
    assert open_session(key, cookie.replace("user:", "admin:")) is None
    assert open_session(key, seal_session(key, Principal.admin("ops"), 60,
                                          now=time.time() - 120)) is None  # expired
    for junk in (None, "", "a|b", "a|b|c|d", "user:x|soon|00"):
        assert open_session(key, junk) is None


def test_csrf_tokens_belong_to_a_session() -> None:
    key = b"k" * 32
    one, two = seal_session(key, Principal.user("a"), 60), seal_session(key,
                                                                       Principal.user("b"), 60)
    assert valid_csrf(key, one, csrf_token(key, one))
    assert not valid_csrf(key, two, csrf_token(key, one))
    assert not valid_csrf(key, one, None) and not valid_csrf(key, None, csrf_token(key, one))
