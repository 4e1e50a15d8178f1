"""Benchmark: a request that needs no sensor forward, served while another session is being scored.

Two sessions of one ``interp serve`` proxy (``iclr:rho=0.5``, the tiny model, 1 torch thread) over a stub upstream,
all on 127.0.0.1 (real HTTP, uvicorn). Session B's history (``--b-steps`` steps) is scored once; its later
requests are answered from the session's memory (no forward). Timed, in one run:

- **solo**: B's request repeated ``--repeats`` times with nothing else running;
- **contended**: B's request repeated while session A's first request (``--a-steps`` steps, every one scored: a
  long stretch in the sensor) is being edited, from the moment A's first forward starts until A's answer;
- **contended, one lock** (the proxy before #50: the sensor lock held for a whole edit): the same, with
  ``Proxy.edit`` wrapped in one global lock.

Reported: median seconds of each and the ratios contended / solo (the acceptance bound: under 2x).

Run: python benchmarks/bench_serve_isolation.py [--a-steps 60] [--b-steps 8] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import torch

from _util import ROOT, load_average, machine_note, markdown_table

sys.path.insert(0, str(ROOT / "tests" / "serve"))
from _support import TOOLS, Stub, opening, scripted_turns, tool_result  # noqa: E402  # the tests' stub and agent


def history(n: int) -> list[dict[str, Any]]:
    turns, messages = scripted_turns(n), opening()
    for k in range(n):
        messages += [turns[k], tool_result(turns[k], k + 1)]
    return messages


def timed(client: httpx.Client, url: str, token: str, messages: list[dict[str, Any]], session: str) -> float:
    t0 = time.perf_counter()
    r = client.post(f"{url}/chat/completions", json={"model": "m", "messages": messages, "tools": TOOLS},
                    headers={"authorization": f"Bearer {token}", "x-interp-session": session})
    assert r.status_code == 200, r.text
    return time.perf_counter() - t0


def run(sensor: Any, a_steps: int, b_steps: int, repeats: int, one_lock: bool, tag: str) -> dict[str, Any]:
    from interp.accounting.tokens import parse_policy
    from interp.serve.app import Proxy, start

    stub_server = start(Stub(scripted_turns(max(a_steps, b_steps))).build())
    with tempfile.TemporaryDirectory() as tmp:
        proxy = Proxy(stub_server.url, parse_policy("iclr:rho=0.5"), Path(tmp) / "log", sensor=sensor)
        if one_lock:  # the proxy before #50: one lock over the whole edit of any session
            edit, everything = proxy.edit, threading.Lock()

            def locked(*args: Any) -> Any:
                with everything:
                    return edit(*args)

            proxy.edit = locked  # type: ignore[method-assign]
        server = start(proxy.build())
        b_hist, a_hist = history(b_steps), history(a_steps)
        with httpx.Client(timeout=600) as client:
            timed(client, server.url, proxy.token, b_hist, f"B{tag}")  # scored once: B's memory
            solo = [timed(client, server.url, proxy.token, b_hist, f"B{tag}") for _ in range(repeats)]
            a_started = threading.Event()
            scorer = proxy.session(f"A{tag}").state.scorer
            assert scorer is not None
            inner = scorer.scorer

            class Signal:  # marks A's first forward, then scores as usual
                _resume = property(lambda self: inner._resume)

                def __call__(self, h: Any, t: int) -> Any:
                    a_started.set()
                    return inner(h, t)

            scorer.scorer = Signal()  # type: ignore[assignment]
            a_time: list[float] = []
            a = threading.Thread(target=lambda: a_time.append(timed(httpx.Client(timeout=600), server.url,
                                                                     proxy.token, a_hist, f"A{tag}")))
            a.start()
            a_started.wait()
            contended = []
            while a.is_alive():
                contended.append(timed(client, server.url, proxy.token, b_hist, f"B{tag}"))
            a.join()
        server.stop()
        proxy.close()
    stub_server.stop()
    return {"solo": statistics.median(solo), "contended": statistics.median(contended) if contended else None,
            "n_contended": len(contended), "a_seconds": a_time[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a-steps", type=int, default=60)
    p.add_argument("--b-steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    from interp.sensor.models import load_model

    sensor = load_model("tiny-qwen3.5")
    print(machine_note(1))
    load0 = load_average()
    rows = []
    for name, one_lock in (("per-session locks (now)", False), ("one lock over the edit (before)", True)):
        r = run(sensor, args.a_steps, args.b_steps, args.repeats, one_lock, name[:3])
        ratio = r["contended"] / r["solo"] if r["contended"] else float("nan")
        rows.append([name, f"{r['solo'] * 1e3:.1f}", f"{r['contended'] * 1e3:.1f}" if r["contended"] else "-",
                     r["n_contended"], f"{ratio:.2f}", f"{r['a_seconds']:.2f}"])
    print(markdown_table(["proxy", "B solo ms (median)", "B while A scored ms (median)", "B requests during A",
                          "ratio", "A's request s"], rows))
    print(f"load average (1 min) at start {load0:.2f}, at end {load_average():.2f}")


if __name__ == "__main__":
    main()
