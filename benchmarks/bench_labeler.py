"""The rule-based G labeler on one huge trajectory line: CPU seconds against line size (it must be linear).

One trajectory (``tests/data/mini.jsonl``'s first) whose step-1 reasoning and
step-2 observation are padded with code-like text (identifiers, paths, calls,
numbers; few sentence ends: the shape that made the item patterns quadratic)
to ``--sizes`` megabytes of JSON line. Each size runs ``label_gaps`` (what
``interp externalize label`` computes) in its own subprocess; reported are the
CPU seconds of the labeling alone (the file read and JSON parse excluded),
seconds per MB and the ratio to the smallest size's seconds per MB (1.0 =
linear). No asserts.

Usage: ``python benchmarks/bench_labeler.py [--sizes 1,5,10,50]``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import ROOT

WORDS = ("the cache_key parser.returns error_value config/module function() test path file line data 42 0x1f "
         "assert raise KeyError tests/test_cache.py:118 because then").split()


def make_line(megabytes: float, seed: int = 0) -> str:
    """The mini trajectory with about ``megabytes`` MB of padding, as one JSON line."""
    raw = json.loads((ROOT / "tests" / "data" / "mini.jsonl").read_text().splitlines()[0])
    rng = random.Random(seed)
    mean_word = sum(map(len, WORDS)) / len(WORDS) + 1  # with its space
    n_words = int(megabytes * 1_000_000 / (mean_word * 4 / 3))  # the reasoning repeats a third of the text
    text = " ".join(rng.choice(WORDS) for _ in range(n_words))
    raw["steps"][0]["reasoning"] = text[: len(text) // 3]
    raw["steps"][1]["observation"] = text
    return json.dumps(raw, ensure_ascii=False)


def worker(path: str) -> None:
    """Label one file; print its size and the labeling's CPU seconds as JSON."""
    from interp.data.trajectory import load_trajectories
    from interp.externalization.labeler import label_gaps

    trajs = load_trajectories(path)
    start = time.process_time()
    rows = label_gaps(trajs)
    print(json.dumps({"bytes": Path(path).stat().st_size, "cpu_s": time.process_time() - start,
                      "boundaries": len(rows)}))


def main() -> None:
    """Run every size in a subprocess and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,5,10,50", help="line sizes in MB")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (float(s) for s in args.sizes.split(",")):
            path = Path(tmp) / f"line_{mb:g}.jsonl"
            path.write_text(make_line(mb) + "\n")
            out = subprocess.run([sys.executable, __file__, "--worker", str(path)], capture_output=True, text=True,
                                 check=True, cwd=Path(__file__).parent)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            path.unlink()
    base = rows[0]["cpu_s"] / (rows[0]["bytes"] / 1e6)
    print("| line MB | labeling CPU s | s per MB | vs smallest (1.0 = linear) |")
    print("|---|---|---|---|")
    for row in rows:
        per_mb = row["cpu_s"] / (row["bytes"] / 1e6)
        print(f"| {row['bytes'] / 1e6:.1f} | {row['cpu_s']:.1f} | {per_mb:.2f} | {per_mb / base:.2f} |")


if __name__ == "__main__":
    main()
