#!/usr/bin/env python3
"""Generate Flotilla's embedded instance-type catalog (shared/core/data/catalog.json.gz).

Sources (public data, facts only):
  * PyPI `moto` (pinned below): moto/ec2/resources/instance_types.json.gz is real
    DescribeInstanceTypes output (a dict keyed by type); instance_type_offerings/
    availability-zone/<region>.json.gz is real DescribeInstanceTypeOfferings output
    (a list of {InstanceType, Location}).
  * On-demand Linux prices per hour: the Karpenter AWS provider's generated pricing table
    (aws/karpenter-provider-aws pkg/providers/pricing), us-east-1, generated 2026-07-20 from
    the AWS Pricing API, shipped at /work/shared/data/ec2-on-demand-prices-us-east-1.json.
    Regions without their own table (--prices-for) are ASSUMED to have us-east-1 prices.

Output (gzip'd JSON, sorted keys, gzip mtime 0: identical inputs give identical bytes):
  _generated      marker: this file is generated, do not edit
  meta            sources, moto version, price table and date, the price assumption
  instanceTypes   one object per type, in the shape of Rust's `InstanceTypeInfo` (camelCase),
                  fields equal to their default (0, false, "", null) omitted
  regions         per region: zones (sorted), offerings (type -> indices into zones),
                  prices (type -> on-demand USD/h), priceSource, pricesAssumed
  describeSample  raw DescribeInstanceTypes entries for a few types, so a Rust test checks
                  that shared/core/src/catalog/describe.rs maps the raw AWS shape exactly as
                  `to_info` below does (the two mappings must stay in step)

Usage: python3 generate_catalog.py [--moto-dir DIR] [--prices FILE] [--prices-date DATE]
           [--prices-for REGION=FILE ...] [--regions us-east-1,us-east-2,us-west-2] [--out FILE]
Without --moto-dir, moto==MOTO_VERSION is installed into a venv at
~/.cache/flotilla/venv-catalog.
"""

import argparse
import gzip
import io
import json
import math
import os
import re
import subprocess
import sys
import venv

MOTO_VERSION = "5.2.5"
HERE = os.path.dirname(os.path.abspath(__file__))
# shared/core/data -> ../../../../shared/data (the reference data next to the checkout).
DEFAULT_PRICES = os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "..", "shared", "data", "ec2-on-demand-prices-us-east-1.json"))
DEFAULT_PRICES_DATE = "2026-07-20"
PRICES_SOURCE = "aws/karpenter-provider-aws pkg/providers/pricing generated table (AWS Pricing API), us-east-1"
DEFAULT_REGIONS = "us-east-1,us-east-2,us-west-2"
# Types whose raw DescribeInstanceTypes entry is embedded as `describeSample` (see above).
SAMPLE = ["m5.large", "m6g.large", "m5d.large", "p4d.24xlarge", "p5.48xlarge", "inf1.xlarge",
          "inf2.xlarge", "trn1.32xlarge", "g6.xlarge", "t3.micro", "c4.large", "dl2q.24xlarge"]
ASSUMPTION = ("Only us-east-1 has a real price table; every other region without --prices-for "
              "is ASSUMED to cost the same as us-east-1 (true for most, not all, types in "
              "us-east-2 and us-west-2). Spot prices are not data: they are modelled in "
              "shared/core/src/catalog/pricing.rs.")


def moto_from_venv():
    base = os.path.join(os.path.expanduser("~"), ".cache", "flotilla", "venv-catalog")
    py = os.path.join(base, "bin", "python")
    if not os.path.exists(py):
        venv.create(base, with_pip=True)
    probe = [py, "-c", "import moto, os; print(moto.__version__, os.path.dirname(moto.__file__))"]
    out = subprocess.run(probe, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.startswith(MOTO_VERSION + " "):
        subprocess.run([py, "-m", "pip", "install", "--quiet", f"moto=={MOTO_VERSION}"], check=True)
        out = subprocess.run(probe, capture_output=True, text=True, check=True)
    version, path = out.stdout.split()
    return path, version


def moto_version_of(moto_dir):
    try:
        with open(os.path.join(moto_dir, "__init__.py")) as f:
            m = re.search(r'__version__\s*=\s*"([^"]+)"', f.read())
            return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def load_gz(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


# ---- DescribeInstanceTypes -> InstanceTypeInfo (mirrors shared/core/src/catalog/describe.rs) ----

def kebab(s):
    """Karpenter's lowerKabobCase: `RTX PRO 4500` -> `rtx-pro-4500`."""
    return (s or "").replace(" ", "-").lower()


def network_performance_mbps(s):
    """'Up to 10 Gigabit' / '25 Gigabit' / '100 Megabit' -> Mbps (fallback when no NetworkCards)."""
    words = (s or "").split()
    for a, b in zip(words, words[1:]):
        m = re.match(r"^\D*([0-9]+(?:\.[0-9]+)?)$", a)
        if m:
            return int(float(m.group(1)) * (1000 if b.startswith("Gigabit") or b == "G" else 1))
    return 0


def architecture(it):
    archs = it.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
    if "arm64" in archs:
        return "arm64"
    if "x86_64" in archs:
        return "amd64"
    return None


def to_info(it):
    ni = it.get("NetworkInfo", {})
    cards = ni.get("NetworkCards") or []
    default_card = ni.get("DefaultNetworkCardIndex", 0)
    card = next((c for c in cards if c.get("NetworkCardIndex", 0) == default_card), cards[0] if cards else {})
    # The VPC CNI only uses the default card: ENIs of that card (Karpenter's ENILimitedPods).
    enis = card.get("MaximumNetworkInterfaces", ni.get("MaximumNetworkInterfaces", 0))
    gbps = [c["BaselineBandwidthInGbps"] for c in cards if "BaselineBandwidthInGbps" in c]
    if gbps:
        bandwidth = round(sum(gbps) * 1000)
    else:
        bandwidth = network_performance_mbps(ni.get("NetworkPerformance"))
    gpu = None
    gpus = it.get("GpuInfo", {}).get("Gpus") or []
    if gpus:
        g = gpus[0]
        gpu = {
            "name": kebab(g.get("Name")),
            "manufacturer": kebab(g.get("Manufacturer")),
            "count": sum(x.get("Count", 0) for x in gpus if x.get("Manufacturer") == g.get("Manufacturer")),
            "memoryMib": g.get("MemoryInfo", {}).get("SizeInMiB", 0),
        }
    devices = cores = 0
    if "NeuronInfo" in it:
        for d in it["NeuronInfo"].get("NeuronDevices") or []:
            devices += d.get("Count", 0)
            cores += d.get("Count", 0) * d.get("CoreInfo", {}).get("Count", 0)
    else:
        for a in it.get("InferenceAcceleratorInfo", {}).get("Accelerators") or []:
            if a.get("Manufacturer") == "AWS":
                devices += a.get("Count", 0)
    storage = it.get("InstanceStorageInfo", {})
    nvme = storage.get("NvmeSupport", "")
    usage = it.get("SupportedUsageClasses", ["on-demand"])
    info = {
        "name": it["InstanceType"],
        "architecture": architecture(it),
        "vcpu": it["VCpuInfo"]["DefaultVCpus"],
        "memoryMib": it["MemoryInfo"]["SizeInMiB"],
        "hypervisor": it.get("Hypervisor", ""),
        "bareMetal": it.get("BareMetal", False),
        "currentGeneration": it.get("CurrentGeneration", False),
        "encryptionInTransit": ni.get("EncryptionInTransitSupported", False),
        "cpuManufacturer": kebab(it.get("ProcessorInfo", {}).get("Manufacturer")),
        "gpu": gpu,
        "neuronDevices": devices,
        "neuronCores": cores,
        "localNvmeGib": storage.get("TotalSizeInGB", 0) if nvme and nvme != "unsupported" else 0,
        "networkBandwidthMbps": bandwidth,
        "ebsBandwidthMbps": it.get("EbsInfo", {}).get("EbsOptimizedInfo", {}).get("BaselineBandwidthInMbps", 0),
        "maxNetworkInterfaces": enis,
        "ipv4PerInterface": ni.get("Ipv4AddressesPerInterface", 0),
        "efaInterfaces": ni.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
        # Trunk-interface (security groups for pods) limits are not in DescribeInstanceTypes.
        "podEni": 0,
        "supportsSpot": "spot" in usage,
        "supportsOnDemand": "on-demand" in usage,
    }
    # Compact: drop defaults (the Rust side fills them in with serde defaults).
    return {k: v for k, v in info.items() if v not in (0, False, "", None) or k in ("name",)}


def supported(name, it):
    if name.startswith("mac"):
        return False
    hvm = "hvm" in it.get("SupportedVirtualizationTypes", []) or it.get("BareMetal", False)
    return hvm and architecture(it) is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moto-dir", help="an installed moto package directory (skips the venv)")
    ap.add_argument("--prices", default=DEFAULT_PRICES,
                    help="base on-demand price table {type: USD/h} (us-east-1; default: %(default)s)")
    ap.add_argument("--prices-date", default=DEFAULT_PRICES_DATE, help="date the --prices table was generated")
    ap.add_argument("--prices-for", action="append", default=[], metavar="REGION=FILE",
                    help="a region's own on-demand price table, same shape (AWS Pricing API export or a "
                         "newer Karpenter table); repeatable")
    ap.add_argument("--regions", default=DEFAULT_REGIONS, help="comma-separated (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(HERE, "catalog.json.gz"))
    args = ap.parse_args()

    if args.moto_dir:
        moto_dir, moto_version = args.moto_dir, moto_version_of(args.moto_dir)
    else:
        moto_dir, moto_version = moto_from_venv()
    res = os.path.join(moto_dir, "ec2", "resources")
    types = load_gz(os.path.join(res, "instance_types.json.gz"))

    with open(args.prices) as f:
        base_prices = json.load(f)
    region_prices = {}
    for spec in args.prices_for:
        region, sep, path = spec.partition("=")
        if not sep or not region or not path:
            sys.exit(f"--prices-for expects REGION=FILE, got {spec!r}")
        with open(path) as f:
            region_prices[region] = json.load(f)

    regions_list = sorted({r.strip() for r in args.regions.split(",") if r.strip()})
    candidates = {n for n, it in types.items() if supported(n, it)}
    regions = {}
    for region in regions_list:
        offers = load_gz(os.path.join(res, "instance_type_offerings", "availability-zone", f"{region}.json.gz"))
        prices = region_prices.get(region, base_prices)
        zones = sorted({o["Location"] for o in offers})
        index = {z: i for i, z in enumerate(zones)}
        by_type = {}
        for o in offers:
            t = o["InstanceType"]
            if t in candidates and t in prices:
                by_type.setdefault(t, set()).add(index[o["Location"]])
        own = region in region_prices
        regions[region] = {
            "zones": zones,
            "offerings": {t: sorted(z) for t, z in sorted(by_type.items())},
            "prices": {t: prices[t] for t in sorted(by_type)},
            "priceSource": (f"given table for {region}: {os.path.basename(spec_path(args, region))}"
                            if own else f"{PRICES_SOURCE}, {args.prices_date}"),
            "pricesAssumed": not own and region != "us-east-1",
        }
    # Types with a price somewhere are kept even when none of the regions offers
    # them: a describe-instance-types document (Catalog::from_infos) may name them.
    priced = set(base_prices).union(*(set(p) for p in region_prices.values()))
    kept = sorted(n for n in candidates if n in priced)

    doc = {
        "_generated": "GENERATED by shared/core/data/generate_catalog.py; do not edit. Refresh: cargo xtask catalog",
        "meta": {
            "motoVersion": moto_version,
            "pricesDate": args.prices_date,
            "assumption": ASSUMPTION,
            "sources": {
                "instanceTypes": f"PyPI moto {moto_version}: ec2/resources/instance_types.json.gz (DescribeInstanceTypes)",
                "offerings": f"PyPI moto {moto_version}: ec2/resources/instance_type_offerings/availability-zone (DescribeInstanceTypeOfferings)",
                "onDemandPrices": f"{PRICES_SOURCE}, generated {args.prices_date}",
                "spotPrices": "model: shared/core/src/catalog/pricing.rs (no live prices embedded)",
            },
        },
        "instanceTypes": [to_info(types[n]) for n in kept],
        "regions": regions,
        "describeSample": {"InstanceTypes": [types[n] for n in SAMPLE if n in types]},
    }
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    with open(args.out, "wb") as f:
        f.write(buf.getvalue())
    print(f"{len(kept)} instance types, regions {', '.join(regions)}: "
          f"{len(raw)} bytes JSON, {len(buf.getvalue())} bytes gzip -> {args.out}", file=sys.stderr)


def spec_path(args, region):
    for spec in args.prices_for:
        r, _, path = spec.partition("=")
        if r == region:
            return path
    return ""


if __name__ == "__main__":
    main()
