"""TransformerLens-style ``run_with_cache`` / ``run_with_hooks`` / ``hooks`` on the fast sdpa path.

``sensor.run_with_cache(tokens, names_filter=..., positions=...)`` runs one
plain HF forward (sdpa, no N x N pattern, no eager attention) with torch hooks
behind the bridge's TransformerLens names (``interp.sensor.hooks``, where the
sites are tabled), and keeps only the rows of ``positions`` of each activation
the moment it is computed: by default the last position (the boundary token of
a render), so a cache of every residual site is O(layers x d_model) whatever
the context length. It returns ``(logits, cache)`` where ``cache`` is a
TransformerLens ``ActivationCache`` (``cache["resid_pre", 3]`` shorthands
work) and ``logits`` are those of the same positions.

Shapes are the bridge's with the position axis sliced: ``[1, P, ...]`` for
``P = len(positions)``; ``blocks.{l}.attn.hook_pattern`` is
``[1, n_heads, P, n]``: the softmax rows of the P query positions over all n
keys, computed from the rotated q and the keys the attention kernel sees
(O(n) per row; sliding-window or soft-capped attention is not modelled).

``sensor.run_with_hooks(tokens, fwd_hooks=[(name, fn)])`` calls
``fn(activation, hook)`` with the full activation and a :class:`Hook`
(``.name``, ``.layer()``, ``.ctx``), as TransformerLens does; a returned
tensor replaces the activation, so TransformerLens hook functions run
unchanged. A name may also be a predicate on names. Inputs: a token list, a
``[n]`` or ``[1, n]`` tensor, a ``Rendered`` (its ``input_ids``) or a string
(tokenized as is); one unpadded sequence per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from interp.sensor.hooks import attention_implementation, served_names
from interp.sensor.hooks import hooks as name_hooks
from interp.sensor.kernels.chunk_attention import chunk_attention

IMPLEMENTATION = "interp_api"
Positions = int | Sequence[int] | None
NamesFilter = str | Sequence[str] | Callable[[str], bool] | None
TLHook = Callable[[torch.Tensor, "Hook"], "torch.Tensor | None"]


class Hook:
    """What a TransformerLens hook function receives as ``hook``: ``name``, ``layer()`` and a ``ctx`` dict."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ctx: dict[Any, Any] = {}

    def layer(self) -> int:
        """The layer index of a ``blocks.{l}....`` name (TransformerLens ``HookPoint.layer``)."""
        return int(self.name.split(".")[1])

    def __repr__(self) -> str:
        return f"Hook(name={self.name!r})"


def token_ids(sensor: Any, tokens: Any) -> torch.Tensor:
    """One sequence as a ``[1, n]`` long tensor on the sensor's device (list, tensor, Rendered or str)."""
    if isinstance(tokens, str):
        tokens = sensor.tokenizer(tokens)["input_ids"]
    tokens = getattr(tokens, "input_ids", tokens)
    ids = torch.as_tensor(tokens, dtype=torch.long, device=sensor.device)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(f"tokens: one non-empty sequence expected, got shape {tuple(ids.shape)}")
    return ids[None]


def resolve_positions(positions: Positions, n: int) -> list[int]:
    """Absolute positions of ``positions`` (an int, a list, negatives from the end; None = all) in ``n`` tokens."""
    if positions is None:
        return list(range(n))
    chosen = [positions] if isinstance(positions, int) else [int(p) for p in positions]
    if bad := [p for p in chosen if not -n <= p < n]:
        raise ValueError(f"positions {bad} out of range for {n} tokens")
    return [p % n for p in chosen]


def _names(names: Sequence[str], names_filter: NamesFilter) -> list[str]:
    if names_filter is None:
        return list(names)
    if callable(names_filter):
        return [n for n in names if names_filter(n)]
    wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    if unknown := sorted(set(wanted) - set(names)):
        raise ValueError(f"names_filter: not served on the fast path: {unknown}; served: {', '.join(names)}")
    return [n for n in names if n in wanted]


def _pattern_attention(wanted: dict[int, Callable[[torch.Tensor], None]], query_pos: list[int]):
    """The chunk attention, plus the softmax rows of ``query_pos`` handed to ``wanted[layer]`` ([1, h, P, n])."""
    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:
        sink = wanted.get(getattr(module, "layer_idx", None))
        if sink is not None:
            scaling = kwargs.get("scaling") or getattr(module, "scaling", None) or query.shape[-1] ** -0.5
            pos = torch.tensor(query_pos, device=query.device)
            q = query[0][:, pos].float()  # [h, P, hd]
            k = key[0].float().repeat_interleave(query.shape[1] // key.shape[1], dim=0)  # [h, n, hd]
            scores = torch.einsum("hpd,hnd->hpn", q, k) * scaling
            past = key.shape[2] - query.shape[2]
            future = torch.arange(key.shape[2], device=query.device)[None] > (pos[:, None] + past)
            sink(torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1).to(query.dtype)[None])
        return chunk_attention(module, query, key, value, attention_mask, **kwargs)
    return attention


def _forward(sensor: Any, ids: torch.Tensor, positions: list[int], fwd: list[tuple[str, Callable]],
             patterns: dict[int, Callable[[torch.Tensor], None]]) -> torch.Tensor:
    """One plain forward under ``fwd`` (interp-style hooks); logits at ``positions`` [1, P, vocab]."""
    model = sensor.hf_model
    with torch.inference_mode(), \
            attention_implementation(model, IMPLEMENTATION, _pattern_attention(patterns, positions)), \
            name_hooks(model, fwd):
        hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state
        return model.get_output_embeddings()(hidden[:, positions])


def _split(sensor: Any, fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]]):
    """TL-style ``(name or predicate, fn)`` pairs -> (interp hooks, pattern layer -> fn)."""
    served = served_names(sensor.hf_model)
    plain, patterns = [], {}
    for name, fn in fwd_hooks:
        for n in _names(served, name):
            hook = Hook(n)

            def call(x: torch.Tensor, _: str, fn: TLHook = fn, hook: Hook = hook) -> torch.Tensor | None:
                return fn(x, hook)
            if n.endswith("attn.hook_pattern"):
                patterns.setdefault(hook.layer(), []).append((hook, fn))
            else:
                plain.append((n, call))
    return plain, patterns


def _pattern_sinks(patterns: dict[int, list[tuple[Hook, TLHook]]]) -> dict[int, Callable[[torch.Tensor], None]]:
    def sink(pairs: list[tuple[Hook, TLHook]]) -> Callable[[torch.Tensor], None]:
        def call(rows: torch.Tensor) -> None:
            for hook, fn in pairs:
                if fn(rows, hook) is not None:
                    raise ValueError(f"{hook.name}: the fast path serves pattern rows for reading only")
        return call
    return {layer: sink(pairs) for layer, pairs in patterns.items()}


def run_with_hooks(sensor: Any, tokens: Any, fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]] = (),
                   positions: Positions = -1) -> torch.Tensor:
    """Logits ``[1, P, vocab]`` at ``positions`` of one fast forward with TL-style hooks (module docstring)."""
    ids = token_ids(sensor, tokens)
    pos = resolve_positions(positions, ids.shape[1])
    plain, patterns = _split(sensor, fwd_hooks)
    return _forward(sensor, ids, pos, plain, _pattern_sinks(patterns))


def run_with_cache(sensor: Any, tokens: Any, names_filter: NamesFilter = None, positions: Positions = -1,
                   fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]] = ()) -> tuple[torch.Tensor, Any]:
    """``(logits, ActivationCache)`` at ``positions`` (default: the last token) of one fast forward (module docstring).

    ``fwd_hooks`` run as well (e.g. a patch), before the cache reads a site.
    """
    from transformer_lens.ActivationCache import ActivationCache

    ids = token_ids(sensor, tokens)
    pos = resolve_positions(positions, ids.shape[1])
    names = _names(served_names(sensor.hf_model), names_filter)
    store: dict[str, torch.Tensor] = {}
    index = torch.tensor(pos, device=sensor.device)

    def keep(x: torch.Tensor, hook: Hook) -> None:
        store[hook.name] = x if hook.name.endswith("hook_pattern") else x[:, index].clone()

    plain, patterns = _split(sensor, [*fwd_hooks, *[(n, keep) for n in names]])
    sinks = _pattern_sinks(patterns)
    logits = _forward(sensor, ids, pos, plain, sinks)
    if missing := [n for n in names if n not in store]:
        raise RuntimeError(f"hooks did not fire: {missing}")
    return logits, ActivationCache({n: store[n] for n in names}, getattr(sensor, "bridge", None), has_batch_dim=True)


@contextlib.contextmanager
def hooks(sensor: Any, fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]]) -> Iterator[None]:
    """TL-style hooks ``fn(activation, hook)`` on ``sensor.hf_model`` for the block (any forward you run in it)."""
    plain, patterns = _split(sensor, fwd_hooks)
    if patterns:
        raise ValueError("hooks(): attn.hook_pattern rows need run_with_cache / run_with_hooks (the fast forward)")
    with name_hooks(sensor.hf_model, plain):
        yield
