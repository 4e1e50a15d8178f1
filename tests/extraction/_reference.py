"""Independent references for the extraction tests.

Nothing here calls the code under test (``interp.sensor.hooks``, ``interp.sensor.forward``,
``interp.sensor.kernels.attention_rows``, ``interp.extraction.extract``, ``interp.extraction.pooling``,
``interp.extraction.entropy``, ``interp.extraction.store``) to produce an expected value. The
references are:

- the plain HF model's own single, unchunked forward
  (``output_hidden_states=True``, full logits);
- the TransformerLens bridge's ``run_with_cache`` (eager attention, full
  N x N ``hook_pattern``);
- hand computations in float64 (softmax entropy in bits, means over token
  positions found from the tokenizer's character offsets of the whole text).

Tolerances. Everything runs in float32. Residuals of SmolLM2 reach O(1e4)
(massive activations at a few positions), so absolute tolerances are stated
relative to the reference tensor's max magnitude (``close_to_max``): the fp32
rounding of a sum grows with the magnitude of its terms, and a chunked or
differently-shaped matmul reorders those sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "tests" / "data" / "mini.jsonl"
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"

CONDITIONS = ["full", "delete_all_reasoning", "delete_latest_reasoning", "keep_latest_reasoning",
              "hide_observation", "clear_after_code"]
POOLINGS = ["last", "mean_last:8", "mean_latest_step", "mean_reasoning", "mean_generation_prompt"]
SEGMENT_KINDS = ("system", "tools", "task", "reasoning_block", "action", "observation", "glue")  # documented order


@dataclass
class HFRun:
    """One plain HF forward: ``hidden[l]`` [N, d] (l = 0..n_layers; the last is after the final norm), logits [N, V]."""

    hidden: list[torch.Tensor]
    logits: torch.Tensor | None


def hf_forward(sensor, ids, logits: bool = True, keep: list[int] | None = None) -> HFRun:
    """Single unchunked forward of the plain HF model (sdpa, no cache) with every hidden state.

    ``keep``: only these positions' logits (HF's own ``logits_to_keep``), rows in that order.
    """
    ids_t = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    with torch.inference_mode():
        if logits:
            extra = {} if keep is None else {"logits_to_keep": torch.as_tensor(keep, dtype=torch.long)}
            out = sensor.hf_model(input_ids=ids_t, output_hidden_states=True, use_cache=False, **extra)
            lg = out.logits[0].float().clone()
        else:
            out = sensor.hf_model.model(input_ids=ids_t, output_hidden_states=True, use_cache=False)
            lg = None
    return HFRun([h[0].float().clone() for h in out.hidden_states], lg)


def random_ids(sensor, n: int, seed: int) -> list[int]:
    """Seeded random token ids below the tokenizer's base vocabulary."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, sensor.tokenizer.vocab_size, (n,), generator=g).tolist()


def entropy_bits(logits: torch.Tensor) -> torch.Tensor:
    """Hand computation of -sum p log2 p over the last dim, in float64."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    return -(logp.exp() * logp).sum(-1) / math.log(2.0)


def max_abs(t: torch.Tensor) -> float:
    """Largest magnitude of a tensor (1.0 for an all-zero one)."""
    m = float(t.abs().max()) if t.numel() else 0.0
    return m if m > 0 else 1.0


def close_to_max(actual: torch.Tensor, expected: torch.Tensor, rel: float, what: str = "",
                 scale: float | None = None) -> None:
    """Assert ``|actual - expected| <= rel * scale`` elementwise; ``scale`` defaults to max |expected|."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    scale = max_abs(expected) if scale is None else scale
    diff = float((actual.float() - expected.float()).abs().max()) if actual.numel() else 0.0
    assert diff <= rel * scale, f"{what}: max |diff| {diff:.3g} > {rel:g} x {scale:.3g}"


def not_close(a: torch.Tensor, b: torch.Tensor, rel: float) -> bool:
    """True when a and b differ by more than ``rel`` x max|b| somewhere (a sensitivity check)."""
    return float((a.float() - b.float()).abs().max()) > rel * max_abs(b)


def token_text(rendered, positions) -> str:
    """Concatenated text of token positions, read from the tokenizer's offsets of the whole prompt."""
    return "".join(rendered.text[rendered.offsets[p][0]:rendered.offsets[p][1]] for p in positions)


def tokens_covering(offsets, char_start: int, char_end: int) -> list[int]:
    """Token positions whose character span intersects [char_start, char_end)."""
    return [i for i, (s, e) in enumerate(offsets) if s < char_end and e > char_start and e > s]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    """Write raw JSON lines (copied from the bundled files) to ``path``."""
    path.write_text("".join(line.rstrip("\n") + "\n" for line in lines), encoding="utf-8")
    return path


def raw_lines(path: Path, task_ids: list[str]) -> list[str]:
    """The raw lines of ``path`` whose task_id is in ``task_ids`` (in that order)."""
    import json

    by_id = {json.loads(line)["task_id"]: line for line in path.read_text(encoding="utf-8").splitlines() if line}
    return [by_id[t] for t in task_ids]
