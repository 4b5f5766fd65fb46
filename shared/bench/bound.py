#!/usr/bin/env python3
"""Proven lower bounds (and small exact optima) on the hourly price of any
plan for a Flotilla scheduling scenario, with HiGHS (`pip install highspy`).

Input: scenario JSON files written by `flotilla_bench::scenario::export`
(or directories of them). Output: one JSON array on stdout, per scenario:
  {file, mix, pods, lpBound, ilpOptimum, ilpDualBound, ilpStatus, solver,
   seconds, types, keptTypes, classes}

lpBound: optimum of the LP relaxation
    min sum_t price_t x_t
    s.t. sum_t y[c,t]            = n_c                    (every pod placed)
         sum_c req[c,r] y[c,t]  <= cap[t,r] x_t           (per type, resource)
         y[c,t]                 <= m[c,t] x_t             (m = pods of class c
                                                           one node of t holds)
         0 <= x_t <= maxCount_t,  y >= 0
over the types each class may use. Any integer plan is a feasible point of
this LP, so its optimum is a lower bound on every plan's price (for the
scenario's relaxation: topology spread and pod affinity are ignored, so the
bound is valid, only looser, for mixes that use them).

ilpOptimum (scenarios with <= --ilp-max-pods pods): the exact optimum with
explicit integer bins per type, after dropping dominated types (another type
the same or more classes may use with >= capacity in every resource, <= price
and no count limit). Bins per type are capped by the pods that may use it and,
when the scenario carries a feasible `upperBound` price, by
floor(upperBound / price). If the time limit hits, ilpOptimum is null and
ilpDualBound (a valid lower bound) and ilpIncumbent are reported.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

try:
    import highspy
except ImportError:  # pragma: no cover - reported, not raised
    highspy = None

INF = float("inf")


def load(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(
                os.path.join(p, f) for f in os.listdir(p) if f.endswith(".json")
            )
        else:
            files.append(p)
    return files


def fit_counts(sc):
    """m[c][t]: how many pods of class c fit on one node of type t."""
    types, classes = sc["types"], sc["classes"]
    m = {}
    for ci, c in enumerate(classes):
        req = c["requests"]
        for t in c["types"]:
            cap = types[t]["capacity"]
            k = c["count"]
            for r, q in zip(req, cap):
                if r > 0:
                    k = min(k, q // r)
            if c.get("maxPerNode") is not None:
                k = min(k, c["maxPerNode"])
            m[ci, t] = max(k, 0)
    return m


def prune_dominated(sc, m):
    """Indices of types not dominated by another type (see module doc)."""
    types, classes = sc["types"], sc["classes"]
    n = len(types)
    usable = [set() for _ in range(n)]
    for ci, c in enumerate(classes):
        for t in c["types"]:
            if m[ci, t] > 0:
                usable[t].add(ci)
    cap = np.array([t["capacity"] for t in types], dtype=float).reshape(n, -1)
    price = np.array([t["price"] for t in types], dtype=float)
    unlimited = np.array([t.get("maxCount") is None for t in types])
    keep = []
    for b in range(n):
        if not usable[b]:
            continue
        cand = (
            unlimited
            & (price <= price[b] + 1e-12)
            & np.all(cap >= cap[b], axis=1)
        )
        cand[b] = False
        dominated = False
        for a in np.nonzero(cand)[0]:
            if not usable[b] <= usable[a]:
                continue
            # Identical types: keep the lower index only.
            same = price[a] >= price[b] - 1e-12 and np.all(cap[a] == cap[b])
            if same and usable[a] == usable[b] and a > b and unlimited[b]:
                continue
            dominated = True
            break
        if not dominated:
            keep.append(b)
    return keep


class Rows:
    """Row-wise sparse constraint builder."""

    def __init__(self):
        self.start, self.index, self.value = [0], [], []
        self.lower, self.upper = [], []

    def add(self, coefs, lo, hi):
        for j, v in coefs:
            self.index.append(j)
            self.value.append(float(v))
        self.start.append(len(self.index))
        self.lower.append(lo)
        self.upper.append(hi)


def solve(cost, lower, upper, rows, integer=None, time_limit=None, threads=None):
    """Returns (status string, objective, dual bound, seconds)."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    lp = highspy.HighsLp()
    lp.num_col_ = len(cost)
    lp.num_row_ = len(rows.lower)
    lp.col_cost_ = np.array(cost, dtype=float)
    lp.col_lower_ = np.array(lower, dtype=float)
    lp.col_upper_ = np.array([min(u, highspy.kHighsInf) for u in upper], dtype=float)
    lp.row_lower_ = np.array(
        [max(v, -highspy.kHighsInf) for v in rows.lower], dtype=float
    )
    lp.row_upper_ = np.array(
        [min(v, highspy.kHighsInf) for v in rows.upper], dtype=float
    )
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(rows.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows.value, dtype=float)
    if integer is not None:
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
            for i in integer
        ]
    t0 = time.monotonic()
    if h.passModel(lp) == highspy.HighsStatus.kError:
        return "model-error", None, None, time.monotonic() - t0
    h.run()
    secs = time.monotonic() - t0
    status = h.getModelStatus()
    name = h.modelStatusToString(status)
    info = h.getInfo()
    obj = info.objective_function_value
    dual = info.mip_dual_bound if integer is not None else None
    if status == highspy.HighsModelStatus.kOptimal:
        return "optimal", obj, (dual if dual is not None else obj), secs
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    return name, (obj if has_sol else None), dual, secs


def lp_bound(sc, keep, m):
    types, classes = sc["types"], sc["classes"]
    nres = len(sc["resources"])
    col = {}
    cost, lower, upper = [], [], []
    for t in keep:
        col["x", t] = len(cost)
        cost.append(types[t]["price"])
        lower.append(0.0)
        mc = types[t].get("maxCount")
        upper.append(INF if mc is None else float(mc))
    kept = set(keep)
    for ci, c in enumerate(classes):
        for t in c["types"]:
            if t in kept and m[ci, t] > 0:
                col["y", ci, t] = len(cost)
                cost.append(0.0)
                lower.append(0.0)
                upper.append(float(c["count"]))
    rows = Rows()
    for ci, c in enumerate(classes):
        coefs = [(col["y", ci, t], 1.0) for t in c["types"] if ("y", ci, t) in col]
        if not coefs:
            return "infeasible", None
        rows.add(coefs, c["count"], c["count"])
    for t in keep:
        on = [ci for ci, c in enumerate(classes) if ("y", ci, t) in col]
        for r in range(nres):
            coefs = [
                (col["y", ci, t], classes[ci]["requests"][r])
                for ci in on
                if classes[ci]["requests"][r] > 0
            ]
            if coefs:
                coefs.append((col["x", t], -types[t]["capacity"][r]))
                rows.add(coefs, -INF, 0.0)
        for ci in on:
            rows.add([(col["y", ci, t], 1.0), (col["x", t], -m[ci, t])], -INF, 0.0)
    status, obj, _, _ = solve(cost, lower, upper, rows)
    return status, obj


def ilp_optimum(sc, keep, m, time_limit, threads):
    types, classes = sc["types"], sc["classes"]
    nres = len(sc["resources"])
    ub = sc.get("upperBound")
    cost, lower, upper, integer = [], [], [], []
    z, w = {}, {}
    bins_of = {}
    for t in keep:
        may = sum(c["count"] for ci, c in enumerate(classes)
                  if t in c["types"] and m[ci, t] > 0)
        nb = may
        mc = types[t].get("maxCount")
        if mc is not None:
            nb = min(nb, mc)
        p = types[t]["price"]
        if ub is not None and p > 0:
            nb = min(nb, int(math.floor(ub * (1 + 1e-6) / p + 1e-6)))
        bins_of[t] = nb
        for b in range(nb):
            z[t, b] = len(cost)
            cost.append(p)
            lower.append(0.0)
            upper.append(1.0)
            integer.append(True)
            for ci, c in enumerate(classes):
                if t in c["types"] and m[ci, t] > 0:
                    w[ci, t, b] = len(cost)
                    cost.append(0.0)
                    lower.append(0.0)
                    upper.append(float(min(c["count"], m[ci, t])))
                    integer.append(True)
    rows = Rows()
    for ci, c in enumerate(classes):
        coefs = [(w[k], 1.0) for k in w if k[0] == ci]
        if not coefs:
            return "infeasible", None, None, None, 0.0
        rows.add(coefs, c["count"], c["count"])
    for t in keep:
        for b in range(bins_of[t]):
            on = [ci for ci in range(len(classes)) if (ci, t, b) in w]
            for r in range(nres):
                coefs = [(w[ci, t, b], classes[ci]["requests"][r])
                         for ci in on if classes[ci]["requests"][r] > 0]
                if coefs:
                    coefs.append((z[t, b], -types[t]["capacity"][r]))
                    rows.add(coefs, -INF, 0.0)
            for ci in on:
                rows.add([(w[ci, t, b], 1.0), (z[t, b], -m[ci, t])], -INF, 0.0)
            if b > 0:  # symmetry: use bins of a type in order
                rows.add([(z[t, b], 1.0), (z[t, b - 1], -1.0)], -INF, 0.0)
    status, obj, dual, secs = solve(cost, lower, upper, rows, integer,
                                    time_limit, threads)
    return status, obj, dual, len(z), secs


def bound(path, args):
    with open(path) as f:
        sc = json.load(f)
    t0 = time.monotonic()
    out = {
        "file": os.path.basename(path),
        "mix": sc.get("mix"),
        "seed": sc.get("seed"),
        "pods": sc["pods"],
        "unplaceable": sc.get("unplaceable", 0),
        "types": len(sc["types"]),
        "classes": len(sc["classes"]),
        "solver": "HiGHS " + highspy.Highs().version() if highspy else None,
    }
    if highspy is None:
        out["error"] = "highspy is not installed"
        return out
    m = fit_counts(sc)
    keep = prune_dominated(sc, m)
    out["keptTypes"] = len(keep)
    status, obj = lp_bound(sc, keep, m)
    out["lpStatus"] = status
    out["lpBound"] = round(obj, 6) if status == "optimal" and obj is not None else None
    out["ilpOptimum"] = None
    placed = sc["pods"] - out["unplaceable"]
    if placed <= args.ilp_max_pods:
        st, obj, dual, nbins, secs = ilp_optimum(sc, keep, m, args.time_limit,
                                                 args.threads)
        if st != "optimal" and sc.get("upperBound") is not None:
            # A wrong upper bound could cut off every solution: retry without.
            sc2 = dict(sc)
            sc2.pop("upperBound")
            if st == "Infeasible":
                st, obj, dual, nbins, secs = ilp_optimum(
                    sc2, keep, m, args.time_limit, args.threads)
        out["ilpStatus"] = st
        out["ilpBins"] = nbins
        out["ilpSeconds"] = round(secs, 3)
        if st == "optimal":
            out["ilpOptimum"] = round(obj, 6)
        else:
            out["ilpIncumbent"] = None if obj is None else round(obj, 6)
            out["ilpDualBound"] = (None if dual is None or not math.isfinite(dual)
                                   else round(dual, 6))
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="scenario JSON files or directories")
    ap.add_argument("--ilp-max-pods", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=120.0,
                    help="seconds per ILP")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    results = []
    for p in load(args.paths):
        try:
            results.append(bound(p, args))
        except Exception as e:  # one bad scenario must not hide the others
            results.append({"file": os.path.basename(p), "error": repr(e)})
    json.dump(results, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0 if highspy is not None else 2


if __name__ == "__main__":
    sys.exit(main())
