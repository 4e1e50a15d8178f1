"""Where units of work run: in this process, or as Ray actors on a cluster (``pip install .[ray]``).

Both executors take an ``interp.io.Work`` (unit keys, ``load()`` building a
worker's model, ``compute(ctx, key)`` computing one unit and writing its
result atomically, ``done(key)``) and return one ``interp.io.UnitRun`` per
unit run (host, worker, seconds, attempts, error).

* :class:`LocalExecutor` runs the units in order in this process
  (``interp.io.run_work``); an error stops the run, a re-run resumes.
* :class:`RayExecutor` starts ``workers`` actors, each with the declared
  resources (``num_cpus``, ``num_gpus``, ``memory``): one model load per
  actor, reused for every unit it gets. The driver hands out the
  unfinished units costliest first, one per idle actor, and shows progress.
  Results are written by the workers straight into the shared output
  layout (the store's ``units/``, a stage's ``parts/``), atomically, so
  the directory must be on a file system every node sees; the driver writes
  only ``store.json``, the manifest and the summaries. A worker that dies
  mid-unit (killed, out of memory, node lost) loses that unit only: Ray
  restarts the actor (``max_restarts``), the driver re-submits the unit up
  to ``retries`` more times, then records it as failed with its error
  (``failed.json``; the run ends with an error naming it, a re-run retries
  it). ``import ray`` happens only here, when a Ray executor runs.
"""

from __future__ import annotations

import importlib.util
import os
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interp.io import UnitRun, Work, run_work, timed_unit
from interp.progress import track
from interp.params import Integer, Maybe, Options, Real, Text, param, validate

EXECUTORS = ("local", "ray")


@dataclass
class LocalExecutor:
    """Units in order, in this process; ``context`` (an already loaded model) skips ``work.load()``."""

    context: Any = None

    def run(self, work: Work, progress: bool = True) -> dict[str, UnitRun]:
        """Every unfinished unit of ``work``, here."""
        return run_work(work, self.context, progress)


class _Worker:
    """A Ray actor's state: the model loaded once, then one unit per call."""

    def __init__(self, load: Callable[[], Any], compute: Callable[[Any, str], Any],
                 before_unit: Callable[[str], None] | None) -> None:
        self.ctx = load()
        self.work = Work("", [], load, compute, lambda _k: False)
        self.before_unit = before_unit

    def run(self, key: str) -> UnitRun:
        """Compute one unit and say where and how long."""
        if self.before_unit is not None:
            self.before_unit(key)
        return timed_unit(self.work, self.ctx, key)


@dataclass
class RayExecutor:
    """Units as calls on Ray actors with declared resources, retried when a worker dies (module docstring).

    ``address``: None starts a local Ray (or uses the one this process already started), ``"auto"`` joins a
    running cluster. ``workers``: actors to start (default: as many as the cluster's resources fit).
    ``before_unit(key)`` runs on the worker before each unit (a hook for tests and tracing).
    """

    address: str | None = None
    workers: int | None = None
    num_cpus: float = 1
    num_gpus: float = 0
    memory: int | None = None  # bytes per worker
    retries: int = 2
    before_unit: Callable[[str], None] | None = None

    def run(self, work: Work, progress: bool = True) -> dict[str, UnitRun]:
        """Every unfinished unit of ``work`` on the actors; failed units carry their error."""
        import ray

        todo = sorted((k for k in work.keys if not work.done(k)), key=lambda k: -work.costs.get(k, 1))
        if not todo:
            return {}
        started_here = not ray.is_initialized()
        if started_here:
            if self.address is None:  # a local cluster started here: offline, so it reports no usage stats
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        try:
            return self._run(ray, work, todo, progress)
        finally:
            if started_here:
                ray.shutdown()

    def _actor_count(self, ray: Any, n_units: int) -> int:
        """Actors to start: ``workers``, else as many as the cluster's CPUs/GPUs fit (at least 1)."""
        total = ray.cluster_resources()
        for name, need in (("GPU", self.num_gpus), ("CPU", self.num_cpus)):
            if need and total.get(name, 0) < need:
                raise ValueError(f"the Ray cluster has {total.get(name, 0):g} {name}(s); a worker asks for {need:g} "
                                 f"(--num-gpus / num_cpus): no worker could start")
        if self.workers:
            return max(1, min(self.workers, n_units))
        fits = [int(total.get("CPU", 1) // self.num_cpus)] if self.num_cpus else []
        if self.num_gpus:
            fits.append(int(total.get("GPU", 0) // self.num_gpus))
        return max(1, min([n_units, *fits]))

    def _run(self, ray: Any, work: Work, todo: list[str], progress: bool) -> dict[str, UnitRun]:
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
                                   "max_restarts": -1, "max_task_retries": 0}
        if self.memory:
            options["memory"] = self.memory
        actor_class = ray.remote(**options)(_Worker)
        actors = [actor_class.remote(work.load, work.compute, self.before_unit)
                  for _ in range(self._actor_count(ray, len(todo)))]
        queue, attempts = deque(todo), dict.fromkeys(todo, 0)
        records: dict[str, UnitRun] = {}
        inflight: dict[Any, tuple[Any, str | None]] = {}  # ref -> (actor, unit key; None: a readiness ping)
        live = len(actors)

        def submit(actor: Any) -> None:  # Any: a Ray actor handle (ray, an optional extra, is not typed here)
            if queue:
                key = queue.popleft()
                attempts[key] += 1
                inflight[actor.run.remote(key)] = (actor, key)

        def fail(key: str, exc: BaseException) -> None:
            if attempts[key] <= self.retries:
                queue.appendleft(key)
            else:
                records[key] = UnitRun(key, attempts=attempts[key], error="".join(
                    traceback.format_exception_only(type(exc), exc)).strip())
                bar.advance(info=f"{key} failed")

        with track(work.label, total=len(todo), unit="units", enabled=progress) as bar:
            for actor in actors:
                submit(actor)
            while inflight:
                (ref,), _ = ray.wait(list(inflight), num_returns=1)
                actor, key = inflight.pop(ref)
                try:
                    record = ray.get(ref)
                except ray.exceptions.ActorUnavailableError as exc:  # restarting: the unit did not run there
                    if key is not None:
                        attempts[key] -= 1
                        fail(key, exc)
                    time.sleep(0.2)
                    inflight[actor.__ray_ready__.remote()] = (actor, None)
                    continue
                except ray.exceptions.RayActorError as exc:  # the worker died (killed, OOM, node lost)
                    if key is None:  # it will not come back
                        live -= 1
                        if not live:
                            for lost in list(queue):
                                attempts[lost] = self.retries + 1
                                queue.remove(lost)
                                fail(lost, exc)
                        continue
                    fail(key, exc)
                    inflight[actor.__ray_ready__.remote()] = (actor, None)  # next unit once it has restarted
                    continue
                except ray.exceptions.RayTaskError as exc:  # the unit raised; the worker is fine
                    assert key is not None, "a readiness probe runs no unit code"
                    fail(key, exc)
                else:
                    if key is not None:
                        record.attempts = attempts[key]
                        records[key] = record
                        bar.advance(info=f"{key} ({record.host}, {record.worker})")
                submit(actor)
        for actor in actors:
            ray.kill(actor)
        return records


def make_executor(kind: str = "local", **options: object) -> LocalExecutor | RayExecutor:
    """``local`` or ``ray`` with its options (address, workers, num_cpus, num_gpus, memory, retries)."""
    if kind == "local":
        return LocalExecutor()
    if kind == "ray":
        if importlib.util.find_spec("ray") is None:
            raise ValueError("--executor ray needs Ray: pip install '.[ray]'")
        given: dict[str, Any] = {k: v for k, v in options.items() if v is not None}  # RayExecutor checks them
        return RayExecutor(**given)
    raise ValueError(f"unknown executor {kind!r}; use one of: {', '.join(EXECUTORS)}")


@dataclass(frozen=True)
class ExecutorSettings:
    """Where a stage's units run: ``kind`` (``local``: this process; ``ray``: actors) and, for Ray, the cluster
    ``address`` (None: start a local one), the number of actors (``workers``; None: as many as the resources fit),
    GPUs and memory (GiB, for scheduling) per actor. Checked on construction (each message names the field), so
    the command line and the sweep's ``[executor]`` refuse the same values."""

    kind: str = param("local", Options(EXECUTORS), "Where units run: local (this process) or ray (actors, one "
                      "model load each; needs pip install '.[ray]').", option="--executor")
    address: str | None = param(None, Maybe(Text("a Ray cluster address"), "start a local cluster"),
                                "Ray cluster address (auto: the running cluster).")
    workers: int | None = param(None, Maybe(Integer(1), "as many as the resources fit"), "Ray actors.")
    num_gpus: float = param(0, Real(0), "GPUs per Ray worker (use --device cuda with it).")
    memory_gb: float | None = param(None, Maybe(Real(0), "no reservation"), "Memory per Ray worker (scheduling).",
                                    "GiB")

    def __post_init__(self) -> None:
        validate(self)

    def make(self) -> LocalExecutor | RayExecutor | None:
        """The executor (None for ``local``: the caller's loaded model runs the units in process)."""
        if self.kind == "local":
            return None
        return make_executor(self.kind, address=self.address, workers=self.workers, num_gpus=self.num_gpus,
                             memory=int(self.memory_gb * 2**30) if self.memory_gb else None)
