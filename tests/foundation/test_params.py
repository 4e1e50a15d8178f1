"""The common checks of every config, discovered rather than listed (scikit-learn's common estimator tests).

Configs are found in the registry of analyses (``interp.pipelines.configs.CONFIGS``) and on every command of the
``interp`` app that builds one (``config_options`` records them in ``__configs__``), so a new analysis config or a
new command gets these checks without editing a list. For each config: every field is declared with its rule;
every value its rule refuses is refused from Python with a ``ConfigError`` naming the field (never a raw
TypeError, never accepted) and from the command line with one line naming the option, nothing written; every
field has an option whose default is the config's (or the command says it sets the field itself); a config
round-trips through the JSON a result file records.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import typer

from interp.params import ConfigError, Items, Maybe, Rule, declared, settings
from interp.pipelines.cli import app
from interp.pipelines.configs import CONFIGS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"


def _commands() -> dict[str, Any]:
    """Every command of the ``interp`` app by its path (``gate train``), as click commands."""
    found: dict[str, Any] = {}

    def walk(command: Any, path: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        if not getattr(command, "commands", None):
            found[path] = command

    walk(typer.main.get_command(app), "")
    return found


COMMANDS = _commands()
# path -> [(config class, {field: option})] for every command built with config_options
BUILT = {path: getattr(c.callback, "__configs__", []) for path, c in COMMANDS.items()
         if getattr(c.callback, "__configs__", None)}
ALL = sorted({*CONFIGS.values(), *(cls for pairs in BUILT.values() for cls, _ in pairs)}, key=lambda c: c.__name__)


def _simplest(rule: Rule) -> object:
    """The first of a few plain values the rule takes (an empty list, a name, a URL, a number)."""
    for value in ((), "x", "http://127.0.0.1:9/v1", 1):
        try:
            rule.coerce(value)
        except Exception:  # noqa: BLE001  (Refused, or the check's own error)
            continue
        return value
    raise AssertionError(f"no plain value satisfies {rule.describe()}")


def _required(cls: type) -> dict[str, object]:
    """The required fields' simplest valid values (MISSING default and factory: required)."""
    return {f.name: _simplest(f.metadata["rule"]) for f in fields(cls) if f.default is f.default_factory}


def _instance(cls: type) -> Any:
    """A valid instance: the defaults, plus the required fields' simplest values."""
    return cls(**_required(cls))


CASES = [(cls, f.name, bad) for cls in ALL for f in declared(cls) for bad in f.metadata["rule"].invalid()]


def test_every_config_is_found_and_every_field_declared():
    """The registry's configs and the commands' are all found; each field has a rule, a help text and a unit slot
    (``declared`` raises on a bare field)."""
    assert set(CONFIGS.values()) <= set(ALL) and len(BUILT) >= 12, (ALL, list(BUILT))
    for cls in ALL:
        for f in declared(cls):
            assert isinstance(f.metadata["rule"], Rule) and f.metadata["help"].strip(), (cls, f.name)
    print(f"{len(ALL)} configs, {sum(len(declared(c)) for c in ALL)} fields, {len(CASES)} invalid values")


@pytest.mark.parametrize("cls, field, bad", CASES, ids=[f"{c.__name__}.{f}={b!r}" for c, f, b in CASES])
def test_a_bad_value_is_refused_naming_the_field(cls, field, bad):
    """Every value a field's rule refuses: a ConfigError (a ValueError) whose message starts with the field."""
    base = _required(cls)
    with pytest.raises(ConfigError) as refused:
        cls(**{**base, field: bad})
    assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")


def _cli_values(rule: Rule) -> list[str]:
    """The refused values of a rule that can be typed: text the option's type takes but the rule refuses (a
    Python-only wrong type, "1" for an int, is the right type typed), and ``nan`` for a number."""
    inner = rule.inner if isinstance(rule, Maybe) else rule
    if isinstance(inner, Items):
        item = inner.item.inner if isinstance(inner.item, Maybe) else inner.item
        typed = [v for v in item.invalid() if v is not None and not isinstance(v, bool)
                 and (isinstance(v, str) == (item.cli_type in (str, Path)))]
        return list(dict.fromkeys(str(v) for v in typed if str(v).strip()))
    if inner.cli_type is Path:  # typed "" is Path("."), a real folder: only Python can give an empty path
        return [str(v) for v in inner.invalid() if isinstance(v, str) and v.strip()]
    out = [str(v) for v in inner.invalid() if v is not None and not isinstance(v, bool)
           and not (isinstance(v, float) and math.isnan(v))
           and (isinstance(v, str) == (inner.cli_type in (str, Path)))]
    if inner.cli_type is float:
        out.append("nan")
    return list(dict.fromkeys(out))


def _option_cases() -> list[tuple[str, str, str, str]]:
    cases = []
    for path, pairs in BUILT.items():
        for cls, options in pairs:
            for f in declared(cls):
                if f.name in options and not (f.metadata["rule"].cli_type is bool
                                              and not isinstance(f.metadata["rule"], Items)):
                    cases += [(path, f.name, options[f.name], v) for v in _cli_values(f.metadata["rule"])]
    return cases


OPTION_CASES = _option_cases()


@pytest.mark.parametrize("path, field, option, value", OPTION_CASES,
                         ids=[f"{p}:{o}={v}" for p, _, o, v in OPTION_CASES])
def test_a_bad_option_is_refused_naming_the_option(capsys, monkeypatch, tmp_path, path, field, option, value):
    """The same refused values typed on the command line: exit 2, one line naming the option (the config's message
    or Typer's own for a value of the wrong type), before anything is read or written."""
    from interp.pipelines.cli import main

    monkeypatch.chdir(tmp_path)  # a value the command took after all writes nowhere but here
    out = tmp_path / "out"
    args = [*path.split(), option, value]
    params = {o for p in COMMANDS[path].params for o in p.opts}
    for name, given in (("--trajectories", str(DEMO)), ("--out", str(out)), ("--store", str(out)),
                        ("--states", str(DEMO.with_name("states.jsonl"))), ("--drsr", str(tmp_path / "drsr")),
                        ("--scorer", str(tmp_path / "s.json")), ("--labels", str(out / "labels.csv")),
                        ("--base-url", "http://127.0.0.1:9/v1"), ("--model", "m"),
                        ("--upstream", "http://127.0.0.1:9/v1"), ("--log-dir", str(out))):
        if name in params and name != option and (name != "--scorer" or path == "gate eval") and (
                name not in ("--base-url", "--model") or path == "labels judge"):
            args += [name, given]
    monkeypatch.setattr(sys, "argv", ["interp", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert option in err and "Traceback" not in err, err
    assert not out.exists() and not any(p.name not in ("drsr",) for p in tmp_path.iterdir()), list(tmp_path.iterdir())


def test_every_field_is_an_option_whose_default_is_the_configs():
    """Each command built from a config has an option per field it does not set itself (``skip``, declared in the
    command), with the field's default and no default written in its help."""
    checked = 0
    for path, pairs in BUILT.items():
        params = {o: p for p in COMMANDS[path].params for o in p.opts}
        for cls, options in pairs:
            for f in declared(cls):
                if f.name not in options:
                    continue
                param = params[options[f.name].split("/")[0]]
                rule = f.metadata["rule"]
                want = None if f.default is None else rule.to_cli(f.default)
                if f.default is f.default_factory:  # a required field: a required option
                    assert param.required and param.default is None, (path, f.name)
                else:
                    assert param.default == want, (path, f.name, param.default, want)
                assert "default:" not in (f.metadata["help"] or ""), (path, f.name)
                checked += 1
    assert checked >= 80, checked


@pytest.mark.parametrize("cls", ALL, ids=[c.__name__ for c in ALL])
def test_a_config_round_trips_through_its_record(cls):
    """``settings(config)`` -> JSON -> ``cls(**record)`` equals the config, for the defaults and for a config whose
    every field differs from its default where its rule allows a second value."""
    config = _instance(cls)
    assert cls(**json.loads(json.dumps(settings(config)))) == config
    changed = config
    for f in declared(cls):
        rule, value = f.metadata["rule"], getattr(config, f.name)
        other = _another(rule, value)
        if other is not None:
            try:
                changed = replace(changed, **{f.name: other})
            except ConfigError:  # a value the config's cross-field check refuses (n_jobs 0)
                continue
    record = json.loads(json.dumps(settings(changed)))
    assert cls(**record) == changed


def _another(rule: Rule, value: Any) -> Any:
    """A valid value other than ``value`` for simple rules (None where none is obvious)."""
    from interp.params import Flag, Integer, Real

    inner = rule.inner if isinstance(rule, Maybe) else rule
    if isinstance(inner, Flag):
        return not value
    if isinstance(inner, Integer) and isinstance(value, int):
        return value + 1 if inner.high is None or value < inner.high else value - 1
    if isinstance(inner, Real) and isinstance(value, (int, float)):
        candidate = value / 2 if value else 0.5
        try:
            return inner.coerce(candidate)
        except Exception:
            return None
    return None


def test_no_command_declares_a_config_field_itself():
    """A command built from a config takes no field as an option of its own unless its decorator skips that field
    (``skip``: the command sets it, e.g. extract's layer spec resolved on the model): every option named like a
    generated field is the generated one (one option per name, its help the field's), so no default or help text
    of a config field is written in a command."""
    for path, pairs in BUILT.items():
        generated = {f.name: f for cls, options in pairs for f in declared(cls) if f.name in options}
        named = [p.name for p in COMMANDS[path].params]
        assert len(named) == len(set(named)), (path, named)
        for p in COMMANDS[path].params:
            if p.name in generated:
                assert (p.help or "").startswith(generated[p.name].metadata["help"]), (path, p.name, p.help)
