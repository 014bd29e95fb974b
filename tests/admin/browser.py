"""A headless Chromium (Debian's `chromium` and `chromedriver`, installed by `make browser-deps`) driven by
selenium, with the console log kept, for tests/admin/test_pages.py."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: set to a directory (docs/images) to save a PNG of the pages the tests name
SCREENSHOTS = os.environ.get("NSQADMIN_SCREENSHOTS", "")


def missing() -> str:
    """Why no browser can start ("" when one can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(path):
            return f"{path} is missing: run `make browser-deps`"
    return ""


class Browser:
    def __init__(self, profile: Path) -> None:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=1360,900", f"--user-data-dir={profile}", "--no-first-run"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        self.logs: list[dict[str, Any]] = []

    def quit(self) -> None:
        self.driver.quit()

    def open(self, url: str) -> Browser:
        self.driver.get(url)
        self.wait(lambda: self.driver.execute_script("return document.readyState") == "complete")
        return self

    def wait(self, condition: Callable[[], Any], timeout: float = 10) -> Any:
        return WebDriverWait(self.driver, timeout).until(lambda _: condition())

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str = "body") -> str:
        return self.find(css).text

    def rows(self, table_id: str) -> list[list[str]]:
        """The cell texts of a table's body rows."""
        return [[cell.text for cell in row.find_elements(By.CSS_SELECTOR, "td")]
                for row in self.all(f"#{table_id} tbody tr")]

    def next_page(self, action: Callable[[], Any]) -> None:
        """Run ``action`` and wait until the page it loads is complete (a mark on the old window is gone)."""
        self.driver.execute_script("window.oldPage = true")
        action()
        self.wait(lambda: self.driver.execute_script("return !window.oldPage && document.readyState === 'complete'"))

    def click_and_confirm(self, button: WebElement, expect: str) -> None:
        """Click an action, check its confirm() text, accept, and wait for the page it loads."""
        def confirm() -> None:
            button.click()
            alert = WebDriverWait(self.driver, 5).until(expected_conditions.alert_is_present())
            assert expect in alert.text, alert.text
            alert.accept()
        self.next_page(confirm)

    def console_errors(self) -> list[dict[str, Any]]:
        """The console entries at SEVERE since the last call."""
        entries = self.driver.get_log("browser")
        self.logs.extend(entries)
        return [entry for entry in entries if entry["level"] == "SEVERE"]

    def screenshot(self, name: str) -> None:
        if SCREENSHOTS:
            time.sleep(0.2)  # fonts settled
            self.driver.save_screenshot(str(Path(SCREENSHOTS) / f"nsqadmin-{name}.png"))

    def wait_gone(self, css: str, timeout: float = 10) -> None:
        try:
            self.wait(lambda: not self.all(css), timeout)
        except TimeoutException:
            raise AssertionError(f"{css} still on the page") from None
