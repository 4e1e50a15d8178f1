"""``interp study``: a paired online study of history policies with one's own agent and provider
(``interp.serve.study``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines.cli.common import DeviceOpt, DtypeOpt, GateScorerOpt, ModelPathOpt, app, check_gate_scorer, \
    config_options, console, load_sensor, model_options, option
from interp.serve.study import StudyConfig


@app.command()
@config_options(StudyConfig)
def study(
    out: Annotated[Path, typer.Option("--out", help="Study folder: runs/<policy>/ and study.json (a rerun reuses "
                                      "the policies' completed runs).")],
    upstream: Annotated[str, typer.Option("--upstream", help="The model provider's OpenAI-compatible base URL "
                                          "(default: a local vLLM or transformers serve).")]
    = "http://127.0.0.1:8000/v1",
    tasks: Annotated[Optional[Path], typer.Option("--tasks", help="Tasks of a python: agent (JSON Lines, one "
                                                  "object per line with a unique task_id).")] = None,
    prices: Annotated[Optional[Path], typer.Option("--prices", help="A JSON price table, USD per million tokens "
                                                   "of uncached_input, cache_read, cache_write and output.")] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="The upstream model's tokenizer (a model "
                                                     "spec or local HF directory): measures each removal in its "
                                                     "chat template's tokens.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="The sensor of an iclr or drsr_gate policy (a "
                                                 "model spec or local HF directory).")] = None,
    model_path: ModelPathOpt = None,
    upstream_key_env: Annotated[Optional[str], typer.Option(
        "--upstream-key-env", help="Environment variable holding the upstream's API key.")] = None,
    gate_scorer: GateScorerOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    *,
    config: StudyConfig,
) -> None:
    """Run a task set through the proxy under each policy (same seed) and table reward, tokens, cost, amplification."""
    from interp.serve.runlog import read_prices
    from interp.serve.study import Study, read_tasks, table_lines

    check_output_dir(out, "--out")
    if not upstream.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {upstream!r}: expected an http:// or https:// base URL")
    python_agent = config.agent.startswith("python:")
    if python_agent != (tasks is not None):
        raise ValueError("--tasks: a python: agent needs a tasks file, an inspect: agent takes its samples instead")
    if any(p.startswith("iclr") or p == "drsr_gate" for p in config.policies) and model is None:
        raise ValueError("--model: an iclr or drsr_gate policy needs the sensor that scores its blocks")
    if ("drsr_gate" in config.policies) != (gate_scorer is not None):
        raise ValueError("--gate-scorer: given exactly when --policies holds drsr_gate (a scorer file of `interp "
                         "gate train`)")
    check_gate_scorer(list(config.policies), gate_scorer)  # a bad file is named before the model loads
    key = None
    if upstream_key_env:
        key = os.environ.get(upstream_key_env)
        if not key:
            raise ValueError(f"--upstream-key-env {upstream_key_env}: the variable is not set")
    table = None
    if prices is not None:
        with option("--prices"):
            table = read_prices(prices)
    task_list = None
    if tasks is not None:
        with option("--tasks"):
            task_list = read_tasks(tasks)
    args: dict[str, object] = {"upstream_key": key}
    if model is not None:
        args["sensor"] = sensor = load_sensor(model, model_path, device, model_options(device, dtype, config))
        if gate_scorer is not None:
            from interp.serve.policy import gate_factory

            args["gate_factory"] = gate_factory(gate_scorer, sensor)
    if tokenizer is not None:
        from interp.sensor.models import load_tokenizer

        args["tokenizer"] = load_tokenizer(tokenizer, None)
    doc = Study(config, out, upstream, task_list, table, args, {"tasks": tasks, "prices": prices, "gate_scorer": gate_scorer}).run()
    for line in table_lines(doc):
        console.print(line, markup=False)
    console.print(f"{out / 'study.json'}", markup=False)
