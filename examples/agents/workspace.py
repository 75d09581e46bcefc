"""Workspace: an agent that owns a directory, using all four lifecycle hooks.

When to reach for this
    An agent whose work is files (code, notes, reports) and whose every turn should see
    what is already there and leave a trace behind.

The pattern
    ``pre_run`` (once, on a worker, before the first turn) creates the workspace
    directory. ``pre_turn`` rewrites each prompt with context: the files already in the
    workspace (``Response.prompt`` shows the rewritten prompt). ``post_turn`` writes the
    turn's answer to ``turn-<n>.md`` and records the file and its SHA-256 in state (a
    git commit and its SHA in the original guide). ``post_run`` runs once when the agent
    halts and writes ``SUMMARY.md``. Hooks run in worker threads: with real workers the
    directory must be on storage every worker sees, or pin the agent's queue to one host.

Using it
    ``start(Writer, name=..., backend=MockBackend, scripts=[...], root=some_dir)``, ``ask``
    as often as needed, then ``halt(name)``; the workspace holds one file per turn and
    the summary.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import (
    Agent,
    AgentDecision,
    NoReply,
    Prompt,
    Response,
    TurnError,
    current_name,
)
from hypha_celery.backends import MockBackend


class Writer(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"root": str(opts["root"]), "workspace": None,
                                              "turns": []}

    def pre_run(self, state: Any) -> Any:
        workspace = Path(state["root"]) / str(current_name())
        workspace.mkdir(parents=True, exist_ok=True)
        return {**state, "workspace": str(workspace)}

    def pre_turn(self, prompt: str, state: Any) -> AgentDecision:
        files = sorted(p.name for p in Path(state["workspace"]).iterdir())
        return Prompt(f"{prompt}\n\nFiles in the workspace: {', '.join(files) or 'none'}",
                      state)

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply(state)

    def post_turn(self, outcome: Response | TurnError, ref: str, state: Any) -> Any:
        if isinstance(outcome, TurnError):
            return {**state, "turns": [*state["turns"], {"error": outcome.reason}]}
        path = Path(state["workspace"]) / f"turn-{len(state['turns']) + 1}.md"
        path.write_text(outcome.text + "\n")
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        return {**state, "turns": [*state["turns"], {"file": path.name, "sha": sha}]}

    def post_run(self, state: Any) -> None:
        lines = [f"- {t.get('file', 'failed')}: {t.get('sha', t.get('error'))}"
                 for t in state["turns"]]
        (Path(state["workspace"]) / "SUMMARY.md").write_text(
            f"{len(lines)} turns\n" + "\n".join(lines) + "\n")


def run(hypha: Hypha, root: str | Path, name: str = "writer") -> dict[str, Any]:
    _app.use(hypha)
    hypha.agents.start(Writer, name=name, backend=MockBackend, root=str(root),
                       scripts=[_app.result("# Plan\nstep one"), _app.result("# Notes")])
    prompts = [hypha.agents.ask(name, text, timeout=15).prompt
               for text in ("Write the plan", "Write the notes")]
    hypha.agents.halt(name)
    summary = Path(root) / name / "SUMMARY.md"
    _app.wait_for(summary.exists)
    return {"prompts": prompts, "state": _app.state(name),
            "files": sorted(p.name for p in summary.parent.iterdir()),
            "summary": summary.read_text()}


def main() -> None:
    with _app.demo() as hypha, tempfile.TemporaryDirectory() as root:
        print(run(hypha, root))


if __name__ == "__main__":
    main()
