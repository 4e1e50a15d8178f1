"""The config of each analysis, keyed by the registry's analysis names, and the precision rule they carry.

Each analysis has one frozen config class beside its computation (sklearn's model: the study's defaults are the
field defaults, every check is in its ``__post_init__``, each message names the field and so the CLI option). The
CLI, ``interp demo``, ``interp sweep`` and Python build the same object, so they get the same defaults, the same
errors and the same dtype. Each config class also says, as class attributes (not fields: they are not settings):

- ``analysis``: its name in the registry of analyses (``interp.reporting.analyses``); three make inputs of others
  and have no result of their own there (``INPUTS``): ``extract`` (the store the probes, ICLR and the attention
  summary read), ``label`` (the future-necessity targets the probe can read) and ``externalization_labels`` (the
  G labels of ``externalization``, the demo's step of that name);
- ``precision``: the dtype ``--dtype auto`` loads the sensor in on CUDA for it (float32 off CUDA for every
  analysis; None: the analysis runs no model). The why of each choice is in the config's docstring.

:func:`model_dtype` is the one place ``auto`` is resolved for an analysis: the CLI's ``model_options``,
``stages.sensor(config=...)`` and the demo call it; ``interp.load_model(spec)`` with no analysis loads float32,
correct for every analysis (``interp.sensor.models.resolve_dtype``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from interp.accounting.tokens import TokensConfig
from interp.continuations.run import RunSettings
from interp.externalization.labeler import GapLabelerConfig
from interp.externalization.risk import RiskConfig
from interp.extraction.entropy import IclrConfig
from interp.extraction.extract import ExtractConfig
from patching.anchors import AnchorConfig
from patching.config import DrsrConfig, GateConfig, HarmConfig, PatchConfig
from probes.config import ProbeConfig
from probes.targets import TargetLabelerConfig

if TYPE_CHECKING:
    import torch

__all__ = ["CONFIGS", "INPUTS", "AnalysisConfig", "model_dtype", "precision_of"]


class AnalysisConfig(Protocol):
    """What every analysis config class declares besides its fields."""

    @property
    def analysis(self) -> str: ...  # noqa: D102  (a class attribute of each config)

    @property
    def precision(self) -> str | None: ...  # noqa: D102


CONFIGS: Mapping[str, type[AnalysisConfig]] = MappingProxyType({
    cls.analysis: cls for cls in (ExtractConfig, IclrConfig, TargetLabelerConfig, ProbeConfig, PatchConfig,
                                  HarmConfig, DrsrConfig, GateConfig, GapLabelerConfig, RiskConfig, RunSettings,
                                  TokensConfig, AnchorConfig)
})


INPUTS = ("extract", "label", "externalization_labels")  # configs of analyses that make another's inputs


def _precision(config: AnalysisConfig | type[AnalysisConfig]) -> str | None:
    """The ``precision`` class attribute of a config or config class."""
    value = getattr(config, "precision", None)
    return value if isinstance(value, str) else None


def precision_of(configs: Iterable[AnalysisConfig | type[AnalysisConfig]]) -> str | None:
    """The precision one sensor shared by several analyses needs (the demo): float32 when any of them needs it,
    else the one they share; None when none runs a model."""
    wanted = {p for p in map(_precision, configs) if p is not None}
    if not wanted:
        return None
    return "float32" if "float32" in wanted or len(wanted) > 1 else wanted.pop()


def model_dtype(dtype: str, device: str | torch.device,
                config: AnalysisConfig | type[AnalysisConfig] | str | None) -> str:
    """The dtype name a sensor for ``config`` (a config, its class, a precision name, or None) is loaded in on
    ``device``: ``auto`` resolved by its precision (float32 off CUDA), an explicit name as given (obeyed; analyses
    report the noise they measure in it); ValueError for an unknown name."""
    from interp.sensor.models import resolve_dtype

    precision = config if isinstance(config, str) or config is None else _precision(config)
    resolved = resolve_dtype(dtype, device, precision)  # an unknown name fails here, naming the choices
    return dtype if dtype != "auto" else str(resolved).removeprefix("torch.")
