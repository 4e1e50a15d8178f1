"""``--review`` in a real headless Chromium: the judge's label, confidence and reasons beside the question in the
first viewport on every item; ``g`` starts a fresh item number; the banner's restart command is the one that
started the page; invisible format characters are shown as marks."""

from __future__ import annotations

import json
import shlex
import urllib.request

import pytest

from interp.data.labels import read_label_table, write_labels_csv
from tests.annotation._support import Server, free_port, press, record, step, wait_for, write_jsonl
from tests.annotation.test_page_browser import INDEX, PROGRESS, long_step

pytestmark = pytest.mark.e2e

HIDDEN_ID = "code\u200b-001"  # looks like code-001 unless the zero-width space is shown
# whether the judge's box is inside the window, and its text
OTHERS = """
const o = document.getElementById('others'), q = document.getElementById('question');
const r = o.getBoundingClientRect(), qr = q.getBoundingClientRect();
return {visible: !o.hidden && r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight,
        question: qr.top >= 0 && qr.bottom <= window.innerHeight, text: o.textContent,
        index: document.body.dataset.index};
"""


def test_review_shows_the_judge_beside_the_question_and_g_starts_afresh(tmp_path, browser):
    runs = write_jsonl(tmp_path / "runs.jsonl", [record(HIDDEN_ID, [long_step(t) for t in range(1, 7)]),
                                                 record("code-001", [step(t) for t in range(1, 5)])])
    judge = tmp_path / "judge.csv"
    rows = [{"task_id": task, "after_step": b, "externalization_gap": (b + len(task)) % 2, "annotator": "judge:tiny",
             "confidence": f"0.{b}", "rationale": f"G: reason {task} at {b}, the plan is only in step {b}'s "
                                                  f"reasoning; y: LATER-STEP REASON {b}"}
            for task, n in ((HIDDEN_ID, 6), ("code-001", 4)) for b in range(1, n + 1)]
    write_labels_csv(judge, rows, "externalization_gap", ["annotator", "confidence", "rationale"])
    out = tmp_path / "carol.csv"
    args = ["--trajectories", str(runs), "--labels", str(out), "--annotator", "carol", "--task", "g",
            "--review", str(judge), "--allow-control-tokens", "--frame-ancestor", "https://hub.example.org",
            "--port", str(free_port())]
    server = Server(*args, cwd=tmp_path)
    try:
        state = json.loads(urllib.request.urlopen(urllib.request.Request(
            server.base + "/api/state", headers={"X-Annotate-Token": server.token})).read())
        assert state["restart"] == "interp annotate " + shlex.join(args)  # every option, as given
        browser.set_window_size(1000, 600)
        browser.get(server.url)
        wait_for(browser, PROGRESS, "0 / 10 labelled")
        assert "code\\u200b-001" in browser.find_element("id", "current").text  # the zero-width space, marked
        for k, row in enumerate(rows):
            wait_for(browser, INDEX, str(k))
            seen = browser.execute_script(OTHERS)
            assert seen["visible"] and seen["question"], (k, seen)
            shown_id = row["task_id"].replace("\u200b", "\\u200b")
            assert seen["text"] == (f"judge:tiny: G = {row['externalization_gap']} \u00b7 confidence "
                                    f"{row['confidence']} \u00b7 why: reason {shown_id} at {row['after_step']}, "
                                    f"the plan is only in step {row['after_step']}'s reasoning"), (k, seen)
            assert "LATER-STEP" not in seen["text"]  # the y reasons (they saw the later steps) stay out of G
            given = row["externalization_gap"] if k % 3 else 1 - row["externalization_gap"]
            press(browser, str(given))
            wait_for(browser, PROGRESS, f"{k + 1} / 10 labelled")
            wait_for(browser, "return document.getElementById('status').textContent",
                     f"confirmed judge:tiny's {given} at item {k + 1}" if k % 3 else
                     f"corrected judge:tiny's {row['externalization_gap']} to {given} at item {k + 1}")
        from selenium.webdriver.common.keys import Keys

        for number in ("5", "7"):
            press(browser, "g")
            browser.find_element("id", "goto").send_keys(number, Keys.ENTER)
            wait_for(browser, INDEX, str(int(number) - 1))
    finally:
        server.stop()
    reviewed = {(r["task_id"], int(r["after_step"])): r for _, r in read_label_table(out)[1]}
    assert all((reviewed[(r["task_id"], r["after_step"])]["reviewed_externalization_gap"] ==
                str(r["externalization_gap"])) for r in rows)  # each label recorded beside the judge's
