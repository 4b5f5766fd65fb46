#!/usr/bin/env python3
"""Generate Flotilla's embedded instance-type catalog (shared/core/data/catalog.json.gz).

Sources (public data, facts only):
  * PyPI `moto` (pinned below): moto/ec2/resources/instance_types.json.gz is real
    DescribeInstanceTypes output; instance_type_offerings/availability-zone/<region>.json.gz
    is real DescribeInstanceTypeOfferings output (LocationType=availability-zone).
  * On-demand Linux prices per hour: the Karpenter AWS provider's generated pricing table
    (aws/karpenter-provider-aws pkg/providers/pricing), us-east-1, generated 2026-07-20 from
    the AWS Pricing API, shipped at ../shared/data/ec2-on-demand-prices-us-east-1.json.
    Regions without their own table are ASSUMED to have us-east-1 prices (see README).

The output keeps the DescribeInstanceTypes shape (top-level "InstanceTypes", trimmed to the
fields Flotilla reads), so the Rust side parses it with the same code as a user's
`aws ec2 describe-instance-types` document. Output is deterministic: sorted keys, gzip mtime 0.

Usage: python3 generate_catalog.py [--moto-dir DIR] [--prices FILE]
           [--prices-for REGION=FILE ...] [--regions us-east-1,us-east-2,us-west-2] [--out FILE]
Without --moto-dir, moto==MOTO_VERSION is installed into a venv under ~/.cache/flotilla.
"""

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import venv

MOTO_VERSION = "5.2.5"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
DEFAULT_PRICES = os.path.join(REPO, "..", "shared", "data", "ec2-on-demand-prices-us-east-1.json")
PRICES_SOURCE = "aws/karpenter-provider-aws pkg/providers/pricing generated table, us-east-1, 2026-07-20"

# Fields of DescribeInstanceTypes that Flotilla reads (see shared/core/src/catalog/describe.rs).
KEEP = {
    "InstanceType": True,
    "CurrentGeneration": True,
    "BareMetal": True,
    "Hypervisor": True,
    "SupportedUsageClasses": True,
    "VCpuInfo": {"DefaultVCpus": True},
    "MemoryInfo": {"SizeInMiB": True},
    "ProcessorInfo": {"SupportedArchitectures": True, "Manufacturer": True},
    "GpuInfo": {"Gpus": True},
    "NeuronInfo": {"NeuronDevices": True},
    "InferenceAcceleratorInfo": {"Accelerators": True},
    "InstanceStorageInfo": {"TotalSizeInGB": True, "NvmeSupport": True},
    "EbsInfo": {"EbsOptimizedInfo": {"BaselineBandwidthInMbps": True}},
    "NetworkInfo": {
        "MaximumNetworkInterfaces": True,
        "Ipv4AddressesPerInterface": True,
        "EncryptionInTransitSupported": True,
        "NetworkPerformance": True,
        "NetworkCards": True,
        "EfaInfo": True,
    },
}


def trim(obj, keep):
    if keep is True:
        return obj
    return {k: trim(obj[k], sub) for k, sub in keep.items() if k in obj}


def moto_dir_from_venv():
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


def load_gz(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moto-dir", help="an installed moto package directory (skips the venv)")
    ap.add_argument("--prices", default=DEFAULT_PRICES, help="us-east-1 on-demand prices JSON")
    ap.add_argument("--prices-for", action="append", default=[], metavar="REGION=FILE",
                    help="a region's own on-demand price table (same shape)")
    ap.add_argument("--regions", default="us-east-1,us-east-2,us-west-2")
    ap.add_argument("--out", default=os.path.join(HERE, "catalog.json.gz"))
    args = ap.parse_args()

    if args.moto_dir:
        moto_dir, moto_version = args.moto_dir, "given: " + args.moto_dir
    else:
        moto_dir, moto_version = moto_dir_from_venv()
    res = os.path.join(moto_dir, "ec2", "resources")
    types = load_gz(os.path.join(res, "instance_types.json.gz"))

    with open(args.prices) as f:
        base_prices = json.load(f)
    region_prices = {}
    for spec in args.prices_for:
        region, _, path = spec.partition("=")
        with open(path) as f:
            region_prices[region] = json.load(f)

    def supported(it):
        archs = it.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
        hvm = "hvm" in it.get("SupportedVirtualizationTypes", []) or it.get("BareMetal", False)
        return hvm and ("x86_64" in archs or "arm64" in archs)

    kept = sorted(n for n, it in types.items() if supported(it) and n in base_prices)
    regions = {}
    for region in args.regions.split(","):
        offers = load_gz(os.path.join(res, "instance_type_offerings", "availability-zone", f"{region}.json.gz"))
        prices = region_prices.get(region, base_prices)
        zones = sorted({o["Location"] for o in offers})
        by_type = {}
        for o in offers:
            if o["InstanceType"] in prices and o["InstanceType"] in kept:
                by_type.setdefault(o["InstanceType"], set()).add(zones.index(o["Location"]))
        regions[region] = {
            "zones": zones,
            "offerings": {t: sorted(z) for t, z in sorted(by_type.items())},
            "prices": {t: prices[t] for t in sorted(by_type)},
            "priceSource": PRICES_SOURCE if region not in region_prices else f"given table for {region}",
            "pricesAssumed": region not in region_prices and region != "us-east-1",
        }

    doc = {
        "_generated": "GENERATED by shared/core/data/generate_catalog.py; do not edit. Refresh: cargo xtask catalog",
        "sources": {
            "instanceTypes": f"PyPI moto {moto_version}: ec2/resources/instance_types.json.gz (DescribeInstanceTypes)",
            "offerings": f"PyPI moto {moto_version}: ec2/resources/instance_type_offerings/availability-zone",
            "onDemandPrices": PRICES_SOURCE,
            "spotPrices": "model: shared/core/src/catalog/pricing.rs (no live prices embedded)",
        },
        "InstanceTypes": [trim(types[n], KEEP) for n in kept],
        "regions": regions,
    }
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    with open(args.out, "wb") as f:
        f.write(buf.getvalue())
    print(f"{len(kept)} instance types, regions {', '.join(regions)}: "
          f"{len(raw)} bytes JSON, {len(buf.getvalue())} bytes gzip -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
