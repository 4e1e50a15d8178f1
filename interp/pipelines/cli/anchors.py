"""``interp anchors`` (reasoning anchors), ``interp sae-train`` and ``interp sae-probe`` (SAE features at the
boundary); ``interp extract --sae DIR`` stores the features these read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir, read_json
from interp.pipelines import stages
from interp.pipelines.cli.common import (
    AllowControlOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    ModelPathOpt,
    TrajectoriesOpt,
    app,
    config_options,
    console,
    load_sensor,
    model_options,
    option,
)
from interp.schema import as_object
from interp.sensor.sae import SaeTrainConfig
from patching.anchors import AnchorConfig
from probes.config import ProbeConfig


@app.command()
@config_options(AnchorConfig)
def anchors(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for anchors.json.")],
    harm: Annotated[Optional[Path], typer.Option("--harm", help="harm.json or drsr.json parts folder whose "
                                                 "singleton harms are reused (default: measured here).")] = None,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    *,
    config: AnchorConfig,
) -> None:
    """Reasoning anchors: each block's deletion harm, attention from receiver heads, attention-suppression KL,
    and whether ICLR drops it."""
    check_output_dir(out, "--out")
    dtype = model_options(device, dtype, AnchorConfig)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    records: list = []
    if harm is not None:
        with option("--harm"):
            files = sorted(harm.glob("**/*.json")) if harm.is_dir() else [harm]
            for path in files:
                doc = read_json(path)
                records += doc.get("boundaries", []) if "boundaries" in doc and "sets" not in doc else [doc]
    sensor = load_sensor(model, model_path, device, dtype)
    with option("--boundaries"):
        doc = stages.anchors(sensor, trajs, out, config, records)
    path = out / "anchors.json"
    iclr = as_object(doc["iclr"])
    console.print(f"{path}: {len(doc['blocks'])} blocks; ICLR drops {as_object(iclr['dropped'])['n']} of them and "
                  f"{iclr['anchors_dropped']} of the {iclr['n_anchors']} anchors", markup=False)


@app.command("sae-train")
@config_options(SaeTrainConfig)
def sae_train(
    store: Annotated[Path, typer.Option("--store", help="Activation store whose pooled residuals train the SAE.")],
    out: Annotated[Path, typer.Option("--out", help="SAE directory to write (SAELens format).")],
    layer: Annotated[Optional[int], typer.Option("--layer", help="Store layer (0-based) of the residual (default: "
                                                 "the store's layer when it has one).")] = None,
    site: Annotated[str, typer.Option("--site", help="Store site of the residual.")] = "resid_pre",
    *,
    config: SaeTrainConfig,
) -> None:
    """A small TopK SAE on a store's residual rows (every pooling, every condition), saved in SAELens' format."""
    check_output_dir(out, "--out")
    with option("--store"):
        made = stages.sae_train(store, out, config, layer, site)
    held = made["fvu_held_out"]
    console.print(f"{out}: {config.d_sae} features, k {config.k}, trained on {made['n_train']} rows; FVU train "
                  f"{made['fvu_train']:.3f}"
                  + (f", held-out {held:.3f} ({made['n_held_out']} rows)" if held is not None else ""), markup=False)


@app.command("sae-probe")
@config_options(ProbeConfig)
def sae_probe(
    store: Annotated[Path, typer.Option("--store", help="Activation store extracted with --sae.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for sae_probe.json.")],
    trajectories: Annotated[Optional[Path], typer.Option("--trajectories", help="Trajectory file: the features' "
                                                         "strongest contexts then show the latest reasoning.")] = None,
    condition: Annotated[str, typer.Option(help="Store condition the probe reads.")] = "full",
    *,
    config: ProbeConfig,
) -> None:
    """The future-necessity probe on SAE features (nested CV, nulls), its top features, KL Repair's features."""
    check_output_dir(out, "--out")
    trajs = stages.trajectories(trajectories, strict=False) if trajectories else None
    with option("--store"):
        doc = stages.sae_probe(store, out, config, condition, trajs)
    path = out / "sae_probe.json"
    console.print(f"{path}: AUROC {doc['probe']['auroc']:.3f}, permutation p {doc['probe']['permutation_p']}; "
                  f"FVU {doc['fvu']}", markup=False)
