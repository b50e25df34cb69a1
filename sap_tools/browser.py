"""Headless Chromium, driven by Playwright: screenshots of the viewer and of the inspector's reports.

Used by the browser tests and to refresh the screenshots in ``docs/``:

    python -m sap_tools.browser --docs        # rewrites docs/img/*.png (needs Chromium and Playwright)

Neither is a dependency of the package. Playwright comes from PyPI (``pip install playwright``);
its own browser download (``playwright install``) is not needed: a system Chromium is used
(Debian/Ubuntu: ``apt-get install chromium``), found on ``PATH`` or through ``SAP_CHROMIUM``.
:func:`unavailable_reason` says precisely which of the two is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

__all__ = ["CHROMIUM_ARGS", "find_chromium", "unavailable_reason", "free_port", "wait_for_http", "screenshot",
           "screenshot_viewer", "start_viewer", "stop", "image_stats"]

# Flags for a headless Chromium on a machine without a GPU, a display or a network: software
# WebGL (SwiftShader) so the viewer's three.js scene renders, and no background connections.
CHROMIUM_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--use-angle=swiftshader",
                 "--enable-unsafe-swiftshader", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage")
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable: ``$SAP_CHROMIUM``, else the first of ``_CANDIDATES`` on PATH."""
    env = os.environ.get("SAP_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def unavailable_reason() -> str | None:
    """None when a browser test can run; else what is missing and how to install it."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the Python package playwright is not installed (pip install playwright)")
    env = os.environ.get("SAP_CHROMIUM")
    if env and find_chromium() is None:
        missing.append(f"SAP_CHROMIUM={env!r} is not an executable file")
    elif find_chromium() is None:
        missing.append("no Chromium executable: none of " + ", ".join(_CANDIDATES) + " is on PATH and "
                       "SAP_CHROMIUM is not set (Debian/Ubuntu: apt-get install chromium)")
    return "; ".join(missing) or None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Return once ``url`` answers; ``RuntimeError`` after ``timeout`` s or if ``proc`` exits first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


def start_viewer(source: str, port: int, *extra: str, timeout: float = 240.0, log=None) -> subprocess.Popen:
    """Start ``sap-view SOURCE --port PORT`` as a separate process and wait until it serves.

    The caller stops it with :func:`stop`. ``--serve-seconds`` bounds it anyway, so an
    interrupted test cannot leave a server behind for long.
    """
    cmd = [sys.executable, "-m", "sap_tools.view", source, "--host", "127.0.0.1", "--port", str(port), "--quiet",
           "--serve-seconds", str(int(timeout + 300)), *extra]
    proc = subprocess.Popen(cmd, stdout=log or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", timeout, proc)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    """Terminate the process we started (SIGTERM, then SIGKILL after ``timeout`` s); its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def _launch(p):
    return p.chromium.launch(executable_path=find_chromium(), args=list(CHROMIUM_ARGS))


def screenshot(url: str, path: str, width: int = 1000, height: int = 700, full_page: bool = False) -> str:
    """Open ``url`` (``http://`` or ``file://``) in headless Chromium and save a PNG of it to ``path``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url, wait_until="load")
            page.screenshot(path=path, full_page=full_page)
        finally:
            browser.close()
    return path


def screenshot_viewer(url: str, path: str, width: int = 1000, height: int = 700, settle: float = 4.0,
                      timeout: float = 120.0) -> str:
    """Open the viewer at ``url``, wait for its 3D canvas and for the scene to arrive, save a PNG.

    The viewer's panel ends its status line with "sap-view: ready" once the scene is built (its
    messages reach the page in order); after that, ``settle`` seconds let the software renderer draw it.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url, wait_until="load", timeout=timeout * 1000)
            page.wait_for_selector("canvas", timeout=timeout * 1000)
            page.wait_for_function("document.body.innerText.includes('sap-view: ready')", timeout=timeout * 1000)
            time.sleep(settle)
            _close_notices(page)
            time.sleep(1.0)
            page.screenshot(path=path)
        finally:
            browser.close()
    return path


def _close_notices(page) -> None:
    """Hide viser's notices: its "software WebGL rendering" warning (no GPU here) would cover a
    corner of the scene, and it may come at any time after the page loads, so a style rule hides
    every notice for good rather than a click closing the ones present."""
    page.add_style_tag(content=".mantine-Notifications-root { display: none !important; }")


def image_stats(path: str, colors=(), tolerance: float = 10.0, saturation: float = 0.5) -> dict:
    """What a screenshot shows: ``std`` of its grey levels (0 for a blank page) and, per RGB
    colour in ``colors``, the number of pixels of that colour under any shading: hue within
    ``tolerance`` degrees, saturation at least ``saturation`` times the colour's (lighting
    changes brightness, translucency over white lowers saturation)."""
    import numpy as np
    from matplotlib import colors as mcolors
    from matplotlib import image

    img = image.imread(path)[..., :3].astype(np.float64)
    if img.max() > 1.0:
        img /= 255.0
    hsv = mcolors.rgb_to_hsv(img)
    out = {"std": float(img.mean(-1).std()), "shape": img.shape, "counts": []}
    for c in colors:
        h, s, _ = mcolors.rgb_to_hsv(np.asarray(c, float) / 255.0)
        dh = np.abs(hsv[..., 0] - h)
        dh = np.minimum(dh, 1.0 - dh)
        match = (dh < tolerance / 360.0) & (hsv[..., 1] > saturation * s) & (hsv[..., 2] > 0.15)
        out["counts"].append(int(match.sum()))
    return out


def shrink(path: str, colors: int = 256) -> str:
    """Re-save a screenshot as a palette PNG of ``colors`` colours (about a fifth of the size; for
    docs/). The octree quantizer keeps the bodies' hues (median cut shifts them)."""
    from PIL import Image

    with Image.open(path) as im:
        im.convert("RGB").quantize(colors=colors, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)
    return path


def _docs() -> int:
    """Regenerate the screenshots shown in docs/ (box_stack and humanoid: viewer and inspector)."""
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    img = os.path.join(root, "docs", "img")
    os.makedirs(img, exist_ok=True)
    reason = unavailable_reason()
    if reason:
        print(f"sap_tools.browser: error: {reason}", file=sys.stderr)
        return 2
    from sap_tools.cli import atomic_output
    from sap_tools.inspector import main as inspect_main

    for scene, step, extra in (("box_stack", 12, ["--line-search", "exact_root"]), ("humanoid", 20, [])):
        port = free_port()
        proc = start_viewer(scene, port, "--steps", str(step + 1), "--frame", str(step))
        try:
            with atomic_output(os.path.join(img, f"view_{scene}.png")) as png:  # complete, or the old one kept
                screenshot_viewer(f"http://127.0.0.1:{port}/", png, 900, 560)
                shrink(png)
        finally:
            stop(proc)
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.html")
            inspect_main([scene, "--step", str(step), "--out", report, "--quiet", *extra])
            with atomic_output(os.path.join(img, f"inspect_{scene}.png")) as png:
                screenshot("file://" + report, png, 1100, 1500)
                shrink(png)
    print(f"screenshots written to {img}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--docs"]:
        print("usage: python -m sap_tools.browser --docs", file=sys.stderr)
        sys.exit(2)
    sys.exit(_docs())
