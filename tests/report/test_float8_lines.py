"""A float8 run's report (issue 36): saved and loaded with its float8 share and its
utilisation against the peaks its FLOPs could reach; older files without them load; the
text and the page show them beside MFU, named for the peak MFU is counted against."""

from __future__ import annotations

import json
import re

import pytest

from accelkit.profiling.run_report import RunReport
from accelkit.report.html import render_html
from accelkit.report.render import render_run

from .helpers import saved_report
from .test_html import _Page

_SCALE = {"": 1.0, "k": 1e-9, "M": 1e-6, "G": 1e-3, "T": 1.0, "P": 1e3}  # to TFLOP/s

# An H200 step of 1 s: 4e14 FLOPs, 2.5e14 of them in float8 (989.4 and 1978.9 TFLOP/s).
FIGURES = {
    "flops_per_step": 4e14,
    "achieved_tflops": 400.0,
    "peak_tflops": 989.4,
    "peak_source": "NVIDIA H200 SXM 141GB dense bf16 989.4 TFLOP/s (datasheet)",
    "mfu": 400.0 / 989.4,
    "float8_share": 0.625,
    "precision_mfu": (2.5e14 / 1978.9e12 + 1.5e14 / 989.4e12) / 1.0,
}


def _float8_run() -> RunReport:
    return RunReport.from_dict(
        {**saved_report(), "precision": "bf16", "matmul_dtype": "bf16", **FIGURES}
    )


def _row(text: str, figure: str) -> str | None:
    rows = [line for line in text.splitlines() if line.startswith(f"{figure}  ")]
    return rows[0][len(figure) :].strip() if rows else None


def test_the_figures_save_and_load_back_under_their_names(tmp_path) -> None:
    report = _float8_run()
    data = report.to_dict()
    assert data["float8_share"] == 0.625 and data["precision_mfu"] == FIGURES["precision_mfu"]
    report.save(tmp_path / "run.json")
    assert RunReport.load(tmp_path / "run.json") == report


def test_a_report_saved_before_float8_loads_without_them(tmp_path) -> None:
    data = saved_report()
    for key in ("float8_share", "precision_mfu"):
        del data[key]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    report = RunReport.load(path)
    assert report.float8_share is None and report.precision_mfu is None


@pytest.mark.parametrize(
    ("figures", "words"),
    [
        ({"float8_share": 1.5}, "'float8_share' is 1.5: a share is from 0 to 1"),
        ({"precision_mfu": 0.2}, "'precision_mfu' is 0.2 but 'float8_share' is null"),
        (
            {"precision_mfu": 0.2, "float8_share": 0.5},
            "'precision_mfu' is 0.2 but 'peak_tflops' is null",
        ),
    ],
)
def test_a_damaged_float8_figure_is_refused_by_name(figures, words) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        RunReport.from_dict({**saved_report(), **figures})


def test_the_text_names_the_peak_mfu_is_counted_against_and_shows_both_figures() -> None:
    text = render_run(_float8_run(), 120)
    assert _row(text, "MFU (vs bf16 dense peak)").startswith("40.4% of the datasheet peak")
    assert _row(text, "float8 share") == "62.5% of the counted matmul FLOPs"
    mixed = _row(text, "MFU (vs fp8/bf16 peaks)")
    shown = re.match(r"([\d.]+)% of ([\d,.]+) ([kMGTP]?)FLOP/s", mixed or "")
    assert shown, text
    # the shown share is achieved over the shown peak, to their rounding
    peak = float(shown.group(2).replace(",", "")) * _SCALE[shown.group(3)]
    assert float(shown.group(1)) == pytest.approx(400.0 / peak * 100, abs=0.06)
    assert "(float8 ones at fp8, the rest at bf16)" in " ".join(text.split())  # wrapped


def test_a_run_without_float8_reads_as_before() -> None:
    figures = {k: v for k, v in FIGURES.items() if k not in ("float8_share", "precision_mfu")}
    report = RunReport.from_dict({**saved_report(), **figures})
    text = render_run(report, 120)
    assert _row(text, "MFU") is not None
    assert "float8" not in text and "dense peak)" not in text and "fp8/" not in text
    page = render_html(report)
    assert "float8" not in page and "fp8/" not in page


def test_the_page_shows_them_in_the_headline_the_chart_and_the_figures() -> None:
    report = _float8_run()
    text = render_html(report)
    page = _Page(text)
    assert "MFU (vs bf16 dense peak)" in text
    assert ">62.5%<" in text and f">{report.precision_mfu:.1%}<" in text  # headline cards
    bars = page.values["chart-mfu"]
    assert bars["fp8/bf16 peak"] == pytest.approx(400.0 / report.precision_mfu)
    assert bars["datasheet peak"] == 989.4
    assert "62.5% of the matmul FLOPs ran in float8" in text
    assert "MFU (vs fp8/bf16 peaks)" in text
