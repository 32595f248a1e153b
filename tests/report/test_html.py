"""`render_html(report)`: one self-contained page whose charts hold the report's numbers.

Parsed with the standard library's `html.parser`: every chart present, the numbers
in each drawn series equal to the report's, nothing fetched from the network.
"""

from __future__ import annotations

import html.parser
import json

import pytest

from accelkit.profiling.metrics import BY_NAME
from accelkit.profiling.run_report import RunReport
from accelkit.report.html import CHARTS, breakdown, render_html

from .helpers import saved_report


class _Page(html.parser.HTMLParser):
    """The elements of a page by id, and every series' numbers by chart."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self.series: dict[str, dict[str, list[float | None]]] = {}
        self.values: dict[str, dict[str, float]] = {}
        self.fetching: list[str] = []
        self._chart: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids[attrs["id"]] = tag
        if tag == "svg":
            self._chart = attrs.get("id")
        for name in ("src", "href"):
            if attrs.get(name) and ("://" in attrs[name] or tag in ("script", "link")):
                self.fetching.append(f"{tag} {name}={attrs[name]}")
        if tag in ("script", "link", "iframe", "img"):
            self.fetching.append(tag)
        if "data-values" in attrs and self._chart:
            numbers = (
                [None if v == "null" else float(v) for v in attrs["data-values"].split(",")]
                if attrs["data-values"]
                else []
            )
            self.series.setdefault(self._chart, {})[attrs.get("data-name", "x")] = numbers
        if "data-value" in attrs and self._chart:
            self.values.setdefault(self._chart, {})[attrs["data-name"]] = float(attrs["data-value"])

    def handle_endtag(self, tag):
        if tag == "svg":
            self._chart = None


def _report(**figures) -> RunReport:
    windows = 5
    series = {
        "time_s": [1.0, 2.0, 3.0, 4.0, 5.5],
        "step": [10.0, 20.0, 30.0, 40.0, 50.0],
        "step_time_s": [0.1, 0.1, 0.12, 0.1, 0.15],
        "samples_per_second": [640.0, 640.0, 533.3, 640.0, 426.7],
        "input_wait_s": [0.01, 0.02, 0.0, 0.01, 0.05],
        "gpu_time_s": [0.5, 1.5, 2.5, 3.5, 4.5, 5.2],
        "gpu_utilization": [50.0, 80.0, 90.0, None, 70.0, 60.0],
        "gpu_memory_used_bytes": [1e9, 2e9, 2e9, 2e9, 3e9, 3e9],
        "power_w": [200.0, 400.0, 410.0, 405.0, 300.0, 250.0],
        "sm_clock_mhz": [1980.0] * 6,
    }
    assert len(series["time_s"]) == windows
    base = {
        "framework": "torch",
        "model": "mlp",
        "device": "cuda:0",
        "precision": "bf16",
        "matmul_dtype": "bf16",
        "steps": 53,
        "warmup_steps": 3,
        "samples_per_second": 600.0,
        "flops_per_step": 1e12,
        "achieved_tflops": 9.5,
        "peak_tflops": 989.0,
        "peak_source": "NVIDIA H100 SXM datasheet",
        "mfu": 9.5 / 989.0,
        "calibrated_tflops": 700.0,
        "calibration_method": "bf16 matmul",
        "mfu_calibrated": 9.5 / 700.0,
        "input_wait_share": 0.12,
        "gpu_utilization": 70.0,
        "run_seconds": 7.5,
        "training_seconds": 5.5,
        "evaluation_seconds": 1.5,
        "other_seconds": 0.5,
        "evaluation_share": 0.2,
        "losses": [2.3, 1.9],
        "eval_losses": [2.2, 2.0],
        "plan": {
            "precision": "bf16",
            "distribution": "single",
            "settings": [
                {
                    "key": "precision",
                    "value": "bf16",
                    "reason": "cc 9.0 <has> bf16 & tensor cores",
                    "status": "applied",
                }
            ],
        },
        "advice": [
            {
                "severity": "high",
                "title": "input wait 12% <of step>",
                "evidence": {"input_wait_share": 0.12},
                "action": "num_workers=8",
            }
        ],
        "series": series,
    }
    return RunReport(**{**base, **figures})


def test_every_chart_holds_the_report_numbers():
    report = _report()
    page = _Page(render_html(report))
    for chart in CHARTS:
        assert page.ids.get(chart) == "svg", chart
    s = report.series
    assert page.series["chart-throughput"] == {
        "x": s["time_s"],
        "samples/s": s["samples_per_second"],
    }
    parts = page.series["chart-step-breakdown"]
    assert parts["x"] == s["time_s"]
    for name, values in breakdown(report).items():
        assert parts[name] == pytest.approx([v * 1e3 for v in values])
    for i, step in enumerate(s["step_time_s"]):  # the parts add up to the step
        assert sum(parts[n][i] for n in ("compute", "input wait", "idle")) == pytest.approx(
            step * 1e3
        )
    assert page.values["chart-mfu"] == {
        "achieved": 9.5,
        "measured peak": 700.0,
        "datasheet peak": 989.0,
    }
    gpu = {name: BY_NAME[name].label for name in ("gpu_utilization", "power_w")}
    memory = BY_NAME["gpu_memory_used_bytes"].label
    assert page.series["chart-gpu-utilization"][gpu["gpu_utilization"]] == s["gpu_utilization"]
    assert page.series["chart-gpu-power"][gpu["power_w"]] == s["power_w"]
    assert page.series["chart-gpu-memory"][memory] == [v / 1e9 for v in s["gpu_memory_used_bytes"]]
    assert page.series["chart-gpu-power"]["x"] == s["gpu_time_s"]
    assert page.ids.get("plan") == "table" and page.ids.get("advice") == "ol"


def test_breakdown_uses_the_window_utilisation():
    parts = breakdown(_report())
    # window 2 (1 s to 2 s) saw one tick at 80%: 80% of (0.1 - 0.02) is compute
    assert parts["compute"][1] == pytest.approx(0.08 * 0.8)
    assert parts["idle"][1] == pytest.approx(0.08 * 0.2)
    assert parts["input wait"][1] == 0.02


def test_page_is_self_contained_and_escapes_text():
    text = render_html(_report())
    page = _Page(text)
    assert page.fetching == []
    assert 'src="http' not in text and "<script" not in text
    assert "<has>" not in text and "&lt;has&gt; bf16 &amp; tensor cores" in text
    assert "input wait 12% &lt;of step&gt;" in text


def test_a_cpu_report_without_series_still_has_every_chart_with_the_reason():
    report = RunReport.from_dict(saved_report())
    report.note("gpu_utilization", "no NVML samples (no NVIDIA GPU)")
    page = _Page(render_html(report))
    for chart in CHARTS:
        assert chart in page.ids, chart
    text = render_html(report)
    assert "no NVML samples (no NVIDIA GPU)" in text
    assert page.fetching == []


def test_series_save_and_load_back(tmp_path):
    report = _report()
    path = tmp_path / "run.json"
    report.save(path)
    loaded = RunReport.load(path)
    assert loaded.series == report.series
    assert render_html(loaded) == render_html(report)
    data = json.loads(path.read_text())
    data["series"]["power_w"][0] = "hot"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"series\.power_w\[0\]"):
        RunReport.load(path)


def test_a_real_cpu_fit_charts_its_windows():
    pytest.importorskip("torch")
    from ..helpers.torch_data import train

    report = train(epochs=1, warmup=2, window=4)
    s = report.series
    assert s["step"][-1] == report.steps and len(s["step"]) == len(
        report.to_dict()["series"]["time_s"]
    )
    assert s["step_time_s"] and all(v > 0 for v in s["step_time_s"])
    assert "gpu_time_s" not in s
    page = _Page(render_html(report))
    assert page.series["chart-throughput"]["samples/s"] == s["samples_per_second"]
    for chart in CHARTS:
        assert chart in page.ids, chart


def test_to_html_is_the_renderer_s_page() -> None:
    report = RunReport(
        framework="torch", model="m", device="cpu", precision="fp32", matmul_dtype="fp32"
    )
    assert report.to_html() == render_html(report)
