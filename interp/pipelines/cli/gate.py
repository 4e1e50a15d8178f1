"""``interp gate train`` / ``interp gate eval``: DRSR's learned set-risk gate from an ``interp drsr`` run's parts
(no model forward); the gate itself runs as the ``drsr_gate`` history condition (``--gate-scorer``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines import stages
import warnings

from interp.pipelines.cli.common import app, config_options, console, err
from patching.config import GateConfig

OPTIONS = {"n_members": "--members"}  # config field -> option, where the option's name is not the field's

gate_app = typer.Typer(help="DRSR's set-risk gate: train a set-harm scorer on DRSR parts, evaluate it held out.",
                       no_args_is_help=True)
app.add_typer(gate_app, name="gate")

DrsrOpt = Annotated[Path, typer.Option("--drsr", help="Output folder of `interp drsr` (drsr.json and parts/).")]
PartsOpt = Annotated[Optional[Path], typer.Option("--parts", help="The parts/drsr.* folder to read (default: the "
                                                                  "one holding drsr.json's boundaries).")]


@gate_app.command("train")
@config_options(GateConfig, OPTIONS, skip=("n_boot",))
def gate_train(
    drsr: DrsrOpt,
    out: Annotated[Path, typer.Option("--out", help="Folder for gate_scorer.json.")],
    parts: PartsOpt = None,
    *,
    config: GateConfig,
) -> None:
    """Fit the set-harm scorer on the train and validation trajectories and select K, beta, tau on their
    cross-fitted scores."""
    check_output_dir(out, "--out")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        info = stages.gate_train(drsr, out, config, parts)
    for w in caught:
        err.print(f"warning: {w.message}", markup=False)
    s, c = info["setting"], info["summary"]
    why = {"data": f"abstains: {c['n_boundaries']} calibration boundaries, {c['missing_boundaries']} short of the "
                   f"{c['needed_boundaries']} an admissible setting needs",
           "no_safe_setting": f"abstains: no safe setting on {c['n_boundaries']} calibration boundaries"}
    console.print(f"{info['scorer']}: {info['n_rows']} sets; split {len(info['split']['train'])}/"
                  f"{len(info['split']['validation'])}/{len(info['split']['test'])} trajectories; {c['n_folds']} "
                  f"calibration folds; rule {c['rule']}: K {s['k']}, beta {s['beta']}, tau {s['tau']}"
                  f"{'; ' + why[str(c['abstain'])] if c['abstain'] else ''}; {info['train_seconds']:.1f} s", markup=False)


@gate_app.command("eval")
@config_options(GateConfig, skip=("scorer", "seed", "n_members", "unsafe", "rule", "alpha", "delta", "folds", "smooth"))
# the scorer file holds those: its kind, seed, ensemble, unsafe threshold and calibration
def gate_eval(
    drsr: DrsrOpt,
    scorer: Annotated[Path, typer.Option("--scorer", help="gate_scorer.json of `interp gate train`.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for gate.json.")],
    parts: PartsOpt = None,
    *,
    config: GateConfig,
) -> None:
    """Evaluate a scorer file's gate on its held-out test trajectories (gate.json)."""
    check_output_dir(out, "--out")
    doc = stages.gate_eval(drsr, scorer, out, config, parts)
    g, p = doc["gate"], doc["prediction"]
    rate = (f"unsafe rate {g['unsafe_rate']} over {g['n_measured']} measured deletions" if g["n_measured"]
            else f"no measured deletion ({g['n_deleted']} deletions)")
    console.print(f"{Path(out) / 'gate.json'}: test MAE {p['mae']}, Spearman {p['spearman']}; gate coverage "
                  f"{g['coverage']}, removal {g['removal']}, {rate}", markup=False)
    for note in doc["notes"]:
        console.print(f"- {note}", markup=False)
