"""Activation patching: the general primitive ``patch`` (``patching.patch``), KL Repair per layer and set-level deletion harm."""

from patching.config import HarmConfig, PatchConfig
from patching.patch import PatchResult, patch

__all__ = ["HarmConfig", "PatchConfig", "PatchResult", "patch"]
