"""Attribution vs exact patching per boundary: forwards and wall time at 32 history sites (CPU).

One boundary: a history of N tokens (seeded random token ids) and a deleted run
with a block of 10 % of it removed from the middle (a reasoning deletion). 32
sites: ``resid_pre`` of every layer at seeded history positions after the cut.

- ``attribution``: ``patching.attribution.linear_kl_repair`` over every layer
  and every position (one forward of the full run, one of the deleted run and
  one checkpointed backward, which recomputes each layer once: 3 forwards and
  1 backward), reading the 32 sites off the map;
- ``exact``: ``patching.attribution.exact_effects`` on the same 32 sites (the
  deleted run unpatched plus one patched forward per site; the full run's
  activations are the attribution's, so its forward is counted once: 2 + 32).

Also prints the Spearman and MAE of the two at those sites. Prints Markdown rows;
no asserts. Usage:
    python benchmarks/bench_attribution.py [--model tiny-qwen3.5] [--sizes 4096,32768] [--sites 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch

from _util import ROOT  # noqa: F401  (puts the checkout on sys.path)
from interp.sensor.hooks import hook_name
from interp.sensor.models import load_model
from patching.attribution import agreement, exact_effects, linear_kl_repair


def one(sensor: object, n: int, n_sites: int) -> str:
    """The Markdown row of one history length."""
    rng = random.Random(n)
    vocab = min(int(sensor.tokenizer.vocab_size), 30_000)  # type: ignore[attr-defined]
    full = [rng.randrange(100, vocab) for _ in range(n)]
    cut = (n // 2 - n // 20, n // 2 + n // 20)
    deleted = full[:cut[0]] + full[cut[1]:]
    names = [hook_name("resid_pre", layer) for layer in range(sensor.n_layers)]  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    lin = linear_kl_repair(sensor, full, deleted, names)  # type: ignore[arg-type]
    t_lin = time.perf_counter() - t0
    pool = [(k, i) for k in range(len(names)) for i in range(cut[0], len(deleted) - 1)]
    sites = sorted(rng.sample(pool, n_sites))
    t0 = time.perf_counter()
    exact = exact_effects(sensor, lin, deleted, [(k, [i]) for k, i in sites])  # type: ignore[arg-type]
    t_exact = time.perf_counter() - t0
    agree = agreement([lin.effect[k, i] for k, i in sites], exact, [str(s) for s in sites])
    load = os.getloadavg()[0]
    return (f"| {n} | {len(deleted)} | {n_sites} | 3 + 1 backward | {2 + n_sites} | {t_lin:.1f} | {t_exact:.1f} | "
            f"{t_exact / t_lin:.1f}x | {agree['spearman'] if agree['spearman'] is None else round(agree['spearman'], 3)}"
            f" | {agree['mae']:.2e} | {load:.1f} |")


def main() -> None:
    """Run the sizes and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-qwen3.5")
    ap.add_argument("--sizes", default="4096,32768")
    ap.add_argument("--sites", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sensor = load_model(args.model)
    print(f"{args.model}, CPU, {args.threads} thread(s), load average at start {os.getloadavg()[0]:.1f}")
    print("| history tokens | deleted tokens | sites | attribution forwards | exact forwards | attribution s | "
          "exact s | time ratio | Spearman | MAE (nats) | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        print(one(sensor, n, args.sites), flush=True)


if __name__ == "__main__":
    main()
