"""Generation of the next assistant turn from a rendered prompt, deterministic for a fixed seed.

The model generates the next assistant turn from the rendered ``input_ids``: one greedy continuation
plus ``samples`` sampled ones (temperature, top-p 1, no top-k; other generation
parameters, e.g. a repetition penalty, come from the model's generation
config), each seeded by ``(seed, state, condition, sample)`` through
``torch.manual_seed`` inside ``torch.random.fork_rng``, so a run is
deterministic for a fixed seed and leaves the global RNG untouched.

Where a turn ends (``stop_reason``; the text is cut there):

- ``end_of_turn``: an end-of-turn token of the template (:func:`stop_token_ids`:
  the EOS ids, ``<|im_end|>``, ``<|im_start|>``), or the model starting an
  observation itself (``<tool_response>``, the render's observation marker);
- ``action_end``: the end of the first action (:func:`action_end`): a
  ``</tool_call>`` followed by anything but whitespace or another
  ``<tool_call>`` (parallel calls stay together);
- ``max_new_tokens``: the token limit came first. The turn is then
  ``truncated`` (cut off, e.g. inside its reasoning) unless its last
  ``</tool_call>`` is followed only by whitespace (the action is complete).

The token limit. :func:`measured_max_new_tokens` is the default: the 95th
percentile of the recorded assistant turns (reasoning + action, from the first
reasoning token to the last action token of each step, in the sensor's own
rendering: :func:`turn_lengths`) of the trajectories given, rounded up to a
multiple of 64. Measured on the demo set (193 steps): SmolLM2 tokenizer median
183, p90 439, p95 538, max 785 tokens -> 576; tiny-qwen3.5 tokenizer median
347, p95 1094, max 1573 -> 1152.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from interp.data.parse import CALL_CLOSE, CALL_OPEN
from interp.data.render import render
from interp.data.trajectory import Trajectory
from interp.sensor.protocol import Sensor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from interp.sensor.forward import Snapshot

OBSERVATION_OPEN = "<tool_response>"  # the model writing an observation itself: its turn is over
STOP_RULE = "action_end.v1"  # part of the generation cache key: change when the stop rule changes
TURN_QUANTILE = 0.95


def sample_seed(seed: int, state_id: str, condition: str, sample: int) -> int:
    """The torch seed of one sampled continuation (stable across processes and platforms)."""
    digest = hashlib.sha256(f"{seed}:{state_id}:{condition}:{sample}".encode()).hexdigest()
    return int(digest[:8], 16)


def stop_token_ids(sensor: Sensor) -> list[int]:
    """End-of-turn token ids: the generation config's EOS ids, the tokenizer's EOS, ``<|im_end|>``, ``<|im_start|>``."""
    tok = sensor.tokenizer
    eos = sensor.hf_model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    for marker in ("<|im_end|>", "<|im_start|>"):
        token = tok.convert_tokens_to_ids(marker)
        if isinstance(token, int) and token != tok.unk_token_id:
            ids.add(token)
    return sorted(ids)


def action_end(text: str) -> int | None:
    """Character index where the turn's first action has certainly ended, or None (not yet known).

    The action ends after a ``</tool_call>`` that is followed by text that cannot
    continue it (not whitespace, not another ``<tool_call>`` nor a prefix of one),
    or at an ``<tool_response>`` the model writes itself. A plain-text action ends
    only at an end-of-turn token.
    """
    obs = text.find(OBSERVATION_OPEN)
    pos = 0
    while (close := text.find(CALL_CLOSE, pos)) >= 0 and (obs < 0 or close < obs):
        end = close + len(CALL_CLOSE)
        rest = text[end:].lstrip()
        if not rest or CALL_OPEN.startswith(rest):
            return None
        if not rest.startswith(CALL_OPEN):
            return end
        pos = end
    return obs if obs >= 0 else None


def _complete_at_limit(text: str) -> bool:
    """At the token limit: the last ``</tool_call>`` is followed only by whitespace or part of ``<tool_call>``."""
    close = text.rfind(CALL_CLOSE)
    return close >= 0 and CALL_OPEN.startswith(text[close + len(CALL_CLOSE):].lstrip())


class _ActionEnd:
    """A transformers stopping criterion: true once :func:`action_end` finds the end of the first action."""

    def __init__(self, tokenizer: Any, prompt_len: int):
        self.tokenizer, self.prompt_len = tokenizer, prompt_len

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        text = self.tokenizer.decode(input_ids[0, self.prompt_len:].tolist(), skip_special_tokens=False)
        done = CALL_CLOSE in text or OBSERVATION_OPEN in text
        done = done and action_end(text) is not None
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def prompt_snapshot(sensor: Sensor, input_ids: list[int]) -> Snapshot:
    """The cache after all but the last prompt token: run once, it serves every generation from the prompt
    (``generate_turn(prompt=...)``), so a greedy turn and its samples pay one prefill, not one each."""
    from interp.sensor.forward import Plan, run_plan

    return run_plan(sensor, input_ids[:-1], Plan(snapshots=[len(input_ids) - 1])).snapshots[len(input_ids) - 1]


def generate_turn(sensor: Sensor, input_ids: list[int], max_new_tokens: int, seed: int | None = None,
                  temperature: float = 0.7, top_p: float = 1.0, prompt: Snapshot | None = None) -> dict[str, Any]:
    """One continuation up to the end of its first action: greedy when ``seed`` is None, else sampled;
    ``prompt`` (:func:`prompt_snapshot` of ``input_ids``) continues a copy of that cache instead of a prefill."""
    import torch
    from transformers import GenerationConfig, StoppingCriteriaList

    from interp.sensor.forward import snapshot_cache

    stops = stop_token_ids(sensor)
    sampled = seed is not None
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sampled, eos_token_id=stops,
                              pad_token_id=sensor.tokenizer.pad_token_id if sensor.tokenizer.pad_token_id is not None
                              else stops[0],
                              **({"temperature": temperature, "top_p": top_p, "top_k": 0} if sampled else {}))
    ids = torch.tensor([input_ids], device=sensor.device)
    cuda = [sensor.device] if sensor.device.type == "cuda" else []
    criteria = StoppingCriteriaList([_ActionEnd(sensor.tokenizer, len(input_ids))])
    with torch.random.fork_rng(devices=cuda), torch.no_grad():  # the caller's RNG state is left as it was
        if sampled:
            torch.manual_seed(seed)
        cache = {} if prompt is None else {"cache": snapshot_cache(prompt.cache)}  # generation mutates its cache
        out = sensor.hf_model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                       stopping_criteria=criteria, **cache)
    new = out[0, len(input_ids):].tolist()
    return finish_turn(sensor.tokenizer.decode, new, stops, max_new_tokens)


def finish_turn(decode: Callable[..., str], new: list[int], stops: Sequence[int],
                max_new_tokens: int) -> dict[str, Any]:
    """``{text, n_new_tokens, stopped, truncated, stop_reason}`` of generated token ids (the module docstring's rules)."""
    stop_at = next((i for i, t in enumerate(new) if t in stops), None)
    kept = new if stop_at is None else new[:stop_at]
    text = decode(kept, skip_special_tokens=False)
    end = action_end(text)
    if end is not None:
        reason = "end_of_turn" if end == text.find(OBSERVATION_OPEN) else "action_end"
        text = text[:end]
    elif stop_at is not None:
        reason = "end_of_turn"
    elif len(new) >= max_new_tokens:
        reason = "max_new_tokens"
    else:
        reason = "end_of_turn"  # generation stopped short of the limit without a marker (e.g. model-side stop)
    truncated = reason == "max_new_tokens" and not _complete_at_limit(text)
    return {"text": text, "n_new_tokens": len(kept), "stopped": reason != "max_new_tokens",
            "truncated": truncated, "stop_reason": reason}


def turn_lengths(trajectories: Sequence[Trajectory], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Tokens of every recorded assistant turn: first reasoning token to last action token of each step, as rendered."""
    out = []
    for traj in trajectories:
        rendered = render(traj, traj.n_steps, tokenizer)
        for t in range(1, traj.n_steps + 1):
            segs = [s for s in rendered.spans(step=t) if s.kind in ("reasoning_block", "action")]
            if segs:
                out.append(max(s.end for s in segs) - min(s.start for s in segs))
    return out


def measured_max_new_tokens(trajectories: Sequence[Trajectory], tokenizer: PreTrainedTokenizerBase,
                            quantile: float = TURN_QUANTILE) -> tuple[int, str]:
    """``(limit, how)``: the ``quantile`` of :func:`turn_lengths`, rounded up to a multiple of 64, and a description."""
    import numpy as np

    lengths = turn_lengths(trajectories, tokenizer)
    if not lengths:
        raise ValueError("no recorded assistant turn to measure the token limit on; pass max_new_tokens")
    q = float(np.quantile(lengths, quantile))
    limit = max(64, 64 * math.ceil(q / 64))
    return limit, (f"measured: p{round(100 * quantile)} of {len(lengths)} recorded assistant turns in the sensor's "
                   f"tokens = {q:.0f} (median {float(np.median(lengths)):.0f}, max {max(lengths)}), rounded up to "
                   f"a multiple of 64")
