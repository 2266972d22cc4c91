"""Headless Chromium (the system's, never one Playwright would download) and a real server to point it at."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import TEST_PRESETS, ServerProcess

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:  # a failure, not a skip: CI must run these (scripts/install.sh --test installs it)
        pytest.fail("the browser tests need Debian's chromium; run scripts/install.sh --test")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of the dashboard preset, shared by a module's tests."""
    data = tmp_path_factory.mktemp("dashboard") / "data"
    server = ServerProcess(["-p", str(TEST_PRESETS / "dashboard_ppo.py")], data)
    yield server
    server.stop()
