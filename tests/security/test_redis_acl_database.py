"""docs/security.md's Redis ACL recipe on a database other than 0 (the page says how to
write it for database N), against the real Redis: the user works in its database, cannot
``SELECT`` another nor reach one with ``MOVE`` / ``COPY ... DB``, and, as the page says,
starts every connection on database 0 (ACLs cannot name databases). Nothing is written
outside the claimed database."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.security import privilege_support as doc

pytestmark = pytest.mark.services


def recipe_for(db: int, user: str) -> list[str]:
    """The page's ``ACL SETUSER`` command with its database written as ``db``."""
    setuser, _urls = doc.blocks("Redis", "bash")
    text = doc.substitute(setuser.text, {"hypha_app": user})
    text = text.replace("/0.", f"/{db}.").replace("select|0", f"select|{db}")
    (argv,) = doc.commands(doc.Block("", "bash", text))
    assert argv[:4] == ["redis-cli", "ACL", "SETUSER", user]
    return argv[1:]


def test_the_recipe_pins_select_to_its_database_and_says_what_it_cannot(
        claimed_redis: str) -> None:
    base, db_text = claimed_redis.rsplit("/", 1)
    db = int(db_text)
    assert db != 0
    other = (db % 15) + 1  # another database, never written to: the commands are refused
    user = f"hypha_acl_{uuid.uuid4().hex[:10]}"
    admin = redis.Redis.from_url(claimed_redis)
    command = recipe_for(db, user)
    assert f"+select|{db}" in command and "-select" in command
    try:
        admin.execute_command(*command)
        url = base.replace("redis://", f"redis://{user}:app-password@") + f"/{db}"
        as_user = redis.Redis.from_url(url)  # selects its database on connect
        try:
            as_user.set("hypha.acl-probe", "1")
            assert admin.get("hypha.acl-probe") == b"1"  # in the claimed database
            assert as_user.execute_command("SELECT", db) in (b"OK", "OK", True)
            for refused in (("SELECT", other), ("MOVE", "hypha.acl-probe", other),
                            ("COPY", "hypha.acl-probe", "hypha.acl-copy", "DB", other),
                            ("SWAPDB", db, other), ("FLUSHALL",)):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    as_user.execute_command(*refused)
            assert admin.get("hypha.acl-probe") == b"1" and not admin.exists("hypha.acl-copy")
        finally:
            as_user.close()
        # what the page says ACLs cannot do: a connection starts on database 0
        bare = redis.Redis.from_url(base.replace("redis://", f"redis://{user}:app-password@"))
        try:
            info = bare.execute_command("CLIENT", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            assert " db=0 " in f" {text} "
        finally:
            bare.close()
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.delete("hypha.acl-probe")
        admin.close()
