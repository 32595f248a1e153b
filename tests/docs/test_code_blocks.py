"""Every ```python block of README.md and docs/**/*.md runs (one test per block).

A page's blocks run in order in one namespace, as a reader pastes them, in a fresh
Python process per page (tests/docs/run_blocks.py, in a scratch directory), so the
settings a snippet applies do not leak into the test process. A block preceded by
``<!-- skip: reason -->`` is skipped with that reason (one that needs a GPU or a
launcher). A page that imports a framework not installed here (the framework-free
run on the oldest Python) is skipped with that reason. ```bash and other blocks are
not run.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .markdown_blocks import Block, blocks, pages

PAGE_TIMEOUT_S = 600
_RUNNER = Path(__file__).with_name("run_blocks.py")
_ALL = [block for page in pages() for block in blocks(page)]
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)
_pages: dict[str, concurrent.futures.Future[tuple[dict[str, dict], str]]] = {}
# What a page's code needs: imported modules, and accelkit's framework packages.
_IMPORT = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.MULTILINE)
_ACCELKIT_PACKAGE = re.compile(r"\baccelkit\.(torch|keras|lightning|hf)\b")
_NEEDS = {"torch": "torch", "keras": "keras", "lightning": "lightning", "hf": "transformers"}


@functools.cache
def _missing(page: str) -> tuple[str, ...]:
    """The modules the page's blocks need that are not installed."""
    code = "\n".join(b.source for b in _ALL if b.page == page)
    needed = set(_IMPORT.findall(code)) | {_NEEDS[p] for p in _ACCELKIT_PACKAGE.findall(code)}
    return tuple(sorted(m for m in needed if importlib.util.find_spec(m) is None))


def _run_page(page: str, scratch: Path) -> tuple[dict[str, dict], str]:
    todo = [{"id": b.id, "source": b.source, "skip": b.skip} for b in _ALL if b.page == page]
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "blocks.json").write_text(json.dumps(todo), encoding="utf-8")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(
            [sys.executable, str(_RUNNER), "blocks.json", "results.json"],
            check=False,
            cwd=scratch,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=PAGE_TIMEOUT_S,
        )
        output = done.stdout
    except subprocess.TimeoutExpired as timeout:
        output = (
            (timeout.stdout or b"").decode()
            if isinstance(timeout.stdout, bytes)
            else (timeout.stdout or "")
        )
        output += f"\n(page timed out after {PAGE_TIMEOUT_S} s)"
    results_file = scratch / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    return results, output


def _output_of(output: str, block_id: str) -> str:
    """The lines the block printed (the runner marks each block's start)."""
    start = output.find(f"----- {block_id}\n")
    if start < 0:
        return output[-4000:]
    end = output.find("\n----- ", start + 1)
    return output[start : end if end > 0 else None][-4000:]


def _pages_selected(session: pytest.Session) -> list[str]:
    """The pages of the blocks this session runs, in order."""
    selected: list[str] = []
    for item in session.items:
        block = getattr(item, "callspec", None) and item.callspec.params.get("block")
        if (
            isinstance(block, Block)
            and not block.skip
            and not _missing(block.page)
            and block.page not in selected
        ):
            selected.append(block.page)
    return selected


def _page_results(page: str, request: pytest.FixtureRequest) -> tuple[dict[str, dict], str]:
    """Start every selected page at the first test (two at a time: most of a page's
    time is importing torch or TensorFlow), then wait for this one."""
    if not _pages:
        factory = request.getfixturevalue("tmp_path_factory")
        for name in _pages_selected(request.session):
            scratch = factory.mktemp(name.replace("/", "_"))
            _pages[name] = _POOL.submit(_run_page, name, scratch)
    if page not in _pages:  # selected in an unusual way (e.g. by a plugin)
        scratch = request.getfixturevalue("tmp_path_factory").mktemp(page.replace("/", "_"))
        _pages[page] = _POOL.submit(_run_page, page, scratch)
    return _pages[page].result()


@pytest.mark.parametrize("block", _ALL, ids=[b.id for b in _ALL])
def test_code_block(block: Block, request: pytest.FixtureRequest) -> None:
    if block.skip:
        pytest.skip(block.skip)
    if missing := _missing(block.page):
        pytest.skip(f"the page needs {', '.join(missing)}, not installed here")
    results, output = _page_results(block.page, request)
    result = results.get(block.id)
    if result is None:
        pytest.fail(f"{block.id} did not run (an earlier block hung or crashed):\n{output[-4000:]}")
    if result["status"] == "failed":
        earlier = [
            b.id
            for b in _ALL
            if b.page == block.page
            and b.line < block.line
            and results.get(b.id, {}).get("status") == "failed"
        ]
        hint = f"\n(earlier blocks of the page failed too: {', '.join(earlier)})" if earlier else ""
        pytest.fail(
            f"{block.id} raised:\n{result['error']}\noutput:\n{_output_of(output, block.id)}{hint}",
            pytrace=False,
        )


def test_blocks_found() -> None:
    """The collector sees the quick start, and every skip marker has a reason."""
    readme = [b for b in _ALL if b.page == "README.md"]
    assert readme, "README.md has no ```python block"
    assert all(b.skip is None or b.skip.strip() for b in _ALL)


def test_skip_marker_applies_to_next_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- skip: needs a GPU -->\n```python\nimport torch\n```\n\n"
        "```bash\nls\n```\n\n- item:\n\n  ```python\n  x = 1\n  ```\n",
        encoding="utf-8",
    )
    found = [(b.line, b.source, b.skip) for b in blocks(page, root=tmp_path)]
    assert found == [(4, "import torch\n", "needs a GPU"), (14, "x = 1\n", None)]
