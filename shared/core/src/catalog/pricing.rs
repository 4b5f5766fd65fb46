//! The spot price model used until live prices are read
//! (DescribeSpotPriceHistory, in the launch stage).
//!
//! spot = on-demand × (category factor) × (zone jitter), where the factor is
//! a typical long-run spot discount for the instance category and the jitter
//! is a deterministic ±6% per (type, zone) from an FNV-1a hash, so zones of
//! one type differ the way real spot pools do, reproducibly. This is a
//! model, not data: plans price spot offerings with it and say so.
//!
//! | category | factor | rationale |
//! |---|---|---|
//! | `t` (burstable) | 0.32 | deepest, most stable pools |
//! | `m`, `c`, `a` (general purpose, compute) | 0.38 | typical 60-65% discount |
//! | `r`, `x`, `z`, `u` (memory) | 0.40 | |
//! | `i`, `d`, `h`, `im`, `is` (storage) | 0.42 | |
//! | `p`, `g`, `gr`, `inf`, `trn`, `dl`, `f`, `vt` (accelerated) | 0.50 | scarce, shallower discount |
//! | anything else | 0.45 | |
//!
//! Bounds: every modelled spot price is within
//! `on-demand × factor × [0.94, 1.06]` (rounded to 1e-5 USD), hence at most
//! 53% of on-demand: spot is always cheaper than on-demand. The hash is
//! FNV-1a 64 over the bytes of `"{type}/{zone}"`, not std's randomised
//! hasher, so prices are identical across processes, machines and releases.

/// Typical spot price as a fraction of on-demand, by instance category.
pub fn category_factor(category: &str) -> f64 {
    match category {
        // Burstable.
        "t" => 0.32,
        // General purpose, compute optimised.
        "m" | "c" | "a" => 0.38,
        // Memory optimised, high memory.
        "r" | "x" | "z" | "u" => 0.40,
        // Storage optimised.
        "i" | "d" | "h" | "im" | "is" => 0.42,
        // Accelerated: GPU, Inferentia, Trainium, Gaudi, FPGA, video.
        "p" | "g" | "gr" | "inf" | "trn" | "dl" | "f" | "vt" => 0.50,
        _ => 0.45,
    }
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Deterministic per-(type, zone) multiplier in [0.94, 1.06].
pub fn zone_jitter(instance_type: &str, zone: &str) -> f64 {
    let h = fnv1a(&format!("{instance_type}/{zone}"));
    0.94 + (h % 1201) as f64 / 10_000.0
}

/// Modelled spot price, rounded to 1/100000 USD like EC2's price history.
pub fn spot_price(instance_type: &str, category: &str, zone: &str, on_demand: f64) -> f64 {
    let p = on_demand * category_factor(category) * zone_jitter(instance_type, zone);
    (p * 100_000.0).round() / 100_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_bounded() {
        let a = spot_price("m5.large", "m", "us-west-2a", 0.096);
        assert_eq!(a, spot_price("m5.large", "m", "us-west-2a", 0.096));
        assert!(a > 0.096 * 0.38 * 0.94 - 1e-5 && a < 0.096 * 0.38 * 1.06 + 1e-5);
        // Zones differ, reproducibly.
        let zones: Vec<f64> = ["a", "b", "c", "d"]
            .iter()
            .map(|z| spot_price("m5.large", "m", &format!("us-west-2{z}"), 0.096))
            .collect();
        assert!(zones.windows(2).any(|w| w[0] != w[1]));
        for z in ["x", "y"] {
            let j = zone_jitter("p5.48xlarge", z);
            assert!((0.94..=1.06).contains(&j));
        }
    }

    #[test]
    fn hash_is_pinned_fnv1a() {
        // Reference values of FNV-1a 64: a change here changes every plan.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            zone_jitter("m5.large", "us-west-2a"),
            0.94 + (fnv1a("m5.large/us-west-2a") % 1201) as f64 / 10_000.0
        );
    }

    #[test]
    fn spot_always_below_on_demand_and_positive() {
        for cat in ["t", "m", "c", "r", "i", "p", "g", "inf", "trn", "hpc", "zz"] {
            assert!(category_factor(cat) * 1.06 < 1.0, "{cat}");
            for z in ["us-east-1a", "us-east-1b", "us-east-1f", "eu-west-1c"] {
                let t = format!("{cat}9.large");
                let j = zone_jitter(&t, z);
                assert!((0.94..=1.06).contains(&j), "{t} {z} {j}");
                let s = spot_price(&t, cat, z, 0.0042);
                assert!(s > 0.0 && s < 0.0042, "{t} {z} {s}");
            }
        }
    }

    #[test]
    fn accelerated_types_discount_less() {
        assert!(category_factor("p") > category_factor("m"));
    }
}
