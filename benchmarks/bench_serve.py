"""Benchmark: the added latency of ``interp serve`` per request, with the session's cache vs without.

An agent run under ``iclr`` grows its history request by request; each step is four reasoning blocks, one tool
call and an 18-line tool result: about 1,100 new tokens per request (the tiny tokenizer; both models below use
it). The proxy serves every request of the run in order (``Proxy.edit``: mapping, policy, sensor, write-back;
no network); the first request whose history reaches each target length (2K, 8K, 32K tokens) is timed:

- **cache**: the session as the proxy keeps it: earlier steps' decisions from memory, the prompt tokenized from
  where it departs from the last request's (``interp.data.render.Renderer``), token counts of texts already
  seen remembered, and the newest step's blocks scored by a forward that continues from the KV-cache snapshot
  of the already-compressed prefix;
- **no cache**: the same request served again with all of that set aside: its step's score forgotten, the
  prompt rendered and tokenized whole, every text counted anew, and the newest step scored by a forward over
  the whole history (``EntropyScorer(reuse=False)``); the session's cache is restored afterwards.

Both must send the same history (checked). Reported per length: the history's tokens, steps, the proxy's
added latency, the sensor's part, the tokens the sensor ran, the tokens the tokenizer ran, the cache held.

``--model``: ``tiny-qwen3.5`` (default), the tiny random hybrid (width 64: attention over the prefix dominates its
forward).

``--slice``: the sensor the study targets is Qwen3.5-9B, whose forward is mostly dense work per new token. A
**9B-shaped slice** has its shape (``Qwen3_5TextConfig`` defaults: hidden 4096, MLP 12288, full attention with
16 query / 4 KV heads of 256, Gated-DeltaNet with 16 key / 32 value heads of 128) and one period of its layer
mix (3 Gated-DeltaNet layers, 1 full-attention layer) instead of 32 layers, random init in memory, vocabulary
1,024 (the 9B's LM head, more work per new token, is left out: conservative); the ratio of dense work to
attention work per request is the 9B's at any depth. At about 1.6 GFLOP a token its full run to 32K (52
TFLOP) does not fit a shared CPU, so the slice times what a cached request costs the sensor: a forward of
``--slice-new`` new tokens continuing a cache whose full-attention layer holds L random keys and values
(L = each target length; Gated-DeltaNet states are fixed-size, so their work does not depend on L), with the
sensor's attention kernel (``interp_chunked``). The proxy's own work besides the forward is the tiny rows'
``added latency`` minus ``sensor s`` plus the render inside the sensor's part: milliseconds. ``--slice``
without ``--model`` times the slice only.

Run: python benchmarks/bench_serve.py [--model tiny-qwen3.5] [--lengths 2048,8192,32768] [--no-cache-max 32768]
     [--slice] [--slice-new 256] [--slice-repeats 3] [--slice-uncached-max 0]
     [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from _util import load_average, machine_note, markdown_table

WORDS = ("check the file list then open config and count lines maybe grep for errors in logs next step is "
         "clear so read the output again before writing").split()
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def turn(k: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Step k: an assistant turn (four reasoning blocks, one call) and its tool result."""
    blocks = [" ".join(WORDS[(k * 5 + j * 7 + i) % len(WORDS)] for i in range(40 + 9 * j)) for j in range(4)]
    call = {"id": f"call_{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{k}"})}}
    result = "\n".join(f"line {i}: " + " ".join(WORDS[(k + i + j) % len(WORDS)] for j in range(10)) for i in range(18))
    return ({"role": "assistant", "content": "", "reasoning_content": "\n\n".join(blocks), "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": result})


def slice_seconds(lengths: list[int], n_new: int, uncached_max: int = 0, repeats: int = 3
                  ) -> dict[tuple[int, str], tuple[float, float]]:
    """Wall and CPU seconds of the 9B-shaped slice's forward of ``n_new`` tokens after a cache of each length
    (``(length, "cache")``, the median of ``repeats``), and of the uncached request's forward over all ``length + n_new`` tokens for lengths
    up to ``uncached_max`` (``(length, "no cache")``) (module docstring); on a shared machine the CPU seconds of
    this one-thread process are the figure to read."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from interp.sensor.hooks import attention_implementation
    from interp.sensor.kernels.chunk_attention import IMPLEMENTATION, chunk_attention

    config = Qwen3_5TextConfig(vocab_size=1024, num_hidden_layers=4,  # type: ignore[call-arg]
                               max_position_embeddings=65536, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).eval()
    print(f"9B-shaped slice: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, layers "
          f"{config.layer_types}, hidden {config.hidden_size}, heads {config.num_attention_heads}/"
          f"{config.num_key_value_heads} x {config.head_dim}", flush=True)
    full = config.layer_types.index("full_attention")
    cached: dict[int, list[tuple[float, float]]] = {length: [] for length in lengths}
    out = {}
    with torch.inference_mode(), attention_implementation(model, IMPLEMENTATION, chunk_attention):
        for _ in range(repeats):  # round-robin over the lengths: drifting load touches each alike
            for length in lengths:
                cache = model(torch.randint(0, 1024, (1, 16)), use_cache=True).cache  # a fresh cache:
                layer = cache.layers[full]  # the forward below mutates it in place
                layer.keys, layer.values = (torch.randn(1, config.num_key_value_heads, length, config.head_dim)
                                            for _ in range(2))
                ids = torch.randint(0, 1024, (1, n_new))
                start, cpu = time.perf_counter(), time.process_time()
                model(ids, cache=cache, use_cache=True)
                cached[length].append((time.perf_counter() - start, time.process_time() - cpu))
                print(f"9B-shaped slice, cache: {n_new} new tokens after {length}: {cached[length][-1][0]:.2f} s wall, "
                      f"{cached[length][-1][1]:.2f} s CPU (load {load_average():.2f})", flush=True)
        for length in lengths:
            out[length, "cache"] = (statistics.median(w for w, _ in cached[length]),
                                    statistics.median(c for _, c in cached[length]))
            if length <= uncached_max:  # the request without the session: a forward over the whole history
                start, cpu = time.perf_counter(), time.process_time()
                model(torch.randint(0, 1024, (1, length + n_new)), use_cache=False)
                out[length, "no cache"] = (time.perf_counter() - start, time.process_time() - cpu)
                print(f"9B-shaped slice, no cache: {n_new} new tokens after {length}: "
                      f"{out[length, 'no cache'][0]:.2f} s wall, {out[length, 'no cache'][1]:.2f} s CPU "
                      f"(load {load_average():.2f})", flush=True)
    return out


def run(model: str, sensor: Any, lengths: list[int], no_cache_max: int) -> tuple[list[list[Any]], dict[Any, Any]]:
    """One agent run through the proxy; a table row per (length, mode), and (wall, CPU) seconds by (length, mode)."""
    from interp.accounting.tokens import parse_policy
    from interp.data.render import Renderer, render
    from interp.serve.app import Proxy
    from interp.serve.messages import history_of

    rows, seen = [], {}
    measure = Renderer()  # finds where the history reaches each target (not part of the timed work)
    with tempfile.TemporaryDirectory() as tmp:
        proxy = Proxy("http://127.0.0.1:9/v1", parse_policy("iclr"), Path(tmp), sensor=sensor,
                      max_tokens=max(lengths) * 2)
        session = proxy.session("run")
        state = session.state
        assert state.scorer is not None
        scorer = state.scorer.scorer
        messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]
        targets = list(lengths)
        while targets:
            a, r = turn(len(messages) // 2)
            messages = [*messages, a, r]
            body = {"model": "m", "messages": messages, "tools": TOOLS}
            history = history_of(body, "b")
            assert history is not None
            n = measure(history.trajectory, history.trajectory.n_steps, sensor.tokenizer).n_tokens
            raw = json.dumps(body).encode()
            if n < targets[0]:
                out = proxy.edit(raw, body, session, "run")
                assert out.failure is None, out.failure
                continue
            target = targets.pop(0)
            sent = {}
            for mode in ("cache", "no cache") if target <= no_cache_max else ("cache",):
                renderer = scorer.renderer
                if mode == "no cache":  # the request again, its step's score and every session cache set aside
                    state.scorer.memory.popitem()
                    scorer._memo.popitem()
                    scorer.reuse, scorer.renderer, state.counts, state.counted = False, render, {}, {}
                run_before, tokenized_before = scorer.tokens_run, renderer.tokenized
                start, cpu = time.perf_counter(), time.process_time()
                out = proxy.edit(raw, body, session, "run")
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                assert out.failure is None, out.failure
                tokenized = (renderer.tokenized - tokenized_before if mode == "cache" else n)
                scorer.reuse, scorer.renderer = True, renderer
                sent[mode], seen[(target, mode)] = out.content, (wall, cpu)
                rows.append([model, target, n, len(messages) // 2 - 1, mode, f"{wall:.3f}", f"{cpu:.3f}",
                             f"{out.sensor_seconds:.3f}", scorer.tokens_run - run_before, tokenized,
                             f"{state.cache_bytes() / 2**20:.1f}"])
                print(" | ".join(str(c) for c in rows[-1]), f"(load {load_average():.2f})", flush=True)
            assert len(set(sent.values())) == 1, "the session cache changed what the proxy sends"
    return rows, seen


def main() -> None:
    """Parse arguments, run, print Markdown tables with the load."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", action="append", help="a model spec (default tiny-qwen3.5); repeatable")
    parser.add_argument("--lengths", default="2048,8192,32768")
    parser.add_argument("--no-cache-max", type=int, default=32768, help="longest length also run without cache")
    parser.add_argument("--slice", action="store_true", help="also time the 9B-shaped slice's cached forward")
    parser.add_argument("--slice-new", type=int, default=256, help="new tokens of the slice's request")
    parser.add_argument("--slice-repeats", type=int, default=3, help="cached slice requests per length (median)")
    parser.add_argument("--slice-uncached-max", type=int, default=0,
                        help="longest length whose uncached slice request (a forward over the whole history) is timed")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.lengths.split(",")]
    print(machine_note(args.threads), flush=True)
    from interp.sensor.models import SPECS, load_model

    cpu0, rows = time.process_time(), []
    for model in args.model if args.model is not None else ([] if args.slice else ["tiny-qwen3.5"]):
        if SPECS[model].fetch and not SPECS[model].available():
            SPECS[model].fetch()
        found, seen = run(model, load_model(model), lengths, args.no_cache_max)
        rows += found
        for mode in ("cache", "no cache"):
            measured = [x for x in lengths if (x, mode) in seen]
            if len(measured) > 1:
                hi, lo = seen[(measured[-1], mode)], seen[(measured[0], mode)]
                print(f"{model}, {mode}: latency at {measured[-1]} / at {measured[0]} tokens = "
                      f"{hi[0] / lo[0]:.2f}x wall, {hi[1] / lo[1]:.2f}x CPU", flush=True)
    if args.slice:
        forward = slice_seconds(lengths, args.slice_new, args.slice_uncached_max, args.slice_repeats)
        for mode in ("cache", "no cache"):
            measured = [x for x in lengths if (x, mode) in forward]
            if len(measured) > 1:
                hi, lo = forward[measured[-1], mode], forward[measured[0], mode]
                print(f"9B-shaped slice, {mode}: request's forward at {measured[-1]} / at {measured[0]} tokens = "
                      f"{hi[0] / lo[0]:.2f}x wall, {hi[1] / lo[1]:.2f}x CPU", flush=True)
    print(markdown_table(["model", "target tokens", "history tokens", "steps", "mode", "added latency s",
                          "CPU s", "sensor s", "tokens run", "tokens tokenized", "cache MiB"], rows))
    print(f"load average at end {load_average():.2f}; CPU time of this process {time.process_time() - cpu0:.0f} s")


if __name__ == "__main__":
    main()
