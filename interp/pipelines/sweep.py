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

Each cell writes ``out/cells/<cell>/store`` (the activation store, resumed
per unit) and ``out/cells/<cell>/probe`` (skipped when its
``probe_results.json`` exists); ``out/summary.csv`` and ``summary.md`` list
every cell's headline numbers. Left alone overnight, a killed sweep resumes
where it stopped.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd

from interp.io import atomic_write_bytes
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
    return config


def cells(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the grid, with a file-safe name."""
    grid = config["grid"]
    out = []
    for model, condition, layers, poolings in itertools.product(grid["models"], grid["conditions"], grid["layers"],
                                                                grid["poolings"]):
        name = "__".join([model, condition, layers.replace(",", "_"), "+".join(poolings).replace(":", "")])
        out.append({"name": name, "model": model, "condition": condition, "layers": layers, "poolings": poolings})
    return out


def run_sweep(path: Path) -> pd.DataFrame:
    """Run (or resume) every cell; write and return the summary table."""
    from interp.extraction.batch import parse_layers
    from interp.extraction.extract import ExtractConfig
    from interp.extraction.limits import DEFAULT_MAX_TOKENS

    config = load_sweep(path)
    trajs = stages.trajectories(Path(config["trajectories"]), strict=False)
    out = Path(config["out"])
    extract = config.get("extract", {})
    probe_config = ProbeConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.get("probe", {}).items()})
    rows = []
    loaded: tuple[str, Any] | None = None  # one model in memory at a time
    for cell in cells(config):
        root = out / "cells" / cell["name"]
        results = root / "probe" / "probe_results.json"
        if not results.exists():
            if loaded is None or loaded[0] != cell["model"]:
                loaded = None
                loaded = (cell["model"], stages.sensor(cell["model"], device=extract.get("device", "cpu"),
                                                       dtype=extract.get("dtype", "auto")))
            sensor = loaded[1]
            cfg = ExtractConfig(layers=parse_layers(cell["layers"], sensor.n_layers, sensor.full_attention_layers),
                                poolings=list(cell["poolings"]), max_tokens=extract.get("max_tokens", DEFAULT_MAX_TOKENS))
            stages.extract(sensor, trajs, [cell["condition"]], cfg, root / "store")
            stages.probe(root / "store", root / "probe", probe_config, condition=cell["condition"])
        res = json.loads(results.read_text())
        rows.append({"cell": cell["name"], "model": cell["model"], "condition": cell["condition"],
                     "layers": cell["layers"], "poolings": "+".join(cell["poolings"]), "auroc": res["auroc"],
                     "auroc_lo": (res["auroc_ci"] or [None, None])[0], "auroc_hi": (res["auroc_ci"] or [None, None])[1],
                     "ap": res["ap"], "balanced_accuracy": res["balanced_accuracy"],
                     "gain_auroc": (res.get("gain") or {}).get("auroc"),
                     "gain_lo": ((res.get("gain") or {}).get("auroc_ci") or [None, None])[0],
                     "gain_hi": ((res.get("gain") or {}).get("auroc_ci") or [None, None])[1],
                     "permutation_p": res["permutation_p"], "permutation_p_position": res.get("permutation_p_position"),
                     "n_samples": res["n_samples"], "n_tasks": res["n_tasks"]})
    summary = pd.DataFrame(rows)
    atomic_write_bytes(out / "summary.csv", summary.to_csv(index=False).encode())
    header = "| " + " | ".join(summary.columns) + " |\n|" + "---|" * len(summary.columns) + "\n"
    body = "".join("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |\n"
                   for row in summary.itertuples(index=False))
    atomic_write_bytes(out / "summary.md", (header + body).encode())
    return summary
