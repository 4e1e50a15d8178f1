"""KL Repair per layer: how much of the deletion's effect one layer's boundary residual restores.

For a boundary b of a trajectory:

- ``P_full``: next-token distribution at the boundary token, full history;
- ``P_del``: the same under a deletion condition (any history condition);
- ``P_patch,s``: the deleted run with the activation at site s (e.g. the
  residual stream entering layer l) at the boundary position(s) replaced by
  the full run's;
- ``d = KL(P_full || P_del)`` and ``Repair(s) = 1 - KL(P_full || P_patch,s) / d``
  for samples whose d is clearly above their own measured noise (below;
  others are excluded, counted and listed);
  ``top1(s)`` = argmax P_patch,s == argmax P_full.

Per site three summaries over the kept samples: the mean Repair (with a
task-bootstrap CI), the median Repair, and the ratio of sums
``1 - sum KL(P_full || P_patch,s) / sum d``, which weights each boundary by its
deletion effect d (a mean of ratios is dominated by boundaries with tiny d,
where numerical noise in the numerator is largest relative to d).

**Measured noise and the exclusion rule.** Per boundary the noise is the
largest of several measured perturbations of the computation, each exactly 0
in exact arithmetic, all recorded. In every precision:

- ``noise_null = KL(P_full || P_null)``, the null patch: ``P_null`` is the
  full run itself continued through the patched path with every site patched
  with its own activation (fast path: the full render as its own target in
  ``patching.patch.patch_pairs``: its cache before the tail, then the
  variants' kernel, one extra variant with all sites written back at once;
  reference path: ``P_full`` computed a second time by the toolkit's own
  forward engine instead of the bridge);
- ``noise_schedule = max_k KL(P_full || P_full'_k)``, ``P_full`` computed
  again with other cache cuts: the full renders run again (prefix-shared, as
  the sources are) cut at schedule k's points (:func:`schedule_cuts`; k = 0:
  each render's midpoint and every ``SCHEDULE_STRIDE`` tokens; k > 0 moves
  both; never a cut before the boundary token), so every chunk after a cut
  attends through the cached path instead of within one chunk. float32 and
  float64 run schedule 0 only, below float32 ``N_SCHEDULES`` = 3;
- ``noise_d = max |d' - d|``: d itself recomputed under each perturbation,
  ``d' = KL(P_null || P_del)`` and ``KL(P_full'_k || P_del'_k)`` (the deleted
  renders rescheduled with the same cuts). A KL between two nearly equal
  distributions is second order in their difference, d's change is first
  order, so for d ~ 0.1 nats the two KLs above underestimate d's error many
  fold (issue 38: 0.1-42x, median 5x, on SmolLM2 in bfloat16; issue 49: up to
  256x in float32 on the tiny model, 24x at SmolLM2's code-003@2).

Below float32 (bfloat16, float16; :func:`reduced_precision`) one more:

- ``noise_weights = max_j |d_w,j - d|`` over ``WEIGHT_DRAWS`` = 2 draws: d
  recomputed with every weight nudged in place by one ulp up, down or not at
  all (uniform, seed j; :func:`nudged_weights`, restored bit for bit).
  Rounding a float32 checkpoint to bfloat16 changes the model, not only the
  arithmetic, and no rescheduling sees that: on the random tiny-qwen3.5,
  bfloat16 moves d from 0.016 to 0.003 nats at a boundary whose KL noise is
  1.8e-4. A one-ulp nudge is a perturbation of the size of that rounding
  (rms 0.8 ulp against the rounding's 0.3), so its effect on d is of the
  error's size or larger.

``noise`` is the max of the measured components. Why the KL components:
on the CPU the null patch is often exactly 0 in bfloat16 (the tail is
recomputed from the same cache), so it measures the schedule of the tail,
not the dtype; rechunking the whole render changes the rounding of every
cached key and value (SmolLM2-135M, demo code-003, boundaries 2 and 4: a
midpoint cut moves ``P_full`` by 5.2e-4 / 7.2e-4 nats in bfloat16, 7e-8 /
8e-8 in float32). Cost: float32 and float64 two more prefix-shared forwards
(the full and the deleted renders rescheduled); below float32 2 x
``N_SCHEDULES`` of them and 2 x ``WEIGHT_DRAWS`` for the nudges (about 10
forwards of each trajectory's renders more).

**What is measured and what is bounded.** ``noise`` is measured: the largest
change of the computation under perturbations that are 0 in exact arithmetic.
``d_error = d_error_factor x noise`` (``PatchConfig.d_error_factor``, 20 by default) is the recorded
bound on d's error against float64, |d - d_float64|: a calibrated multiple,
validated in float32 on the tiny model against its float64 run at every
boundary of a subset (largest ratio seen 11.2, :func:`d_error_rule`, written as
``d_error_rule``; tested). It is an estimate checked on samples, not a proof.
A boundary is kept when ``d > max(min_kl,
noise_factor x noise)`` (``PatchConfig.noise_factor``, 10 by default); the threshold per boundary
is ``noise_threshold`` in ``per_sample``. By the bound, d's relative error at
a kept boundary is below ``d_error / d`` < d_error_factor / noise_factor (2 by default)
(the per-boundary ``d_error`` says how far below); it is below 0.1 where the
error is within the noise itself, which the benchmark
``benchmarks/kl_noise_bound.py`` checks in bfloat16 against float32
(``benchmarks/RESULTS.md``, "KL Repair noise in bfloat16"); Repair's error
is then about (1 - Repair) x d's relative error plus the patched KL's own
error over d, so per-boundary Repair in half precision is not exact to 0.1
(issue 38 measured moves of up to 0.133 at kept boundaries under the old,
two-component noise). The rule, every component and their medians are in
``kl_repair.json`` (``exclusion_rule``, ``noise_median``,
``noise_null_median``, ``noise_schedule_median``, ``noise_d_median``,
``noise_weights_median``).

**The formula bound** (:func:`d_threshold`, reported as a sanity bound
only, no longer the exclusion rule). A computed KL carries
numerical noise that grows with the model's precision and width, and Repair's
error is that noise divided by d. Measured: float32 noise alone moved Repair
by 0.015 at d = 1.8e-5 nats on a 4096-wide model, a KL noise of about
2.7e-7 nats = 0.035 x eps(float32) x sqrt(4096). Taking KL noise ~
eps(dtype) x sqrt(d_model) (round-off of a d_model-long dot product grows as
its square root) and asking that noise stay below 1 % of d (a Repair error
of at most about 0.01):
``d_threshold = max(min_kl, C x eps(dtype) x sqrt(d_model))`` with ``C = 4``
(>= 0.035 / 0.01) and ``min_kl`` (1e-6 nats by default), the fixed floor used before.
``eps`` is the machine epsilon of the model's dtype: float32 1.19e-7
(tiny-qwen3.5, d_model 64: 3.8e-6; SmolLM2-135M, 576: 1.1e-5; 4096 wide:
3.1e-5), float64 2.2e-16 (the floor, 1e-6), bfloat16 7.8e-3 (4096 wide:
2.0 nats), float16 9.8e-4 (4096 wide: 0.25 nats). The half-precision values
extrapolate the float32 calibration linearly in eps, and a check bears that
out: SmolLM2-135M in bfloat16 (d_model 576), fast vs reference path at two
boundaries with d ~ 0.03 nats, differs by up to 7.0e-3 nats in KL
(0.037 x eps(bfloat16) x sqrt(576)) and by 0.02-0.15 in Repair; its
threshold is 0.75 nats. A reduced-precision run therefore keeps only
boundaries whose deletion effect is large. The value used and its
derivation are written as ``d_threshold`` and ``d_threshold_rule``.

The final norm, the unembedding, log-softmax and KL arithmetic are float32
whatever the model dtype (``interp.sensor.unembed``; the reference path norms
the bridge's ``ln_final.hook_in`` the same way), on the sensor's device (both paths keep ``P_full``, ``P_del`` and ``P_patch`` there;
the KLs and top-1 flags move to the host once per boundary). The
patched tail is the last ``n_positions`` tokens (default 1, the boundary
token); both renders end in the same generation prompt, so tails align.

Two paths give the same numbers (parity-tested within 1e-4):

- ``reference``: the plain TransformerLens way, independent of the fast
  path's engine: the bridge's ``run_with_hooks`` (eager attention, no cache)
  once on the full render to take the site activations and ``P_full``, then
  one whole forward of the deleted render per site with a replacing hook
  (see ``_reference_boundary``);
- ``fast``: every boundary is one pair of the generic patch
  (``patching.patch.patch_pairs``: source = the full render, target = the
  deleted render): the full renders of all boundaries run once
  (prefix-shared), the deleted renders continue from the full run's cache
  where they leave it (those that are prefixes of each other in one forward),
  and per boundary all sites run as one batch of variants over the deleted
  run's cache before the tail (``interp.sensor.kernels.variants``): about one
  forward per condition plus one boundary token per (boundary, site), and for
  a latest-step deletion only the tokens after the deleted block on top of
  the full run. KL Repair is that generic patch with the KL from ``P_full``
  as its metric.

Sites are ``(site, layer)`` pairs; ``default_sites`` gives ``resid_pre`` of
every layer plus the final ``resid_post`` (Repair there is exactly 1).

Over-long boundaries (``interp.sensor.limits``): a boundary whose full,
deleted or donor render exceeds ``max_tokens`` (or the model's positions) is
not run; it is listed under ``skipped`` with its length, and the other
boundaries of the run are scored as usual.

Fields of ``kl_repair.json`` (``FIELDS``; ``summarize`` writes them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``condition`` | ``[]`` | str | - | history condition of the deleted run (P_del) |
| ``model`` | ``{...}`` | object | - | the sensor's describe(): spec, revision, n_layers, layer_types, ... |
| ``method`` | ``[]`` | str | - | fast or reference (same numbers within 1e-4) |
| ``n_positions`` | ``[]`` | int | tokens | patched tail length (1 = the boundary token) |
| ``sites`` | ``[n_sites]`` | str | - | patched sites as site.layer, e.g. resid_pre.12 |
| ``site`` | ``[n_kinds]`` | str | - | distinct site kinds among sites, sorted |
| ``layers`` | ``[n_sites]`` | int | layer index | layer of each site |
| ``full_attention_layers`` | ``[n_full]`` | int | layer index | the model's full-attention layers |
| ``repair_mean`` | ``[n_sites]`` | float | unitless | mean over kept samples of 1 - KL(P_full ‖ P_patch) / KL(P_full ‖ P_del); empty when no sample is kept |
| ``repair_ci`` | ``[n_sites, 2]`` | float or null | unitless | 95% task-level bootstrap CI [lo, hi] of repair_mean; null entries when no sample is kept |
| ``repair_median`` | ``[n_sites]`` | float | unitless | median over kept samples of the per-sample Repair; empty when no sample is kept |
| ``repair_ratio`` | ``[n_sites]`` | float | unitless | ratio of sums over kept samples: 1 - sum KL(P_full ‖ P_patch) / sum d (each boundary weighted by d); empty when no sample is kept |
| ``top1_mean`` | ``[n_sites]`` | float | fraction | fraction of kept samples whose patched argmax equals the full-history argmax; empty when none kept |
| ``d_threshold`` | ``[]`` | float | nats | the formula bound max(min_kl, C x eps(dtype) x sqrt(d_model)) (module docstring): a sanity figure, not the exclusion rule; a threshold given to summarize replaces the measured-noise rule |
| ``d_threshold_rule`` | ``[]`` | str | - | how d_threshold was derived, with the numbers put in |
| ``exclusion_rule`` | ``[]`` | str | - | the rule applied: d > max(min_kl, noise_factor x noise) per boundary, with the numbers put in (or the given threshold) |
| ``noise_factor`` | ``[]`` | float or null | - | the noise_factor the rule applied (null: a given threshold replaced the rule) |
| ``d_error_rule`` | ``[]`` | str | - | what d_error bounds and how that was validated: d_error = d_error_factor x noise bounds abs(d - d in float64); the factor and the validation (tiny model, float32 against float64 at every boundary of a subset: the largest ratio seen) |
| ``noise_median`` | ``[]`` | float or null | nats | median over run boundaries of the measured noise (the max of its components); null without rows |
| ``noise_null_median`` | ``[]`` | float or null | nats | median over run boundaries of noise_null = KL(P_full ‖ P_null) (the null patch); null without rows |
| ``noise_schedule_median`` | ``[]`` | float or null | nats | median over run boundaries of noise_schedule = max over schedules k of KL(P_full ‖ P_full'_k) (P_full rechunked); null without rows |
| ``noise_d_median`` | ``[]`` | float or null | nats | median over run boundaries of noise_d = max abs(d' - d), d' = KL(P_null ‖ P_del) and KL(P_full'_k ‖ P_del'_k) per schedule k; null without rows |
| ``noise_weights_median`` | ``[]`` | float or null | nats | median over run boundaries of noise_weights = max abs(d_w - d) over WEIGHT_DRAWS one-ulp weight nudges; null for a float32/float64 model (not measured) or without rows |
| ``noise_max`` | ``[]`` | float or null | nats | largest measured noise over run boundaries; null without rows |
| ``n_samples`` | ``[]`` | int | samples | kept samples: d = KL(P_full ‖ P_del) above their noise_threshold |
| ``n_excluded`` | ``[]`` | int | samples | samples with d <= noise_threshold (left out of every summary) |
| ``excluded`` | ``[n_excluded]`` | str | - | the excluded samples as task_id@after_step |
| ``skipped`` | ``[n_skipped] of {task_id, after_step, n_tokens, reason}`` | object | n_tokens: tokens | boundaries not run because a render (full, deleted or donor) exceeds max_tokens or the model's positions; n_tokens = the longer of the full and deleted renders; in no summary |
| ``per_sample`` | ``[n_rows] of {task_id, after_step, d, noise, noise_null, noise_schedule, noise_schedules, noise_d, d_null, d_schedules, d_error, noise_weights, d_weights, noise_threshold, kl_patch, repair, top1, n_tokens_full, n_tokens_deleted, excluded}`` | object | d, noise*, d_*, noise_threshold, kl_patch: nats; repair: unitless; n_tokens: tokens | every sample: d = KL(P_full ‖ P_del) (float32 arithmetic); noise = the max of the measured components: noise_null = KL(P_full ‖ P_null) (null patch), noise_schedules[k] = KL(P_full ‖ P_full'_k) (P_full with schedule k's cache cuts; 1 schedule in float32/float64, N_SCHEDULES below), noise_schedule = their max, d_null = KL(P_null ‖ P_del), d_schedules[k] = KL(P_full'_k ‖ P_del'_k), noise_d = max abs(d_null - d), abs(d_schedules[k] - d), and below float32 only (null / empty otherwise): d_weights[j] = d with the weights nudged by one ulp (seed j), noise_weights = max abs(d_weights[j] - d); d_error = d_error_factor x noise, the bound on abs(d - d in float64) (d_error_rule); noise_threshold = max(min_kl, noise_factor x noise); kl_patch = KL(P_full ‖ P_patch) per site, repair and top1 per site (repair null when excluded), render lengths |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from interp.data.conditions import apply_condition
from interp.sensor.limits import DEFAULT_MAX_TOKENS, context_limit, over_limit, skip_record
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.sensor.forward import Plan, run_plan
from interp.sensor.unembed import final_norm, log_probs, logit_dtype, promotes
from interp.sensor.hooks import hook_name
from interp.sensor.prefix import Branch, BranchOutput, run_branches
from interp.sensor.protocol import Sensor
from interp.stats import task_bootstrap_ci
from interp.data.render import Rendered, render
from interp.data.trajectory import Trajectory
from patching.config import NoiseRule
from patching.patch import Pair, PairRun, patch_pairs

D_ERROR_SEEN = 11.2  # the largest |d32 - d64| / noise seen in the validation d_error_rule describes


def d_error_rule(rule: NoiseRule) -> str:
    """What ``d_error`` bounds under ``rule`` and how that bound was validated (``d_error_rule`` in the file)."""
    return (f"d_error = {rule.d_error_factor:g} x noise bounds |d - d in float64| per boundary. Validated in float32 "
            "on tiny-qwen3.5 against the float64 model at every boundary of 4 trajectories x 2 conditions (40 "
            "boundaries; tests/patching/test_kl_repair.py checks 14 of them): the largest |d32 - d64| / noise seen "
            f"is {D_ERROR_SEEN:g} (the factor leaves a {rule.d_error_factor / D_ERROR_SEEN:.2g}x margin); with "
            "noise_d measured in float32 (first order in d's error; the KL components alone understated it up to "
            "256-fold). Below float32 the validation is against float32 (benchmarks/kl_noise_bound.py). An estimate "
            "validated on samples, not a proof")
SCHEDULE_STRIDE = 512  # tokens between the cuts of the rescheduled P_full (noise_schedule; module docstring)
N_SCHEDULES = 3  # below float32: cache-cut schedules of P_full and P_del (float32/float64: schedule 0 only)
WEIGHT_DRAWS = 2  # below float32: seeded one-ulp nudges of the weights, d recomputed under each (noise_weights)
DTYPE_NOISE_C = 4.0  # d_threshold = max(min_kl, C x eps(dtype) x sqrt(d_model)); see the module docstring

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("condition", "[]", "str", "-", "history condition of the deleted run (P_del)"),
    Field("model", "{...}", "object", "-", "the sensor's describe(): spec, revision, n_layers, layer_types, ..."),
    Field("method", "[]", "str", "-", "fast or reference (same numbers within 1e-4)"),
    Field("n_positions", "[]", "int", "tokens", "patched tail length (1 = the boundary token)"),
    Field("sites", "[n_sites]", "str", "-", "patched sites as site.layer, e.g. resid_pre.12"),
    Field("site", "[n_kinds]", "str", "-", "distinct site kinds among sites, sorted"),
    Field("layers", "[n_sites]", "int", "layer index", "layer of each site"),
    Field("full_attention_layers", "[n_full]", "int", "layer index", "the model's full-attention layers"),
    Field("repair_mean", "[n_sites]", "float", "unitless",
          "mean over kept samples of 1 - KL(P_full ‖ P_patch) / KL(P_full ‖ P_del); empty when no sample is "
          "kept"),
    Field("repair_ci", "[n_sites, 2]", "float or null", "unitless",
          "95% task-level bootstrap CI [lo, hi] of repair_mean; null entries when no sample is kept"),
    Field("repair_median", "[n_sites]", "float", "unitless",
          "median over kept samples of the per-sample Repair; empty when no sample is kept"),
    Field("repair_ratio", "[n_sites]", "float", "unitless",
          "ratio of sums over kept samples: 1 - sum KL(P_full ‖ P_patch) / sum d (each boundary weighted by "
          "d); empty when no sample is kept"),
    Field("top1_mean", "[n_sites]", "float", "fraction",
          "fraction of kept samples whose patched argmax equals the full-history argmax; empty when none kept"),
    Field("d_threshold", "[]", "float", "nats",
          "the formula bound max(min_kl, C x eps(dtype) x sqrt(d_model)) (module docstring): a sanity figure, not the exclusion rule; a threshold given to summarize replaces the measured-noise rule"),
    Field("d_threshold_rule", "[]", "str", "-",
          "how d_threshold was derived, with the numbers put in"),
    Field("exclusion_rule", "[]", "str", "-",
          "the rule applied: d > max(min_kl, noise_factor x noise) per boundary, with the numbers put in (or the given threshold)"),
    Field("noise_factor", "[]", "float or null", "-",
          "the noise_factor the rule applied (null: a given threshold replaced the rule)"),
    Field("d_error_rule", "[]", "str", "-",
          "what d_error bounds and how that was validated: d_error = d_error_factor x noise bounds abs(d - d in "
          "float64); the factor and the validation (tiny model, float32 against float64 at every boundary of a "
          "subset: the largest ratio seen)"),
    Field("noise_median", "[]", "float or null", "nats",
          "median over run boundaries of the measured noise (the max of its components); null without rows"),
    Field("noise_null_median", "[]", "float or null", "nats",
          "median over run boundaries of noise_null = KL(P_full ‖ P_null) (the null patch); null without rows"),
    Field("noise_schedule_median", "[]", "float or null", "nats",
          "median over run boundaries of noise_schedule = max over schedules k of KL(P_full ‖ P_full'_k) (P_full "
          "rechunked); null without rows"),
    Field("noise_d_median", "[]", "float or null", "nats",
          "median over run boundaries of noise_d = max abs(d' - d), d' = KL(P_null ‖ P_del) and KL(P_full'_k ‖ "
          "P_del'_k) per schedule k; null without rows"),
    Field("noise_weights_median", "[]", "float or null", "nats",
          "median over run boundaries of noise_weights = max abs(d_w - d) over WEIGHT_DRAWS one-ulp weight nudges; "
          "null for a float32/float64 model (not measured) or without rows"),
    Field("noise_max", "[]", "float or null", "nats",
          "largest measured noise over run boundaries; null without rows"),
    Field("n_samples", "[]", "int", "samples",
          "kept samples: d = KL(P_full ‖ P_del) above their noise_threshold"),
    Field("n_excluded", "[]", "int", "samples",
          "samples with d <= noise_threshold (left out of every summary)"),
    Field("excluded", "[n_excluded]", "str", "-", "the excluded samples as task_id@after_step"),
    Field("skipped", "[n_skipped] of {task_id, after_step, n_tokens, reason}", "object", "n_tokens: tokens",
          "boundaries not run because a render (full, deleted or donor) exceeds max_tokens or the model's "
          "positions; n_tokens = the longer of the full and deleted renders; in no summary"),
    Field("per_sample", "[n_rows] of {task_id, after_step, d, noise, noise_null, noise_schedule, noise_schedules, "
          "noise_d, d_null, d_schedules, d_error, noise_weights, d_weights, noise_threshold, kl_patch, repair, top1, "
          "n_tokens_full, n_tokens_deleted, excluded}", "object",
          "d, noise*, d_*, noise_threshold, kl_patch: nats; repair: unitless; n_tokens: tokens",
          "every sample: d = KL(P_full ‖ P_del) (float32 arithmetic); noise = the max of the measured components: "
          "noise_null = KL(P_full ‖ P_null) (null patch), noise_schedules[k] = KL(P_full ‖ P_full'_k) (P_full "
          "with schedule k's cache cuts; 1 schedule in float32/float64, N_SCHEDULES below), noise_schedule = their "
          "max, d_null = KL(P_null ‖ P_del), d_schedules[k] = KL(P_full'_k ‖ P_del'_k), noise_d = max abs(d_null - "
          "d), abs(d_schedules[k] - d), and below float32 only (null / empty otherwise): d_weights[j] = d with "
          "the weights nudged by one ulp (seed j), noise_weights = max abs(d_weights[j] - d); d_error = "
          "d_error_factor x noise, the bound on abs(d - d in float64) (d_error_rule); noise_threshold = "
          "max(min_kl, noise_factor x noise); kl_patch = KL(P_full ‖ P_patch) per site, repair and top1 per site "
          "(repair null when excluded), render lengths"),
    *RECORD_FIELDS,
)


def default_sites(n_layers: int, site: str = "resid_pre",
                  layers: Sequence[int] | None = None) -> list[tuple[str, int]]:
    """The one default site rule: ``site`` at each of ``layers`` (default: every layer), in the order given.

    When ``site`` is ``resid_pre`` and every layer is chosen, the final
    ``resid_post`` (the model's last residual, where Repair is exactly 1) is
    appended as an anchor; a subset of layers gets no anchor.
    """
    chosen = list(range(n_layers)) if layers is None else [int(layer) for layer in layers]
    if bad := [layer for layer in chosen if not 0 <= layer < n_layers]:
        raise ValueError(f"layers {bad} out of range for a model of {n_layers} layers")
    sites = [(site, layer) for layer in chosen]
    if site == "resid_pre" and set(chosen) == set(range(n_layers)):
        sites.append(("resid_post", n_layers - 1))
    return sites


def d_threshold(dtype: str | torch.dtype, d_model: int, min_kl: float) -> float:
    """The exclusion threshold on d for a model of this dtype and width: KL noise / d stays near 1 % (see module docstring)."""
    dt = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ValueError(f"dtype: {dtype!r} is not a torch floating-point dtype")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model must be an integer >= 1, got {d_model!r}")
    return max(min_kl, DTYPE_NOISE_C * torch.finfo(dt).eps * math.sqrt(d_model))


def threshold_for(model: dict[str, Any], min_kl: float) -> tuple[float, str]:
    """``(d_threshold, how it was derived)`` from a sensor's ``describe()`` (dtype, d_model); ``min_kl`` when they
    are unknown."""
    dtype, d_model = model.get("dtype"), model.get("d_model")
    if dtype is None or d_model is None:
        return min_kl, f"min_kl = {min_kl:g} nats (the model's dtype or d_model is unknown)"
    value = d_threshold(dtype, d_model, min_kl)
    eps = torch.finfo(getattr(torch, str(dtype).removeprefix("torch."))).eps
    return value, (f"max(min_kl, C x eps(dtype) x sqrt(d_model)) = max({min_kl:g}, {DTYPE_NOISE_C:g} x {eps:.3g} "
                   f"({dtype}) x sqrt({d_model})) = {value:.3g} nats")


def kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) in nats from log-probs (float32 at least; last dim = vocabulary)."""
    acc = torch.promote_types(torch.promote_types(p_log.dtype, q_log.dtype), torch.float32)
    p_log, q_log = p_log.to(acc), q_log.to(acc)
    return (p_log.exp() * (p_log - q_log)).sum(-1)


@dataclass
class BoundaryRepair:
    """Repair of one boundary: ``repair[i]``, ``top1[i]`` and ``kl_patch[i]`` (KL(P_full ‖ P_patch), nats) for ``sites[i]``."""

    task_id: str
    after_step: int
    d: float
    repair: list[float] = field(default_factory=list)
    top1: list[bool] = field(default_factory=list)
    kl_patch: list[float] = field(default_factory=list)
    excluded: bool = False
    noise: float = float("nan")  # the measured noise, nats: the max of the components below (module docstring)
    noise_null: float = float("nan")  # KL(P_full || P_null): the null patch
    noise_schedule: float = float("nan")  # max over schedules k of KL(P_full || P_full'_k): other cache cuts
    noise_schedules: list[float] = field(default_factory=list)  # KL(P_full || P_full'_k) per schedule k
    noise_d: float = float("nan")  # max |d' - d| over d recomputed as d_null and each d_schedules[k]
    d_null: float = float("nan")  # KL(P_null || P_del): d with the null patch's P_full
    d_schedules: list[float] = field(default_factory=list)  # KL(P_full'_k || P_del'_k) per schedule k
    d_error: float = float("nan")  # the bound on |d - d in float64|: d_error_factor x noise (module docstring)
    # below float32 only (NaN / empty for a float32 or float64 model: not measured)
    noise_weights: float = float("nan")  # max |d_w - d| over the weight nudges
    d_weights: list[float] = field(default_factory=list)  # d with the model's weights nudged, per draw
    n_tokens_full: int = 0
    n_tokens_deleted: int = 0
    skipped: str = ""  # why the boundary was not run (over the context limit); "" when it was

    def __post_init__(self) -> None:
        # a part read back from its strict-JSON file holds null where a value was NaN (not measured)
        for name in ("d", "noise", "noise_null", "noise_schedule", "noise_d", "d_null", "d_error", "noise_weights"):
            if getattr(self, name) is None:
                setattr(self, name, float("nan"))


def boundary_renders(sensor: Sensor, traj: Trajectory, condition: str, boundaries: list[int],
                     params: dict[str, Any] | None = None) -> tuple[dict[int, Rendered], dict[int, Rendered]]:
    """The full and the ``condition`` render at each boundary: the two runs KL Repair compares."""
    tok, params = sensor.tokenizer, params or {}
    full = {b: render(traj, b, tok) for b in boundaries}
    deleted = {b: render(apply_condition(condition, traj, b, **params)[0], b, tok) for b in boundaries}
    return full, deleted


def _check_tail(full: Rendered, deleted: Rendered, n: int) -> None:
    if full.input_ids[-n:] != deleted.input_ids[-n:]:
        raise ValueError(f"boundary {full.boundary}: the last {n} tokens differ between the full and deleted "
                         "renders; patching needs aligned tails (use n_positions within the generation prompt)")


def kl_repair_trajectory(
    sensor: Sensor,
    traj: Trajectory,
    condition: str,
    sites: list[tuple[str, int]],
    boundaries: list[int] | None = None,
    method: str = "fast",
    n_positions: int = 1,
    condition_params: dict[str, Any] | None = None,
    threshold: float | None = None,
    source: str = "full",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    rule: NoiseRule,
) -> list[BoundaryRepair]:
    """Repair of every site at every requested boundary of ``traj`` (see module docstring).

    ``source`` is the condition whose run supplies the patched activations and
    ``P_full`` (``full``; patching from the deleted run itself gives Repair 0).
    ``rule`` is the noise rule (``PatchConfig.noise_rule``); ``threshold`` a fixed exclusion threshold on d in its
    place (default None: the measured-noise rule, module docstring).
    A boundary with a render over ``max_tokens`` gets a row with ``skipped`` set and is not run.
    """
    if method not in ("fast", "reference"):
        raise ValueError(f"method must be 'fast' or 'reference', got {method!r}")
    boundaries = boundaries or list(range(1, traj.n_steps + 1))
    params = condition_params or {}
    full, deleted = boundary_renders(sensor, traj, condition, boundaries, params)
    for b in boundaries:
        _check_tail(full[b], deleted[b], n_positions)
    donors = full if source == "full" else {
        b: render(apply_condition(source, traj, b, **params)[0], b, sensor.tokenizer) for b in boundaries}
    limit = context_limit(sensor, max_tokens)
    lengths = {b: max(full[b].n_tokens, deleted[b].n_tokens, donors[b].n_tokens) for b in boundaries}
    skipped = {b: BoundaryRepair(traj.task_id, b, float("nan"), n_tokens_full=full[b].n_tokens,
                                 n_tokens_deleted=deleted[b].n_tokens, skipped=reason)
               for b in boundaries if (reason := over_limit(lengths[b], limit))}
    run = [b for b in boundaries if b not in skipped]
    if not run:
        return [skipped[b] for b in boundaries]
    full, deleted, donors = ({b: x[b] for b in run} for x in (full, deleted, donors))
    # below float32 the noise has more components (module docstring); float32/float64 keep two, at their old cost
    reduced = reduced_precision(sensor)
    schedules = range(N_SCHEDULES if reduced else 1)
    d_weights = nudged_d(sensor, full, deleted) if reduced else {b: [] for b in run}
    if method == "reference":
        done = {}
        for b in run:
            p_full, p_del, p_patch = _reference_boundary(sensor, full[b], donors[b], deleted[b], sites, n_positions)
            # the null: P_full a second time, by the toolkit's own engine instead of the bridge
            p_null = run_plan(sensor, full[b].input_ids, Plan(logprobs=[full[b].n_tokens - 1])).logprobs[
                full[b].n_tokens - 1]
            sched = [rescheduled(sensor, {b: full[b]}, k)[b] for k in schedules]
            sched_del = [rescheduled(sensor, {b: deleted[b]}, k)[b] for k in schedules]
            done[b] = _score(traj.task_id, b, p_full, p_del, p_patch, rule, threshold, full[b].n_tokens,
                             deleted[b].n_tokens, p_null, sched, sched_del, d_weights[b])
        return [done.get(b) or skipped[b] for b in boundaries]
    pairs = [Pair(b, full[b].input_ids, deleted[b].input_ids, None if source == "full" else donors[b].input_ids)
             for b in run]
    # the null patch: the full render as its own target (its cache before the tail, then the variants' schedule),
    # every site written back with its own activation at once: the last group
    pairs += [Pair(("null", b), full[b].input_ids, full[b].input_ids) for b in run]
    names = [hook_name(site, layer) for site, layer in sites]
    results = dict(skipped)
    runs: dict[Hashable, PairRun] = {}
    p_sched = [rescheduled(sensor, full, k) for k in schedules]
    p_sched_del = [rescheduled(sensor, deleted, k) for k in schedules]
    for res in patch_pairs(sensor, pairs, [[n] for n in names] + [names], n_positions):
        runs[res.key] = res
        b = cast(int, res.key[1] if isinstance(res.key, tuple) else res.key)
        if b in runs and ("null", b) in runs:
            mine, null = runs.pop(b), runs.pop(("null", b))
            # P_del is the unpatched variant of the same computation, so a site that changes
            # nothing (layer 0 at an identical token, a self-patch) gives Repair 0 exactly.
            both = torch.log_softmax(mine.variants[:-1], dim=-1)
            p_null = torch.log_softmax(null.variants[-1], dim=-1)
            results[b] = _score(traj.task_id, b, mine.source_logprobs, both[0], both[1:], rule, threshold,
                                full[b].n_tokens, deleted[b].n_tokens, p_null, [p[b] for p in p_sched],
                                [p[b] for p in p_sched_del], d_weights[b])
    return [results[b] for b in boundaries]


def schedule_cuts(n_tokens: int, k: int = 0) -> list[int]:
    """Cache cuts of schedule ``k``: one at ``(k + 1) / (k + 2)`` of the render (k = 0: its midpoint) and every
    ``SCHEDULE_STRIDE`` tokens from ``SCHEDULE_STRIDE x (1 + k / N_SCHEDULES)``, none at the boundary token (the
    scheduled run cuts there), so the last chunk is never the boundary token alone and no two schedules agree."""
    start = SCHEDULE_STRIDE + k * SCHEDULE_STRIDE // N_SCHEDULES
    point = n_tokens * (k + 1) // (k + 2)
    return sorted({point, *range(start, n_tokens - 1, SCHEDULE_STRIDE)} - {0, n_tokens - 1})


def rescheduled(sensor: Sensor, renders: dict[int, Rendered], k: int = 0) -> dict[int, torch.Tensor]:
    """The renders' last-token log-probs (float32, on the device) computed again, prefix-shared, with the cache cut at
    ``schedule_cuts(n, k)``: ``P_full'_k`` and ``P_del'_k`` of the noise (module docstring)."""
    branches = [Branch(b, r.input_ids, Plan(logprobs=[r.n_tokens - 1], cuts=schedule_cuts(r.n_tokens, k)))
                for b, r in renders.items()]
    return _by_boundary(renders, run_branches(sensor, branches))


def _by_boundary(renders: dict[int, Rendered], results: Iterable[BranchOutput]) -> dict[int, torch.Tensor]:
    """Each boundary's last-token log-probs from the runs of :func:`rescheduled` and :func:`nudged_d`."""
    out = {}
    for res in results:
        b = cast(int, res.key)
        out[b] = res.outputs.logprobs[renders[b].n_tokens - 1]
    return out


def reduced_precision(sensor: Sensor) -> bool:
    """Whether the sensor's model runs below float32 (bfloat16, float16): the runs whose noise gets d recomputed
    under every perturbation and the weight nudges (module docstring)."""
    return torch.finfo(sensor.dtype).bits < 32


@contextmanager
def nudged_weights(model: torch.nn.Module, seed: int) -> Iterator[None]:
    """Every below-float32 weight of ``model`` moved in place by one ulp up, down or not at all (uniform, seeded),
    restored bit for bit on exit (the inverse nudge): a perturbation of the size of the weights' own rounding to
    that dtype (module docstring)."""
    params = [p for p in model.parameters() if p.is_floating_point() and torch.finfo(p.dtype).bits < 32]

    def step(sign: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.inference_mode(False), torch.no_grad():
            for p in params:
                move = torch.randint(-1, 2, p.shape, generator=gen).to(p.device) * sign
                inf = torch.full_like(p, float("inf"))
                p.copy_(torch.where(move > 0, torch.nextafter(p, inf),
                                    torch.where(move < 0, torch.nextafter(p, -inf), p)))

    step(1)
    try:
        yield
    finally:
        step(-1)


def nudged_d(sensor: Sensor, full: dict[int, Rendered], deleted: dict[int, Rendered]) -> dict[int, list[float]]:
    """Per boundary, d = KL(P_full || P_del) recomputed with the weights nudged (:func:`nudged_weights`, seeds 0 ..
    WEIGHT_DRAWS - 1; prefix-shared runs with no extra cache cut)."""
    out: dict[int, list[float]] = {b: [] for b in full}
    for seed in range(WEIGHT_DRAWS):
        with nudged_weights(sensor.hf_model, seed):
            p_full, p_del = _last_logprobs(sensor, full), _last_logprobs(sensor, deleted)
            for b in full:
                out[b].append(float(kl(p_full[b], p_del[b])))
    return out


def _last_logprobs(sensor: Sensor, renders: dict[int, Rendered]) -> dict[int, torch.Tensor]:
    branches = [Branch(b, r.input_ids, Plan(logprobs=[r.n_tokens - 1])) for b, r in renders.items()]
    return _by_boundary(renders, run_branches(sensor, branches))


def bridge_hook_name(sensor: Sensor, site: str, layer: int) -> str:
    """The bridge's own hook for a site: residuals by TL name, attention/MLP outputs at their module's ``hook_out``."""
    if site in ("resid_pre", "resid_post"):
        return hook_name(site, layer)
    if site == "mlp_out":
        return f"blocks.{layer}.mlp.hook_out"
    mixer = "linear_attn" if sensor.layer_types[layer] == "linear_attention" else "attn"
    return f"blocks.{layer}.{mixer}.hook_out"


def _reference_boundary(sensor: Sensor, full: Rendered, donor: Rendered, deleted: Rendered,
                        sites: list[tuple[str, int]], n_pos: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(P_full, P_del, P_patch per site)`` the TransformerLens way: whole bridge forwards, one per site."""
    bridge = sensor.bridge
    names = [bridge_hook_name(sensor, site, layer) for site, layer in sites]
    taken: dict[str, torch.Tensor] = {}

    def taker(name: str) -> Callable[[torch.Tensor, object], None]:  # keyed by the name asked for: the bridge reports aliases by their target
        def take(x: torch.Tensor, hook: object) -> None:
            taken[name] = x[0, -n_pos:].clone()
        return take

    def last_logprobs(ids: list[int], fwd_hooks: list[tuple[str, Any]]) -> torch.Tensor:
        if promotes(sensor):  # a half-precision model: the bridge's pre-norm state, normed and unembedded in float32
            pre: list[torch.Tensor] = []
            bridge.run_with_hooks(torch.tensor([ids], device=sensor.device),
                                  fwd_hooks=[*fwd_hooks, ("ln_final.hook_in", lambda x, hook: pre.append(x[0, -1]))])
            return log_probs(sensor, final_norm(sensor, pre[-1]))
        logits = bridge.run_with_hooks(torch.tensor([ids], device=sensor.device), fwd_hooks=fwd_hooks)
        return torch.log_softmax(logits[0, -1].to(logit_dtype(logits.dtype)), dim=-1)

    with torch.inference_mode():
        p_full = last_logprobs(full.input_ids, [(n, taker(n)) for n in names] if donor is full else [])
        if donor is not full:
            last_logprobs(donor.input_ids, [(n, taker(n)) for n in names])
        if missing := set(names) - taken.keys():
            raise RuntimeError(f"bridge hooks did not fire: {sorted(missing)}")
        rows = [last_logprobs(deleted.input_ids, [])]
        for name in names:
            fired = []

            def put(x: torch.Tensor, hook: object, name: str = name) -> torch.Tensor:
                fired.append(name)
                x = x.clone()
                x[0, -n_pos:] = taken[name].to(x.dtype)
                return x

            rows.append(last_logprobs(deleted.input_ids, [(name, put)]))
            if fired != [name]:
                raise RuntimeError(f"bridge hook {name} fired {len(fired)} times, expected once")
    return p_full, rows[0], torch.stack(rows[1:])


def _score(task_id: str, b: int, p_full: torch.Tensor, p_del: torch.Tensor, p_patch: torch.Tensor,
           rule: NoiseRule, threshold: float | None, n_full: int, n_del: int, p_null: torch.Tensor, p_sched: list[torch.Tensor],
           p_sched_del: list[torch.Tensor], d_weights: list[float]) -> BoundaryRepair:
    """One boundary's row from log-probs on the sensor's device; the KLs are computed there, then moved to the host once.

    ``p_sched[k]``: ``P_full'_k`` of schedule k (:func:`rescheduled`), ``p_sched_del[k]`` = ``P_del'_k``; below
    float32 only (empty otherwise) ``d_weights`` = d with the weights nudged (:func:`nudged_d`)."""
    dev = p_del.device
    extra = torch.stack([p_null.to(dev), *(p.to(dev) for p in p_sched)])
    kls = kl(p_full.unsqueeze(0), torch.cat([p_del.unsqueeze(0), extra, p_patch]))
    top = p_patch.argmax(-1) == p_full.argmax()
    # d recomputed from each perturbed pair: (P_null, P_del) and (P_full'_k, P_del'_k)
    parts = [kls, top.to(kls.dtype), kl(extra, torch.stack([p_del, *(p.to(dev) for p in p_sched_del)]))]
    host = torch.cat(parts).cpu()  # the output boundary
    n, m = len(p_patch), len(p_sched)
    # |KL| for the noise: a KL of two nearly equal distributions can come out slightly negative by round-off
    d, null = float(host[0]), abs(float(host[1]))
    scheds = [abs(float(x)) for x in host[2: m + 2]]
    kl_patch, top1 = host[m + 2: m + 2 + n], host[m + 2 + n: m + 2 + 2 * n].bool().tolist()
    out = BoundaryRepair(task_id, b, d, kl_patch=kl_patch.tolist(), top1=top1, noise_null=null, noise_schedule=max(scheds),
                         noise_schedules=scheds, n_tokens_full=n_full, n_tokens_deleted=n_del)
    out.d_null, *out.d_schedules = (float(x) for x in host[m + 2 + 2 * n:])
    out.noise_d = max(abs(x - d) for x in (out.d_null, *out.d_schedules))
    components = [null, max(scheds), out.noise_d]
    if d_weights:
        out.d_weights = list(d_weights)
        out.noise_weights = max(abs(x - d) for x in d_weights)
        components.append(out.noise_weights)
    out.noise = max(components)
    out.d_error = rule.d_error_factor * out.noise
    if d <= (rule.threshold(out.noise) if threshold is None else threshold):
        out.excluded = True
        out.repair = [float("nan")] * len(top1)
    else:
        out.repair = (1.0 - kl_patch / d).tolist()
    return out


def summarize(rows: list[BoundaryRepair], sites: list[tuple[str, int]], condition: str, sensor: Sensor,
              method: str, n_positions: int, n_boot: int, rule: NoiseRule,
              threshold: float | None = None) -> dict[str, Any]:
    """The ``kl_repair.json`` document (``FIELDS``, table in the module docstring); pure: no model is run.

    ``sensor`` is only asked for ``describe()`` and ``full_attention_layers``.
    The exclusion rule is applied again here (each row's measured noise, or
    ``threshold`` when given), so rows scored under another rule (e.g. resumed
    parts) are excluded by the same one; rows already excluded stay excluded.
    ``d_threshold`` is the formula bound of :func:`threshold_for`, reported only.
    """
    model = sensor.describe()
    bound, bound_rule = threshold_for(model, rule.min_kl)
    if threshold is None:
        limit = {id(r): rule.threshold(r.noise) for r in rows if not r.skipped}  # skipped: no noise
        applied = (f"d > max(min_kl, noise_factor x noise) per boundary, min_kl = {rule.min_kl:g} nats, noise_factor "
                   f"= {rule.factor:g}; noise = max(noise_null, noise_schedule, noise_d): KL(P_full || P_null), the "
                   f"null patch ({method} path), KL(P_full || P_full'), P_full with the cache cut every "
                   f"{SCHEDULE_STRIDE} tokens and at the render's midpoint, and the largest |d' - d| over d' = "
                   "KL(P_null || P_del) and KL(P_full' || P_del') (the deleted render cut the same way)")
        if any(r.d_schedules for r in rows):  # a model below float32 (module docstring)
            applied += (f"; below float32 over {N_SCHEDULES} such schedules k (cuts at (k+1)/(k+2) of the render, "
                     f"the stride offset by k x {SCHEDULE_STRIDE}/{N_SCHEDULES}), and noise_weights = the largest "
                     f"|d_w - d| over {WEIGHT_DRAWS} one-ulp weight nudges")
    else:
        limit = {id(r): float(threshold) for r in rows}
        applied = f"d > {float(threshold):.3g} nats (given)"
    skipped = [skip_record(r.task_id, r.after_step, max(r.n_tokens_full, r.n_tokens_deleted), r.skipped)
               for r in rows if r.skipped]
    noise = [r.noise for r in rows if not r.skipped and math.isfinite(r.noise)]
    parts = {k: [getattr(r, k) for r in rows if not r.skipped and math.isfinite(getattr(r, k))]
             for k in ("noise_null", "noise_schedule", "noise_d", "noise_weights")}
    judged = [(r if r.excluded or r.d > limit[id(r)] else
               BoundaryRepair(**{**vars(r), "excluded": True, "repair": [float("nan")] * len(r.repair)}), limit[id(r)])
              for r in rows if not r.skipped]
    thresholds = [t for _, t in judged]
    rows = [r for r, _ in judged]
    kept = [r for r in rows if not r.excluded]
    values = np.array([r.repair for r in kept], dtype=float).reshape(len(kept), len(sites))
    top1 = np.array([r.top1 for r in kept], dtype=float).reshape(len(kept), len(sites))
    kls = np.array([r.kl_patch for r in kept], dtype=float).reshape(len(kept), len(sites))
    d = np.array([r.d for r in kept], dtype=float)
    groups = np.array([r.task_id for r in kept])
    ci = task_bootstrap_ci(values, groups, n_boot) if kept else np.full((len(sites), 2), np.nan)
    return {
        "schema": schema_dict(FIELDS),
        "condition": condition, "model": model, "method": method, "n_positions": n_positions,
        "sites": [f"{s}.{layer}" for s, layer in sites], "site": sorted({s for s, _ in sites}),
        "layers": [layer for _, layer in sites],
        "full_attention_layers": sensor.full_attention_layers,
        "repair_mean": np.nanmean(values, axis=0).tolist() if kept else [],
        "repair_ci": ci.tolist(),
        "repair_median": np.median(values, axis=0).tolist() if kept else [],
        "repair_ratio": (1.0 - kls.sum(axis=0) / d.sum()).tolist() if kept else [],
        "top1_mean": top1.mean(axis=0).tolist() if kept else [],
        "d_threshold": bound, "d_threshold_rule": bound_rule, "exclusion_rule": applied,
        "d_error_rule": d_error_rule(rule), "noise_factor": rule.factor if threshold is None else None,
        "noise_median": float(np.median(noise)) if noise else None, "noise_max": max(noise) if noise else None,
        **{f"{k}_median": float(np.median(v)) if v else None for k, v in parts.items()},
        "n_samples": len(kept), "n_excluded": len(rows) - len(kept),
        "excluded": [f"{r.task_id}@{r.after_step}" for r in rows if r.excluded],
        "skipped": skipped,
        "per_sample": [{"task_id": r.task_id, "after_step": r.after_step, "d": r.d, "noise": r.noise,
                        "noise_null": r.noise_null, "noise_schedule": r.noise_schedule,
                        "noise_schedules": r.noise_schedules, "noise_d": r.noise_d, "d_null": r.d_null,
                        "d_schedules": r.d_schedules, "d_error": r.d_error, "noise_weights": r.noise_weights,
                        "d_weights": r.d_weights,
                        "noise_threshold": t, "kl_patch": r.kl_patch, "repair": r.repair,
                        "top1": r.top1, "n_tokens_full": r.n_tokens_full, "n_tokens_deleted": r.n_tokens_deleted,
                        "excluded": r.excluded} for r, t in zip(rows, thresholds)],
    }

