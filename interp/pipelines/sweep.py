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

Each cell writes ``out/cells/<folder>/store`` (the activation store, resumed
per unit) and ``out/cells/<folder>/probe`` (skipped when its
``probe_results.json`` exists); ``out/summary.csv`` and ``summary.md`` list
every cell's headline numbers, its name and its folder (``interp.io.safe_stem``
of the name). Left alone overnight, a killed sweep resumes where it stopped.

Every key is type-checked and every value validated (conditions, layer
specs, poolings, ``[extract]``, ``[probe]``) before a model loads or ``out``
is created; errors name the file and the key (``[grid].conditions``). One
sweep at a time writes into ``out`` (``interp.io.writer_lock``).
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd

from interp.io import atomic_write_bytes, check_output_dir, inside, read_json, safe_stem, writer_lock
from interp.pipelines import stages
from probes.config import ProbeConfig

SECTIONS = {"trajectories", "out", "grid", "extract", "probe"}
GRID_KEYS = {"models", "conditions", "layers", "poolings"}
EXTRACT_KEYS = {"device", "dtype", "max_tokens"}


def load_sweep(path: Path) -> dict[str, Any]:
    """Read and check a sweep config; errors name the file and the key."""
    path = Path(path)
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: TOML nested too deeply to read") from None
    for section in ("grid", "extract", "probe"):
        if section in config and not isinstance(config[section], dict):
            raise ValueError(f"{path}: {section}: expected a [{section}] table, got {config[section]!r}")
    for where, keys, allowed in (("(top level)", config, SECTIONS), ("[grid]", config.get("grid", {}), GRID_KEYS),
                                 ("[extract]", config.get("extract", {}), EXTRACT_KEYS),
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
            except ValueError as exc:
                fail(f"[grid].{key}", str(exc))
    extract = config.get("extract", {})
    for key, check in (("device", check_device), ("dtype", resolve_dtype),
                       ("max_tokens", lambda v: ExtractConfig(layers=[0], max_tokens=v))):
        if key in extract:
            try:
                check(extract[key])
            except (ValueError, TypeError) as exc:
                fail(f"[extract].{key}", str(exc))
    try:
        probe_config(config)
    except (ValueError, TypeError) as exc:
        fail("[probe]", str(exc))


def probe_config(config: dict[str, Any]) -> ProbeConfig:
    """The sweep's ``[probe]`` section as a ProbeConfig (lists become tuples)."""
    return ProbeConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.get("probe", {}).items()})


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


def run_sweep(path: Path) -> pd.DataFrame:
    """Run (or resume) every cell; write and return the summary table."""
    config = load_sweep(path)
    trajs = stages.trajectories(Path(config["trajectories"]), strict=False)
    out = Path(config["out"])
    try:
        check_output_dir(out, "out")
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    extract = config.get("extract", {})
    with writer_lock(out, command=f"sweep {path}"):
        summary = _run_cells(config, trajs, out, extract, probe_config(config))
    atomic_write_bytes(out / "summary.csv", summary.to_csv(index=False).encode())
    header = "| " + " | ".join(summary.columns) + " |\n|" + "---|" * len(summary.columns) + "\n"
    body = "".join("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |\n"
                   for row in summary.itertuples(index=False))
    atomic_write_bytes(out / "summary.md", (header + body).encode())
    return summary


def _run_cells(config: dict[str, Any], trajs: list[Any], out: Path, extract: dict[str, Any],
               probe: ProbeConfig) -> pd.DataFrame:
    """Extract and probe every cell not finished yet; the summary table of all cells."""
    from interp.extraction.batch import parse_layers
    from interp.extraction.extract import ExtractConfig
    from interp.extraction.limits import DEFAULT_MAX_TOKENS

    rows = []
    loaded: tuple[str, Any] | None = None  # one model in memory at a time
    for cell in cells(config):
        root = inside(out, out / "cells" / cell["folder"])
        results = root / "probe" / "probe_results.json"
        if not results.exists():
            if loaded is None or loaded[0] != cell["model"]:
                loaded = None
                loaded = (cell["model"], stages.sensor(cell["model"], device=extract.get("device", "cpu"),
                                                       dtype=extract.get("dtype", "auto")))
            sensor = loaded[1]
            cfg = ExtractConfig(layers=parse_layers(cell["layers"], sensor.n_layers, sensor.full_attention_layers,
                                                    "[grid].layers"),
                                poolings=list(cell["poolings"]), max_tokens=extract.get("max_tokens", DEFAULT_MAX_TOKENS))
            stages.extract(sensor, trajs, [cell["condition"]], cfg, root / "store")
            stages.probe(root / "store", root / "probe", probe, condition=cell["condition"])
        res = read_json(results)
        rows.append({"cell": cell["name"], "folder": cell["folder"], "model": cell["model"], "condition": cell["condition"],
                     "layers": cell["layers"], "poolings": "+".join(cell["poolings"]), "auroc": res["auroc"],
                     "auroc_lo": (res["auroc_ci"] or [None, None])[0], "auroc_hi": (res["auroc_ci"] or [None, None])[1],
                     "ap": res["ap"], "balanced_accuracy": res["balanced_accuracy"],
                     "gain_auroc": (res.get("gain") or {}).get("auroc"),
                     "gain_lo": ((res.get("gain") or {}).get("auroc_ci") or [None, None])[0],
                     "gain_hi": ((res.get("gain") or {}).get("auroc_ci") or [None, None])[1],
                     "permutation_p": res["permutation_p"], "permutation_p_position": res.get("permutation_p_position"),
                     "n_samples": res["n_samples"], "n_tasks": res["n_tasks"]})
    return pd.DataFrame(rows)
