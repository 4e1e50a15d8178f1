"""``benchmarks/gpu_check.py --cpu-smoke``: the GPU check's whole code path at tiny width on CPU, every check PASS.

The smoke writes the hub-layout checkpoint (text under
``model.language_model.*``, visual and mtp tensors to ignore, sharded), loads
it with ``load_model("qwen3.5-9b", model_path=...)`` and runs every check of
the GPU run; timing and memory targets are recorded there but not applied.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~20-40 s on a loaded 2-core machine

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ["loader", "bridge_hooks", "extraction_shared", "kl_repair_fast", "harm_prefix", "kl_repair_all_sites",
          "long_context@256", "long_context@512"]


def test_gpu_check_cpu_smoke_passes_every_check(tmp_path):
    out = tmp_path / "smoke.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--cpu-smoke", "--out", str(out),
                           "--workdir", str(tmp_path / "work")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu-smoke" and report["status"] == "PASS"
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert {c["name"]: c["status"] for c in report["checks"]} == dict.fromkeys(CHECKS, "PASS")
    loader = report["checks"][0]
    assert loader["n_tensors_checked"] > 0 and loader["missing"] == [] and loader["foreign"] == []
    assert loader["full_attention_layers"] == [3, 7]
    assert report["kernels_line"] == "Gated-DeltaNet: interp-fp64; conv: torch"  # the fp64 smoke, no fla here
    assert report["checks"][3]["n_kept"] > 0  # the Repair comparison had boundaries to compare
    assert not (tmp_path / "work" / "checkpoint").exists()  # removed unless --keep
