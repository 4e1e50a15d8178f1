"""TransformerLens-style ``run_with_cache`` / ``run_with_hooks`` / ``hooks`` on the fast sdpa path.

``sensor.run_with_cache(tokens, names_filter=..., positions=...)`` runs one
plain HF forward (sdpa, no N x N pattern, no eager attention) with torch hooks
behind the bridge's TransformerLens names (``interp.sensor.hooks``, where the
sites are tabled), and keeps only the rows of ``positions`` of each activation
the moment it is computed: by default the last position (the boundary token of
a render), so a cache of every residual site is O(layers x d_model) whatever
the context length. It returns ``(logits, cache)`` where ``cache`` is a
TransformerLens ``ActivationCache`` (``cache["resid_pre", 3]`` shorthands
work) and ``logits`` are those of the same positions, float32 whatever the
model dtype (final norm and unembedding in float32: ``interp.sensor.unembed``;
``ln_final.hook_out`` is then float32 too).

Shapes are the bridge's with the position axis sliced: ``[b, P, ...]`` for
``b`` rows and ``P = len(positions)``; ``blocks.{l}.attn.hook_pattern`` is
``[b, n_heads, P, n]``: the softmax rows of the P query positions over all n
keys (zero past a row's query), computed from the rotated q and the keys the attention kernel sees
(O(n) per row; sliding-window or soft-capped attention is not modelled).

``sensor.run_with_hooks(tokens, fwd_hooks=[(name, fn)])`` calls
``fn(activation, hook)`` with the full activation and a :class:`Hook`
(``.name``, ``.layer()``, ``.ctx``), as TransformerLens does; a returned
tensor replaces the activation, so TransformerLens hook functions run
unchanged. A name may also be a predicate on names.

Inputs (:func:`token_batch`), what a TransformerLens user passes: a string or
a list of strings (tokenized as is, special tokens per the tokenizer), a token
list or a list of token lists, a ``Rendered`` (its ``input_ids``), a ``[n]`` or
``[b, n]`` tensor (``sensor.to_tokens(...)`` output), optionally with
``attention_mask`` (``[b, n]``, 1 on real tokens, left or right padding). Rows
of different lengths run as one right-padded batch: the forward is causal
(softmax attention, the Gated-DeltaNet recurrence and its causal conv alike),
so a row's real tokens never see the padding after them and each row's
positions are 0..n_i-1, exactly as when it runs alone (no mask is needed;
``tests/api/test_batch.py`` checks parity with running the rows one by one).
Without ``attention_mask`` a ``[b, n]`` tensor with b > 1 loses its trailing
pad tokens (``tokenizer.pad_token_id``; TransformerLens's rule for right
padding); one sequence is taken as given. ``positions`` are per row: ``-1`` is
each row's last real token. Hooks of ``run_with_hooks`` see the padded
``[b, n_max, ...]`` activations; rows past a row's length are padding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from interp.sensor.hooks import attention_implementation, served_names
from interp.sensor.hooks import hooks as name_hooks
from interp.sensor.kernels.chunk_attention import chunk_attention
from interp.sensor.protocol import Sensor
from interp.sensor.unembed import float_final_norm, logits as unembed_logits

if TYPE_CHECKING:
    import numpy as np
    from transformer_lens.ActivationCache import ActivationCache

IMPLEMENTATION = "interp_api"
Positions = int | Sequence[int] | None
NamesFilter = str | Sequence[str] | Callable[[str], bool] | None
TLHook = Callable[[torch.Tensor, "Hook"], "torch.Tensor | None"]


class HasInputIds(Protocol):
    """A render (``interp.data.render.Rendered``) or a tokenizer's encoding: its ``input_ids`` are the tokens."""

    @property
    def input_ids(self) -> Sequence[int] | torch.Tensor: ...


# What a TransformerLens user passes as tokens (module doc, Inputs): text, ids, renders, tensors, arrays.
Tokens: TypeAlias = ("str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]] | Sequence[torch.Tensor]"
                     " | torch.Tensor | np.ndarray | HasInputIds | Sequence[HasInputIds]")
AttentionMask = torch.Tensor | Sequence[Sequence[int]] | None  # [b, n], 1 on real tokens


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


def token_batch(sensor: Sensor, tokens: Tokens, attention_mask: AttentionMask = None) -> tuple[torch.Tensor, list[int]]:
    """Rows as a right-padded ``[b, n_max]`` long tensor on the sensor's device and each row's length (module doc)."""
    if isinstance(tokens, str):
        tokens = [tokens]
    tokens = getattr(tokens, "input_ids", tokens)
    if isinstance(tokens, list | tuple) and tokens and all(isinstance(t, str) for t in tokens):
        tokens = [sensor.tokenizer(t)["input_ids"] for t in tokens]
    if isinstance(tokens, list | tuple) and tokens and _is_row(tokens[0]):
        rows = [torch.as_tensor(getattr(t, "input_ids", t), dtype=torch.long).reshape(-1) for t in tokens]
        if attention_mask is not None:
            raise ValueError("attention_mask: only with a [b, n] tensor; a list of rows is unpadded already")
    else:
        ids = torch.as_tensor(tokens, dtype=torch.long)
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2:
            raise ValueError(f"tokens: a sequence or a [batch, pos] batch expected, got shape {tuple(ids.shape)}")
        rows = _unpad(ids, attention_mask, getattr(sensor.tokenizer, "pad_token_id", None))
    if not rows or any(r.numel() == 0 for r in rows):
        raise ValueError("tokens: every row needs at least one token")
    lengths = [int(r.numel()) for r in rows]
    pad = getattr(sensor.tokenizer, "pad_token_id", None)
    batch = torch.full((len(rows), max(lengths)), 0 if pad is None else int(pad), dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, :lengths[i]] = row
    return batch.to(sensor.device), lengths


def token_ids(sensor: Sensor, tokens: Tokens) -> torch.Tensor:
    """One sequence as a ``[1, n]`` long tensor on the sensor's device (list, tensor, Rendered or str)."""
    ids, lengths = token_batch(sensor, tokens)
    if len(lengths) != 1:
        raise ValueError(f"tokens: one sequence expected, got {len(lengths)} rows")
    return ids


def _is_row(item: Any) -> bool:
    """Whether an element of a token list is itself a sequence (a batch of rows) rather than one token id."""
    if isinstance(item, torch.Tensor):
        return item.dim() > 0
    return isinstance(item, list | tuple) or hasattr(item, "input_ids") or getattr(item, "ndim", 0) > 0


def _unpad(ids: torch.Tensor, attention_mask: AttentionMask, pad_id: int | None) -> list[torch.Tensor]:
    """The real tokens of each row of ``ids`` (by ``attention_mask``, or by trailing pad tokens for b > 1)."""
    if attention_mask is None:
        if ids.shape[0] == 1 or pad_id is None:
            return list(ids)
        real = ids.ne(pad_id).flip(-1).cumsum(-1).flip(-1) > 0  # False only on a row's trailing pads
        return [row[: int(keep.sum())] for row, keep in zip(ids, real)]
    mask = torch.as_tensor(attention_mask).to(torch.bool).cpu()
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask: shape {tuple(mask.shape)} does not match tokens {tuple(ids.shape)}")
    rows = []
    for i, (row, keep) in enumerate(zip(ids, mask)):
        where = keep.nonzero().flatten()
        if where.numel() and int(where[-1] - where[0]) + 1 != where.numel():
            raise ValueError(f"attention_mask: row {i} has a gap (padding must be on the left or the right)")
        rows.append(row[keep])
    return rows


def resolve_positions(positions: Positions, n: int) -> list[int]:
    """Absolute positions of ``positions`` (an int, a list, negatives from the end; None = all) in ``n`` tokens."""
    if positions is None:
        return list(range(n))
    chosen = [positions] if isinstance(positions, int) else [int(p) for p in positions]
    if bad := [p for p in chosen if not -n <= p < n]:
        raise ValueError(f"positions {bad} out of range for {n} tokens")
    return [p % n for p in chosen]


def batch_positions(positions: Positions, lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """``[b, P]`` absolute positions of ``positions`` in each row (negatives from the row's own end)."""
    if positions is None and len(set(lengths)) > 1:
        raise ValueError("positions=None (every position) needs rows of one length; pass explicit positions")
    return torch.tensor([resolve_positions(positions, n) for n in lengths], dtype=torch.long, device=device)


def _names(names: Sequence[str], names_filter: NamesFilter) -> list[str]:
    if names_filter is None:
        return list(names)
    if callable(names_filter):
        return [n for n in names if names_filter(n)]
    wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    if unknown := sorted(set(wanted) - set(names)):
        raise ValueError(f"names_filter: not served on the fast path: {unknown}; served: {', '.join(names)}")
    return [n for n in names if n in wanted]


def _pattern_attention(wanted: dict[int, Callable[[torch.Tensor], None]], query_pos: torch.Tensor):
    """The causal attention, plus the softmax rows of ``query_pos`` [b, P] handed to ``wanted[layer]`` [b, h, P, n]."""
    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, **kwargs: object) -> tuple[torch.Tensor, None]:
        passed: dict[str, Any] = kwargs  # transformers' attention options (scaling, ...), handed on to sdpa
        layer = getattr(module, "layer_idx", None)
        sink = None if layer is None else wanted.get(layer)
        if sink is not None:
            scaling = passed.get("scaling") or getattr(module, "scaling", None) or query.shape[-1] ** -0.5
            pos = query_pos.to(query.device)
            rows = torch.arange(query.shape[0], device=query.device)[:, None]
            q = query.transpose(1, 2)[rows, pos].transpose(1, 2).float()  # [b, h, P, hd]
            k = key.float().repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # [b, h, n, hd]
            scores = torch.einsum("bhpd,bhnd->bhpn", q, k) * scaling
            past = key.shape[2] - query.shape[2]
            future = torch.arange(key.shape[2], device=query.device)[None, None] > (pos[:, :, None] + past)
            sink(torch.softmax(scores.masked_fill(future[:, None], float("-inf")), dim=-1).to(query.dtype))
        if query.shape[0] > 1:  # a right-padded batch, no past (use_cache=False): plain causal sdpa
            passed.pop("is_causal", None)
            return sdpa_attention_forward(module, query, key, value, None, is_causal=True, **passed)
        return chunk_attention(module, query, key, value, attention_mask, **passed)
    return attention


def _forward(sensor: Sensor, ids: torch.Tensor, positions: torch.Tensor, fwd: list[tuple[str, Callable]],
             patterns: dict[int, Callable[[torch.Tensor], None]]) -> torch.Tensor:
    """One plain forward of a right-padded batch under ``fwd`` (interp-style hooks); logits [b, P, vocab]."""
    model = sensor.hf_model
    with torch.inference_mode(), \
            attention_implementation(model, IMPLEMENTATION, _pattern_attention(patterns, positions)), \
            float_final_norm(sensor), name_hooks(model, fwd):
        hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state
        rows = torch.arange(ids.shape[0], device=hidden.device)[:, None]
        return unembed_logits(sensor, hidden[rows, positions.to(hidden.device)])


def _split(sensor: Sensor, fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]]):
    """TL-style ``(name or predicate, fn)`` pairs -> (interp hooks, pattern layer -> fn)."""
    served = served_names(sensor.hf_model)
    plain: list[tuple[str, Callable]] = []
    patterns: dict[int, list[tuple[Hook, TLHook]]] = {}
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


def run_with_hooks(sensor: Sensor, tokens: Tokens, fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]] = (),
                   positions: Positions = -1, attention_mask: AttentionMask = None) -> torch.Tensor:
    """Logits ``[b, P, vocab]`` at each row's ``positions``, one fast forward with TL-style hooks (module doc)."""
    ids, lengths = token_batch(sensor, tokens, attention_mask)
    pos = batch_positions(positions, lengths, ids.device)
    plain, patterns = _split(sensor, fwd_hooks)
    return _forward(sensor, ids, pos, plain, _pattern_sinks(patterns))


def run_with_cache(sensor: Sensor, tokens: Tokens, names_filter: NamesFilter = None, positions: Positions = -1,
                   fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]] = (),
                   attention_mask: AttentionMask = None) -> tuple[torch.Tensor, ActivationCache]:
    """``(logits, ActivationCache)`` at each row's ``positions`` (default: its last token), one fast forward.

    ``fwd_hooks`` run as well (e.g. a patch), before the cache reads a site.
    """
    from transformer_lens.ActivationCache import ActivationCache

    ids, lengths = token_batch(sensor, tokens, attention_mask)
    pos = batch_positions(positions, lengths, ids.device)
    names = _names(served_names(sensor.hf_model), names_filter)
    store: dict[str, torch.Tensor] = {}
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None]

    def keep(x: torch.Tensor, hook: Hook) -> None:
        store[hook.name] = x if hook.name.endswith("hook_pattern") else x[rows, pos].clone()

    plain, patterns = _split(sensor, [*fwd_hooks, *[(n, keep) for n in names]])
    sinks = _pattern_sinks(patterns)
    logits = _forward(sensor, ids, pos, plain, sinks)
    if missing := [n for n in names if n not in store]:
        raise RuntimeError(f"hooks did not fire: {missing}")
    return logits, ActivationCache({n: store[n] for n in names}, getattr(sensor, "bridge", None), has_batch_dim=True)


@contextlib.contextmanager
def hooks(sensor: Sensor, fwd_hooks: Sequence[tuple[str | Callable[[str], bool], TLHook]]) -> Iterator[None]:
    """TL-style hooks ``fn(activation, hook)`` on ``sensor.hf_model`` for the block (any forward you run in it)."""
    plain, patterns = _split(sensor, fwd_hooks)
    if patterns:
        raise ValueError("hooks(): attn.hook_pattern rows need run_with_cache / run_with_hooks (the fast forward)")
    with name_hooks(sensor.hf_model, plain):
        yield
