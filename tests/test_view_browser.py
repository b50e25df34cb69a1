"""sap-view and sap-inspect as a user sees them: a real headless Chromium opens the page.

The viewer runs as its own process (``python -m sap_tools.view``) on a free port; Chromium
(driven by Playwright) opens it, waits for the scene, and takes a screenshot, which must not be
blank and must show every body (each body has its own hue, see ``sap_tools.shapes.PALETTE``). The
inspector's HTML report is opened the same way. The viewer process is stopped by the fixture
at the end of each test (and bounds itself with ``--serve-seconds`` anyway).

Needs the Python package playwright and a system Chromium (``apt-get install chromium``), not
Playwright's own browser download; without them these tests skip, naming what is missing. The
non-browser parts of both tools are tested in tests/test_view.py and tests/test_inspect.py.
"""

from __future__ import annotations

import os

import pytest

from sap_common import scenes
from sap_tools import browser
from sap_tools.shapes import PALETTE, body_colors

REASON = browser.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no browser for the browser tests: {REASON}")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Pixels of a body's hue that count as "the body is drawn" in a 900×560 screenshot: the least
# drawn hue of the humanoid (two small bodies) covers ~180 pixels, a box ~4000. Shading moves a
# body's hue by up to ~20°, so a neighbouring hue no body uses still scores up to ~100 pixels on
# box_stack; an unused hue must stay under 5 % of the least drawn used hue.
MIN_BODY_PIXELS = 100
MAX_ABSENT_FRACTION = 0.05
MIN_STD = 0.05  # grey-level spread; a blank (all-white) page has 0
SCENES = {"box_stack": 12, "humanoid": 20}  # scene: the frame shown (and the step inspected)


def used_colors(name):
    return {tuple(int(x) for x in c) for c in body_colors(scenes.get(name).sap_model)}


def check_shows_bodies(path, name):
    """The screenshot is not blank, every body hue is there and unused hues are not."""
    used = used_colors(name)
    stats = browser.image_stats(path, PALETTE)
    assert stats["std"] > MIN_STD, f"{path}: blank page"
    counts = dict(zip(PALETTE, stats["counts"]))
    least = min(counts[c] for c in used)
    for color, count in counts.items():
        if color in used:
            assert count >= MIN_BODY_PIXELS, f"{path}: body colour {color} drawn on only {count} pixels"
        else:
            assert count <= MAX_ABSENT_FRACTION * least, f"{path}: colour {color} on {count} pixels, used by no body"


@pytest.fixture
def viewer():
    """Start ``sap-view`` processes on free ports; every one is stopped when the test ends."""
    procs = []

    def start(source, *args):
        port = browser.free_port()
        procs.append(browser.start_viewer(source, port, *args))
        return f"http://127.0.0.1:{port}/"

    yield start
    for p in procs:
        browser.stop(p)
        assert p.poll() is not None


@pytest.mark.parametrize("name", list(SCENES))
def test_viewer_page_shows_the_bodies(name, viewer, tmp_path):
    frame = SCENES[name]
    url = viewer(name, "--steps", str(frame + 1), "--frame", str(frame))
    shot = tmp_path / f"view_{name}.png"
    browser.screenshot_viewer(url, str(shot), 900, 560)
    check_shows_bodies(str(shot), name)


def test_inspect_button_shows_the_figures_in_the_panel(viewer, tmp_path):
    from playwright.sync_api import sync_playwright

    url = viewer("box_stack", "--steps", "13", "--frame", "12")
    with sync_playwright() as p:
        b = browser._launch(p)
        try:
            page = b.new_page(viewport={"width": 800, "height": 800})
            page.goto(url)
            page.wait_for_function("document.body.innerText.includes('sap-view: ready')", timeout=120_000)
            # Software WebGL can keep a busy 2-core machine's page thread occupied for a while.
            page.get_by_role("button", name="Inspect this step").click(timeout=180_000)
            page.get_by_role("button", name="Download the HTML report").wait_for(timeout=240_000)
            text = page.evaluate("document.body.innerText")
            assert "Step 12 of box_stack" in text and "Newton iteration" in text
            loaded = page.evaluate("[...document.images].filter(i => i.complete && i.naturalWidth > 100).length")
            assert loaded >= 5
            page.screenshot(path=str(tmp_path / "inspect_panel.png"))
        finally:
            b.close()
    assert browser.image_stats(str(tmp_path / "inspect_panel.png"))["std"] > MIN_STD


@pytest.mark.parametrize("name", list(SCENES))
def test_inspector_report_opens_in_the_browser(name, tmp_path):
    from playwright.sync_api import sync_playwright

    from sap_tools.inspector import main

    report = tmp_path / "report.html"
    assert main([name, "--step", str(SCENES[name]), "--out", str(report), "--quiet"]) == 0
    shot = tmp_path / "report.png"
    with sync_playwright() as p:
        b = browser._launch(p)
        try:
            page = b.new_page(viewport={"width": 1100, "height": 1500})
            page.goto(report.as_uri(), wait_until="load")
            sizes = page.evaluate("[...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
            assert len(sizes) == 5 and all(c and w > 300 and h > 100 for c, w, h in sizes)
            assert f"step {SCENES[name]}" in page.title()
            page.screenshot(path=str(shot), full_page=True)
        finally:
            b.close()
    stats = browser.image_stats(str(shot), sorted(used_colors(name)), saturation=0.2)
    assert stats["std"] > MIN_STD
    # The scene figure draws the bodies translucent over white: their hues, paler.
    assert min(stats["counts"]) >= MIN_BODY_PIXELS
