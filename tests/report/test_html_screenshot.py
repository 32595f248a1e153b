"""The HTML report in a real browser: headless Chromium renders the page of a real
CPU fit, and the screenshot shows the charts, not a blank page; at a desktop's width and
a phone's, no text is cut off (nothing wider than the window, no box scrolling its text
sideways, no chart text outside its chart, no two legend entries over each other).

CI installs Chromium from Debian packages (.ci/run); where it is not installed the
test is skipped with that reason.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from accelkit.report.svg import COLORS

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

WIDTH, HEIGHT = 1000, 1600


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.skip("Chromium is not installed (CI installs it from Debian packages: .ci/run)")


def _fit_page(path: Path) -> None:
    import accelkit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    data = torch.utils.data.TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    report = accelkit.torch.fit(
        model, loader, optimizer, torch.nn.functional.cross_entropy, window=4, progress=False
    )
    path.write_text(report.to_html())


def screenshot(page: Path, shot: Path, width: int, height: int) -> Any:
    """`page` shot by headless Chromium at `width` x `height`, as an RGB image."""
    subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return Image.open(shot).convert("RGB")


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def test_chromium_draws_the_charts(tmp_path: Path) -> None:
    page, shot = tmp_path / "report.html", tmp_path / "report.png"
    _fit_page(page)
    image = screenshot(page, shot, WIDTH, HEIGHT)
    assert image.size == (WIDTH, HEIGHT)
    colors = image.getcolors(maxcolors=WIDTH * HEIGHT)
    assert colors is not None
    count = {rgb: n for n, rgb in colors}
    inked = WIDTH * HEIGHT - count.get((255, 255, 255), 0)
    assert inked > 0.05 * WIDTH * HEIGHT, f"only {inked} non-white pixels: a blank page"
    # The throughput line and the step-time bars are drawn in the first series colour.
    assert count.get(_rgb(COLORS[0]), 0) > 500


# Run in a copy of the page only (the page itself has no script): where the layout
# cuts text off, as JSON in an attribute of the body, which --dump-dom prints.
_PROBE = """<script>
addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const boxes = [...document.querySelectorAll("body *")].filter((e) => e instanceof HTMLElement);
  const name = (e) => e.tagName + "#" + e.id;
  const outside = (svg) => {
    const box = svg.getBoundingClientRect();  // on the screen: rotations and scale applied
    return [...svg.querySelectorAll("text")].filter((t) => {
      const b = t.getBoundingClientRect();
      return b.left < box.left - 0.5 || b.top < box.top - 0.5 || b.right > box.right + 0.5
        || b.bottom > box.bottom + 0.5;
    }).map((t) => svg.id + ": " + t.textContent);
  };
  const overlapping = (legend) => {
    const keys = [...legend.querySelectorAll("text")].map((t) => t.getBBox());
    return keys.some((a, i) => keys.slice(i + 1).some((b) =>
      a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height));
  };
  document.body.dataset.layout = JSON.stringify({
    width: width,
    scroll: document.documentElement.scrollWidth,
    past_the_window: boxes.filter((e) => e.getBoundingClientRect().right > width + 1).map(name),
    scrolled: boxes.filter((e) => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0).map(name),
    outside_its_chart: [...document.querySelectorAll("svg.chart")].flatMap(outside),
    legends_overlapping: [...document.querySelectorAll("g.legend")].filter(overlapping).length,
  });
});
</script>"""


def _layout(chromium: str, page: Path, width: int) -> dict:
    probe = page.with_name(f"probe-{width}.html")
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--window-size={width},1600",
            "--virtual-time-budget=3000",
            "--dump-dom",
            probe.as_uri(),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'data-layout="([^"]*)"', done.stdout)
    assert found, done.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.parametrize("width", [1280, 480])
def test_no_text_is_cut_off_at_a_desktop_s_width_or_a_phone_s(tmp_path: Path, width: int) -> None:
    """Issue 25: the text section ran off the right of the page, a chart's last tick off
    the chart."""
    from accelkit.report.html import render_html

    from .test_html import _report

    chromium = _chromium()
    cpu, gpu = tmp_path / "cpu.html", tmp_path / "gpu.html"
    _fit_page(cpu)
    gpu.write_text(render_html(_report()))
    for page in (cpu, gpu):
        layout = _layout(chromium, page, width)
        assert layout["scroll"] <= layout["width"], layout
        assert layout["past_the_window"] == [] and layout["scrolled"] == [], layout
        assert layout["outside_its_chart"] == [] and layout["legends_overlapping"] == 0, layout
