"""The notebook frame in a real headless Chromium: it takes the focus when shown, keys then label, and the line
under it says "click in the page" while the notebook (here a stand-in page with a text box) has the focus."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import interp
from interp.annotation.notebook import HINT
from tests.annotation._support import Server, free_port, press, record, step, wait_for, write_jsonl

pytestmark = pytest.mark.e2e

PROGRESS = "return document.getElementById('progress').textContent"
FOCUSED = "return document.activeElement.tagName"
HINT_SHOWN = "return document.querySelector('.interp-annotation-hint').style.visibility"


def notebook_page(frame_html: str) -> ThreadingHTTPServer:
    """A loopback page standing in for a notebook: a text box (a cell) and the frame's output below it."""
    page = f'<!doctype html><html><body><input id="cell" value="">{frame_html}</body></html>'.encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_frame_takes_the_focus_and_says_when_it_has_lost_it(tmp_path, browser):
    traj = write_jsonl(tmp_path / "runs.jsonl", [record("t0", [step(t) for t in range(1, 4)])])
    out = tmp_path / "alice.csv"
    server = Server("--trajectories", str(traj), "--labels", str(out), "--annotator", "alice", "--task", "g",
                    "--port", str(free_port()), cwd=tmp_path)
    frame = interp.annotation_iframe(server.url, height=480)
    notebook = notebook_page(frame._repr_html_())
    try:
        browser.get(f"http://127.0.0.1:{notebook.server_address[1]}/")
        assert browser.execute_script("return document.querySelector('.interp-annotation-hint').textContent") == HINT
        wait_for(browser, FOCUSED, "IFRAME")  # focused on display, no click
        wait_for(browser, HINT_SHOWN, "hidden")
        browser.switch_to.frame(browser.find_element("css selector", "iframe"))
        wait_for(browser, PROGRESS, "0 / 3 labelled")
        press(browser, "1")  # the key reaches the page
        wait_for(browser, PROGRESS, "1 / 3 labelled")
        browser.switch_to.default_content()

        browser.execute_script("document.getElementById('cell').focus()")  # the notebook takes the focus back
        wait_for(browser, HINT_SHOWN, "visible")
        press(browser, "0")  # goes to the notebook, not to the page
        assert browser.execute_script("return document.getElementById('cell').value") == "0"

        browser.find_element("css selector", "iframe").click()  # clicking in the page gives it the keys again
        wait_for(browser, HINT_SHOWN, "hidden")
        browser.switch_to.frame(browser.find_element("css selector", "iframe"))
        assert browser.execute_script(PROGRESS) == "1 / 3 labelled"
        press(browser, "0")
        wait_for(browser, PROGRESS, "2 / 3 labelled")
    finally:
        notebook.shutdown()
        server.stop()
    from interp.data.labels import read_labels_csv

    assert read_labels_csv(out, "externalization_gap") == {("t0", 1): 1, ("t0", 2): 0}
