"""What every ``interp`` command shares: the Typer app, the consoles, option types and the checks that run before
any file is read or any model loads."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import MISSING, Field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

import typer
from rich.console import Console

from interp.params import ConfigError, Items, Maybe, Options, declared
from interp.pipelines import stages

if TYPE_CHECKING:
    from interp.io import Executor
    from interp.pipelines.executors import ExecutorSettings
    from interp.pipelines.configs import AnalysisConfig
    from interp.sensor.protocol import Sensor

T = TypeVar("T")

app = typer.Typer(
    help="Reasoning persistence in long-horizon agents: validate, render, extract, probe, patch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# soft_wrap: long lines (problem lines, prompts) are printed whole, never re-wrapped;
# no emoji or highlighting, so text such as "a[1:100:2]" prints as it is. Off a terminal the width is set
# to 240 by `interp.pipelines.cli.main` when a command runs (nothing is asked of the terminal at import).
console = Console(soft_wrap=True, emoji=False, highlight=False)
err = Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)
PIPE_WIDTH = 240

ModelOpt = Annotated[str, typer.Option("--model", help="Model spec (see `interp models`) or a local HF directory.")]
ModelPathOpt = Annotated[Optional[Path], typer.Option("--model-path", help="Local checkpoint directory for the spec.")]
TrajectoriesOpt = Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")]
AllowControlOpt = Annotated[bool, typer.Option(
    "--allow-control-tokens", help="Accept trajectory text holding chat-template control tokens (<|im_end|>, "
    "</think>, ...): rendered as written, they act as the template's own tokens. Refused by default.")]
DeviceOpt = Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1 ...")]
def _dtype_help() -> str:
    """``--dtype``'s help, the precision of each analysis read from its config class (``CONFIGS``)."""
    from interp.pipelines.configs import CONFIGS

    chosen = ", ".join(f"{name} {getattr(cls, 'precision')}" for name, cls in CONFIGS.items()
                       if getattr(cls, "precision", None))
    return (f"Model dtype: auto (float32 off CUDA; on CUDA the analysis config's precision: {chosen}), fp32, bf16, "
            "fp16 or fp64 (fp64 for parity checks on small models). An explicit dtype is obeyed. Stored features, "
            "the final norm, the unembedding and all log-softmax/KL/entropy/NLL arithmetic are float32.")


DtypeOpt = Annotated[str, typer.Option(help=_dtype_help())]


def split_list(value: str) -> list[str]:
    """The non-blank items of a comma list, stripped (``"a, b,"`` -> ``["a", "b"]``)."""
    return [v.strip() for v in value.split(",") if v.strip()]


@contextmanager
def option(name: str) -> Iterator[None]:
    """ValueErrors raised inside are re-raised as one line naming the option (``--pooling: ...``)."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def option_name(field: str, options: Mapping[str, str] | None = None) -> str:
    """The command-line option of a config field: ``max_k`` -> ``--max-k`` (``options`` maps the exceptions)."""
    return (options or {}).get(field) or f"--{field.replace('_', '-')}"


def build(cls: Callable[..., T], options: Mapping[str, str] | None = None, **kwargs: object) -> T:
    """``cls(**kwargs)``; a refused field (``interp.params.ConfigError``) is named by its option (``--n-boot``)."""
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ValueError(f"{option_name(exc.field, options).split('/')[0]}: {exc.reason}") from None


def config_options(cls: type, options: Mapping[str, str] | None = None, skip: tuple[str, ...] = (),
                   name: str = "config", fixed: Mapping[str, object] | None = None
                   ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A command with one option per declared field of the config class ``cls`` (``interp.params``): the option's
    type, default, help and unit are the field's, its name ``--field-name`` unless the field's declaration or
    ``options`` (field -> option) says otherwise; ``skip``: fields the command sets itself (``fixed``: their
    values until it does, e.g. layers resolved on the model with ``dataclasses.replace``). The command receives
    the checked config in its parameter ``name``; a refused value is named by its option before anything is
    read. The wrapped command lists ``(cls, {field: option})`` in ``__configs__`` (what the common tests discover)."""

    def wrap(command: Callable[..., None]) -> Callable[..., None]:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != name]
        chosen = [f for f in declared(cls) if f.name not in skip]
        names = {f.name: f.metadata["option"] or option_name(f.name, options) for f in chosen}
        group = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.metadata["rule"].to_cli(f.default)
                                   if f.default is not MISSING else ..., annotation=_option_type(f, names[f.name]))
                 for f in chosen]

        @functools.wraps(command)
        def run(*args: object, **kwargs: object) -> None:
            values = {f.name: f.metadata["rule"].from_cli(kwargs.pop(f.name)) for f in chosen}
            command(*args, **kwargs, **{name: build(cls, names, **values, **(fixed or {}))})

        run.__signature__ = inspect.Signature([*own, *group])  # type: ignore[attr-defined]  # what Typer reads
        run.__annotations__ = {p.name: p.annotation for p in (*own, *group)}
        run.__configs__ = [*getattr(command, "__configs__", []), (cls, names)]  # type: ignore[attr-defined]
        return run

    return wrap


def _option_type(f: Field[Any], option: str) -> object:
    """The ``Annotated`` type of a config field's option: its rule's command-line type, the field's help and
    unit, ``--x/--no-x`` for a flag."""
    rule = f.metadata["rule"]
    optional = isinstance(rule, Maybe)
    inner = rule.inner if optional else rule
    kind: Any = str if isinstance(inner, Items) else inner.cli_type
    unit = f" Unit: {f.metadata['unit']}." if f.metadata["unit"] else ""
    extra = f" One of: {', '.join(inner.choices)}." if isinstance(inner, Options) else ""
    none = f" Unset: {rule.none}." if optional else ""
    decl = f"{option}/--no-{option.removeprefix('--')}" if kind is bool and "/" not in option else option
    env = f.metadata.get("envvar")
    return Annotated[Optional[kind] if optional else kind,  # noqa: UP007  (typer reads Optional)
                     typer.Option(decl, help=f"{f.metadata['help']}{unit}{extra}{none}", envvar=env,
                                  show_envvar=env is not None)]


def checked(call: Callable[..., T], *args: object, options: Mapping[str, str] | None = None, **kwargs: object) -> T:
    """``call(*args, **kwargs)`` (a stage, a config's check); a field it refuses on the data (a ``ConfigError``:
    ``task_ids``, ``boundaries``, ``layers``, ``relation_layer``) is named by its option, as :func:`build` names it."""
    try:
        return call(*args, **kwargs)
    except ConfigError as exc:
        raise ValueError(f"{option_name(exc.field, options)}: {exc.reason}") from None


def at_least(option: str, value: float | None, low: float) -> None:
    """ValueError naming ``option`` unless ``value`` (when given) is a finite number >= ``low``."""
    if value is not None and not (math.isfinite(value) and value >= low):
        raise ValueError(f"{option} {value}: must be a finite number >= {low}")


def model_options(device: str, dtype: str, config: AnalysisConfig | type[AnalysisConfig] | str | None) -> str:
    """Refuse a device this machine lacks and an unknown dtype before anything is read or loaded; return the dtype
    the command loads its model in (``auto``: the precision of the analysis's ``config``,
    ``interp.pipelines.configs.model_dtype``)."""
    from interp.pipelines.configs import model_dtype
    from interp.sensor.models import check_device

    check_device(device)
    with option("--dtype"):
        return model_dtype(dtype, device, config)


GateScorerOpt = Annotated[Optional[Path], typer.Option(
    "--gate-scorer", help="Scorer file of `interp gate train`: the gate of the drsr_gate condition.")]


def check_gate_scorer(conditions: list[str], path: Path | None) -> None:
    """Before any model loads: the drsr_gate condition has a readable scorer file (its errors name the file)."""
    if "drsr_gate" in conditions:
        from patching.gate import GateModel

        if path is None:
            raise ValueError("--gate-scorer: the drsr_gate condition needs a scorer file (from `interp gate train`)")
        GateModel.load(path)


BoundaryTokensOpt = Annotated[int, typer.Option("--max-tokens", help="Boundaries with longer renders are skipped "
                                                                "and recorded, never truncated.")]
ShardOpt = Annotated[Optional[str], typer.Option(help="I/N: this process takes shard I of N (units split by token "
                                                      "count, longest first); join the shards with `interp merge`.")]
AddressOpt = Annotated[Optional[str], typer.Option(help="Ray cluster address (auto: the running cluster; default: "
                                                        "start a local one).")]


def executor_options(command: Callable[..., None]) -> Callable[..., None]:
    """A command with the executor option group (``--executor``, ``--address``, ``--workers``, ``--num-gpus``,
    ``--memory-gb``: the fields of ``interp.pipelines.executors.ExecutorSettings``), received as one checked
    ``ExecutorSettings`` in its ``executor`` parameter."""
    from interp.pipelines.executors import ExecutorSettings

    return config_options(ExecutorSettings, name="executor")(command)


def shard_option(shard: str | None) -> tuple[int, int]:
    """``--shard I/N`` parsed before anything is read or loaded (``(0, 1)`` when absent)."""
    from interp.extraction.batch import parse_shard

    with option("--shard"):
        return parse_shard(shard)


def executor_for(settings: ExecutorSettings, model: str, model_path: Path | None, device: str,
                 dtype: str) -> tuple[Executor | None, Callable[[], Sensor] | None]:
    """``(executor, load)`` for the executor options: None for local (the loaded sensor is used), else the executor
    and how a worker loads its model."""
    from functools import partial

    if settings.kind == "local":
        return None, None
    with option("--executor"):  # called before the model loads: a bad executor costs nothing
        executor = settings.make()
    return executor, partial(stages.sensor, model, model_path, device, dtype)


def load_sensor(model: str, model_path: Optional[Path], device: str, dtype: str) -> Sensor:
    """Load the sensor and say (stdout, the run log) where it runs and which Gated-DeltaNet and conv kernels it calls."""
    from interp.sensor.kernels.binding import kernels_line

    sensor = stages.sensor(model, model_path, device, dtype)
    console.print(f"{sensor.spec}: {sensor.device}, {str(sensor.dtype).removeprefix('torch.')}; "
              f"kernels: {kernels_line(sensor.kernels)}", markup=False)
    return sensor


