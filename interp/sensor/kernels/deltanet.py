"""Gated-DeltaNet kernels that keep float64, so a float64 model is float64 end to end.

transformers' torch fallbacks for the gated delta rule (``torch_chunk_gated_delta_rule``
for a sequence, ``torch_recurrent_gated_delta_rule`` for one cached token) cast
q, k, v, beta and the decay to float32 whatever the model dtype. The two
kernels then round differently, so a whole forward and the same sequence run as
prefix + cached continuation differ by ~1e-6 relative; a random model amplifies
that to ~3e-4 in KL Repair, which hides whether a cache-reusing fast path is
exact. Inside :func:`float64_kernels` float64 inputs of both kernels go to
:func:`gated_delta_rule_fp64`, the sequential recurrence in float64; every
other dtype still goes to transformers' kernel unchanged.

Nothing is patched for the process: the Gated-DeltaNet layer calls the kernels
as globals of its modeling module, so :func:`float64_kernels` swaps them for
the duration of a block and restores the originals after, and
:func:`bind_float64_kernels` scopes that to every forward of one model's own
Gated-DeltaNet modules, plus an instance-bound kernel that the TransformerLens
bridge's reimplemented layer forward picks up (``load_model(dtype="fp64")`` does
this). Other models in the process, and code outside those forwards, see
transformers' kernels.

The recurrence, per value head (``S`` is the ``[d_k, d_v]`` state, ``q``, ``k``
l2-normalised when asked, ``q`` scaled by ``d_k ** -0.5``)::

    S_t = exp(g_t) * S_{t-1}
    S_t = S_t + k_t (beta_t * (v_t - S_t^T k_t))^T
    o_t = S_t^T q_t

It loops over tokens in Python: exact, and meant for float64 parity checks on
small models, not for speed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import torch

# transformers modules whose Gated-DeltaNet layer calls these module-level kernels
_MODULES = ("transformers.models.qwen3_5.modeling_qwen3_5",)
_KERNELS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # same epsilon placement as transformers' and FLA's l2norm
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_rule_fp64(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gated delta rule in float64 (same arguments and returns as transformers' torch kernels).

    Shapes: q, k ``[batch, seq, k_heads, d_k]``; v ``[batch, seq, v_heads, d_v]``;
    g (log decay, <= 0) and beta ``[batch, seq, v_heads]``; state
    ``[batch, v_heads, d_k, d_v]``. Returns ``(out [batch, seq, v_heads, d_v]``
    in the input dtype``, final state or None)``.
    """
    if cu_seqlens is not None:
        raise NotImplementedError("gated_delta_rule_fp64 does not take packed sequences (cu_seqlens)")
    batch, seq, k_heads, d_k = key.shape
    v_heads, d_v = value.shape[-2:]
    if k_heads != v_heads:  # grouped value heads: each q/k head serves v_heads // k_heads value heads
        query = query.repeat_interleave(v_heads // k_heads, dim=2)
        key = key.repeat_interleave(v_heads // k_heads, dim=2)
    q, k, v, b, decay = (x.transpose(1, 2).to(torch.float64) for x in (query, key, value, beta, g))
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    q = q * d_k ** -0.5
    state = (torch.zeros(batch, v_heads, d_k, d_v, dtype=torch.float64, device=v.device)
             if initial_state is None else initial_state.to(torch.float64))
    out = torch.empty_like(v)
    for t in range(seq):
        state = state * decay[:, :, t].exp()[..., None, None]
        delta = (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", state, k[:, :, t])) * b[:, :, t, None]
        state = state + k[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = torch.einsum("bhkv,bhk->bhv", state, q[:, :, t])
    return out.transpose(1, 2).contiguous().to(query.dtype), state if output_final_state else None


def _float64_aware(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def kernel(query: torch.Tensor, *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor | None]:
        rest: tuple[Any, ...] = args  # the kernel's own arguments, handed on unread
        options: dict[str, Any] = kwargs
        if query.dtype == torch.float64:
            options.pop("chunk_size", None)
            return gated_delta_rule_fp64(query, *rest, **options)
        return original(query, *rest, **options)

    kernel.float64_aware = True  # type: ignore[attr-defined]
    return kernel


@contextlib.contextmanager
def float64_kernels(modules: Iterable[ModuleType] | None = None) -> Iterator[None]:
    """Route float64 Gated-DeltaNet kernel calls to :func:`gated_delta_rule_fp64` inside the block.

    ``modules`` are the modeling modules whose kernel globals are swapped
    (default: transformers' Qwen3.5 modeling module). Re-entrant: kernels that
    are already float64-aware are left as they are. The originals are put back
    on exit, exception or not; other dtypes go to transformers' kernel unchanged.
    """
    targets = list(modules) if modules is not None else [importlib.import_module(name) for name in _MODULES]
    swapped: list[tuple[ModuleType, str, Callable[..., Any]]] = []
    try:
        for module in targets:
            for kernel in _KERNELS:
                current = getattr(module, kernel, None)
                if current is None or getattr(current, "float64_aware", False):
                    continue
                swapped.append((module, kernel, current))
                setattr(module, kernel, _float64_aware(current))
        yield
    finally:
        for module, kernel, original in reversed(swapped):
            setattr(module, kernel, original)


def gated_deltanet_modules(model: torch.nn.Module) -> list[tuple[torch.nn.Module, ModuleType]]:
    """``(layer module, its modeling module)`` for every Gated-DeltaNet layer whose module defines the kernels."""
    found = []
    for sub in model.modules():
        owner = sys.modules.get(type(sub).__module__)
        if type(sub).__name__.endswith("GatedDeltaNet") and owner is not None \
                and any(hasattr(owner, kernel) for kernel in _KERNELS):
            found.append((sub, owner))
    return found


class _InstanceKernel:
    """A kernel bound as an instance attribute of one module; :meth:`remove` unbinds it."""

    def __init__(self, module: torch.nn.Module, name: str, fn: Callable[..., Any]) -> None:
        self.module, self.name = module, name
        setattr(module, name, fn)

    def remove(self) -> None:
        if self.name in vars(self.module):
            delattr(self.module, self.name)


def bind_float64_kernels(model: torch.nn.Module) -> list[Any]:
    """Make ``model``'s own Gated-DeltaNet modules run float64 inputs in float64; nothing else changes.

    - Each module's forward runs inside :func:`float64_kernels`: a forward-pre
      hook enters the scope and a forward hook registered with
      ``always_call=True`` leaves it (also when the forward raises), so the
      modeling module's kernel globals are swapped only while one of these
      modules runs.
    - Each module also gets a float64-aware ``chunk_gated_delta_rule`` instance
      attribute: the TransformerLens bridge's hooked Gated-DeltaNet forward
      reimplements HF's forward and takes the kernel from that attribute when
      present (else from the modeling module's global), without calling the
      module itself.

    Returns handles whose ``remove()`` undoes each binding; a model without
    such layers gets none.
    """
    handles: list[Any] = []
    for sub, owner in gated_deltanet_modules(model):
        active: list[contextlib.ExitStack] = []

        def enter(module: torch.nn.Module, args: tuple, owner: ModuleType = owner, active: list = active) -> None:
            stack = contextlib.ExitStack()
            stack.enter_context(float64_kernels([owner]))
            active.append(stack)

        def leave(module: torch.nn.Module, args: tuple, output: object, active: list = active) -> None:
            if active:
                active.pop().close()

        handles.append(sub.register_forward_pre_hook(enter))
        handles.append(sub.register_forward_hook(leave, always_call=True))
        chunk = getattr(owner, _KERNELS[0], None)
        if chunk is not None and "chunk_gated_delta_rule" not in vars(sub):
            chunk = getattr(chunk, "__wrapped__", chunk) if getattr(chunk, "float64_aware", False) else chunk
            handles.append(_InstanceKernel(sub, "chunk_gated_delta_rule", _float64_aware(chunk)))
    return handles
