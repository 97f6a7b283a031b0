"""A real browser for the web UI's tests: Debian's chromium driven through its chromedriver.

Nothing is downloaded: the driver and the browser are the system's (`.ci/run` installs them),
and Selenium Manager is kept offline. Screenshots go to `test-artifacts/ui/` (BURROW_UI_ARTIFACTS
overrides). `axe_violations` runs the vendored axe-core (MPL-2.0, tests/support/axe/) in the page.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support import spawn

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
AXE = Path(__file__).parent / "axe" / "axe-4.14.1.min.js"
ARTIFACTS = Path(os.environ.get("BURROW_UI_ARTIFACTS", ROOT / "test-artifacts" / "ui"))


def browser_missing() -> str | None:
    """Why no browser test can run here, or None.

    Raises:
        RuntimeError: the browser is missing where BURROW_TEST_REQUIRE_BROWSER=1 (CI) demands it.
    """
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            reason = f"{path} is not installed (apt-get install -y chromium chromium-driver)"
            if os.environ.get("BURROW_TEST_REQUIRE_BROWSER") == "1":
                raise RuntimeError(reason)
            return reason
    return None


@contextmanager
def chromium(width: int = 1440, height: int = 1000) -> Iterator[Any]:
    """A headless chromium session; quit at exit."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a browser or driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    """Save the whole page as `<name>.png` among the test artifacts."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1440, max(900, min(int(height) + 40, 3000)))
    driver.execute_script("window.scrollTo(0, 0)")
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(1440, 1000)
    return path


def axe_violations(driver: Any, impacts: tuple[str, ...] = ("serious", "critical")) -> list[str]:
    """axe-core's violations of these impacts on the page: 'rule: help (n nodes)' each."""
    driver.execute_script(AXE.read_text())
    driver.set_script_timeout(60)
    violations = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' '))}))))"
        ".catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]));"
    )
    return [
        f"{v['id']}: {v['help']} ({', '.join(v['nodes'][:3])})"
        for v in violations
        if v["impact"] in impacts
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(database_url: str, log: Path, **env: str) -> tuple[spawn.Process, str]:
    """`burrow server` on a free port with `env` (tokens); (process, base URL) once it serves."""
    port = free_port()
    with log.open("wb") as out:
        proc = spawn.popen(
            [sys.executable, "-m", "burrow", "server", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env={
                **os.environ,
                "BURROW_DATABASE_URL": database_url,
                # The repair pass fires the workflows' short timers and retries promptly.
                "BURROW_SERVER_SWEEP_INTERVAL_SECONDS": "0.2",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"{base}/api/health").json().get("status") == "serving":
                return proc, base
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "burrow server did not start: " + log.read_text()
        time.sleep(0.1)
