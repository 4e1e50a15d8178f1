"""``interp gate train`` / ``interp gate eval``: DRSR's learned set-risk gate from an ``interp drsr`` run's parts
(no model forward); the gate itself runs as the ``drsr_gate`` history condition (``--gate-scorer``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.cli.common import app, build, console, err
from patching.config import GATE_RULES, GATE_SCORERS, N_MEMBERS, GateConfig

OPTIONS = {"n_members": "--members"}  # config field -> option, where the option's name is not the field's

gate_app = typer.Typer(help="DRSR's set-risk gate: train a set-harm scorer on DRSR parts, evaluate it held out.",
                       no_args_is_help=True)
app.add_typer(gate_app, name="gate")

DrsrOpt = Annotated[Path, typer.Option("--drsr", help="Output folder of `interp drsr` (drsr.json and parts/).")]
PartsOpt = Annotated[Optional[Path], typer.Option("--parts", help="The parts/drsr.* folder to read (default: the "
                                                                  "one holding drsr.json's boundaries).")]


@gate_app.command("train")
def gate_train(
    drsr: DrsrOpt,
    out: Annotated[Path, typer.Option("--out", help="Folder for gate_scorer.json.")],
    seed: Annotated[int, typer.Option(help="Seed of the trajectory split and the bootstrap members.")
                    ] = GateConfig.seed,
    members: Annotated[Optional[int], typer.Option("--members", help=(
        f"Bootstrap members of the scorer (unset: the scorer's own: {N_MEMBERS} for ridge, "
        "patching.gate_mlp.N_MEMBERS for set-mlp)."))] = GateConfig.n_members,
    parts: PartsOpt = None,
    unsafe: Annotated[float, typer.Option(help="Unsafe-harm threshold of the gate's labels in nats/token (the "
                                               "toolkit's assumption; DRSR states 0.020 as its pair margin and "
                                               "mean-harm limit, not as an unsafe cut).")] = GateConfig.unsafe,
    scorer: Annotated[str, typer.Option("--scorer", help=f"One of {', '.join(GATE_SCORERS)}: ridge (bootstrap "
                                                         "ridge ensemble on pooled set features) or set-mlp "
                                                         "(DRSR's Table 7 set model, torch).")] = GateConfig.scorer,
    rule: Annotated[str, typer.Option(help=f"One of {', '.join(GATE_RULES)}: bound (unsafe rate of deletions <= "
                                           "alpha with confidence 1 - delta) or empirical (DRSR's rule).")
                    ] = GateConfig.rule,
    alpha: Annotated[float, typer.Option(help="Unsafe-rate limit of the gate's deletions.")] = GateConfig.alpha,
    delta: Annotated[float, typer.Option(help="The bound's error probability (rule bound).")] = GateConfig.delta,
    folds: Annotated[int, typer.Option(help="Task-level folds of the cross-fitted calibration scores.")
                     ] = GateConfig.folds,
    smooth: Annotated[bool, typer.Option("--smooth/--plain-rate", help="Empirical rule: the add-one smoothed unsafe "
                                                                       "rate, or DRSR's plain rate.")
                      ] = GateConfig.smooth,
) -> None:
    """Fit the set-harm scorer on the train and validation trajectories and select K, beta, tau on their
    cross-fitted scores."""
    check_output_dir(out, "--out")
    config = build(GateConfig, OPTIONS, scorer=scorer, seed=seed, n_members=members, unsafe=unsafe, rule=rule,
                   alpha=alpha, delta=delta, folds=folds, smooth=smooth)
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
                  f"{'; ' + why[c['abstain']] if c['abstain'] else ''}; {info['train_seconds']:.1f} s", markup=False)


@gate_app.command("eval")
def gate_eval(
    drsr: DrsrOpt,
    scorer: Annotated[Path, typer.Option("--scorer", help="gate_scorer.json of `interp gate train`.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for gate.json.")],
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples for the CIs.")
                      ] = GateConfig.n_boot,
    parts: PartsOpt = None,
) -> None:
    """Evaluate a scorer file's gate on its held-out test trajectories (gate.json)."""
    check_output_dir(out, "--out")
    config = build(GateConfig, OPTIONS, n_boot=n_boot)
    doc = stages.gate_eval(drsr, scorer, out, config, parts)
    g, p = doc["gate"], doc["prediction"]
    rate = (f"unsafe rate {g['unsafe_rate']} over {g['n_measured']} measured deletions" if g["n_measured"]
            else f"no measured deletion ({g['n_deleted']} deletions)")
    console.print(f"{Path(out) / 'gate.json'}: test MAE {p['mae']}, Spearman {p['spearman']}; gate coverage "
                  f"{g['coverage']}, removal {g['removal']}, {rate}", markup=False)
    for note in doc["notes"]:
        console.print(f"- {note}", markup=False)
