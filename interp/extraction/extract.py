"""Boundary features of one trajectory under one condition, with prefix sharing.

For every boundary b: apply the condition, render once, and keep the pooled
hooked residuals at the requested layers, the boundary attention row at the
requested full-attention layers (summed per segment and per segment kind),
and the boundary next-token entropy (bits) and top-1 token.

Prefix sharing. Every boundary's render is one branch of the prefix
scheduler (``interp.sensor.prefix``) with the longest render R as its base: a
render that is a prefix of R (it is for ``full``, ``delete_all_reasoning`` and
online ``iclr`` with these templates) gets its features from the one forward
over R (``forward`` = ``shared``); another runs its suffix after the longest
common prefix from a snapshot of R's cache there (``suffix@<n>``; conditions
that edit only the latest step share everything before the edit). With
``share_prefix=False`` every boundary gets its own forward (the reference
path; parity-tested).

Over-long renders (more than ``max_tokens``, or more positions than the model
has; ``interp.sensor.limits``) are skipped and recorded with their length,
never truncated.

Position features. Every boundary row also records where the boundary sits
and how long its history is (``interp.extraction.position``, the one
definition of the probe's position baseline columns).

``ExtractConfig`` validates itself on construction (poolings through
``interp.extraction.pooling.parse_pooling``, sites against
``interp.sensor.hooks.SITES``, ...) and against the model in
``extract_trajectory``, so a bad setting fails before any forward or file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import torch

from interp.data.conditions import apply_condition
from interp.data.render import SEGMENT_KINDS, Rendered, render
from interp.data.trajectory import Trajectory
from interp.extraction.entropy import block_mean_entropy, entropy_positions
from interp.sensor.limits import DEFAULT_MAX_TOKENS, context_limit, over_limit
from interp.extraction.pooling import parse_pooling, pooling_positions
from interp.extraction.position import position_features
from interp.params import REQUIRED, Check, ConfigError, Flag, Integer, Items, Maybe, Options, param, validate
from interp.sensor.forward import Outputs, Plan
from interp.sensor.prefix import Branch, run_branches
from interp.sensor.hooks import SITES
from interp.sensor.sae import SparseAutoencoder, load_sae, sae_identity, spliced_kl, top_features
from interp.sensor.protocol import Sensor

LN2 = math.log(2.0)


def _pooling(rule: str) -> None:
    """ValueError with the reason unless ``rule`` is a pooling rule (``interp.extraction.pooling``)."""
    parse_pooling(rule)


def _sae_dir(path: str) -> None:
    """ValueError with the reason unless ``path`` is a SAELens SAE directory this toolkit serves."""
    load_sae(path)


@dataclass(frozen=True)
class ExtractConfig:
    """What to keep at each boundary (``interp extract``; the store the probes, ICLR's full context and the attention
    summary read). Checked on construction (``interp.params``); list fields are stored as tuples.

    ``precision``: bfloat16 under ``--dtype auto`` on CUDA (the model's trained precision; features are read as
    activations, stored in float32, and the probe's AUROC is the check)."""

    analysis: ClassVar[str] = "extract"  # the store: no result of its own in the registry (interp.reporting)
    precision: ClassVar[str] = "bfloat16"

    layers: Sequence[int] = param(REQUIRED, Items(Integer(0), min_len=0, unique=True),
                                    "Layers whose features are kept (0-based).")
    sites: Sequence[str] = param(("resid_pre",), Items(Options(SITES), unique=True), "Hooked sites kept.")
    poolings: Sequence[str] = param(("last",), Items(Check(_pooling, "a pooling rule (interp.extraction.pooling)",
                                                             "mean_nowhere"), unique=True),
                                      "Pooling rules of the boundary features.")
    attention_layers: Sequence[int] = param((), Items(Integer(0), min_len=0, unique=True),
                                              "Full-attention layers whose boundary attention mass is kept.")
    max_tokens: int = param(DEFAULT_MAX_TOKENS, Integer(1), "Boundaries with longer renders are skipped and "
                            "recorded, never truncated.", "tokens")
    share_prefix: bool = param(True, Flag(), "Share one prefix forward between a trajectory's boundaries.")
    block_entropy: bool = param(False, Flag(), "ICLR block entropies from the same forward (shared full renders).")
    sae: str | None = param(None, Maybe(Check(_sae_dir, "a SAELens SAE directory (cfg.json + "
                                                "sae_weights.safetensors; interp.sensor.sae)", "no/such/sae"),
                                        "no SAE features"),
                            "SAE whose TopK features are stored beside the residual at its hook's site and layer.")
    sae_top_k: int = param(32, Integer(1), "SAE features kept per boundary row and pooling (the largest).",
                           "features")
    sae_splice: bool = param(True, Flag(), "Also measure the SAE's spliced KL at each boundary (two more forwards "
                             "per boundary).")

    def __post_init__(self) -> None:
        validate(self)

    def check_sensor(self, sensor: Sensor) -> None:
        """Refuse layers the model does not have and attention layers without softmax attention."""
        n_layers = getattr(sensor, "n_layers", None)
        if n_layers is not None:
            for name in ("layers", "attention_layers"):
                bad = [x for x in getattr(self, name) if x >= n_layers]
                if bad:
                    raise ConfigError(name, f"{bad} out of range 0..{n_layers - 1}")
        full = getattr(sensor, "full_attention_layers", None)
        if full is not None:
            bad = sorted(set(self.attention_layers) - set(full))
            if bad:
                raise ConfigError("attention_layers", f"{bad} are linear attention layers (no attention "
                                 f"pattern); allowed: {', '.join(map(str, full))}")
        if self.sae is not None:
            sae = load_sae(self.sae)
            site, layer = sae.site
            if site not in self.sites or layer not in self.layers:
                raise ConfigError("sae", f"{self.sae}: its hook {sae.hook_name} is not extracted (add site {site} "
                                         f"and layer {layer} to the extraction)")
            d_model = getattr(sensor, "d_model", sae.d_in)
            if sae.d_in != d_model:
                raise ConfigError("sae", f"{self.sae}: d_in {sae.d_in} differs from the model's d_model {d_model}")

    def to_json(self) -> dict[str, Any]:
        """JSON-able settings (stored in the activation store's schema)."""
        out: dict[str, Any] = {"layers": list(self.layers), "sites": list(self.sites),
                               "poolings": list(self.poolings), "attention_layers": list(self.attention_layers),
                               "max_tokens": self.max_tokens, "block_entropy": self.block_entropy}
        if self.sae is not None:  # only then: a store written without an SAE keeps its settings
            out |= {"sae": sae_identity(self.sae), "sae_top_k": self.sae_top_k, "sae_splice": self.sae_splice}
        return out


@dataclass
class BoundaryFeatures:
    """Everything kept for one (trajectory, condition, boundary) sample.

    ``features[f"{site}.{layer}.{pooling}"]``: float32 [d_model].
    ``sae[f"sae.{pooling}.ids"|".values"]``: int64 / float32 [sae_top_k], the largest SAE features of that pooled
    residual (``ExtractConfig.sae``); ``sae[f"sae.{pooling}.sq_err"]``: float32 [], ``||x - xhat||^2``.
    ``sae_kl_nats``: KL of the boundary's next-token distribution, clean vs SAE-spliced (``sae_splice``).
    ``attention[layer]``: ``{"per_kind": [n_heads, 7] (order SEGMENT_KINDS),
    "per_segment": [n_heads, n_segments]}`` float32, attention mass of the
    boundary query (rows sum to 1).
    """

    task_id: str
    after_step: int
    condition: str
    status: str  # "ok" or "skipped"
    reason: str = ""
    n_tokens: int = 0
    forward: str = ""  # "shared", "suffix@<lcp>", "own"
    features: dict[str, torch.Tensor] = field(default_factory=dict)
    pool_counts: dict[str, int] = field(default_factory=dict)
    attention: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    segments: list[dict[str, Any]] = field(default_factory=list)
    boundary_entropy_bits: float | None = None
    top1: int | None = None
    edit: dict[str, Any] = field(default_factory=dict)
    block_entropy: list[dict[str, Any]] = field(default_factory=list)  # set on the last boundary's row
    position: dict[str, Any] = field(default_factory=dict)  # position_features of the render (manifest columns)
    sae: dict[str, torch.Tensor] = field(default_factory=dict)
    sae_kl_nats: float | None = None


def _segments_json(r: Rendered) -> list[dict[str, Any]]:
    return [{"kind": s.kind, "step": s.step, "block": s.block, "start": s.start, "end": s.end} for s in r.segments]


def _requests(bf_key: Any, r: Rendered, config: ExtractConfig, plan: Plan) -> None:
    """Add the pooled requests of one boundary (absolute positions of its render)."""
    for pooling in config.poolings:
        positions = pooling_positions(pooling, r)
        if not positions:
            continue
        for site in config.sites:
            for layer in config.layers:
                plan.pooled[(bf_key, site, layer, pooling)] = (site, layer, positions)


def extract_trajectory(
    sensor: Sensor,
    traj: Trajectory,
    condition: str,
    config: ExtractConfig,
    boundaries: list[int] | None = None,
    condition_params: dict[str, Any] | None = None,
) -> list[BoundaryFeatures]:
    """Features of every requested boundary of ``traj`` under ``condition`` (see module docstring)."""
    config.check_sensor(sensor)
    tok = sensor.tokenizer
    params = condition_params or {}
    boundaries = list(range(1, traj.n_steps + 1)) if boundaries is None else boundaries
    limit = context_limit(sensor, config.max_tokens)
    results: dict[int, BoundaryFeatures] = {}
    renders: dict[int, Rendered] = {}
    counter = lambda s: len(tok.encode(s, add_special_tokens=False))  # noqa: E731
    for b in boundaries:
        edited, log = apply_condition(condition, traj, b, counter=counter, **params)
        r = render(edited, b, tok)
        bf = BoundaryFeatures(traj.task_id, b, condition, "ok", n_tokens=r.n_tokens, segments=_segments_json(r),
                              edit={"chars_removed": log.chars_removed, "tokens_removed": log.tokens_removed,
                                    "notes": log.notes},
                              position=position_features(traj, b, r))
        reason = over_limit(r.n_tokens, limit)
        if reason:
            bf.status, bf.reason = "skipped", reason
        else:
            renders[b] = r
        results[b] = bf
    if renders:
        _run(sensor, renders, results, config)
        if config.sae is not None:
            _sae_features(sensor, renders, results, config, load_sae(config.sae))
    return [results[b] for b in boundaries]


def _sae_features(sensor: Sensor, renders: dict[int, Rendered], results: dict[int, BoundaryFeatures],
                  config: ExtractConfig, sae: SparseAutoencoder) -> None:
    """The SAE's TopK features of each pooled residual at its hook, their squared error, and the spliced KL."""
    site, layer = sae.site
    for b, r in renders.items():
        bf = results[b]
        for pooling in config.poolings:
            x = bf.features[f"{site}.{layer}.{pooling}"]
            f = sae.encode(x)
            ids, values = top_features(f, config.sae_top_k)
            bf.sae[f"sae.{pooling}.ids"], bf.sae[f"sae.{pooling}.values"] = ids, values
            bf.sae[f"sae.{pooling}.sq_err"] = ((x - sae.decode(f)) ** 2).sum().to(torch.float32)
        if config.sae_splice:
            bf.sae_kl_nats = spliced_kl(sensor, r.input_ids, sae)


def _run(sensor: Sensor, renders: dict[int, Rendered], results: dict[int, BoundaryFeatures],
         config: ExtractConfig) -> None:
    """Every boundary's render as one branch of the prefix scheduler (``interp.sensor.prefix``), base = the longest."""
    branches = []
    for b, r in renders.items():
        plan = Plan(logprobs=[r.n_tokens - 1])
        _requests(b, r, config, plan)
        for layer in config.attention_layers:
            plan.rows[(layer, r.n_tokens - 1)] = b
        branches.append(Branch(b, r.input_ids, plan))
    base_b = max(renders, key=lambda b: renders[b].n_tokens)
    blocks = [sp for sp in renders[base_b].spans("reasoning_block") if sp.start >= 1]
    if config.block_entropy:
        branches[list(renders).index(base_b)].plan.entropy = entropy_positions(blocks)
    for res in run_branches(sensor, branches, renders[base_b].input_ids, share=config.share_prefix):
        b = cast(int, res.key)  # the branches' keys are the boundaries of renders
        _collect(res.outputs, {b: renders[b]}, results, config, res.forward, sensor.d_model)
        if config.block_entropy and res.key == base_b:
            # The score of interp.extraction.entropy.block_entropies, from this forward.
            results[base_b].block_entropy = [
                {"step": sp.step, "block": sp.block, "n_tokens": sp.n_tokens,
                 "mean_entropy_bits": block_mean_entropy(res.outputs.entropy, sp)} for sp in blocks]


def _collect(out: Outputs, renders: dict[int, Rendered], results: dict[int, BoundaryFeatures],
             config: ExtractConfig, how: str, d_model: int) -> None:
    """Write boundary features from ``out`` (on the sensor's device) into ``results``: the one move to the host."""
    for b, r in renders.items():
        bf = results[b]
        bf.forward = how
        for pooling in config.poolings:
            for site in config.sites:
                for layer in config.layers:
                    key = (b, site, layer, pooling)
                    bf.features[f"{site}.{layer}.{pooling}"] = (
                        out.mean(key).cpu() if key in out.sums else torch.zeros(d_model, dtype=torch.float32))
            any_key = (b, config.sites[0], config.layers[0], pooling) if config.layers else None
            bf.pool_counts[pooling] = out.counts.get(any_key, 0) if any_key else 0
        for layer, row in out.rows.get(b, {}).items():
            row = row[:, : r.n_tokens].cpu()
            per_seg = torch.stack([row[:, s.start:s.end].sum(-1) for s in r.segments], dim=1)
            kinds = torch.zeros(row.shape[0], len(SEGMENT_KINDS))
            for j, s in enumerate(r.segments):
                kinds[:, SEGMENT_KINDS.index(s.kind)] += per_seg[:, j]
            bf.attention[layer] = {"per_kind": kinds, "per_segment": per_seg}
        logp = out.logprobs[r.n_tokens - 1].cpu()
        bf.boundary_entropy_bits = float(-(logp.exp() * logp).sum() / LN2)
        bf.top1 = int(logp.argmax())

