"""Commands on trajectory files: ``validate``, ``import`` and ``render`` (no model forward)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from interp.data.importers.registry import FORMATS as IMPORT_FORMATS
from interp.pipelines import stages
from interp.pipelines.cli.common import (
    AllowControlOpt,
    ModelOpt,
    ModelPathOpt,
    app,
    console,
    err,
    option,
)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    strict: Annotated[bool, typer.Option(help="Also report unknown (passed-through) fields and undeclared tools as "
                                              "problems, and list steps without reasoning as notes.")] = False,
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Validate a trajectory file: one line per problem as FILE:LINE: field: message (an empty file is one).

    Exit 0 when there is no problem (warnings and notes do not fail), 1 otherwise.
    A tool not in the declared tools is a warning (a problem under --strict); a step
    without reasoning is valid, listed as a note under --strict only.
    """
    from interp.data.trajectory import validate_file

    report = validate_file(file, strict=strict, allow_control_tokens=allow_control_tokens)
    problems = report.problems + (report.unknown_fields if strict else [])
    for line in problems:
        err.print(line, markup=False, highlight=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False, highlight=False)
    for line in report.notes if strict else []:
        err.print(f"note: {line}", markup=False, highlight=False)
    if len(problems) > 1:  # a single problem stays one line
        err.print(f"{len(problems)} problem(s); {report.n_trajectories} valid trajectories", markup=False)
    if problems:
        raise typer.Exit(1)
    console.print(report.summary(), markup=False, highlight=False)


@app.command("import")
def import_(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help=f"One of {', '.join(IMPORT_FORMATS)} (claude-code: a "
                                                              "Claude Code session .jsonl; codex: a Codex CLI "
                                                              "rollout-*.jsonl; openhands: a saved OpenHands event "
                                                              "stream .json; gemini: a Gemini CLI chat recording "
                                                              ".json; map needs --map or --hook; auto is sniffed "
                                                              "per run).")],
    source: Annotated[Path, typer.Argument(metavar="INPUT", help="JSON Lines (one run per line; a session file is "
                                                                 "one run), a JSON file (one run, an array of runs, "
                                                                 "a tau2-bench result file, an Inspect log), an "
                                                                 "Inspect .eval log, a Parquet or Arrow file (one "
                                                                 "run per row), or a directory of .traj, "
                                                                 ".traj.json, (ATIF) trajectory.json, .eval, "
                                                                 ".parquet and .arrow files (its other data files "
                                                                 "are listed, not read; a problem under --strict).")],
    out: Annotated[Path, typer.Option("--out", help="Trajectory file to write (JSON Lines, atomically).")],
    field_map: Annotated[Optional[Path], typer.Option("--map", help="JSON field map (dotted paths; format in "
                                                                    "interp/data/importers/mapping.py).")] = None,
    hook: Annotated[Optional[str], typer.Option("--hook", help="module:function or file.py:function returning "
                                                               "trajectory dicts per record.")] = None,
    strict: Annotated[bool, typer.Option(help="Write nothing if any run has a problem.")] = False,
    domain: Annotated[Optional[str], typer.Option(help="Domain of every run (default: the run's own, else "
                                                       "code for swe-agent, unknown otherwise).")] = None,
    id_prefix: Annotated[str, typer.Option("--id-prefix", help="Text put before every task id, so runs of "
                                                               "several models or agents can share one file.")] = "",
    id_from: Annotated[Optional[str], typer.Option("--id-from", help="Dotted path of the run's field that is its "
                                                                     "task id (default: task_id, instance_id or "
                                                                     "id).")] = None,
    dataset_schema: Annotated[Optional[str], typer.Option("--dataset-schema", help="Column mapping of Parquet / "
                                                                                   "Arrow inputs: open-swe-traces, "
                                                                                   "nebius-openhands, "
                                                                                   "nebius-swe-agent or records "
                                                                                   "(default: detected from the "
                                                                                   "columns).")] = None,
    filters: Annotated[Optional[list[str]], typer.Option("--filter", help="COLUMN=VALUE: only dataset rows whose "
                                                                          "column holds VALUE (as text; "
                                                                          "repeatable, all must hold).")] = None,
    sample: Annotated[Optional[int], typer.Option(help="Take N dataset rows at random (of those --filter "
                                                       "keeps), in input order.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of --sample (NumPy's default generator).")] = 0,
) -> None:
    """Convert agent runs from a framework's format into a validated trajectory file.

    Problems print as FILE:LINE: field: message and skip their run. Exit 0: every
    run converted; 1: some run skipped (the others written unless --strict) or
    none converted; 2: bad FORMAT, option or INPUT.
    """
    from interp.data.importers.dataset import Selection, parse_filter

    selection = Selection(dataset_schema, tuple(parse_filter(f) for f in filters or []), sample, seed)
    report = stages.imports(fmt, source, out, field_map, hook, strict, domain, id_prefix, id_from, selection)
    for line in report.problems:
        err.print(line, markup=False, highlight=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False, highlight=False)
    console.print(report.summary(), markup=False, highlight=False)
    if report.problems or not report.converted:
        raise typer.Exit(1)


@app.command()
def render(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    task_id: Annotated[str, typer.Option("--task-id", help="Trajectory to render.")],
    after_step: Annotated[int, typer.Option("--after-step", help="Boundary b: history = steps 1..b.")],
    condition: Annotated[str, typer.Option(help="History condition applied before rendering.")] = "full",
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Print the rendered prompt with segment boundaries marked and token counts per segment kind."""
    from interp.data.conditions import apply_condition, check_condition_name
    from interp.data.render import render as render_prompt
    from interp.data.trajectory import get_trajectory, load_trajectories
    from interp.sensor.models import load_tokenizer

    with option("--condition"):
        check_condition_name(condition)
    if condition.startswith("iclr"):
        raise ValueError(f"--condition {condition}: scores blocks with the model, which render does not load; "
                         "see `interp entropy` for what ICLR drops")
    traj = get_trajectory(load_trajectories(file, allow_control_tokens), task_id)
    if not 1 <= after_step <= traj.n_steps:
        raise ValueError(f"--after-step {after_step}: out of range 1..{traj.n_steps} ({task_id} has {traj.n_steps} "
                         "steps)")
    tokenizer = load_tokenizer(model, model_path)
    edited, log = apply_condition(condition, traj, after_step, counter=lambda s: len(tokenizer.encode(s)))
    rendered = render_prompt(edited, after_step, tokenizer)
    for seg in rendered.segments:
        label = seg.kind + (f" step={seg.step}" if seg.step else "") + (f" #{seg.block}" if seg.block is not None else "")
        console.print(f"[bold cyan]⟦{label} tokens {seg.start}:{seg.end}⟧[/]", end="")
        console.print(rendered.text[seg.char_start:seg.char_end], markup=False, highlight=False, end="")
    console.print()
    table = Table(title=f"{task_id} @ b={after_step} [{condition}] {rendered.mode} template, {rendered.n_tokens} tokens")
    table.add_column("segment kind")
    table.add_column("tokens", justify="right")
    for kind, n in rendered.tokens_per_kind().items():
        table.add_row(kind, str(n))
    console.print(table)
    if log.edits or log.notes:
        console.print(f"edit log: {len(log.edits)} edits, {log.chars_removed} chars / {log.tokens_removed} tokens "
                      f"removed; {'; '.join(log.notes)}", markup=False)
