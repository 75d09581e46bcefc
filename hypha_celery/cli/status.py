"""``hypha status``: the run projection without input or state."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from hypha_celery.client.run import RunSnapshot
from hypha_celery.events.view import CaseDoc


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def status_lines(status: RunSnapshot) -> list[str]:
    """Aligned ``key  value`` lines (the error shows its reason and message)."""
    err = status.error
    error = f"{err.get('reason')}: {err.get('message')}" if err else "-"
    elapsed = (status.updated_at - status.created_at) * 1000
    rows: list[tuple[str, Any]] = [
        ("run", status.run_id),
        ("graph", status.graph_id),
        ("status", status.status),
        ("step", status.step),
        ("waiting", ", ".join(status.waiting_nodes) or "-"),
        ("attempt", f"{status.attempt} (re-driven {status.recoveries}x)"
         if status.recoveries else status.attempt),
        ("held", ", ".join(f"{k}={v}" for k, v in status.held.items()) if status.held
         else "-"),
        ("error", error),
        ("created", _when(status.created_at)),
        ("updated", f"{_when(status.updated_at)} (+{elapsed:.1f}ms)"),
        ("events", status.seq),
    ]
    if status.workflow_state is not None:
        rows.insert(3, ("state", status.workflow_state))
    if status.case is not None:
        rows.insert(4, ("case", case_line(status.case)))
    return [f"{key:<8} {value}" for key, value in rows]


def case_line(case: CaseDoc) -> str:
    """A recovery case on one line: id, status, state, strategy, cycles, why it ended."""
    strategy = f"{case['strategy']} #{case['attempts']}" if case["strategy"] else "-"
    line = (f"{case['case_id']} {case['status']} in {case['state']} "
            f"({strategy}, {case['cycles']} cycles, evidence {case['evidence']})")
    if case["compensated"]:
        line += f" compensated {', '.join(case['compensated'])}"
    return line + (f": {case['reason']}" if case["reason"] else "")


def status_json(status: RunSnapshot) -> str:
    return json.dumps(dataclasses.asdict(status), sort_keys=True)
