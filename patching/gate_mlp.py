"""DRSR's set model (its Table 7) as the gate's second scorer, beside the ridge ensemble (``patching.gate``):
``interp gate train --scorer set-mlp``.

Per candidate, its :func:`patching.gate.candidate_features` row (standardised on the train pool) is embedded
by one layer to ``EMBED`` = 64 dimensions (ReLU): the *candidate embedding*. A set is represented by pooling
those embeddings: the deleted members (mean and max), the retained context (the mean over the pool members the
deletion leaves; zero when none) and member pairs (the mean of ``e_i * e_j``; zero for a singleton), with the
set's size, ``log1p`` span tokens and span tokens / request tokens; one hidden layer of ``HIDDEN`` = 64 (ReLU)
maps it to the predicted harm. The ``FeatureSpec`` switches (``retained``, ``pairs``) zero their blocks, as for
the ridge scorer's ablations.

It is fitted in torch (float64 on one thread, Adam, full batch, ``EPOCHS`` epochs, each member seeded: the same
fit whatever the thread count; float64 keeps the differences between machines' kernels ~1e-15, far below what
moves a threshold of ``patching.gate.TAU_GRID``) to the exact harm, ``n_members`` bootstrap replicates over the training sets; each member's unsafe
probability is ``P(harm > unsafe)`` under a normal with the member's prediction as mean and the out-of-bag
residual spread (as the ridge scorer's). Prediction runs in numpy with each set reduced on its own (einsum
without BLAS blocking), so a set's score is the same bits offline and online, in any batch. Stored as JSON
(:meth:`SetMLPScorer.to_json`: weights as lists; no pickle) in the scorer file, ``"kind": "set-mlp"``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from interp.data.deletions import units_overlap
from patching.granularity import UNSAFE

if TYPE_CHECKING:
    from patching.gate import FeatureSpec, Supervision

EMBED = 64
HIDDEN = 64
EPOCHS = 100
LEARNING_RATE = 1e-2
WEIGHT_DECAY = 1e-4
N_MEMBERS = 4
_WEIGHTS = ("mu", "sd", "w1", "b1", "w2", "b2", "w3", "b3")


def _dot(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` row by row (numpy's einsum loop, no BLAS: a row's result does not depend on the batch)."""
    return np.einsum("nf,hf->nh", x, w, optimize=False)


def _pooled(emb: np.ndarray, view: dict[str, Any], pool: Sequence[int], sets: Sequence[Sequence[int]],
            retained: bool, pairs: bool) -> np.ndarray:
    """The set representation ``[len(sets), 4 * EMBED + 3]`` from candidate embeddings ``emb`` [n_candidates, E]."""
    cands = view["candidates"]
    units = [tuple(c["unit"]) for c in cands]
    tokens = np.array([c["n_tokens"] for c in cands], float)
    pool = [int(x) for x in pool]
    e = emb.shape[1]
    total = emb[pool].sum(0) if pool else np.zeros(e)
    conf_sum, conf_n = np.zeros_like(emb), np.zeros(len(cands))
    for m in {m for st in sets for m in st}:
        xs = [x for x in pool if units_overlap(units[m], units[x])]
        conf_sum[m], conf_n[m] = emb[xs].sum(0), len(xs)
    out = np.zeros((len(sets), 4 * e + 3))
    for k in sorted({len(s) for s in sets}):
        rows = np.array([i for i, s in enumerate(sets) if len(s) == k], int)
        idx = np.array([sets[i] for i in rows], int).reshape(len(rows), k)
        summed, top = emb[idx[:, 0]], emb[idx[:, 0]]
        gone, left = conf_sum[idx[:, 0]], len(pool) - conf_n[idx[:, 0]]
        for j in range(1, k):
            summed, top = summed + emb[idx[:, j]], np.maximum(top, emb[idx[:, j]])
            gone, left = gone + conf_sum[idx[:, j]], left - conf_n[idx[:, j]]
        block = [summed / k, top]
        block.append(np.where(left[:, None] > 0, (total - gone) / np.maximum(left, 1)[:, None], 0.0) if retained
                     else np.zeros((len(rows), e)))
        if pairs and k >= 2:
            prod = [emb[idx[:, i]] * emb[idx[:, j]] for i, j in itertools.combinations(range(k), 2)]
            acc = prod[0]
            for p in prod[1:]:
                acc = acc + p
            block.append(acc / len(prod))
        else:
            block.append(np.zeros((len(rows), e)))
        span = tokens[idx].sum(1)
        block.append(np.stack([np.full(len(rows), float(k)), np.log1p(span), span / view["prompt_tokens"]], 1))
        out[rows] = np.concatenate(block, 1)
    return out


class SetMLPScorer:
    """DRSR's Table 7 set model (module docstring): ``fit_rows`` on supervision rows, ``harm_sets`` and
    ``risk_sets`` on a boundary's sets, JSON in and out."""

    kind = "set-mlp"

    def __init__(self, n_members: int = N_MEMBERS, unsafe: float = UNSAFE, seed: int = 0, epochs: int = EPOCHS
                 ) -> None:
        self.n_members = n_members
        self.unsafe = unsafe
        self.seed = seed
        self.epochs = epochs
        self.members_: list[dict[str, np.ndarray]] = []
        self.resid_sd_ = 1.0
        self.n_features_in_ = 0

    # ---------------------------------------------------------------- fitting (torch)

    def fit_rows(self, sup: Supervision, rows: np.ndarray, spec: FeatureSpec) -> SetMLPScorer:
        """Fit every bootstrap member to the exact harm of supervision ``rows`` (``patching.gate.Supervision``)."""
        import torch

        from patching.gate import candidate_features

        rows = np.asarray(rows, int)
        bounds = sorted({int(b) for b in sup.boundary[rows]})
        cand = {b: candidate_features(sup.views[b], spec) for b in bounds}
        table = np.concatenate([cand[b][sup.pools[b]] for b in bounds])
        mu, sd = table.mean(0), table.std(0)
        sd[sd < 1e-12] = 1.0
        self.n_features_in_ = table.shape[1]
        y = sup.harm[rows]
        rng = np.random.default_rng(self.seed)
        picks = [np.arange(len(rows)) if self.n_members == 1 else rng.integers(len(rows), size=len(rows))
                 for _ in range(self.n_members)]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one thread: the fit's reductions run in one order whatever the machine's threads
        try:
            self.members_ = []
            for m, pick in enumerate(picks):
                torch.manual_seed(self.seed * 1_000 + m)
                self.members_.append(self._train(sup, rows[pick], y[pick], cand, mu, sd, spec, torch))
        finally:
            torch.set_num_threads(threads)
        resid: list[float] = []
        for weights, pick in zip(self.members_, picks):
            out = np.setdiff1d(np.arange(len(rows)), pick)
            if len(out):
                resid.extend((y[out] - self._harm_rows(weights, sup, rows[out], cand, spec)).tolist())
        if len(resid) < 2:
            resid = (y - np.mean([self._harm_rows(w, sup, rows, cand, spec) for w in self.members_], 0)).tolist()
        self.resid_sd_ = max(float(np.std(resid)), 1e-6)
        return self

    def _train(self, sup: Any, rows: np.ndarray, y: np.ndarray, cand: dict[int, np.ndarray], mu: np.ndarray,
               sd: np.ndarray, spec: Any, torch: Any) -> dict[str, np.ndarray]:
        """One member: full-batch Adam on the sets of ``rows``, pooled as in prediction over one table of every
        training boundary's candidates (block-diagonal conflict and pool sums)."""
        nn, f64 = torch.nn, torch.float64
        bounds = sorted({int(x) for x in sup.boundary[rows]})
        offset = dict(zip(bounds, np.cumsum([0] + [len(cand[b]) for b in bounds[:-1]]).tolist()))
        x = torch.tensor(np.concatenate([(cand[b] - mu) / sd for b in bounds]), dtype=f64)
        conflicts: list[list[int]] = []  # per candidate of the table: the pool members it takes along
        pool_of: list[int] = []  # per pool member of the table: its boundary's position
        n_pool = []
        for bi, b in enumerate(bounds):
            units = [tuple(c["unit"]) for c in sup.views[b]["candidates"]]
            pool = [int(m) for m in sup.pools[b]]
            n_pool.append(len(pool))
            conflicts += [[offset[b] + q for q in pool if units_overlap(units[m], units[q])] for m in range(len(units))]
            pool_of += [bi] * len(pool)
        members = [offset[b] + int(m) for b in bounds for m in sup.pools[b]]
        n = len(x)
        wide = max(map(len, conflicts)) if conflicts else 1
        conf_idx = torch.tensor([c + [n] * (wide - len(c)) for c in conflicts])  # n: a zero row
        conf_n = torch.tensor([float(len(c)) for c in conflicts], dtype=f64)
        pool_idx, pool_bnd = torch.tensor(members, dtype=torch.long), torch.tensor(pool_of, dtype=torch.long)
        by_size = []
        for k in sorted({len(sup.members[r]) for r in rows}):
            mine = np.flatnonzero([len(sup.members[r]) == k for r in rows])
            idx = torch.tensor([[offset[int(sup.boundary[r])] + m for m in sup.members[r]] for r in rows[mine]])
            bnd = torch.tensor([bounds.index(int(sup.boundary[r])) for r in rows[mine]])
            span = torch.tensor([float(sum(sup.views[int(sup.boundary[r])]["candidates"][m]["n_tokens"]
                                           for m in sup.members[r])) for r in rows[mine]], dtype=torch.float64)
            prompt = torch.tensor([int(sup.views[int(sup.boundary[r])]["prompt_tokens"]) for r in rows[mine]],
                                  dtype=torch.float64)
            size = torch.stack([torch.full_like(span, float(k)), torch.log1p(span), span / prompt], 1)
            by_size.append((torch.tensor(mine), idx, bnd, size, k))
        embed, hidden, head = (nn.Linear(len(mu), EMBED, dtype=f64), nn.Linear(4 * EMBED + 3, HIDDEN, dtype=f64),
                               nn.Linear(HIDDEN, 1, dtype=f64))
        params = [*embed.parameters(), *hidden.parameters(), *head.parameters()]
        opt = torch.optim.Adam(params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
        centre, scale = float(np.mean(y)), float(np.std(y)) or 1.0
        target = torch.tensor((y - centre) / scale, dtype=f64)  # fitted standardised, unfolded below
        n_pool_t = torch.tensor(n_pool, dtype=f64)
        for _ in range(self.epochs):
            opt.zero_grad()
            emb = torch.relu(embed(x))
            padded = torch.cat([emb, torch.zeros(1, EMBED, dtype=f64)])
            conf_sum = padded[conf_idx].sum(1)
            total = torch.zeros(len(bounds), EMBED, dtype=f64).index_add(0, pool_bnd, emb[pool_idx])
            pred = torch.zeros(len(rows), dtype=f64)
            for mine, idx, bnd, size, k in by_size:
                m = emb[idx]  # [n, k, E]
                parts = [m.mean(1), m.max(1).values]
                if spec.retained:
                    left = n_pool_t[bnd] - conf_n[idx].sum(1)
                    kept = (total[bnd] - conf_sum[idx].sum(1)) / left.clamp(min=1)[:, None]
                    parts.append(torch.where(left[:, None] > 0, kept, torch.zeros_like(kept)))
                else:
                    parts.append(torch.zeros_like(m[:, 0]))
                if spec.pairs and k >= 2:
                    pi, pj = zip(*itertools.combinations(range(k), 2))
                    parts.append((m[:, list(pi)] * m[:, list(pj)]).mean(1))
                else:
                    parts.append(torch.zeros_like(m[:, 0]))
                parts.append(size)
                pred = pred.index_put((mine,), head(torch.relu(hidden(torch.cat(parts, 1)))).squeeze(-1))
            loss = torch.mean((pred - target) ** 2)
            loss.backward()
            opt.step()
        w = [t.detach().double().numpy().copy() for t in (embed.weight, embed.bias, hidden.weight, hidden.bias,
                                                           head.weight, head.bias)]
        w[4], w[5] = w[4] * scale, w[5] * scale + centre  # the head predicts harm in nats/token
        return dict(zip(_WEIGHTS, [mu, sd, *w]))

    # ---------------------------------------------------------------- prediction (numpy, row by row)

    def _member_harm(self, weights: dict[str, np.ndarray], view: dict[str, Any], cand: np.ndarray,
                     pool: Sequence[int], sets: Sequence[Sequence[int]], spec: Any) -> np.ndarray:
        emb = np.maximum(_dot((cand - weights["mu"]) / weights["sd"], weights["w1"]) + weights["b1"], 0.0)
        rep = _pooled(emb, view, pool, sets, spec.retained, spec.pairs)
        h = np.maximum(_dot(rep, weights["w2"]) + weights["b2"], 0.0)
        return (_dot(h, weights["w3"]) + weights["b3"])[:, 0]

    def _harm_rows(self, weights: dict[str, np.ndarray], sup: Any, rows: np.ndarray, cand: dict[int, np.ndarray],
                   spec: Any) -> np.ndarray:
        out = np.zeros(len(rows))
        for b in sorted({int(x) for x in sup.boundary[rows]}):
            mine = np.flatnonzero(sup.boundary[rows] == b)
            out[mine] = self._member_harm(weights, sup.views[b], cand[b], sup.pools[b],
                                          [sup.members[r] for r in rows[mine]], spec)
        return out

    def _members(self, view: dict[str, Any], cand: np.ndarray, pool: Sequence[int], sets: Sequence[Sequence[int]],
                 spec: Any) -> np.ndarray:
        if not self.members_:
            raise ValueError("the set model is not fitted (fit_rows first)")
        if cand.shape[1] != self.n_features_in_:
            raise ValueError(f"candidate features: {cand.shape[1]} per candidate, the set model expects "
                             f"{self.n_features_in_}")
        return np.array([self._member_harm(w, view, cand, pool, sets, spec) for w in self.members_])

    def harm_sets(self, view: dict[str, Any], cand: np.ndarray, pool: Sequence[int], sets: Sequence[Sequence[int]],
                  spec: FeatureSpec) -> np.ndarray:
        """Predicted harm [len(sets)] (nats/token): the members' mean."""
        return self._members(view, cand, pool, sets, spec).mean(0)

    def risk_sets(self, view: dict[str, Any], cand: np.ndarray, pool: Sequence[int], sets: Sequence[Sequence[int]],
                  spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray]:
        """(unsafe score, uncertainty) [len(sets)]: mean and spread over members of P(harm > unsafe)."""
        from scipy.special import ndtr

        p = ndtr((self._members(view, cand, pool, sets, spec) - self.unsafe) / self.resid_sd_)
        return p.mean(0), p.std(0)

    # ---------------------------------------------------------------- JSON (no pickle)

    def to_json(self) -> dict[str, Any]:
        """The fitted set model as JSON-able arrays."""
        return {"params": {"n_members": self.n_members, "unsafe": self.unsafe, "seed": self.seed,
                           "epochs": self.epochs},
                "n_features_in": self.n_features_in_, "resid_sd": self.resid_sd_,
                "members": [{k: np.asarray(w[k]).tolist() for k in _WEIGHTS} for w in self.members_]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SetMLPScorer:
        """A fitted set model from :meth:`to_json`'s form; ValueError on inconsistent arrays."""
        est = cls(**doc["params"])
        est.n_features_in_, est.resid_sd_ = int(doc["n_features_in"]), float(doc["resid_sd"])
        est.members_ = [{k: np.array(m[k], float) for k in _WEIGHTS} for m in doc["members"]]
        f = est.n_features_in_
        shapes = {"mu": (f,), "sd": (f,), "w1": (EMBED, f), "b1": (EMBED,), "w2": (HIDDEN, 4 * EMBED + 3),
                  "b2": (HIDDEN,), "w3": (1, HIDDEN), "b3": (1,)}
        if len(est.members_) != est.n_members or any(m[k].shape != shapes[k] for m in est.members_ for k in _WEIGHTS):
            raise ValueError(f"set model arrays do not match {est.n_members} members of {f} features")
        return est
