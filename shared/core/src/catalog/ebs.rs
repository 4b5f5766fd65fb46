//! What a node's EBS volumes cost: the EC2NodeClass's `blockDeviceMappings`
//! (or, without them, its AMI family's default volumes, as Karpenter's
//! `amifamily` providers set them) priced per GB-month, plus provisioned
//! IOPS and throughput, from a small embedded table, converted to $/h at
//! [`HOURS_PER_MONTH`] hours per month.
//!
//! **Source:** AWS's public Amazon EBS pricing page
//! (<https://aws.amazon.com/ebs/pricing/>), on-demand volume rates in USD,
//! transcribed for this table on [`RATES_DATE`] (not fetched from the Price
//! List API; cross-checked against published third-party tables). Per
//! region: gp3, gp2, io1/io2 storage, io1/io2 provisioned IOPS (io2's tiers
//! above 32,000 and 64,000 IOPS at 70% and 49% of it, AWS's us-east-1
//! ratios), st1, sc1 and standard (magnetic; its per-I/O charge is not
//! modelled). gp3 IOPS above 3,000 and throughput above 125 MB/s are priced
//! at 1/16 and 1/2 of the region's gp3 GB-month rate (AWS's us-east-1
//! figures: $0.08, $0.005, $0.040).
//!
//! **Regions without a row** (the embedded catalog has 30 regions, this
//! table the 15 listed in [`TABLE`]) use us-east-1's rates and say so
//! ([`RegionRates::assumed`]), like the embedded instance prices do.

use crate::model::{AmiFamily, NodeClass};

/// Hours per month of AWS's monthly rates (365 × 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;
/// When the table was transcribed.
pub const RATES_DATE: &str = "2026-11-26";
/// Where the rates come from.
pub const RATES_SOURCE: &str = "AWS Amazon EBS pricing (aws.amazon.com/ebs/pricing), on-demand";
/// The region whose rates stand in for a region without a row.
pub const FALLBACK_REGION: &str = "us-east-1";

/// gp3's baseline, included in the GB-month rate.
pub const GP3_FREE_IOPS: u64 = 3000;
/// gp3's baseline throughput (MB/s), included in the GB-month rate.
pub const GP3_FREE_THROUGHPUT: u64 = 125;
/// The IOPS an io1/io2 volume is priced at when it states none (EC2's
/// minimum).
pub const IO_MIN_IOPS: u64 = 100;
/// Default size of a mapping without `volumeSize` (GiB), as the launch
/// stage and Karpenter's `DefaultEBS` use.
pub const DEFAULT_VOLUME_GIB: u64 = 20;

/// EBS volume types (`spec.blockDeviceMappings[].ebs.volumeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VolumeType {
    Gp3,
    Gp2,
    Io1,
    Io2,
    St1,
    Sc1,
    Standard,
}

impl VolumeType {
    pub const NAMES: [&'static str; 7] = ["gp3", "gp2", "io1", "io2", "st1", "sc1", "standard"];

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "gp3" => VolumeType::Gp3,
            "gp2" => VolumeType::Gp2,
            "io1" => VolumeType::Io1,
            "io2" => VolumeType::Io2,
            "st1" => VolumeType::St1,
            "sc1" => VolumeType::Sc1,
            "standard" => VolumeType::Standard,
            _ => return None,
        })
    }
}

/// One EBS volume of a node, as priced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbsVolume {
    pub device_name: String,
    /// GiB (rounded up).
    pub size_gib: u64,
    pub volume_type: VolumeType,
    /// Provisioned IOPS (gp3, io1, io2), as written.
    pub iops: Option<u64>,
    /// Provisioned throughput in MB/s (gp3), as written.
    pub throughput: Option<u64>,
}

impl EbsVolume {
    /// A gp3 volume of `size_gib` at the baseline IOPS and throughput.
    pub fn gp3(device_name: &str, size_gib: u64) -> Self {
        EbsVolume {
            device_name: device_name.into(),
            size_gib,
            volume_type: VolumeType::Gp3,
            iops: None,
            throughput: None,
        }
    }
}

/// One region's rates, USD per month.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Per GB-month: gp3, gp2, io1 and io2, st1, sc1, standard.
    pub gp3: f64,
    pub gp2: f64,
    pub io: f64,
    pub st1: f64,
    pub sc1: f64,
    pub standard: f64,
    /// io1 (and io2 up to 32,000) per provisioned IOPS-month.
    pub io_iops: f64,
}

const fn rates(gp3: f64, gp2: f64, io: f64, io_iops: f64, st1: f64, sc1: f64, std: f64) -> Rates {
    Rates {
        gp3,
        gp2,
        io,
        st1,
        sc1,
        standard: std,
        io_iops,
    }
}

const US: Rates = rates(0.08, 0.10, 0.125, 0.065, 0.045, 0.015, 0.05);

/// The embedded table, sorted by region.
pub const TABLE: [(&str, Rates); 15] = [
    (
        "ap-northeast-1",
        rates(0.096, 0.12, 0.142, 0.074, 0.054, 0.018, 0.08),
    ),
    (
        "ap-northeast-2",
        rates(0.0912, 0.114, 0.1278, 0.0666, 0.051, 0.0174, 0.08),
    ),
    (
        "ap-south-1",
        rates(0.0912, 0.114, 0.131, 0.068, 0.051, 0.0174, 0.08),
    ),
    (
        "ap-southeast-1",
        rates(0.096, 0.12, 0.138, 0.072, 0.054, 0.018, 0.08),
    ),
    (
        "ap-southeast-2",
        rates(0.096, 0.12, 0.138, 0.072, 0.054, 0.018, 0.08),
    ),
    (
        "ca-central-1",
        rates(0.088, 0.11, 0.138, 0.072, 0.05, 0.0168, 0.055),
    ),
    (
        "eu-central-1",
        rates(0.0952, 0.119, 0.149, 0.078, 0.054, 0.018, 0.059),
    ),
    (
        "eu-north-1",
        rates(0.0836, 0.1045, 0.1311, 0.0684, 0.0475, 0.01596, 0.0523),
    ),
    (
        "eu-west-1",
        rates(0.088, 0.11, 0.138, 0.072, 0.05, 0.0168, 0.055),
    ),
    (
        "eu-west-2",
        rates(0.0928, 0.116, 0.145, 0.076, 0.053, 0.0174, 0.058),
    ),
    (
        "eu-west-3",
        rates(0.0928, 0.116, 0.145, 0.076, 0.053, 0.0174, 0.058),
    ),
    ("us-east-1", US),
    ("us-east-2", US),
    (
        "us-west-1",
        rates(0.096, 0.12, 0.138, 0.072, 0.054, 0.018, 0.08),
    ),
    ("us-west-2", US),
];

/// A region's rates and whether they are its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegionRates {
    pub rates: Rates,
    /// True when the region has no row and uses [`FALLBACK_REGION`]'s.
    pub assumed: bool,
}

/// The rates of `region`: its row, else us-east-1's (`assumed`).
pub fn region_rates(region: &str) -> RegionRates {
    match TABLE.binary_search_by(|(r, _)| (*r).cmp(region)) {
        Ok(i) => RegionRates {
            rates: TABLE[i].1,
            assumed: false,
        },
        Err(_) => RegionRates {
            rates: US,
            assumed: true,
        },
    }
}

/// What `v` costs per month at `r`: storage, plus gp3 IOPS above 3,000 and
/// throughput above 125 MB/s, plus io1/io2 provisioned IOPS (io2 tiered).
/// Sizes and IOPS come from user input: computed in `f64`, never overflows.
pub fn monthly(r: &Rates, v: &EbsVolume) -> f64 {
    let gb = v.size_gib as f64;
    let iops = |min: u64| v.iops.unwrap_or(min) as f64;
    match v.volume_type {
        VolumeType::Gp3 => {
            let extra_iops = v.iops.unwrap_or(0).saturating_sub(GP3_FREE_IOPS) as f64;
            let extra_tput = v
                .throughput
                .unwrap_or(0)
                .saturating_sub(GP3_FREE_THROUGHPUT) as f64;
            gb * r.gp3 + extra_iops * r.gp3 / 16.0 + extra_tput * r.gp3 / 2.0
        }
        VolumeType::Gp2 => gb * r.gp2,
        VolumeType::Io1 => gb * r.io + iops(IO_MIN_IOPS) * r.io_iops,
        VolumeType::Io2 => gb * r.io + io2_iops_monthly(r, iops(IO_MIN_IOPS)),
        VolumeType::St1 => gb * r.st1,
        VolumeType::Sc1 => gb * r.sc1,
        VolumeType::Standard => gb * r.standard,
    }
}

/// io2 IOPS: up to 32,000 at the io1 rate, 32,001-64,000 at 70% of it,
/// above 64,000 at 49%.
fn io2_iops_monthly(r: &Rates, iops: f64) -> f64 {
    let tier1 = iops.min(32_000.0);
    let tier2 = (iops - 32_000.0).clamp(0.0, 32_000.0);
    let tier3 = (iops - 64_000.0).max(0.0);
    r.io_iops * (tier1 + 0.7 * tier2 + 0.49 * tier3)
}

/// What `volumes` cost per hour at `r`.
pub fn hourly(r: &Rates, volumes: &[EbsVolume]) -> f64 {
    volumes.iter().map(|v| monthly(r, v)).sum::<f64>() / HOURS_PER_MONTH
}

/// The volumes Karpenter gives a node of `family` when its EC2NodeClass has
/// no `blockDeviceMappings` (`pkg/providers/amifamily`): AL2 / AL2023 20 GiB
/// gp3 at `/dev/xvda`; Bottlerocket a 4 GiB root and a 20 GiB data volume;
/// Windows 50 GiB at `/dev/sda1`. A Custom family leaves it to the AMI
/// (Karpenter sets none); priced as the launch stage's default, 20 GiB gp3.
pub fn default_volumes(family: &AmiFamily) -> Vec<EbsVolume> {
    match family {
        AmiFamily::Bottlerocket => vec![
            EbsVolume::gp3("/dev/xvda", 4),
            EbsVolume::gp3("/dev/xvdb", DEFAULT_VOLUME_GIB),
        ],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => vec![EbsVolume::gp3("/dev/sda1", 50)],
        AmiFamily::AL2023 | AmiFamily::AL2 | AmiFamily::Custom => {
            vec![EbsVolume::gp3("/dev/xvda", DEFAULT_VOLUME_GIB)]
        }
    }
}

/// The volumes of a node of `node_class`: its `blockDeviceMappings`, else
/// its family's defaults; a NodePool without a (known) node class gets
/// AL2023's, the default family.
pub fn node_class_volumes(node_class: Option<&NodeClass>) -> Vec<EbsVolume> {
    match node_class {
        Some(nc) => match &nc.volumes {
            Some(v) => v.clone(),
            None => default_volumes(&nc.ami_family),
        },
        None => default_volumes(&AmiFamily::AL2023),
    }
}

/// $/h of the volumes of one node of `node_class` in `region`.
pub fn node_class_hourly(region: &str, node_class: Option<&NodeClass>) -> f64 {
    hourly(&region_rates(region).rates, &node_class_volumes(node_class))
}

/// What a node costs per hour: its instance offering plus its volumes. Every
/// comparison of node prices (scheduler, repack, disruption) goes through
/// this.
pub fn node_hourly(offering: f64, volumes: f64) -> f64 {
    offering + volumes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(t: VolumeType, gib: u64, iops: Option<u64>, tput: Option<u64>) -> EbsVolume {
        EbsVolume {
            device_name: "/dev/xvda".into(),
            size_gib: gib,
            volume_type: t,
            iops,
            throughput: tput,
        }
    }

    #[test]
    fn table_is_sorted_and_covers_us_west_2() {
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0));
        let catalog = crate::catalog::embedded::embedded_regions();
        for (r, _) in TABLE {
            assert!(
                catalog.iter().any(|c| c == r),
                "{r} is not a catalog region"
            );
        }
        assert!(!region_rates("us-west-2").assumed);
    }

    #[test]
    fn monthly_prices_per_type_and_extra() {
        use VolumeType::*;
        let us = region_rates("us-east-1").rates;
        // (volume, expected USD/month at us-east-1)
        let cases = [
            (vol(Gp3, 20, None, None), 1.6),
            (vol(Gp3, 100, Some(3000), Some(125)), 8.0),
            (vol(Gp3, 100, Some(6000), None), 8.0 + 3000.0 * 0.005),
            (vol(Gp3, 100, None, Some(250)), 8.0 + 125.0 * 0.04),
            (vol(Gp3, 100, Some(1000), Some(100)), 8.0),
            (vol(Gp2, 100, Some(300), None), 10.0),
            (vol(Io1, 100, Some(1000), None), 12.5 + 65.0),
            (vol(Io1, 100, None, None), 12.5 + 6.5),
            (vol(Io2, 100, Some(1000), None), 12.5 + 65.0),
            (
                vol(Io2, 100, Some(70_000), None),
                12.5 + 0.065 * (32_000.0 + 0.7 * 32_000.0 + 0.49 * 6_000.0),
            ),
            (vol(St1, 500, None, None), 22.5),
            (vol(Sc1, 500, None, None), 7.5),
            (vol(Standard, 10, None, None), 0.5),
        ];
        for (v, want) in cases {
            let got = monthly(&us, &v);
            assert!((got - want).abs() < 1e-9, "{v:?}: {got} != {want}");
        }
    }

    #[test]
    fn regional_rates_differ_and_missing_regions_fall_back() {
        let v = [vol(VolumeType::Gp3, 20, None, None)];
        let fra = region_rates("eu-central-1");
        assert!(!fra.assumed);
        assert!((hourly(&fra.rates, &v) - 20.0 * 0.0952 / 730.0).abs() < 1e-12);
        let cpt = region_rates("af-south-1");
        assert!(cpt.assumed, "no row: us-east-1's rates, flagged");
        assert_eq!(cpt.rates, region_rates(FALLBACK_REGION).rates);
        assert!(region_rates("mars-1").assumed);
    }

    #[test]
    fn defaults_per_ami_family() {
        let gib = |f: AmiFamily| -> Vec<(String, u64)> {
            default_volumes(&f)
                .into_iter()
                .map(|v| (v.device_name, v.size_gib))
                .collect()
        };
        let xvda20 = vec![("/dev/xvda".to_string(), 20)];
        assert_eq!(gib(AmiFamily::AL2023), xvda20);
        assert_eq!(gib(AmiFamily::AL2), xvda20);
        assert_eq!(gib(AmiFamily::Custom), xvda20);
        assert_eq!(
            gib(AmiFamily::Bottlerocket),
            [("/dev/xvda".to_string(), 4), ("/dev/xvdb".to_string(), 20)]
        );
        assert_eq!(gib(AmiFamily::Windows2022), [("/dev/sda1".to_string(), 50)]);
        for f in [
            AmiFamily::AL2023,
            AmiFamily::Bottlerocket,
            AmiFamily::Windows2019,
        ] {
            assert!(default_volumes(&f)
                .iter()
                .all(|v| v.volume_type == VolumeType::Gp3 && v.iops.is_none()));
        }
        // No node class: AL2023's root, $1.60 a month in us-west-2.
        let h = node_class_hourly("us-west-2", None);
        assert!((h - 1.6 / 730.0).abs() < 1e-12, "{h}");
    }

    #[test]
    fn huge_inputs_do_not_overflow() {
        let us = region_rates("us-east-1").rates;
        let v = vol(VolumeType::Io2, u64::MAX, Some(u64::MAX), Some(u64::MAX));
        assert!(monthly(&us, &v).is_finite());
        let v = vol(VolumeType::Gp3, u64::MAX, Some(u64::MAX), Some(u64::MAX));
        assert!(monthly(&us, &v).is_finite());
    }
}
