#!/usr/bin/env python3
"""Self-check of bound.py's pattern LP (column generation) on random small
scenarios: its value must equal the LP over *all* packing patterns
(enumerated), lie between the compact LP bound and the exact ILP optimum, and
its time-limited (Lagrangian) bound must never exceed the LP optimum. And
on random scenarios with zone prices and zone spreads, the spread-aware
bound (spreadLpBound) must never exceed the exact optimum that honours
the spreads (the ILP); and the bound over plans that honour the spreads
a plan honours (spreadHonouredLpBound: zone spreads of both modes, some
whose selector counts other classes, hostname spreads, a random
`planSpread`) never exceeds the exact optimum over those plans.

Scenarios: 1-6 types (some count-limited, some of those free), 1-3
resources, 1-4 classes with restricted type lists and maxPerNode, plus
copies of anti-affinity classes (which bound.py merges).

    $HOME/.cache/flotilla/venv/bin/python shared/bench/test_bound.py [--cases 300] [--seed 1]
        [--spread-cases 150] [--honoured-cases 150]

Exit status 1 on any mismatch (printed with the scenario).
"""

import argparse
import copy
import itertools
import json
import os
import random
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bound as B  # noqa: E402


def random_scenario(rnd):
    nres = rnd.choice([1, 2, 3])
    types = []
    for t in range(rnd.randint(1, 6)):
        cap = [rnd.randint(4, 16) for _ in range(nres)]
        limited = rnd.random() < 0.35
        free = limited and rnd.random() < 0.5
        price = 0.0 if free else round(rnd.uniform(0.5, 3.0) * sum(cap) / nres / 8, 3)
        types.append({"name": f"t{t}", "pool": None, "capacity": cap, "price": price,
                      "maxCount": rnd.randint(1, 3) if limited else None})
    classes = []
    for _ in range(rnd.randint(1, 4)):
        req = [rnd.randint(0 if r else 1, 6) for r in range(nres)]
        allowed = [t for t in range(len(types)) if rnd.random() < 0.7]
        classes.append({"count": rnd.randint(1, 7), "requests": req,
                        "types": allowed or [rnd.randrange(len(types))],
                        "maxPerNode": 1 if rnd.random() < 0.2 else None})
    for c in list(classes):  # anti-affinity groups of one shape
        if rnd.random() < 0.3:
            c["maxPerNode"] = 1
            classes += [copy.deepcopy(c) for _ in range(rnd.randint(1, 3))]
    return {"resources": [f"r{i}" for i in range(nres)], "types": types,
            "classes": classes, "pods": sum(c["count"] for c in classes),
            "unplaceable": 0}


def spread_scenario(rnd):
    """A random scenario with zone prices and zone-spread groups of one
    class each (DoNotSchedule, maxSkew 1-2, 2-3 eligible zones)."""
    sc = random_scenario(rnd)
    zones = ["a", "b", "c"]
    for t in sc["types"]:
        t["zonePrices"] = {z: round(t["price"] * rnd.uniform(0.6, 1.4), 4) for z in zones}
        t["price"] = min(t["zonePrices"].values())
    sc["zones"] = zones
    groups = []
    for c in sc["classes"]:
        c["spread"], c["spreadCounted"] = [], []
        if rnd.random() < 0.6:
            gid = len(groups)
            groups.append({"id": gid, "topologyKey": B.ZONE_KEY, "maxSkew": rnd.choice([1, 1, 2]),
                           "whenUnsatisfiable": "DoNotSchedule", "minDomains": None,
                           "existing": {}})
            eligible = sorted(rnd.sample(zones, rnd.choice([2, 3])))
            c["spread"] = [{"group": gid, "eligibleZones": eligible}]
            c["spreadCounted"] = [gid]
    sc["spreadGroups"] = groups
    return sc


def check_spread(rnd, cases):
    """spreadLpBound never exceeds the exact optimum that honours the
    spreads (the ILP); counted as tighter when it is above lpBound."""
    counts = {"ok": 0, "tighter": 0, "failed": 0}
    for i in range(cases):
        sc = spread_scenario(rnd)
        spread, _ = B.zone_spread(sc)
        if not spread:
            continue
        isc, origin = B.zone_expand(sc, spread)
        im = B.fit_counts(isc)
        ikeep = B.prune_dominated(isc, im)
        ist, ilp, _, _, _ = B.ilp_optimum(isc, ikeep, im, 60.0, 1, spread, origin)
        if ist != "optimal":
            continue
        m = B.fit_counts(sc)
        lp = B.pattern_lp_bound(sc, B.prune_dominated(sc, m), m, 60.0)["lpBound"]
        sb = B.spread_lp_bound(sc, 60.0)["spreadLpBound"]
        if sb is not None and sb > ilp + 1e-6 * max(1, ilp):
            counts["failed"] += 1
            print(f"spread case {i}: spreadLpBound {sb} > ILP optimum {ilp}\n  {json.dumps(sc)}")
            continue
        counts["ok"] += 1
        if sb is not None and lp is not None and sb > lp + 1e-6:
            counts["tighter"] += 1
    return counts


def honoured_scenario(rnd):
    """A random scenario with zone prices and spread groups of every kind
    spreadHonouredLpBound takes: zone spreads DoNotSchedule or
    ScheduleAnyway, some whose selector also counts 1-2 other classes (then
    over all three zones), hostname ScheduleAnyway spreads; and a
    `planSpread` that honours each group (balanced zone counts, maxSkew per
    node) or, one time in five, does not."""
    sc = random_scenario(rnd)
    zones = ["a", "b", "c"]
    for t in sc["types"]:
        t["zonePrices"] = {z: round(t["price"] * rnd.uniform(0.6, 1.4), 4) for z in zones}
        t["price"] = min(t["zonePrices"].values())
    sc["zones"] = zones
    classes = sc["classes"]
    for c in classes:
        c["spread"], c["spreadCounted"] = [], []
    groups, plan, honoured = [], [], set()
    for ci, c in enumerate(classes):
        if rnd.random() >= 0.6:
            continue
        gid = len(groups)
        kind = rnd.choice(["zone-dns", "zone-sa", "hostname"])
        skew = rnd.choice([1, 1, 2])
        others = [o for o in range(len(classes)) if o != ci]
        union = (kind != "hostname" and others and rnd.random() < 0.4)
        counted = [ci] + (rnd.sample(others, min(len(others), rnd.choice([1, 2])))
                          if union else [])
        eligible = zones if union or kind == "hostname" else sorted(
            rnd.sample(zones, rnd.choice([2, 3])))
        key = "kubernetes.io/hostname" if kind == "hostname" else B.ZONE_KEY
        groups.append({"id": gid, "topologyKey": key, "maxSkew": skew,
                       "whenUnsatisfiable": "DoNotSchedule" if kind == "zone-dns"
                       else "ScheduleAnyway", "minDomains": None, "existing": {}})
        c["spread"].append({"group": gid, "eligibleZones": eligible})
        for o in counted:
            classes[o]["spreadCounted"].append(gid)
        n = sum(classes[o]["count"] for o in counted)
        balanced = rnd.random() >= 0.2
        counts = {z: n // len(eligible) + (i < n % len(eligible))
                  for i, z in enumerate(eligible)}
        if not balanced:
            counts = {eligible[0]: n}
        most = skew if balanced else skew + 1
        # Honoured: zone counts within maxSkew over the eligible zones (all
        # have types here), at most maxSkew per node for hostname.
        if (most <= skew if kind == "hostname"
                else max(counts.get(z, 0) for z in eligible)
                - min(counts.get(z, 0) for z in eligible) <= skew):
            honoured.add(gid)
        plan.append({"group": gid, "zoneCounts": counts, "undetermined": 0,
                     "maxPerNode": most, "unplaced": 0})
    sc["spreadGroups"] = groups
    sc["planSpread"] = plan
    return sc, honoured


def check_honoured(rnd, cases):
    """spreadHonouredLpBound never exceeds the exact optimum over plans
    that honour the groups it holds (the ILP with their zone counts over
    the same zones, maxSkew per node for hostname groups, DoNotSchedule
    owners in their eligible zones), and holds no group the plan does not
    honour."""
    counts = {"ok": 0, "tighter": 0, "failed": 0, "held": 0, "unions": 0}
    for i in range(cases):
        sc, honoured = honoured_scenario(rnd)
        _, _, held, _ = B.honoured_constraints(sc)
        if not held:
            continue
        problems = [f"holds group {h['group']} the plan does not honour"
                    for h in held if h["group"] not in honoured]
        modelled, _ = B.zone_spread(sc)
        isc, origin = B.zone_expand(sc, modelled)
        isc = dict(isc, classes=[dict(c) for c in isc["classes"]])
        groups = {g["id"]: g for g in sc["spreadGroups"]}
        ispread = []
        for h in held:
            g = groups[h["group"]]
            counted = [ci for ci, c in enumerate(isc["classes"])
                       if g["id"] in c["spreadCounted"]]
            if h["key"] == "hostname":
                for ci in counted:
                    mp = isc["classes"][ci].get("maxPerNode")
                    isc["classes"][ci]["maxPerNode"] = (g["maxSkew"] if mp is None
                                                        else min(mp, g["maxSkew"]))
            else:
                ispread.append({"group": g["id"], "classes": counted, "eligible": h["zones"],
                                "maxSkew": g["maxSkew"], "minDomains": None,
                                "existing": {}})
                counts["unions"] += len(counted) > 1
        im = B.fit_counts(isc)
        ikeep = B.prune_dominated(isc, im)
        ist, ilp, _, _, _ = B.ilp_optimum(isc, ikeep, im, 60.0, 1, ispread, origin)
        if ist != "optimal":
            continue
        hb = B.spread_honoured_lp_bound(sc, 60.0)["spreadHonouredLpBound"]
        if hb is not None and hb > ilp + 1e-6 * max(1, ilp):
            problems.append(f"spreadHonouredLpBound {hb} > ILP optimum {ilp}")
        if problems:
            counts["failed"] += 1
            print(f"honoured case {i}: {'; '.join(problems)}\n  {json.dumps(sc)}")
            continue
        counts["ok"] += 1
        counts["held"] += len(held)
        sb = B.spread_lp_bound(sc, 60.0)["spreadLpBound"]
        m = B.fit_counts(sc)
        lp = B.pattern_lp_bound(sc, B.prune_dominated(sc, m), m, 60.0)["lpBound"]
        if hb is not None and hb > max(x for x in (lp, sb, 0.0) if x is not None) + 1e-6:
            counts["tighter"] += 1
    return counts


def enumerated_lp(sc, keep, m):
    """The master LP with every pattern of every kept type as a column."""
    types, classes = sc["types"], sc["classes"]
    cols = []
    for t in keep:
        cl = [ci for ci, c in enumerate(classes) if t in c["types"] and m[ci, t] > 0]
        cap = types[t]["capacity"]
        for ks in itertools.product(*[range(m[ci, t] + 1) for ci in cl]):
            if any(ks) and all(
                    sum(classes[ci]["requests"][r] * k for ci, k in zip(cl, ks)) <= cap[r]
                    for r in range(len(cap))):
                full = [0] * len(classes)
                for ci, k in zip(cl, ks):
                    full[ci] = k
                cols.append((t, full))
    rows = B.Rows()
    for ci, c in enumerate(classes):
        coefs = [(j, k[ci]) for j, (_, k) in enumerate(cols) if k[ci] > 0]
        if not coefs:
            return "infeasible", None
        rows.add(coefs, c["count"], B.INF)
    for t in keep:
        if types[t]["maxCount"] is not None:
            coefs = [(j, 1.0) for j, (tt, _) in enumerate(cols) if tt == t]
            if coefs:
                rows.add(coefs, -B.INF, types[t]["maxCount"])
    cost = [types[t]["price"] for t, _ in cols]
    status, obj, _, _ = B.solve(cost, [0.0] * len(cols), [B.INF] * len(cols), rows)
    return status, obj


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--spread-cases", type=int, default=150)
    ap.add_argument("--honoured-cases", type=int, default=150)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    counts = {"ok": 0, "infeasible": 0, "failed": 0}
    for i in range(args.cases):
        sc = random_scenario(rnd)
        m = B.fit_counts(sc)
        keep = B.prune_dominated(sc, m)
        cg = B.pattern_lp_bound(sc, keep, m, 60.0)
        early = B.pattern_lp_bound(sc, keep, m, 0.0)  # Lagrangian bounds only
        st, direct = enumerated_lp(sc, keep, m)
        _, compact = B.lp_bound(sc, keep, m)
        ist, ilp, _, _, _ = B.ilp_optimum(sc, keep, m, 60.0, 1)
        lp, tol = cg["lpBound"], 1e-6
        problems = []
        if st != "optimal":
            counts["infeasible"] += 1
            if cg["lpStatus"] == "optimal":
                problems.append(f"enumerated LP {st} but column generation optimal")
        else:
            if cg["lpStatus"] != "optimal" or abs(lp - direct) > tol * max(1, direct):
                problems.append(f"pattern LP {cg} != enumerated {direct}")
            if compact is not None and lp is not None and lp < compact - tol:
                problems.append(f"pattern LP {lp} < compact {compact}")
            if early["lpBound"] is not None and early["lpBound"] > direct + tol:
                problems.append(f"Lagrangian {early['lpBound']} > LP {direct}")
        if ist == "optimal" and lp is not None and lp > ilp + tol:
            problems.append(f"pattern LP {lp} > ILP optimum {ilp}")
        if problems:
            counts["failed"] += 1
            print(f"case {i}: {'; '.join(problems)}\n  {json.dumps(sc)}")
        elif st == "optimal":
            counts["ok"] += 1
    print(json.dumps(counts))
    spread = check_spread(rnd, args.spread_cases)
    print(json.dumps({"spread": spread}))
    honoured = check_honoured(rnd, args.honoured_cases)
    print(json.dumps({"honoured": honoured}))
    return 1 if counts["failed"] or spread["failed"] or honoured["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
