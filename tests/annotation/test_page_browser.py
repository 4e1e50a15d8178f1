"""The page in a real headless Chromium: it opens at the boundary, buttons label like keys, text cannot reorder the
header, CSV cells are guarded, a changed trajectory's labels are set aside, and it works under a path prefix."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from interp.data.labels import read_labels_csv
from tests.annotation._support import Server, free_port, press, record, step, wait_for, write_jsonl

pytestmark = pytest.mark.e2e

PROGRESS = "return document.getElementById('progress').textContent"
INDEX = "return document.body.dataset.index"
# where the question and the step new at this boundary are, against the window and the scrolling history
PLACES = """
const main = document.getElementById('scroll').getBoundingClientRect();
const q = document.getElementById('question').getBoundingClientRect();
const s = document.querySelector('#view .step.new').getBoundingClientRect();
return {question: q.top >= 0 && q.bottom <= window.innerHeight, step: s.top >= main.top - 1 && s.top <= main.bottom - 40,
        scrolled: document.getElementById('scroll').scrollTop, text: document.getElementById('q-text').textContent,
        step_no: document.querySelector('#view .step.new').dataset.step};
"""



def click(driver, key: str) -> None:
    driver.find_element("css selector", f'#buttons button[data-key="{key}"]').click()


def long_step(t: int) -> dict:
    """A step of a real run's size: 20 lines of reasoning, a multi-line file write, a 40-line observation."""
    return {"reasoning": "\n".join(f"STEP{t} reasoning line {i}: checking module_{t}" for i in range(20)),
            "action": {"tool": "write_file", "arguments": {"path": f"m{t}.py",
                                                           "content": f"def f{t}():\n    return {t}\n"}},
            "observation": "\n".join(f"STEP{t} output line {i}" for i in range(40))}


def test_the_item_opens_at_the_boundary_and_buttons_label_like_keys(tmp_path, browser):
    traj = write_jsonl(tmp_path / "runs.jsonl", [record("long-run", [long_step(t) for t in range(1, 9)])])
    out = tmp_path / "alice.csv"
    server = Server("--trajectories", str(traj), "--labels", str(out), "--annotator", "alice", "--task", "g",
                    "--port", str(free_port()), cwd=tmp_path)
    values = [1, 0, 0, 1, 1, 0, 1, 1]
    try:
        browser.set_window_size(1100, 800)
        browser.get(server.url)
        wait_for(browser, PROGRESS, "0 / 8 labelled")
        for k in range(7):  # b = 1..7: even items by key, odd ones by button
            wait_for(browser, INDEX, str(k))
            places = browser.execute_script(PLACES)
            assert places["question"] and places["step"] and places["step_no"] == str(k + 1), (k, places)
            assert places["text"].startswith("G (externalization gap): After step") and f"step {k + 1}" in places["text"]
            (press if k % 2 == 0 else click)(browser, str(values[k]))
            wait_for(browser, PROGRESS, f"{k + 1} / 8 labelled")
        wait_for(browser, INDEX, "7")
        for key in ("k", "j"):  # back and forth: each item opens at its boundary again
            press(browser, key)
            wait_for(browser, INDEX, "6" if key == "k" else "7")
            assert all(v for k, v in browser.execute_script(PLACES).items() if k in ("question", "step"))

        browser.get(server.url)  # a reload resumes at the first unlabelled item: b = 8 of 8
        wait_for(browser, INDEX, "7")
        places = browser.execute_script(PLACES)
        assert places["question"] and places["step"] and places["step_no"] == "8" and places["scrolled"] > 2000
        browser.execute_script("document.getElementById('scroll').scrollTop = 0")
        press(browser, "b")  # jump back to the boundary
        wait_for(browser, "return document.getElementById('scroll').scrollTop > 2000", True)
        browser.execute_script("document.getElementById('scroll').scrollTop -= 300")
        kept = browser.execute_script("return document.getElementById('scroll').scrollTop")
        press(browser, "f")  # a key that re-renders nothing moves nothing
        wait_for(browser, "return document.getElementById('filter').getAttribute('aria-pressed')", "true")
        assert browser.execute_script("return document.getElementById('scroll').scrollTop") == kept

        browser.set_window_size(900, 480)  # a notebook frame's height: the question is still on screen
        assert browser.execute_script(PLACES)["question"]
        click(browser, str(values[7]))
        wait_for(browser, PROGRESS, "8 / 8 labelled")
        wait_for(browser, "return document.getElementById('done').hidden", False)
        assert "All 8 items are labelled" in browser.execute_script("return document.getElementById('done').textContent")
        assert read_labels_csv(out, "externalization_gap") == {("long-run", b): values[b - 1] for b in range(1, 9)}
        journal = (tmp_path / "alice.csv.annotate" / "journal.jsonl").read_text()
        assert journal.count('"event":"label"') == 8  # buttons and keys both went through the journal

        browser.set_window_size(1100, 800)
        browser.save_screenshot(str(tmp_path / "page.png"))
        server.kill()
        press(browser, "u")  # the server is gone: the page says what was saved and how to restart
        wait_for(browser, "return document.getElementById('gone').hidden", False)
        gone = browser.execute_script("return document.getElementById('gone').textContent")
        assert str(out) in gone and "interp annotate --trajectories" in gone and "--annotator alice" in gone
    finally:
        server.stop()


# left edge and top of every visible character under an element, in DOM order (from the layout, not the string)
CHARS = """
const root = arguments[0]; const out = [];
const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  for (let i = 0; i < n.data.length; i++) {
    if (/[\\s\\u202a-\\u202e\\u2066-\\u2069]/.test(n.data[i])) continue;
    const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
    const box = r.getBoundingClientRect(); out.push([n.data[i], box.left, box.top]);
  }
}
return out;
"""
SPOOF = "=cmd\u202eabc.exe"  # formula start and a right-to-left override in a task id


def in_order(chars: list) -> bool:
    """Every character on one line, each left of the next: the text reads in DOM order."""
    return all(abs(a[2] - chars[0][2]) < 3 for a in chars) and all(a[1] < b[1] for a, b in zip(chars, chars[1:]))


def test_a_bidi_override_cannot_reorder_the_header_and_csv_cells_are_guarded(tmp_path, browser):
    records = [record(SPOOF, [step(t) for t in range(1, 4)]), record("t2", [step(t) for t in range(1, 3)])]
    traj = write_jsonl(tmp_path / "runs.jsonl", records)
    out = tmp_path / "alice.csv"
    args = ("--trajectories", str(traj), "--labels", str(out), "--annotator", "alice", "--task", "g")
    server = Server(*args, "--port", str(free_port()), cwd=tmp_path)
    try:
        browser.set_window_size(1600, 800)
        browser.get(server.url)
        wait_for(browser, PROGRESS, "0 / 5 labelled")
        current = browser.find_element("id", "current")
        chars = browser.execute_script(CHARS, current)
        assert "".join(c[0] for c in chars).startswith("item1/5·=cmd\\u202eabc.exe(code)·b=1of3")
        assert in_order(chars), chars  # the override is shown as an escape and acts on nothing
        # the measure can fail: the same text inserted raw (no escape, no isolation) is drawn mirrored
        raw = browser.execute_script("const d = document.createElement('div'); d.id = 'raw';"
                                     "d.textContent = arguments[0]; document.body.prepend(d); return d;",
                                     f"item 1/5 \u00b7 {SPOOF} (code) \u00b7 b=1 of 3")
        assert not in_order(browser.execute_script(CHARS, raw))
        browser.execute_script("document.getElementById('raw').remove()")

        press(browser, "n")
        from selenium.webdriver.common.keys import Keys

        browser.find_element("id", "note").send_keys("=SUM(1,2) looks derived", Keys.ENTER)
        wait_for(browser, "return document.getElementById('status').textContent", "note saved at item 1")
        press(browser, "1")
        wait_for(browser, PROGRESS, "1 / 5 labelled")
        click(browser, "0")
        wait_for(browser, PROGRESS, "2 / 5 labelled")
    finally:
        server.stop()
    row = out.read_text().splitlines()[1]
    assert row.startswith("'=cmd\u202eabc.exe,1,1,alice,") and ',"\'=SUM(1,2) looks derived",' in row
    assert read_labels_csv(out, "externalization_gap") == {(SPOOF, 1): 1, (SPOOF, 2): 0}

    records[0]["steps"][0]["observation"] = "edited after labelling"  # the trajectory file changes
    write_jsonl(traj, records)
    server = Server(*args, "--port", str(free_port()), cwd=tmp_path)
    try:
        changed = [line for line in server.log.read_text().splitlines() if line.startswith("changed: ")]
        assert [line.split(":")[1].strip() for line in changed] == [f"{SPOOF}@1 G", f"{SPOOF}@2 G"]
        assert all(f"trajectory {SPOOF!r} changed since it was labelled" in line for line in changed)
        browser.get(server.url)
        wait_for(browser, PROGRESS, "0 / 5 labelled")  # set aside: not re-attached to the new text
        wait_for(browser, "return document.getElementById('changed').hidden", False)
    finally:
        server.stop()
    assert read_labels_csv(out, "externalization_gap") == {}


class PrefixProxy:
    """A small reverse proxy as jupyter-server-proxy is: ``/proxy/{port}/...`` is forwarded to
    ``127.0.0.1:{port}/...`` with the prefix stripped and ``X-Forwarded-Context`` set; any other path is a 404,
    recorded in ``outside``."""

    def __init__(self, port: int):
        prefix, outside = f"/proxy/{port}", []
        self.outside = outside

        class Handler(BaseHTTPRequestHandler):
            def forward(self) -> None:
                if not self.path.startswith(prefix + "/"):
                    outside.append(self.path)
                    self.send_error(404)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
                conn.request(self.command, self.path[len(prefix):], body or None,
                             {**headers, "X-Forwarded-Context": prefix})
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = forward

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_page_labels_through_a_path_prefix_as_jupyter_server_proxy_serves_it(tmp_path, browser):
    traj = write_jsonl(tmp_path / "runs.jsonl", [record("t0", [step(t) for t in range(1, 4)])])
    out = tmp_path / "bob.csv"
    server = Server("--trajectories", str(traj), "--labels", str(out), "--annotator", "bob", "--behind-proxy",
                    "--port", str(free_port()), cwd=tmp_path)
    port = int(server.base.rsplit(":", 1)[1])
    proxy = PrefixProxy(port)
    try:
        browser.get(f"http://127.0.0.1:{proxy.port}/proxy/{port}/?token={server.token}")
        wait_for(browser, PROGRESS, "0 / 3 labelled")
        press(browser, "1")
        wait_for(browser, PROGRESS, "1 / 3 labelled")
        click(browser, "0")
        wait_for(browser, PROGRESS, "2 / 3 labelled")
        press(browser, "u")
        wait_for(browser, PROGRESS, "1 / 3 labelled")
        assert proxy.outside == []  # every request the page made stayed under the prefix
    finally:
        proxy.close()
        server.stop()
    assert read_labels_csv(out, "externalization_gap") == {("t0", 1): 1}
    assert json.loads((tmp_path / "bob.csv.annotate" / "journal.jsonl").read_text().splitlines()[-1])["event"] == "undo"
