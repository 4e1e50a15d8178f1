"""Benchmark: the added cost of DRSR's relations (every layer's candidate pools and boundary state, attention rows
at the full-attention layers) over the harm forwards: since #38 one extra forward of the prompt at b (the forward
the online gate runs, so the gate is trained on what it reads).

One boundary (default: the middle boundary of the demo trajectory with the most steps), units of every kind,
``max_k`` 3 and ``budget`` sets per size. Two calls, interleaved ``--repeats`` times in one process after a warm-up
of each:

- ``harm``: ``patching.harm.boundary_harm`` (the full render's forward advanced from departure to departure,
  every set's suffix from its snapshot);
- ``harm + relations``: ``patching.drsr.boundary_record``: the same forwards plus the prompt's forward with the
  capture plan (pooled sums of every candidate span and the boundary token at every layer, the boundary row at
  every full-attention layer) and the projection of what was captured.

Prints the median wall and process CPU time of each and their ratio (acceptance: at most 1.2), as a Markdown
table with the machine's load. No asserts on time.

Run: python benchmarks/bench_drsr.py [--model tiny-qwen3.5] [--threads 1] [--repeats 5] [--budget 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from _util import load_average, machine_note, markdown_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-qwen3.5")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=int, default=3)
    parser.add_argument("--task", default=None, help="task_id (default: the demo trajectory with the most steps)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from interp.data.deletions import UNIT_KINDS, history_units
    from interp.data.trajectory import load_trajectories
    from interp.pipelines.demo import DEMO_TRAJECTORIES
    from interp.sensor.models import load_model
    from patching.drsr import boundary_record
    from patching.harm import boundary_harm

    trajs = load_trajectories(DEMO_TRAJECTORIES)
    traj = next(t for t in trajs if t.task_id == args.task) if args.task else max(trajs, key=lambda t: t.n_steps)
    b = max(1, traj.n_steps // 2)
    sensor = load_model(args.model)
    calls = {"harm": lambda: boundary_harm(sensor, traj, b, 3, args.budget, 0, UNIT_KINDS),
             "harm + relations": lambda: boundary_record(sensor, traj, b, 3, args.budget, 0, UNIT_KINDS)}
    load0 = load_average()
    note = machine_note(args.threads)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for name, call in calls.items():
        call()  # warm-up
    for _ in range(args.repeats):
        for name, call in calls.items():
            wall, cpu = time.perf_counter(), time.process_time()
            record = call()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    n_sets = len(record["sets"])
    med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}
    rows = [[name, f"{w:.2f}", f"{c:.2f}"] for name, (w, c) in med.items()]
    rows.append(["ratio", f"{med['harm + relations'][0] / med['harm'][0]:.3f}",
                 f"{med['harm + relations'][1] / med['harm'][1]:.3f}"])
    print(f"{args.model}, {traj.task_id}@{b}: {len(history_units(traj, b, UNIT_KINDS))} candidate units, {n_sets} sets, "
          f"{sensor.n_layers} layers pooled, attention rows at {sensor.full_attention_layers}; median of "
          f"{args.repeats}")
    print(note + f"; load at end {load_average():.2f} (start {load0:.2f})")
    print(markdown_table(["call", "wall s", "CPU s"], rows))


if __name__ == "__main__":
    main()
