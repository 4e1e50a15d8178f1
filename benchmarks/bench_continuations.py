"""Benchmark: a continuation unit's greedy turn and samples from one prompt prefill vs one prefill each.

``interp intervene`` generates, per state and condition, one greedy turn and
``samples`` sampled ones from the same prompt. Each generation used to prefill
the whole prompt; now the prompt runs once (``generation.prompt_snapshot``)
and every generation continues a copy of its cache. This runs the first
``--states`` demo states under ``full`` with ``--samples`` samples and a short
``--max-new-tokens`` both ways in one process (one torch thread), reporting CPU
seconds, tokens through the embedding (prefill and decode apart) and whether
the generated texts are identical.

Run: python benchmarks/bench_continuations.py [--model smollm2-135m] [--states 3] [--samples 2]
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
import tempfile
import time
from pathlib import Path
from unittest import mock

from _util import ROOT, load_average


def main() -> None:
    """Run both ways on the same states; print a Markdown row per way and the ratio."""
    import torch

    from interp.continuations.run import RunSettings, continue_states
    from interp.continuations.states import load_states
    from interp.data.trajectory import load_trajectories
    from interp.sensor.models import SPECS, load_model

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--states", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.model in SPECS:
        SPECS[args.model].fetch()
    sensor = load_model(args.model)
    trajs = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")
    states = load_states(ROOT / "data" / "demo" / "states.jsonl", trajs)[: args.states]
    settings = RunSettings(conditions=("full",), samples=args.samples, max_new_tokens=args.max_new_tokens)
    embed = sensor.hf_model.get_input_embeddings()
    print(f"{args.model}, {len(states)} states x full x (greedy + {args.samples} samples), max_new_tokens "
          f"{args.max_new_tokens}, 1 thread; load average at start {load_average():.2f}")
    texts, cpu = {}, {}
    print("| way | CPU s | prefill tokens | decode tokens |\n|---|---|---|---|")
    for way in ("one prefill each", "one prefill per unit", "one prefill each (again)", "one prefill per unit (again)"):
        lengths: list[int] = []
        handle = embed.register_forward_hook(lambda _m, a, _o: lengths.append(a[0].shape[-1]))
        patch = mock.patch("interp.continuations.run.prompt_snapshot", lambda *_: None) if "each" in way \
            else nullcontext()
        try:
            with patch, tempfile.TemporaryDirectory() as out:
                start = time.process_time()
                doc = continue_states(sensor, states, trajs, Path(out), settings, progress=False)
                cpu[way] = time.process_time() - start
        finally:
            handle.remove()
        texts[way] = [r["text"] for r in doc["rows"]]
        print(f"| {way} | {cpu[way]:.1f} | {sum(n for n in lengths if n > 1)} | {sum(n == 1 for n in lengths)} |")
    each = cpu["one prefill each"] + cpu["one prefill each (again)"]
    shared = cpu["one prefill per unit"] + cpu["one prefill per unit (again)"]
    print(f"\nCPU ratio (each / per unit): {each / shared:.2f}x; identical texts: "
          f"{texts['one prefill each'] == texts['one prefill per unit']}; load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
