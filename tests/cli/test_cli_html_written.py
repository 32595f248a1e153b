"""`accelkit report RUN.json --html FILE` says where it wrote the page, on stderr, so
that `--json` keeps stdout one document (issue 39)."""

from __future__ import annotations

import json

from .test_cli_html import _run, _saved


def test_the_page_s_path_is_told_on_stderr(tmp_path) -> None:
    page = tmp_path / "report.html"
    code, out, err = _run("report", _saved(tmp_path), "--html", str(page))
    assert code == 0, err
    assert f"accelkit: wrote the HTML page to {page}" in err
    assert str(page) not in out


def test_with_json_stdout_stays_one_document(tmp_path) -> None:
    page = tmp_path / "report.html"
    code, out, err = _run("report", _saved(tmp_path), "--json", "--html", str(page))
    assert code == 0 and "wrote the HTML page" in err
    assert json.loads(out)["schema"]
