"""The record of what ran: the ``config`` and ``provenance`` blocks every result file of an analysis embeds.

A figure that says rho = 0.8 must mean the run used 0.8, so each result file carries the frozen config that
produced it and what it ran on, and every reader (figures, tables, ``report.md``) prints parameters from there,
never from a module constant or a config default. :func:`record` is the one place the two blocks are built; each
writer's ``FIELDS`` ends with :data:`RECORD_FIELDS` (documented in its schema table)::

    doc = {**summarize(...), **record(config, model=sensor.describe(), device=sensor.device,
                                      inputs={"trajectories": trajectories_sha256(trajs)})}
    config = config_from(PatchConfig, doc["config"])      # == the config that ran

- ``config``: ``dataclasses.asdict`` of the config, JSON-able (tuples as lists); :func:`config_from` builds the
  config class back from it, equal to the one that ran.
- ``provenance``: ``model`` and ``revision`` (the sensor's, or the model the inputs were made with; null when
  none ran), ``dtype`` (resolved: ``float32``, never ``auto``), ``device``, ``seeds`` (every config field whose
  name holds ``seed``, plus any the writer adds), ``package`` and ``version`` (``importlib.metadata`` of
  reasoning-persistence; ``interp.__version__`` when it is not installed) and ``inputs`` (name -> sha256 of each
  input: a file's bytes, or the content hash of loaded trajectories).

The two fields (``RECORD_FIELDS``, at the end of every writer's ``FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, TypeVar

from interp.schema import Field, JsonValue

__all__ = ["PACKAGE", "RECORD_FIELDS", "config_dict", "config_from", "file_sha256", "json_sha256", "package_version",
           "provenance", "record"]

PACKAGE = "reasoning-persistence"
C = TypeVar("C")

class Described(Protocol):
    """What :func:`record` reads of a loaded sensor (``interp.sensor.protocol.Sensor``)."""

    @property
    def device(self) -> object: ...  # noqa: D102

    def describe(self) -> dict[str, Any]: ...  # noqa: D102


RECORD_FIELDS = (
    Field("config", "{...}", "object", "-",
          "the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists "
          "(interp.record.config_from builds it back)"),
    Field("provenance", "{...}", "object", "-",
          "what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, "
          "inputs (name -> sha256)"),
)


def _json(value: Any) -> JsonValue:
    """``value`` with tuples as lists and mappings as dicts with string keys (what ``json.dumps`` writes)."""
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"config value {value!r} ({type(value).__name__}) is not JSON-able")


def config_dict(config: object) -> dict[str, JsonValue]:
    """A config's ``config`` block: its fields as ``interp.params.settings`` writes them (a dataclass instance), or
    the mapping itself, JSON-able."""
    from interp.params import settings

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {k: _json(v) for k, v in settings(config).items()}
    if isinstance(config, Mapping):
        return {str(k): _json(v) for k, v in config.items()}
    raise TypeError(f"a config must be a dataclass instance or a mapping, got {type(config).__name__}")


def config_from(cls: type[C], block: Mapping[str, Any]) -> C:
    """The config ``cls`` a result's ``config`` block records (its fields' rules read the JSON lists back as
    tuples, ``interp.params``); the config's own error for a bad value, a TypeError naming a field the class does
    not have."""
    return cls(**block)


def file_sha256(path: Path | str) -> str:
    """sha256 of a file's bytes (an input a result was made from); of a folder, the sha256 of its files' relative
    paths and sha256s in sorted order (an analysis's result folder read as an input)."""
    path = Path(path)
    if path.is_dir():
        lines = "".join(f"{p.relative_to(path).as_posix()} {file_sha256(p)}\n"
                        for p in sorted(path.rglob("*")) if p.is_file())
        return hashlib.sha256(lines.encode()).hexdigest()
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def json_sha256(value: object) -> str:
    """sha256 of a value's canonical JSON (sorted keys): the input hash of what was read rather than a file
    (records of a parts folder, states, loaded items)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def package_version() -> str:
    """The installed version of reasoning-persistence (``interp.__version__`` when run from a source tree)."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        from interp import __version__

        return __version__


def provenance(config: object = None, model: Mapping[str, Any] | None = None, device: object = None,
               inputs: Mapping[str, Path | str | None] | None = None,
               seeds: Mapping[str, int] | None = None) -> dict[str, JsonValue]:
    """The ``provenance`` block (module docstring). ``model``: a sensor's ``describe()`` or the model record of
    the inputs (``spec``/``model``, ``revision``, ``dtype``); ``inputs``: name -> a file path (hashed here) or an
    already computed sha256 (a 64-hex string), None entries left out; ``seeds``: seeds besides the config's."""
    model = model or {}
    config_seeds = ({k: v for k, v in config_dict(config).items() if "seed" in k and isinstance(v, int)}
                    if config is not None else {})
    hashes: dict[str, JsonValue] = {}
    for name, value in (inputs or {}).items():
        if value is None:
            continue
        text = str(value)
        is_hash = isinstance(value, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)
        hashes[name] = text if is_hash else file_sha256(value)
    dtype = model.get("dtype")
    return {"model": model.get("spec", model.get("model")), "revision": model.get("revision"),
            "dtype": None if dtype is None else str(dtype).removeprefix("torch."),
            "device": None if device is None else str(device),
            "seeds": _json({**config_seeds, **(seeds or {})}), "package": PACKAGE, "version": package_version(),
            "inputs": hashes}


def record(config: object, model: Mapping[str, Any] | None = None, device: object = None,
           inputs: Mapping[str, Path | str | None] | None = None, seeds: Mapping[str, int] | None = None,
           sensor: Described | None = None) -> dict[str, JsonValue]:
    """``{"config": ..., "provenance": ...}``: the two blocks a result file embeds (arguments: :func:`provenance`;
    ``sensor``: a loaded sensor, whose ``describe()`` and ``device`` stand for ``model`` and ``device``)."""
    if sensor is not None:
        model, device = sensor.describe(), sensor.device
    return {"config": config_dict(config), "provenance": provenance(config, model, device, inputs, seeds)}
