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

Relations, interaction and attention density are compared with DRSR, so they read the sets of DRSR's block kinds
only (``patching.harm.compared_record``); a set holding a whole step enters granularity alone (``harm.json``
reports such sets apart, under ``step_sets``). With a gate scorer file (``interp drsr --gate-scorer``) the
attention density splits the candidates by the gate's selection at each boundary (:func:`gate_selection`,
DRSR's split); without one by exact singleton harm (the toolkit's split, labelled so).

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
| ``attention_density`` | ``{split, scorer, unsafe_threshold, layers, candidates}`` | object | attention mass per token | split: "gate" (DRSR's: the gate of the scorer file ``scorer`` selects among its pool at each boundary) or "harm" (the toolkit's, no scorer: singleton harm <= unsafe_threshold selects); layers: [{layer, selected: {mean, n}, retained: {mean, n}}]; candidates: [{task_id, after_step, unit, harm, selected, part, density [per attention layer]}] (part: the candidate's trajectory's part of the scorer's split, train / validation / test, null outside it or with split harm; candidates of DRSR's block kinds only) |
| ``boundaries`` | ``[n_boundaries] of {task_id, after_step, target_tokens, nll_full, n_sets}`` | object | nats/token | the boundaries analysed (their harm records and representations are in the parts) |
| ``skipped`` | ``[n_skipped] of {task_id, after_step, n_tokens, reason}`` | object | n_tokens: tokens | boundaries not run (over max_tokens) |
| ``model`` | ``{...}`` | object or null | - | the sensor's describe() |
| ``parts`` | ``[]`` | str or null | - | the folder of the per-boundary records under drsr.json's folder (null: not written by the drsr stage) |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.data.deletions import UNIT_KINDS, Unit, history_units, parse_unit_kinds, step_shapes
from interp.data.trajectory import Trajectory
from interp.io import read_json, safe_stem
from interp.sensor.limits import DEFAULT_MAX_TOKENS
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.sensor.prefix import DEFAULT_BATCH_BYTES
from patching.config import DrsrConfig
from patching.gate import GateModel, decide_view, online_view, pool_members
from patching.granularity import UNSAFE, granularity
from patching.harm import DEFAULT_BUDGET, DRSR_MAX_K, MARGIN, boundary_harm, compared_record
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
    Field('attention_density', '{split, scorer, unsafe_threshold, layers, candidates}', 'object', 'attention mass per token', 'split: "gate" (DRSR\'s: the gate of the scorer file ``scorer`` selects among its pool at each boundary) or "harm" (the toolkit\'s, no scorer: singleton harm <= unsafe_threshold selects); layers: [{layer, selected: {mean, n}, retained: {mean, n}}]; candidates: [{task_id, after_step, unit, harm, selected, part, density [per attention layer]}] (part: the candidate\'s trajectory\'s part of the scorer\'s split, train / validation / test, null outside it or with split harm; candidates of DRSR\'s block kinds only)'),
    Field('boundaries', '[n_boundaries] of {task_id, after_step, target_tokens, nll_full, n_sets}', 'object', 'nats/token', 'the boundaries analysed (their harm records and representations are in the parts)'),
    Field('skipped', '[n_skipped] of {task_id, after_step, n_tokens, reason}', 'object', 'n_tokens: tokens', 'boundaries not run (over max_tokens)'),
    Field('model', '{...}', 'object or null', '-', "the sensor's describe()"),
    Field('parts', '[]', 'str or null', '-', "the folder of the per-boundary records under drsr.json's folder (null: not written by the drsr stage)"),
    *RECORD_FIELDS,
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


def stored_dim(proj_dim: int | None, d_model: int | None) -> int | None:
    """The size the records store representations at: ``proj_dim``, or None (not projected) when it is 0 or
    not smaller than the model's ``d_model``."""
    return proj_dim if proj_dim and (d_model is None or d_model > proj_dim) else None


def check_gate(gate: GateModel, stored: int | None, scorer: str | None = None) -> None:
    """ValueError unless the gate reads representations of the size these records store (``stored_dim``)."""
    if gate.model.get("proj_dim") != stored:
        raise ValueError(f"{scorer or 'gate scorer'}: trained on representations projected to "
                         f"{gate.model.get('proj_dim')} dims (null: not projected), these DRSR records hold {stored}")


def gate_selection(records: Sequence[dict[str, Any]], gate: GateModel
                   ) -> dict[tuple[str, int], tuple[list[Unit], list[Unit]]]:
    """Per boundary (task_id, after_step): the units the gate deletes there and its pool (the units it could
    delete), from each record's online view (``patching.gate.decide_view``: the online gate's own choice)."""
    out = {}
    for rec in records:
        view = online_view(rec)
        units = [tuple(c["unit"]) for c in view["candidates"]]
        choice = decide_view(gate, view)
        out[(rec["task_id"], rec["after_step"])] = (
            [units[i] for i in choice.members or ()],
            [units[i] for i in pool_members(view, gate.setting, gate.unit_kinds)])
    return out


def summarize_drsr(records: Sequence[dict[str, Any]], model: dict[str, Any] | None = None, margin: float = MARGIN,
                   unsafe: float = UNSAFE, relation_layer: int | None = None, proj_dim: int | None = PROJ_DIM,
                   *, n_boot: int, seed: int = 0, parts: str | None = None, gate: GateModel | None = None,
                   scorer: str | None = None) -> dict[str, Any]:
    """The ``drsr.json`` document (``FIELDS``) from boundary records; pure: no model is run. ``parts``: the
    records' folder, relative to the document's (the readers of the parts find them through it). Granularity
    reads every set; relations, interaction and attention density (compared with DRSR) read the sets of DRSR's
    block kinds only (``patching.harm.compared_record``). ``gate`` (read from the scorer file ``scorer``): the
    attention density is split by its selection (DRSR's split), else by exact harm (the toolkit's)."""
    skipped = [{k: r[k] for k in ("task_id", "after_step", "n_tokens", "reason")} for r in records if r.get("skipped")]
    records = [r for r in records if not r.get("skipped")]
    layers = list(records[0]["layers"]) if records else []
    chosen = relation_layer if relation_layer is not None else (layers[len(layers) // 2] if layers else 0)
    if layers and chosen not in layers:
        raise ValueError(f"relation layer {chosen} was not captured (layers {layers[0]}..{layers[-1]})")
    kinds = {m[0] for r in records for s in r["sets"] for m in s["members"]}
    stored = stored_dim(proj_dim, (model or {}).get("d_model"))
    if gate is not None:
        check_gate(gate, stored, scorer)
    compared = [compared_record(r) for r in records]
    selection = gate_selection(compared, gate) if gate is not None else None
    return {
        "schema": schema_dict(FIELDS),
        "units": [k for k in UNIT_KINDS if k in kinds],
        "margin": margin,
        "unsafe_threshold": unsafe,
        "proj_dim": stored,
        "relation_layer": chosen,
        "granularity": granularity(records, unsafe, n_boot=n_boot, seed=seed),
        "relations": relations_by_layer(compared, margin, chosen, n_boot=n_boot, seed=seed),
        "interaction": interaction_structure(compared, layers.index(chosen) if layers else 0, n_boot=n_boot,
                                             seed=seed),
        "attention_density": attention_density(compared, unsafe, selection, scorer,
                                               gate.split if gate is not None else None),
        "boundaries": [{"task_id": r["task_id"], "after_step": r["after_step"], "target_tokens": r["target_tokens"],
                        "nll_full": r["nll_full"], "n_sets": len(r["sets"])} for r in records],
        "skipped": skipped,
        "model": model,
        "parts": parts,
    }


PARTS_PREFIX = "drsr."  # every parts folder's name starts so (:func:`parts_folder`; read back by :func:`drsr_records`)


def parts_folder(config: DrsrConfig) -> str:
    """The name of the folder (under ``parts/``) holding the per-boundary records of a run under ``config``: one
    per setting that changes a record, so a re-run with other settings never reuses another's parts."""
    name = f"{PARTS_PREFIX}{'+'.join(config.units)}.k{config.max_k}.n{config.budget}.s{config.seed}.p{config.proj_dim}"
    return name + (f".t{config.max_tokens}" if config.max_tokens != DEFAULT_MAX_TOKENS else "")


def drsr_records(drsr_dir: Path, parts: Path | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The boundary records of an ``interp drsr`` run (its ``drsr.json`` and per-boundary parts) and the
    ``drsr.json`` document; errors name the missing file or folder."""
    drsr_dir = Path(drsr_dir)
    doc_path = drsr_dir / "drsr.json"
    if not doc_path.is_file():
        raise FileNotFoundError(f"{doc_path}: no drsr.json (run `interp drsr --out {drsr_dir}` first)")
    doc = read_json(doc_path)
    keys = [f"{b['task_id']}@{b['after_step']}" for b in doc.get("boundaries", [])]
    if parts is None and doc.get("parts"):
        parts = drsr_dir / doc["parts"]  # the folder the drsr stage wrote them to (patching.drsr.FIELDS)
    if parts is None:  # a drsr.json that does not name its parts: the one folder holding all its boundaries
        found = sorted(p for p in (drsr_dir / "parts").glob(f"{PARTS_PREFIX}*") if p.is_dir())
        complete = [p for p in found if all((p / f"{safe_stem(k)}.json").is_file() for k in keys)]
        if not complete:
            raise FileNotFoundError(f"{drsr_dir / 'parts'}: no drsr.* part folder with the {len(keys)} boundaries "
                                    "of drsr.json (the gate trains on the parts interp drsr writes)")
        if len(complete) > 1:
            raise ValueError(f"{drsr_dir / 'parts'}: several DRSR part folders hold these boundaries "
                             f"({', '.join(p.name for p in complete)}); name one with --parts")
        parts = complete[0]
    records = []
    for k in keys:
        path = Path(parts) / f"{safe_stem(k)}.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no part for boundary {k}")
        rec = read_json(path)
        if not isinstance(rec, dict) or "sets" not in rec:
            raise ValueError(f"{path}: not a DRSR boundary record (no sets)")
        if "candidates" not in rec or "prompt_tokens" not in rec:
            raise ValueError(f"{path}: a record without captured candidates or prompt_tokens (parts of an older "
                             "interp drsr: delete the parts folder and re-run interp drsr)")
        records.append(rec)
    return records, doc
