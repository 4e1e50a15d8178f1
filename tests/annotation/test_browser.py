"""The labelling page in a real headless Chromium: keyboard labelling survives a SIGKILL, trajectory text is text."""

from __future__ import annotations


import pytest

from interp.data.labels import read_labels_csv
from tests.annotation._support import Server, free_port, press, record, step, wait_for, write_jsonl

pytestmark = pytest.mark.e2e

N_STEPS = 7



PROGRESS = "return document.getElementById('progress').textContent"
INDEX = "return document.body.dataset.index"
VIEW = "return document.getElementById('view').textContent"


def test_keyboard_labels_survive_a_kill_between_two_key_presses(tmp_path, browser):
    traj = write_jsonl(tmp_path / "runs.jsonl", [record(f"t{i}", [step(t) for t in range(1, N_STEPS + 1)])
                                                 for i in range(2)])
    out = tmp_path / "labels" / "alice.csv"
    args = ("--trajectories", str(traj), "--labels", str(out), "--annotator", "alice", "--task", "g")
    values = [1, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    queue = [(f"t{i}", b) for i in range(2) for b in range(1, N_STEPS + 1)]
    server = Server(*args, "--port", str(free_port()), cwd=tmp_path)
    try:
        browser.get(server.url)
        wait_for(browser, PROGRESS, f"0 / {2 * N_STEPS} labelled")
        for k in range(6):
            wait_for(browser, INDEX, str(k))
            task, b = queue[k]
            text = browser.execute_script(VIEW)
            # the G view holds the history up to b and no text of a later step
            assert f"STEP{b}" in text and all(f"STEP{t}" not in text for t in range(b + 1, N_STEPS + 1)), (task, b)
            press(browser, str(values[k]))
            wait_for(browser, PROGRESS, f"{k + 1} / {2 * N_STEPS} labelled")
        server.kill()  # between the 6th and the 7th key press
    finally:
        server.stop()
    given = {queue[k]: values[k] for k in range(6)}
    assert read_labels_csv(out, "externalization_gap") == given  # on disk at the kill

    server = Server(*args, "--port", str(free_port()), cwd=tmp_path)
    try:
        browser.get(server.url)
        wait_for(browser, PROGRESS, f"6 / {2 * N_STEPS} labelled")
        wait_for(browser, INDEX, "6")  # resumes after the last label
        press(browser, "u")  # undo reopens the 6th item and removes its label
        wait_for(browser, PROGRESS, f"5 / {2 * N_STEPS} labelled")
        wait_for(browser, INDEX, "5")
        press(browser, str(values[5]))
        for k in range(6, 10):
            wait_for(browser, INDEX, str(k))
            press(browser, str(values[k]))
            wait_for(browser, PROGRESS, f"{k + 1} / {2 * N_STEPS} labelled")
    finally:
        server.stop()
    assert read_labels_csv(out, "externalization_gap") == {queue[k]: values[k] for k in range(10)}
    journal = (out.parent / "alice.csv.annotate" / "journal.jsonl").read_text()
    assert journal.count('"event":"label"') == 11 and journal.count('"event":"undo"') == 1


HOSTILE = ('<script>window.__xss_script = 1</script><img src=x onerror="window.__xss = 1">'
           '<b>bold</b> \x1b[31mred\x1b[0m done')


def test_hostile_text_is_shown_as_text_and_runs_nothing(tmp_path, browser):
    long = HOSTILE + " " + "x" * 2000 + HOSTILE  # collapsed at first: expanding must not run it either
    steps = [step(1, observation=HOSTILE, reasoning=HOSTILE), step(2, observation=long), step(3)]
    rec = record("web-1", steps)
    rec["task"] = HOSTILE
    traj = write_jsonl(tmp_path / "runs.jsonl", [rec])
    server = Server("--trajectories", str(traj), "--labels", str(tmp_path / "a.csv"), "--annotator", "a",
                    "--task", "y", "--port", str(free_port()), cwd=tmp_path)
    try:
        browser.get(server.url)
        wait_for(browser, PROGRESS, "0 / 2 labelled")
        press(browser, "e")  # the rule evidence too (it quotes reasoning items)
        wait_for(browser, "return document.getElementById('evidence').hidden", False)
        for button in browser.find_elements("css selector", "button.expand"):
            button.click()
        text = browser.execute_script(VIEW)
        assert "<script>window.__xss_script = 1</script>" in text
        assert '<img src=x onerror="window.__xss = 1">' in text and "<b>bold</b>" in text
        assert "\\x1b[31mred\\x1b[0m" in text  # the terminal escape shown as a readable escape, font-independent
        counts = browser.execute_script(
            "return ['img', 'script', 'b'].map(t => document.querySelectorAll('main ' + t).length)")
        assert counts == [0, 0, 0]
        assert browser.execute_script("return [window.__xss, window.__xss_script]") == [None, None]
    finally:
        server.stop()
