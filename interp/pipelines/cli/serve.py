"""``interp serve``: the proxy that applies a history policy inside a live agent (``interp.serve``; chat
completions, Anthropic Messages, OpenAI Responses); its settings are ``interp.serve.config.ServeConfig``'s options, checked before the socket is
bound."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.pipelines.cli.common import DeviceOpt, DtypeOpt, GateScorerOpt, ModelPathOpt, app, config_options, \
    console, load_sensor, model_options
from interp.serve.config import ServeConfig

TOKEN_ENV = "INTERP_SERVE_TOKEN"


@app.command()
@config_options(ServeConfig)
def serve(
    upstream: Annotated[str, typer.Option("--upstream", help="The model provider's base URL (e.g. "
                                          "https://api.openai.com/v1, https://api.anthropic.com/v1, "
                                          "http://127.0.0.1:8000/v1 for vLLM); /v1/chat/completions, /v1/messages "
                                          "and /v1/responses are edited, other paths passed through.")],
    log_dir: Annotated[Path, typer.Option("--log-dir", help="Run log folder: serve.json, requests.jsonl, "
                                          "sessions/ (appended to when it exists).")],
    model: Annotated[Optional[str], typer.Option("--model", help="The sensor (iclr and drsr_gate need one): a model "
                                                 "spec (see `interp models`) or a local HF directory; its tokenizer "
                                                 "counts the removed tokens.")] = None,
    model_path: ModelPathOpt = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="The upstream model's tokenizer (a model "
                                                     "spec or local HF directory): measures each removal in its chat "
                                                     "template's tokens (default: the sensor's; none: unknown).")]
    = None,
    upstream_key_env: Annotated[Optional[str], typer.Option(
        "--upstream-key-env", help="Environment variable holding the upstream's API key (e.g. OPENAI_API_KEY).")]
    = None,
    gate_scorer: GateScorerOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    *,
    config: ServeConfig,
) -> None:
    """Serve a proxy that applies a history policy to every model request: chat completions, Anthropic Messages, OpenAI Responses (token: $INTERP_SERVE_TOKEN or printed)."""
    from interp.serve.app import LOCAL_HOSTS, Proxy, bind, make_server, settings_line
    from interp.serve.policy import gate_factory, parse_serve_policy

    chosen = parse_serve_policy(config.policy)
    if not upstream.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {upstream!r}: expected an http:// or https:// base URL")
    key = None
    if upstream_key_env:
        key = os.environ.get(upstream_key_env)
        if not key:
            raise ValueError(f"--upstream-key-env {upstream_key_env}: the variable is not set")
    if chosen.condition in ("iclr", "iclr_step_only", "drsr_gate") and model is None:
        raise ValueError(f"--policy {chosen.label}: needs --model (the sensor that scores the blocks)")
    if (chosen.condition == "drsr_gate") != (gate_scorer is not None):
        raise ValueError("--gate-scorer: given exactly when --policy is drsr_gate (a scorer file of `interp gate "
                         "train`)")
    if gate_scorer is not None:
        from patching.gate import GateModel

        GateModel.load(gate_scorer)  # a bad file is named before the model loads
    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    hosts = config.allowed_hosts
    if config.host not in ("0.0.0.0", "::", *LOCAL_HOSTS) and config.host not in hosts:
        hosts = (*hosts, config.host)  # the address it listens on answers by that name
    sock = bind(config.host, config.port)
    proxy = None
    try:  # Ctrl-C (while the model loads or while serving) stops the proxy: there is nothing to resume
        sensor = None
        if model is not None:
            sensor = load_sensor(model, model_path, device, model_options(device, dtype, "entropy"))
        counter = None
        if tokenizer is not None:
            from interp.sensor.models import load_tokenizer

            counter = load_tokenizer(tokenizer, None)
        token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
        proxy = Proxy(upstream, chosen, log_dir, sensor=sensor, tokenizer=counter, token=token, upstream_key=key,
                      timeout=config.timeout, max_sessions=config.max_sessions, session_ttl=config.session_ttl,
                      max_tokens=config.max_tokens, decide=config.decide, memory_budget=config.memory_budget,
                      max_body_bytes=config.max_body_bytes, allowed_hosts=hosts,
                      allow_control_tokens=config.allow_control_tokens, provider=config.provider,
                      gate_factory=gate_factory(gate_scorer, sensor) if gate_scorer is not None and sensor is not None
                      else None)
        url = f"http://{config.host}:{sock.getsockname()[1]}/v1"
        console.print(settings_line(proxy, url), markup=False)
        if not os.environ.get(TOKEN_ENV):
            console.print(f"token (the agent's API key): {token}", markup=False)
        make_server(proxy.build()).run(sockets=[sock])  # uvicorn re-raises the Ctrl-C it shut down on
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        if proxy is not None:
            proxy.close()
    console.print(f"interp serve: stopped; run log {log_dir}", markup=False)
