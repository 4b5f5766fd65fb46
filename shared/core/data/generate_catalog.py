#!/usr/bin/env python3
"""Generate Flotilla's embedded instance-type catalog (shared/core/data/catalog.json.gz).

Sources (public data, facts only):
  * PyPI `moto` (pinned below): moto/ec2/resources/instance_types.json.gz is real
    DescribeInstanceTypes output (a dict keyed by type); instance_type_offerings/
    availability-zone/<region>.json.gz is real DescribeInstanceTypeOfferings output
    (a list of {InstanceType, Location}).
  * On-demand Linux prices per hour: on-demand-prices.json.gz beside this script (region ->
    type -> USD/h, with its source commit and date), extracted by extract_prices.py from the
    Karpenter AWS provider's generated pricing table (aws/karpenter-provider-aws
    pkg/providers/pricing, from the AWS Pricing API). That table has us-east-1 only; a region
    without its own table (there or via --prices-for) is ASSUMED to have us-east-1 prices, and
    the catalog says so per region (pricesAssumed, priceSource).

Output (gzip'd JSON, sorted keys, gzip mtime 0: identical inputs give identical bytes):
  _generated      marker: this file is generated, do not edit
  meta            sources, moto version, price table and date, the price assumption
  instanceTypes   one object per type, in the shape of Rust's `InstanceTypeInfo` (camelCase),
                  fields equal to their default (0, false, "", null) omitted
  regions         per region: zones (sorted), offerings (type -> bit mask over zones: bit i
                  set = offered in zones[i]), prices (type -> on-demand USD/h; absent when
                  pricesFrom names the region whose prices it uses), pricesFrom, priceSource,
                  pricesAssumed
  describeSample  raw DescribeInstanceTypes entries for a few types, so a Rust test checks
                  that shared/core/src/catalog/describe.rs maps the raw AWS shape exactly as
                  `to_info` below does (the two mappings must stay in step)

Usage: python3 generate_catalog.py [--moto-dir DIR] [--prices FILE]
           [--prices-for REGION=FILE ...] [--regions all|R1,R2,...] [--out FILE]
Without --moto-dir, moto==MOTO_VERSION is installed into a venv at
~/.cache/flotilla/venv-catalog.
"""

import argparse
import gzip
import io
import json
import os
import re
import subprocess
import sys
import venv

MOTO_VERSION = "5.2.5"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PRICES = os.path.join(HERE, "on-demand-prices.json.gz")
BASE_REGION = "us-east-1"
# Commercial (aws partition) regions only: GovCloud, China and ISO regions are left out.
NON_COMMERCIAL = re.compile(r"^(us-gov-|cn-|us-iso)")
# Types whose raw DescribeInstanceTypes entry is embedded as `describeSample` (see above).
SAMPLE = ["m5.large", "m6g.large", "m5d.large", "p4d.24xlarge", "p5.48xlarge", "inf1.xlarge",
          "inf2.xlarge", "trn1.32xlarge", "g6.xlarge", "t3.micro", "c4.large", "dl2q.24xlarge"]
ASSUMPTION = ("A region without a price table of its own is ASSUMED to cost the same as "
              "us-east-1 (true for most types in us-east-2 and us-west-2, not in most other "
              "regions, which cost 5-30% more). The deployed functions price from the AWS Price "
              "List API instead (cached), and fall back to this table. Spot prices are not data: "
              "they are modelled in shared/core/src/catalog/pricing.rs.")


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


def write_json_gz(doc, path):
    """Writes `doc` as compact, key-sorted JSON, gzip'd with mtime 0, so that
    identical inputs give a byte-identical file. Returns (JSON bytes, gzip bytes)."""
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return len(raw), len(buf.getvalue())


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


def load_price_file(path):
    """on-demand-prices.json.gz (extract_prices.py): ({region: {type: price}}, source dict)."""
    doc = load_gz(path)
    return doc["regions"], doc["source"]


def own_tables(args):
    """{region: (prices, description)} from the price file and --prices-for overrides."""
    tables, source = load_price_file(args.prices)
    date = source.get("generatedAt", "unknown")[:10]
    desc = (f"{source['repository']} {source['path']} at {source['commit'][:12]} "
            f"(AWS Pricing API, generated {date})")
    own = {r: (p, desc) for r, p in tables.items()}
    for spec in args.prices_for:
        region, sep, path = spec.partition("=")
        if not sep or not region or not path:
            sys.exit(f"--prices-for expects REGION=FILE, got {spec!r}")
        with open(path) as f:
            own[region] = (json.load(f), f"given table for {region}: {os.path.basename(path)}")
    if BASE_REGION not in own:
        sys.exit(f"no {BASE_REGION} price table: every assumed region needs it")
    return own, source, desc


def region_list(arg, offerings_dir):
    if arg != "all":
        return sorted({r.strip() for r in arg.split(",") if r.strip()})
    names = (f[: -len(".json.gz")] for f in os.listdir(offerings_dir) if f.endswith(".json.gz"))
    return sorted(n for n in names if not NON_COMMERCIAL.match(n))


def region_entry(region, offers, candidates, own):
    """One region: zones, offerings as zone bit masks, prices (or pricesFrom) and their source."""
    has_own = region in own
    prices, desc = own[region] if has_own else own[BASE_REGION]
    zones = sorted({o["Location"] for o in offers})
    index = {z: i for i, z in enumerate(zones)}
    masks = {}
    for o in offers:
        t = o["InstanceType"]
        if t in candidates and t in prices:
            masks[t] = masks.get(t, 0) | (1 << index[o["Location"]])
    entry = {
        "zones": zones,
        "offerings": dict(sorted(masks.items())),
        "priceSource": desc if has_own else f"{desc}, {BASE_REGION}'s prices ASSUMED",
        "pricesAssumed": not has_own,
    }
    if has_own:
        entry["prices"] = {t: prices[t] for t in sorted(masks)}
    else:
        # The types this region offers are priced from BASE_REGION's entry,
        # which therefore lists them too (see main).
        entry["pricesFrom"] = BASE_REGION
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moto-dir", help="an installed moto package directory (skips the venv)")
    ap.add_argument("--prices", default=DEFAULT_PRICES,
                    help="on-demand price file from extract_prices.py (default: %(default)s)")
    ap.add_argument("--prices-for", action="append", default=[], metavar="REGION=FILE",
                    help="a region's own on-demand price table {type: USD/h} (an AWS Pricing API "
                         "export or a newer Karpenter table); repeatable; overrides --prices")
    ap.add_argument("--regions", default="all",
                    help="comma-separated, or `all`: every commercial region moto has offerings for "
                         "(default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(HERE, "catalog.json.gz"))
    args = ap.parse_args()

    if args.moto_dir:
        moto_dir, moto_version = args.moto_dir, moto_version_of(args.moto_dir)
    else:
        moto_dir, moto_version = moto_from_venv()
    res = os.path.join(moto_dir, "ec2", "resources")
    offerings_dir = os.path.join(res, "instance_type_offerings", "availability-zone")
    types = load_gz(os.path.join(res, "instance_types.json.gz"))
    own, source, desc = own_tables(args)

    candidates = {n for n, it in types.items() if supported(n, it)}
    regions = {}
    for region in region_list(args.regions, offerings_dir):
        offers = load_gz(os.path.join(offerings_dir, f"{region}.json.gz"))
        regions[region] = region_entry(region, offers, candidates, own)
    # The base region's price list covers every type an assuming region uses
    # (the base region may not offer them all itself).
    base = regions.get(BASE_REGION)
    assuming = [r for r in regions.values() if r.get("pricesFrom") == BASE_REGION]
    if assuming:
        if base is None:
            sys.exit(f"regions assuming {BASE_REGION}'s prices need {BASE_REGION} in --regions")
        used = set(base["prices"]).union(*(set(r["offerings"]) for r in assuming))
        base_prices = own[BASE_REGION][0]
        base["prices"] = {t: base_prices[t] for t in sorted(used)}
    # Types with a price somewhere are kept even when none of the regions offers
    # them: a describe-instance-types document (Catalog::from_infos) may name them.
    priced = set().union(*(set(p) for p, _ in own.values()))
    kept = sorted(n for n in candidates if n in priced)

    doc = {
        "_generated": "GENERATED by shared/core/data/generate_catalog.py; do not edit. Refresh: cargo xtask catalog",
        "meta": {
            "motoVersion": moto_version,
            "pricesDate": source.get("generatedAt", "unknown")[:10],
            "pricesCommit": source.get("commit", ""),
            "assumption": ASSUMPTION,
            "sources": {
                "instanceTypes": f"PyPI moto {moto_version}: ec2/resources/instance_types.json.gz (DescribeInstanceTypes)",
                "offerings": f"PyPI moto {moto_version}: ec2/resources/instance_type_offerings/availability-zone (DescribeInstanceTypeOfferings)",
                "onDemandPrices": desc,
                "spotPrices": "model: shared/core/src/catalog/pricing.rs (no live prices embedded)",
            },
        },
        "instanceTypes": [to_info(types[n]) for n in kept],
        "regions": regions,
        "describeSample": {"InstanceTypes": [types[n] for n in SAMPLE if n in types]},
    }
    raw, packed = write_json_gz(doc, args.out)
    own_regions = sorted(r for r, e in regions.items() if not e["pricesAssumed"])
    print(f"{len(kept)} instance types, {len(regions)} regions ({', '.join(regions)}; own prices: "
          f"{', '.join(own_regions)}): {raw} bytes JSON, {packed} bytes gzip -> {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
