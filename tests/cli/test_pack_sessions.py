"""``hypha run --pack --session S --session-profile P``: the profile governs every run of
the session (through the real console script, on the embedded default); a session keeps
its profile; bad options are one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import ROOT, assert_one_line_error, clean_env, hypha

QUESTION = '{"text": "how do I reset my password?"}'


@pytest.fixture
def pack(tmp_path: Path) -> str:
    """The example pack with a profile whose policy denies the help-center search."""
    doc = yaml.safe_load((ROOT / "examples/packs/support_triage/pack.yaml").read_text())
    doc["policies"] = [{"id": "no-search", "default_effect": "allow", "deny": ["kb.search"]}]
    doc["session_profiles"]["locked"] = {"policy": "no-search",
                                         "default_metadata": {"channel": "kiosk"}}
    file = tmp_path / "pack.yaml"
    file.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(file)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'hypha.db'}")


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    out: dict[str, str] = json.loads(proc.stdout.split("\n", 1)[1])
    return out


def test_the_profile_governs_every_run_of_the_session(pack: str,
                                                      env: dict[str, str]) -> None:
    first = hypha("run", "--pack", pack, "--user", "u1", "--session", "k1", "--session-profile",
                  "locked", "--session-meta", '{"tier": "gold"}', "--input", QUESTION, env=env)
    assert result(first)["reason"] == "no_article"  # the search was denied
    second = hypha("run", "--pack", pack, "--user", "u1", "--session", "k1", "--input",
                   QUESTION, env=env)
    assert result(second)["reason"] == "no_article"  # the session's profile, unnamed
    other = hypha("run", "--pack", pack, "--user", "u1", "--session", "k2", "--input",
                  QUESTION, env=env)
    assert result(other)["kind"] == "answer"
    shown = hypha("sessions", "show", "k1", "--user", "u1", "--json", env=env)
    session = json.loads(shown.stdout)
    assert (session["profile"], session["pack"], session["metadata"], session["runs"]) == (
        "locked", "support-triage@1.0.0", {"channel": "kiosk", "tier": "gold"}, 2)


def test_a_session_keeps_its_profile(pack: str, env: dict[str, str]) -> None:
    hypha("run", "--pack", pack, "--session", "k", "--input", QUESTION, env=env)
    again = hypha("run", "--pack", pack, "--session", "k", "--session-profile", "locked",
                  "--input", QUESTION, env=env)
    assert "opened with profile None; its runs cannot use 'locked'" in \
        assert_one_line_error(again)


@pytest.mark.parametrize(("args", "says"), [
    (("--session-profile", "locked"), "need --session"),
    (("--session", "s", "--session-meta", "[1]"), "a JSON object"),
    (("--session", "s", "--session-meta", "{"), "not valid JSON"),
])
def test_bad_session_options_are_one_line(pack: str, env: dict[str, str],
                                          args: tuple[str, ...], says: str) -> None:
    proc = hypha("run", "--pack", pack, *args, "--input", QUESTION, env=env)
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def test_an_unknown_profile_is_one_line(pack: str, env: dict[str, str]) -> None:
    proc = hypha("run", "--pack", pack, "--session", "s", "--session-profile", "nope",
                 "--input", QUESTION, env=env)
    assert "no session profile 'nope'" in assert_one_line_error(proc)
