"""Reasoning anchors: which reasoning blocks the next output depends on, by deletion and by attention
(``anchors.json``), and whether ICLR drops them.

At boundary b (1 <= b < n_steps) the next output ``y`` is step b+1's recorded assistant turn, teacher-forced
after the history exactly as set-level harm does (``patching.harm``). For every reasoning block of steps 1..b:

- ``harm``: counterfactual deletion, the harm of deleting that block alone (nats/token): DRSR's singleton harm,
  read from the caller's DRSR/harm records (:func:`singleton_harms`) or measured here by ``patching.harm.set_harms``
  on the singletons only;
- ``received``: attention received from the next output. At each softmax-attention layer the attention rows of
  y's query positions (``blocks.{l}.attn.hook_pattern``, the sensor's fast path, ``interp.sensor.api``) are
  averaged over queries and over each block's key tokens (the mean attention per block token). A head's
  *kurtosis* over the boundary's blocks (Fisher, scipy) is high when its attention concentrates on few blocks;
  the ``receiver_heads`` heads of highest kurtosis are the receiver heads (Thought Anchors' receiver heads, with
  the next output as the downstream text) and ``received`` is the block's mean over them;
- ``suppression``: attention suppression: the mean over y's positions of ``KL(P_full || P_suppressed)``
  (nats/token), where P_suppressed comes from the forward in which every query after the block gives its keys
  zero weight at every softmax-attention layer (the scores there set to -inf before the softmax, TransformerLens'
  ``hook_attn_scores``; computed in the attention kernel of the plain forward, ``interp.sensor.hooks``). The
  block's own tokens and its keys' residual stream are untouched; on hybrid models the Gated-DeltaNet layers
  still read it (no softmax to suppress there);
- ``iclr_dropped``: whether ICLR drops the block (``interp.data.conditions.iclr_dropped`` on the full-context
  block entropies, ``interp.extraction.entropy.block_entropies``, of the block's step), so the figure asks:
  does ICLR drop anchors?

Each boundary's blocks are ranked by each measure (``rank_*``: 1 = most important). The suppression forward
builds a boolean [n, n] mask per layer call: renders up to ``max_tokens`` (default 8192: 64 MiB per mask) run;
longer ones are skipped and recorded.

Fields of ``anchors.json`` (``FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``blocks`` | ``[n_blocks] of {task_id, after_step, step, block, n_tokens, harm, received, suppression, iclr_dropped, entropy_bits, rank_harm, rank_received, rank_suppression}`` | object | harm, suppression: nats/token; received: attention per token; entropy: bits | one row per reasoning block of steps 1..b at each boundary |
| ``receiver_heads`` | ``[n_boundaries] of {task_id, after_step, heads}`` | object | - | heads: [[layer, head, kurtosis]] of the receiver heads at the boundary |
| ``agreement`` | ``{...}`` | object | Spearman rho | pooled over blocks: harm vs suppression, harm vs received, suppression vs received (rho, n); null with fewer than 3 blocks |
| ``iclr`` | ``{...}`` | object | - | dropped vs kept blocks: n and mean harm, suppression, received of each; anchors_dropped: the fraction of each boundary's top block by harm that ICLR drops |
| ``skipped`` | ``[n_skipped] of {task_id, after_step, n_tokens, reason}`` | object | n_tokens: tokens | boundaries not run (over max_tokens) |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.stats import kurtosis, spearmanr
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from interp.data.conditions import ICLR_RHO, iclr_dropped
from interp.data.deletions import Unit
from interp.data.render import Segment
from interp.data.trajectory import Trajectory
from interp.params import Integer, Items, Real, Text, param, validate
from interp.io import atomic_write_json
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.sensor.hooks import attention_implementation
from interp.sensor.limits import context_limit, over_limit, skip_record
from interp.sensor.protocol import Sensor
from interp.sensor.unembed import float_final_norm, logits as unembed_logits
from patching.harm import _target, check_boundaries, default_boundaries, set_harms

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("blocks", "[n_blocks] of {task_id, after_step, step, block, n_tokens, harm, received, suppression, "
          "iclr_dropped, entropy_bits, rank_harm, rank_received, rank_suppression}", "object",
          "harm, suppression: nats/token; received: attention per token; entropy: bits",
          "one row per reasoning block of steps 1..b at each boundary"),
    Field("receiver_heads", "[n_boundaries] of {task_id, after_step, heads}", "object", "-",
          "heads: [[layer, head, kurtosis]] of the receiver heads at the boundary"),
    Field("agreement", "{...}", "object", "Spearman rho", "pooled over blocks: harm vs suppression, harm vs "
          "received, suppression vs received (rho, n); null with fewer than 3 blocks"),
    Field("iclr", "{...}", "object", "-", "dropped vs kept blocks: n and mean harm, suppression, received of each; "
          "anchors_dropped: the fraction of each boundary's top block by harm that ICLR drops"),
    Field("skipped", "[n_skipped] of {task_id, after_step, n_tokens, reason}", "object", "n_tokens: tokens",
          "boundaries not run (over max_tokens)"),
    *RECORD_FIELDS,
)
SCHEMA = schema_dict(FIELDS)
IMPLEMENTATION = "interp_anchor_suppression"
MEASURES = ("harm", "received", "suppression")


@dataclass(frozen=True)
class AnchorConfig:
    """Reasoning anchors (module docstring): receiver heads, attention suppression, and ICLR's drop rule."""

    analysis: ClassVar[str] = "anchors"
    precision: ClassVar[str] = "float32"  # KLs of small suppressions: float32 like KL Repair

    receiver_heads: int = param(8, Integer(1), "Heads of highest kurtosis over blocks that define `received`.",
                                "heads")
    layers: tuple[int, ...] = param((), Items(Integer(0), min_len=0, unique=True),
                                    "Softmax-attention layers read and suppressed (empty: every one).")
    rho: float = param(ICLR_RHO, Real(0, 1), "ICLR's drop fraction per step (the decision the figure compares).")
    max_tokens: int = param(8192, Integer(1), "Boundaries whose teacher-forced render is longer are skipped and "
                            "recorded (the suppression mask is n x n).", "tokens")
    boundaries: tuple[str, ...] = param((), Items(Text("task_id@b"), min_len=0, unique=True),
                                        "Boundaries task_id@b (empty: set-level harm's default, the middle one of "
                                        "each trajectory).")

    def __post_init__(self) -> None:
        validate(self)


def singleton_harms(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], dict[Unit, float]]:
    """``(task_id, after_step) -> {reasoning unit: harm}`` of the singleton sets in DRSR / harm records."""
    out: dict[tuple[str, int], dict[Unit, float]] = {}
    for rec in records:
        for s in rec.get("sets", []):
            if len(s["members"]) == 1 and s["members"][0][0] == "reasoning":
                kind, step, block = s["members"][0]
                out.setdefault((rec["task_id"], int(rec["after_step"])), {})[(kind, int(step), int(block))] = s["harm"]
    return out


@contextmanager
def suppressed(sensor: Sensor, span: tuple[int, int] | None, layers: Sequence[int]) -> Iterator[None]:
    """The plain forward with keys ``[start, end)`` given zero attention from every later query at ``layers``
    (scores -inf before the softmax); ``span`` None: the unsuppressed reference through the same kernel."""
    wanted = set(layers)

    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:  # Any: transformers' attention-interface options
        kwargs.pop("is_causal", None)
        n_q, n_k = query.shape[2], key.shape[2]
        q_pos = torch.arange(n_k - n_q, n_k, device=query.device)[:, None]
        k_pos = torch.arange(n_k, device=query.device)[None, :]
        allowed = k_pos <= q_pos
        if span is not None and getattr(module, "layer_idx", None) in wanted:
            allowed = allowed & ~((k_pos >= span[0]) & (k_pos < span[1]) & (q_pos >= span[1]))
        out, _ = sdpa_attention_forward(module, query, key, value, allowed[None, None], is_causal=False, **kwargs)
        return out, None

    with attention_implementation(sensor.hf_model, IMPLEMENTATION, attention), float_final_norm(sensor):
        yield


def _log_probs(sensor: Sensor, ids: torch.Tensor, positions: list[int]) -> torch.Tensor:
    """Next-token log-probabilities [P, vocab] at ``positions`` of one plain forward (no cache)."""
    with torch.inference_mode():
        hidden = sensor.hf_model.base_model(input_ids=ids, use_cache=False).last_hidden_state
        return unembed_logits(sensor, hidden[0, positions]).float().log_softmax(-1)


def _received(sensor: Sensor, ids: torch.Tensor, queries: list[int], blocks: list[Segment],
              layers: Sequence[int]) -> np.ndarray:
    """Mean attention per block token from the query rows, [n_layers, n_heads, n_blocks]."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in layers]
    _, cache = sensor.run_with_cache(ids, names_filter=names, positions=queries)
    out = []
    for name in names:
        rows = cache[name][0].float().mean(1)  # [heads, n]: averaged over query positions
        out.append(torch.stack([rows[:, s.start:s.end].mean(-1) for s in blocks], -1).cpu().numpy())
    return np.stack(out)


def _ranks(values: Sequence[float | None]) -> list[int | None]:
    """1 = largest; None stays None (ties: the earlier block first)."""
    order = sorted((i for i, v in enumerate(values) if v is not None), key=lambda i: (-float(values[i] or 0.0), i))
    ranks: list[int | None] = [None] * len(values)
    for r, i in enumerate(order):
        ranks[i] = r + 1
    return ranks


def boundary_anchors(sensor: Sensor, traj: Trajectory, b: int, config: AnchorConfig,
                     harms: Mapping[Unit, float] | None, entropy: Mapping[tuple[int, int], float | None]
                     ) -> dict[str, Any]:
    """The block rows and receiver heads of boundary ``b`` (module docstring), or a ``skipped`` record.

    ``harms``: singleton harms of the boundary's reasoning units (from DRSR; measured here when None);
    ``entropy``: ``(step, block) -> ICLR's full-context entropy`` (``interp.extraction.entropy.block_entropies``,
    given by the caller: the patching layer does not import the extraction layer)."""
    full, y0, y1 = _target(traj, b, (), sensor.tokenizer)
    reason = over_limit(y1, context_limit(sensor, config.max_tokens))
    if reason:
        return {"skipped": skip_record(traj.task_id, b, y1, reason)}
    blocks = [s for s in full.spans("reasoning_block") if s.step is not None and s.step <= b and s.n_tokens]
    units: list[Unit] = [("reasoning", int(s.step or 0), int(s.block or 0)) for s in blocks]
    if harms is None:
        harms = {h.members[0]: h.harm for h in set_harms(sensor, traj, b, [(u,) for u in units],
                                                         target=(full, y0, y1))[1]}
    layers = list(config.layers) or list(sensor.full_attention_layers)
    ids = torch.tensor([full.input_ids[:y1]], device=sensor.device)
    queries = list(range(y0 - 1, y1 - 1))  # the positions predicting y's tokens
    received = _received(sensor, ids, queries, blocks, layers) if blocks else np.zeros((len(layers), 0, 0))
    heads: list[list[float]] = []
    score = [0.0] * len(blocks)
    if len(blocks) >= 2:
        kurt = np.nan_to_num(kurtosis(received, axis=-1, fisher=True, bias=True), nan=-np.inf)  # [layers, heads]
        flat = np.argsort(-kurt, axis=None, kind="stable")[: config.receiver_heads]
        chosen = [np.unravel_index(i, kurt.shape) for i in flat]
        heads = [[layers[int(li)], int(hi), float(kurt[li, hi])] for li, hi in chosen]
        score = [float(np.mean([received[li, hi, j] for li, hi in chosen])) for j in range(len(blocks))]
    elif blocks:
        score = [float(received[:, :, 0].mean())]
    with suppressed(sensor, None, layers):
        clean = _log_probs(sensor, ids, queries)
    kls = []
    for s in blocks:
        with suppressed(sensor, (s.start, s.end), layers):
            logq = _log_probs(sensor, ids, queries)
        kls.append(float((clean.exp() * (clean - logq)).sum(-1).mean()))
    by_step: dict[int, list[tuple[int, float | None]]] = {}
    for (step, block), e in entropy.items():
        by_step.setdefault(step, []).append((block, e))
    dropped: set[tuple[int, int]] = set()
    for step, pairs in by_step.items():
        pairs.sort()
        if all(e is not None for _, e in pairs):
            dropped |= {(step, pairs[i][0]) for i in iclr_dropped([float(e or 0.0) for _, e in pairs], config.rho)}
    rows: list[dict[str, Any]] = [{"task_id": traj.task_id, "after_step": b, "step": u[1], "block": u[2], "n_tokens": s.n_tokens,
             "harm": harms.get(u), "received": score[j], "suppression": kls[j],
             "iclr_dropped": (u[1], u[2]) in dropped, "entropy_bits": entropy.get((u[1], int(u[2] or 0)))}
            for j, (u, s) in enumerate(zip(units, blocks))]
    for measure in MEASURES:
        for row, rank in zip(rows, _ranks([r[measure] for r in rows])):
            row[f"rank_{measure}"] = rank
    return {"blocks": rows, "receiver_heads": {"task_id": traj.task_id, "after_step": b, "heads": heads}}


def _rho(a: Sequence[float], b: Sequence[float]) -> dict[str, Any] | None:
    """Spearman rho of two paired lists (None with fewer than 3 pairs)."""
    if len(a) < 3:
        return None
    rho = spearmanr(a, b).statistic
    return {"rho": None if not np.isfinite(rho) else float(rho), "n": len(a)}


def summarize_anchors(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``blocks``, ``receiver_heads``, ``agreement``, ``iclr`` and ``skipped`` of ``anchors.json`` (no model)."""
    rows = [r for res in results for r in res.get("blocks", [])]
    complete = [r for r in rows if all(r[m] is not None for m in MEASURES)]
    agreement = {f"{a}_vs_{b}": _rho([r[a] for r in complete], [r[b] for r in complete])
                 for a, b in (("harm", "suppression"), ("harm", "received"), ("suppression", "received"))}
    iclr: dict[str, Any] = {}
    for name, part in (("dropped", [r for r in complete if r["iclr_dropped"]]),
                       ("kept", [r for r in complete if not r["iclr_dropped"]])):
        iclr[name] = {"n": len(part), **{m: float(np.mean([r[m] for r in part])) if part else None
                                         for m in MEASURES}}
    tops = [r for r in complete if r["rank_harm"] == 1]
    iclr["anchors_dropped"] = float(np.mean([r["iclr_dropped"] for r in tops])) if tops else None
    iclr["n_anchors"] = len(tops)
    return {"schema": SCHEMA, "blocks": rows,
            "receiver_heads": [res["receiver_heads"] for res in results if "receiver_heads" in res],
            "agreement": agreement, "iclr": iclr,
            "skipped": [res["skipped"] for res in results if "skipped" in res]}


def run_anchors(sensor: Sensor, trajectories: Sequence[Trajectory], config: AnchorConfig,
                entropy: Callable[[Trajectory], Mapping[tuple[int, int], float | None]],
                harm_records: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """``anchors.json``'s analysis fields for the config's boundaries (``FIELDS`` but the record, which the stage
    adds): singleton harms are read from ``harm_records`` (DRSR parts or harm.json boundaries) where they cover a
    boundary, else measured; ``entropy(traj)`` gives ICLR's block entropies of a trajectory."""
    keys = check_boundaries(list(config.boundaries) or default_boundaries(trajectories), trajectories)
    by_id = {t.task_id: t for t in trajectories}
    known = singleton_harms(harm_records)
    results, entropies = [], {}
    for key in keys:
        task_id, _, b = key.rpartition("@")
        traj = by_id[task_id]
        if task_id not in entropies:
            entropies[task_id] = entropy(traj)
        results.append(boundary_anchors(sensor, traj, int(b), config, known.get((task_id, int(b))),
                                        entropies[task_id]))
    return summarize_anchors(results)


def write_anchors(doc: Mapping[str, Any], out_dir: Path | str) -> Path:
    """Write ``anchors.json`` into ``out_dir`` atomically."""
    path = Path(out_dir) / "anchors.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, dict(doc))
    return path
