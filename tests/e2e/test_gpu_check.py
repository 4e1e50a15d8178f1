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
import torch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~20-40 s on a loaded 2-core machine

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ["loader", "bridge_hooks", "extraction_shared", "kl_repair_fast", "harm_prefix", "kl_repair_all_sites",
          "attribution_all_sites", "long_context@256", "long_context@512"]


def test_gpu_check_cpu_smoke_passes_every_check(tmp_path):
    out = tmp_path / "smoke.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--cpu-smoke", "--out", str(out),
                           "--workdir", str(tmp_path / "work"), "--keep"], capture_output=True, text=True, env=env, timeout=300)
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
    # Not the script's word: the test reads the kept checkpoint itself and checks what the loader made of it.
    _check_checkpoint_independently(tmp_path / "work" / "checkpoint")


def _check_checkpoint_independently(ckpt: Path) -> None:
    """The loaded sensor's logits equal a plain transformers model built straight from the checkpoint's shards."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from interp.sensor.models import load_model

    tensors: dict = {}
    for shard in sorted(ckpt.glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    text = {("model." + k.removeprefix("model.language_model.")): v for k, v in tensors.items()
            if k.startswith("model.language_model.")}
    text.update({k: v for k, v in tensors.items() if k.startswith("lm_head.")})
    config = AutoConfig.from_pretrained(ckpt).text_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float64).eval()
    missing, unexpected = plain.load_state_dict({k: v.double() for k, v in text.items()}, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)  # lm_head may be tied
    sensor = load_model("qwen3.5-9b", model_path=ckpt, dtype="fp64")
    assert sensor.full_attention_layers == [i for i, t in enumerate(config.layer_types) if t == "full_attention"]
    ids = torch.randint(0, config.vocab_size, (1, 48), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        want = plain(input_ids=ids, use_cache=False).logits[:, -1]
    got = sensor.run_with_hooks(ids)[:, -1]
    # transformers' torch Gated-DeltaNet fallback runs its recurrence in float32: float32 round-off, not fp64's.
    assert float((got - want).norm() / want.norm()) <= 100 * torch.finfo(torch.float32).eps
    assert float((got - plain(input_ids=ids.flip(1), use_cache=False).logits[:, -1]).norm() / want.norm()) > 1e-2
