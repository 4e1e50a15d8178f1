"""Benchmark: ``interp import`` of a Parquet shard streams: peak memory against the size of the shard (CPU, no model).

The shard is generated in nebius/SWE-rebench-openhands-trajectories' published
schema (``trajectory_id, instance_id, repo, trajectory, tools, model_patch,
exit_status, resolved``): each row one run of 20 tool calls (an assistant turn
with a call, its tool result), contents of random words, uncompressed so the
file's size is its text. Rows are written in row groups of ``--group-rows``
rows, as the hub's shards are. Two methods, each in its own subprocess (wall
and CPU time, and peak RSS added over the process at the call):

- ``import``: ``import_runs("auto", SHARD, OUT)``: rows read a batch at a time
  (:mod:`interp.data.importers.dataset`), converted, validated, written;
- ``load``: the naive first step, ``pyarrow.parquet.read_table(SHARD).to_pylist()``
  (every row in memory), for the memory comparison.

Prints a Markdown table per size: MB on disk, rows, seconds, rows/s, MB/s,
peak RSS added. No asserts on time.

Run: python benchmarks/bench_dataset.py [--mb 100,1024] [--group-rows 64] [--methods import,load]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from _util import MB, PeakRSS, emit, load_average, markdown_table, run_worker

SCRIPT = Path(__file__).resolve()
CALLS = 20  # tool calls per run
WORDS = ("state", "observe", "patch", "reasoning", "the", "test", "failed", "because", "value", "return",
         "import", "module", "line", "error", "fix", "check", "file", "diff", "call", "step")


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _row(rng: random.Random, k: int, words: int) -> dict:
    """One run: system, task, then CALLS (assistant call, tool result) pairs and a final answer."""
    chat = [{"role": "system", "content": "You are OpenHands agent.", "tool_calls": None, "tool_call_id": None,
             "name": None},
            {"role": "user", "content": _text(rng, words), "tool_calls": None, "tool_call_id": None, "name": None}]
    for c in range(CALLS):
        call_id = f"call_{k}_{c}"
        chat.append({"role": "assistant", "content": _text(rng, words // 4), "tool_call_id": None, "name": None,
                     "tool_calls": [{"id": call_id, "type": "function", "function": {
                         "name": "execute_bash", "arguments": f'{{"command": "{_text(rng, 8)}"}}'}}]})
        chat.append({"role": "tool", "content": _text(rng, words), "tool_calls": None, "tool_call_id": call_id,
                     "name": "execute_bash"})
    chat.append({"role": "assistant", "content": "Done.", "tool_calls": None, "tool_call_id": None, "name": None})
    tools = [{"type": "function", "function": {"name": "execute_bash", "description": "Run a command.",
                                               "parameters": "{}"}}]
    return {"trajectory_id": f"chatcmpl-{k}", "instance_id": f"org__repo-{k}", "repo": "org/repo",
            "trajectory": chat, "tools": tools, "model_patch": "diff --git a/x b/x", "exit_status": "submit",
            "resolved": k % 2}


def make_shard(path: Path, mb: int, group_rows: int, words: int = 400) -> int:
    """A shard of about ``mb`` MiB on disk (uncompressed), written a row group at a time; its row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    first = pa.Table.from_pylist([_row(rng, i, words) for i in range(group_rows)])
    k = group_rows
    with pq.ParquetWriter(path, first.schema, compression="none") as writer:
        writer.write_table(first)
        while path.stat().st_size < mb * MB:
            writer.write_table(pa.Table.from_pylist([_row(rng, k + i, words) for i in range(group_rows)]))
            k += group_rows
    return k


def worker(method: str, source: Path, out: Path) -> None:
    """Child process: one method on ``source``; prints wall/CPU seconds and peak RSS added."""
    wall, cpu = time.perf_counter(), time.process_time()
    with PeakRSS() as rss:
        if method == "import":
            from interp.data.importers.registry import import_runs

            report = import_runs("auto", source, out)
            result = {"converted": report.converted, "skipped": report.skipped,
                      "problems": report.problems[:2]}
        else:
            import pyarrow.parquet as pq

            result = {"loaded": len(pq.read_table(source).to_pylist())}
    emit({**result, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
          "peak_mb": rss.delta_mb})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", default="100,1024", help="Comma list of shard sizes (MiB on disk).")
    parser.add_argument("--group-rows", type=int, default=64, help="Rows per row group.")
    parser.add_argument("--methods", default="import,load", help="Comma list: import, load.")
    parser.add_argument("--worker", choices=["import", "load"], help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, Path(args.source), Path(args.out))
        return
    print(f"load average at start {load_average():.2f}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (int(v) for v in args.mb.split(",")):
            source = Path(tmp) / f"train-{mb}.parquet"
            start = time.perf_counter()
            n = make_shard(source, mb, args.group_rows)
            size = source.stat().st_size / MB
            print(f"shard {size:.0f} MiB, {n} rows, {args.group_rows} rows per group, written in "
                  f"{time.perf_counter() - start:.0f} s")
            for method in args.methods.split(","):
                out = Path(tmp) / f"out{mb}.jsonl"
                res = run_worker(SCRIPT, ["--worker", method, "--source", str(source), "--out", str(out)])
                if "error" in res:
                    rows.append([f"{size:.0f}", n, method, res["error"], "", "", ""])
                    continue
                rows.append([f"{size:.0f}", n, method, f"{res['wall_s']:.0f} / {res['cpu_s']:.0f}",
                             f"{n / res['wall_s']:.0f}", f"{size / res['wall_s']:.1f}", f"{res['peak_mb']:.0f}"])
                if method == "import":
                    print(f"{mb} MiB: {res['converted']} converted, {res['skipped']} skipped {res['problems']}")
                out.unlink(missing_ok=True)
                out.with_name(out.name + ".runs.csv").unlink(missing_ok=True)
            source.unlink()
    print(markdown_table(["MiB on disk", "rows", "method", "wall / CPU s", "rows/s", "MiB/s", "peak RSS added MiB"],
                         rows))
    print(f"load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
