"""Reasoning persistence in long-horizon LLM agents: hooked sensor, trajectories, rendering, conditions.

Typical use::

    from interp import load_model, load_trajectories, render, apply_condition
    sensor = load_model("smollm2-135m")
    traj = load_trajectories("data/demo/trajectories.jsonl")[0]
    edited, log = apply_condition("delete_all_reasoning", traj, after_step=3)
    prompt = render(edited, 3, sensor.tokenizer)
"""

from interp.data.conditions import CONDITIONS, EditLog, apply_condition
from interp.sensor.models import ModelUnavailable, Sensor, load_model, load_tokenizer
from interp.data.render import Rendered, Segment, render
from interp.data.trajectory import Trajectory, TrajectoryError, load_trajectories, validate_file

__all__ = [
    "CONDITIONS", "EditLog", "ModelUnavailable", "Rendered", "Segment", "Sensor", "Trajectory",
    "TrajectoryError", "apply_condition", "load_model", "load_tokenizer", "load_trajectories", "render",
    "validate_file",
]
__version__ = "0.1.0"
