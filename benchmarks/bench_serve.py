"""Benchmark: the added latency of ``interp serve`` per request, with the session's sensor cache vs without.

An agent run under ``iclr`` grows its history to about 2K, 8K and 32K tokens (steps of four reasoning blocks,
one tool call and a tool result: about 1,100 tokens of the tiny model). The proxy serves every request of the run in
order (``Proxy.edit``: mapping, policy, sensor, write-back; no network), and the last request, whose history
has the target length, is timed:

- **cache**: the session as the proxy keeps it: earlier steps' decisions from memory, the newest step's blocks
  scored by a forward that continues from the KV-cache snapshot of the already-compressed prefix;
- **no cache**: the same session with its sensor cache dropped and prefix reuse off before the last request
  (``EntropyScorer(reuse=False)``): the newest step is scored by a forward over the whole history.

Both must send the same history (checked). Reported per length: the history's tokens, steps, the proxy's
added latency, the sensor's part, the tokens the sensor ran, the cache held, and the ratios 32K / 2K of each
mode. One thread unless ``--threads``; the load average is printed before and after.

Run: python benchmarks/bench_serve.py [--model tiny-qwen3.5] [--lengths 2048,8192,32768] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from _util import load_average, machine_note, markdown_table

WORDS = ("check the file list then open config and count lines maybe grep for errors in logs next step is "
         "clear so read the output again before writing").split()


def turn(k: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Step k: an assistant turn (four reasoning blocks, one call) and its tool result."""
    blocks = [" ".join(WORDS[(k * 5 + j * 7 + i) % len(WORDS)] for i in range(40 + 9 * j)) for j in range(4)]
    call = {"id": f"call_{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{k}"})}}
    result = "\n".join(f"line {i}: " + " ".join(WORDS[(k + i + j) % len(WORDS)] for j in range(10)) for i in range(18))
    return ({"role": "assistant", "content": "", "reasoning_content": "\n\n".join(blocks), "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": result})


def run(model: str, lengths: list[int]) -> list[list[Any]]:
    """One table row per (length, mode)."""
    from interp.accounting.tokens import parse_policy
    from interp.data.render import render
    from interp.serve.app import Proxy
    from interp.serve.messages import history_of
    from interp.sensor.models import SPECS, load_model

    if SPECS[model].fetch and not SPECS[model].available():
        SPECS[model].fetch()
    sensor = load_model(model)
    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    rows, seconds = [], {}
    for target in lengths:
        messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]
        bodies = []
        while True:
            a, r = turn(len(bodies) + 1)
            messages = [*messages, a, r]
            body = {"model": "m", "messages": messages, "tools": tools}
            bodies.append(body)
            n = render(history_of(body, "b").trajectory, len(bodies), sensor.tokenizer).n_tokens
            if n >= target:
                break
        sent = {}
        for mode in ("cache", "no cache"):
            with tempfile.TemporaryDirectory() as tmp:
                proxy = Proxy("http://127.0.0.1:9/v1", parse_policy("iclr"), Path(tmp), sensor=sensor,
                              max_tokens=max(lengths) * 2)
                session = proxy.session("run")
                for body in bodies[:-1]:
                    proxy.edit(json.dumps(body).encode(), body, session, "run")
                scorer = session.state.scorer
                if mode == "no cache":
                    scorer.scorer.reuse, scorer.scorer._resume = False, None
                before = scorer.scorer.tokens_run
                start = time.perf_counter()
                out = proxy.edit(json.dumps(bodies[-1]).encode(), bodies[-1], session, "run")
                wall = time.perf_counter() - start
                assert out.failure is None, out.failure
                sent[mode] = out.content
                seconds[(target, mode)] = wall
                rows.append([model, target, n, len(bodies), mode, f"{wall:.3f}", f"{out.sensor_seconds:.3f}",
                             scorer.scorer.tokens_run - before, f"{session.state.cache_bytes() / 2**20:.1f}"])
        assert sent["cache"] == sent["no cache"], "the sensor cache changed what the proxy sends"
    for mode in ("cache", "no cache"):
        ratio = seconds[(lengths[-1], mode)] / seconds[(lengths[0], mode)]
        print(f"{model}, {mode}: latency at {lengths[-1]} / at {lengths[0]} tokens = {ratio:.2f}x")
    return rows


def main() -> None:
    """Parse arguments, run, print a Markdown table with the load."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="tiny-qwen3.5")
    parser.add_argument("--lengths", default="2048,8192,32768")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_note(args.threads), f"load average at start {load_average():.2f}")
    rows = run(args.model, [int(x) for x in args.lengths.split(",")])
    print(markdown_table(["model", "target tokens", "history tokens", "steps", "mode", "added latency s",
                          "sensor s", "tokens run", "cache MiB"], rows))
    print(f"load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
