#!/usr/bin/env python3
"""Proven lower bounds (and small exact optima) on the hourly price of any
plan for a Flotilla scheduling scenario, with HiGHS (`pip install highspy`).

Input: scenario JSON files written by `flotilla_bench::scenario::export`
(or directories of them). Output: one JSON array on stdout, per scenario:
  {file, mix, pods, lpBound, lpStatus, compactLpBound, ilpOptimum,
   ilpDualBound, ilpStatus, solver, seconds, types, keptTypes, classes,
   spreadLpBound, spreadHonouredLpBound, ...}

Notation: classes c with n_c pods and requests req[c,r]; types t with
capacity cap[t,r], hourly price_t >= 0 and an optional maxCount_t (existing
nodes: price 0, maxCount 1); m[c,t] = pods of class c one node of t holds
(resources, class count and maxPerNode), 0 where c may not use t. Types
dominated by another (one the same or more classes may use, with >= capacity
in every resource, <= price and no count limit) are dropped first: a pattern
on the dominated type is a pattern on its dominator at no higher price.

lpBound: the LP relaxation of bin packing with instance types as bins
(Gilmore-Gomory), by column generation. A pattern p is a type t(p) and
integer counts k_c(p) <= m[c,t] with sum_c req[c,r] k_c <= cap[t,r] for every
resource r; every node of every plan is one. Master LP over patterns:
    min sum_p price_t(p) x_p
    s.t. sum_p k_c(p) x_p        >= n_c         (duals pi_c >= 0)
         sum_{p of t} x_p        <= maxCount_t  (duals mu_t <= 0, limited t)
         x_p >= 0
Count-limited types with identical price, capacity and usable classes (the
bench's existing nodes) are one type whose limit is the sum, and classes that
differ only in their anti-affinity group (same requests, types, maxPerNode
and count; g of them) are one class of g n_c pods and g times the room per
node: both give the same LP (spread a merged pattern over the g cyclic
shifts of the classes, each with weight x_p / g).
The master starts from one column per class (its cheapest-per-pod unlimited
type filled with that class; an artificial cover per class at a prohibitive
price keeps it feasible) and grows by pricing: per type, the best pattern is
the multi-dimensional integer knapsack max sum_c pi_c k_c, solved exactly as
a small HiGHS MIP (zero gap; its dual bound is what the bounds below use). A
type is screened out without a MIP when an upper bound on its knapsack value,
the least over resources of that resource's fractional knapsack with
k_c <= m[c,t], cannot make its reduced cost price_t - mu_t - value_t
negative. Columns with reduced cost < -1e-9 are added; when there are none
the master's optimum is the LP optimum (lpStatus "optimal").
Every iteration also gives bounds that are valid whatever the columns, from
any pi >= 0, mu <= 0 and upper bounds v_t on the knapsack values (exact MIP
bounds, or the screening bound for types not priced):
  - Lagrangian: sum_c pi_c n_c + sum_t mu_t maxCount_t
                + sum_t min(0, price_t - mu_t - v_t) * U_t,
    U_t = min(maxCount_t, sum of n_c over classes that may use t): a plan
    without empty nodes (removing one never costs more) has at most that many
    nodes of t;
  - Farley: theta * sum_c pi_c n_c + sum_{limited t} min(0, price_t -
    theta v_t) maxCount_t, theta = min(1, min over unlimited t of
    price_t / v_t): (theta pi, that mu) is feasible for the dual of the full
    master LP.
lpDualBound is the best of these over the iterations, floored at 0; on
convergence it equals the LP optimum (up to the 1e-9 reduced-cost
tolerance), and lpBound = lpDualBound (lpStatus "optimal", lpBoundFrom
"lp-optimum"). If --lp-time-limit (default 60 s) runs out first, lpStatus
is "time-limit" and lpBound is the larger of lpDualBound (lpBoundFrom
"lagrangian") and compactLpBound ("compact"; valid as well: the compact LP
below is this LP with fractional patterns). "infeasible": some class cannot
be covered (lpBound null). Also reported: lpMasterObjective (the last
master's optimum: the LP optimum on convergence, else an upper bound on it),
lpIterations, lpColumns, lpPricingMips, lpTypes and lpClasses (after the
merging above), lpSeconds.
Any integer plan is a feasible point of the master LP, so lpBound is a lower
bound on every plan's price for the scenario's relaxation (topology spread
and pod affinity are ignored, so the bound is valid, only looser, for mixes
that use them). A warning goes to stderr if a converged lpBound is below
compactLpBound, or lpBound is above ilpOptimum (either would be a bug).

compactLpBound: the older, weaker compact relaxation
    min sum_t price_t x_t
    s.t. sum_t y[c,t]            = n_c                    (every pod placed)
         sum_c req[c,r] y[c,t]  <= cap[t,r] x_t           (per type, resource)
         y[c,t]                 <= m[c,t] x_t
         0 <= x_t <= maxCount_t,  y >= 0
which pools capacity per type, so pods split fluidly between nodes: it is
the master LP with fractional patterns (any point of {k >= 0: sum_c req[c,r]
k_c <= cap[t,r], k_c <= m[c,t]}). Every master LP point maps to a compact LP
point of the same price (x_t = sum of x_p over t's patterns, y[c,t] = the
pods they cover, trimmed to n_c), so lpBound >= compactLpBound.

ilpOptimum (scenarios with <= --ilp-max-pods pods): the exact optimum with
explicit integer bins per type, after dropping dominated types. Bins per type
are capped by the pods that may use it and, when the scenario carries a
feasible `upperBound` price, by floor(upperBound / price). If the time limit
hits, ilpOptimum is null and ilpDualBound (a valid lower bound) and
ilpIncumbent are reported. ilpModels lists what the ILP modelled:
"resources" and "maxPerNode" always, "zoneSpread", "poolWeights" and
"poolLimits" as below.

Zone spread (ILP only): a spread group g of the scenario's `spreadGroups`
is modelled when its topologyKey is topology.kubernetes.io/zone, it is
DoNotSchedule (ScheduleAnyway is only a preference: the scheduler relaxes it
when it cannot be met, so it never restricts the cheapest plan and is left
out), every pending pod its selector counts carries it, and those pods share
one set E of eligible zones. The ILP then has bins per (type, zone), priced
by the type's `zonePrices` (dominance only within a zone), pods of g's
classes only on bins in E, and, with n[g,z] the pods of g placed in zone z
and e[g,z] those already bound there, for every pair z != z' in E:
    n[g,z] + e[g,z] - n[g,z'] - e[g,z'] <= max(maxSkew, e[g,z] - e[g,z'])
(and n[g,z] + e[g,z] <= max(maxSkew, e[g,z]) when |E| < minDomains). This is
the scheduler's rule (shared/core/src/scheduler/topology.rs): a pod may go
to zone z when count[z] + 1 - min over eligible zones of count <= maxSkew,
so (without existing pods) every final placement has max - min <= maxSkew
over E, and every such placement can be reached pod by pod (least-loaded
zone first). Groups not modelled are listed in ilpSkippedSpread with the
reason; for them the ILP stays a relaxation. The LP bounds ignore spread:
they stay valid, only looser.

spreadLpBound (with --spread): a bound that honours zone spreads and zone
prices, for mixes where the LP bounds above are loose. Types become one per
(type, zone) at the zone's price (as for the ILP). A modelled group g (as
above) made of one class c with n pods, none bound yet, E eligible zones
(|E| >= minDomains when set) and maxSkew s leaves every zone of E at least
    least = max(0, ceil((n - s (|E| - 1)) / |E|))
pods in any placement (counts end within s of the least, so n <= |E| least
+ s (|E| - 1)). c is split into one class per zone z of E (least pods, only
on z's types) and one of the other n - |E| least pods (any type of E): any
placement of c covers these classes, so the pattern LP of the split
scenario (or its compact LP, the larger when column generation stops
early) bounds every plan that honours the spreads, and so does lpBound;
spreadLpBound is the larger. Groups not split are listed in spreadSkipped
with why (ScheduleAnyway, several classes, pods bound already, minDomains,
a zone without types); spreadGroupsSplit counts the others. The split
classes of one anti-affinity class may share a node in a pattern (a
relaxation, still valid). test_bound.py checks it against the exact ILP.

spreadHonouredLpBound (with --spread, when the scenario carries
`planSpread`, what the compared plan does with each spread group): NOT a
bound on every valid plan but on every plan that honours the spreads the
compared plan honours; a comparison basis, reported beside spreadLpBound
(whose meaning is unchanged). Why: the scheduler (as Karpenter) treats a
ScheduleAnyway spread as required and relaxes it only for a pod it cannot
place otherwise, so its plans nearly always honour those spreads, and pay
for it; a bound that drops them measures that price as waste. For each
group g with topology key zone, E' = the owners' eligible zones where they
have types, U = the classes g's selector counts (carrying the spread or
not; every counted pod pending, in the scenario and placed by the plan),
s = maxSkew, the plan honours g when its final counts of U's pods over E'
satisfy max - min <= s. The comparison set is then the plans whose final
counts do the same, and every such plan satisfies, with cnt[z] = pods of
U in zone z:
    cnt[z] - cnt[z'] >= -s                for z != z' in E'   (pairwise)
    cnt[z] >= least = ceil((|U| - s (|E'| - 1)) / |E'|)   for z in E',
the latter only when every class of U has types in E' only (then all |U|
pods are counted: |U| <= |E'| min + s (|E'| - 1)). They are side rows of
the pattern LP over the per-zone types (spreadLpBound's expansion, no
split): a pattern of unit u adds coef(zone of u) * (its pods of U) to a
row; with row duals sigma >= 0, a pod of class c on unit u is worth
pi_c + sum over rows containing c of sigma_j coef_j(zone of u) in the
pricing knapsack (negative worth: the pattern leaves the class out), the
Lagrangian bound gains sum_j sigma_j lo_j and Farley's scales it with pi.
Any plan of the set is a point of this LP (phantom over-cover only helps
the rows), so its optimum, and every Lagrangian bound on the way, is at
most the plan's price. Groups that hold for every valid plan (DoNotSchedule,
U = the owners) are marked "required", the others "honoured". Hostname
spreads: the scheduler counts a new node as a domain with no pods, so an
honoured hostname spread leaves at most s pods of U per node; when the
plan's most on one node (`maxPerNode`) is <= s, the set is the plans with
at most s pods of U per node, relaxed to maxPerNode = s per class of U.
The classes' types are first narrowed to their `honouredTypes` (the
preferred node affinity and NodePool weight the plan holds, see
scenario.rs): the set is also the plans that hold those preferences where
this one does, as Karpenter's scheduler does while it can.
Not modelled (spreadHonouredSkipped with why): groups the plan does not
honour, groups with bound pods, counted pods the plan leaves unplaced or
in a NodeClaim whose zone is still open, other topology keys. Because
plans of the set are valid plans, lpBound and spreadLpBound bound them
too: spreadHonouredLpBound is the largest of the three.
Why not a bound on every valid plan for a selector that counts pods
without the constraint: the constraint is checked only when a pod that
carries it is placed; the others may land anywhere, before (filling the
other zones, so the carriers may all go to one) or after (unbalancing the
union). Every valid plan only has, with C the carriers (all in E'):
cnt[z] >= max_z' C[z'] - s >= ceil(|C| / |E'|) - s for every z in E'
(at the last placement of a carrier in the zone holding most carriers,
every zone held at least its count + 1 - s); on `independent` (about 5
carriers of 50 counted pods per app) that is at most one pod per zone, so
it is not used.
test_bound.py checks spreadHonouredLpBound against the exact ILP over the
same set on random small cases.

NodePool weights and limits (ILP only, "poolWeights", "poolLimits"): when
the scenario's `pools` differ in weight or have limits (and no spread group
is modelled), the ILP is built per pool instead. Existing nodes and pools
without limits keep bins per type (dominance only within a pool). A pool j
with limits L gets slots s = 0, 1, ...: slot s may use the pool's types t
with limitCapacity[t] <= L - charged_s in every limited resource, and is
charged the most of them per resource (charged_{s+1} = charged_s + that);
the slots end when no type fits (Karpenter charges a NodeClaim the largest
type it could become, and so does the scheduler). Slot s has one binary
x[s,t] per type and u[s] = sum_t x[s,t] <= u[s-1], pods w[c,s] with
sum_c req[c,r] w[c,s] <= sum_t cap[t,r] x[s,t] and w[c,s] <= sum_t m[c,t]
x[s,t]. Weights: with y[c,j] = 1 when class c has pods in pool j, a pool
with no heavier pool that c may use is free; otherwise, for every heavier
pool h that c may use, y[c,j] <= u[h, last slot of h that can hold a pod of
c], and y[c,j] = 0 when h has no limits: a lighter pool only gets pods the
heavier ones cannot launch another NodeClaim for. The LP bounds ignore
weights and limits (valid, looser), so no LP-above-ILP warning is given.
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
    """Indices of types not dominated by another type (see module doc).
    Types with a "zone" (the zone-spread ILP's per-zone bins) are only
    dominated by types in the same zone."""
    types, classes = sc["types"], sc["classes"]
    n = len(types)
    zone = [t.get("zone") for t in types]
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
        if zone[b] is not None:
            cand &= np.array([z == zone[b] for z in zone])
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



def set_threads(h, n):
    """Sets HiGHS's thread count on `h`. HiGHS keeps one thread scheduler
    per process (1.7 on): an instance asking for another count than the
    scheduler was started with fails its run ("the scheduler has already
    been initialized"), so the scheduler is reset first (nothing else is
    running: the solves here are sequential)."""
    reset = getattr(highspy.Highs, "resetGlobalScheduler", None)
    if reset is not None:
        reset(True)
    h.setOptionValue("threads", int(n))


def solve(cost, lower, upper, rows, integer=None, time_limit=None, threads=None):
    """Returns (status string, objective, dual bound, seconds)."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    if threads is not None:
        set_threads(h, threads)
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


def group_types(sc, keep, m):
    """Kept types as pricing units: count-limited types with identical price,
    capacity and usable classes (the bench's existing nodes) become one unit
    whose limit is the sum of theirs; that LP is the same LP. Returns a list of
    (representative type index, maxCount or None, member count)."""
    types, classes = sc["types"], sc["classes"]
    usable = {t: [] for t in keep}
    for ci, c in enumerate(classes):
        for t in c["types"]:
            if t in usable and m[ci, t] > 0:
                usable[t].append(ci)
    units, by_key = [], {}
    for t in keep:
        mc = types[t].get("maxCount")
        if mc is None:
            units.append([t, None, 1])
            continue
        # The zone too: spreadHonouredLpBound's side rows tell zones apart.
        key = (types[t]["price"], tuple(types[t]["capacity"]), tuple(usable[t]),
               types[t].get("zone"))
        if key in by_key:
            u = units[by_key[key]]
            u[1] += mc
            u[2] += 1
        else:
            by_key[key] = len(units)
            units.append([t, mc, 1])
    return [tuple(u) for u in units]


class Knapsack:
    """Pricing problem of one type: max sum_c pi_c k_c subject to
    sum_c req[c,r] k_c <= cap[r] and 0 <= k_c <= m[c], k integer, as a HiGHS
    MIP built once and re-solved with new objective coefficients.

    Classes with identical requests and bound (e.g. hostname anti-affinity
    groups of one shape) are interchangeable but for their duals, so a group
    has one integer variable j_g = sum of its classes' k_c over continuous
    k_c in [0, bound]: for any j_g the best split fills the classes with the
    highest duals first, which is integral; k is rebuilt that way from j."""

    def __init__(self, cls, req, cap, bound):
        self.cls = cls  # class indices with m > 0
        self.req = req  # len(cls) x R integer requests
        self.cap = cap
        self.bound = bound  # m[c] per entry of cls
        self.h = None
        # Rows that can bind at all (sum of requests at the bounds > cap).
        self.rows = [r for r in range(len(cap))
                     if (req[:, r] * bound).sum() > cap[r]]
        groups = {}
        for i in range(len(cls)):
            key = (tuple(int(v) for v in req[i]), int(bound[i]))
            groups.setdefault(key, []).append(i)
        self.groups = list(groups.values())

    def _build(self):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.0)
        set_threads(h, 1)
        n = len(self.cls)
        G = len(self.groups)
        # Columns 0..n-1: k_c (integer when alone in its group); n..n+G-1: j_g.
        integer = np.zeros(n + G, dtype=bool)
        jup = np.zeros(G)
        for g, members in enumerate(self.groups):
            if len(members) == 1:
                integer[members[0]] = True
            else:
                integer[n + g] = True
            jup[g] = float(self.bound[members].sum())
        h.addCols(n + G, np.zeros(n + G), np.zeros(n + G),
                  np.concatenate([self.bound.astype(float), jup]), 0,
                  np.zeros(n + G, dtype=np.int32), np.array([], dtype=np.int32),
                  np.array([], dtype=float))
        for g, members in enumerate(self.groups):
            idx = np.array(members + [n + g], dtype=np.int32)
            val = np.array([1.0] * len(members) + [-1.0])
            h.addRow(0.0, 0.0, len(idx), idx, val)
        for r in self.rows:
            # On the group variables; a group's classes share their requests.
            lead = np.array([members[0] for members in self.groups])
            nz = np.nonzero(self.req[lead, r])[0]
            h.addRow(-highspy.kHighsInf, float(self.cap[r]), len(nz),
                     (n + nz).astype(np.int32), self.req[lead[nz], r].astype(float))
        cols = np.nonzero(integer)[0].astype(np.int32)
        h.changeColsIntegrality(
            len(cols), cols, np.array([highspy.HighsVarType.kInteger] * len(cols)))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        self.h = h

    def feasible(self, k):
        return bool(np.all(k <= self.bound) and np.all(k >= 0)
                    and np.all(k @ self.req <= self.cap))

    def solve(self, pi):
        """(k, value of k, upper bound on the optimum) for duals pi (per
        entry of cls). k is None if no feasible integer point came back."""
        p = np.maximum(pi, 0.0)
        if not self.rows:  # nothing binds: every class at its bound
            k = self.bound.copy()
            v = float(p @ k)
            return k, v, v
        if self.h is None:
            self._build()
        n = len(self.cls)
        self.h.changeColsCost(n, np.arange(n, dtype=np.int32), p)
        self.h.run()
        info = self.h.getInfo()
        k = None
        if info.primal_solution_status == 2:
            x = np.array(self.h.getSolution().col_value)
            k = np.zeros(n, dtype=np.int64)
            for g, members in enumerate(self.groups):
                left = int(round(x[n + g]))
                for i in sorted(members, key=lambda i: -p[i]):
                    k[i] = min(self.bound[i], max(left, 0))
                    left -= k[i]
            if not self.feasible(k):
                k = None
        v = float(p @ k) if k is not None else 0.0
        if self.h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            ub = info.mip_dual_bound
            ub = max(v, ub if math.isfinite(ub) else INF)
        else:
            ub = INF
        return k, v, ub


def screen_bounds(pi, req, capT, M):
    """Upper bound per unit on its pricing value for duals pi: the least over
    resources of the fractional (LP) knapsack of that resource alone, with
    k_c <= m[c,t] (classes by value per unit of the resource, greedily).
    req: C x R, capT: U x R, M: C x U (m, 0 where a class may not use a unit)."""
    pos = pi > 0
    full = (pi[:, None] * M).sum(axis=0)
    ub = full.copy()
    for r in range(req.shape[1]):
        rq = req[:, r].astype(float)
        free = pos & (rq <= 0)
        val = (pi[free, None] * M[free]).sum(axis=0)
        use = np.nonzero(pos & (rq > 0))[0]
        if len(use):
            ratio = pi[use] / rq[use]
            order = use[np.argsort(-ratio, kind="stable")]
            w = M[order] * rq[order, None]  # J x U weights at the bounds
            before = np.cumsum(w, axis=0) - w
            taken = np.clip(capT[None, :, r] - before, 0.0, w)
            val = val + ((pi[order] / rq[order])[:, None] * taken).sum(axis=0)
        ub = np.minimum(ub, val)
    return ub


def screen_bounds_per_unit(P, req, capT, M):
    """screen_bounds with a profit per class and unit (P: C x U), for the
    side rows of spreadHonouredLpBound (profits then differ by zone)."""
    Pp = np.maximum(P, 0.0) * (M > 0)
    ub = (Pp * M).sum(axis=0)
    for r in range(req.shape[1]):
        rq = req[:, r].astype(float)
        free = rq <= 0
        val = (Pp[free] * M[free]).sum(axis=0)
        use = np.nonzero(~free)[0]
        if len(use):
            ratio = Pp[use] / rq[use, None]
            order = np.argsort(-ratio, axis=0, kind="stable")
            w = np.take_along_axis(M[use] * rq[use, None], order, axis=0)
            rs = np.take_along_axis(ratio, order, axis=0)
            before = np.cumsum(w, axis=0) - w
            taken = np.clip(capT[None, :, r] - before, 0.0, w)
            val = val + (rs * taken).sum(axis=0)
        ub = np.minimum(ub, val)
    return ub


def pattern_lp_bound(sc, keep, m, time_limit, eps=1e-9, side=()):
    """Gilmore-Gomory LP over packing patterns by column generation (see the
    module doc). Returns a dict of output fields. side: extra rows
    (lo, classes, coef by zone): sum over the columns of coef[zone of the
    column's type] * (its pods of those classes) * x_p >= lo
    (spreadHonouredLpBound's zone rows)."""
    t0 = time.monotonic()
    types, classes = sc["types"], sc["classes"]
    units = group_types(sc, keep, m)
    side = list(side)
    member_of = {}
    for j, (_, cls, _) in enumerate(side):
        for ci in cls:
            member_of.setdefault(ci, []).append(j)
    # Classes that differ only in their anti-affinity group (same requests,
    # types, maxPerNode and count) become one class of g times the pods and g
    # times the per-node room: the same LP (averaging a pattern over the
    # cyclic shifts of the g classes splits its pods evenly among them).
    merged = {}
    for ci, c in enumerate(classes):
        key = (tuple(c["requests"]), tuple(sorted(c["types"])), c.get("maxPerNode"),
               c["count"], tuple(member_of.get(ci, ())))
        merged.setdefault(key, []).append(ci)
    members = list(merged.values())
    C, U = len(members), len(units)
    R = len(sc["resources"])
    n = np.array([classes[g[0]]["count"] * len(g) for g in members], dtype=float)
    req = np.array([classes[g[0]]["requests"] for g in members],
                   dtype=np.int64).reshape(C, R)
    price = np.array([types[t]["price"] for t, _, _ in units], dtype=float)
    capT = np.array([types[t]["capacity"] for t, _, _ in units],
                    dtype=np.int64).reshape(U, R)
    M = np.zeros((C, U), dtype=np.int64)
    allowed = [set(classes[g[0]]["types"]) for g in members]
    for u, (t, _, _) in enumerate(units):
        for ci, g in enumerate(members):
            if t in allowed[ci] and m[g[0], t] > 0:
                # What one node holds of the merged class: g times a member's
                # count and maxPerNode, and what fits.
                fit = min([capT[u, r] // req[ci, r] for r in range(R) if req[ci, r] > 0]
                          + [m[g[0], t] * len(g)])
                M[ci, u] = fit
    limited = [u for u in range(U) if units[u][1] is not None]
    limit = np.array([units[u][1] or 0 for u in range(U)], dtype=float)
    row_of = {u: C + i for i, u in enumerate(limited)}
    # Nodes of a unit in a plan without empty nodes: at most the pods that
    # may use it (and its count limit).
    cap_nodes = (n[:, None] * (M > 0)).sum(axis=0)
    cap_nodes = np.where([units[u][1] is not None for u in range(U)],
                         np.minimum(cap_nodes, limit), cap_nodes)
    J = len(side)
    side_lo = np.array([lo for lo, _, _ in side], dtype=float)
    S = np.zeros((J, C))  # merged class in side row j
    Z = np.zeros((J, U))  # coefficient of side row j on unit u's zone
    for j, (_, cls, coef) in enumerate(side):
        for ci, g in enumerate(members):
            if g[0] in cls:
                S[j, ci] = 1.0
        for u, (t, _, _) in enumerate(units):
            Z[j, u] = coef.get(types[t].get("zone"), 0.0)
    out = {"lpTypes": U, "lpClasses": C}
    uncoverable = [ci for ci in range(C) if not M[ci].any()]
    if uncoverable:
        out.update(lpStatus="infeasible", lpBound=None)
        return out

    knap = [None] * U
    cols = set()

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    set_threads(h, 1)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    nrow = C + len(limited) + J
    side_row = C + len(limited)
    lo = np.concatenate([n, np.full(len(limited), -highspy.kHighsInf), side_lo])
    hi = np.concatenate([np.full(C, highspy.kHighsInf), limit[limited],
                         np.full(J, highspy.kHighsInf)])
    h.addRows(nrow, lo, hi, 0, np.zeros(nrow, dtype=np.int32),
              np.array([], dtype=np.int32), np.array([], dtype=float))
    # Artificial cover per class and side row (cost far above any real
    # pod's): keeps the master feasible whatever the first columns are.
    big = 1e3 * (1.0 + float(price.max()))
    arows = np.concatenate([np.arange(C), side_row + np.arange(J)]).astype(np.int32)
    A = C + J
    h.addCols(A, np.full(A, big), np.zeros(A), np.full(A, highspy.kHighsInf),
              A, np.arange(A, dtype=np.int32), arows, np.ones(A))

    col_units = []  # unit of each master column after the artificial ones

    def add_columns(new):
        starts, idx, val, cost = [], [], [], []
        for u, k in new:
            col_units.append(u)
            # Only real patterns: a wrong column would void the bound.
            assert np.all(k <= M[:, u]) and np.all(k @ req <= capT[u]), (u, k)
            starts.append(len(idx))
            for ci in np.nonzero(k)[0]:
                idx.append(int(ci))
                val.append(float(k[ci]))
            if u in row_of:
                idx.append(row_of[u])
                val.append(1.0)
            for j in range(J):
                a = Z[j, u] * float(S[j] @ k)
                if a != 0.0:
                    idx.append(side_row + j)
                    val.append(a)
            cost.append(price[u])
        h.addCols(len(new), np.array(cost), np.zeros(len(new)),
                  np.full(len(new), highspy.kHighsInf), len(idx),
                  np.array(starts, dtype=np.int32), np.array(idx, dtype=np.int32),
                  np.array(val, dtype=float))

    # First columns: per class, its cheapest-per-pod unlimited unit, full.
    # With side rows, one such column per zone too (so the zone rows can
    # be met without the artificial columns from the start).
    first = []
    unit_zone = [types[t].get("zone") if J else None for t, _, _ in units]
    for ci in range(C):
        best = {}
        for u in np.nonzero(M[ci])[0]:
            if units[u][1] is not None:
                continue
            per = price[u] / M[ci, u]
            zk = unit_zone[u]
            if zk not in best or per < best[zk][0]:
                best[zk] = (per, u)
        for _, u in best.values():
            k = np.zeros(C, dtype=np.int64)
            k[ci] = M[ci, u]
            cols.add((u, tuple(k)))
            first.append((u, k))
    add_columns(first)

    best_lb = -INF
    status = None
    it = mips = 0
    z = None
    while True:
        it += 1
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            status = "master-" + h.modelStatusToString(h.getModelStatus())
            break
        z = h.getInfo().objective_function_value
        dual = np.array(h.getSolution().row_dual)
        pi = np.maximum(dual[:C], 0.0)
        mu = np.zeros(U)
        for u, r in row_of.items():
            mu[u] = min(dual[r], 0.0)
        sigma = np.maximum(dual[side_row:side_row + J], 0.0)
        if J:
            # Profit of a pod of class c on unit u: pi_c plus the side rows'
            # duals times their coefficients on u's zone.
            P = pi[:, None] + S.T @ (sigma[:, None] * Z)
            value_ub = screen_bounds_per_unit(P, req, capT, M)
        else:
            P = None
            value_ub = screen_bounds(pi, req, capT, M)
        cand = np.nonzero(price - mu - value_ub < -eps)[0]
        cand = cand[np.argsort((price - mu - value_ub)[cand], kind="stable")]
        new = []
        timed_out = False
        for u in cand:
            if time.monotonic() - t0 > time_limit:
                timed_out = True
                break
            if knap[u] is None:
                cl = np.nonzero(M[:, u])[0]
                knap[u] = Knapsack(cl, req[cl], capT[u], M[cl, u])
            ks = knap[u]
            k, v, ub = ks.solve(pi[ks.cls] if P is None else P[ks.cls, u])
            if k is not None and P is not None:
                # Pods of no profit here only add to the side rows' counts
                # in this zone: leave them out (still a pattern).
                k = np.where(P[ks.cls, u] > 0, k, 0)
            mips += 1
            value_ub[u] = min(value_ub[u], ub * (1 + 1e-9) + 1e-12)
            if k is not None and price[u] - mu[u] - v < -eps:
                full = np.zeros(C, dtype=np.int64)
                full[ks.cls] = k
                key = (u, tuple(full))
                if key not in cols:
                    cols.add(key)
                    new.append((u, full))
        # Valid bounds from these duals (module doc): Lagrangian and Farley.
        rc = price - mu - value_ub
        base = float(pi @ n) + float(sigma @ side_lo)
        lag = base + float(mu @ limit) + float(np.minimum(rc, 0.0) @ cap_nodes)
        unl = np.array([units[u][1] is None for u in range(U)])
        ratio = [price[u] / value_ub[u] for u in range(U)
                 if unl[u] and value_ub[u] > 0]
        theta = min([1.0] + ratio)
        farley = theta * base + float(
            np.minimum(price - theta * value_ub, 0.0)[~unl] @ limit[~unl])
        best_lb = max(best_lb, lag, farley)
        if timed_out or (new and time.monotonic() - t0 > time_limit):
            status = "time-limit"
            break
        if not new:
            status = "optimal"
            break
        add_columns(new)
    art = np.array(h.getSolution().col_value[:C + J]) if z is not None else None
    if z is not None:
        # The last master's nodes (fractional) by instance type, for the
        # report's node counts beside prices.
        x = np.array(h.getSolution().col_value[C + J:])
        by_name = {}
        for u, v in zip(col_units, x):
            if v > 1e-9:
                name = types[units[u][0]].get("name")
                by_name[name] = by_name.get(name, 0.0) + float(v)
        out["lpNodes"] = round(float(x.sum()), 3)
        out["lpNodeTypes"] = {k: round(v, 3) for k, v in
                              sorted(by_name.items(), key=lambda kv: -kv[1])[:12]}
    if status == "optimal" and art is not None and art.max() > 1e-7:
        status = "infeasible"
    # Prices are >= 0, so 0 is a bound too (early Lagrangian bounds can be
    # negative).
    best_lb = max(best_lb, 0.0)
    out.update(
        lpStatus=status,
        lpBound=(round(float(best_lb), 6)
                 if status in ("optimal", "time-limit") and math.isfinite(best_lb)
                 else None),
        lpMasterObjective=None if z is None else round(float(z), 6),
        lpIterations=it,
        lpColumns=len(cols),
        lpPricingMips=mips,
        lpSeconds=round(time.monotonic() - t0, 3),
    )
    return out


ZONE_KEY = "topology.kubernetes.io/zone"


def zone_spread(sc):
    """(modelled, skipped): the spread groups the ILP models exactly (see
    the module doc), as dicts with class indices, eligible zones, maxSkew,
    minDomains and existing counts, and the others with a reason."""
    classes = sc["classes"]
    modelled, skipped = [], []
    for g in sc.get("spreadGroups", []):
        gid = g["id"]
        owners = [ci for ci, c in enumerate(classes)
                  if any(s["group"] == gid for s in c.get("spread", []))]
        counted = [ci for ci, c in enumerate(classes)
                   if gid in c.get("spreadCounted", [])]
        eligible = {json.dumps(s["eligibleZones"]) for ci in owners
                    for s in classes[ci]["spread"] if s["group"] == gid}
        reason = None
        if g["whenUnsatisfiable"] != "DoNotSchedule":
            reason = "ScheduleAnyway: a preference, not a constraint"
        elif g["topologyKey"] != ZONE_KEY:
            reason = "topologyKey " + g["topologyKey"] + " not modelled"
        elif not set(counted) <= set(owners):
            reason = "counts pods that do not carry the constraint"
        elif len(eligible) != 1 or json.loads(next(iter(eligible))) is None:
            reason = "owners differ in eligible zones"
        if reason is not None:
            skipped.append({"group": gid, "reason": reason})
            continue
        modelled.append({
            "group": gid,
            "classes": sorted(set(owners) | set(counted)),
            "eligible": json.loads(next(iter(eligible))),
            "maxSkew": g["maxSkew"],
            "minDomains": g.get("minDomains"),
            "existing": g.get("existing", {}),
        })
    return modelled, skipped


def zone_expand(sc, spread):
    """The scenario with one type per (type, zone) priced per zone; classes
    of modelled spread groups only on their eligible zones. Returns it and
    the original type index of each new type."""
    restrict = {}
    for g in spread:
        for ci in g["classes"]:
            e = set(g["eligible"])
            restrict[ci] = restrict.get(ci, e) & e
    types, origin, index = [], [], []
    for ti, t in enumerate(sc["types"]):
        zp = t.get("zonePrices") or {None: t["price"]}
        index.append([])
        for z, p in sorted(zp.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
            index[ti].append((z, len(types)))
            types.append(dict(t, price=p, zone=z))
            origin.append(ti)
    classes = []
    for ci, c in enumerate(sc["classes"]):
        ok = restrict.get(ci)
        ts = [j for ti in c["types"] for (z, j) in index[ti]
              if ok is None or z in ok]
        classes.append(dict(c, types=sorted(ts)))
    return dict(sc, types=types, classes=classes), origin


def spread_split(sc):
    """The zone-spread relaxation of the LP bounds (spreadLpBound; see the
    module doc): the scenario with one type per (type, zone) priced per
    zone, and each class that alone makes up a modelled zone-spread group
    (no pods of it bound yet, minDomains met) split into one class per
    eligible zone of the least count any placement leaves there, plus one
    for the rest on any eligible zone. Returns (scenario, groups split,
    groups skipped with why)."""
    spread, skipped = zone_spread(sc)
    expanded, _ = zone_expand(sc, spread)
    zone_of = [t.get("zone") for t in expanded["types"]]
    classes = [dict(c) for c in expanded["classes"]]
    split, done = [], set()
    for g in spread:
        gid, zones, skew = g["group"], g["eligible"], g["maxSkew"]
        reason = None
        if len(g["classes"]) != 1:
            reason = "several classes share the group"
        elif any(v for v in g["existing"].values()):
            reason = "pods of the group are bound already"
        elif g.get("minDomains") and len(zones) < g["minDomains"]:
            reason = "fewer eligible zones than minDomains"
        elif g["classes"][0] in done:
            reason = "the class is split by another group"
        ci = g["classes"][0]
        per_zone = {z: [t for t in classes[ci]["types"] if zone_of[t] == z] for z in zones}
        if reason is None and not all(per_zone.values()):
            reason = "an eligible zone has no type for the pods"
        if reason is not None:
            skipped.append({"group": gid, "reason": reason})
            continue
        n = classes[ci]["count"]
        # Counts end within maxSkew of the least, so
        # n <= |E| least + maxSkew (|E| - 1).
        least = max(0, -(-(n - skew * (len(zones) - 1)) // len(zones)))
        done.add(ci)
        split.append({"group": gid, "class": ci, "zones": zones, "leastPerZone": least})
        if least == 0:
            continue
        rest = n - least * len(zones)
        base = classes[ci]
        classes[ci] = dict(base, count=rest)
        for z in zones:
            classes.append(dict(base, count=least, types=per_zone[z]))
    classes = [c for c in classes if c["count"] > 0]
    return dict(expanded, classes=classes), split, skipped


def spread_lp_bound(sc, time_limit):
    """spreadLpBound: the pattern LP (or the compact LP, whichever is
    higher when column generation stops early) of `spread_split`'s
    scenario; None when no group is split."""
    ssc, split, skipped = spread_split(sc)
    out = {"spreadGroupsSplit": len(split), "spreadSkipped": skipped}
    if not split:
        out["spreadLpBound"] = None
        return out
    m = fit_counts(ssc)
    keep = prune_dominated(ssc, m)
    status, compact = lp_bound(ssc, keep, m)
    res = pattern_lp_bound(ssc, keep, m, time_limit)
    best = res.get("lpBound")
    if status == "optimal" and compact is not None and res.get("lpStatus") != "optimal":
        best = compact if best is None else max(best, compact)
    out["spreadLpStatus"] = res.get("lpStatus")
    out["spreadLpBound"] = None if best is None else round(best, 6)
    out["spreadLpSeconds"] = res.get("lpSeconds")
    out["spreadLpNodes"] = res.get("lpNodes")
    return out


def honoured_constraints(sc):
    """spreadHonouredLpBound's constraints (see the module doc): the
    scenario expanded per zone (as for spreadLpBound), side rows for
    pattern_lp_bound, the groups held with how (`required`: held by every
    valid plan; `honoured`: held by the compared plan, `planSpread`) and the
    groups left out with why."""
    # The types the plan's held preferences leave each class.
    sc = dict(sc, classes=[dict(c, types=c.get("honouredTypes", c["types"]))
                           for c in sc["classes"]])
    spread, _ = zone_spread(sc)
    expanded, _ = zone_expand(sc, spread)
    classes = [dict(c) for c in expanded["classes"]]
    zone_of = [t.get("zone") for t in expanded["types"]]
    plan = {p["group"]: p for p in sc.get("planSpread") or []}
    side, held, skipped = [], [], []
    for g in sc.get("spreadGroups", []):
        gid = g["id"]
        owners = [ci for ci, c in enumerate(classes)
                  if any(x["group"] == gid for x in c.get("spread", []))]
        counted = [ci for ci, c in enumerate(classes)
                   if gid in c.get("spreadCounted", [])]
        eligible = {json.dumps(x["eligibleZones"]) for ci in owners
                    for x in classes[ci]["spread"] if x["group"] == gid}
        ps = plan.get(gid)
        n = sum(classes[ci]["count"] for ci in counted)
        reason = None
        if ps is None:
            reason = "no planSpread for the group"
        elif any(v for v in g.get("existing", {}).values()):
            reason = "pods of the group are bound already"
        elif ps["unplaced"] or sum(ps["zoneCounts"].values()) + ps["undetermined"] != n:
            reason = "the plan does not place every counted pod of the scenario"
        elif not set(owners) <= set(counted):
            reason = "owners not counted by their own selector"
        elif g["topologyKey"] == "kubernetes.io/hostname":
            if ps["maxPerNode"] > g["maxSkew"]:
                reason = (f"not honoured by the plan ({ps['maxPerNode']} on one node, "
                          f"maxSkew {g['maxSkew']})")
            else:
                for ci in counted:
                    mp = classes[ci].get("maxPerNode")
                    classes[ci]["maxPerNode"] = (g["maxSkew"] if mp is None
                                                 else min(mp, g["maxSkew"]))
                held.append({"group": gid, "key": "hostname", "how": "honoured",
                             "maxPerNode": g["maxSkew"], "classes": len(counted)})
                continue
        elif g["topologyKey"] != ZONE_KEY:
            reason = "topologyKey " + g["topologyKey"] + " not modelled"
        elif len(eligible) != 1 or json.loads(next(iter(eligible))) is None:
            reason = "owners differ in eligible zones"
        elif ps["undetermined"]:
            reason = "the plan leaves the zone of some counted pods open"
        if reason is None:
            # E': eligible zones where the owners have types.
            zones = [z for z in json.loads(next(iter(eligible)))
                     if all(any(zone_of[t] == z for t in classes[ci]["types"])
                            for ci in owners)]
            cnt = {z: ps["zoneCounts"].get(z, 0) for z in zones}
            skew = g["maxSkew"]
            required = (g["whenUnsatisfiable"] == "DoNotSchedule"
                        and set(counted) == set(owners))
            if len(zones) < 2:
                reason = "fewer than two eligible zones with types"
            elif max(cnt.values()) - min(cnt.values()) > skew:
                reason = f"not honoured by the plan (zone counts {cnt}, maxSkew {skew})"
            elif (g.get("minDomains") and len(zones) < g["minDomains"]):
                reason = "fewer eligible zones than minDomains"
        if reason is not None:
            skipped.append({"group": gid, "reason": reason})
            continue
        cls = set(counted)
        for za in zones:
            for zb in zones:
                if za != zb:  # count[za] - count[zb] >= -maxSkew
                    side.append((-float(skew), cls, {za: 1.0, zb: -1.0}))
        confined = all(zone_of[t] in cnt for ci in counted for t in classes[ci]["types"])
        least = 0
        if confined:
            least = max(0, -(-(n - skew * (len(zones) - 1)) // len(zones)))
            for z in zones:
                if least:
                    side.append((float(least), cls, {z: 1.0}))
        held.append({"group": gid, "key": "zone",
                     "how": "required" if required else "honoured",
                     "zones": zones, "pods": n, "classes": len(counted),
                     "leastPerZone": least if confined else None})
    return dict(expanded, classes=classes), side, held, skipped


def spread_honoured_lp_bound(sc, time_limit):
    """spreadHonouredLpBound: the pattern LP of `honoured_constraints`'s
    scenario and side rows (its Lagrangian bound when column generation
    stops early); None when no group is held."""
    hsc, side, held, skipped = honoured_constraints(sc)
    out = {"spreadHonouredGroups": held, "spreadHonouredSkipped": skipped}
    if not held:
        out["spreadHonouredLpBound"] = None
        return out
    m = fit_counts(hsc)
    keep = prune_dominated(hsc, m)
    res = pattern_lp_bound(hsc, keep, m, time_limit, side=side)
    best = res.get("lpBound")
    out["spreadHonouredLpStatus"] = res.get("lpStatus")
    out["spreadHonouredLpBound"] = None if best is None else round(best, 6)
    out["spreadHonouredLpSeconds"] = res.get("lpSeconds")
    out["spreadHonouredLpNodes"] = res.get("lpNodes")
    out["spreadHonouredLpNodeTypes"] = res.get("lpNodeTypes")
    return out


def ilp_optimum(sc, keep, m, time_limit, threads, spread=(), origin=None):
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
    if origin is not None:
        # A count-limited type split over zones keeps its limit overall.
        by_origin = {}
        for t in keep:
            by_origin.setdefault(origin[t], []).append(t)
        for o, ts in by_origin.items():
            mc = types[ts[0]].get("maxCount")
            if mc is not None and len(ts) > 1:
                rows.add([(z[t, b], 1.0) for t in ts for b in range(bins_of[t])],
                         -INF, float(mc))
    for g in spread:
        n = {}
        for zn in g["eligible"]:
            n[zn] = [(w[ci, t, b], 1.0) for (ci, t, b) in w
                     if ci in g["classes"] and types[t].get("zone") == zn]
        e = {zn: g["existing"].get(zn, 0) for zn in g["eligible"]}
        s = g["maxSkew"]
        for za in g["eligible"]:
            for zb in g["eligible"]:
                if za == zb:
                    continue
                rhs = max(s, e[za] - e[zb]) - e[za] + e[zb]
                coefs = n[za] + [(j, -v) for j, v in n[zb]]
                if coefs:
                    rows.add(coefs, -INF, float(rhs))
        md = g.get("minDomains")
        if md is not None and len(g["eligible"]) < md:
            for za in g["eligible"]:
                if n[za]:
                    rows.add(n[za], -INF, float(max(s, e[za]) - e[za]))
    status, obj, dual, secs = solve(cost, lower, upper, rows, integer,
                                    time_limit, threads)
    return status, obj, dual, len(z), secs


def weights_apply(sc):
    """Whether NodePool weights or limits can matter: more than one pool
    with different weights, or a pool with limits."""
    pools = sc.get("pools") or []
    return (len({p["weight"] for p in pools}) > 1
            or any(p.get("limits") for p in pools))


def pool_slots(sc, j, ts, most):
    """The NodeClaims pool j's limits admit, in launch order (see the module
    doc): per slot, the types of `ts` whose limitCapacity fits what is left;
    each slot is charged the most of them per limited resource."""
    types = sc["types"]
    left = dict(sc["pools"][j]["limits"])
    slots = []
    while len(slots) < most:
        adm = [t for t in ts
               if all(types[t]["limitCapacity"][k] <= left[k] for k in left)]
        if not adm:
            break
        slots.append(adm)
        for k in left:
            left[k] -= max(types[t]["limitCapacity"][k] for t in adm)
    return slots


def prune_within(sc, m, ts):
    """ts without the types another type of ts dominates (module doc)."""
    sub = dict(sc, types=[sc["types"][t] for t in ts],
               classes=[dict(c, types=[i for i, t in enumerate(ts) if t in set(c["types"])])
                        for c in sc["classes"]])
    sm = {(ci, i): m.get((ci, t), 0) for ci in range(len(sc["classes"]))
          for i, t in enumerate(ts)}
    return [ts[i] for i in prune_dominated(sub, sm)]


def ilp_weighted(sc, m, time_limit, threads):
    """The exact optimum under NodePool weights and limits (module doc)."""
    types, classes, pools = sc["types"], sc["classes"], sc["pools"]
    ub = sc.get("upperBound")
    npods = sum(c["count"] for c in classes)
    nres = len(sc["resources"])
    by_pool = {}
    for t, ty in enumerate(types):
        if any(m.get((ci, t), 0) > 0 for ci in range(len(classes))):
            by_pool.setdefault(ty.get("poolIndex"), []).append(t)
    cost, lower, upper, integer = [], [], [], []

    def var(c, lo, hi):
        cost.append(float(c))
        lower.append(float(lo))
        upper.append(float(hi))
        integer.append(True)
        return len(cost) - 1

    rows = Rows()
    place = {ci: [] for ci in range(len(classes))}
    in_pool = {}
    last_slot = {}
    nbins = 0
    for j in sorted(by_pool, key=lambda j: (j is None, j or 0)):
        ts = by_pool[j]
        limits = None if j is None else pools[j].get("limits")
        if not limits:
            for t in prune_within(sc, m, ts):
                on = [ci for ci in range(len(classes)) if m.get((ci, t), 0) > 0]
                nb = sum(classes[ci]["count"] for ci in on)
                if types[t].get("maxCount") is not None:
                    nb = min(nb, types[t]["maxCount"])
                p = types[t]["price"]
                if ub is not None and p > 0:
                    nb = min(nb, int(math.floor(ub * (1 + 1e-6) / p + 1e-6)))
                prev = None
                for _ in range(nb):
                    z = var(p, 0, 1)
                    nbins += 1
                    if prev is not None:
                        rows.add([(z, 1.0), (prev, -1.0)], -INF, 0.0)
                    prev = z
                    ws = {}
                    for ci in on:
                        w = var(0, 0, min(classes[ci]["count"], m[ci, t]))
                        rows.add([(w, 1.0), (z, -m[ci, t])], -INF, 0.0)
                        ws[ci] = w
                        place[ci].append(w)
                        in_pool.setdefault((ci, j), []).append(w)
                    for r in range(nres):
                        coefs = [(ws[ci], classes[ci]["requests"][r]) for ci in on
                                 if classes[ci]["requests"][r] > 0]
                        if coefs:
                            rows.add(coefs + [(z, -types[t]["capacity"][r])], -INF, 0.0)
            continue
        prev = None
        for adm in pool_slots(sc, j, ts, npods):
            xs = {t: var(types[t]["price"], 0, 1) for t in adm}
            u = var(0, 0, 1)
            nbins += 1
            rows.add([(x, 1.0) for x in xs.values()] + [(u, -1.0)], 0.0, 0.0)
            if prev is not None:
                rows.add([(u, 1.0), (prev, -1.0)], -INF, 0.0)
            prev = u
            ws = {}
            for ci, c in enumerate(classes):
                fit = [t for t in adm if m.get((ci, t), 0) > 0]
                if not fit:
                    continue
                w = var(0, 0, c["count"])
                rows.add([(w, 1.0)] + [(xs[t], -m[ci, t]) for t in fit], -INF, 0.0)
                ws[ci] = w
                place[ci].append(w)
                in_pool.setdefault((ci, j), []).append(w)
                last_slot[j, ci] = u
            for r in range(nres):
                coefs = [(w, classes[ci]["requests"][r]) for ci, w in ws.items()
                         if classes[ci]["requests"][r] > 0]
                if coefs:
                    rows.add(coefs + [(xs[t], -types[t]["capacity"][r]) for t in adm],
                             -INF, 0.0)
    for ci, c in enumerate(classes):
        if not place[ci]:
            return "infeasible", None, None, 0, 0.0
        rows.add([(w, 1.0) for w in place[ci]], c["count"], c["count"])
    # Weights: a class in pool j only when every heavier pool it may use is
    # out of NodeClaims for it (limits), never past an unlimited one.
    for ci, c in enumerate(classes):
        mine = sorted(j for (k, j) in in_pool if k == ci and j is not None)
        for j in mine:
            heavier = [h for h in mine if pools[h]["weight"] > pools[j]["weight"]]
            if not heavier:
                continue
            y = var(0, 0, 1)
            rows.add([(w, 1.0) for w in in_pool[ci, j]] + [(y, -c["count"])], -INF, 0.0)
            for h in heavier:
                if (h, ci) in last_slot:
                    rows.add([(y, 1.0), (last_slot[h, ci], -1.0)], -INF, 0.0)
                else:
                    rows.add([(y, 1.0)], -INF, 0.0)
    status, obj, dual, secs = solve(cost, lower, upper, rows, integer, time_limit, threads)
    return status, obj, dual, nbins, secs


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
    out["compactLpStatus"] = status
    compact = obj if status == "optimal" and obj is not None else None
    out["compactLpBound"] = None if compact is None else round(compact, 6)
    out.update(pattern_lp_bound(sc, keep, m, args.lp_time_limit))
    lp = out.get("lpBound")
    out["lpDualBound"] = lp
    out["lpBoundFrom"] = {"optimal": "lp-optimum",
                          "time-limit": "lagrangian"}.get(out["lpStatus"])
    if lp is not None and compact is not None and lp < compact - 1e-6 * max(1.0, compact):
        if out["lpStatus"] == "optimal":
            print(f"warning: {out['file']}: pattern LP optimum {lp} is below the "
                  f"compact LP bound {compact}", file=sys.stderr)
        else:
            # Still valid: the compact LP is the pattern LP with fractional
            # patterns, so its value bounds the pattern LP from below too.
            print(f"note: {out['file']}: column generation stopped ({out['lpStatus']}) "
                  f"at a bound of {lp}; lpBound is the compact bound {compact}",
                  file=sys.stderr)
            out["lpBound"] = round(compact, 6)
            out["lpBoundFrom"] = "compact"
            lp = out["lpBound"]
    if args.spread:
        out.update(spread_lp_bound(sc, args.lp_time_limit))
        sb = out.get("spreadLpBound")
        if lp is not None and sb is not None:
            # Both bound every plan that honours the modelled spreads.
            out["spreadLpBound"] = round(max(sb, lp), 6)
        if sc.get("planSpread") is not None:
            out.update(spread_honoured_lp_bound(sc, args.lp_time_limit))
            hb = out.get("spreadHonouredLpBound")
            if hb is not None:
                # Plans honouring what ours honours are valid plans, so the
                # bounds on every valid plan bound them too.
                out["spreadHonouredLpBound"] = round(
                    max([hb] + [b for b in (lp, out.get("spreadLpBound")) if b is not None]), 6)
    out["ilpOptimum"] = None
    placed = sc["pods"] - out["unplaceable"]
    if placed <= args.ilp_max_pods:
        spread, skipped = zone_spread(sc)
        isc, ikeep, im, origin = sc, keep, m, None
        if spread:
            isc, origin = zone_expand(sc, spread)
            im = fit_counts(isc)
            ikeep = prune_dominated(isc, im)
        weighted = weights_apply(sc) and not spread
        out["ilpModels"] = (["resources", "maxPerNode"] + (["zoneSpread"] if spread else [])
                            + (["poolWeights", "poolLimits"] if weighted else []))
        if skipped:
            out["ilpSkippedSpread"] = skipped

        def run(s):
            if weighted:
                return ilp_weighted(s, m, args.time_limit, args.threads)
            return ilp_optimum(s, ikeep, im, args.time_limit, args.threads, spread, origin)
        st, obj, dual, nbins, secs = run(isc)
        if st != "optimal" and isc.get("upperBound") is not None:
            # A wrong upper bound could cut off every solution: retry without.
            sc2 = dict(isc)
            sc2.pop("upperBound")
            if st == "Infeasible":
                st, obj, dual, nbins, secs = run(sc2)
        out["ilpStatus"] = st
        out["ilpBins"] = nbins
        out["ilpSeconds"] = round(secs, 3)
        if st == "optimal":
            out["ilpOptimum"] = round(obj, 6)
        else:
            out["ilpIncumbent"] = None if obj is None else round(obj, 6)
            out["ilpDualBound"] = (None if dual is None or not math.isfinite(dual)
                                   else round(dual, 6))
    opt = out["ilpOptimum"]
    if out.get("ilpModels") and "poolWeights" in out["ilpModels"]:
        # Weights restrict plans: the LP relaxations ignore them.
        opt = None
    if lp is not None and opt is not None and lp > opt + 1e-6 * max(1.0, opt):
        print(f"warning: {out['file']}: pattern LP bound {lp} is above the ILP "
              f"optimum {opt}", file=sys.stderr)
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="scenario JSON files or directories")
    ap.add_argument("--ilp-max-pods", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=120.0,
                    help="seconds per ILP")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--lp-time-limit", type=float, default=60.0,
                    help="seconds of column generation per scenario")
    ap.add_argument("--spread", action="store_true",
                    help="also spreadLpBound (zone spreads, zone prices)")
    args = ap.parse_args()
    # HiGHS prints a banner on the C-level stdout when an instance is made
    # (1.1x): keep stdout for the JSON, send everything else to stderr.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    results = []
    for p in load(args.paths):
        try:
            results.append(bound(p, args))
        except Exception as e:  # one bad scenario must not hide the others
            results.append({"file": os.path.basename(p), "error": repr(e)})
    json.dump(results, out, indent=1)
    out.write("\n")
    out.flush()
    return 0 if highspy is not None else 2


if __name__ == "__main__":
    sys.exit(main())
