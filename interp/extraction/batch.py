"""Extraction of a whole trajectory file into an activation store, with progress, resume and shards.

Units are (trajectory, condition) pairs. ``shard=(I, N)`` takes the units
that ``interp.io.balanced_shards`` gives shard I by token count (the render
at the unit's last boundary, longest first to the least-loaded shard). An
``executor`` (``interp.pipelines.executors``) may run the units elsewhere:
each worker loads the model once (``load``) and writes its finished units
into the shared store directory, atomically, exactly as the in-process loop.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp import __version__
from interp.data.conditions import CONDITIONS, apply_condition, validate_condition
from interp.data.render import render
from interp.data.trajectory import Trajectory
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.extraction.store import Store, unit_name
from interp.io import (
    Executor,
    Interrupted,
    Work,
    hold_point,
    read_json,
    record_failures,
    remove_stale_temps,
    shard_keys,
)
from interp.progress import track
from interp.sensor.protocol import Sensor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def layer_numbers(spec: str, option: str = "layers") -> tuple[set[int], bool]:
    """The layer numbers a spec names as written (before the 1-based shift) and whether it is ``1based:``;
    ValueError naming ``option`` for bad syntax or an empty selection (``3-1``). ``all``/``full_attention``: empty set."""
    if spec in ("all", "full_attention"):
        return set(), False
    one_based = spec.startswith("1based:")
    layers: set[int] = set()
    for part in spec.removeprefix("1based:").split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            chosen = range(int(lo), int(hi) + 1) if sep else [int(part)]
        except ValueError:
            raise ValueError(f"{option} {spec!r}: bad layer spec {part!r}; use all, full_attention, 0,4,8, 0-7 or "
                             "1based:4,8,32") from None
        if not chosen:
            raise ValueError(f"{option} {spec!r}: empty range {part!r} (write the lower layer first)")
        layers.update(chosen)
    return layers, one_based


def parse_layers(spec: str, n_layers: int, full_attention: list[int], option: str = "layers") -> list[int]:
    """``all`` | ``full_attention`` | ``"0,4,8"`` | ``"0-7"`` (mixable with commas) -> sorted 0-based layers.

    Layers are 0-based (``resid_pre`` of layer l is ``hidden_states[l]``); the
    reference study numbers them from 1. ``"1based:4,8,32"`` (ranges too) takes
    1-based numbers and returns them minus one. A plain list that is exactly
    the full-attention layers plus one (the study's numbering typed as 0-based)
    draws a warning. Errors name ``option`` (``--layers``, a sweep key).
    """
    if spec == "all":
        return list(range(n_layers))
    if spec == "full_attention":
        return list(full_attention)
    numbers, one_based = layer_numbers(spec, option)
    body = spec.removeprefix("1based:")
    shift = 1 if one_based else 0
    layers = {x - shift for x in numbers}
    bad = sorted(x + shift for x in layers if not 0 <= x < n_layers)
    if bad:
        raise ValueError(f"{option} {spec!r}: layers {bad} out of range {shift}..{n_layers - 1 + shift}"
                         + (" (1-based)" if one_based else " (0-based; use 1based:... for the study's numbering)"))
    if not one_based and full_attention and layers == {x + 1 for x in full_attention} \
            and not layers <= set(full_attention):
        warnings.warn(f"--layers {spec}: these are the full-attention layers numbered from 1 (the reference study's "
                      f"numbering); layers are 0-based here, so they select {sorted(layers)}, not "
                      f"{sorted(full_attention)}. Write 1based:{body} or full_attention for those.", stacklevel=2)
    return sorted(layers)


def parse_boundaries(spec: str, trajectories: list[Trajectory], option: str = "--boundaries") -> list[int]:
    """``"2,4"`` -> sorted distinct boundaries, each in 1..n_steps of every trajectory; errors name ``option``."""
    found: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part.lstrip("-").isdigit():
            raise ValueError(f"{option} {spec!r}: {part!r} is not an integer boundary b (after step b)")
        found.add(int(part))
    for traj in trajectories:
        bad = sorted(b for b in found if not 1 <= b <= traj.n_steps)
        if bad:
            raise ValueError(f"{option} {spec!r}: {', '.join(map(str, bad))} out of range 1..{traj.n_steps} "
                             f"({traj.task_id} has {traj.n_steps} steps)")
    return sorted(found)


def parse_shard(spec: str | None) -> tuple[int, int]:
    """``"I/N"`` -> (I, N) with 0 <= I < N; None -> (0, 1)."""
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"bad shard {spec!r}: use I/N, e.g. 0/4") from None
    if not 0 <= i < n:
        raise ValueError(f"bad shard {spec!r}: need 0 <= I < N")
    return i, n


def condition_params(sensor: Sensor, conditions: Iterable[str],
                     max_tokens: int | None = None) -> dict[str, dict[str, Any]]:
    """What the model-dependent conditions need from the sensor: block scorers (ICLR), its tokenizer (random r)."""
    from interp.extraction.entropy import EntropyScorer
    from interp.sensor.limits import DEFAULT_MAX_TOKENS

    limit = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    needs = {
        "iclr": lambda: {"scorer": EntropyScorer(sensor, limit, context="online")},
        "iclr_step_only": lambda: {"scorer": EntropyScorer(sensor, limit, context="step_only")},
        "random": lambda: {"tokenizer": sensor.tokenizer},
    }
    return {name: needs[name]() for name in dict.fromkeys(conditions) if name in needs}


def render_tokens(traj: Trajectory, after_step: int, tokenizer: PreTrainedTokenizerBase,
                  condition: str = "full") -> int:
    """Tokens of the render at ``after_step`` under ``condition`` (``full`` for model-dependent conditions):
    the cost of a unit when splitting work over shards."""
    counter = lambda s: len(tokenizer.encode(s, add_special_tokens=False))  # noqa: E731
    try:
        edited, _ = apply_condition(condition, traj, after_step, counter=counter)
    except ValueError:  # a condition that needs the model (ICLR scorer, random's tokenizer): the full history
        edited = traj
    return render(edited, after_step, tokenizer).n_tokens


def unit_costs(trajectories: list[Trajectory], conditions: list[str], tokenizer: PreTrainedTokenizerBase,
               boundaries: list[int] | None = None) -> dict[str, int]:
    """Token cost of every (trajectory, condition) unit: its render at the last requested boundary."""
    return {unit_name(t.task_id, c): render_tokens(t, max(boundaries) if boundaries else t.n_steps, tokenizer, c)
            for t in trajectories for c in conditions}


def trajectories_sha256(trajectories: list[Trajectory]) -> str:
    """sha256 of the trajectories' JSON lines: the one input hash a store or a sharded run records."""
    return hashlib.sha256("".join(json.dumps(t.to_json(), sort_keys=True) + "\n"
                                  for t in trajectories).encode()).hexdigest()


def store_settings(sensor: Sensor, config: ExtractConfig) -> dict[str, Any]:
    """Settings that must match for two runs to share a store."""
    return {"model": sensor.spec, "revision": sensor.revision, "dtype": str(sensor.dtype).removeprefix("torch."),
            "d_model": sensor.d_model, "layer_types": sensor.layer_types, **config.to_json(),
            "code_version": __version__}


def check_request(
    sensor: Sensor,
    trajectories: list[Trajectory],
    conditions: list[str],
    config: ExtractConfig,
    shard: tuple[int, int] = (0, 1),
    boundaries: list[int] | None = None,
    condition_params: dict[str, dict[str, Any]] | None = None,
) -> None:
    """ValueError unless an extraction request is valid as a whole (see :func:`extract_to_store`)."""
    config.check_sensor(sensor)
    if isinstance(conditions, str) or not conditions:
        raise ValueError(f"conditions must be a non-empty list of: {', '.join(CONDITIONS)}; got {conditions!r}")
    if len(set(conditions)) != len(conditions):
        raise ValueError(f"conditions repeat a name: {conditions}")
    params = condition_params or {}
    extra = sorted(set(params) - set(conditions))
    if extra:
        raise ValueError(f"condition_params for condition(s) not requested: {', '.join(extra)}")
    for cond in conditions:
        validate_condition(cond, params.get(cond))
    i, n = shard
    if not 0 <= i < n:
        raise ValueError(f"bad shard {shard!r}: need 0 <= I < N")
    if boundaries is not None:
        if any(isinstance(b, bool) or not isinstance(b, int) for b in boundaries):
            raise ValueError(f"boundaries must be ints, got {boundaries!r}")
        for traj in trajectories:
            bad = [b for b in boundaries if not 1 <= b <= traj.n_steps]
            if bad:
                raise ValueError(f"{traj.task_id}: boundaries {bad} out of range 1..{traj.n_steps}")


def extract_to_store(
    sensor: Sensor,
    trajectories: Iterable[Trajectory],
    conditions: list[str],
    config: ExtractConfig,
    store_dir: Path,
    shard: tuple[int, int] = (0, 1),
    boundaries: list[int] | None = None,
    condition_params: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
    input_sha256: str | None = None,
    executor: Executor | None = None,
    load: Callable[[], Any] | None = None,
) -> dict[str, int]:
    """Extract every (trajectory, condition) unit of this shard into the store; skip finished units.

    Everything is checked (config against the model, condition names and parameters, boundaries,
    shard) before the store directory or its ``store.json`` is created or touched. ``input_sha256``
    (default :func:`trajectories_sha256`, what the CLI, the sweep and the demo record) and the shard's units
    are recorded in ``store.json``. With an ``executor`` the units run there; workers build their model with ``load``
    and the model-dependent condition parameters themselves.
    """
    trajectories = list(trajectories)
    check_request(sensor, trajectories, conditions, config, shard, boundaries, condition_params)
    store = Store(Path(store_dir))
    settings = {**store_settings(sensor, config), "boundaries": boundaries}  # None: every boundary
    units = {unit_name(t.task_id, c): (t, c) for t in trajectories for c in conditions}
    costs = unit_costs(trajectories, conditions, sensor.tokenizer, boundaries) if shard[1] > 1 or executor else {}
    mine = shard_keys({k: costs.get(k, 1) for k in units}, shard)
    run = {"shard": {"index": shard[0], "count": shard[1]},
           "input_sha256": input_sha256 or trajectories_sha256(trajectories), "units": sorted(mine)}
    if shard[1] > 1:
        run["all_units"] = sorted(units)
    with store.lock(f"extract shard {shard[0]}/{shard[1]}"):
        store.open(settings, run)
        remove_stale_temps(store.units_dir)
        return _extract_units(sensor, store, units, mine, costs, config, boundaries, condition_params,
                              progress, settings, executor, load)


def _extract_units(sensor: Sensor, store: Store, units: dict[str, tuple[Trajectory, str]], mine: list[str],
                   costs: dict[str, int], config: ExtractConfig, boundaries: list[int] | None,
                   condition_params: dict[str, dict[str, Any]] | None, progress: bool, settings: dict[str, Any],
                   executor: Executor | None, load: Callable[[], Any] | None) -> dict[str, int]:
    """:func:`extract_to_store` under the store's writer lock: run the unfinished units of ``mine``."""
    todo = [k for k in mine if not store.is_done(*_unit_key(units[k]))]
    counts = {"units": len(mine), "skipped_done": len(mine) - len(todo), "samples": 0, "skipped_long": 0, "tokens": 0}
    if executor is not None:
        params_of = condition_params_factory(config.max_tokens, condition_params)
        work = Work("extract", todo, load or (lambda: sensor),
                    lambda ctx, key: _extract_unit(ctx, store, units[key], config, boundaries, params_of, settings),
                    lambda key: store.is_done(*_unit_key(units[key])), {k: costs[k] for k in todo})
        record_failures(store.root / "failed.json", executor.run(work, progress))
        for key in todo:
            rows = read_json(store.units_dir / f"{key}.json")["rows"]
            counts["samples"] += sum(r["status"] == "ok" for r in rows)
            counts["skipped_long"] += sum(r["status"] == "skipped" for r in rows)
            counts["tokens"] += sum(r["n_tokens"] for r in rows if r["status"] == "ok")
        store.finalize()
        return counts
    with track("extract", total=len(todo), unit="units", enabled=progress) as bar:
        for done, key in enumerate(todo, 1):
            try:
                rows = _extract_unit(sensor, store, units[key], config, boundaries,
                                     lambda _s, cond: (condition_params or {}).get(cond), settings)
            except KeyboardInterrupt:
                raise Interrupted(sum(store.is_done(*_unit_key(units[k])) for k in mine), len(mine)) from None
            counts["samples"] += sum(r.status == "ok" for r in rows)
            counts["skipped_long"] += sum(r.status == "skipped" for r in rows)
            tokens = sum(r.n_tokens for r in rows if r.status == "ok")
            counts["tokens"] += tokens
            bar.advance(tokens=tokens, info=f"{counts['samples']} samples, last {key}")
            hold_point(done)
    store.finalize()
    return counts


def _unit_key(unit: tuple[Trajectory, str]) -> tuple[str, str]:
    return unit[0].task_id, unit[1]


def condition_params_factory(max_tokens: int,
                             given: dict[str, dict[str, Any]] | None) -> Callable[[Any, str], dict[str, Any] | None]:
    """``params(sensor, condition)`` on a worker: the given parameters, with the model-dependent ones (ICLR
    scorer, tokenizer) built once per worker sensor and condition from the worker's own sensor."""
    built: dict[tuple[int, str], dict[str, Any]] = {}

    def params(sensor: Sensor, condition: str) -> dict[str, Any] | None:
        key = (id(sensor), condition)
        if key not in built:
            built[key] = condition_params(sensor, [condition], max_tokens).get(condition) or {}
        merged = {**(given or {}).get(condition, {}), **built[key]}
        return merged or None
    return params


def _extract_unit(sensor: Sensor, store: Store, unit: tuple[Trajectory, str], config: ExtractConfig,
                  boundaries: list[int] | None, params: Callable[[Any, str], dict[str, Any] | None],
                  settings: dict[str, Any]) -> list[Any]:
    """Extract one (trajectory, condition) unit and write it into the store (atomically); its rows."""
    traj, cond = unit
    rows = extract_trajectory(sensor, traj, cond, config, boundaries, params(sensor, cond))
    store.write_unit(traj, cond, rows, settings)
    return rows
