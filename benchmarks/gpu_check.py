"""GPU check of the Qwen3.5-9B path, end to end through ``load_model``, in one 10-minute session with no hub access.

It writes a random-init checkpoint at the full 9B shape (``Qwen3_5TextConfig()``:
32 layers, 3 Gated-DeltaNet + 1 full attention, d_model 4096, vocab 248320)
in the hub's multimodal layout: ``config.json`` with ``text_config``, text
weights under ``model.language_model.*``, plus ``model.visual.*`` and
``mtp.*`` tensors the loader must ignore, sharded safetensors with an index,
and the tiny-qwen3.5 tokenizer and chat template (its ids are < 716, inside
the 9B vocabulary). The model is initialised on the GPU (HF's own init, bf16)
and written shard by shard (~19 GB). Then, as a user would
(``load_model("qwen3.5-9b", model_path=DIR, device="cuda")``, dtype auto =
bf16), it runs the checks below and writes one JSON of PASS / FAIL / NO-DATA
and numbers.

=========================  =====================================================  ==========================================
check                      what is compared                                       PASS when
=========================  =====================================================  ==========================================
``loader``                 every text tensor's sum after load vs as written;       all equal (rel 1e-6), layers as config,
                           full-attention layers; no visual/mtp parameter;         host anon RSS growth < 0.25 x weights
                           host memory added while loading (anonymous RSS)         (GPU only: on CPU the host is the device)
``bridge_hooks``           TransformerLens bridge (eager) vs plain hooks (sdpa):  max|a-b| / max|b| <= ACT_TOL(dtype)
                           resid_pre of every layer and the final logits
``extraction_shared``      ``extract_trajectory`` prefix-shared vs one forward     same (ACT_TOL) on features and attention
                           per boundary (all layers, attention rows)
``kl_repair_fast``         KL Repair fast vs reference, all sites, 2 short         max |dRepair| <= 1e-3 over boundaries with
                           boundaries                                              d > d_threshold (NO-DATA when none has)
``harm_prefix``            set harms with prefix reuse vs from scratch            max |dharm| <= max(1e-4, d_threshold x
                                                                                   sqrt(target tokens))
``long_context@N``         ``run_plan`` keeping resid_pre of all layers + the     GPU: time <= 1.3x and peak memory <= 1.2x
                           attention rows at every full-attention layer + the     of the plain forward; CPU: outputs present
                           boundary log-probs, vs a plain forward, at N tokens
``kl_repair_all_sites``    fast KL Repair of all sites (32 resid_pre + final) at  GPU: time <= 3x of one plain forward;
                           one ~8K-token boundary vs one plain forward             CPU: it ran
``attribution_all_sites``  first-order map (every layer x every position) at the   it ran, the map is finite and the boundary
                           same boundary, checkpointed backward, vs the fast       token's estimates rank like exact KL
                           KL Repair's time (recorded: time ratio, peak memory)    Repair's (Spearman > 0; NO-DATA if constant)
=========================  =====================================================  ==========================================

Checks run in this order, long contexts last and ascending; one that raises
(OOM, a bug) is recorded as FAIL with its error and the rest still run; the
JSON is rewritten after every check, and sizes not started by ``--budget-s``
are skipped (NO-DATA), so a session that runs out of time keeps its numbers.

``ACT_TOL`` = max(2e-5, 4 x eps(dtype)) relative to the largest magnitude
(fp32 2e-5 as in tests/extraction/test_hook_parity.py; bf16 3.1e-2).
``d_threshold`` is ``patching.kl_repair.d_threshold`` (the dtype-noise rule; 2.0
nats for bf16 at width 4096, so random-init boundaries, d ~ 1e-3 to 0.2, are
all excluded there and the Repair comparison reports NO-DATA with the raw
KL differences). The plain forward is ``model.model(ids, use_cache=False)``
plus the unembedding of the last token (sdpa, no hooks). Peak memory is
``torch.cuda.max_memory_allocated`` (weights included).

``--cpu-smoke`` runs the same code (writer, loader, every check) at tiny
width (64, 8 layers) on CPU with short contexts; timing and memory targets
are recorded but not applied (the test suite runs it:
tests/e2e/test_gpu_check.py). It loads in float64, like the parity tests of
the tiny hybrid, so that fast vs reference measures the algorithm: in
float32 at width 64 the two KL Repair paths differ by ~5e-7 nats in KL
(``--cpu-smoke --dtype fp32`` shows it), 13x the noise the d_threshold rule
assumes there, so boundaries just above its 3.8e-6-nat threshold differ by
up to ~4e-3 in Repair (benchmarks/RESULTS.md). Kernels: the JSON and the log name the
Gated-DeltaNet and conv kernels the loaded model calls
(``interp.sensor.kernels.binding``); with the torch fallback 42K tokens is
slow, so install the ``gpu`` extra first (docs/guides/gpu.md).

Run (GPU): python benchmarks/gpu_check.py --out gpu_check.json [--sizes 8192,32768,42000] [--workdir DIR]
CPU smoke: python benchmarks/gpu_check.py --cpu-smoke --out smoke.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from _util import PeakRSS, anon_rss_bytes  # first: puts the checkout on sys.path
from interp.data.trajectory import Trajectory
from interp.data.render import render
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.sensor.forward import Plan, run_plan
from interp.sensor.hooks import hook_name, hooks
from interp.sensor.kernels.binding import kernels_line
from interp.sensor.models import SPECS, load_model
from patching.attribution import agreement, linear_kl_repair
from patching.harm import _target, candidate_sets, set_harms
from patching.config import PatchConfig
from patching.kl_repair import boundary_renders, d_threshold, default_sites, kl_repair_trajectory, threshold_for

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

GiB = 2**30
TARGETS = {"extract_time_ratio": 1.3, "extract_memory_ratio": 1.2, "kl_all_sites_time_ratio": 3.0,
           "repair_abs_diff": 1e-3, "host_copy_fraction": 0.25}
SHORT_TOKENS = 256  # full render of the short trajectory of the bridge, extraction, KL Repair and harm checks
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def act_tol(dtype: torch.dtype) -> float:
    """Relative (to the largest magnitude) tolerance on activations and logits for this dtype."""
    return max(2e-5, 4 * torch.finfo(dtype).eps)


def text_config(smoke: bool) -> Any:
    """The 9B text config (``Qwen3_5TextConfig()``), or the same family at width 64 / 8 layers for --cpu-smoke."""
    from transformers import Qwen3_5TextConfig

    if smoke:
        cfg = Qwen3_5TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                                linear_key_head_dim=16, linear_value_head_dim=16, vocab_size=1024)
    else:
        cfg = Qwen3_5TextConfig()
    cfg.max_position_embeddings = max(cfg.max_position_embeddings, 262_144)  # the released 9B's context
    return cfg


def _ignored_tensors(cfg: Any, smoke: bool) -> dict[str, tuple[int, ...]]:
    """Shapes of the vision tower and multi-token-prediction tensors of the hub layout (the loader drops them)."""
    d, w = cfg.hidden_size, 64 if smoke else 1152
    return {"model.visual.patch_embed.proj.weight": (w, 3, 2, 16, 16), "model.visual.blocks.0.attn.qkv.weight": (3 * w, w),
            "model.visual.merger.linear_fc2.weight": (d, 4 * w), "mtp.fc.weight": (d, 2 * d),
            "mtp.layers.0.mlp.gate_proj.weight": (cfg.intermediate_size, d), "mtp.norm.weight": (d,)}


def write_checkpoint(out: Path, cfg: Any, dtype: torch.dtype, device: torch.device, smoke: bool,
                     shard_bytes: int) -> dict[str, float]:
    """Write a random-init checkpoint in the hub's multimodal layout; returns each text tensor's sum by its loaded name.

    The model is initialised on ``device`` by HF's own init and written shard
    by shard (one shard on the host at a time).
    """
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, Qwen3_5Config

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    tensors = {("model.language_model." + k.removeprefix("model.")) if k.startswith("model.") else k: v
               for k, v in model.state_dict().items()}
    sums = {k: float(v.double().sum()) for k, v in model.state_dict().items()}
    gen = torch.Generator(device=device).manual_seed(1)
    for name, shape in _ignored_tensors(cfg, smoke).items():
        tensors[name] = torch.randn(shape, generator=gen, device=device).to(dtype)
    shards: list[list[str]] = [[]]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    weight_map = {}
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: tensors[n].detach().to("cpu").contiguous() for n in names}, str(out / file),
                  metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    full = Qwen3_5Config(text_config=cfg.to_dict())
    full.architectures = ["Qwen3_5ForConditionalGeneration"]
    full.save_pretrained(out)
    tiny = SPECS["tiny-qwen3.5"].resolve() or SPECS["tiny-qwen3.5"].fetch()
    for name in TOKENIZER_FILES:
        if (tiny / name).exists():
            shutil.copy(tiny / name, out / name)
    del model, tensors
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return sums


def _check(name: str, ok: bool | None, target: str, **numbers: Any) -> dict[str, Any]:
    """One check record: status PASS / FAIL, or NO-DATA when ``ok`` is None."""
    return {"name": name, "status": "NO-DATA" if ok is None else ("PASS" if ok else "FAIL"), "target": target,
            **numbers}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, float, float | None]:
    """``(result, seconds, peak GiB or None)`` of one call; the peak is CUDA's, weights included."""
    _sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    result = fn()
    _sync(device)
    elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / GiB if device.type == "cuda" else None
    return result, elapsed, peak


def check_loader(sensor: Any, cfg: Any, sums: dict[str, float], load_s: float, host_gib: float,
                 enforce: bool) -> dict[str, Any]:
    """Loaded tensors equal the written ones; layers, full-attention layers and host memory as expected."""
    params = dict(sensor.hf_model.named_parameters(remove_duplicate=False))
    buffers = dict(sensor.hf_model.named_buffers())
    loaded = {**buffers, **params}
    missing = sorted(set(sums) - set(loaded))
    worst = max((abs(float(loaded[k].double().sum()) - s) / max(abs(s), 1e-12) for k, s in sums.items()
                 if k in loaded), default=float("inf"))
    foreign = sorted(k for k in loaded if "visual" in k or k.startswith("mtp"))
    expected_full = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    weights_gib = sum(p.numel() * p.element_size() for p in params.values()) / GiB
    devices = sorted({t.device.type for t in loaded.values()})
    ok = (not missing and worst <= 1e-6 and not foreign and sensor.n_layers == cfg.num_hidden_layers
          and sensor.full_attention_layers == expected_full and devices == [sensor.device.type]
          and (not enforce or host_gib < TARGETS["host_copy_fraction"] * weights_gib))
    return _check("loader", ok, "tensors as written (rel 1e-6), no visual/mtp parameter, layers as config, on the "
                  f"device, host anon RSS growth < {TARGETS['host_copy_fraction']} x weights (GPU only)",
                  load_s=load_s, weights_gib=weights_gib, host_anon_rss_growth_gib=host_gib,
                  n_tensors_checked=len(sums), missing=missing[:5], max_rel_sum_diff=worst, foreign=foreign[:5],
                  n_layers=sensor.n_layers, full_attention_layers=sensor.full_attention_layers, devices=devices)


def check_bridge(sensor: Any, ids: list[int]) -> dict[str, Any]:
    """resid_pre of every layer and the final logits: the bridge's run_with_cache vs hooks on the plain model."""
    names = [hook_name("resid_pre", layer) for layer in range(sensor.n_layers)]
    ids_t = torch.tensor([ids], device=sensor.device)
    plain: dict[str, torch.Tensor] = {}

    def take(x: torch.Tensor, name: str) -> None:
        plain[name] = x[0].float()

    with torch.inference_mode():
        with hooks(sensor.hf_model, [(n, take) for n in names]):
            logits = sensor.hf_model(input_ids=ids_t, use_cache=False).logits[0].float()
        b_logits, cache = sensor.bridge.run_with_cache(ids_t, names_filter=lambda n: n in set(names))
    errors = {n: float((cache[n][0].float() - plain[n]).abs().max() / plain[n].abs().max()) for n in names}
    logit_err = float((b_logits[0].float() - logits).abs().max() / logits.abs().max())
    tol = act_tol(sensor.dtype)
    worst = max(errors.values())
    return _check("bridge_hooks", worst <= tol and logit_err <= tol, f"max|a-b|/max|b| <= {tol:.3g}",
                  tokens=len(ids), max_resid_rel_err=worst, worst_layer=max(errors, key=errors.get),
                  logits_rel_err=logit_err)


def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def check_extraction(sensor: Any, traj: Trajectory) -> dict[str, Any]:
    """Prefix-shared extraction (one forward for the boundaries that share a prefix) vs one forward per boundary."""
    cfg = ExtractConfig(layers=list(range(sensor.n_layers)), poolings=["last", "mean_latest_step"],
                        attention_layers=sensor.full_attention_layers)
    device = sensor.device
    shared, t_shared, _ = _timed(device, lambda: extract_trajectory(sensor, traj, "full", cfg))
    own, t_own, _ = _timed(device, lambda: extract_trajectory(
        sensor, traj, "full", dataclasses.replace(cfg, share_prefix=False)))
    feat = max(_max_rel(a.features[k], b.features[k]) for a, b in zip(shared, own) for k in b.features)
    attn = max((_max_rel(a.attention[layer]["per_segment"], b.attention[layer]["per_segment"])
                for a, b in zip(shared, own) for layer in b.attention), default=0.0)
    tol = act_tol(sensor.dtype)
    return _check("extraction_shared", feat <= tol and attn <= tol, f"max|a-b|/max|b| <= {tol:.3g}",
                  boundaries=len(own), features_rel_err=feat, attention_rel_err=attn, shared_s=t_shared,
                  per_boundary_s=t_own, forwards=[a.forward for a in shared])


def check_kl_repair(sensor: Any, traj: Trajectory, boundaries: list[int]) -> dict[str, Any]:
    """Fast KL Repair vs the reference (bridge, one forward per site) at short boundaries, all default sites."""
    sites = default_sites(sensor.n_layers)
    threshold, rule = threshold_for(sensor.describe(), RULE.min_kl)
    device = sensor.device
    fast, t_fast, _ = _timed(device, lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites,
                                                                  boundaries=boundaries, rule=RULE))
    ref, t_ref, _ = _timed(device, lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites,
                                                                boundaries=boundaries, method="reference", rule=RULE))
    kept = [(f, r) for f, r in zip(fast, ref) if not f.excluded and not r.excluded]
    d_repair = max((abs(x - y) for f, r in kept for x, y in zip(f.repair, r.repair)), default=None)
    d_kl = max(abs(x - y) for f, r in zip(fast, ref) for x, y in zip([f.d] + f.kl_patch, [r.d] + r.kl_patch))
    ok = None if d_repair is None else d_repair <= TARGETS["repair_abs_diff"]
    return _check("kl_repair_fast", ok, f"max |dRepair| <= {TARGETS['repair_abs_diff']:g} on boundaries with "
                  f"d > d_threshold ({threshold:.3g} nats)", sites=len(sites), boundaries=boundaries,
                  d=[f.d for f in fast], n_kept=len(kept), max_abs_repair_diff=d_repair, max_abs_kl_diff_nats=d_kl,
                  d_threshold=threshold, d_threshold_rule=rule, fast_s=t_fast, reference_s=t_ref)


def check_harm(sensor: Any, traj: Trajectory, b: int) -> dict[str, Any]:
    """Set harms with the full run's prefix reused vs every deleted render from scratch."""
    sets = candidate_sets(traj, b, max_k=2, budget=4, units=("reasoning",))
    device = sensor.device
    (nll, reuse), t_reuse, _ = _timed(device, lambda: set_harms(sensor, traj, b, sets))
    (nll2, scratch), t_scratch, _ = _timed(device, lambda: set_harms(sensor, traj, b, sets, share_prefix=False))
    diff = max([abs(nll - nll2)] + [abs(x.harm - y.harm) for x, y in zip(reuse, scratch)])
    _, y0, y1 = _target(traj, b, (), sensor.tokenizer)  # the recorded next output whose NLL is scored
    y_tokens = y1 - y0
    tol = max(1e-4, d_threshold(sensor.dtype, sensor.d_model, RULE.min_kl) * math.sqrt(y_tokens))
    return _check("harm_prefix", diff <= tol, f"max |dharm| <= {tol:.3g} nats", sets=len(sets), target_tokens=y_tokens,
                  max_abs_diff_nats=diff, reuse_s=t_reuse, scratch_s=t_scratch)


def _plain_forward(sensor: Any, ids: torch.Tensor) -> torch.Tensor:
    """The baseline: the base model over all tokens (sdpa, no cache, no hooks), then the last token's logits."""
    with torch.inference_mode():
        hidden = sensor.hf_model.model(input_ids=ids, use_cache=False).last_hidden_state[:, -1]
        return sensor.hf_model.lm_head(hidden).float()


def _extraction_plan(sensor: Any, n: int) -> Plan:
    """One extraction sample: resid_pre of every layer at the last token, its attention rows, its log-probs."""
    return Plan(pooled={layer: ("resid_pre", layer, [n - 1]) for layer in range(sensor.n_layers)},
                rows={(layer, n - 1): "boundary" for layer in sensor.full_attention_layers}, logprobs=[n - 1])


def check_long_context(sensor: Any, n: int, enforce: bool) -> dict[str, Any]:
    """Extraction (all layers + attention rows) vs a plain forward at ``n`` random tokens: time and peak memory."""
    device = sensor.device
    ids = torch.randint(0, sensor.hf_model.config.vocab_size, (1, n),
                        generator=torch.Generator().manual_seed(n)).to(device)
    name = f"long_context@{n}"
    target = (f"time <= {TARGETS['extract_time_ratio']}x, peak <= {TARGETS['extract_memory_ratio']}x of the plain "
              "forward" + ("" if enforce else " (not applied on CPU)"))
    try:
        _, t_plain, m_plain = _timed(device, lambda: _plain_forward(sensor, ids))
        out, t_ours, m_ours = _timed(device, lambda: run_plan(sensor, ids[0], _extraction_plan(sensor, n)))
    except torch.cuda.OutOfMemoryError as exc:
        return _check(name, False, target, tokens=n, error=str(exc).splitlines()[0])
    rows = out.rows.get("boundary", {})
    complete = (len(out.sums) == sensor.n_layers and sorted(rows) == sensor.full_attention_layers
                and all(r.shape[-1] == n for r in rows.values()) and n - 1 in out.logprobs)
    t_ratio = t_ours / t_plain
    m_ratio = m_ours / m_plain if m_plain else None
    ok = complete and (not enforce or (t_ratio <= TARGETS["extract_time_ratio"]
                                       and m_ratio is not None and m_ratio <= TARGETS["extract_memory_ratio"]))
    return _check(name, ok, target, tokens=n, plain_s=t_plain, extract_s=t_ours, time_ratio=t_ratio,
                  plain_peak_gib=m_plain, extract_peak_gib=m_ours, memory_ratio=m_ratio, outputs_complete=complete,
                  row_shape=list(next(iter(rows.values())).shape) if rows else None)


WORDS = ("check", "the", "file", "then", "run", "tests", "again", "because", "value", "was", "wrong", "so", "fix",
         "parser", "and", "look", "at", "output", "carefully", "before", "next", "step")


def long_trajectory(tokenizer: Any, n_tokens: int, n_steps: int = 4) -> Trajectory:
    """A synthetic trajectory whose full render at its last boundary is about ``n_tokens`` tokens (reasoning-heavy)."""
    def make(words: int) -> Trajectory:
        steps = [{"reasoning": " ".join(WORDS[(i * 7 + s) % len(WORDS)] for i in range(words)),
                  "action": {"tool": "shell", "arguments": {"cmd": f"make test-{s}"}}, "observation": f"ok {s}"}
                 for s in range(n_steps)]
        steps[-1]["observation"] = None
        return Trajectory.from_json({"task_id": f"long{n_tokens}", "domain": "code", "system_prompt": "Be careful.",
                                     "task": "Fix the failing test.", "steps": steps})

    words = 64
    for _ in range(3):  # rescale the word count to the measured tokens per word
        n = render(make(words), n_steps, tokenizer).n_tokens
        words = max(8, round(words * n_tokens / n))
    return make(words)


def check_kl_all_sites(sensor: Any, n_tokens: int, enforce: bool) -> dict[str, Any]:
    """Fast KL Repair of every default site at one long boundary vs one plain forward over its full render."""
    traj = long_trajectory(sensor.tokenizer, n_tokens)
    b = traj.n_steps
    full = render(traj, b, sensor.tokenizer)
    ids = torch.tensor([full.input_ids], device=sensor.device)
    sites = default_sites(sensor.n_layers)
    _, t_plain, _ = _timed(sensor.device, lambda: _plain_forward(sensor, ids))
    rows, t_kl, m_kl = _timed(sensor.device, lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites,
                                                                        boundaries=[b], rule=RULE))
    ratio = t_kl / t_plain
    ok = len(rows[0].kl_patch) == len(sites) and (not enforce or ratio <= TARGETS["kl_all_sites_time_ratio"])
    return _check("kl_repair_all_sites", ok, f"time <= {TARGETS['kl_all_sites_time_ratio']}x of one plain forward"
                  + ("" if enforce else " (not applied on CPU)"), sites=len(sites), tokens_full=full.n_tokens,
                  tokens_deleted=rows[0].n_tokens_deleted, plain_s=t_plain, kl_repair_s=t_kl, time_ratio=ratio,
                  kl_repair_peak_gib=m_kl, d=rows[0].d)


def check_attribution(sensor: Any, n_tokens: int) -> dict[str, Any]:
    """The first-order map of every resid_pre at every position of one long boundary (one forward of each render and
    one checkpointed backward) beside fast KL Repair of the boundary token at the same sites."""
    traj = long_trajectory(sensor.tokenizer, n_tokens)
    b = traj.n_steps
    full = render(traj, b, sensor.tokenizer)
    sites = default_sites(sensor.n_layers)
    rows, t_kl, _ = _timed(sensor.device, lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites,
                                                                     boundaries=[b], rule=RULE))
    _, deleted = boundary_renders(sensor, traj, "delete_all_reasoning", [b])
    names = [hook_name(s, layer) for s, layer in sites]
    lin, t_lin, m_lin = _timed(sensor.device, lambda: linear_kl_repair(sensor, full.input_ids,
                                                                      deleted[b].input_ids, names))
    agree = agreement(lin.effect[:, -1].tolist(), [k - rows[0].d for k in rows[0].kl_patch], [*map(str, sites)])
    finite = bool(torch.isfinite(torch.as_tensor(lin.effect)).all())
    ok = None if agree["spearman"] is None else finite and agree["spearman"] > 0
    return _check("attribution_all_sites", ok, "map finite and boundary-token Spearman vs exact > 0",
                  sites=len(sites), positions=int(lin.effect.shape[1]), tokens_full=full.n_tokens,
                  attribution_s=t_lin, kl_repair_s=t_kl, time_ratio=t_lin / t_kl, attribution_peak_gib=m_lin,
                  spearman=agree["spearman"], mae_nats=agree["mae"], d=lin.d)


def _guarded(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one check; an exception (OOM, a bug) is that check's FAIL with the error, and the next check still runs."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one GPU session: record the failure, keep the other numbers
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return _check(name, False, "ran without error", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Write the checkpoint, load it as a user would, run every check; the JSON document (rewritten after each check)."""
    smoke = args.cpu_smoke
    device = torch.device("cpu" if smoke else "cuda")
    cfg = text_config(smoke)
    write_dtype = torch.float32 if smoke else torch.bfloat16
    started = time.perf_counter()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    ckpt = workdir / "checkpoint"
    scratch = ckpt if args.workdir else workdir  # what is removed at the end unless --keep
    report: dict[str, Any] = {"script": "benchmarks/gpu_check.py", "mode": "cpu-smoke" if smoke else "gpu",
                              "device": str(device), "torch": torch.__version__, "targets": TARGETS, "checks": []}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(0)

    def record(check: dict[str, Any]) -> None:
        report["checks"].append(check)
        failed = [c["name"] for c in report["checks"] if c["status"] == "FAIL"]
        report.update(failed=failed, status="FAIL" if failed else "PASS", wall_s=time.perf_counter() - started)
        args.out.write_text(json.dumps(report, indent=2) + "\n")  # a killed run keeps what it measured
        print(f"  {check['name']}: {check['status']}", flush=True)

    try:
        start = time.perf_counter()
        sums = write_checkpoint(ckpt, cfg, write_dtype, device, smoke, shard_bytes=(64 << 10) if smoke else (2 << 30))
        report["checkpoint_write_s"] = time.perf_counter() - start
        print(f"checkpoint: {ckpt} written in {report['checkpoint_write_s']:.1f} s", flush=True)
        with PeakRSS(reader=anon_rss_bytes) as host:
            start = time.perf_counter()
            sensor = load_model("qwen3.5-9b", model_path=ckpt, device=device, dtype=args.dtype)
            load_s = time.perf_counter() - start
        report.update(dtype=str(sensor.dtype).removeprefix("torch."), model=sensor.describe(), kernels=sensor.kernels,
                      kernels_line=kernels_line(sensor.kernels), act_tol=act_tol(sensor.dtype))
        print(f"loaded in {load_s:.1f} s: {sensor.device}, {report['dtype']}; kernels: {report['kernels_line']}",
              flush=True)
        short = long_trajectory(sensor.tokenizer, SHORT_TOKENS, n_steps=3)  # short: deletion effects d are large
        ids = render(short, short.n_steps, sensor.tokenizer).input_ids
        host_gib = (host.peak - host.base) / GiB
        record(_guarded("loader", lambda: check_loader(sensor, cfg, sums, load_s, host_gib, enforce=not smoke)))
        record(_guarded("bridge_hooks", lambda: check_bridge(sensor, ids)))
        record(_guarded("extraction_shared", lambda: check_extraction(sensor, short)))
        record(_guarded("kl_repair_fast", lambda: check_kl_repair(sensor, short, [1, 2, 3])))
        record(_guarded("harm_prefix", lambda: check_harm(sensor, short, 1)))
        warm = torch.randint(0, 100, (1, min(1024, args.sizes[0])), device=device)
        _plain_forward(sensor, warm)  # kernel warm-up (Triton autotuning, cuBLAS handles) before timing
        run_plan(sensor, warm[0], _extraction_plan(sensor, warm.shape[1]))
        record(_guarded("kl_repair_all_sites", lambda: check_kl_all_sites(sensor, args.kl_tokens, enforce=not smoke)))
        record(_guarded("attribution_all_sites", lambda: check_attribution(sensor, args.kl_tokens)))
        for n in args.sizes:  # longest last: a run that runs out of time loses the least
            if time.perf_counter() - started > args.budget_s:
                record(_check(f"long_context@{n}", None, f"skipped: past --budget-s {args.budget_s:g}"))
                continue
            record(_guarded(f"long_context@{n}", lambda n=n: check_long_context(sensor, n, enforce=not smoke)))
    except Exception as exc:  # the writer or the loader failed: nothing else can run
        record(_check("setup", False, "checkpoint written and loaded",
                      error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help="context lengths of the long-context checks "
                        "(default 8192,32768,42000; --cpu-smoke 256,512)")
    parser.add_argument("--kl-tokens", type=int, default=None, help="render length of the all-sites KL Repair "
                        "boundary (default 8192; --cpu-smoke 512)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON report")
    parser.add_argument("--workdir", default=None, help="where the checkpoint is written (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the written checkpoint")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny width on CPU: the same code path, no targets")
    parser.add_argument("--dtype", default=None, help="load dtype (default: auto = bf16 on CUDA; --cpu-smoke fp64)")
    parser.add_argument("--precision", type=int, default=0, metavar="N",
                        help="also run benchmarks/precision.py on the N shortest demo trajectories (every analysis "
                             "in bf16 and fp16 vs fp32, SmolLM2 and the 4096-wide stand-in) on this device; "
                             "its table goes to OUT with the suffix .precision.json")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="long-context sizes not started by then are skipped (NO-DATA); default 480 s")
    args = parser.parse_args()
    args.sizes = [int(s) for s in (args.sizes or ("256,512" if args.cpu_smoke else "8192,32768,42000")).split(",")]
    args.kl_tokens = args.kl_tokens or (512 if args.cpu_smoke else 8192)
    args.dtype = args.dtype or ("fp64" if args.cpu_smoke else "auto")
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_check.py: no CUDA device here (use --cpu-smoke for the same code path at tiny width on CPU)")
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = run(args)
    if args.precision:
        import subprocess

        subprocess.run([sys.executable, str(Path(__file__).with_name("precision.py")), "--device",
                        "cpu" if args.cpu_smoke else "cuda", "--trajectories", str(args.precision),
                        "--models", "tiny-qwen3.5" if args.cpu_smoke else "smollm2-135m,wide",
                        "--out", str(args.out.with_suffix(".precision.json"))], check=False)
    print(f"{report['status']}: {len(report['checks']) - len(report['failed'])}/{len(report['checks'])} checks pass "
          f"or have no data ({', '.join(report['failed']) or 'none failed'}); {report['wall_s']:.0f} s; wrote {args.out}")
    return 0 if report["status"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
