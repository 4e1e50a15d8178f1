"""Generation of the next assistant turn from a rendered prompt, deterministic for a fixed seed.

The model generates the next assistant turn from the rendered ``input_ids``: one greedy continuation
plus ``samples`` sampled ones (temperature, top-p 1, no top-k; other generation
parameters, e.g. a repetition penalty, come from the model's generation
config), each seeded by ``(seed, state, condition, sample)`` through
``torch.manual_seed`` inside ``torch.random.fork_rng``, so a run is
deterministic for a fixed seed and leaves the global RNG untouched.
"""

from __future__ import annotations

import hashlib
from typing import Any


def sample_seed(seed: int, state_id: str, condition: str, sample: int) -> int:
    """The torch seed of one sampled continuation (stable across processes and platforms)."""
    digest = hashlib.sha256(f"{seed}:{state_id}:{condition}:{sample}".encode()).hexdigest()
    return int(digest[:8], 16)


def stop_token_ids(sensor: Any) -> list[int]:
    """End-of-turn token ids: the generation config's EOS ids, the tokenizer's EOS and ``<|im_end|>``."""
    tok = sensor.tokenizer
    eos = sensor.hf_model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        ids.add(im_end)
    return sorted(ids)


def generate_turn(sensor: Any, input_ids: list[int], max_new_tokens: int, seed: int | None = None,
                  temperature: float = 0.7, top_p: float = 1.0) -> dict[str, Any]:
    """One continuation: greedy when ``seed`` is None, else sampled after ``torch.manual_seed(seed)``."""
    import torch
    from transformers import GenerationConfig

    stops = stop_token_ids(sensor)
    sampled = seed is not None
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sampled, eos_token_id=stops,
                              pad_token_id=sensor.tokenizer.pad_token_id if sensor.tokenizer.pad_token_id is not None
                              else stops[0],
                              **({"temperature": temperature, "top_p": top_p, "top_k": 0} if sampled else {}))
    ids = torch.tensor([input_ids], device=sensor.device)
    cuda = [sensor.device] if sensor.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.no_grad():  # the caller's RNG state is left as it was
        if sampled:
            torch.manual_seed(seed)
        out = sensor.hf_model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    new = out[0, len(input_ids):].tolist()
    stop_at = next((i for i, t in enumerate(new) if t in stops), None)
    kept = new if stop_at is None else new[:stop_at]
    return {"text": sensor.tokenizer.decode(kept, skip_special_tokens=False), "n_new_tokens": len(kept),
            "stopped": stop_at is not None}
