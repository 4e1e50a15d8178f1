"""``interp serve``: the proxy that applies a history policy inside a live agent (``interp.serve``; chat
completions, Anthropic Messages, OpenAI Responses)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.pipelines.cli.common import DeviceOpt, DtypeOpt, ModelPathOpt, app, at_least, console, load_sensor, \
    model_options, option
from interp.sensor.limits import DEFAULT_MAX_TOKENS

TOKEN_ENV = "INTERP_SERVE_TOKEN"


@app.command()
def serve(
    upstream: Annotated[str, typer.Option("--upstream", help="The model provider's base URL (e.g. "
                                          "https://api.openai.com/v1, https://api.anthropic.com/v1, "
                                          "http://127.0.0.1:8000/v1 for vLLM); /v1/chat/completions, /v1/messages "
                                          "and /v1/responses are edited, other paths passed through.")],
    log_dir: Annotated[Path, typer.Option("--log-dir", help="Run log folder: serve.json, requests.jsonl, "
                                          "sessions/ (appended to when it exists).")],
    policy: Annotated[str, typer.Option("--policy", help="The history policy: full, iclr[:rho=R], iclr_step_only, "
                                        "keep_latest_reasoning, keep_last_k_reasoning:k=K, delete_all_reasoning, "
                                        "random:r=R, observation_masking:m=M, sliding_window:k=K, "
                                        "keep_last_m_tool_exchanges:m=M.")] = "full",
    model: Annotated[Optional[str], typer.Option("--model", help="The sensor (iclr needs one): a model spec (see "
                                                 "`interp models`) or a local HF directory; its tokenizer counts "
                                                 "the removed tokens.")] = None,
    model_path: ModelPathOpt = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="Counts removed tokens without a sensor "
                                                     "(a model spec or local HF directory).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback unless told otherwise).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free one, printed).")] = 8400,
    upstream_key_env: Annotated[Optional[str], typer.Option(
        "--upstream-key-env", help="Environment variable holding the upstream's API key (e.g. OPENAI_API_KEY).")]
    = None,
    max_sessions: Annotated[int, typer.Option("--max-sessions", help="Agent runs held at once (the least "
                                              "recently used is dropped first).")] = 8,
    session_ttl: Annotated[float, typer.Option("--session-ttl", help="Seconds an idle session is kept.")] = 3600.0,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the upstream.")] = 600.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="The sensor scores no input longer than this "
                                            "(such a step is left whole, logged).")] = DEFAULT_MAX_TOKENS,
    provider: Annotated[str, typer.Option("--provider", help="The upstream kind whose rules limit the edits "
                                          "(interp.serve.providers): auto (the default: /v1/messages anthropic, "
                                          "/v1/responses openai-responses, chat completions deepseek when the "
                                          "upstream URL or the request's model names DeepSeek, else openai-chat), "
                                          "openai-chat, deepseek, anthropic or openai-responses.")] = "auto",
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
) -> None:
    """Serve a proxy that applies a history policy to every model request: chat completions, Anthropic Messages, OpenAI Responses (token: $INTERP_SERVE_TOKEN or printed)."""
    from interp.serve.app import Proxy, bind, make_server, settings_line
    from interp.serve.policy import parse_serve_policy
    from interp.serve.providers import parse_provider

    with option("--policy"):
        chosen = parse_serve_policy(policy)
    with option("--provider"):
        parse_provider(provider)
    for name, value, low in (("--max-sessions", max_sessions, 1), ("--session-ttl", session_ttl, 1),
                             ("--timeout", timeout, 0.001), ("--max-tokens", max_tokens, 1)):
        at_least(name, value, low)
    if not upstream.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {upstream!r}: expected an http:// or https:// base URL")
    key = None
    if upstream_key_env:
        key = os.environ.get(upstream_key_env)
        if not key:
            raise ValueError(f"--upstream-key-env {upstream_key_env}: the variable is not set")
    if chosen.condition in ("iclr", "iclr_step_only") and model is None:
        raise ValueError(f"--policy {chosen.label}: needs --model (the sensor that scores the blocks)")
    if chosen.condition == "drsr_gate":
        raise ValueError("--policy drsr_gate: the gate is being reworked (#38); use interp.serve.app.Proxy(..., "
                         "gate_factory=...) from Python")
    sock = bind(host, port)
    try:
        sensor = None
        if model is not None:
            sensor = load_sensor(model, model_path, device, model_options(device, dtype, "entropy"))
        counter = None
        if tokenizer is not None:
            from interp.sensor.models import load_tokenizer

            counter = load_tokenizer(tokenizer, None)
        token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
        proxy = Proxy(upstream, chosen, log_dir, sensor=sensor, tokenizer=counter, token=token, upstream_key=key,
                      timeout=timeout, max_sessions=max_sessions, session_ttl=session_ttl, max_tokens=max_tokens,
                      provider=provider)
    except BaseException:
        sock.close()
        raise
    url = f"http://{host}:{sock.getsockname()[1]}/v1"
    console.print(settings_line(proxy, url), markup=False)
    if not os.environ.get(TOKEN_ENV):
        console.print(f"token (the agent's API key): {token}", markup=False)
    make_server(proxy.build()).run(sockets=[sock])
