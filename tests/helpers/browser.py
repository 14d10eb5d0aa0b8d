"""Debian's headless Chromium, driven by Selenium through Debian's chromedriver: never a
browser or driver downloaded. The browser tests (tests/system/test_browser.py,
tests/system/test_admin_console.py) take their driver and their waits from here."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tools import require_tool

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_HINT = "apt-get install chromium chromium-driver (Debian's own builds)"
#: Seconds any one step of the browser may take (a page to load, a script to answer).
STEP_TIMEOUT = 15


@contextmanager
def chromium(folder: Path, window: tuple[int, int] | None = None) -> Iterator[Any]:
    """Run one headless Chromium with its profile in ``folder``; quit it on the way out.

    Its console is kept (``driver.get_log("browser")``), so that a test can read the
    Content-Security-Policy errors a page caused.
    """
    installed = all(os.access(path, os.X_OK) for path in (CHROMIUM, CHROMEDRIVER))
    require_tool(installed, "Debian's chromium and chromedriver", INSTALL_HINT)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service as DriverService
    except ImportError:
        require_tool(False, "selenium", "make test (it installs requirements-dev.txt)")
    cache = folder / "selenium-cache"
    with pytest.MonkeyPatch.context() as environment:
        # Selenium Manager, which downloads browsers and drivers, must never run: a path
        # that does not exist makes any call to it fail, and it would cache here
        environment.setenv("SE_MANAGER_PATH", str(folder / "no-selenium-manager"))
        environment.setenv("SE_CACHE_PATH", str(cache))
        environment.setenv("SE_OFFLINE", "true")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in [
            "--headless=new",
            "--no-sandbox",  # root, in a container: Chromium's sandbox needs user namespaces
            "--disable-dev-shm-usage",
            "--disable-gpu",
            f"--user-data-dir={folder / 'profile'}",
            "--no-first-run",
            "--disable-background-networking",  # traffic to loopback only: no update checks,
            "--disable-component-update",  # no components, no sync, and no name resolves
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.*",
        ]:
            options.add_argument(argument)
        if window is not None:
            options.add_argument(f"--window-size={window[0]},{window[1]}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(
            service=DriverService(CHROMEDRIVER, log_output=str(folder / "chromedriver.log")),
            options=options,
        )
    try:
        driver.set_page_load_timeout(STEP_TIMEOUT)
        driver.set_script_timeout(STEP_TIMEOUT)
        yield driver
    finally:
        driver.quit()
    assert not cache.exists()  # Selenium Manager never ran


def debian_version(program: str) -> str:
    """Return the version number ``program --version`` prints (Chromium 156.0.1.2 ...)."""
    output = subprocess.run([program, "--version"], capture_output=True, text=True, check=True)
    return next(word for word in output.stdout.split() if word[:1].isdigit())


def wait_for(browser: Any, condition: Any, what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, STEP_TIMEOUT).until(condition, f"{what} in {STEP_TIMEOUT} s")


def run_async(browser: Any, script: str, *arguments: Any) -> Any:
    """Run ``script`` in the page: a promise's body, whose value ``done`` hands back."""
    return browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"(async (...args) => {{ {script} }})(...arguments).then(done, e => done('threw ' + e));",
        *arguments,
    )
