"""A history policy applied online, one request at a time, with the state an agent run keeps between requests.

A policy is written as for ``interp tokens`` (``interp.accounting.tokens.parse_policy``): a condition of
``interp.data.conditions`` with its parameters (``keep_last_k_reasoning:k=5``, ``observation_masking:m=5``,
``iclr:rho=0.8``) or a step policy (``sliding_window:k=5``, ``keep_last_m_tool_exchanges:m=5``). Each request's
history (its completed steps, boundary b = every step of the request) is edited by the policy at b, exactly as
the offline condition edits a recorded trajectory at b.

**Session state** (:class:`PolicyState`, one per agent run):

- ``iclr`` / ``iclr_step_only``: the block scorer (``interp.extraction.entropy.EntropyScorer`` on the sensor,
  online or step-only context) wrapped in :class:`SessionScorer`, which remembers every step's scores by the
  digest of the history it was scored on (the header and steps 1..t as given to the scorer). The condition is
  run over the whole history at each request, as offline; steps scored at an earlier request are answered from
  that memory (their decisions persist, no forward), so only the newest step's blocks reach the sensor, and the
  scorer's ``Resume`` continues that forward from its KV-cache snapshot of the already-compressed prefix
  (``interp.sensor.prefix.Resume``): a request costs the sensor its new tokens, not the history. The scorer's
  prompts go through a :class:`interp.data.render.Renderer` (each tokenized from where it departs from the
  last), and a step's digest is computed once per request.
- every policy: token counts of the texts of the session's last request are remembered
  (:meth:`PolicyState.counter`), so a request tokenizes its new texts, not the history.
- ``drsr_gate``: the gate is ``gate_factory(session) -> SetGate`` (``interp.data.conditions.SetGate``), one per
  session: ``interp serve --gate-scorer FILE`` builds ``patching.gate.SetGate(GateModel.load(FILE), sensor)``.
  The condition replays the gate at t = 1..b with its deletions written back (memory across steps, as offline),
  and the gate answers a prompt it decided before from its own memo, so only the newest step costs a forward.
- **Locks.** Only a forward takes the sensor lock (``forward_lock``, the proxy's): steps answered from memory
  (the scorer's, the gate's memo) never wait for another session's forward.
- every other policy is a pure function of the history (``random`` is seeded by the session id and step, so a
  step's edit is the same at every request).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.accounting.tokens import ICLR_CONTEXT, Policy, parse_policy
from interp.data.conditions import STEP_POLICIES, EditLog, SetGate, TokenCounter, apply_condition
from interp.data.render import Renderer, render
from interp.data.trajectory import Step, Trajectory
from interp.extraction.entropy import EntropyScorer
from interp.sensor.limits import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from interp.sensor.protocol import Sensor

GateFactory = Callable[[str], SetGate]
# the policies of a completed history the proxy applies; hide_observation/hide_stderr/clear_after_code/
# delete_latest_reasoning are boundary probes of the analyses, not policies an agent runs under
SERVE_POLICIES = ("full", "iclr", "iclr_step_only", "keep_latest_reasoning", "keep_last_k_reasoning", "interleaved",
                  "delete_all_reasoning", "random", "observation_masking", "drsr_gate", *STEP_POLICIES)


def gate_factory(scorer: Path, sensor: Sensor) -> GateFactory:
    """``interp serve --gate-scorer FILE``: one ``patching.gate.SetGate`` per session on the scorer file (read
    once) and the sensor."""
    from patching.gate import GateModel, SetGate

    model = GateModel.load(scorer)
    return lambda session: SetGate(model, sensor)


def parse_serve_policy(spec: str) -> Policy:
    """A policy for ``interp serve`` (module docstring), checked; a ValueError naming it otherwise."""
    if spec.strip() == "drsr_gate":  # its gate comes from the caller's gate_factory, one per session
        return Policy("drsr_gate", "drsr_gate")
    policy = parse_policy(spec)
    if policy.condition not in SERVE_POLICIES:
        raise ValueError(f"policy {spec!r}: not a policy of a live agent; known: {', '.join(SERVE_POLICIES)}")
    if policy.condition in ICLR_CONTEXT:
        unknown = [k for k, _ in policy.params if k != "rho"]
        if unknown:
            raise ValueError(f"policy {spec!r}: {policy.condition} takes only rho (the sensor is the proxy's)")
    return policy


def _digest(traj: Trajectory, step: int, seen: dict[int, tuple[Step, str]]) -> str:
    """Digest of what a scorer of step ``step`` reads: the header, steps 1..step-1 of ``traj`` and step ``step``'s
    reasoning (the forward ends with its last block, ``EntropyScorer.score_step``: its action and observation are
    not read, so a step scored when the model's answer arrived, before its tool ran, is the same key). ``seen``
    holds each step object's own digest (and the object, so its id stays its own), so a request serializes a step
    once."""
    h = hashlib.sha256(json.dumps([traj.system_prompt, traj.tools, traj.task], default=str).encode())
    for s in traj.steps[:step - 1]:
        if id(s) not in seen:
            seen[id(s)] = (s, hashlib.sha256(json.dumps(s.to_json(), sort_keys=True).encode()).hexdigest())
        h.update(seen[id(s)][1].encode())
    h.update(hashlib.sha256(traj.steps[step - 1].reasoning.encode()).hexdigest().encode())
    return h.hexdigest()


@dataclass
class SessionScorer:
    """A block scorer that answers a step scored before on the same history from memory (decisions persist).

    Only a step sent to the sensor takes ``lock`` (the proxy's one lock on the sensor), so a request answered
    from memory never waits for another session's forward. ``defer`` (``--decide async``): a step not in memory
    is left whole (None) and listed in ``pending``, for a background scorer sharing ``memory`` to score."""

    scorer: EntropyScorer
    memory: dict[str, "Sequence[float] | None"] = field(default_factory=dict)
    scored: int = 0  # steps sent to the sensor (not answered from memory)
    seconds: float = 0.0  # time in the sensor
    steps: dict[int, tuple[Step, str]] = field(default_factory=dict)  # step digests of the current request
    lock: AbstractContextManager[Any] = field(default_factory=nullcontext)
    defer: bool = False
    pending: list[int] = field(default_factory=list)  # steps of the current request left whole (defer)

    def __call__(self, history: Trajectory, step: int) -> Sequence[float] | None:
        """Scores of ``step``'s blocks (``interp.data.conditions.BlockScorer``)."""
        key = _digest(history, step, self.steps)
        if key not in self.memory:
            if self.defer:
                self.pending.append(step)
                return None
            with self.lock:
                start = time.perf_counter()
                scores = self.scorer(history, step)
                self.seconds += time.perf_counter() - start
            self.memory[key] = scores
            self.scored += 1
        return self.memory[key]

    def cache_bytes(self) -> int:
        """Bytes of the KV-cache snapshots the scorer holds for this session."""
        resume = self.scorer._resume
        if resume is None:
            return 0
        return sum(_nbytes(snap) for snap in resume.snapshots.values())

    def evict(self) -> None:
        """Drop the KV-cache snapshots (the next forward starts from the prompt's beginning; decisions kept)."""
        resume = self.scorer._resume
        if resume is not None:
            resume.snapshots, resume.tokens = {}, []


def _nbytes(obj: Any) -> int:
    """Bytes of the tensors inside a cache snapshot (nested containers and objects walked)."""
    seen: set[int] = set()

    def walk(x: object) -> int:
        if id(x) in seen:
            return 0
        seen.add(id(x))
        if hasattr(x, "element_size") and hasattr(x, "nelement"):
            return int(x.element_size() * x.nelement())
        if isinstance(x, dict):
            return sum(walk(v) for v in x.values())
        if isinstance(x, (list, tuple)):
            return sum(walk(v) for v in x)
        if hasattr(x, "__dict__"):
            return sum(walk(v) for v in vars(x).values())
        return 0

    return walk(obj)


@dataclass
class PolicyState:
    """One session's policy with its state (module docstring); :meth:`apply` edits one request's history."""

    policy: Policy
    session: str
    sensor: Any = None
    tokenizer: Any = None  # counts the tokens of the edits (and random's units); None: characters
    gate: SetGate | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    scorer: SessionScorer | None = None
    counts: dict[str, int] = field(default_factory=dict)  # token counts of this request's texts
    counted: dict[str, int] = field(default_factory=dict)  # ... and of the previous request's
    forward_lock: AbstractContextManager[Any] = field(default_factory=nullcontext)  # held around sensor forwards

    def __post_init__(self) -> None:
        if self.policy.condition in ICLR_CONTEXT:
            if self.sensor is None:
                raise ValueError(f"policy {self.policy.label}: needs a sensor (--model) to score blocks")
            context = ICLR_CONTEXT[self.policy.condition]
            # online: each request's scorer inputs continue the previous one's (step-only inputs do not)
            self.scorer = SessionScorer(EntropyScorer(self.sensor, self.max_tokens, context=context,
                                                      renderer=Renderer() if context == "online" else render),
                                        lock=self.forward_lock)
        if self.policy.condition == "drsr_gate":
            if self.gate is None:
                raise ValueError("policy drsr_gate: needs a gate (--gate-scorer FILE; from Python "
                                 "Proxy(gate_factory=...))")
            if hasattr(self.gate, "lock"):  # patching.gate.SetGate: only its forwards take the sensor lock
                self.gate.lock = self.forward_lock

    def counter(self, text: str) -> int:
        """Tokens of ``text`` under the tokenizer (remembered from this request or the last: a history's texts
        recur at every request, so a request tokenizes its new texts, not the history)."""
        if text not in self.counts:
            self.counts[text] = self.counted[text] if text in self.counted else \
                len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self.counts[text]

    def begin(self) -> None:
        """Start a request: the last request's token counts are kept for it, older ones dropped (memory stays that
        of two histories); the scorer's per-request digests are dropped."""
        self.counted, self.counts = self.counts, {}
        if self.scorer is not None:
            self.scorer.steps.clear()

    def apply(self, traj: Trajectory) -> tuple[Trajectory, EditLog]:
        """The history of the request after the policy at its last step (boundary = n_steps), and the edit log."""
        b, params = traj.n_steps, dict(self.policy.params)
        counter: TokenCounter | None = self.counter if self.tokenizer is not None else None
        if self.policy.condition in STEP_POLICIES:
            edited, _, log = STEP_POLICIES[self.policy.condition](traj, b, counter=counter, **params)
            return edited, log
        if self.scorer is not None:
            params["scorer"] = self.scorer
        if self.policy.condition == "drsr_gate":
            params["gate"] = self.gate
        if self.policy.condition == "random":
            params["tokenizer"] = self.tokenizer
        return apply_condition(self.policy.condition, traj, b, counter, **params)

    def cache_bytes(self) -> int:
        """Bytes the session's sensor cache holds (0 for policies without a sensor)."""
        return self.scorer.cache_bytes() if self.scorer is not None else 0

    def evict(self) -> None:
        """Drop the session's sensor cache snapshots (its decisions are kept)."""
        if self.scorer is not None:
            self.scorer.evict()
