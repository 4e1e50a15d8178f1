"""A declared probe sweep: extraction then nested-CV probing for every cell of a grid, resumable.

``CONFIG.toml``::

    trajectories = "data/demo/trajectories.jsonl"
    out = "results/sweep"

    [grid]                       # every combination is one cell
    models = ["smollm2-135m"]
    conditions = ["full", "delete_all_reasoning"]
    layers = ["all"]             # all | full_attention | "0,4,8" | "0-7"
    poolings = [["last"], ["last", "mean_latest_step"]]

    [extract]                    # optional
    device = "cpu"
    dtype = "fp32"
    max_tokens = 42000

    [probe]                      # optional: any ProbeConfig field
    n_perm = 100

    [executor]                   # optional: where units run (default local)
    kind = "ray"                 # local | ray
    address = "auto"             # ray: join the running cluster (default: start a local one)
    workers = 8                  # ray actors (default: as many as the resources fit)
    num_cpus = 1                 # per worker
    num_gpus = 1                 # per worker (with device = "cuda")
    memory_gb = 40               # per worker, for scheduling
    retries = 2                  # re-submissions of a unit whose worker died

Cells that differ only in layers or poolings share their forwards: per
(model, condition) one store ``out/stores/<model>__<condition>__<hash>``
holds the union of the cells' layers and poolings (the hash names that
union), extracted once (its units through the executor), and each cell's
probe reads its subset into ``out/cells/<folder>/probe`` (skipped when its
``probe_results.json`` exists; the probes run through the executor too).
``out/summary.csv`` and ``summary.md`` list every cell's headline numbers and
where and how long its probe ran (``host``, ``worker``, ``seconds``, kept in
``out/cells/<folder>/where.json``) with the seconds of its store's extraction
in the run that made it (``extract_seconds``). One sweep driver per ``out``
(a writer lock). Left alone overnight, a killed sweep resumes where it
stopped.

Every key is type-checked and every value validated (conditions, layer
specs, poolings, ``[extract]``, ``[probe]``) before a model loads or ``out``
is created; errors name the file and the key (``[grid].conditions``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
import tomllib
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from interp.io import (UnitRun, Work, atomic_write_bytes, atomic_write_json, check_output_dir, inside,
                       read_json, safe_stem, writer_lock)
from interp.params import ConfigError
from interp.pipelines import stages
from interp.pipelines.executors import EXECUTORS, LocalExecutor, RayExecutor, make_executor
from probes.config import ProbeConfig

SECTIONS = {"trajectories", "out", "grid", "extract", "probe", "executor"}
GRID_KEYS = {"models", "conditions", "layers", "poolings"}
EXTRACT_KEYS = {"device", "dtype", "max_tokens"}
EXECUTOR_KEYS = {"kind", "address", "workers", "num_cpus", "num_gpus", "memory_gb", "retries"}


def load_sweep(path: Path) -> dict[str, Any]:
    """Read and check a sweep config; errors name the file and the key."""
    path = Path(path)
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: TOML nested too deeply to read") from None
    for section in ("grid", "extract", "executor", "probe"):
        if section in config and not isinstance(config[section], dict):
            raise ValueError(f"{path}: {section}: expected a [{section}] table, got {config[section]!r}")
    for where, keys, allowed in (("(top level)", config, SECTIONS), ("[grid]", config.get("grid", {}), GRID_KEYS),
                                 ("[extract]", config.get("extract", {}), EXTRACT_KEYS),
                                 ("[executor]", config.get("executor", {}), EXECUTOR_KEYS),
                                 ("[probe]", config.get("probe", {}), set(ProbeConfig.__dataclass_fields__))):
        unknown = sorted(set(keys) - allowed)
        if unknown:
            raise ValueError(f"{path}: {where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    for key in ("trajectories", "out", "grid"):
        if key not in config:
            raise ValueError(f"{path}: missing required key {key!r}")
    missing = sorted(GRID_KEYS - set(config["grid"]))
    if missing:
        raise ValueError(f"{path}: [grid]: missing key(s) {missing}")
    _check_values(path, config)
    return config


def _check_values(path: Path, config: dict[str, Any]) -> None:
    """ValueError naming the file and key of the first value of the wrong type or out of its domain."""
    from interp.data.conditions import check_condition_name
    from interp.extraction.batch import layer_numbers
    from interp.extraction.extract import ExtractConfig
    from interp.sensor.models import check_device, resolve_dtype

    def fail(key: str, message: str) -> None:
        raise ValueError(f"{path}: {key}: {message}")

    for key in ("trajectories", "out"):
        if not isinstance(config[key], str) or not config[key]:
            fail(key, f"expected a path string, got {config[key]!r}")
    grid = config["grid"]
    for key in GRID_KEYS:
        values = grid[key]
        if not isinstance(values, list) or not values:
            fail(f"[grid].{key}", f"expected a non-empty list, got {values!r}")
        for value in values:
            if key == "poolings":
                if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                    fail("[grid].poolings", f"expected a list of lists of pooling names (e.g. [[\"last\"]]), "
                                            f"got {value!r}")
            elif not isinstance(value, str):
                fail(f"[grid].{key}", f"expected a list of strings, got {value!r}")
    for key, value in grid.items():  # values checked before any model loads
        for item in value:
            try:
                if key == "conditions":
                    check_condition_name(item)
                elif key == "layers":
                    layer_numbers(item, "layers")
                elif key == "poolings":
                    ExtractConfig(layers=[0], poolings=list(item))
            except ConfigError as exc:
                fail(f"[grid].{key}", exc.reason)
            except ValueError as exc:
                fail(f"[grid].{key}", str(exc))
    extract = config.get("extract", {})
    for key, check in (("device", check_device), ("dtype", resolve_dtype),
                       ("max_tokens", lambda v: ExtractConfig(layers=[0], max_tokens=v))):
        if key in extract:
            try:
                check(extract[key])
            except ConfigError as exc:
                fail(f"[extract].{key}", exc.reason)
            except (ValueError, TypeError) as exc:
                fail(f"[extract].{key}", str(exc))
    executor = config.get("executor", {})
    if executor.get("kind", "local") not in EXECUTORS:
        fail("[executor].kind", f"use {' or '.join(EXECUTORS)}, got {executor['kind']!r}")
    if not isinstance(executor.get("address", ""), str):
        fail("[executor].address", f"expected a string, got {executor['address']!r}")
    for key, low in (("workers", 1), ("num_cpus", 0), ("num_gpus", 0), ("memory_gb", 0), ("retries", 0)):
        value = executor.get(key, low)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low \
                or (key in ("workers", "retries") and not isinstance(value, int)):
            fail(f"[executor].{key}", f"expected a number >= {low}, got {value!r}")
    try:
        probe_config(config)
    except ConfigError as exc:
        fail(f"[probe].{exc.field}", exc.reason)
    except (ValueError, TypeError) as exc:
        fail("[probe]", str(exc))


def probe_config(config: dict[str, Any]) -> ProbeConfig:
    """The sweep's ``[probe]`` section as a ProbeConfig (lists become tuples)."""
    return stages.probe_config(config.get("probe", {}))


def cells(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the grid, with a file-safe name."""
    grid = config["grid"]
    out = []
    for model, condition, layers, poolings in itertools.product(grid["models"], grid["conditions"], grid["layers"],
                                                                grid["poolings"]):
        name = "__".join([model, condition, layers, "+".join(poolings)])
        out.append({"name": name, "folder": safe_stem(name), "model": model, "condition": condition,
                    "layers": layers, "poolings": poolings})
    return out


def executor_of(config: dict[str, Any], kind: str | None = None,
                address: str | None = None) -> LocalExecutor | RayExecutor:
    """The sweep's executor from its ``[executor]`` section; ``kind``/``address`` (command line) override it."""
    section = dict(config.get("executor", {}))
    memory = section.pop("memory_gb", None)
    chosen = kind or section.get("kind", "local")
    section.pop("kind", None)
    if address:
        section["address"] = address
    if chosen == "local":
        return make_executor("local")
    return make_executor(chosen, memory=int(memory * 2**30) if memory else None, **section)


def _probe_cell(probe_config: ProbeConfig, plan: dict[str, dict[str, Any]], _ctx: Any, name: str) -> None:
    """Probe one cell on its subset of the shared store (a unit of the sweep's probe work)."""
    cell = plan[name]
    stages.probe(Path(cell["store"]), Path(cell["out"]), probe_config, condition=cell["condition"],
                 layers=cell["layers"], poolings=cell["poolings"])


def run_sweep(path: Path, executor: str | None = None, address: str | None = None) -> pd.DataFrame:
    """Run (or resume) every cell, one extraction per (model, condition); write and return the summary table."""
    config = load_sweep(path)
    out = Path(config["out"])
    try:
        check_output_dir(out, "out")
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    runner = executor_of(config, executor, address)
    with writer_lock(out, command=f"sweep {path}"):
        try:
            plan, extract_seconds = _extract_all(config, runner, out)
        except ValueError as exc:  # a config value only the model can check ([grid].layers): name the file
            if str(exc).startswith("["):
                raise ValueError(f"{path}: {exc}") from None
            raise
        names = [n for n in plan if not (Path(plan[n]["out"]) / "probe_results.json").exists()]
        work = Work("probe", names, lambda: None, partial(_probe_cell, probe_config(config), plan),
                    lambda n: (Path(plan[n]["out"]) / "probe_results.json").exists())
        records = runner.run(work, progress=True)
        for name, record in records.items():
            if record.error is None:
                atomic_write_json(Path(plan[name]["out"]).parent / "where.json",
                                  {**asdict(record), "extract_seconds": extract_seconds.get(name)})
        failed = {n: r.error for n, r in records.items() if r.error is not None}
        if failed:
            raise RuntimeError(f"sweep cells failed after their retries: {failed}")
        return _summary(out, cells(config))


def _extract_all(config: dict[str, Any], runner: Any, out: Path) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """One store per (model, condition) with the union of its unfinished cells' layers and poolings; the probe
    plan of every unfinished cell and the seconds its store's extraction took in this run."""
    from interp.extraction.batch import parse_layers
    from interp.extraction.extract import ExtractConfig
    from interp.sensor.limits import DEFAULT_MAX_TOKENS

    trajs = stages.trajectories(Path(config["trajectories"]), strict=False)
    extract = config.get("extract", {})
    device, dtype = extract.get("device", "cpu"), extract.get("dtype", "auto")
    local = isinstance(runner, LocalExecutor)
    grid = cells(config)
    plan: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    for model in dict.fromkeys(c["model"] for c in grid):
        todo = [c for c in grid if c["model"] == model
                and not (inside(out, out / "cells" / c["folder"]) / "probe" / "probe_results.json").exists()]
        if not todo:
            continue
        sensor = stages.sensor(model, device=device, dtype=dtype, config=ExtractConfig)  # one model at a time
        for condition in dict.fromkeys(c["condition"] for c in todo):
            mine = [c for c in grid if c["model"] == model and c["condition"] == condition]
            chosen = {c["name"]: parse_layers(c["layers"], sensor.n_layers, sensor.full_attention_layers,
                                                   "[grid].layers")
                      for c in mine}
            layers = sorted({x for v in chosen.values() for x in v})
            poolings = list(dict.fromkeys(p for c in mine for p in c["poolings"]))
            digest = hashlib.sha1(json.dumps([layers, poolings]).encode()).hexdigest()[:10]
            store = inside(out, out / "stores" / f"{safe_stem(model)}__{condition}__{digest}")
            cfg = ExtractConfig(layers=layers, poolings=poolings,
                                max_tokens=extract.get("max_tokens", DEFAULT_MAX_TOKENS))
            started = time.perf_counter()
            stages.extract(sensor, trajs, [condition], cfg, store, executor=None if local else runner,
                           load=None if local else partial(stages.sensor, model, None, device, dtype))
            for c in mine:
                seconds[c["name"]] = time.perf_counter() - started
                plan[c["name"]] = {"store": str(store), "out": str(out / "cells" / c["folder"] / "probe"),
                                   "condition": condition, "layers": chosen[c["name"]],
                                   "poolings": list(c["poolings"])}
        del sensor
    return plan, seconds


def _summary(out: Path, grid: list[dict[str, Any]]) -> pd.DataFrame:
    """The summary table of every cell (headline numbers, where and how long), written as CSV and Markdown."""
    rows = []
    for cell in grid:
        root = inside(out, out / "cells" / cell["folder"])
        res = read_json(root / "probe" / "probe_results.json")
        where_path = root / "where.json"
        where = read_json(where_path) if where_path.exists() else asdict(UnitRun(cell["name"]))
        rows.append({"cell": cell["name"], "folder": cell["folder"], "model": cell["model"], "condition": cell["condition"],
                     "layers": cell["layers"], "poolings": "+".join(cell["poolings"]), "auroc": res["auroc"],
                     "auroc_lo": (res["auroc_ci"] or [None, None])[0], "auroc_hi": (res["auroc_ci"] or [None, None])[1],
                     "ap": res["ap"], "balanced_accuracy": res["balanced_accuracy"],
                     "gain_auroc": (res.get("gain") or {}).get("auroc"),
                     "gain_lo": ((res.get("gain") or {}).get("auroc_ci") or [None, None])[0],
                     "gain_hi": ((res.get("gain") or {}).get("auroc_ci") or [None, None])[1],
                     "permutation_p": res["permutation_p"], "permutation_p_position": res.get("permutation_p_position"),
                     "n_samples": res["n_samples"], "n_tasks": res["n_tasks"], "host": where["host"],
                     "worker": where["worker"], "seconds": where["seconds"],
                     "extract_seconds": where.get("extract_seconds")})
    summary = pd.DataFrame(rows)
    atomic_write_bytes(out / "summary.csv", summary.to_csv(index=False).encode())
    header = "| " + " | ".join(summary.columns) + " |\n|" + "---|" * len(summary.columns) + "\n"
    body = "".join("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |\n"
                   for row in summary.itertuples(index=False))
    atomic_write_bytes(out / "summary.md", (header + body).encode())
    return summary
