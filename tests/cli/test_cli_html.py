"""`accelkit report RUN.json --html FILE`: the page written beside the usual output;
an unwritable path, or the input report itself, exits 2 with the path named, never a
traceback."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.cli import EXIT_USAGE
from accelkit.profiling.run_report import RunReport
from accelkit.report.html import CHARTS

from ..report.helpers import names_field, report_documents, saved_report
from .test_cli_report_files import _run, _write


def _saved(tmp_path) -> str:
    path = tmp_path / "run.json"
    document = saved_report()
    document["series"] = {
        "time_s": [1.0, 2.0],
        "step": [5.0, 10.0],
        "step_time_s": [0.2, 0.25],
        "samples_per_second": [40.0, 32.0],
        "input_wait_s": [0.0, 0.05],
    }
    path.write_text(json.dumps(document))
    return str(path)


def test_report_html_writes_a_page_with_every_chart(tmp_path):
    page = tmp_path / "report.html"
    code, out, err = _run("report", _saved(tmp_path), "--html", str(page))
    assert code == 0, err
    assert "accelkit run:" in out  # the terminal table as before
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    for chart in CHARTS:
        assert f'id="{chart}"' in text
    assert 'data-values="40.0,32.0"' in text
    assert "<script" not in text and 'src="http' not in text


def test_report_html_with_json_keeps_stdout_one_document(tmp_path):
    page = tmp_path / "report.html"
    code, out, _ = _run("report", _saved(tmp_path), "--json", "--html", str(page))
    assert code == 0
    assert json.loads(out)["series"]["samples_per_second"] == [40.0, 32.0]
    assert page.exists()


def test_report_html_to_an_unwritable_path_exits_2_naming_it(tmp_path):
    target = tmp_path / "missing" / "report.html"
    code, out, err = _run("report", _saved(tmp_path), "--html", str(target))
    assert code == EXIT_USAGE
    assert str(target) in err and "Traceback" not in err
    assert out == ""
    code, _, err = _run("report", _saved(tmp_path), "--html", str(tmp_path))  # a folder
    assert code == EXIT_USAGE and str(tmp_path) in err


def test_report_html_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Issue 25 D09: a page that fails to render leaves the earlier page as it was."""
    page = tmp_path / "report.html"
    page.write_text("<html>the earlier page</html>\n")
    page.chmod(0o644)
    saved = _saved(tmp_path)

    def broken(report):
        raise RuntimeError("the renderer failed")

    monkeypatch.setattr("accelkit.cli.report.render_html", broken)
    with pytest.raises(RuntimeError, match="renderer failed"):
        _run("report", saved, "--html", str(page))
    assert page.read_text() == "<html>the earlier page</html>\n"
    monkeypatch.undo()
    code, _, err = _run("report", saved, "--html", str(page))
    assert code == 0, err
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(page.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "run.json"]


def _link(make, to, at: Path) -> str:
    """`at`, made a link to `to` by `make` (os.symlink, os.link)."""
    make(to, at)
    return str(at)


# Ways to name a report again (the links are made beside it): what --html must not take.
SPELLINGS = {
    "as given": str,
    "relative": os.path.relpath,
    "through ./ and ..": lambda run: str(run.parent / "." / ".." / run.parent.name / run.name),
    "a symlink": lambda run: _link(os.symlink, run, run.parent / "latest.json"),
    "a relative symlink": lambda run: _link(os.symlink, run.name, run.parent / "rel.json"),
    "a hard link": lambda run: _link(os.link, run, run.parent / "hard.json"),
    "a symlinked folder": lambda run: os.path.join(
        _link(os.symlink, run.parent, run.parent.with_name(run.parent.name + "-alias")),
        run.name,
    ),
}


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(spelling=st.sampled_from(sorted(SPELLINGS)), json_out=st.booleans())
def test_report_html_naming_the_run_report_exits_2_and_keeps_it(
    tmp_path_factory, spelling, json_out
) -> None:
    """Faults4 E17: `--html` naming the input report, however spelled, would replace the
    run's JSON with the page; it is a usage error naming both paths, the report kept."""
    saved = Path(_saved(tmp_path_factory.mktemp("same")))
    before = saved.read_bytes()
    page = SPELLINGS[spelling](saved)
    code, out, err = _run("report", str(saved), "--html", page, *(["--json"] if json_out else []))
    assert code == EXIT_USAGE, err
    assert str(saved) in err and page in err and "Traceback" not in err
    assert out == "" and saved.read_bytes() == before
    RunReport.load(saved)


D15 = {
    "hardware_gpus_string": {"hardware": {"gpus": "abc"}},
    "plan_settings_int": {"plan": {"settings": 5}},
    "plan_settings_strings": {"plan": {"settings": ["abc"]}},
    "series_unequal": {"series": {"time_s": [1.0, 2.0, 3.0], "step_time_s": [0.1]}},
    "ranks_without_rank": {"ranks": [{"communication_share": 0.1}]},
    "advice_evidence_list": {"advice": [{"title": "t", "evidence": [1]}]},
}


@pytest.mark.parametrize("case", sorted(D15))
def test_what_the_html_page_cannot_draw_the_schema_refuses_by_name(tmp_path, case) -> None:
    """Issue 25 D15: these files passed the schema and `--html` crashed on them."""
    document = {**saved_report(), **D15[case]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    field = next(iter(D15[case]))
    for extra in ((), ("--html", str(tmp_path / "run.html"))):
        code, out, err = _run("report", str(path), *extra)
        assert code == EXIT_USAGE, err
        assert str(path) in err and names_field(err, field), err
        assert "Traceback" not in err and out == ""


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(document=report_documents())
def test_a_file_the_schema_takes_renders_and_one_it_refuses_exits_2_naming_a_field(
    document,
) -> None:
    path = _write(document)
    page = Path(path).with_suffix(".html")
    try:
        code, out, err = _run("report", path, "--html", str(page))
        written = page.exists() and page.read_text(encoding="utf-8")
    finally:
        os.unlink(path)
        page.unlink(missing_ok=True)
    try:
        RunReport.from_dict(document)
    except ValueError:
        assert code == EXIT_USAGE, err
        assert path in err and any(names_field(err, field) for field in document), err
        assert out == "" and not written
    else:
        assert code == 0, err
        assert out.startswith("accelkit run:") and written.startswith("<!DOCTYPE html>")
