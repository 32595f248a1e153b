"""Run one page's ```python blocks in order, in one namespace, in this process.

    python run_blocks.py BLOCKS.json RESULTS.json

BLOCKS.json: a list of {"id", "source", "skip"}. RESULTS.json gets, per id,
{"status": "passed" | "failed" | "skipped", "error", "seconds"}. Run by
tests/docs/test_code_blocks.py in a fresh process per page (in a scratch
directory), so what a snippet configures (auto_configure's flags and variables,
the Keras policy, files it writes) stays out of the test process.
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def run(blocks: list[dict], results_path: str) -> None:
    namespace: dict = {"__name__": "__main__"}
    results: dict[str, dict] = {}
    for block in blocks:
        if block["skip"]:
            results[block["id"]] = {"status": "skipped", "error": block["skip"], "seconds": 0.0}
            continue
        print(f"----- {block['id']}", flush=True)
        start = time.perf_counter()
        try:
            exec(compile(block["source"], block["id"], "exec"), namespace)  # noqa: S102
            status, error = "passed", None
        except BaseException as exc:  # noqa: BLE001 - a snippet's SystemExit is a failure too
            status = "failed"
            error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stdout.flush()
        sys.stderr.flush()
        seconds = time.perf_counter() - start
        results[block["id"]] = {"status": status, "error": error, "seconds": seconds}
        # Write after every block: a page that hangs or crashes still says which block did.
        with open(results_path, "w", encoding="utf-8") as f:
            json.dump(results, f)
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        run(json.load(f), sys.argv[2])
