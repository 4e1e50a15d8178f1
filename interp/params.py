"""Declared settings: every field of an analysis config carries its constraint, help text and unit, checked by one
function with one message format (scikit-learn's ``_parameter_constraints`` model).

A config field is declared with :func:`param`::

    @dataclass(frozen=True)
    class DrsrConfig:
        max_k: int = param(4, Integer(1), "Largest set size.", "units")

        def __post_init__(self) -> None:
            validate(self)

:func:`validate` checks every declared field of a config on construction, normalises the ones whose rule says so
(a comma list becomes a tuple) and raises :class:`ConfigError` naming the field:
``max_k: must be an integer >= 1, got 0``. The command line builds its options from the same declarations
(``interp.pipelines.cli.common.config_options``: the option's type, default and help are the field's), so a
default or a help text is written once, beside the field. Each rule also lists values it refuses
(:meth:`Rule.invalid`): the common test (``tests/foundation/test_params.py``) tries every one of them on every
field of every config, from Python and from the command line.

A rule never imports the layer that checks a value's meaning (a condition name, a pooling rule): :class:`Check`
wraps that layer's own check function, passed in by the config's module.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LAYERS_NOTE", "N_BOOT", "REQUIRED", "Check", "ConfigError", "File", "Flag", "Instance", "Integer", "Items",
           "Maybe", "Options", "Real", "Rule", "Text", "declared", "field_of", "param", "settings", "validate"]


REQUIRED: Any = dataclasses.MISSING  # param()'s default of a field the caller must give
N_BOOT = 1000  # task-bootstrap resamples of every analysis's CIs: the one home of the study's default
LAYERS_NOTE = ("Layers are 0-based (resid_pre of layer l = hidden_states[l]); the reference study numbers them from "
               "1 (its full-attention layers 4, 8, ..., 32 are 3, 7, ..., 31 here): write 1based:4,8,32 for its "
               "numbering. `interp models` lists each model's full-attention layers in both.")


class ConfigError(ValueError):
    """A config value refused: ``field`` names the config field, the message is ``field: reason``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Refused(Exception):
    """Raised by a rule's :meth:`Rule.coerce`: the value is not one the rule admits (``why``: the reason)."""

    def __init__(self, why: str | None = None) -> None:
        super().__init__(why)
        self.why = why


class Rule:
    """A constraint on one field's value: what it admits (:meth:`describe`), how a value is normalised
    (:meth:`coerce`), values it refuses (:meth:`invalid`, for the common test) and the command line's type."""

    cli_type: type = str

    def describe(self) -> str:
        """What the rule admits, as it reads after "must be" (``an integer >= 1``)."""
        raise NotImplementedError

    def coerce(self, value: object) -> object:
        """``value`` normalised (a comma list as a tuple, ...); :class:`Refused` when the rule does not admit it."""
        raise NotImplementedError

    def invalid(self) -> list[object]:
        """Values this rule refuses: a wrong type and, where the rule has one, a value out of range or not an
        option."""
        raise NotImplementedError

    def to_cli(self, value: object) -> object:
        """A field value as the command line's default shows it."""
        return value

    def from_cli(self, value: object) -> object:
        """A command-line value as the config takes it."""
        return value


def _bad_type(value: Any) -> bool:
    return isinstance(value, bool)


@dataclass(frozen=True)
class Integer(Rule):
    """An integer (never a bool) in ``[low, high]`` (either bound optional)."""

    low: int | None = None
    high: int | None = None
    cli_type = int

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            return f"an integer in [{self.low}, {self.high}]"
        if self.low is not None:
            return f"an integer >= {self.low}"
        return "an integer" if self.high is None else f"an integer <= {self.high}"

    def coerce(self, value: object) -> object:
        if _bad_type(value) or not isinstance(value, int):
            raise Refused
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise Refused
        return value

    def invalid(self) -> list[object]:
        out: list[object] = ["1", 1.5, True]
        if self.low is not None:
            out.append(self.low - 1)
        if self.high is not None:
            out.append(self.high + 1)
        return out


@dataclass(frozen=True)
class Real(Rule):
    """A finite number (int or float, never a bool) between ``low`` and ``high`` (each optional; ``open``
    bounds excluded)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    cli_type = float

    def describe(self) -> str:
        lo = None if self.low is None else ("(" if self.low_open else "[") + f"{self.low:g}"
        hi = None if self.high is None else f"{self.high:g}" + (")" if self.high_open else "]")
        if lo and hi:
            return f"a number in {lo}, {hi}"
        if lo:
            return f"a number {'>' if self.low_open else '>='} {self.low:g}"
        if hi:
            return f"a number {'<' if self.high_open else '<='} {self.high:g}"
        return "a finite number"

    def coerce(self, value: object) -> object:
        if _bad_type(value) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Refused
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise Refused
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            raise Refused
        return value

    def invalid(self) -> list[object]:
        out: list[object] = ["0.5", math.nan, math.inf, True]
        if self.low is not None:
            out.append(self.low if self.low_open else self.low - 1)
        if self.high is not None:
            out.append(self.high if self.high_open else self.high + 1)
        return out


@dataclass(frozen=True)
class Flag(Rule):
    """True or False (never 0/1 or a string)."""

    cli_type = bool

    def describe(self) -> str:
        return "true or false"

    def coerce(self, value: object) -> object:
        if not isinstance(value, bool):
            raise Refused
        return value

    def invalid(self) -> list[object]:
        return [1, "yes", None]


@dataclass(frozen=True)
class Options(Rule):
    """One of ``choices`` (strings)."""

    choices: tuple[str, ...]

    def describe(self) -> str:
        return "one of " + ", ".join(self.choices)

    def coerce(self, value: object) -> object:
        if not isinstance(value, str) or value not in self.choices:
            raise Refused
        return value

    def invalid(self) -> list[object]:
        return ["no-such-option", 1, None]


@dataclass(frozen=True)
class Text(Rule):
    """A non-blank string (``what`` says what it names: a layer spec, a column name)."""

    what: str = "a non-blank string"

    def describe(self) -> str:
        return self.what

    def coerce(self, value: object) -> object:
        if not isinstance(value, str) or not value.strip():
            raise Refused
        return value

    def invalid(self) -> list[object]:
        return ["", "  ", 3, None]


@dataclass(frozen=True)
class Check(Rule):
    """A string checked by a function of the layer that gives it its meaning (``check`` raises ValueError with
    the reason, e.g. an unknown condition name); ``what`` describes it; ``bad`` is a value it refuses."""

    check: Callable[[str], object]
    what: str
    bad: str = "no-such-name"

    def describe(self) -> str:
        return self.what

    def coerce(self, value: object) -> object:
        if not isinstance(value, str) or not value.strip():
            raise Refused
        try:
            self.check(value)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        return value

    def invalid(self) -> list[object]:
        return [self.bad, "", 3, None]


@dataclass(frozen=True)
class Items(Rule):
    """A tuple of values each admitted by ``item`` (at least ``min_len``); a list is taken as a tuple and, for
    string items, a comma list ``"a,b"`` as ``("a", "b")`` (blank entries dropped). ``unique``: a repeated
    value is dropped (first occurrence kept)."""

    item: Rule
    min_len: int = 1
    unique: bool = False

    def describe(self) -> str:
        return (f"a list of {'at least ' + str(self.min_len) + ' ' if self.min_len > 1 else ''}"
                f"values, each {self.item.describe()}" + ("" if self.min_len else " (may be empty)"))

    def coerce(self, value: object) -> object:
        if isinstance(value, str) and self.item.cli_type is str:
            value = [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise Refused
        out = []
        for k, v in enumerate(value):
            try:
                out.append(self.item.coerce(v))
            except Refused as exc:
                raise Refused(f"entry {k} {v!r}: " + (exc.why or f"not {self.item.describe()}")) from None
        if self.unique:
            out = list(dict.fromkeys(out))
        if len(out) < self.min_len:
            raise Refused
        return tuple(out)

    def invalid(self) -> list[object]:
        out: list[object] = [5, [self.item.invalid()[0]]]
        if self.min_len:
            out.append(())
        return out

    def to_cli(self, value: object) -> object:
        items = value if isinstance(value, (list, tuple)) else (value,)
        return ",".join("none" if v is None else str(v) for v in items)

    def from_cli(self, value: object) -> object:
        if self.item.cli_type is str or not isinstance(value, str):
            return value
        kind = self.item.inner.cli_type if isinstance(self.item, Maybe) else self.item.cli_type
        try:
            return [None if v.strip().lower() == "none" and isinstance(self.item, Maybe)
                    else _parse_scalar(kind, v.strip()) for v in value.split(",") if v.strip()]
        except ValueError:
            return value  # the config names the field and what it admits


@dataclass(frozen=True)
class File(Rule):
    """A path (``str`` or ``Path``, stored as a ``Path``); ``exists``: it must name an existing file."""

    exists: bool = False
    cli_type = Path

    def describe(self) -> str:
        return "an existing file" if self.exists else "a path"

    def coerce(self, value: object) -> object:
        if not isinstance(value, (str, Path)) or not str(value).strip():
            raise Refused
        path = Path(value)
        if self.exists and not path.is_file():
            raise Refused(f"{path} does not exist")
        return path

    def invalid(self) -> list[object]:
        return [3, ""] + (["no/such/file.jsonl"] if self.exists else [])


@dataclass(frozen=True)
class Instance(Rule):
    """An instance of the config class ``kind`` (a nested config: checked by its own rules)."""

    kind: type

    def describe(self) -> str:
        return f"a {self.kind.__name__}"

    def coerce(self, value: object) -> object:
        if isinstance(value, Mapping):  # a nested record read back (``settings``)
            try:
                return self.kind(**value)
            except ConfigError as exc:
                raise Refused(str(exc)) from None
            except TypeError as exc:  # a field the class does not have
                raise Refused(str(exc).split(".", 1)[-1].strip()) from None
        if not isinstance(value, self.kind):
            raise Refused
        return value

    def invalid(self) -> list[object]:
        return [3, "x", {"no_such_field": 1}]


def _parse_scalar(kind: type, text: str) -> object:
    """``text`` as a ``kind`` (int, float or bool) from a command-line comma list."""
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(text)
        return text.lower() == "true"
    return kind(text)


@dataclass(frozen=True)
class Maybe(Rule):
    """None (``none`` says what None means) or a value admitted by ``inner``."""

    inner: Rule
    none: str = "none"

    @property
    def cli_type(self) -> type:  # type: ignore[override]  # the inner rule's
        return self.inner.cli_type

    def describe(self) -> str:
        return f"{self.inner.describe()}, or None ({self.none})"

    def coerce(self, value: object) -> object:
        return None if value is None else self.inner.coerce(value)

    def invalid(self) -> list[object]:
        return [v for v in self.inner.invalid() if v is not None]

    def to_cli(self, value: object) -> object:
        return None if value is None else self.inner.to_cli(value)

    def from_cli(self, value: object) -> object:
        return None if value is None else self.inner.from_cli(value)


def param(default: object, rule: Rule, help: str, unit: str = "", option: str | None = None,
          envvar: str | None = None) -> Any:  # Any: a dataclasses.field, typed as the field it declares
    """A declared config field: its default, the rule its value must satisfy, a help text and unit (the
    command line's option help), the option's name when it is not ``--field-name`` and the environment variable
    the option falls back to (``envvar``)."""
    metadata = {"rule": rule, "help": help, "unit": unit, "option": option, "envvar": envvar}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_of(config: type, name: str) -> Any:  # Any: a dataclasses.field, typed as the field it declares
    """Field ``name`` of another config declared again as it is there (default, rule, help, unit): two analyses
    sharing a setting share its one declaration."""
    f = next(f for f in dataclasses.fields(config) if f.name == name)
    return dataclasses.field(default=f.default, metadata=f.metadata)


def declared(config: object) -> list[dataclasses.Field[Any]]:
    """The fields of a config (instance or class) in declaration order; every one must be declared with
    :func:`param` (TypeError naming the first that is not: a config is all declared or not a config)."""
    fields = dataclasses.fields(config)  # type: ignore[arg-type]  # a config: a dataclass or its class
    bare = [f.name for f in fields if "rule" not in f.metadata]
    if bare:
        name = config.__name__ if isinstance(config, type) else type(config).__name__
        raise TypeError(f"{name}.{bare[0]} is not declared with interp.params.param")
    return list(fields)


def validate(config: object) -> None:
    """Check every declared field of ``config`` against its rule and store its normalised value (a frozen
    dataclass's fields set in place, as ``__post_init__`` may); :class:`ConfigError` names the first refused
    field."""
    for f in declared(config):
        value = getattr(config, f.name)
        rule: Rule = f.metadata["rule"]
        try:
            normal = rule.coerce(value)
        except Refused as exc:
            reason = f"must be {rule.describe()}, got {value!r}"
            raise ConfigError(f.name, reason + (f": {exc.why}" if exc.why else "")) from None
        if normal is not value:
            object.__setattr__(config, f.name, normal)


def settings(config: object) -> dict[str, object]:
    """A config's fields as JSON-able values (tuples as lists; nested configs as their own settings): what a
    result file records and what ``type(config)(**settings(config))`` reads back equal."""

    def plain(value: object) -> object:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return settings(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)

    return {f.name: plain(getattr(config, f.name))
            for f in dataclasses.fields(config)}  # type: ignore[arg-type]  # a config: a dataclass
