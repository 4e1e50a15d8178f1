"""Each analysis has one config, and it is the one home of its study defaults and its precision.

The source of ``interp``, ``patching``, ``probes`` and ``benchmarks`` is read as syntax trees: a study default
(DRSR's set size, budget, margin, unsafe threshold and projection size, the gate's ensemble size, ICLR's rho, the
bootstrap resamples, KL Repair's noise-rule factors)
written as a number anywhere (an assignment, a parameter default, a keyword argument) is a copy that can drift
from its config's; each must be written exactly once, where the table below says.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from interp.pipelines.configs import CONFIGS, INPUTS, precision_of
from interp.reporting.analyses import ANALYSES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# setting -> (names it goes by, its value, where its one literal is)
DEFAULTS = {
    "DRSR max_k": (("max_k", "DRSR_MAX_K"), 4, "patching/config.py"),
    "DRSR budget": (("budget", "DEFAULT_BUDGET"), 10, "patching/config.py"),
    "DRSR margin": (("margin", "MARGIN"), 0.020, "patching/config.py"),
    "DRSR unsafe threshold": (("unsafe", "UNSAFE"), 0.020, "patching/config.py"),
    "DRSR projection size": (("proj_dim", "PROJ_DIM"), 64, "patching/config.py"),
    "gate ensemble size": (("n_members", "N_MEMBERS"), 8, "patching/config.py"),
    # the iclr history condition (data layer) owns rho; IclrConfig.rho and every other user read ICLR_RHO
    "ICLR rho": (("rho", "ICLR_RHO"), 0.8, "interp/data/conditions.py"),
    # every analysis's task-bootstrap resamples: library functions below a stage take them as required arguments
    "bootstrap resamples": (("n_boot", "N_BOOT"), 1000, "interp/params.py"),
    # KL Repair's noise rule (PatchConfig): keep d > max(min_kl, noise_factor x noise); d's error bound
    # d_error_factor x noise
    "KL noise factor": (("noise_factor",), 10.0, "patching/config.py"),
    "KL d error factor": (("d_error_factor",), 20.0, "patching/config.py"),
    "KL floor": (("min_kl",), 1e-6, "patching/config.py"),
}


def _numbers_given_to(names: tuple[str, ...], value: float) -> list[str]:
    """``path:line`` of every place a name in ``names`` is given the number ``value`` as a literal."""
    found = []
    for path in sorted(p for d in ("interp", "patching", "probes", "benchmarks") for p in (ROOT / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            pairs: list[tuple[str | None, ast.expr]] = []
            if isinstance(node, ast.Assign):
                pairs += [(getattr(t, "id", getattr(t, "attr", None)), node.value) for t in node.targets]
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                given = node.value  # a declared config field, param(default, rule, ...): its default
                if isinstance(given, ast.Call) and getattr(given.func, "id", None) == "param" and given.args:
                    given = given.args[0]
                pairs.append((getattr(node.target, "id", getattr(node.target, "attr", None)), given))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args
                pairs += list(zip([a.arg for a in args[len(args) - len(node.args.defaults):]], node.args.defaults))
                pairs += [(a.arg, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
            elif isinstance(node, ast.Call):
                pairs += [(k.arg, k.value) for k in node.keywords]
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for name, v in pairs
                      if name in names and isinstance(v, ast.Constant) and type(v.value) in (int, float)
                      and v.value == value]
    return found


@pytest.mark.parametrize("setting", list(DEFAULTS))
def test_each_study_default_is_written_once(setting):
    names, value, home = DEFAULTS[setting]
    found = _numbers_given_to(names, value)
    assert len(found) == 1 and found[0].startswith(f"{home}:"), f"{setting} = {value} written at {found}"


def test_the_scan_finds_a_copy():
    """The scan is not blind: the demo's DRSR subset (max_k 3, budget 2) is found as what it is (a benchmark's own
    setting may be found beside it)."""
    found = [f.split(":")[0] for f in _numbers_given_to(("max_k",), 3)]
    assert "interp/pipelines/demo.py" in found and all(f.startswith(("interp/pipelines/demo.py", "benchmarks/"))
                                                       for f in found), found


def test_configs_are_keyed_by_the_registry_and_carry_their_precision():
    registry = {a.name for a in ANALYSES}
    assert set(CONFIGS) - registry == set(INPUTS)  # the store, y's and G's labels: inputs, no result of their own
    for name, cls in CONFIGS.items():
        assert cls.analysis == name and cls.precision in ("float32", "bfloat16", None), cls
        assert not {"analysis", "precision"} & {f.name for f in fields(cls)}  # class attributes, not settings
    assert precision_of(CONFIGS.values()) == "float32"  # the demo's one sensor serves KL Repair, harm, DRSR, ICLR
    assert precision_of([CONFIGS["extract"], CONFIGS["interventions"], CONFIGS["probe"]]) == "bfloat16"
    assert precision_of([CONFIGS["probe"], CONFIGS["gate"]]) is None
