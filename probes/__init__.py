"""Future-necessity probes: task-level nested-CV linear probes on boundary hidden states, with CIs and controls.

Typical use::

    from interp.extraction.store import Store
    from probes import FeatureSet, ProbeConfig, run_probe, write_probe_results, oof_frame
    fs = FeatureSet.from_store(Store("results/demo/store"))      # or FeatureSet(features=..., y=..., ...)
    result = run_probe(fs, ProbeConfig(n_jobs=2))
    write_probe_results(result, oof_frame(result), "results/probe")
"""

__version__ = "0.1.0"

from probes.baselines import NUISANCE_FEATURES, compare_baselines
from probes.config import ProbeConfig
from probes.data import FeatureSet
from probes.estimator import LinearProbe
from probes.nested_cv import NestedCVResult, layer_curve, run_nested_cv
from probes.report import oof_frame, run_probe, write_probe_results
from probes.splits import grouped_splits
from probes.stats import (control_task, paired_gain, permutation_test, permutation_tests, permute_labels_across_tasks,
                          permute_labels_within_length, task_bootstrap)
from probes.targets import TargetLabel, TargetLabelerConfig, label_target, label_targets, targets_command

__all__ = [
    "FeatureSet",
    "LinearProbe",
    "NUISANCE_FEATURES",
    "NestedCVResult",
    "ProbeConfig",
    "compare_baselines",
    "control_task",
    "grouped_splits",
    "layer_curve",
    "oof_frame",
    "paired_gain",
    "permutation_test",
    "permutation_tests",
    "permute_labels_across_tasks",
    "permute_labels_within_length",
    "run_nested_cv",
    "run_probe",
    "TargetLabel",
    "TargetLabelerConfig",
    "label_target",
    "label_targets",
    "targets_command",
    "task_bootstrap",
    "write_probe_results",
]
