"""The HTML report in a real browser: headless Chromium renders the page of a real
CPU fit, and the screenshot shows the charts, not a blank page.

CI installs Chromium from Debian packages (.ci/run); where it is not installed the
test is skipped with that reason.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def test_chromium_draws_the_charts(tmp_path: Path) -> None:
    chromium = _chromium()
    page, shot = tmp_path / "report.html", tmp_path / "report.png"
    _fit_page(page)
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colors = image.getcolors(maxcolors=WIDTH * HEIGHT)
    assert colors is not None
    count = {rgb: n for n, rgb in colors}
    inked = WIDTH * HEIGHT - count.get((255, 255, 255), 0)
    assert inked > 0.05 * WIDTH * HEIGHT, f"only {inked} non-white pixels: a blank page"
    # The throughput line and the step-time bars are drawn in the first series colour.
    assert count.get(_rgb(COLORS[0]), 0) > 500
