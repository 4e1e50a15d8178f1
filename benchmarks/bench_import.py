"""Benchmark: ``interp import`` streams: time and peak memory against the size of the input (CPU, no model).

The input is the hand-written OpenAI sample (``tests/data/import/openai.jsonl``,
4 runs with every awkward case) repeated with fresh ids to N runs. Two
methods, each in its own subprocess (wall and CPU time, and peak RSS over the
process at the call):

- ``import``: ``import_runs("openai", ...)``: convert line by line, write the
  candidates, validate them with the validator of ``interp validate`` (JSON
  Schema per record), write the output atomically;
- ``load``: the naive first step of a converter that reads the input whole
  (``json.loads`` of every line into one list), for the memory comparison.

Prints a Markdown table per N: runs, input MB, seconds, runs/s, MB/s, and peak
RSS added. Streaming shows as an ``import`` peak that grows with the number of
runs by a few tuples each, while ``load`` grows with the bytes. No asserts on time.

Run: python benchmarks/bench_import.py [--runs 2000,16000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _util import MB, ROOT, PeakRSS, emit, load_average, markdown_table, run_worker

SCRIPT = Path(__file__).resolve()
SAMPLE = ROOT / "tests" / "data" / "import" / "openai.jsonl"


def make_input(path: Path, n_runs: int) -> None:
    """``n_runs`` runs: the sample's runs in turn, each with a fresh id."""
    runs = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n_runs):
            fh.write(json.dumps({**runs[i % len(runs)], "id": f"run-{i}"}, ensure_ascii=False) + "\n")


def worker(method: str, source: Path, out: Path) -> None:
    """Child process: one method on ``source``; prints wall/CPU seconds and peak RSS added."""
    from interp.data.importers.registry import import_runs

    wall, cpu = time.perf_counter(), time.process_time()
    with PeakRSS() as rss:
        if method == "import":
            report = import_runs("openai", source, out)
            result = {"converted": report.converted, "skipped": report.skipped}
        else:
            with source.open(encoding="utf-8") as fh:
                runs = [json.loads(line) for line in fh]
            result = {"loaded": len(runs)}
    emit({**result, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
          "peak_mb": rss.delta_mb})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="2000,16000", help="Comma list of input sizes (runs).")
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
        for n in (int(v) for v in args.runs.split(",")):
            source = Path(tmp) / f"runs{n}.jsonl"
            make_input(source, n)
            size = source.stat().st_size / MB
            for method in ("import", "load"):
                res = run_worker(SCRIPT, ["--worker", method, "--source", str(source), "--out",
                                          str(Path(tmp) / f"out{n}.jsonl")])
                if "error" in res:
                    rows.append([n, f"{size:.1f}", method, res["error"], "", "", ""])
                    continue
                rows.append([n, f"{size:.1f}", method, f"{res['wall_s']:.1f} / {res['cpu_s']:.1f}",
                             f"{n / res['wall_s']:.0f}", f"{size / res['wall_s']:.1f}", f"{res['peak_mb']:.1f}"])
                if method == "import":
                    print(f"{n} runs: {res['converted']} converted, {res['skipped']} skipped")
    print(markdown_table(["runs", "input MB", "method", "wall / CPU s", "runs/s", "MB/s", "peak RSS added MiB"],
                         rows))
    print(f"load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
