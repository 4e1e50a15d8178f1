"""The proxy's run log, and paired live runs read from two of them (amplification decomposition, cost).

A run log is a folder (``interp serve --log-dir``):

- ``serve.json``: the proxy's settings (``SERVE_FIELDS``), written at start;
- ``requests.jsonl``: one line per chat request (``REQUEST_FIELDS``), appended when its answer is complete;
- ``sessions/<session stem>.json``: per agent run (session), the trajectory as the model saw it at the run's
  latest request (the history as sent, after the policy, in the trajectory format of ``data/README.md``, its
  ``task_id`` the session id), rewritten at every request of the run.

``REQUEST_FIELDS`` (one JSON object per line of ``requests.jsonl``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``session`` | ``[]`` | str | - | the agent run: the X-Interp-Session header, else sha256 of the request's messages up to its first user message |
| ``request`` | ``[]`` | int | - | 1-based index of the request within its session |
| ``time`` | ``[]`` | float | s | Unix time the request arrived |
| ``policy`` | ``[]`` | str | - | the policy, as written (interp serve --policy) |
| ``stream`` | ``[]`` | bool | - | the request asked for a streamed (SSE) answer |
| ``status`` | ``[]`` | int | - | HTTP status returned to the agent: the upstream's, 502 when it could not be reached, 504 on its timeout |
| ``n_messages`` | ``[]`` | int | messages | messages received from the agent |
| ``n_steps`` | ``[]`` | int | steps | completed steps of the history (assistant turns; 0 before the first) |
| ``edited`` | ``[]`` | bool | - | the messages sent upstream differ from those received |
| ``failure`` | ``[]`` | str or null | - | why the request was forwarded unedited although the policy should have run: a body that is not a JSON object, chat-template control tokens in the history (``--allow-control-tokens``), a mapping, sensor, policy or write-back error; null when none |
| ``prompt_tokens`` | ``[]`` | int or null | tokens | usage.prompt_tokens as the upstream reported it (null: no usage reported, e.g. a stream without stream_options.include_usage) |
| ``cached_tokens`` | ``[]`` | int or null | tokens | usage.prompt_tokens_details.cached_tokens (cache reads), as reported |
| ``cache_write_tokens`` | ``[]`` | int or null | tokens | cache writes where the upstream reports them (usage.cache_creation_input_tokens or prompt_tokens_details.cache_write_tokens); null otherwise |
| ``completion_tokens`` | ``[]`` | int or null | tokens | usage.completion_tokens, as reported |
| ``removed_tokens`` | ``[]`` | int or null | tokens | the policy's direct removal in this request: tokens (the proxy's tokenizer) of the strings of the messages received minus those sent; null without a tokenizer |
| ``edit_log`` | ``{...}`` | object or null | - | the policy's EditLog of this request (interp.data.conditions.EditLog.to_json); null when it did not run |
| ``sensor_seconds`` | ``[]`` | float | s | time in the sensor's forwards for this request (ICLR scoring) |
| ``proxy_seconds`` | ``[]`` | float | s | the proxy's added latency: from the request's arrival to its forwarding upstream (mapping, policy, sensor, write-back) |
| ``upstream_seconds`` | ``[]`` | float | s | from forwarding to the answer's last byte |
| ``cache_bytes`` | ``[]`` | int | bytes | KV-cache snapshots the session's sensor holds after the request |
| ``sessions`` | ``[]`` | int | - | sessions held by the proxy after the request |
| ``lag`` | ``[]`` | int | steps | ``--decide async``: steps of this request whose decision was not ready (left whole; scored in the background, applied from a later request); 0 when every decision was ready |
| ``evicted`` | ``[n_evicted]`` | str | - | sessions whose KV-cache snapshots were dropped after this request to keep ``--memory-budget`` (least recently used first; their decisions are kept) |

**Paired runs** (:func:`paired_document`, ``interp tokens --trajectories RUNLOG_A --paired RUNLOG_B``): run A
without the policy (``full``), run B with it, the same tasks matched by session (the default session id
is a hash of the task's opening messages, equal in both runs). Per task, with T the tokens a run sent and
received as the upstream reported them (prompt + completion over its answered requests), n its requests and
D the direct removal of run B (``removed_tokens`` summed; tokens of the proxy's tokenizer, which is the
acting model's when both are the same model, else an approximation), the decomposition of
``interp.accounting.tokens.decomposition`` with T_B_full = T_B + D, and the amplification factor and saving
ratio with task-bootstrap CIs; and each run's cost under a price table (USD per million tokens:
``uncached_input``, ``cache_read``, ``cache_write``, ``output``): uncached input = prompt - cached - cache
writes. ``paired.json`` (``PAIRED_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``policy`` | ``[]`` | str | - | the policy of the compressed run (its run log's) |
| ``measure`` | ``[]`` | str | - | what T counts: prompt + completion tokens as the upstream reported them |
| ``n_tasks`` | ``[]`` | int | - | sessions in both runs |
| ``unmatched`` | ``[n_unmatched]`` | str | - | sessions in one run only (left out) |
| ``totals`` | ``{...}`` | object | tokens | {total_change, direct_change, request_count_change, context_change} summed over tasks (interp.accounting.tokens.decomposition) |
| ``amplification`` | ``[]`` | float or null | - | abs(total change) / direct removal (null: nothing removed) |
| ``amplification_ci`` | ``[2]`` | float or null | - | task-bootstrap percentile 95 % CI |
| ``saving_ratio`` | ``[]`` | float or null | - | -total change / direct removal |
| ``saving_ratio_ci`` | ``[2]`` | float or null | - | task-bootstrap percentile 95 % CI |
| ``n_boot`` | ``[]`` | int | - | bootstrap resamples |
| ``per_task`` | ``[n_tasks] of {session, base_tokens, base_requests, compressed_tokens, compressed_requests, removed_tokens, total_change, direct_change, request_count_change, context_change, amplification}`` | object | tokens | one row per matched session |
| ``prices`` | ``{...}`` | object or null | USD / 1M tokens | the price table given (null: none) |
| ``cost`` | ``{...}`` | object or null | tokens; USD | {base, compressed}: each {uncached_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, cost_usd} over the matched sessions (null: no price table) |

``serve.json`` (``SERVE_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | REQUEST_FIELDS: {field: {shape, dtype, units, doc}} of requests.jsonl |
| ``policy`` | ``[]`` | str | - | the policy, as written |
| ``upstream`` | ``[]`` | str | - | the upstream base URL |
| ``model`` | ``[]`` | str or null | - | the sensor model (null: none loaded) |
| ``max_sessions`` | ``[]`` | int | - | sessions held at most (least recently used dropped first) |
| ``session_ttl`` | ``[]`` | float | s | a session unused this long is dropped |
| ``started`` | ``[]`` | float | s | Unix time the proxy started |
| ``decide`` | ``[]`` | str | - | sync (a request waits for its decisions) or async (decided while the tool runs, applied one request later) |
| ``memory_budget`` | ``[]`` | int or null | bytes | KV-cache snapshots held over all sessions at most (null: no budget) |
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from interp.accounting.tokens import _ratio_ci, decomposition
from interp.io import atomic_write_json, read_json, safe_stem
from interp.params import N_BOOT
from interp.schema import Field, schema_dict

REQUEST_FIELDS = (
    Field("session", "[]", "str", "-", "the agent run: the X-Interp-Session header, else sha256 of the request's "
          "messages up to its first user message"),
    Field("request", "[]", "int", "-", "1-based index of the request within its session"),
    Field("time", "[]", "float", "s", "Unix time the request arrived"),
    Field("policy", "[]", "str", "-", "the policy, as written (interp serve --policy)"),
    Field("stream", "[]", "bool", "-", "the request asked for a streamed (SSE) answer"),
    Field("status", "[]", "int", "-", "HTTP status returned to the agent: the upstream's, 502 when it could not "
          "be reached, 504 on its timeout"),
    Field("n_messages", "[]", "int", "messages", "messages received from the agent"),
    Field("n_steps", "[]", "int", "steps", "completed steps of the history (assistant turns; 0 before the first)"),
    Field("edited", "[]", "bool", "-", "the messages sent upstream differ from those received"),
    Field("failure", "[]", "str or null", "-", "why the request was forwarded unedited although the policy should "
          "have run: a body that is not a JSON object, chat-template control tokens in the history "
          "(--allow-control-tokens), a mapping, sensor, policy or write-back error; null when none"),
    Field("prompt_tokens", "[]", "int or null", "tokens", "usage.prompt_tokens as the upstream reported it (null: "
          "no usage reported, e.g. a stream without stream_options.include_usage)"),
    Field("cached_tokens", "[]", "int or null", "tokens",
          "usage.prompt_tokens_details.cached_tokens (cache reads), as reported"),
    Field("cache_write_tokens", "[]", "int or null", "tokens", "cache writes where the upstream reports them "
          "(usage.cache_creation_input_tokens or prompt_tokens_details.cache_write_tokens); null otherwise"),
    Field("completion_tokens", "[]", "int or null", "tokens", "usage.completion_tokens, as reported"),
    Field("removed_tokens", "[]", "int or null", "tokens", "the policy's direct removal in this request: tokens "
          "(the proxy's tokenizer) of the strings of the messages received minus those sent; null without a "
          "tokenizer"),
    Field("edit_log", "{...}", "object or null", "-", "the policy's EditLog of this request "
          "(interp.data.conditions.EditLog.to_json); null when it did not run"),
    Field("sensor_seconds", "[]", "float", "s", "time in the sensor's forwards for this request (ICLR scoring)"),
    Field("proxy_seconds", "[]", "float", "s", "the proxy's added latency: from the request's arrival to its "
          "forwarding upstream (mapping, policy, sensor, write-back)"),
    Field("upstream_seconds", "[]", "float", "s", "from forwarding to the answer's last byte"),
    Field("cache_bytes", "[]", "int", "bytes", "KV-cache snapshots the session's sensor holds after the request"),
    Field("sessions", "[]", "int", "-", "sessions held by the proxy after the request"),
    Field("lag", "[]", "int", "steps", "--decide async: steps of this request whose decision was not ready (left "
          "whole; scored in the background, applied from a later request); 0 when every decision was ready"),
    Field("evicted", "[n_evicted]", "str", "-", "sessions whose KV-cache snapshots were dropped after this request "
          "to keep --memory-budget (least recently used first; their decisions are kept)"),
)
SERVE_FIELDS = (
    Field("schema", "{...}", "object", "-", "REQUEST_FIELDS: {field: {shape, dtype, units, doc}} of requests.jsonl"),
    Field("policy", "[]", "str", "-", "the policy, as written"),
    Field("upstream", "[]", "str", "-", "the upstream base URL"),
    Field("model", "[]", "str or null", "-", "the sensor model (null: none loaded)"),
    Field("max_sessions", "[]", "int", "-", "sessions held at most (least recently used dropped first)"),
    Field("session_ttl", "[]", "float", "s", "a session unused this long is dropped"),
    Field("started", "[]", "float", "s", "Unix time the proxy started"),
    Field("decide", "[]", "str", "-", "sync (a request waits for its decisions) or async (decided while the tool "
          "runs, applied one request later)"),
    Field("memory_budget", "[]", "int or null", "bytes", "KV-cache snapshots held over all sessions at most (null: "
          "no budget)"),
)
PAIRED_FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("policy", "[]", "str", "-", "the policy of the compressed run (its run log's)"),
    Field("measure", "[]", "str", "-", "what T counts: prompt + completion tokens as the upstream reported them"),
    Field("n_tasks", "[]", "int", "-", "sessions in both runs"),
    Field("unmatched", "[n_unmatched]", "str", "-", "sessions in one run only (left out)"),
    Field("totals", "{...}", "object", "tokens", "{total_change, direct_change, request_count_change, "
          "context_change} summed over tasks (interp.accounting.tokens.decomposition)"),
    Field("amplification", "[]", "float or null", "-", "abs(total change) / direct removal (null: nothing removed)"),
    Field("amplification_ci", "[2]", "float or null", "-", "task-bootstrap percentile 95 % CI"),
    Field("saving_ratio", "[]", "float or null", "-", "-total change / direct removal"),
    Field("saving_ratio_ci", "[2]", "float or null", "-", "task-bootstrap percentile 95 % CI"),
    Field("n_boot", "[]", "int", "-", "bootstrap resamples"),
    Field("per_task", "[n_tasks] of {session, base_tokens, base_requests, compressed_tokens, compressed_requests, "
          "removed_tokens, total_change, direct_change, request_count_change, context_change, amplification}",
          "object", "tokens", "one row per matched session"),
    Field("prices", "{...}", "object or null", "USD / 1M tokens", "the price table given (null: none)"),
    Field("cost", "{...}", "object or null", "tokens; USD", "{base, compressed}: each {uncached_input_tokens, "
          "cache_read_tokens, cache_write_tokens, output_tokens, cost_usd} over the matched sessions (null: no "
          "price table)"),
)
PRICE_KEYS = ("uncached_input", "cache_read", "cache_write", "output")


class RunLog:
    """Writes a run log folder (module docstring); thread-safe appends."""

    def __init__(self, folder: Path, settings: Mapping[str, Any]):
        self.folder = Path(folder)
        (self.folder / "sessions").mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        atomic_write_json(self.folder / "serve.json", {"schema": schema_dict(REQUEST_FIELDS), **settings})

    def request(self, row: Mapping[str, Any]) -> None:
        """Append one ``REQUEST_FIELDS`` row to ``requests.jsonl``."""
        missing = [f.name for f in REQUEST_FIELDS if f.name not in row]
        if missing:
            raise ValueError(f"run log row lacks {', '.join(missing)}")
        line = json.dumps({f.name: row[f.name] for f in REQUEST_FIELDS}, ensure_ascii=False) + "\n"
        with self._lock, open(self.folder / "requests.jsonl", "a", encoding="utf-8") as fh:
            fh.write(line)

    def trajectory(self, session: str, record: Mapping[str, Any]) -> None:
        """Rewrite the session's trajectory as the model saw it at its latest request."""
        atomic_write_json(self.folder / "sessions" / f"{safe_stem(session)}.json", dict(record))


def is_run_log(path: Path) -> bool:
    """Whether ``path`` is a run log folder of ``interp serve``."""
    return Path(path).is_dir() and (Path(path) / "requests.jsonl").is_file()


def read_requests(folder: Path) -> list[dict[str, Any]]:
    """The rows of a run log's ``requests.jsonl``, checked: a bad line is a ValueError naming file, line and field."""
    path = Path(folder) / "requests.jsonl"
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object")
        for f in REQUEST_FIELDS:
            value = row.get(f.name)
            if f.name not in row or (value is None and not f.nullable):
                raise ValueError(f"{path}:{n}: {f.name}: missing or null")
            if f.kind == "int" and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{path}:{n}: {f.name}: expected an integer, got {value!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no requests")
    return rows


def read_prices(path: Path) -> dict[str, float]:
    """A price table (JSON: USD per million tokens for each of ``PRICE_KEYS``), checked."""
    doc = read_json(Path(path))
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a price table is a JSON object with {', '.join(PRICE_KEYS)}")
    for key in PRICE_KEYS:
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{path}: {key}: expected a price >= 0 (USD per million tokens), got {value!r}")
    unknown = sorted(set(doc) - set(PRICE_KEYS))
    if unknown:
        raise ValueError(f"{path}: {unknown[0]}: unknown key; expected {', '.join(PRICE_KEYS)}")
    return {k: float(doc[k]) for k in PRICE_KEYS}


def _answered(rows: list[dict[str, Any]], where: Path) -> list[dict[str, Any]]:
    """The requests the upstream answered (status 200), each with its usage (a ValueError naming one without)."""
    ok = [r for r in rows if r["status"] == 200]
    for r in ok:
        if r["prompt_tokens"] is None or r["completion_tokens"] is None:
            raise ValueError(f"{where}: session {r['session']} request {r['request']}: no usage reported (ask "
                             "streamed answers with stream_options.include_usage)")
    return ok


def run_cost(rows: list[dict[str, Any]], prices: Mapping[str, float]) -> dict[str, float]:
    """Token sums of answered requests and their cost (USD) under ``prices`` (per million tokens)."""
    cached = sum(r["cached_tokens"] or 0 for r in rows)
    written = sum(r["cache_write_tokens"] or 0 for r in rows)
    prompt = sum(r["prompt_tokens"] for r in rows)
    output = sum(r["completion_tokens"] for r in rows)
    tokens = {"uncached_input": prompt - cached - written, "cache_read": cached, "cache_write": written,
              "output": output}
    return {**{f"{k}_tokens": float(v) for k, v in tokens.items()},
            "cost_usd": sum(tokens[k] * prices[k] for k in PRICE_KEYS) / 1e6}


def paired_document(base: Path, compressed: Path, prices: Mapping[str, float] | None = None, *, n_boot: int,
                    seed: int = 0) -> dict[str, Any]:
    """Paired live runs (module docstring): per task and in total, the decomposition of the token change, the
    amplification factor and saving ratio with task-bootstrap CIs, and each run's cost under ``prices``."""
    a_rows, b_rows = _answered(read_requests(base), base), _answered(read_requests(compressed), compressed)
    b_policy = {r["policy"] for r in b_rows}
    a_by: dict[str, list[dict[str, Any]]] = {}
    b_by: dict[str, list[dict[str, Any]]] = {}
    for rows, by in ((a_rows, a_by), (b_rows, b_by)):
        for r in rows:
            by.setdefault(r["session"], []).append(r)
    matched = [s for s in a_by if s in b_by]
    if not matched:
        raise ValueError(f"paired runs: no session is in both {base} and {compressed}")
    per_task, sums = [], {k: 0.0 for k in ("total_change", "direct_change", "request_count_change",
                                             "context_change")}
    for s in matched:
        t_a = sum(r["prompt_tokens"] + r["completion_tokens"] for r in a_by[s])
        t_b = sum(r["prompt_tokens"] + r["completion_tokens"] for r in b_by[s])
        d = sum(r["removed_tokens"] or 0 for r in b_by[s])
        parts = decomposition(t_a, len(a_by[s]), t_b, t_b + d, len(b_by[s]))
        per_task.append({"session": s, "base_tokens": t_a, "base_requests": len(a_by[s]), "compressed_tokens": t_b,
                         "compressed_requests": len(b_by[s]), "removed_tokens": d,
                         **{k: float(v) for k, v in parts.items()},
                         "amplification": abs(float(parts["total_change"])) / d if d > 0 else None})
        sums = {k: sums[k] + float(parts[k]) for k in sums}
    total = np.array([r["total_change"] for r in per_task])
    removal = np.array([float(r["removed_tokens"]) for r in per_task])
    groups = np.array([r["session"] for r in per_task])
    d = float(removal.sum())
    doc: dict[str, Any] = {
        "policy": ",".join(sorted(b_policy)), "measure": "prompt + completion tokens as the upstream reported them",
        "n_tasks": len(per_task), "unmatched": sorted(set(a_by) ^ set(b_by)), "totals": sums,
        "amplification": abs(sums["total_change"]) / d if d > 0 else None,
        "amplification_ci": _ratio_ci(total, removal, groups, n_boot, seed, None),
        "saving_ratio": -sums["total_change"] / d if d > 0 else None,
        "saving_ratio_ci": _ratio_ci(total, removal, groups, n_boot, seed, -1.0), "n_boot": n_boot,
        "per_task": per_task, "prices": dict(prices) if prices else None, "cost": None}
    if prices:
        keep = set(matched)
        doc["cost"] = {"base": run_cost([r for r in a_rows if r["session"] in keep], prices),
                       "compressed": run_cost([r for r in b_rows if r["session"] in keep], prices)}
    return doc


def write_paired(base: Path, compressed: Path, out: Path, prices: Mapping[str, float] | None = None
                 ) -> dict[str, Any]:
    """:func:`paired_document` written to ``out/paired.json`` (``PAIRED_FIELDS``); the document."""
    doc = paired_document(base, compressed, prices, n_boot=N_BOOT)
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(out) / "paired.json", {"schema": schema_dict(PAIRED_FIELDS), **doc})
    return doc
