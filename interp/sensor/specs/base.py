"""What every model spec is made of: :class:`ModelSpec`, the cache root, :class:`ModelUnavailable`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class ModelUnavailable(RuntimeError):
    """A spec whose weights are not on this machine; the message says how to get them."""


def cache_dir() -> Path:
    """Root of the on-disk cache (``$INTERP_CACHE``, default ``~/.cache/interp``)."""
    return Path(os.environ.get("INTERP_CACHE", Path.home() / ".cache" / "interp")).expanduser()


@dataclass(frozen=True)
class ModelSpec:
    """A named model: where its weights come from and how to make them available offline."""

    name: str
    description: str
    how_to_get: str
    resolve: Callable[[], Path | None]  # local directory, or None when not available offline
    fetch: Callable[[], Path] | None = None  # makes it available (no model hub involved)
    local_build: bool = False  # fetch needs no network at all: built on first use
    hub_id: str | None = None  # model hub id, used only with allow_download

    def available(self) -> bool:
        """True when the weights can be loaded without any network."""
        return self.resolve() is not None
