#!/usr/bin/env python3
"""Pending pods as a user hands them to `flotilla plan`: one JSON `List` of
`Pod` objects, two NodePools and an EC2NodeClass, for timing the whole CLI
(input parsing, scheduling, writing the plan).

    python3 user_pods.py --pods 10000 [--seed 1] [--random] > pods.json
    flotilla plan -f pods.json -o json > plan.json

Default: issue 20's first mix (40 apps, twelve request sizes; 10% zone
spreads whose selector also matches the app's pods without one, 5% arm64,
5% zone pins, 3% hostname anti-affinity groups, 2% GPU pods on a tainted
NodePool; the default NodePool held to three zones). `--random` draws
each pod's requests from a continuous range and each constraint
independently (several may combine on one pod), so no size or
combination is one the scheduler was tuned for. Deterministic per seed.
"""

import argparse
import json
import random
import sys

ZONES = ["us-west-2a", "us-west-2b", "us-west-2c"]
SIZES = [
    ("100m", "128Mi"), ("250m", "256Mi"), ("500m", "512Mi"), ("250m", "1Gi"),
    ("1", "1Gi"), ("1", "2Gi"), ("2", "2Gi"), ("2", "4Gi"), ("500m", "2Gi"),
    ("4", "8Gi"), ("1500m", "3Gi"), ("750m", "1536Mi"),
]


def pools():
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    return [
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
         "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": [
             {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ZONES},
             {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
         ]}}}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
         "spec": {"template": {"spec": {"nodeClassRef": ref,
             "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
             "requirements": [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}],
         }}}},
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
         "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
                  "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                  "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}},
    ]


def zone_spread(app):
    return [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]


def anti_affinity(group):
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"group": group}}}]}}


def gpu(spec):
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    res = spec["containers"][0]["resources"]
    res["limits"] = {"nvidia.com/gpu": "1"}
    res["requests"]["nvidia.com/gpu"] = "1"


def issue_mix(rnd, app, groups):
    """One pod of issue 20's first mix: at most one constraint."""
    cpu, mem = rnd.choice(SIZES)
    spec = {"containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
    labels = {"app": app}
    r = rnd.random()
    if r < 0.10:
        spec["topologySpreadConstraints"] = zone_spread(app)
    elif r < 0.15:
        spec["nodeSelector"] = {"kubernetes.io/arch": "arm64"}
    elif r < 0.20:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": rnd.choice(ZONES)}
    elif r < 0.23:
        group = rnd.choice(groups)
        labels["group"] = group
        spec["affinity"] = anti_affinity(group)
    elif r < 0.25:
        gpu(spec)
    return labels, spec


def random_mix(rnd, app, groups):
    """One pod with random requests and independently drawn constraints."""
    cpu = f"{rnd.randint(1, 80) * 50}m"
    mem = f"{rnd.randint(1, 128) * 64}Mi"
    spec = {"containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
    labels = {"app": app}
    selector = {}
    if rnd.random() < 0.15:
        spec["topologySpreadConstraints"] = zone_spread(app)
    if rnd.random() < 0.10:
        selector["kubernetes.io/arch"] = rnd.choice(["arm64", "amd64"])
    if rnd.random() < 0.08:
        selector["topology.kubernetes.io/zone"] = rnd.choice(ZONES)
    if rnd.random() < 0.08:
        selector["karpenter.sh/capacity-type"] = rnd.choice(["spot", "on-demand"])
    if selector:
        spec["nodeSelector"] = selector
    if rnd.random() < 0.04:
        group = rnd.choice(groups)
        labels["group"] = group
        spec["affinity"] = anti_affinity(group)
    elif rnd.random() < 0.02:
        gpu(spec)
    return labels, spec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--random", action="store_true", help="random requests and constraint combinations")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    apps = [f"app-{i}" for i in range(40)]
    groups = [f"anti-{i}" for i in range(max(1, args.pods * 3 // 500))]
    draw = random_mix if args.random else issue_mix
    items = pools()
    for i in range(args.pods):
        labels, spec = draw(rnd, rnd.choice(apps), groups)
        items.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"p-{i}", "namespace": "default", "labels": labels},
                      "spec": spec, "status": {"phase": "Pending"}})
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main()
