"""Every ```python block of README.md and docs/*.md runs as shown.

`pytest-examples` finds the blocks (one test per block, named by file and line) and runs
each in this process with ``print`` checked against the ``#>`` lines that follow it. The
harness is the same for every block (README.md, "Documentation", says it for writers):
a fresh working directory, no ``HYPHA_*`` variables (so ``Hypha.from_env()`` is the
embedded default: memory broker, worker thread, SQLite in ``./.hypha/``), the repository
root importable (``examples``, ``tests``). A block that must not run says so in its fence,
with a reason: ```python {test="skip" reason="..."}. ``--update-examples`` rewrites the
``#>`` lines from what the blocks print. A block whose first line is ``# NAME.py`` is
also that module of the page: the page's later blocks run with it saved as ``NAME.py`` in
their working directory, so they can import it as a reader who saved it would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parents[2]
#: Blocks that are a user's pytest files (docs/testing.md) say ``{test="pytester"}``: they
#: run as a suite of their own in ``tests/testing/test_docs.py``, not here.
EXAMPLES = [e for e in find_examples(ROOT / "README.md", ROOT / "docs")
            if e.prefix_settings().get("test") != "pytester"]


def example_id(example: CodeExample) -> str:
    return f"{example.path.relative_to(ROOT)}:{example.start_line}"


@pytest.fixture
def example_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The block's working directory; the environment a reader of the docs starts from."""
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("HYPHA_")]:
        monkeypatch.delenv(name)
    # pytest-examples runs the block as ``__main__`` (agent classes are found there).
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.syspath_prepend(str(tmp_path))  # the page's named modules (``# NAME.py``)
    yield tmp_path
    for name, module in list(sys.modules.items()):  # another page may name one the same
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def page_modules(example: CodeExample) -> dict[str, str]:
    """The modules the blocks before ``example`` on its page name (``# NAME.py``)."""
    found: dict[str, str] = {}
    for other in EXAMPLES:
        if (other.path == example.path and other.start_line < example.start_line
                and is_module(other)):
            found[other.source.partition("\n")[0][2:]] = other.source
    return found


@pytest.mark.parametrize("example", EXAMPLES, ids=example_id)
def test_example_runs_as_shown(example: CodeExample, eval_example: EvalExample,
                               example_dir: Path) -> None:
    settings = example.prefix_settings()
    if settings.get("test") == "skip":
        assert settings.get("reason"), f"{example_id(example)}: a skipped block says why"
        pytest.skip(settings["reason"])
    modules = page_modules(example)
    for name, source in modules.items():
        (example_dir / name).write_text(source)
    failure = run_block(example, eval_example)
    if failure is not None:  # reported outside the ``except``: no chained traceback
        pytest.fail(f"{example_id(example)} {failure}", pytrace=False)
    used = [source for name, source in modules.items() if f"import {name[:-3]}" in
            example.source or f"from {name[:-3]} import" in example.source]
    if "Hypha.from_env()" in "".join([example.source, *used]) and not is_module(example):
        assert (example_dir / ".hypha" / "hypha.db").exists()  # the embedded default


def run_block(example: CodeExample, eval_example: EvalExample) -> str | None:
    """Run ``example``; what it raised, told in the page's own lines, or None.

    pytest-examples re-raises a block's exception with frames it builds through ctypes so
    the traceback points into the page; on Python 3.11 pytest's report of such a frame
    raises ``StopIteration`` inside ``traceback.extract_tb`` and the whole session stops
    (INTERNALERROR). So the exception is told here, one ``page:line`` per frame, and the
    test fails with that text; a mismatch of printed output (pytest's own ``Failed``, not
    an ``Exception``) passes through unchanged.
    """
    try:
        if eval_example.update_examples:
            eval_example.run_print_update(example)
        else:
            eval_example.run_print_check(example)
    except Exception as exc:  # a block that raises; pytest's outcomes are BaseExceptions
        return describe_failure(exc, example.path)
    return None


def describe_failure(exc: BaseException, page: Path) -> str:
    """``exc`` as ``raised Type: message``, then the block's frames as ``page:line``."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(page):
            frames.append(f"  {page}:{tb.tb_lineno}")
        tb = tb.tb_next
    return "\n".join([f"raised {type(exc).__name__}: {exc}", *frames])


def is_module(example: CodeExample) -> bool:
    """Whether ``example`` is a module of its page (``# NAME.py``): it only defines."""
    first = example.source.partition("\n")[0]
    return first.startswith("# ") and first.endswith(".py")


def test_the_docs_have_examples() -> None:
    """The search itself works: each page known to hold Python blocks is found."""
    found = {example.path.relative_to(ROOT).as_posix() for example in EXAMPLES}
    assert {"README.md", "docs/agents.md", "docs/traces.md", "docs/workflows.md"} <= found


def test_a_block_that_raises_fails_its_test_with_the_page_lines(
        tmp_path: Path, eval_example: EvalExample) -> None:
    """A raising block is told by page and line; pytest's report never sees its frames."""
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```python\ndef f():\n    raise ValueError('told')\n\nf()\n```\n")
    (example,) = find_examples(page)
    told = run_block(example, eval_example)
    assert told == f"raised ValueError: told\n  {page}:7\n  {page}:5"
