"""``hypha demo`` on a fresh machine: embedded, no server, any working directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from hypha_celery.demo import QUESTION
from tests.cli.helpers import HYPHA, clean_env, hypha


def test_demo_prints_the_timeline_and_the_result(tmp_path: Path) -> None:
    proc = hypha("demo", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # not a terminal: no colours
    head, _, result = out.partition("result:\n")
    assert json.loads(result)["topic"] == "billing"
    lines = head.splitlines()
    assert lines[0].startswith("run ")
    timeline = lines[1:]
    kinds = [line.split()[2] for line in timeline]
    assert kinds[0] == "run.created" and kinds[-1] == "run.completed"
    assert kinds.count("node.execution.completed") == 5  # classify, 3 lookup edges, answer
    assert "node.fanout.scheduled" in kinds and "node.reducer.completed" in kinds
    assert [line.split()[1] for line in timeline] == [str(i) for i in range(1, len(kinds) + 1)]
    assert all(line.split()[0].startswith("+") and line.split()[0].endswith("ms")
               for line in timeline)
    assert any("lookup#2" in line for line in timeline)
    assert any(line.split()[2] == "node.reducer.completed" and "merge" in line for line in timeline)
    assert QUESTION not in head and "charged" not in head  # the input never reaches the timeline
    assert (tmp_path / ".hypha" / "hypha.db").is_file()


def test_demo_is_coloured_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = os.openpty()
    try:
        proc = subprocess.Popen([HYPHA, "demo"], cwd=tmp_path, env=clean_env(),
                                stdout=follower, stderr=subprocess.PIPE)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(60) == 0
        assert proc.stderr is not None
        proc.stderr.close()
    finally:
        os.close(leader)
    out = b"".join(chunks).decode()
    assert "\x1b[32m" in out  # completed events in green
    assert "run.completed" in out
