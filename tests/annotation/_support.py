"""Shared helpers of the annotation tests: synthetic trajectory files, a server subprocess, a headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def step(t: int, observation: str | None = None, reasoning: str | None = None) -> dict:
    """One tool-call step whose texts carry the marker ``STEP<t>`` (so a view can be searched for later steps)."""
    return {"reasoning": reasoning if reasoning is not None else f"Reasoning STEP{t}: plan the next check.\n\n"
                                                                   f"So the cause is in module_{t}.",
            "action": {"tool": "run", "arguments": {"cmd": f"check STEP{t}"}},
            "observation": observation if observation is not None else f"output of STEP{t}"}


def record(task_id: str, steps: list[dict]) -> dict:
    """A minimal valid trajectory record."""
    return {"task_id": task_id, "domain": "code", "system_prompt": "You are an agent.",
            "tools": [{"name": "run", "description": "Run a command",
                       "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
            "task": "Find the cause.", "steps": steps, "outcome": {}}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``interp annotate`` as a subprocess; ``url`` (with the token) once it printed it."""

    def __init__(self, *args: str, cwd: Path):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        self.log = cwd / f"server-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "interp", "annotate", *args], cwd=cwd, env=env,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        self.url = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            found = re.search(r"open (http://\S+)", self.log.read_text())
            if found:
                self.url = found.group(1)
                break
            time.sleep(0.1)
        if self.url is None:
            self.proc.kill()
            raise AssertionError(f"server did not start: {self.log.read_text()}")
        self.token = self.url.split("token=")[1]
        self.base = self.url.split("/?")[0]
        for _ in range(100):  # the URL is printed just before uvicorn starts serving on the bound socket
            try:
                self.get("/api/state")
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)

    def get(self, path: str, token: bool = True) -> bytes:
        req = urllib.request.Request(self.base + path, headers={"X-Annotate-Token": self.token} if token else {})
        with urllib.request.urlopen(req, timeout=10) as reply:
            return reply.read()

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed that was not already."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def chromium_or_skip():
    """A headless Chromium (Debian's chromium + chromedriver via selenium), or skip saying what is missing."""
    import pytest

    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"no browser: {CHROMIUM} or {CHROMEDRIVER} missing (make test installs Debian's chromium "
                    "and chromium-driver where apt-get exists)")
    import tempfile

    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="interp-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver, profile


def wait_for(driver, script: str, expected, timeout: float = 120):
    """Poll ``script`` (JS returning a value) until it equals ``expected`` (the deadline only turns a hang into a
    failure; the message holds the last value)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script) == expected,
                                         message=f"{script} != {expected!r}: {driver.execute_script(script)!r}")


def press(driver, key: str) -> None:
    """Send one key press to the focused page."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(key).perform()
