"""The CLI, ``stages`` and Python build the same config of an analysis: same defaults, same errors, same dtype.

- dtype: KL Repair, harm, DRSR and ICLR loaded with ``--device cuda`` through the command line, through
  ``stages.sensor(config=...)`` and through ``interp.load_model`` (what a notebook does before calling the stage)
  resolve the same dtype. No GPU is needed: CUDA is reported present and the weight loader is replaced by one
  that stops with the dtype it was asked for.
- errors: a bad value given to the config in Python and the same value given to the command fail with the same
  message, the command naming its option where Python names the field.
- options: every field of a command's config has an option (or is listed as fixed by the command), and the
  option's default, which ``--help`` shows, is the config's.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import torch
import typer.main
from typer.testing import CliRunner

import interp
from interp.extraction.entropy import IclrConfig
from interp.pipelines import stages
from interp.pipelines.cli import app
from interp.pipelines.cli.common import option_name
from interp.accounting.tokens import TokensConfig
from interp.continuations.run import RunSettings
from interp.externalization.labeler import GapLabelerConfig
from interp.externalization.risk import RiskConfig
from patching.config import DrsrConfig, GateConfig, HarmConfig, PatchConfig
from probes.targets import TargetLabelerConfig

pytestmark = pytest.mark.e2e

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"


class Loaded(Exception):
    """Raised by the stand-in weight loader: the dtype the model would have been loaded in."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(str(dtype))
        self.dtype = dtype


@pytest.fixture()
def cuda(monkeypatch, tmp_path) -> Path:
    """CUDA reported present; loading weights stops with the dtype asked for. Returns a checkpoint folder."""
    def load_hf(source, dtype, *args, **kwargs):
        raise Loaded(dtype)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr("interp.sensor.models._load_hf", load_hf)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    return folder


COMMANDS = {  # analysis -> (config class, the command's arguments with OUT for its output)
    "kl_repair": (PatchConfig, ["patch", "--out", "OUT"]),
    "harm": (HarmConfig, ["harm", "--out", "OUT"]),
    "drsr": (DrsrConfig, ["drsr", "--out", "OUT"]),
    "iclr": (IclrConfig, ["entropy", "--out", "OUT/blocks.csv"]),
}


def _cli_dtype(args: list[str], model: Path, out: Path) -> torch.dtype:
    result = CliRunner().invoke(app, [a.replace("OUT", str(out)) for a in args]
                                + ["--trajectories", str(DEMO), "--model", str(model), "--device", "cuda"])
    assert isinstance(result.exception, Loaded), result.output
    return result.exception.dtype


@pytest.mark.parametrize("analysis", list(COMMANDS))
def test_the_same_dtype_through_the_cli_stages_and_load_model(cuda, tmp_path, analysis):
    cls, args = COMMANDS[analysis]
    through_cli = _cli_dtype(args, cuda, tmp_path / "out")
    with pytest.raises(Loaded) as staged:
        stages.sensor(str(cuda), device="cuda", config=cls())
    with pytest.raises(Loaded) as loaded:  # a notebook: interp.load_model, then stages.<analysis>(sensor, ...)
        interp.load_model(str(cuda), device="cuda")
    assert through_cli == staged.value.dtype == loaded.value.dtype == torch.float32
    assert not (tmp_path / "out").exists()  # nothing is written before the model loads


def test_an_analysis_that_allows_bfloat16_gets_it_from_its_config_only(cuda, tmp_path):
    """Extraction's config allows bfloat16 on CUDA; a bare interp.load_model does not know the analysis: float32."""
    from interp.extraction.extract import ExtractConfig

    with pytest.raises(Loaded) as staged:
        stages.sensor(str(cuda), device="cuda", config=ExtractConfig)
    through_cli = _cli_dtype(["extract", "--store", "OUT"], cuda, tmp_path / "out")
    with pytest.raises(Loaded) as loaded:
        interp.load_model(str(cuda), device="cuda")
    assert staged.value.dtype == through_cli == torch.bfloat16 and loaded.value.dtype == torch.float32
    with pytest.raises(Loaded) as explicit:
        stages.sensor(str(cuda), device="cuda", dtype="fp32", config=ExtractConfig)
    assert explicit.value.dtype == torch.float32  # an explicit dtype is obeyed


def _cli_error(capsys, monkeypatch, args: list[str]) -> str:
    """The one error line ``interp ARGS`` prints (exit 2)."""
    import sys

    from interp.pipelines.cli import main

    monkeypatch.setattr(sys, "argv", ["interp", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    return err.removeprefix("error: ")


@pytest.mark.parametrize("cls, stage, command, field, value", [
    (DrsrConfig, "drsr", "drsr", "max_k", 0),
    (DrsrConfig, "drsr", "drsr", "unsafe", -1.0),
    (HarmConfig, "harm", "harm", "budget", -1),
    (PatchConfig, "patch", "patch", "positions", 0),
    (IclrConfig, "entropy", "entropy", "rho", 2.0),
    (TargetLabelerConfig, "label", "label", "surge_factor", 0.0),
    (GapLabelerConfig, "externalize", "externalize label", "min_novel_words", -1),
    (RiskConfig, "risk", "externalize risk", "n_boot", -1),
    (TokensConfig, "tokens", "tokens", "cache_block", 0),
    (TokensConfig, "tokens", "tokens", "policies", "random:r"),
    (RunSettings, "intervene", "intervene --states DEMO", "top_p", 1.5),
])
def test_python_and_the_cli_give_the_same_error(capsys, monkeypatch, tmp_path, cls, stage, command, field, value):
    """The config's check, given a bad value from Python or on the command line (before any file is read)."""
    with pytest.raises(ValueError) as python:
        getattr(stages, stage)(None, [], tmp_path / "out", cls(**{field: value}))
    out = tmp_path / ("out/blocks.csv" if command == "entropy" else "out")
    cli = _cli_error(capsys, monkeypatch, [*command.replace("DEMO", str(DEMO)).split(), "--trajectories", str(DEMO),
                                           "--out", str(out), option_name(field), str(value)])
    assert str(python.value).startswith(f"{field}: ")
    assert cli == f"{option_name(field)}{str(python.value).removeprefix(field)}"
    assert not (tmp_path / "out").exists()


OPTION_NAMES = {"drsr": {"relation_layer": "--layer"}, "gate train": {"n_members": "--members"}}
FIXED = {  # command -> config fields it does not take, each with why
    "gate train": {"n_boot": "training computes no CI (gate eval's --n-boot)"},
    "gate eval": {"seed": "the scorer file's own seed", "n_members": "the scorer file's own ensemble",
                  "unsafe": "the scorer file's own unsafe threshold",
                  "scorer": "the scorer file's own kind (eval's --scorer is that file)",
                  **{k: "the scorer file's own calibration (its rule, alpha, delta, folds, smoothing)"
                     for k in ("rule", "alpha", "delta", "folds", "smooth")}},
    "label": {"cues": "the labeler's re-planning cue list (probes.targets.REPLAN_CUES), a rule of the study"},
    "externalize label": {"kinds": "every item kind the labeler knows (ITEM_KINDS); a subset is a Python-only study"},
    "intervene": {"max_new_tokens_source": "recorded by the run: how max_new_tokens was chosen, not a setting"},
}


def _command(path: str) -> Any:
    """The click command behind ``interp PATH`` (``gate train``: a subcommand)."""
    command: Any = typer.main.get_command(app)
    for name in path.split():
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path, cls", [
    ("patch", PatchConfig), ("harm", HarmConfig), ("drsr", DrsrConfig), ("entropy", IclrConfig),
    ("gate train", GateConfig), ("gate eval", GateConfig), ("label", TargetLabelerConfig),
    ("externalize label", GapLabelerConfig), ("externalize risk", RiskConfig), ("tokens", TokensConfig),
    ("intervene", RunSettings)])
def test_every_config_field_is_an_option_whose_default_is_the_configs(path, cls):
    params = {opt: p for p in _command(path).params for opt in p.opts}
    default = cls()
    for f in fields(cls):
        if f.name in FIXED.get(path, {}):
            continue
        name = option_name(f.name, OPTION_NAMES.get(path))
        assert name in params, f"{path}: config field {f.name} has no option {name}"
        want = getattr(default, f.name)
        got = params[name].default
        if isinstance(want, tuple):  # a comma list on the command line (';' within one policy of interp tokens)
            got = tuple(g.replace(";", ",") for g in got.split(",")) if isinstance(got, str) else got
        assert got == want, f"{path} {name}: default {got!r}, config {want!r}"
        written = re.search(r"default:?\s*[-\d.]+", params[name].help or "")  # "(default: all)" says what None is
        assert written is None, f"{path} {name}: a default written in its help: {written}"


EXECUTOR_COMMANDS = {"extract": ["extract", "--store", "OUT"], "patch": ["patch", "--out", "OUT"],
                     "harm": ["harm", "--out", "OUT"], "drsr": ["drsr", "--out", "OUT"]}


@pytest.mark.parametrize("command", list(EXECUTOR_COMMANDS))
@pytest.mark.parametrize("option, field, value, message", [
    ("--workers", "workers", 0, "--workers: expected an integer >= 1, got 0"),
    ("--num-gpus", "num_gpus", -1.0, "--num-gpus: expected a number >= 0, got -1.0"),
    ("--memory-gb", "memory_gb", float("nan"), "--memory-gb: expected a number >= 0, got nan"),
    ("--executor", "kind", "slurm", "--executor: use local or ray, got 'slurm'"),
])
def test_the_executor_group_is_one_checked_settings_object(capsys, monkeypatch, tmp_path, command, option, field,
                                                           value, message):
    """The executor options, declared once, reach every command that takes them as one ExecutorSettings: the same
    range check (the settings' own) refuses a bad value before anything is read or written."""
    from interp.pipelines.executors import ExecutorSettings

    with pytest.raises(ValueError) as python:
        ExecutorSettings(**{field: value})
    assert f"{option}{str(python.value).removeprefix(field)}" == message
    args = [a.replace("OUT", str(tmp_path / "out")) for a in EXECUTOR_COMMANDS[command]]
    assert _cli_error(capsys, monkeypatch, [*args, "--trajectories", str(DEMO), option, str(value)]) == message
    assert not (tmp_path / "out").exists()
    defaults = {p.name: p.default for p in _command(command).params}
    assert ExecutorSettings(defaults["executor"], defaults["address"], defaults["workers"], defaults["num_gpus"],
                            defaults["memory_gb"]) == ExecutorSettings()


def test_executor_settings_make_the_executor_they_describe():
    """local: none (the loaded sensor runs the units); ray: the actors' resources as given, memory in bytes."""
    from interp.pipelines.executors import ExecutorSettings, RayExecutor

    assert ExecutorSettings().make() is None
    ray = ExecutorSettings("ray", address="auto", workers=3, num_gpus=0.5, memory_gb=1.5).make()
    assert isinstance(ray, RayExecutor)
    assert (ray.address, ray.workers, ray.num_gpus, ray.memory) == ("auto", 3, 0.5, 3 * 2**29)
