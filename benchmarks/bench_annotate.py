"""Benchmark: the labelling page opens any boundary of a long run in under a second (server and headless Chromium).

Input: one synthetic run of 76 steps, each with three reasoning blocks
(~600 characters), a tool call and a 20,000-character observation (1.5 MB of
text at the last boundary). ``interp annotate --task both`` on it: 76 G items
(history 1..b) then 75 y items (history and the later steps: every step).

Two measurements, no asserts:

- ``server``: ``GET /api/item/i`` for every item over loopback (HTTP, view
  building, JSON); with the rule evidence (``suggestions=1``, off by default:
  it runs the rule labeler at that boundary) for every y item and for G at
  ``G_EVIDENCE_AT`` only (the G labeler's cost grows steeply with b here);
- ``browser``: in headless Chromium (Debian's chromium + chromedriver), the
  page goes to the next item on each ArrowRight key press; the time from the
  key event to the first animation frame after the new item is in the DOM
  (fetch, JSON parse, DOM built, laid out), for every item; and the first page
  load (navigation start to the first item shown).

Run: python benchmarks/bench_annotate.py [--steps 76] [--chars 20000] [--no-browser]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _util import ROOT, load_average, markdown_table

sys.path.insert(0, str(ROOT))

from tests.annotation._support import chromium_or_skip, record, write_jsonl  # noqa: E402

from interp.annotation.server import start_annotation  # noqa: E402

G_EVIDENCE_AT = (1, 4, 8, 16)  # the G rule labeler grows fast with b on long runs: a few boundaries only
NEXT_ITEM = """
const done = arguments[arguments.length - 1];
const before = document.body.dataset.index;
const t0 = performance.now();
document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
(function wait() {
  if (document.body.dataset.index !== before) {
    requestAnimationFrame(() => done([document.body.dataset.index, performance.now() - t0]));
  } else { setTimeout(wait, 1); }
})();
"""


def make_run(path: Path, n_steps: int, chars: int) -> Path:
    """One run of ``n_steps`` steps with ``chars``-character observations (log-like lines, distinct per step)."""
    steps = []
    for t in range(1, n_steps + 1):
        line = f"[step {t}] INFO worker-{t % 7} processed batch {t}: ok=True latency_ms={t * 13 % 997}\n"
        observation = (line * (chars // len(line) + 1))[:chars]
        reasoning = "\n\n".join(f"Block {k} of step {t}: the failing check points at module_{t}_{k}; so the plan "
                                f"is to compare run_{t} with the earlier output before editing config_{k}.py "
                                "and re-running the suite." for k in range(3))
        steps.append({"reasoning": reasoning, "action": {"tool": "run", "arguments": {"cmd": f"pytest -k case_{t}"}},
                      "observation": observation})
    return write_jsonl(path, [record("long-run", steps)])


def time_server(base: str, token: str, items: range | list[int], suggestions: bool) -> list[float]:
    """Seconds of ``GET /api/item/i`` for each item ``i`` (the payload read whole)."""
    out = []
    for i in items:
        req = urllib.request.Request(f"{base}/api/item/{i}?suggestions={int(suggestions)}",
                                     headers={"X-Annotate-Token": token})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=60) as reply:
            json.loads(reply.read())
        out.append(time.perf_counter() - t0)
    return out


def time_browser(url: str, n_items: int) -> tuple[float, list[float]]:
    """(first load ms, [ms per next-item key press]) in headless Chromium."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver, profile = chromium_or_skip()
    try:
        t0 = time.perf_counter()
        driver.get(url)
        WebDriverWait(driver, 60, poll_frequency=0.005).until(lambda d: d.execute_script(
            "return document.body.dataset.index") == "0")
        first = (time.perf_counter() - t0) * 1000
        driver.set_script_timeout(60)
        steps = [driver.execute_async_script(NEXT_ITEM)[1] for _ in range(n_items - 1)]
        return first, steps
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def summary(name: str, ms: list[float]) -> list[str]:
    ordered = sorted(ms)
    return [name, str(len(ms)), f"{statistics.median(ms):.1f}", f"{ordered[int(0.95 * (len(ms) - 1))]:.1f}",
            f"{max(ms):.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=76)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-annotate-") as tmp:
        runs = make_run(Path(tmp) / "run.jsonl", args.steps, args.chars)
        load0 = load_average()
        run = start_annotation(runs, Path(tmp) / "labels.csv", "bench", task="both")
        try:
            base, token = run.url.split("/?")[0], run.url.split("token=")[1]
            n_items = len(run.app.session.queue)
            n_g = args.steps  # items 0..n_g-1 are G at b = 1..n, the rest y at b = 1..n-1
            rows = [summary("server, item view", [s * 1000 for s in time_server(base, token, range(n_items), False)]),
                    summary("server, y with rule evidence",
                            [s * 1000 for s in time_server(base, token, range(n_g, n_items), True)])]
            for b in G_EVIDENCE_AT:
                rows.append(summary(f"server, G with rule evidence at b={b}",
                                    [s * 1000 for s in time_server(base, token, [b - 1], True)]))
            if not args.no_browser:
                first, steps = time_browser(run.url, n_items)
                rows.append(summary("browser, next item (key to frame)", steps))
                rows.append(["browser, first page load", "1", f"{first:.1f}", "-", f"{first:.1f}"])
        finally:
            run.stop()
        print(f"{args.steps} steps x {args.chars}-character observations ({runs.stat().st_size / 1e6:.1f} MB file), "
              f"{n_items} items (task both); load average {load0:.1f} -> {load_average():.1f}")
        print(markdown_table(["what", "n", "median ms", "p95 ms", "max ms"], rows))


if __name__ == "__main__":
    main()
