"""GPU scale check: boundary extraction on a Qwen3.5-9B-shaped model at 8K, 32K and 42K tokens (H200 class).

Not run in CI or on CPU machines. Builds a *random-init* Qwen3.5 with
``Qwen3_5TextConfig()`` defaults (the 9B shape: 32 layers, 3 Gated-DeltaNet +
1 full-attention, d=4096, vocab 248320) directly on the GPU in bf16 (no
weights download, no tokenizer: random token ids), wraps it in the few fields
``interp.sensor.forward.run_plan`` reads (``hf_model``, ``device``; rows need the
full-attention layer list), and for each size measures:

- ``plain``: ``model.model(input_ids, use_cache=False)``, the base model, sdpa,
  no hooks, no unembedding;
- ``ours``: ``run_plan`` keeping the last token's ``resid_pre`` at all 32
  layers (``last`` pooling), the boundary attention row at the 8
  full-attention layers and the boundary log-probs: one extraction sample.

Reported per size: wall time (``torch.cuda.synchronize`` around one call, after
a 1K-token warm-up of the same method), tokens/s, ``torch.cuda.max_memory_allocated``
(and its excess over the weights), ratios ours / plain. A size that runs out
of memory is reported as OOM and the next size still runs.

Kernels: without ``flash-linear-attention`` (and ``causal-conv1d``) HF falls
back to its torch Gated-DeltaNet implementation (a Python loop over 64-token
chunks: slow at 42K). The script prints which are available; pick sizes with
``--sizes``.

Run (GPU): python benchmarks/gpu_scale.py [--sizes 8192,32768,42000] [--out results.json]
Plumbing check on CPU with a tiny config: python benchmarks/gpu_scale.py --cpu-smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, installed or not
from interp.sensor.forward import Plan, run_plan  # noqa: E402

GiB = 2**30


@dataclass
class BareSensor:
    """The fields of :class:`interp.sensor.models.Sensor` that ``run_plan`` uses (no bridge, no tokenizer)."""

    hf_model: Any
    device: torch.device
    layer_types: list[str] = field(default_factory=list)

    @property
    def full_attention_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def n_layers(self) -> int:
        return len(self.layer_types)


def kernel_report() -> dict[str, Any]:
    """Which optional kernels HF's Qwen3.5 can use here."""
    from transformers.utils import import_utils as iu

    info: dict[str, Any] = {"torch": torch.__version__}
    import transformers

    info["transformers"] = transformers.__version__
    for name in ("is_flash_linear_attention_available", "is_causal_conv1d_available", "is_flash_attn_2_available"):
        fn = getattr(iu, name, None)
        try:
            info[name.removeprefix("is_").removesuffix("_available")] = bool(fn()) if fn else None
        except Exception as exc:  # an installed but broken kernel package
            info[name.removeprefix("is_").removesuffix("_available")] = f"error: {exc}"
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GiB, 1)
    return info


def build_model(smoke: bool, dtype: torch.dtype, device: torch.device, max_tokens: int) -> BareSensor:
    """Random-init Qwen3.5 text model (9B shape, or a tiny one for --cpu-smoke) built on ``device``."""
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    if smoke:
        config = Qwen3_5TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                                   linear_value_head_dim=16, vocab_size=1024)
    else:
        config = Qwen3_5TextConfig()  # the 9B shape
    # The released checkpoint's rotary table is not a hard limit; mirror its long-context setting so 42K is legal.
    config.max_position_embeddings = max(config.max_position_embeddings, max_tokens, 262_144)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.eval().requires_grad_(False)
    return BareSensor(model, device, list(config.layer_types))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _call(sensor: BareSensor, method: str, ids: torch.Tensor):
    n = ids.shape[1]
    if method == "plain":
        with torch.inference_mode():
            return sensor.hf_model.model(input_ids=ids, use_cache=False).last_hidden_state[:, -1].float()
    plan = Plan(pooled={(l, "last"): ("resid_pre", l, [n - 1]) for l in range(sensor.n_layers)},
                rows={(l, n - 1): "boundary" for l in sensor.full_attention_layers}, logprobs=[n - 1])
    return run_plan(sensor, ids[0], plan)


def measure(sensor: BareSensor, method: str, n: int, vocab: int, warmup: int) -> dict[str, Any]:
    """One timed call at n tokens (after a warm-up call); OOM is caught and reported."""
    device = sensor.device
    g = torch.Generator(device="cpu").manual_seed(n)
    ids = torch.randint(0, vocab, (1, n), generator=g).to(device)
    try:
        _call(sensor, method, ids[:, :warmup])
        _sync(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        out = _call(sensor, method, ids)
        _sync(device)
        elapsed = time.perf_counter() - start
        result = {"tokens": n, "method": method, "status": "ok", "time_s": elapsed, "tokens_per_s": n / elapsed}
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
            result.update(peak_gib=peak / GiB, peak_over_weights_gib=(peak - before) / GiB)
        if method == "ours":
            result["rows"] = {str(l): list(r.shape) for l, r in out.rows["boundary"].items()}
            result["n_features"] = len(out.sums)
        del out
    except torch.cuda.OutOfMemoryError as exc:
        result = {"tokens": n, "method": method, "status": "OOM", "error": str(exc).splitlines()[0]}
    except RuntimeError as exc:
        if "out of memory" not in str(exc).lower():
            raise
        result = {"tokens": n, "method": method, "status": "OOM", "error": str(exc).splitlines()[0]}
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def table(results: list[dict[str, Any]]) -> str:
    """Markdown table with ours / plain ratios per size."""
    by = {(r["tokens"], r["method"]): r for r in results}
    lines = ["| tokens | method | time s | tokens/s | peak GiB | peak over weights GiB | time / plain "
             "| memory / plain |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"| {r['tokens']} | {r['method']} | {r['status']} | | | | | |")
            continue
        plain = by.get((r["tokens"], "plain"), {})
        t_ratio = f"{r['time_s'] / plain['time_s']:.2f}" if plain.get("status") == "ok" else ""
        m_ratio = (f"{r['peak_over_weights_gib'] / plain['peak_over_weights_gib']:.2f}"
                   if plain.get("status") == "ok" and "peak_gib" in r and plain["peak_over_weights_gib"] > 0 else "")
        peak = f"{r['peak_gib']:.1f}" if "peak_gib" in r else "n/a"
        over = f"{r['peak_over_weights_gib']:.2f}" if "peak_gib" in r else "n/a"
        lines.append(f"| {r['tokens']} | {r['method']} | {r['time_s']:.2f} | {r['tokens_per_s']:,.0f} | {peak} | "
                     f"{over} | {t_ratio} | {m_ratio} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8192,32768,42000", help="comma list of context lengths")
    parser.add_argument("--methods", default="plain,ours")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--warmup", type=int, default=1024, help="tokens of the warm-up call before each timing")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny config on CPU: checks the plumbing only")
    args = parser.parse_args()

    sizes = [int(s) for s in args.sizes.split(",")]
    if args.cpu_smoke:
        device, dtype = torch.device("cpu"), torch.float32
        sizes = [s for s in sizes if s <= 2048] or [512, 1024]
        args.warmup = min(args.warmup, 128)
    else:
        if not torch.cuda.is_available():
            print("gpu_scale.py: no CUDA device here; this benchmark needs an H200-class GPU "
                  "(use --cpu-smoke to check the plumbing on CPU). Nothing was run.")
            return 0
        device = torch.device("cuda")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]

    info = kernel_report()
    print("# gpu_scale: random-init Qwen3.5 " + ("(tiny smoke config, CPU)" if args.cpu_smoke else "9B shape")
          + f", {args.dtype if not args.cpu_smoke else 'fp32'}, sdpa")
    print("kernels: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    if info.get("flash_linear_attention") is not True:
        print("note: flash-linear-attention is not available: Gated-DeltaNet runs HF's torch fallback "
              "(Python loop over 64-token chunks), slow at 42K; choose --sizes accordingly")
    start = time.perf_counter()
    sensor = build_model(args.cpu_smoke, dtype, device, max(sizes))
    weights_gib = sum(p.numel() * p.element_size() for p in sensor.hf_model.parameters()) / GiB
    print(f"model built in {time.perf_counter() - start:.1f} s: {sensor.n_layers} layers, full attention at "
          f"{sensor.full_attention_layers}, weights {weights_gib:.1f} GiB", flush=True)

    results = []
    for n in sizes:
        for method in args.methods.split(","):
            r = measure(sensor, method, n, sensor.hf_model.config.vocab_size, min(args.warmup, n))
            results.append(r)
            shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "rows"}
            print(f"  {shown}", flush=True)
    print()
    print(table(results))
    report = {"model": "random-init Qwen3_5TextConfig()" if not args.cpu_smoke else "tiny smoke config",
              "dtype": str(dtype).removeprefix("torch."), "device": str(device), "kernels": info,
              "weights_gib": weights_gib, "layers": sensor.n_layers,
              "full_attention_layers": sensor.full_attention_layers, "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
