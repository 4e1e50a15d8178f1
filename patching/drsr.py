"""DRSR's mechanistic appendix from one harm run per boundary: granularity, relations across depth, interaction
structure, attention density (``drsr.json``).

:func:`boundary_record` runs ``patching.harm.boundary_harm`` on units of every kind (steps and their blocks) and
one forward of the prompt at b (``patching.relations.prompt_capture``) that keeps, at every layer, each
candidate's span pool and the boundary token (``resid_pre``), and the boundary token's attention row at every
full-attention layer: the same forward the online set-risk gate runs (``patching.gate.SetGate``), so the gate's
supervision reads exactly what the gate reads when it runs. The record also keeps the history's step shapes
(``interp.data.deletions.step_shapes``: which sets would remove a step whole). :func:`summarize_drsr`
computes the four analyses from those records, without a model:

- ``granularity``: ``patching.granularity``;
- ``relations``: ``patching.relations.relations_by_layer`` (pair-ordering accuracy by layer of relation,
  block-only, mismatched-state, current-state-only and surface features, grouped CV by trajectory; the
  accuracy-vs-margin curve);
- ``interaction`` and ``attention_density``: ``patching.interaction``.

Fields of ``drsr.json`` (``FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``units`` | ``[n_kinds]`` | str | - | the unit kinds candidates were drawn from (UNIT_KINDS order) |
| ``margin`` | ``[]`` | float | nats/token | the primary pair-ordering margin |
| ``unsafe_threshold`` | ``[]`` | float | nats/token | a deletion with harm above this is unsafe (granularity, attention density) |
| ``proj_dim`` | ``[]`` | int or null | dims | stored representation size (null: d_model, not projected) |
| ``relation_layer`` | ``[]`` | int | 0-based layer | the layer of the margin curve and of the semantic overlap |
| ``granularity`` | ``{unsafe_threshold, step_range, block_range, n_unsafe_parents, n_unsafe_parents_with_safe_child, unsafe_parent_safe_child_fraction, steps}`` | object | harm: nats/token | step_range / block_range: {median, ci, n_states} of the within-state range of singleton harms (ci: 95% task bootstrap, null with < 3 tasks); the fraction of unsafe steps (harm > threshold) with a safe block (harm <= threshold); steps: [{task_id, after_step, step, position, harm, unsafe, min_child_harm, n_children, safe_child}] |
| ``relations`` | ``{n_sets, n_tasks, layers, families, margin_curve}`` | object | accuracy: fraction | families: {relation, block, mismatched, state, surface: [{layer, pair_accuracy, ci, n_pairs}]} (one row per captured layer; surface one row, layer null); margin_curve: {layer, margins [nats/token], accuracy: {sum, mean, max, min, <family>: [per margin]}} |
| ``interaction`` | ``{head_threshold, semantic_bins, by_size, by_composition, by_semantic, by_heads, by_span, sets}`` | object | interaction: nats/token | by_*: [{group, mean_interaction, ci, n_sets, n_tasks}]; sets: [{task_id, size, composition, semantic, heads, span, interaction}] |
| ``attention_density`` | ``{unsafe_threshold, layers, candidates}`` | object | attention mass per token | layers: [{layer, selected: {mean, n}, retained: {mean, n}}]; candidates: [{task_id, after_step, unit, harm, selected, density [per attention layer]}] |
| ``boundaries`` | ``[n_boundaries] of {task_id, after_step, target_tokens, nll_full, n_sets}`` | object | nats/token | the boundaries analysed (their harm records and representations are in the parts) |
| ``skipped`` | ``[n_skipped] of {task_id, after_step, n_tokens, reason}`` | object | n_tokens: tokens | boundaries not run (over max_tokens) |
| ``model`` | ``{...}`` | object or null | - | the sensor's describe() |
| ``parts`` | ``[]`` | str or null | - | the folder of the per-boundary records under drsr.json's folder (null: not written by the drsr stage) |"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from interp.data.deletions import UNIT_KINDS, history_units, parse_unit_kinds, step_shapes
from interp.data.trajectory import Trajectory
from interp.sensor.limits import DEFAULT_MAX_TOKENS
from interp.schema import Field, schema_dict
from interp.sensor.prefix import DEFAULT_BATCH_BYTES
from patching.granularity import UNSAFE, granularity
from patching.harm import DEFAULT_BUDGET, DRSR_MAX_K, MARGIN, boundary_harm
from patching.interaction import attention_density, interaction_structure
from patching.relations import PROJ_DIM, projection, prompt_capture, relations_by_layer

if TYPE_CHECKING:
    from interp.sensor.protocol import Sensor

FIELDS = (
    Field('schema', '{...}', 'object', '-', 'this table: {field: {shape, dtype, units, doc}}'),
    Field('units', '[n_kinds]', 'str', '-', 'the unit kinds candidates were drawn from (UNIT_KINDS order)'),
    Field('margin', '[]', 'float', 'nats/token', 'the primary pair-ordering margin'),
    Field('unsafe_threshold', '[]', 'float', 'nats/token', 'a deletion with harm above this is unsafe (granularity, attention density)'),
    Field('proj_dim', '[]', 'int or null', 'dims', 'stored representation size (null: d_model, not projected)'),
    Field('relation_layer', '[]', 'int', '0-based layer', 'the layer of the margin curve and of the semantic overlap'),
    Field('granularity', '{unsafe_threshold, step_range, block_range, n_unsafe_parents, n_unsafe_parents_with_safe_child, unsafe_parent_safe_child_fraction, steps}', 'object', 'harm: nats/token', 'step_range / block_range: {median, ci, n_states} of the within-state range of singleton harms (ci: 95% task bootstrap, null with < 3 tasks); the fraction of unsafe steps (harm > threshold) with a safe block (harm <= threshold); steps: [{task_id, after_step, step, position, harm, unsafe, min_child_harm, n_children, safe_child}]'),
    Field('relations', '{n_sets, n_tasks, layers, families, margin_curve}', 'object', 'accuracy: fraction', 'families: {relation, block, mismatched, state, surface: [{layer, pair_accuracy, ci, n_pairs}]} (one row per captured layer; surface one row, layer null); margin_curve: {layer, margins [nats/token], accuracy: {sum, mean, max, min, <family>: [per margin]}}'),
    Field('interaction', '{head_threshold, semantic_bins, by_size, by_composition, by_semantic, by_heads, by_span, sets}', 'object', 'interaction: nats/token', 'by_*: [{group, mean_interaction, ci, n_sets, n_tasks}]; sets: [{task_id, size, composition, semantic, heads, span, interaction}]'),
    Field('attention_density', '{unsafe_threshold, layers, candidates}', 'object', 'attention mass per token', 'layers: [{layer, selected: {mean, n}, retained: {mean, n}}]; candidates: [{task_id, after_step, unit, harm, selected, density [per attention layer]}]'),
    Field('boundaries', '[n_boundaries] of {task_id, after_step, target_tokens, nll_full, n_sets}', 'object', 'nats/token', 'the boundaries analysed (their harm records and representations are in the parts)'),
    Field('skipped', '[n_skipped] of {task_id, after_step, n_tokens, reason}', 'object', 'n_tokens: tokens', 'boundaries not run (over max_tokens)'),
    Field('model', '{...}', 'object or null', '-', "the sensor's describe()"),
    Field('parts', '[]', 'str or null', '-', "the folder of the per-boundary records under drsr.json's folder (null: not written by the drsr stage)"),
)


def boundary_record(sensor: Sensor, traj: Trajectory, b: int, max_k: int = DRSR_MAX_K, budget: int = DEFAULT_BUDGET,
                    seed: int = 0,
                    units: Sequence[str] = UNIT_KINDS, max_tokens: int = DEFAULT_MAX_TOKENS,
                    proj_dim: int | None = PROJ_DIM, batch_bytes: int = DEFAULT_BATCH_BYTES,
                    nest: bool = True) -> dict[str, Any]:
    """One boundary's harm record (its forwards sharing as ``batch_bytes`` and ``nest`` say,
    ``patching.harm.set_harms``) plus its candidates' representations and attention from the prompt's forward
    (``relations.prompt_capture``) and the history's step shapes."""
    kinds = parse_unit_kinds(units)
    record = boundary_harm(sensor, traj, b, max_k, budget, seed, kinds, max_tokens, batch_bytes=batch_bytes,
                           nest=nest)
    if record.get("skipped"):
        return record
    proj = projection(sensor.d_model, proj_dim) if proj_dim else None
    view = prompt_capture(sensor, traj, b, history_units(traj, b, kinds), list(range(sensor.n_layers)),
                          sensor.full_attention_layers, proj)
    return {**record, **view, "shapes": step_shapes(traj, b)}


def summarize_drsr(records: Sequence[dict[str, Any]], model: dict[str, Any] | None = None, margin: float = MARGIN,
                   unsafe: float = UNSAFE, relation_layer: int | None = None, proj_dim: int | None = PROJ_DIM,
                   n_boot: int = 1000, seed: int = 0, parts: str | None = None) -> dict[str, Any]:
    """The ``drsr.json`` document (``FIELDS``) from boundary records; pure: no model is run. ``parts``: the
    records' folder, relative to the document's (the readers of the parts find them through it)."""
    skipped = [{k: r[k] for k in ("task_id", "after_step", "n_tokens", "reason")} for r in records if r.get("skipped")]
    records = [r for r in records if not r.get("skipped")]
    layers = list(records[0]["layers"]) if records else []
    chosen = relation_layer if relation_layer is not None else (layers[len(layers) // 2] if layers else 0)
    if layers and chosen not in layers:
        raise ValueError(f"relation layer {chosen} was not captured (layers {layers[0]}..{layers[-1]})")
    kinds = {m[0] for r in records for s in r["sets"] for m in s["members"]}
    d_model = (model or {}).get("d_model")
    return {
        "schema": schema_dict(FIELDS),
        "units": [k for k in UNIT_KINDS if k in kinds],
        "margin": margin,
        "unsafe_threshold": unsafe,
        "proj_dim": proj_dim if proj_dim and (d_model is None or d_model > proj_dim) else None,
        "relation_layer": chosen,
        "granularity": granularity(records, unsafe, n_boot, seed),
        "relations": relations_by_layer(records, margin, chosen, n_boot=n_boot, seed=seed),
        "interaction": interaction_structure(records, layers.index(chosen) if layers else 0, n_boot=n_boot,
                                             seed=seed),
        "attention_density": attention_density(records, unsafe),
        "boundaries": [{"task_id": r["task_id"], "after_step": r["after_step"], "target_tokens": r["target_tokens"],
                        "nll_full": r["nll_full"], "n_sets": len(r["sets"])} for r in records],
        "skipped": skipped,
        "model": model,
        "parts": parts,
    }
