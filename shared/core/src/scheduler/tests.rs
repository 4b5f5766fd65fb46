//! Scheduling semantics, one test per rule, over a small synthetic catalog.

use std::collections::BTreeMap;

use super::*;
use crate::catalog::{CatalogEntry, InstanceTypeInfo, Offering, UNLIMITED};
use crate::model::*;
use crate::plan::NodeClaimPlan;
use crate::quantity::Quantity;
use crate::requirements::Operator;
use crate::requirements::Requirement;
use crate::resources::Resources;

const ZONES: [&str; 3] = ["test-1a", "test-1b", "test-1c"];

fn info(name: &str, arch: &str, vcpu: u32, mem_mib: u64, gpus: u32) -> InstanceTypeInfo {
    InstanceTypeInfo {
        max_network_interfaces: 4,
        ipv4_per_interface: 15,
        ..InstanceTypeInfo::synthetic(name, arch, vcpu, mem_mib, gpus)
    }
}

fn catalog() -> Catalog {
    let types = [
        (info("c5.large", "amd64", 2, 4096, 0), 0.085),
        (info("g4.8xlarge", "amd64", 32, 131072, 4), 4.0),
        (info("m5.2xlarge", "amd64", 8, 32768, 0), 0.384),
        (info("m5.large", "amd64", 2, 8192, 0), 0.096),
        (info("m5.xlarge", "amd64", 4, 16384, 0), 0.192),
        (info("m6g.large", "arm64", 2, 8192, 0), 0.077),
    ];
    let entries = types
        .into_iter()
        .map(|(info, od)| {
            let mut offerings = vec![];
            for z in ZONES {
                offerings.push(Offering {
                    zone: z.into(),
                    capacity_type: CapacityType::OnDemand,
                    price: od,
                    available: UNLIMITED,
                    reservation: None,
                });
                offerings.push(Offering {
                    zone: z.into(),
                    capacity_type: CapacityType::Spot,
                    price: od * 0.4,
                    available: UNLIMITED,
                    reservation: None,
                });
            }
            CatalogEntry { info, offerings }
        })
        .collect();
    Catalog {
        region: "test-1".into(),
        zones: ZONES.iter().map(|z| z.to_string()).collect(),
        entries,
        source: "test".into(),
    }
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
    Pod {
        name: name.into(),
        ..Pod::from(PodTemplate {
            namespace: "default".into(),
            requests: Resources::new()
                .with("cpu", q(cpu))
                .with("memory", q(mem))
                .with("pods", q("1")),
            ..PodTemplate::default()
        })
    }
}

fn labeled(mut p: Pod, k: &str, v: &str) -> Pod {
    p.labels.insert(k.into(), v.into());
    p
}

fn req(k: &str, op: Operator, v: &[&str]) -> Requirement {
    Requirement::new(k, op, v).unwrap()
}

fn reqs(rs: Vec<Requirement>) -> Requirements {
    Requirements::from_iter_reqs(rs)
}

fn pool(name: &str, rs: Vec<Requirement>) -> NodePool {
    NodePool::new(name, reqs(rs))
}

fn default_pool() -> NodePool {
    pool(
        "default",
        vec![req(
            labels::CAPACITY_TYPE,
            Operator::In,
            &["spot", "on-demand"],
        )],
    )
}

fn state(pods: Vec<Pod>, pools: Vec<NodePool>) -> ClusterState {
    ClusterState {
        pending_pods: pods,
        node_pools: pools,
        ..Default::default()
    }
}

fn plan(s: &ClusterState) -> Plan {
    schedule(s, &catalog(), &SchedulerOptions::default())
}

fn selector(k: &str, v: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [(k.to_string(), v.to_string())].into(),
        match_expressions: vec![],
    }
}

fn spread(
    key: &str,
    skew: u32,
    when: WhenUnsatisfiable,
    sel: LabelSelector,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: skew,
        topology_key: key.into(),
        when_unsatisfiable: when,
        label_selector: sel,
        min_domains: None,
        node_affinity_policy: InclusionPolicy::Honor,
        node_taints_policy: InclusionPolicy::Ignore,
    }
}

fn term(key: &str, sel: LabelSelector) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: sel,
        namespaces: vec![],
        all_namespaces: false,
        topology_key: key.into(),
    }
}

fn claim_of<'p>(p: &'p Plan, pod: &str) -> &'p NodeClaimPlan {
    let key = format!("default/{pod}");
    p.node_claims
        .iter()
        .find(|c| c.pods.contains(&key))
        .unwrap_or_else(|| panic!("{pod} not on a NodeClaim: {p:#?}"))
}

#[test]
fn picks_cheapest_type_that_fits_and_prefers_spot() {
    let p = plan(&state(vec![pod("a", "3", "1Gi")], vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 1);
    let c = &p.node_claims[0];
    // 3 CPUs need the 4-vCPU type at least; the 2-vCPU types are excluded.
    assert!(
        !c.instance_types.iter().any(|t| t.ends_with(".large")),
        "{:?}",
        c.instance_types
    );
    assert_eq!(c.instance_types[0], "m5.xlarge");
    assert_eq!(c.price.instance_type, "m5.xlarge");
    assert_eq!(c.price.capacity_type, CapacityType::Spot);
    assert!((c.price.min - 0.192 * 0.4).abs() < 1e-9);
    assert_eq!(p.summary.scheduled, 1);
}

#[test]
fn on_demand_only_pool_uses_on_demand_price() {
    let np = pool(
        "default",
        vec![req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])],
    );
    let p = plan(&state(vec![pod("a", "1", "1Gi")], vec![np]));
    assert_eq!(p.node_claims[0].price.capacity_type, CapacityType::OnDemand);
    assert_eq!(
        p.node_claims[0].capacity_types,
        vec![CapacityType::OnDemand]
    );
}

/// `p` with a node selector holding it to on-demand capacity.
fn on_demand_only(mut p: Pod) -> Pod {
    p.node_selector = reqs(vec![req(
        labels::CAPACITY_TYPE,
        Operator::In,
        &["on-demand"],
    )]);
    p
}

/// A pod held to on-demand that joins a NodeClaim of spot-able pods holds
/// the whole node to on-demand: the cost rule prices that (the node's
/// step from spot to on-demand), not the types' spot prices.
#[test]
fn an_on_demand_pod_does_not_hold_a_spot_node_to_on_demand() {
    let small = on_demand_only(pod("small", "100m", "128Mi"));
    let p = plan(&state(
        vec![pod("big", "3", "1Gi"), small],
        vec![default_pool()],
    ));
    assert_eq!(p.node_claims.len(), 2, "{:#?}", p.node_claims);
    let big = claim_of(&p, "big");
    assert_eq!(big.price.capacity_type, CapacityType::Spot);
    assert_eq!(big.price.instance_type, "m5.xlarge");
    let small = claim_of(&p, "small");
    assert_eq!(small.price.capacity_type, CapacityType::OnDemand);
    assert_eq!(small.capacity_types, vec![CapacityType::OnDemand]);
}

/// Pod `p`'s requirements as a trial on a NodeClaim of the first
/// NodePool reads them: its node requirements (under `r`), the zones and
/// capacity types they allow (`OfferBits::of_pod`), and the types.
fn trial_view(
    run: &Run,
    p: PodIdx,
    r: &Relaxation,
) -> (
    Requirements,
    Option<costrule::OfferBits>,
    std::rc::Rc<TypeSet>,
) {
    let pod_reqs = pod_view::node_requirements(&run.pods[p], &run.volume[p], r);
    let offers = costrule::OfferBits::of_pod(&pod_reqs, &run.pools[0].zones);
    let types = run.compatible_set(index::PoolIdx::new(0), &pod_reqs);
    (pod_reqs, offers, types)
}

/// A random node selector: on-demand or spot (a quarter each), one zone
/// (one in `zone_one_in`), an architecture (one in `arch_one_in`).
fn random_selector(
    draw: &mut impl FnMut(u64) -> u64,
    zone_one_in: u64,
    arch_one_in: u64,
) -> Requirements {
    let mut selector = vec![];
    match draw(4) {
        0 => selector.push(req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])),
        1 => selector.push(req(labels::CAPACITY_TYPE, Operator::In, &["spot"])),
        _ => {}
    }
    if draw(zone_one_in) == 0 {
        let zone = ZONES[draw(ZONES.len() as u64) as usize];
        selector.push(req(labels::ZONE, Operator::In, &[zone]));
    }
    if draw(arch_one_in) == 0 {
        let arch = ["amd64", "arm64"][draw(2) as usize];
        selector.push(req(labels::ARCH, Operator::In, &[arch]));
    }
    reqs(selector)
}

/// The cost rule asked before a trial (`may_join_memo`, which prices the
/// grown NodeClaim at the zones and capacity types the pod's own
/// requirements allow, and grows it only to types they allow) bounds the
/// rule after the trial from below: its
/// step is no more than the fit's (`joins_cheaply`, at what the fit
/// narrows), so it never refuses a pod the trial would admit; and it is
/// dearer than the step at the NodeClaim's own offerings for the pods
/// that hold a spot NodeClaim to on-demand, which it now refuses before
/// any trial (and those held to an architecture the NodeClaim's cheapest
/// types are not). The least the NodeClaim's growth costs (`growth_refuses`,
/// the same for pods of every size) refuses only where both do, by a
/// step no dearer than theirs. Random pods, some held to a capacity type
/// or a zone, join one growing NodeClaim.
#[test]
fn the_cost_rule_before_a_trial_never_refuses_what_the_trial_admits() {
    let mut draw = test_draws(23);
    let (mut dearer, mut by_types, mut compared, mut floored) = (0, 0, 0, 0);
    let mut held = 0;
    for case in 0..40 {
        let pods: Vec<Pod> = (0..12)
            .map(|i| {
                let cpu = format!("{}m", 100 + 100 * draw(12));
                let mem = format!("{}Mi", 128 + 128 * draw(16));
                let mut p = pod(&format!("c{case}-p{i}"), &cpu, &mem);
                p.node_selector = random_selector(&mut draw, 3, 4);
                p
            })
            .collect();
        let s = state(pods, vec![default_pool()]);
        with_run(&s, &catalog(), |run| {
            let r = Relaxation::default();
            assert!(run.add(PodIdx::new(0), &r).is_ok());
            let c = index::ClaimIdx::new(0);
            for p in PodIdx::all(s.pending_pods.len()).skip(1) {
                let (pod_reqs, offers, types) = trial_view(run, p, &r);
                let groups = run.active_topology(p, &r);
                let solo = run.solo_price(p, &pod_reqs);
                let own = run.join_answer(c, p, &pod_reqs, None, None);
                let priced = run.may_join_memo(c, p, &pod_reqs, offers, Some(&types));
                if let (Some(own), Some(priced)) = (step_of(own), step_of(priced)) {
                    dearer += usize::from(own < priced);
                    by_types += usize::from(own < priced && offers.is_none());
                }
                let fit = run.try_claim(c, p, &pod_reqs, &groups);
                if let (Ok(fit), Some(before)) = (&fit, run.claims[c].types.first()) {
                    let after = fit.types.first().expect("a fit has types");
                    let narrowed = fit.requirements.narrowing();
                    let exact = run.claim_step(c, before, (after, Some(narrowed)));
                    if let Some(priced) = step_of(priced) {
                        assert!(priced <= exact + 1e-12, "case {case}, pod {p:?}");
                        compared += 1;
                    }
                }
                let admits = fit.is_ok_and(|fit| run.joins_cheaply(c, p, &pod_reqs, &fit, solo));
                assert!(priced.admits(solo) || !admits, "case {case}, pod {p:?}");
                let compact = run.pods[p].requests.compact_request();
                if let Some(floor) = run.growth_refuses(c, p, compact, solo) {
                    assert!(!admits && !priced.admits(solo), "case {case}, pod {p:?}");
                    let Some(floor) = step_of(floor) else {
                        panic!("a growth floor refuses by a step: {floor:?}");
                    };
                    // Or `Never`: the pod fits none of the NodeClaim's types.
                    if let Some(priced) = step_of(priced) {
                        assert!(
                            floor <= priced,
                            "case {case}, pod {p:?}: {floor} > {priced}"
                        );
                    }
                    floored += 1;
                }
                if let Some(floor) = run.held_growth_refuses(c, p, (compact, offers), solo) {
                    assert!(!admits && !priced.admits(solo), "case {case}, pod {p:?}");
                    let (floor, priced) = (step_of(floor), step_of(priced));
                    if let (Some(floor), Some(priced)) = (floor, priced) {
                        assert!(
                            floor <= priced,
                            "case {case}, pod {p:?}: {floor} > {priced}"
                        );
                    }
                    held += 1;
                }
                let _ = run.add(p, &r);
            }
        });
    }
    assert!(compared > 100, "{compared} steps compared");
    assert!(dearer > 20, "{dearer} steps priced dearer before a trial");
    assert!(floored > 20, "{floored} refused by the growth floor");
    assert!(
        held > 2,
        "{held} held to on-demand refused by the growth floor"
    );
    assert!(
        by_types > 5,
        "{by_types} steps priced dearer by the pod's types"
    );
}

/// A walk passes a NodeClaim the pod's own requirements rule out (its
/// zones, capacity types or types meet none of the NodeClaim's) without
/// asking the cost rule: each such NodeClaim's trial refuses the pod.
/// Random pods, some held to a zone, a capacity type or an architecture,
/// against the NodeClaims random pods made.
#[test]
fn a_nodeclaim_the_pods_requirements_rule_out_refuses_its_trial() {
    let mut draw = test_draws(31);
    let pods: Vec<Pod> = (0..80)
        .map(|i| {
            let cpu = format!("{}m", 100 + 100 * draw(12));
            let mut p = pod(&format!("p{i}"), &cpu, "512Mi");
            p.node_selector = random_selector(&mut draw, 2, 3);
            p
        })
        .collect();
    let s = state(pods, vec![default_pool()]);
    let (mut ruled_out, mut tried) = (0, 0);
    with_run(&s, &catalog(), |run| {
        let r = Relaxation::default();
        for p in PodIdx::all(40) {
            let _ = run.add(p, &r);
        }
        for p in PodIdx::all(80).skip(40) {
            let (pod_reqs, offers, types) = trial_view(run, p, &r);
            let groups = run.active_topology(p, &r);
            for c in index::ClaimIdx::all(run.claims.len()) {
                tried += 1;
                if run.requirements_refuse(c, offers, Some(&types)) {
                    ruled_out += 1;
                    let trial = run.try_claim(c, p, &pod_reqs, &groups);
                    assert!(trial.is_err(), "pod {p:?} on {c:?}");
                }
            }
        }
    });
    assert!(ruled_out > tried / 4, "{ruled_out} of {tried} ruled out");
}

/// Past the 64th zone a zone has no bit: a pod held to such a zone has
/// no zone bits, and a NodeClaim of any zone still takes it.
#[test]
fn a_pod_held_to_a_zone_past_the_64th_is_not_ruled_out() {
    let mut cat = catalog();
    let zones: Vec<String> = (0..70).map(|z| format!("test-1-z{z:02}")).collect();
    for entry in &mut cat.entries {
        let base: Vec<Offering> = entry.offerings.iter().take(2).cloned().collect();
        entry.offerings = (zones.iter())
            .flat_map(|z| {
                base.iter().map(|o| Offering {
                    zone: z.clone(),
                    ..o.clone()
                })
            })
            .collect();
    }
    cat.zones = zones;
    let mut held = pod("held", "100m", "128Mi");
    held.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &["test-1-z69"])]);
    let s = state(
        vec![pod("free", "100m", "128Mi"), held],
        vec![default_pool()],
    );
    with_run(&s, &cat, |run| {
        let r = Relaxation::default();
        assert!(run.add(PodIdx::new(0), &r).is_ok());
        let (c, p) = (index::ClaimIdx::new(0), PodIdx::new(1));
        let (pod_reqs, offers, types) = trial_view(run, p, &r);
        assert!(!run.requirements_refuse(c, offers, Some(&types)));
        let groups = run.active_topology(p, &r);
        assert!(run.try_claim(c, p, &pod_reqs, &groups).is_ok());
    });
}

/// The test catalog with two smaller GPU types beside `g4.8xlarge`.
fn gpu_catalog() -> Catalog {
    let mut cat = catalog();
    let base = cat.entries[0].offerings.clone();
    for (info, od) in [
        (info("g4.xlarge", "amd64", 4, 16384, 1), 0.5),
        (info("g4.2xlarge", "amd64", 8, 32768, 1), 0.75),
    ] {
        let offerings = (base.iter())
            .map(|o| Offering {
                price: match o.capacity_type {
                    CapacityType::OnDemand => od,
                    _ => od * 0.4,
                },
                ..o.clone()
            })
            .collect();
        cat.entries.push(CatalogEntry { info, offerings });
    }
    cat
}

/// The step of a cost-rule answer that is one.
fn step_of(a: nodeclaim::JoinAnswer) -> Option<f64> {
    match a {
        nodeclaim::JoinAnswer::Step { step, .. } => Some(step),
        _ => None,
    }
}

/// A growth floor's refusal (`floor`) is one the cost rule makes (`rule`,
/// at solo price `solo`), by a step no dearer than the rule's.
fn assert_refused_as_by_the_rule(
    floor: nodeclaim::JoinAnswer,
    rule: nodeclaim::JoinAnswer,
    solo: Option<f64>,
    at: &str,
) {
    assert!(!rule.admits(solo), "{at}: {rule:?}");
    let (floor, rule) = (step_of(floor), step_of(rule));
    assert!(
        floor.zip(rule).is_some_and(|(f, r)| f <= r),
        "{at}: {floor:?} > {rule:?}"
    );
}

/// A NodeClaim holding a GPU pod has a growth floor: a pod of cpu and
/// memory alone that its cheapest type has no room for is refused by the
/// least step to a type with more cpu (a grown type also holds the GPU,
/// which only narrows the types), and a pod asking for a GPU the cheapest
/// type has no more of by the step to a type with more GPUs; each by a
/// step no dearer than the rule's own. Without the floor every walk asked the rule on every such
/// NodeClaim.
#[test]
fn a_nodeclaim_with_a_gpu_has_a_growth_floor() {
    let mut gpu = pod("gpu", "3", "8Gi");
    gpu.requests.set("nvidia.com/gpu", q("1"));
    let small = pod("small", "1500m", "2Gi");
    let tiny = pod("tiny", "100m", "128Mi");
    let mut gpu_too = pod("gpu-too", "100m", "128Mi");
    gpu_too.requests.set("nvidia.com/gpu", q("1"));
    let s = state(vec![gpu, small, tiny, gpu_too], vec![default_pool()]);
    with_run(&s, &gpu_catalog(), |run| {
        let r = Relaxation::default();
        assert!(run.add(PodIdx::new(0), &r).is_ok());
        let c = index::ClaimIdx::new(0);
        let first = run.claims[c].types.first().expect("a NodeClaim has types");
        assert_eq!(run.pools[0].types[first].name, "g4.xlarge");
        // The second GPU pod has no GPU left on the cheapest type: the
        // step is to a type with more GPUs.
        let cases = [(1, true), (2, false), (3, true)];
        for (p, refused) in cases.map(|(p, refused)| (PodIdx::new(p), refused)) {
            let pod_reqs = pod_view::node_requirements(&run.pods[p], &run.volume[p], &r);
            let solo = run.solo_price(p, &pod_reqs);
            let compact = run.pods[p].requests.compact_request();
            let floor = run.growth_refuses(c, p, compact, solo);
            let rule = run.join_answer(c, p, &pod_reqs, None, None);
            assert_eq!(floor.is_some(), refused, "pod {p:?}: {floor:?}");
            if let Some(floor) = floor {
                assert_refused_as_by_the_rule(floor, rule, solo, &format!("pod {p:?}"));
            }
        }
    });
}

/// A pod asking for a GPU that a NodeClaim's cheapest type has none left
/// of grows the NodeClaim to a type with more GPUs: the reach over those
/// types alone (`Run::beyond_reach`), made once the rule refused such a pod
/// that is alone in its size, refuses pods the steps did not, and only
/// pods the rule refuses, by a step no dearer than the rule's. A roomy
/// type without GPUs within a GPU pod's price (`r5.2xlarge`) keeps the
/// reach over every type from refusing them. Random pods of cpu and
/// memory make the NodeClaims; random GPU pods, each its own size, ask
/// each of them.
#[test]
fn a_gpu_pod_is_refused_by_the_reach_of_the_types_with_more_gpus() {
    let mut cat = gpu_catalog();
    let mut roomy = cat.entries[0].clone();
    roomy.info = info("r5.2xlarge", "amd64", 8, 65536, 0);
    for o in &mut roomy.offerings {
        o.price = match o.capacity_type {
            CapacityType::OnDemand => 0.504,
            _ => 0.504 * 0.4,
        };
    }
    cat.entries.push(roomy);
    let mut draw = test_draws(43);
    let (mut asked, mut refused, mut learnt) = (0, 0, 0);
    for case in 0..40 {
        let mut pods: Vec<Pod> = (0..6)
            .map(|i| {
                let cpu = format!("{}m", 500 + 500 * draw(12));
                let mem = format!("{}Mi", 1024 + 1024 * draw(24));
                pod(&format!("c{case}-p{i}"), &cpu, &mem)
            })
            .collect();
        let gpus = pods.len()..pods.len() + 8;
        for i in gpus.clone() {
            let cpu = format!("{}m", 100 + 100 * draw(30) + i as u64);
            let mem = format!("{}Mi", 128 + 512 * draw(24));
            let mut gpu = pod(&format!("c{case}-g{i}"), &cpu, &mem);
            gpu.requests.set("nvidia.com/gpu", q("1"));
            pods.push(gpu);
        }
        let s = state(pods, vec![default_pool()]);
        with_run(&s, &cat, |run| {
            let r = Relaxation::default();
            for p in PodIdx::all(gpus.start) {
                let _ = run.add(p, &r);
            }
            for c in (0..run.claims.len()).map(index::ClaimIdx::new) {
                for p in gpus.clone().map(PodIdx::new) {
                    let pod_reqs = pod_view::node_requirements(&run.pods[p], &run.volume[p], &r);
                    let solo = run.solo_price(p, &pod_reqs);
                    let rule = run.join_answer(c, p, &pod_reqs, None, None);
                    let before = run.growth_refuses(c, p, None, solo);
                    if before.is_none() && !rule.admits(solo) {
                        run.learn_reach(c, p);
                    }
                    let after = run.growth_refuses(c, p, None, solo);
                    if let Some(floor) = after {
                        let at = format!("case {case}, {p:?}");
                        assert_refused_as_by_the_rule(floor, rule, solo, &at);
                        refused += 1;
                    }
                    learnt += usize::from(before.is_none() && after.is_some());
                    asked += 1;
                }
            }
        });
    }
    assert!(asked > 1000, "{asked} asked");
    assert!(
        learnt > 15,
        "{learnt} of {refused} refusals by a reach learnt"
    );
}

/// A pod held to on-demand that fits a spot NodeClaim's room still grows
/// its price to on-demand: its growth floor at on-demand prices refuses
/// it where the one at the NodeClaim's own prices cannot (the pod needs
/// no growth), by a step no dearer than the rule's; a pod held to nothing
/// is not refused.
#[test]
fn a_pod_held_to_on_demand_is_refused_at_on_demand_prices() {
    let mut held = pod("held", "100m", "128Mi");
    held.node_selector = reqs(vec![req(
        labels::CAPACITY_TYPE,
        Operator::In,
        &["on-demand"],
    )]);
    let pods = vec![pod("big", "7", "8Gi"), held, pod("free", "100m", "128Mi")];
    let s = state(pods, vec![default_pool()]);
    with_run(&s, &catalog(), |run| {
        let r = Relaxation::default();
        assert!(run.add(PodIdx::new(0), &r).is_ok());
        let c = index::ClaimIdx::new(0);
        assert_eq!(run.claims[c].capacity_types & 6, 6, "spot and on-demand");
        let zones = run.pools[0].zones.clone();
        let ask = |run: &mut Run, p: PodIdx| {
            let pod_reqs = pod_view::node_requirements(&run.pods[p], &run.volume[p], &r);
            let solo = run.solo_price(p, &pod_reqs);
            let offers = costrule::OfferBits::of_pod(&pod_reqs, &zones);
            let compact = run.pods[p].requests.compact_request();
            let rule = run.join_answer(c, p, &pod_reqs, offers, None);
            let own = run.growth_refuses(c, p, compact, solo);
            let held = run.held_growth_refuses(c, p, (compact, offers), solo);
            (rule.admits(solo), rule, own, held)
        };
        let (admits, rule, own, held) = ask(run, PodIdx::new(1));
        assert!(!admits && own.is_none(), "{rule:?} {own:?}");
        match (held, rule) {
            (
                Some(nodeclaim::JoinAnswer::Step { step: floor, .. }),
                nodeclaim::JoinAnswer::Step { step, .. },
            ) => assert!(floor > 0.0 && floor <= step, "{floor} > {step}"),
            other => panic!("held pod: {other:?}"),
        }
        let (admits, _, own, held) = ask(run, PodIdx::new(2));
        assert!(admits && own.is_none() && held.is_none());
    });
}

/// A pod that narrows a NodeClaim to offerings its grown type lacks
/// (on-demand, on a NodeClaim pinned to a zone without on-demand
/// offerings) is priced by the cost rule at the NodeClaim's own offerings
/// of that type, not at the type's list price (the least of any zone):
/// so no growth floor, which prices types at the NodeClaim's offerings,
/// is above the rule.
#[test]
fn a_grown_type_without_an_offering_the_pod_allows_is_priced_at_the_nodeclaims_own() {
    let mut cat = catalog();
    for e in cat.entries.iter_mut() {
        (e.offerings).retain(|o| o.zone != ZONES[0] || o.capacity_type != CapacityType::OnDemand);
        (e.offerings.iter_mut())
            .filter(|o| o.zone == ZONES[0])
            .for_each(|o| o.price *= 2.0);
    }
    let mut first = pod("first", "1", "1Gi");
    first.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &[ZONES[0]])]);
    let second = on_demand_only(pod("second", "3", "4Gi"));
    let s = state(vec![first, second], vec![default_pool()]);
    with_run(&s, &cat, |run| {
        let r = Relaxation::default();
        assert!(run.add(PodIdx::new(0), &r).is_ok());
        let (c, p) = (index::ClaimIdx::new(0), PodIdx::new(1));
        let (pod_reqs, offers, types) = trial_view(run, p, &r);
        let answer = run.join_answer(c, p, &pod_reqs, offers, Some(&types));
        let nodeclaim::JoinAnswer::Step { step, .. } = answer else {
            panic!("a step: {answer:?}");
        };
        let claim = &run.claims[c];
        let pool = &run.pools[claim.pool];
        let before = claim.types.first().expect("a NodeClaim has types");
        let requests = claim.requests.plus(&run.pods[p].requests);
        let compact = requests.compact_request();
        let after = (pool.first_holding(&claim.types, Some(&types), &requests, compact))
            .expect("a type holds both");
        let own = run.claim_step(c, before, (after, None));
        assert!((step - own).abs() < 1e-12, "{step} != {own}");
        let now = costrule::offered_price(pool, before, costrule::OfferBits::of_claim(claim, pool));
        let listed = pool.node_price(pool.types[after].price) - now;
        assert!(step > listed + 1e-9, "{step} <= {listed} (list price)");
    });
}

/// A NodeClaim's growth floor prices each type at the offerings the
/// NodeClaim allows: on-demand for one held to on-demand, spot and
/// on-demand in its zones for one held to some (the test catalog's three
/// zones: every set of them has a table). Never below the least of any
/// offering, and above it for some type when held to on-demand or out of
/// the cheapest zone: those prices let pods through to the rule that the
/// NodeClaim's own steps refuse.
#[test]
fn a_growth_floor_prices_types_at_the_nodeclaims_own_offerings() {
    let zone = |z: &[&str]| req(labels::ZONE, Operator::In, z);
    let ct = |c: &str| req(labels::CAPACITY_TYPE, Operator::In, &[c]);
    let (one, two) = (&ZONES[1..2], &ZONES[..2]);
    let cases: Vec<(&str, Vec<Requirement>, &[&str], u8)> = vec![
        ("anywhere", vec![], &[], 6),
        ("on-demand", vec![ct("on-demand")], &[], 4),
        ("spot", vec![ct("spot")], &[], 2),
        ("one zone", vec![zone(one)], one, 6),
        (
            "on-demand, one zone",
            vec![ct("on-demand"), zone(one)],
            one,
            4,
        ),
        ("two zones", vec![zone(two)], two, 6),
        ("spot, two zones", vec![ct("spot"), zone(two)], two, 2),
    ];
    // The third zone is the cheapest: a NodeClaim held out of it pays
    // more than the least of any offering.
    let mut cat = catalog();
    (cat.entries.iter_mut().flat_map(|e| e.offerings.iter_mut()))
        .filter(|o| o.zone == ZONES[2])
        .for_each(|o| o.price *= 0.5);
    for (name, selector, in_zones, capacity) in cases {
        let mut big = pod("big", "3", "1Gi");
        big.node_selector = reqs(selector);
        let s = state(vec![big], vec![default_pool()]);
        with_run(&s, &cat, |run| {
            assert!(run.add(PodIdx::new(0), &Relaxation::default()).is_ok());
            let claim = &run.claims[index::ClaimIdx::new(0)];
            let pool = &run.pools[claim.pool];
            let floors = &run.type_floors[claim.pool.get()];
            let priced = floors.priced(&claim.zone_mask, claim.capacity_types);
            let mut dearer = 0;
            for t in claim.types.iter() {
                let ty = &pool.types[t];
                let least = (ty.offerings.iter())
                    .filter(|o| o.reservation.is_none())
                    .filter(|o| o.capacity_type.bit() & capacity != 0)
                    .filter(|o| in_zones.is_empty() || in_zones.contains(&o.zone.as_str()))
                    .map(|o| o.price)
                    .reduce(f64::min);
                let want = pool.node_price(least.unwrap_or(ty.price));
                assert_eq!(floors.floor_at(priced, t), want, "{name}: {}", ty.name);
                assert!(want >= floors.floor[t], "{name}: {}", ty.name);
                dearer += usize::from(want > floors.floor[t]);
            }
            if capacity == 4 || !in_zones.is_empty() {
                assert!(dearer > 0, "{name}: no type priced above its floor");
            }
        });
    }
}

/// The growth floor's walk over a NodeClaim's types stops once no later
/// type can lower a step it found or has more of a resource than the
/// cheapest type: its steps are those of every type walked. Random pods
/// join one growing NodeClaim; its floor is compared with the whole walk
/// after each join. One type's on-demand offering is cheaper than the
/// spot price that orders the types, so the types are not in the floors'
/// order.
#[test]
fn the_growth_floor_stops_where_no_later_type_changes_it() {
    let mut cat = catalog();
    let m5_2xlarge = &mut cat.entries[2];
    assert_eq!(m5_2xlarge.info.name, "m5.2xlarge");
    (m5_2xlarge.offerings.iter_mut())
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .for_each(|o| o.price = 0.05);
    let mut draw = test_draws(41);
    let (mut compared, mut grew, mut exact, mut levels) = (0, 0, 0, 0);
    for case in 0..20 {
        let pods: Vec<Pod> = (0..16)
            .map(|i| {
                let cpu = format!("{}m", 50 + 150 * draw(10));
                let mem = format!("{}Mi", 64 + 256 * draw(12));
                pod(&format!("c{case}-p{i}"), &cpu, &mem)
            })
            .collect();
        let s = state(pods, vec![default_pool()]);
        with_run(&s, &cat, |run| {
            let r = Relaxation::default();
            let c = index::ClaimIdx::new(0);
            for p in PodIdx::all(s.pending_pods.len()) {
                let _ = run.add(p, &r);
                let claim = &run.claims[c];
                let pool = &run.pools[claim.pool];
                let Some(floor) = run.make_growth_floor(c, 0, 0) else {
                    continue;
                };
                let before = claim.types.first().expect("a floor has types");
                let have = pool.compact_allocatable[before].expect("compact");
                let floors = &run.type_floors[claim.pool.get()];
                let priced = floors.priced(&claim.zone_mask, claim.capacity_types);
                let mut least = [f64::INFINITY; crate::resources::COMPACT];
                for t in claim.types.iter().filter(|&t| t != before) {
                    let price = floors.floor_at(priced, t);
                    let a = pool.compact_allocatable[t].expect("compact");
                    for (d, l) in least.iter_mut().enumerate() {
                        if a.quantities()[d] > have.quantities()[d] {
                            *l = l.min(price);
                        }
                    }
                }
                let now = floor.steps();
                let whole = least.map(|l| {
                    l - costrule::offered_price(
                        pool,
                        before,
                        costrule::OfferBits::of_claim(claim, pool),
                    )
                });
                assert_eq!(now, whole, "case {case}, pod {p:?}");
                // The reach: per level, at least the most room of any of
                // the NodeClaim's types within the level's step (by a walk
                // over all of them), and that where the types come in the
                // floors' order.
                let now_price = costrule::offered_price(
                    pool,
                    before,
                    costrule::OfferBits::of_claim(claim, pool),
                );
                let used = claim.requests.compact_request().expect("compact");
                let slack = costrule::slack(pool);
                let reach = run.reach(c, floors, now_price, (&used, floor.room()));
                for (k, reach) in reach.iter().enumerate() {
                    let mut most = *floor.room().quantities();
                    for t in claim.types.iter() {
                        let step = floors.floor_at(priced, t) - now_price;
                        if step / slack <= run.step_grid.price(k) {
                            let a = pool.compact_allocatable[t].expect("compact");
                            for (d, m) in most.iter_mut().enumerate() {
                                *m = (*m).max(a.quantities()[d] - used.quantities()[d]);
                            }
                        }
                    }
                    let wide = (0..most.len()).all(|d| reach[d] >= most[d]);
                    assert!(
                        wide,
                        "case {case}, pod {p:?}, level {k}: {reach:?} < {most:?}"
                    );
                    exact += usize::from(*reach == most);
                    levels += 1;
                    grew += usize::from(most != *floor.room().quantities());
                }
                compared += 1;
            }
        });
    }
    assert!(compared > 200, "{compared} floors compared");
    assert!(grew > 200, "{grew} levels reach past the cheapest type");
    assert!(exact * 10 > levels * 9, "{exact} of {levels} levels exact");
}

/// A refusal the cost rule made for a pod held to on-demand (the node's
/// step from spot to on-demand) does not hold for a pod of the same
/// requests that is not: that one joins the spot node for nothing.
#[test]
fn an_on_demand_pods_refusal_does_not_refuse_its_spot_able_twin() {
    let on_demand = on_demand_only(pod("on-demand", "100m", "128Mi"));
    let pods = vec![
        pod("big", "3", "1Gi"),
        on_demand,
        pod("twin", "100m", "128Mi"),
    ];
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 2, "{:#?}", p.node_claims);
    let big = claim_of(&p, "big");
    assert!(big.pods.iter().any(|n| n == "default/twin"), "{big:#?}");
    assert_eq!(big.price.capacity_type, CapacityType::Spot);
    let own = claim_of(&p, "on-demand");
    assert_eq!(own.price.capacity_type, CapacityType::OnDemand);
}

/// Likewise for a pod held to an architecture none of the NodeClaim's
/// types that hold it has: its twin without the selector joins.
#[test]
fn an_arm64_pods_refusal_does_not_refuse_its_twin() {
    let mut arm = pod("arm", "100m", "128Mi");
    arm.node_selector = reqs(vec![req(labels::ARCH, Operator::In, &["arm64"])]);
    let pods = vec![pod("big", "3", "1Gi"), arm, pod("twin", "100m", "128Mi")];
    let p = plan(&state(pods, vec![default_pool()]));
    let big = claim_of(&p, "big");
    assert!(big.pods.iter().any(|n| n == "default/twin"), "{big:#?}");
    assert!(!big.pods.iter().any(|n| n == "default/arm"), "{big:#?}");
}

#[test]
fn packs_small_pods_onto_one_node_claim() {
    let pods = (0..10)
        .map(|i| pod(&format!("p{i}"), "100m", "128Mi"))
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 1);
    assert_eq!(p.node_claims[0].pods.len(), 10);
    assert_eq!(p.node_claims[0].resources.requests.cpu(), q("1"));
}

#[test]
fn node_selector_restricts_zone_and_arch() {
    let mut a = pod("a", "1", "1Gi");
    a.node_selector = reqs(vec![
        req(labels::ZONE, Operator::In, &["test-1b"]),
        req(labels::ARCH, Operator::In, &["arm64"]),
    ]);
    let p = plan(&state(vec![a], vec![default_pool()]));
    let c = &p.node_claims[0];
    assert_eq!(c.zones, vec!["test-1b"]);
    assert_eq!(*c.instance_types, vec!["m6g.large"]);
    assert_eq!(
        c.labels.get(labels::ZONE).map(String::as_str),
        Some("test-1b")
    );
}

#[test]
fn required_affinity_terms_are_tried_in_order() {
    let np = pool(
        "default",
        vec![req(labels::ZONE, Operator::In, &["test-1a", "test-1c"])],
    );
    let mut a = pod("a", "1", "1Gi");
    a.required_terms = vec![
        reqs(vec![req(labels::ZONE, Operator::In, &["test-1b"])]),
        reqs(vec![req(labels::ZONE, Operator::In, &["test-1c"])]),
    ];
    let p = plan(&state(vec![a.clone()], vec![np.clone()]));
    assert_eq!(claim_of(&p, "a").zones, vec!["test-1c"]);
    // With only the impossible term the pod is unschedulable, and the reason
    // names the zone and the NodePool.
    a.required_terms.pop();
    let p = plan(&state(vec![a], vec![np]));
    assert_eq!(p.unschedulable.len(), 1);
    let r = &p.unschedulable[0].reason;
    assert!(r.contains("test-1b") && r.contains("\"default\""), "{r}");
}

#[test]
fn preferred_node_affinity_is_honoured_then_relaxed() {
    let mut a = pod("a", "1", "1Gi");
    a.preferred_terms = vec![
        PreferredNodeTerm {
            weight: 1,
            requirements: reqs(vec![req(labels::ZONE, Operator::In, &["test-1a"])]),
        },
        PreferredNodeTerm {
            weight: 50,
            requirements: reqs(vec![req(labels::ZONE, Operator::In, &["test-1c"])]),
        },
    ];
    let p = plan(&state(vec![a.clone()], vec![default_pool()]));
    assert_eq!(
        claim_of(&p, "a").zones,
        vec!["test-1c"],
        "heaviest preference first"
    );
    // An impossible preference is dropped rather than failing the pod.
    a.preferred_terms = vec![PreferredNodeTerm {
        weight: 1,
        requirements: reqs(vec![req(labels::ZONE, Operator::In, &["nowhere-1z"])]),
    }];
    let p = plan(&state(vec![a], vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 1);
    assert_eq!(claim_of(&p, "a").zones.len(), 3);
}

#[test]
fn custom_labels_need_the_node_pool_to_define_them() {
    let mut a = pod("a", "1", "1Gi");
    a.node_selector = reqs(vec![req("example.com/team", Operator::In, &["blue"])]);
    let p = plan(&state(vec![a.clone()], vec![default_pool()]));
    assert_eq!(p.unschedulable.len(), 1);
    assert!(
        p.unschedulable[0].reason.contains("example.com/team"),
        "{}",
        p.unschedulable[0].reason
    );

    let mut np = default_pool();
    np.requirements.add(Requirement::exists("example.com/team"));
    let p = plan(&state(vec![a.clone()], vec![np.clone()]));
    assert_eq!(
        claim_of(&p, "a")
            .labels
            .get("example.com/team")
            .map(String::as_str),
        Some("blue")
    );
    // A pod that does not ask gets a generated value on its own node...
    let p = plan(&state(vec![pod("b", "1", "1Gi")], vec![np.clone()]));
    let generated = claim_of(&p, "b")
        .labels
        .get("example.com/team")
        .cloned()
        .unwrap();
    assert_eq!(generated, claim_of(&p, "b").name);
    // ...and may share the blue node, which then carries the blue value.
    a.requests = pod("a", "100m", "128Mi").requests.clone();
    let p = plan(&state(vec![a, pod("b", "100m", "128Mi")], vec![np]));
    assert_eq!(p.node_claims.len(), 1);
    assert_eq!(p.node_claims[0].labels["example.com/team"], "blue");
}

#[test]
fn taints_block_unless_tolerated_and_startup_taints_do_not() {
    let mut np = default_pool();
    np.taints = vec![Taint {
        key: "gpu".into(),
        value: "true".into(),
        effect: TaintEffect::NoSchedule,
    }];
    np.startup_taints = vec![Taint {
        key: "init".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }];
    let a = pod("a", "1", "1Gi");
    let p = plan(&state(vec![a.clone()], vec![np.clone()]));
    assert!(
        p.unschedulable[0]
            .reason
            .contains("taint gpu=true:NoSchedule"),
        "{}",
        p.unschedulable[0].reason
    );
    let mut b = a;
    b.tolerations = vec![Toleration {
        key: "gpu".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(TaintEffect::NoSchedule),
    }];
    let p = plan(&state(vec![b], vec![np]));
    assert_eq!(p.summary.scheduled, 1);
    assert_eq!(p.node_claims[0].startup_taints.len(), 1);
}

#[test]
fn zone_spread_balances_across_zones() {
    let pods: Vec<Pod> = (0..6)
        .map(|i| {
            let mut p = labeled(pod(&format!("w{i}"), "100m", "128Mi"), "app", "web");
            p.topology_spread = vec![spread(
                labels::ZONE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", "web"),
            )];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 6);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &p.node_claims {
        assert_eq!(c.zones.len(), 1, "spread pins each NodeClaim to one zone");
        *per_zone.entry(c.zones[0].clone()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
}

/// Node `n1` in `zone` running `pod`, with allocatable (cpu, memory,
/// pods) `room`; tainted `dedicated:NoSchedule` when `tainted`.
fn existing_node(zone: &str, room: [&str; 3], tainted: bool, pod: Pod) -> Node {
    Node {
        name: "n1".into(),
        labels: [(labels::ZONE.to_string(), zone.to_string())].into(),
        taints: if tainted {
            vec![Taint {
                key: "dedicated".into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            }]
        } else {
            vec![]
        },
        allocatable: Resources::new()
            .with("cpu", q(room[0]))
            .with("memory", q(room[1]))
            .with("pods", q(room[2])),
        unschedulable: false,
        pods: vec![pod],
        ..Node::default()
    }
}

#[test]
fn zone_spread_counts_existing_pods() {
    let mut existing = labeled(pod("old", "100m", "128Mi"), "app", "web");
    existing.node_name = Some("n1".into());
    let node = existing_node("test-1a", ["4", "8Gi", "10"], true, existing);
    let pods: Vec<Pod> = (0..2)
        .map(|i| {
            let mut p = labeled(pod(&format!("w{i}"), "100m", "128Mi"), "app", "web");
            p.topology_spread = vec![spread(
                labels::ZONE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", "web"),
            )];
            p
        })
        .collect();
    let mut s = state(pods, vec![default_pool()]);
    s.nodes = vec![node];
    let p = plan(&s);
    let zones: Vec<_> = p.node_claims.iter().map(|c| c.zones[0].clone()).collect();
    assert!(!zones.contains(&"test-1a".to_string()), "{zones:?}");
    assert_eq!(p.summary.scheduled, 2);
}

#[test]
fn schedule_anyway_spread_is_relaxed_when_impossible() {
    // Only one zone is allowed, maxSkew 1 over three zones cannot hold 3 pods.
    let np = pool(
        "default",
        vec![req(labels::ZONE, Operator::In, &["test-1a"])],
    );
    let mk = |when| -> Vec<Pod> {
        (0..3)
            .map(|i| {
                let mut p = labeled(pod(&format!("w{i}"), "100m", "128Mi"), "app", "web");
                p.topology_spread = vec![spread(labels::ZONE, 1, when, selector("app", "web"))];
                // Pods may only count zones the pod can reach: make all three eligible.
                p.topology_spread[0].node_affinity_policy = InclusionPolicy::Ignore;
                p
            })
            .collect()
    };
    let mut s = state(mk(WhenUnsatisfiable::DoNotSchedule), vec![np.clone()]);
    // Existing domains test-1b/test-1c exist through another pool.
    s.node_pools.push(pool(
        "other",
        vec![req(labels::ZONE, Operator::In, &["test-1b", "test-1c"])],
    ));
    s.node_pools[1].taints = vec![Taint {
        key: "x".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }];
    let p = plan(&s);
    // Zones b and c stay empty (their pool is tainted), so skew 1 allows a
    // single pod in zone a.
    assert_eq!(
        p.summary.scheduled, 1,
        "DoNotSchedule keeps skew ≤ 1: {p:#?}"
    );
    assert!(
        p.unschedulable[0].reason.contains("topology spread"),
        "{}",
        p.unschedulable[0].reason
    );
    s.pending_pods = mk(WhenUnsatisfiable::ScheduleAnyway);
    let p = plan(&s);
    assert_eq!(p.summary.scheduled, 3);
}

#[test]
fn hostname_anti_affinity_to_self_gives_one_pod_per_node() {
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = labeled(pod(&format!("api{i}"), "100m", "128Mi"), "app", "api");
            p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", "api"))];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 4);
    assert!(p.node_claims.iter().all(|c| c.pods.len() == 1));
}

/// Pods of different sizes under one anti-affinity term (an "ha group")
/// repel each other too: the repack, which packs them by size, must not
/// put two sizes of the group on one node.
#[test]
fn hostname_anti_affinity_group_of_several_sizes_stays_one_per_node() {
    let pods: Vec<Pod> = (0..8)
        .map(|i| {
            let cpu = if i % 2 == 0 { "100m" } else { "250m" };
            let mut p = labeled(pod(&format!("ha{i}"), cpu, "128Mi"), "group", "ha");
            p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("group", "ha"))];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 8);
    for c in &p.node_claims {
        assert_eq!(c.pods.len(), 1, "{} holds {:?}", c.name, c.pods);
    }
}

#[test]
fn hostname_spread_limits_pods_per_node() {
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = labeled(pod(&format!("s{i}"), "100m", "128Mi"), "app", "s");
            p.topology_spread = vec![spread(
                labels::HOSTNAME,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", "s"),
            )];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 4);
}

#[test]
fn pod_affinity_follows_the_target_even_when_scheduled_first() {
    // The follower is larger, so it is tried first, fails, and succeeds once
    // the target has been placed.
    let mut target = labeled(pod("db", "100m", "128Mi"), "app", "db");
    target.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &["test-1b"])]);
    let mut follower = pod("cache", "1", "1Gi");
    follower.pod_affinity = vec![term(labels::ZONE, selector("app", "db"))];
    let p = plan(&state(vec![follower, target], vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 2, "{p:#?}");
    assert_eq!(claim_of(&p, "cache").zones, vec!["test-1b"]);
}

/// A term naming another namespace selects the pods there (and only
/// there): the follower joins the target's zone whichever is tried first.
#[test]
fn pod_affinity_to_another_namespace_follows_the_target() {
    for follower_first in [true, false] {
        let mut target = labeled(pod("db", "100m", "128Mi"), "app", "db");
        target.namespace = "batch".into();
        target.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &["test-1b"])]);
        let size = if follower_first { "1" } else { "50m" };
        let mut follower = pod("cache", size, "64Mi");
        let mut t = term(labels::ZONE, selector("app", "db"));
        t.namespaces = vec!["batch".into()];
        follower.pod_affinity = vec![t];
        let p = plan(&state(vec![follower, target], vec![default_pool()]));
        assert_eq!(p.summary.scheduled, 2, "{p:#?}");
        assert_eq!(claim_of(&p, "cache").zones, vec!["test-1b"]);
    }
}

/// Targets whose zone nothing decides (no selector, no spread) are pinned
/// to one when placed, so the pods following them are placed in the same
/// run: one term (the target's zone), two terms (one zone holding both
/// targets), whichever is tried first.
#[test]
fn pod_affinity_to_unconstrained_targets_is_placed_at_once() {
    for follower_first in [true, false] {
        let size = if follower_first { "2" } else { "50m" };
        let db = labeled(pod("db", "100m", "128Mi"), "app", "db");
        let web = labeled(pod("web", "100m", "128Mi"), "app", "web");
        let mut one = pod("one", size, "64Mi");
        one.pod_affinity = vec![term(labels::ZONE, selector("app", "db"))];
        let mut both = pod("both", size, "64Mi");
        both.pod_affinity = vec![
            term(labels::ZONE, selector("app", "db")),
            term(labels::ZONE, selector("app", "web")),
        ];
        let p = plan(&state(vec![one, both, db, web], vec![default_pool()]));
        assert_eq!(p.summary.scheduled, 4, "{:?}", p.unschedulable);
        let zone = |name| claim_of(&p, name).zones.clone();
        assert_eq!(zone("db").len(), 1);
        assert_eq!(zone("one"), zone("db"));
        assert_eq!(zone("both"), zone("db"));
        assert_eq!(zone("both"), zone("web"));
    }
}

/// Karpenter's benchmark shape in small: a pod that starts its own
/// hostname affinity group is placed first, and pods whose hostname
/// affinity selects that group come next, while more of its pods (each on
/// a node of its own) are still queued. The followers wait for them
/// instead of growing the first NodeClaim to the largest type (they did:
/// one `g4.8xlarge`), and spread over the NodeClaims holding the group.
#[test]
fn hostname_affinity_followers_wait_for_more_targets_than_the_first() {
    let mut seed = labeled(pod("seed", "1500m", "1Gi"), "l", "x");
    seed.pod_affinity = vec![term(labels::HOSTNAME, selector("l", "x"))];
    let mut pods = vec![seed];
    for i in 0..8 {
        let mut t = labeled(
            labeled(pod(&format!("tgt-{i}"), "250m", "256Mi"), "l", "x"),
            "anti",
            "t",
        );
        t.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("anti", "t"))];
        pods.push(t);
    }
    for i in 0..16 {
        let mut f = labeled(pod(&format!("near-{i}"), "1", "1Gi"), "l", "n");
        f.pod_affinity = vec![term(labels::HOSTNAME, selector("l", "x"))];
        pods.push(f);
    }
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 25, "{:?}", p.unschedulable);
    for c in &p.node_claims {
        let near = c.pods.iter().filter(|n| n.contains("near-")).count();
        let targets = c
            .pods
            .iter()
            .filter(|n| n.contains("seed") || n.contains("tgt-"))
            .count();
        assert!(near == 0 || targets > 0, "{c:#?}");
        assert!(
            near <= 4,
            "{} holds {near} followers ({})",
            c.name,
            c.price.instance_type
        );
    }
}

/// A pod whose hostname affinity leaves it only NodeClaims the cost rule
/// refuses joins, once the queue stops placing pods, the one whose price
/// grows least: `tgt-1`'s `c5.large` grows to an `m5.xlarge`, where the
/// first NodeClaim (`tgt-0`'s `m5.xlarge`) would grow to an `m5.2xlarge`.
#[test]
fn a_hostname_affinity_follower_joins_the_target_node_that_grows_least() {
    let target = |name: &str, cpu: &str| {
        let mut t = labeled(labeled(pod(name, cpu, "1Gi"), "l", "x"), "anti", "t");
        t.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("anti", "t"))];
        t
    };
    let mut follower = pod("near", "1", "2Gi");
    follower.pod_affinity = vec![term(labels::HOSTNAME, selector("l", "x"))];
    let pods = vec![target("tgt-0", "3"), target("tgt-1", "1"), follower];
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 3, "{:?}", p.unschedulable);
    assert_eq!(
        claim_of(&p, "near").name,
        claim_of(&p, "tgt-1").name,
        "{p:#?}"
    );
    assert_eq!(claim_of(&p, "near").price.instance_type, "m5.xlarge");
}

/// Followers of a hostname affinity that wait (the queue's patient
/// passes) remember what their NodeClaims answered and ask only those
/// that changed since; debug builds walk every NodeClaim beside each
/// such try and fail on any difference (`hostaffinity::check_memo`).
/// Zone affinities to the targets make topology pin them, which a
/// remembered answer must also survive. Seeded shapes: every pod is
/// placed, each follower with a target.
#[test]
fn hostname_affinity_followers_remembering_answers_place_as_a_full_walk_would() {
    for seed in 1..=6 {
        let mut draw = super::test_draws(seed);
        let mut cpu = |lo: u64, hi: u64| format!("{}m", lo + 50 * draw((hi - lo) / 50 + 1));
        let mut pods = Vec::new();
        for i in 0..10 {
            let mut t = labeled(pod(&format!("tgt-{i}"), &cpu(250, 2000), "512Mi"), "l", "x");
            t = labeled(t, "anti", "t");
            t.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("anti", "t"))];
            pods.push(t);
        }
        for i in 0..4 {
            let mut z = pod(&format!("zone-{i}"), &cpu(100, 500), "256Mi");
            let l = if i % 2 == 0 { "x" } else { "n" };
            z.pod_affinity = vec![term(labels::ZONE, selector("l", l))];
            pods.push(z);
        }
        for i in 0..40 {
            let mut f = labeled(pod(&format!("near-{i}"), &cpu(100, 1500), "1Gi"), "l", "n");
            f.pod_affinity = vec![term(labels::HOSTNAME, selector("l", "x"))];
            pods.push(f);
        }
        let p = plan(&state(pods, vec![default_pool()]));
        assert_eq!(
            p.summary.scheduled, 54,
            "seed {seed}: {:?}",
            p.unschedulable
        );
        for c in &p.node_claims {
            let near = c.pods.iter().any(|n| n.contains("near-"));
            let target = c.pods.iter().any(|n| n.contains("tgt-"));
            assert!(!near || target, "seed {seed}: {c:#?}");
        }
    }
}

/// A follower that a NodeClaim refused after its trial, while the
/// NodeClaim's zone is open and topology pins the follower's zone (to the
/// one where a zone affinity selecting it counts the most pods, which
/// moves with other placements), asks that NodeClaim again on its next
/// try whether or not it changed; without the pin it does not.
#[test]
fn a_followers_memo_asks_again_a_node_whose_zone_a_pin_would_choose() {
    for pinned in [true, false] {
        let mut target = labeled(pod("tgt", "500m", "512Mi"), "l", "x");
        target.node_selector = reqs(vec![req(labels::ARCH, Operator::In, &["amd64"])]);
        let mut follower = labeled(pod("near", "250m", "256Mi"), "l", "n");
        follower.node_selector = reqs(vec![req(labels::ARCH, Operator::In, &["arm64"])]);
        follower.pod_affinity = vec![term(labels::HOSTNAME, selector("l", "x"))];
        let mut pods = vec![target, follower];
        if pinned {
            let mut zone = pod("zone", "100m", "128Mi");
            zone.pod_affinity = vec![term(labels::ZONE, selector("l", "n"))];
            pods.push(zone);
        }
        let s = state(pods, vec![default_pool()]);
        with_run(&s, &catalog(), |run| {
            let r = Relaxation::default();
            assert!(run.add(PodIdx::new(0), &r).is_ok());
            run.patient = true;
            assert!(run.add(PodIdx::new(1), &r).is_err());
            let expected = if pinned {
                vec![index::ClaimIdx::new(0)]
            } else {
                vec![]
            };
            assert_eq!(run.near.recheck_of(PodIdx::new(1)), Some(expected));
        });
    }
}

#[test]
fn pod_affinity_without_target_is_unschedulable() {
    let mut follower = pod("cache", "1", "1Gi");
    follower.pod_affinity = vec![term(labels::ZONE, selector("app", "db"))];
    let p = plan(&state(vec![follower], vec![default_pool()]));
    assert_eq!(p.unschedulable.len(), 1);
    assert!(
        p.unschedulable[0].reason.contains("pod affinity"),
        "{}",
        p.unschedulable[0].reason
    );
}

#[test]
fn pod_affinity_on_existing_nodes_goes_to_the_target_zone() {
    // The zone-a node comes first in Karpenter's order and has room; the
    // follower's affinity (decided once per pod, before any node is tried)
    // admits only zone b, where the target runs.
    let mut target = labeled(pod("db", "100m", "128Mi"), "app", "db");
    target.node_name = Some("n-b".into());
    let mut other = pod("idle", "100m", "128Mi");
    other.node_name = Some("n-a".into());
    let mut a = existing_node("test-1a", ["4", "8Gi", "10"], false, other);
    a.name = "n-a".into();
    a.labels.insert(labels::HOSTNAME.into(), "n-a".into());
    let mut b = existing_node("test-1b", ["4", "8Gi", "10"], false, target);
    b.name = "n-b".into();
    b.labels.insert(labels::HOSTNAME.into(), "n-b".into());
    let mut follower = pod("cache", "1", "1Gi");
    follower.pod_affinity = vec![term(labels::ZONE, selector("app", "db"))];
    let mut s = state(vec![follower], vec![default_pool()]);
    s.nodes = vec![a, b];
    let p = plan(&s);
    assert_eq!(p.summary.scheduled, 1, "{p:#?}");
    assert!(p.node_claims.is_empty(), "{p:#?}");
    let on: Vec<&str> = (p.existing_nodes.iter())
        .filter(|e| e.pods.iter().any(|x| x.ends_with("cache")))
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(on, vec!["n-b"]);
}

#[test]
fn existing_pods_anti_affinity_repels_new_pods() {
    let mut guard = pod("guard", "100m", "128Mi");
    guard.node_name = Some("n1".into());
    guard.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", "noisy"))];
    let node = Node {
        name: "n1".into(),
        labels: [(labels::ZONE.to_string(), "test-1a".to_string())].into(),
        allocatable: Resources::new()
            .with("cpu", q("4"))
            .with("memory", q("8Gi"))
            .with("pods", q("10")),
        pods: vec![guard],
        ..Default::default()
    };
    let mut s = state(
        vec![
            labeled(pod("noisy", "100m", "128Mi"), "app", "noisy"),
            pod("quiet", "100m", "128Mi"),
        ],
        vec![default_pool()],
    );
    s.nodes = vec![node];
    let p = plan(&s);
    assert_eq!(p.existing_nodes.len(), 1);
    assert_eq!(p.existing_nodes[0].pods, vec!["default/quiet"]);
    assert_eq!(claim_of(&p, "noisy").pods.len(), 1);
}

#[test]
fn capacity_spread_ratio_example() {
    // scheduling.txt: four spot domains and one on-demand domain give 4:1.
    let spot = pool(
        "spot",
        vec![
            req(labels::CAPACITY_TYPE, Operator::In, &["spot"]),
            req("capacity-spread", Operator::In, &["2", "3", "4", "5"]),
        ],
    );
    let od = pool(
        "on-demand",
        vec![
            req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
            req("capacity-spread", Operator::In, &["1"]),
        ],
    );
    let pods: Vec<Pod> = (0..10)
        .map(|i| {
            let mut p = labeled(pod(&format!("r{i}"), "1", "1Gi"), "app", "r");
            p.topology_spread = vec![spread(
                "capacity-spread",
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", "r"),
            )];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![spot, od]));
    assert_eq!(p.summary.scheduled, 10);
    let mut per_ct: BTreeMap<CapacityType, usize> = BTreeMap::new();
    let mut per_domain: BTreeMap<String, usize> = BTreeMap::new();
    for c in &p.node_claims {
        *per_ct.entry(c.price.capacity_type).or_default() += c.pods.len();
        *per_domain
            .entry(c.labels["capacity-spread"].clone())
            .or_default() += c.pods.len();
    }
    assert_eq!(per_domain.values().copied().collect::<Vec<_>>(), vec![2; 5]);
    assert_eq!(per_ct[&CapacityType::Spot], 8);
    assert_eq!(per_ct[&CapacityType::OnDemand], 2);
}

#[test]
fn capacity_type_spread() {
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = labeled(pod(&format!("c{i}"), "1", "1Gi"), "app", "c");
            p.topology_spread = vec![spread(
                labels::CAPACITY_TYPE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", "c"),
            )];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    let mut per_ct: BTreeMap<CapacityType, usize> = BTreeMap::new();
    for c in &p.node_claims {
        assert_eq!(c.capacity_types.len(), 1);
        *per_ct.entry(c.capacity_types[0]).or_default() += c.pods.len();
    }
    assert_eq!(per_ct[&CapacityType::Spot], 2);
    assert_eq!(per_ct[&CapacityType::OnDemand], 2);
}

#[test]
fn existing_nodes_are_filled_first_and_respect_taints() {
    let mk_node = |name: &str, taint: bool| Node {
        name: name.into(),
        labels: [(labels::ZONE.to_string(), "test-1a".to_string())].into(),
        taints: if taint {
            vec![Taint {
                key: "dedicated".into(),
                value: "db".into(),
                effect: TaintEffect::NoSchedule,
            }]
        } else {
            vec![]
        },
        allocatable: Resources::new()
            .with("cpu", q("2"))
            .with("memory", q("4Gi"))
            .with("pods", q("10")),
        ..Default::default()
    };
    let mut s = state(
        vec![
            pod("a", "1", "1Gi"),
            pod("b", "1", "1Gi"),
            pod("c", "1", "1Gi"),
        ],
        vec![default_pool()],
    );
    s.nodes = vec![mk_node("free", false), mk_node("tainted", true)];
    let p = plan(&s);
    assert_eq!(p.existing_nodes.len(), 1);
    assert_eq!(p.existing_nodes[0].name, "free");
    assert_eq!(p.existing_nodes[0].pods.len(), 2);
    assert_eq!(p.node_claims.len(), 1);
    assert_eq!(p.node_claims[0].pods.len(), 1);
}

#[test]
fn heavier_node_pool_wins() {
    let mut heavy = pool("heavy", vec![req(labels::ARCH, Operator::In, &["amd64"])]);
    heavy.weight = 50;
    let light = pool("light", vec![]);
    let p = plan(&state(vec![pod("a", "1", "1Gi")], vec![light, heavy]));
    assert_eq!(p.node_claims[0].node_pool, "heavy");
}

#[test]
fn limits_are_never_exceeded_and_overflow_goes_to_the_next_pool() {
    let mut limited = pool("limited", vec![]);
    limited.weight = 10;
    limited.limits = Some(Resources::new().with("cpu", q("4")).into());
    let fallback = pool("fallback", vec![]);
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = labeled(pod(&format!("x{i}"), "1", "1Gi"), "app", "x");
            p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", "x"))];
            p
        })
        .collect();
    let p = plan(&state(pods.clone(), vec![limited.clone(), fallback]));
    let limited_claims: Vec<_> = p
        .node_claims
        .iter()
        .filter(|c| c.node_pool == "limited")
        .collect();
    // Every limited NodeClaim must stay within 4 CPUs whatever type EC2 picks.
    let cat = catalog();
    let worst: u32 = limited_claims
        .iter()
        .map(|c| {
            c.instance_types
                .iter()
                .map(|t| cat.get(t).unwrap().info.vcpu)
                .max()
                .unwrap()
        })
        .sum();
    assert!(
        worst <= 4,
        "limited pool could reach {worst} vCPUs: {limited_claims:#?}"
    );
    // The first NodeClaim may still become a 4-vCPU type, which uses the
    // whole limit: the rest overflow to the fallback pool.
    assert_eq!(limited_claims.len(), 1);
    assert_eq!(p.summary.scheduled, 4);
    // Without the fallback, the rest is unschedulable with a limits reason.
    let p = plan(&state(pods, vec![limited]));
    assert_eq!(p.unschedulable.len(), 3);
    assert!(
        p.unschedulable[0].reason.contains("limits"),
        "{}",
        p.unschedulable[0].reason
    );
}

#[test]
fn daemonset_overhead_counts_only_where_it_runs() {
    let ds = DaemonSet {
        namespace: "kube-system".into(),
        name: "agent".into(),
        pod: pod("agent", "500m", "512Mi"),
    };
    let mut tainted = pool("tainted", vec![]);
    tainted.taints = vec![Taint {
        key: "t".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }];
    let mut s = state(vec![pod("a", "1", "1Gi")], vec![default_pool()]);
    s.daemon_sets = vec![ds.clone()];
    let p = plan(&s);
    assert_eq!(p.node_claims[0].resources.requests.cpu(), q("1500m"));

    let mut a = pod("a", "1", "1Gi");
    a.tolerations = vec![Toleration {
        key: "t".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    }];
    let mut s = state(vec![a], vec![tainted]);
    s.daemon_sets = vec![ds];
    let p = plan(&s);
    assert_eq!(
        p.node_claims[0].resources.requests.cpu(),
        q("1"),
        "daemonset does not tolerate the taint"
    );
}

#[test]
fn a_pod_that_tolerates_a_taint_still_finds_the_nodeclaim_its_request_twin_could_not_use() {
    // The walk drops a NodeClaim whose taint a pod tolerates at no
    // relaxation from the list of pods like it. Pods with the same
    // requests but the toleration keep their own list: `c` joins `a`'s
    // NodeClaim, the first with room in creation order, after `b` was
    // refused there.
    let mut tainted = pool("tainted", vec![]);
    tainted.weight = 10;
    tainted.taints = vec![Taint {
        key: "t".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }];
    let tolerating = |name: &str| {
        let mut p = pod(name, "250m", "256Mi");
        p.tolerations = vec![Toleration {
            key: "t".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        }];
        p
    };
    let pods = vec![tolerating("a"), pod("b", "250m", "256Mi"), tolerating("c")];
    let p = plan(&state(pods, vec![tainted, default_pool()]));
    assert_eq!(p.summary.scheduled, 3);
    let pods_on = |pool: &str| -> Vec<String> {
        let mut pods: Vec<String> = (p.node_claims.iter())
            .filter(|c| c.node_pool == pool)
            .flat_map(|c| c.pods.iter().cloned())
            .collect();
        pods.sort();
        pods
    };
    assert_eq!(pods_on("tainted"), ["default/a", "default/c"]);
    assert_eq!(pods_on("default"), ["default/b"]);
}

#[test]
fn a_nodeclaim_one_size_class_cannot_use_stays_open_to_another() {
    // Pods with a spread walk their size class's list, which drops a
    // NodeClaim whose requirements refuse the class (`a`'s amd64 one for
    // `b`'s arm64 selector). Pods of the same requests but another
    // selector keep their own list: `c` still joins `a`, `d` joins `b`
    // (the repack keeps pods under hostname spreads where they are).
    let on_arch = |name: &str, arch: &str| {
        let mut p = labeled(pod(name, "100m", "128Mi"), "app", "x");
        p.node_selector = reqs(vec![req(labels::ARCH, Operator::In, &[arch])]);
        p.topology_spread = vec![spread(
            labels::HOSTNAME,
            10,
            WhenUnsatisfiable::DoNotSchedule,
            selector("app", "x"),
        )];
        p
    };
    let pods = vec![
        on_arch("a", "amd64"),
        on_arch("b", "arm64"),
        on_arch("c", "amd64"),
        on_arch("d", "arm64"),
    ];
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 4);
    let mut together: Vec<Vec<String>> = (p.node_claims.iter())
        .map(|c| {
            let mut pods = c.pods.clone();
            pods.sort();
            pods
        })
        .collect();
    together.sort();
    assert_eq!(
        together,
        [["default/a", "default/c"], ["default/b", "default/d"]]
    );
}

#[test]
fn daemonset_overhead_can_push_to_a_larger_type() {
    // 1.8 CPU fits a 2-vCPU type's allocatable alone, not with a 500m daemonset.
    let mut s = state(vec![pod("a", "1800m", "1Gi")], vec![default_pool()]);
    let p = plan(&s);
    assert!(p.node_claims[0]
        .instance_types
        .contains(&"m5.large".to_string()));
    s.daemon_sets = vec![DaemonSet {
        namespace: "ks".into(),
        name: "d".into(),
        pod: pod("d", "500m", "64Mi"),
    }];
    let p = plan(&s);
    assert!(!p.node_claims[0]
        .instance_types
        .contains(&"m5.large".to_string()));
}

#[test]
fn a_pod_joining_a_node_claim_drops_the_types_whose_daemonset_holds_its_port() {
    // The DaemonSet binds host port 8080 on arm64 nodes only. The first
    // pod's NodeClaim may be any type (the arm64 m6g.large is cheapest);
    // the pod asking for 8080 joins it, and the NodeClaim keeps only the
    // types where no DaemonSet holds that port.
    let mut agent = pod("agent", "100m", "64Mi");
    agent.host_ports = vec![("TCP".into(), 8080)];
    agent
        .node_selector
        .add(req(labels::ARCH, Operator::In, &["arm64"]));
    let mut web = pod("web", "100m", "128Mi");
    web.host_ports = vec![("TCP".into(), 8080)];
    let mut s = state(vec![pod("big", "1", "1Gi"), web], vec![default_pool()]);
    s.daemon_sets = vec![DaemonSet {
        namespace: "kube-system".into(),
        name: "agent".into(),
        pod: agent,
    }];
    let p = plan(&s);
    assert_eq!(p.node_claims.len(), 1, "{p:#?}");
    let c = &p.node_claims[0];
    assert_eq!(c.pods.len(), 2);
    assert!(
        c.instance_types.iter().all(|t| t != "m6g.large"),
        "{:?}",
        c.instance_types
    );
}

#[test]
fn volume_topology_pins_the_zone() {
    let mut a = pod("a", "1", "1Gi");
    a.pvc_names = vec!["data".into()];
    let mut s = state(vec![a.clone()], vec![default_pool()]);
    s.pvcs = vec![PersistentVolumeClaim {
        namespace: "default".into(),
        name: "data".into(),
        storage_class: Some("ebs".into()),
        volume_name: None,
        deleting: false,
        lost: false,
    }];
    s.storage_classes = vec![StorageClass {
        name: "ebs".into(),
        provisioner: "ebs.csi.aws.com".into(),
        binding_mode: VolumeBindingMode::WaitForFirstConsumer,
        allowed_topologies: vec![reqs(vec![req(
            labels::ZONE,
            Operator::In,
            &["test-1b", "test-1c"],
        )])],
        is_default: false,
    }];
    let p = plan(&s);
    assert_eq!(p.node_claims[0].zones, vec!["test-1b", "test-1c"]);

    // Once bound, the PV's zone wins.
    s.pvcs[0].volume_name = Some("pv-1".into());
    s.pvs = vec![PersistentVolume {
        name: "pv-1".into(),
        node_affinity: vec![reqs(vec![req(labels::ZONE, Operator::In, &["test-1c"])])],
        local_or_host_path: false,
        deleting: false,
    }];
    let p = plan(&s);
    assert_eq!(p.node_claims[0].zones, vec!["test-1c"]);

    // A missing claim: the pod waits for it, and says so.
    s.pvcs.clear();
    let p = plan(&s);
    assert!(p.node_claims.is_empty());
    assert!(p.unschedulable[0]
        .reason
        .contains("default/data does not exist"));
}

/// Karpenter's "Volume Topology Requirements" cases (provisioning
/// suite_test.go) and the kube-scheduler's unbound-immediate rule, as a
/// table: each row is a claim (bound or not, with its class) and where the
/// pod with it may go.
#[test]
fn volume_topology_table() {
    struct Case {
        name: &'static str,
        class: Option<&'static str>,
        /// The claim's bound volume: (hostname or zone affinity terms, local?)
        volume: Option<(Vec<Requirements>, bool)>,
        /// The pod's own zone requirement.
        pod_zones: Option<&'static [&'static str]>,
        /// Zones of the pod's NodeClaim; None: unschedulable, reason contains.
        expect: Result<&'static [&'static str], &'static str>,
        /// `pvc-deleting`, `pvc-lost`, `pv-deleting` or empty.
        marks: &'static str,
    }
    let zone = |z: &[&str]| reqs(vec![req(labels::ZONE, Operator::In, z)]);
    let host = |h: &str| reqs(vec![req(labels::HOSTNAME, Operator::In, &[h])]);
    let cases = [
        Case {
            name: "should schedule to storage class zones if volume does not exist",
            class: Some("wffc"),
            volume: None,
            pod_zones: Some(&["test-1a", "test-1c"]),
            expect: Ok(&["test-1c"]),
            marks: "",
        },
        Case {
            name: "should not schedule if storage class zones are incompatible",
            class: Some("wffc"),
            volume: None,
            pod_zones: Some(&["test-1a"]),
            expect: Err(""),
            marks: "",
        },
        Case {
            name: "OR'd allowedTopologies: the term the pod can use",
            class: Some("two-terms"),
            volume: None,
            pod_zones: Some(&["test-1a"]),
            expect: Ok(&["test-1a"]),
            marks: "",
        },
        Case {
            name: "should schedule to volume zones if volume already bound",
            class: Some("wffc"),
            volume: Some((vec![zone(&["test-1c"])], false)),
            pod_zones: None,
            expect: Ok(&["test-1c"]),
            marks: "",
        },
        Case {
            name: "OR'd PV node affinity: the term the pod can use",
            class: Some("wffc"),
            volume: Some((vec![zone(&["test-1c"]), zone(&["test-1a"])], false)),
            pod_zones: Some(&["test-1a", "test-1b"]),
            expect: Ok(&["test-1a"]),
            marks: "",
        },
        Case {
            name: "should not schedule if volume zones are incompatible",
            class: Some("wffc"),
            volume: Some((vec![zone(&["test-1c"])], false)),
            pod_zones: Some(&["test-1a"]),
            expect: Err(""),
            marks: "",
        },
        Case {
            name: "should schedule with an empty storage class if the pvc is bound",
            class: Some(""),
            volume: Some((vec![], false)),
            pod_zones: None,
            expect: Ok(&ZONES),
            marks: "",
        },
        Case {
            name: "should not schedule with an empty storage class if the pvc is not bound",
            class: Some(""),
            volume: None,
            pod_zones: None,
            expect: Err("has no StorageClass and is not bound"),
            marks: "",
        },
        Case {
            name: "should schedule with a missing storage class if the pvc is bound",
            class: Some("missing"),
            volume: Some((vec![], false)),
            pod_zones: None,
            expect: Ok(&ZONES),
            marks: "",
        },
        Case {
            name: "should not schedule with a missing storage class if the pvc is not bound",
            class: Some("missing"),
            volume: None,
            pod_zones: None,
            expect: Err("StorageClass missing of claim default/data does not exist"),
            marks: "",
        },
        Case {
            name: "unbound claim of an Immediate class waits for its volume",
            class: Some("immediate"),
            volume: None,
            pod_zones: None,
            expect: Err("binds Immediate"),
            marks: "",
        },
        Case {
            name: "unbound claim of the default class (Immediate) waits",
            class: None,
            volume: None,
            pod_zones: None,
            expect: Err("binds Immediate"),
            marks: "",
        },
        Case {
            name: "should ignore hostname affinity scheduling when using local path volumes",
            class: Some("wffc"),
            volume: Some((vec![host("gone-node")], true)),
            pod_zones: None,
            expect: Ok(&ZONES),
            marks: "",
        },
        Case {
            name: "should not ignore hostname affinity when using non-local path volumes",
            class: Some("wffc"),
            volume: Some((vec![host("gone-node")], false)),
            pod_zones: None,
            expect: Err(""),
            marks: "",
        },
        Case {
            name: "should not launch nodes for pod with deleting persistentVolumeClaim",
            class: Some("wffc"),
            volume: None,
            pod_zones: None,
            expect: Err("is being deleted"),
            marks: "pvc-deleting",
        },
        Case {
            name: "should not launch nodes for pod with Lost persistentVolumeClaim",
            class: Some("wffc"),
            volume: None,
            pod_zones: None,
            expect: Err("is Lost"),
            marks: "pvc-lost",
        },
        Case {
            name: "should not launch nodes for pod with bound persistentVolume that is marked for deletion",
            class: Some("wffc"),
            volume: Some((vec![], false)),
            pod_zones: None,
            expect: Err("is being deleted"),
            marks: "pv-deleting",
        },
    ];
    let class = |name: &str, mode: VolumeBindingMode, terms: Vec<Requirements>, default: bool| {
        StorageClass {
            name: name.into(),
            provisioner: "ebs.csi.aws.com".into(),
            binding_mode: mode,
            allowed_topologies: terms,
            is_default: default,
        }
    };
    let mut failures = vec![];
    for c in &cases {
        let mut a = pod("a", "1", "1Gi");
        a.pvc_names = vec!["data".into()];
        if let Some(z) = c.pod_zones {
            a.node_selector = zone(z);
        }
        let other = pod("other", "1", "1Gi");
        let mut s = state(vec![a, other], vec![default_pool()]);
        s.storage_classes = vec![
            class(
                "wffc",
                VolumeBindingMode::WaitForFirstConsumer,
                vec![zone(&["test-1b", "test-1c"])],
                false,
            ),
            class(
                "two-terms",
                VolumeBindingMode::WaitForFirstConsumer,
                vec![zone(&["test-1c"]), zone(&["test-1a"])],
                false,
            ),
            class("immediate", VolumeBindingMode::Immediate, vec![], true),
        ];
        s.pvcs = vec![PersistentVolumeClaim {
            namespace: "default".into(),
            name: "data".into(),
            storage_class: c.class.map(String::from),
            volume_name: c.volume.as_ref().map(|_| "pv-1".to_string()),
            deleting: c.marks == "pvc-deleting",
            lost: c.marks == "pvc-lost",
        }];
        if let Some((terms, local)) = &c.volume {
            s.pvs = vec![PersistentVolume {
                name: "pv-1".into(),
                node_affinity: terms.clone(),
                local_or_host_path: *local,
                deleting: c.marks == "pv-deleting",
            }];
        }
        let p = plan(&s);
        // Only the pod with the claim is affected.
        if !p
            .node_claims
            .iter()
            .any(|n| n.pods.contains(&"default/other".to_string()))
        {
            failures.push(format!("{}: the other pod was not planned", c.name));
        }
        let got = p
            .node_claims
            .iter()
            .find(|n| n.pods.contains(&"default/a".to_string()));
        match (
            &c.expect,
            got,
            p.unschedulable.iter().find(|u| u.pod == "default/a"),
        ) {
            (Ok(zones), Some(n), _) if n.zones == *zones => {}
            (Err(reason), None, Some(u)) if u.reason.contains(reason) => {}
            (_, n, u) => failures.push(format!(
                "{}: got {:?} / {:?}",
                c.name,
                n.map(|n| &n.zones),
                u.map(|u| &u.reason)
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn gpu_requests_and_reasons() {
    let mut g = pod("train", "1", "1Gi");
    g.requests.set("nvidia.com/gpu", q("2"));
    let p = plan(&state(vec![g.clone()], vec![default_pool()]));
    assert_eq!(*p.node_claims[0].instance_types, vec!["g4.8xlarge"]);
    g.requests.set("nvidia.com/gpu", q("16"));
    let gpu_pool = pool("gpu", vec![]);
    let p = plan(&state(vec![g], vec![gpu_pool]));
    let r = &p.unschedulable[0].reason;
    assert!(
        r.contains("no instance type in NodePool \"gpu\" has 16 nvidia.com/gpu"),
        "{r}"
    );
    assert!(r.contains("largest allocatable: 4"), "{r}");
}

#[test]
fn unknown_extended_resource_is_explained() {
    let mut g = pod("fpga", "1", "1Gi");
    g.requests.set("xilinx.com/fpga", q("1"));
    let p = plan(&state(vec![g], vec![default_pool()]));
    assert!(
        p.unschedulable[0].reason.contains("xilinx.com/fpga"),
        "{}",
        p.unschedulable[0].reason
    );
}

#[test]
fn gt_lt_on_instance_labels() {
    let mut a = pod("a", "100m", "128Mi");
    a.node_selector = reqs(vec![
        req(labels::INSTANCE_CPU, Operator::Gt, &["2"]),
        req(labels::INSTANCE_MEMORY, Operator::Lt, &["20000"]),
    ]);
    let p = plan(&state(vec![a], vec![default_pool()]));
    assert_eq!(*p.node_claims[0].instance_types, vec!["m5.xlarge"]);
}

#[test]
fn node_pool_requirements_restrict_types() {
    let np = pool(
        "default",
        vec![
            req(labels::INSTANCE_FAMILY, Operator::In, &["m5"]),
            req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
        ],
    );
    let p = plan(&state(vec![pod("a", "100m", "128Mi")], vec![np]));
    assert!(p.node_claims[0]
        .instance_types
        .iter()
        .all(|t| t.starts_with("m5.")));
    assert_eq!(p.node_claims[0].instance_types[0], "m5.large");
}

#[test]
fn unavailable_offerings_are_skipped() {
    let np = pool(
        "default",
        vec![req(labels::ZONE, Operator::In, &["test-1a"])],
    );
    let s = state(vec![pod("a", "100m", "128Mi")], vec![np]);
    let mut opts = SchedulerOptions::default();
    opts.unavailable
        .insert(("m6g.large".into(), "test-1a".into(), CapacityType::Spot));
    let p = schedule(&s, &catalog(), &opts);
    let c = &p.node_claims[0];
    // m6g.large is still possible on-demand, but the spot pick moves on.
    assert_eq!(c.price.capacity_type, CapacityType::Spot);
    assert_eq!(c.price.instance_type, "c5.large");
}

#[test]
fn max_pods_caps_pods_per_node_including_daemonsets() {
    let mut np = default_pool();
    np.kubelet.max_pods = Some(3);
    let mut s = state(
        (0..4)
            .map(|i| pod(&format!("p{i}"), "10m", "16Mi"))
            .collect(),
        vec![np],
    );
    s.daemon_sets = vec![DaemonSet {
        namespace: "ks".into(),
        name: "d".into(),
        pod: pod("d", "10m", "16Mi"),
    }];
    let p = plan(&s);
    assert_eq!(p.node_claims.len(), 2);
    assert!(p.node_claims.iter().all(|c| c.pods.len() <= 2));
}

#[test]
fn host_ports_conflict_on_a_node() {
    let mk = |n: &str| {
        let mut p = pod(n, "100m", "128Mi");
        p.host_ports = vec![("TCP".into(), 8080)];
        p
    };
    let p = plan(&state(vec![mk("a"), mk("b")], vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 2);
}

/// Pods of one size with a zone spread (no shape: they walk their size
/// class's NodeClaims), half with host port 8080, half with 9090: the
/// NodeClaims one port refused stay open to the other port's pods (host
/// ports are part of the size class), and no node holds a port twice.
#[test]
fn host_port_refusals_hold_only_for_the_same_ports() {
    let mk = |n: usize| {
        let mut p = labeled(pod(&format!("p{n}"), "100m", "128Mi"), "app", "web");
        p.host_ports = vec![("TCP".into(), if n % 2 == 0 { 8080 } else { 9090 })];
        p.topology_spread = vec![spread(
            labels::ZONE,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            selector("app", "web"),
        )];
        p
    };
    let pods: Vec<Pod> = (0..24).map(mk).collect();
    let ports: BTreeMap<String, i32> = pods
        .iter()
        .map(|p| (format!("default/{}", p.name), p.host_ports[0].1))
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 24, "{:?}", p.unschedulable);
    for c in &p.node_claims {
        let mut seen = BTreeSet::new();
        for pod in c.pods.iter() {
            assert!(
                seen.insert(ports[pod]),
                "{} holds port {} twice",
                c.name,
                ports[pod]
            );
        }
    }
    // Each node holds one pod of each port.
    assert_eq!(p.node_claims.len(), 12, "{:#?}", p.node_claims);
}

#[test]
fn overlay_price_adjustment_reorders_types() {
    let mut s = state(vec![pod("a", "100m", "128Mi")], vec![default_pool()]);
    let p = plan(&s);
    assert_eq!(p.node_claims[0].instance_types[0], "m6g.large");
    s.overlays = vec![NodeOverlay {
        name: "prefer-c5".into(),
        weight: 1,
        requirements: reqs(vec![req(labels::INSTANCE_FAMILY, Operator::In, &["m5"])]),
        price_adjustment: Some(PriceAdjustment::Percent(-90.0)),
        price: None,
        capacity: Resources::new(),
    }];
    let p = plan(&s);
    assert_eq!(p.node_claims[0].instance_types[0], "m5.large");
    // The reported price stays the real one.
    assert!((p.node_claims[0].price.min - 0.096 * 0.4).abs() < 1e-9);
}

#[test]
fn no_node_pools_is_explained() {
    let p = plan(&state(vec![pod("a", "1", "1Gi")], vec![]));
    assert!(p.unschedulable[0].reason.contains("no NodePool"));
}

#[test]
fn plans_are_deterministic() {
    let mut pods = vec![];
    for i in 0..40 {
        let mut p = labeled(
            pod(&format!("p{i}"), ["100m", "1", "2500m"][i % 3], "512Mi"),
            "app",
            ["a", "b"][i % 2],
        );
        if i % 2 == 0 {
            p.topology_spread = vec![spread(
                labels::ZONE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", "a"),
            )];
        }
        pods.push(p);
    }
    let s = state(pods, vec![default_pool()]);
    let a = serde_json::to_string(&plan(&s)).unwrap();
    let b = serde_json::to_string(&plan(&s)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn cost_rule_opens_a_new_node_instead_of_a_pricier_type() {
    // Two 1-CPU pods: together they need a 4-vCPU type (0.192 × 0.4) which
    // costs more than a second 2-vCPU node (0.085 × 0.4): two nodes win.
    let p = plan(&state(
        vec![pod("a", "1", "1Gi"), pod("b", "1", "1Gi")],
        vec![default_pool()],
    ));
    assert_eq!(p.node_claims.len(), 2);
    assert!(
        (p.summary.hourly_price - 2.0 * 0.077 * 0.4).abs() < 1e-9,
        "{}",
        p.summary.hourly_price
    );
    // Karpenter's packing would have produced one m5.xlarge at 0.0768/h.
}

#[test]
fn cost_rule_never_costs_a_pod_its_place() {
    // The pool's limit allows a single node; the second pod must join the
    // first NodeClaim even though a node of its own would be cheaper.
    let mut np = default_pool();
    np.limits = Some(Resources::new().with("cpu", q("4")).into());
    np.requirements.add(req(
        labels::INSTANCE_TYPE,
        Operator::In,
        &["m5.large", "m5.xlarge"],
    ));
    let p = plan(&state(
        vec![pod("a", "1", "1Gi"), pod("b", "1", "1Gi")],
        vec![np],
    ));
    assert_eq!(p.summary.scheduled, 2, "{p:#?}");
    assert_eq!(p.node_claims.len(), 1);
}

#[test]
fn preferred_pod_anti_affinity_is_honoured_then_relaxed() {
    let mk = |i: usize| {
        let mut p = labeled(pod(&format!("s{i}"), "100m", "128Mi"), "app", "s");
        p.preferred_pod_anti_affinity = vec![WeightedPodAffinityTerm {
            weight: 10,
            term: term(labels::HOSTNAME, selector("app", "s")),
        }];
        p
    };
    let pods: Vec<Pod> = (0..3).map(mk).collect();
    let p = plan(&state(pods.clone(), vec![default_pool()]));
    assert_eq!(p.node_claims.len(), 3, "preference honoured while possible");
    // A limit that allows a single small node: the preference gives way.
    let mut np = default_pool();
    np.limits = Some(Resources::new().with("cpu", q("2")).into());
    let p = plan(&state(pods, vec![np]));
    assert_eq!(p.summary.scheduled, 3, "{p:#?}");
    assert_eq!(p.node_claims.len(), 1);
}

#[test]
fn preferred_pod_affinity_pulls_pods_together() {
    let mut target = labeled(pod("db", "100m", "128Mi"), "app", "db");
    target.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &["test-1c"])]);
    // Tried first (larger), and barred from the db's node, the follower
    // must wait for the db to be placed to honour its preference.
    let mut follower = pod("web", "2", "1Gi");
    follower.preferred_pod_affinity = vec![WeightedPodAffinityTerm {
        weight: 50,
        term: term(labels::ZONE, selector("app", "db")),
    }];
    follower.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", "db"))];
    let p = plan(&state(vec![follower, target], vec![default_pool()]));
    assert_ne!(claim_of(&p, "web").name, claim_of(&p, "db").name);
    assert_eq!(claim_of(&p, "web").zones, vec!["test-1c"]);
}

#[test]
fn efficiency_rule_grows_into_the_best_price_per_slot() {
    // One tiny type holds 1 pod, a larger one of the same family holds 3 for
    // a little more than two tiny ones' price step: with 6 pods waiting,
    // growing into the larger type beats a node per pod.
    let mut tiny = info("t9.nano", "arm64", 2, 1024, 0);
    tiny.max_network_interfaces = 1;
    tiny.ipv4_per_interface = 3; // 1 * (3 - 1) + 2 = 4 pods: 1 daemonset + 3... limited by memory below
    let big = info("t9.small", "arm64", 2, 4096, 0);
    let mk = |info: InstanceTypeInfo, price: f64| CatalogEntry {
        info,
        offerings: vec![Offering {
            zone: "test-1a".into(),
            capacity_type: CapacityType::OnDemand,
            price,
            available: UNLIMITED,
            reservation: None,
        }],
    };
    let cat = Catalog {
        region: "test-1".into(),
        zones: vec!["test-1a".into()],
        entries: vec![mk(tiny, 0.010), mk(big, 0.021)],
        source: "test".into(),
    };
    let pods: Vec<Pod> = (0..6)
        .map(|i| pod(&format!("p{i}"), "100m", "300Mi"))
        .collect();
    let np = pool(
        "default",
        vec![req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])],
    );
    let p = schedule(&state(pods, vec![np]), &cat, &SchedulerOptions::default());
    assert_eq!(p.summary.scheduled, 6);
    // The marginal rule alone: 0.021 - 0.010 > 0.010 keeps one pod per tiny
    // node ($0.06/h); the efficiency rule packs into t9.small nodes.
    assert!(
        p.node_claims
            .iter()
            .all(|c| c.price.instance_type == "t9.small"),
        "{p:#?}"
    );
    assert!(p.summary.hourly_price < 0.06, "{}", p.summary.hourly_price);
}

// ---- Capacity reservations (ReservedCapacity gate) ----

fn reservation(id: &str, ty: &str, zone: &str, n: u32) -> CapacityReservation {
    CapacityReservation {
        id: id.into(),
        instance_type: ty.into(),
        availability_zone: zone.into(),
        total_instance_count: n,
        available_instance_count: n,
        state: "active".into(),
        instance_match_criteria: "targeted".into(),
        reservation_type: ReservationType::Default,
        platform: "Linux/UNIX".into(),
        tenancy: "default".into(),
        owner_id: "111122223333".into(),
        end_date: None,
        tags: BTreeMap::new(),
    }
}

fn reserving_class(terms: serde_json::Value) -> NodeClass {
    NodeClass {
        name: "default".into(),
        kind: "EC2NodeClass".into(),
        ami_family: AmiFamily::AL2023,
        root_volume_size: None,
        volumes: None,
        template_hash: None,
        status: Default::default(),
        spec: serde_json::json!({ "capacityReservationSelectorTerms": terms }),
    }
}

/// A NodePool on the `default` NodeClass allowing `capacity_types`.
fn reserving_pool(capacity_types: &[&str], extra: Vec<Requirement>) -> NodePool {
    let mut rs = vec![req(labels::CAPACITY_TYPE, Operator::In, capacity_types)];
    rs.extend(extra);
    let mut np = pool("default", rs);
    np.node_class = Some("default".into());
    np
}

fn reserved_state(
    pods: Vec<Pod>,
    np: NodePool,
    terms: serde_json::Value,
    reservations: Vec<CapacityReservation>,
) -> ClusterState {
    ClusterState {
        node_classes: vec![reserving_class(terms)],
        capacity_reservations: reservations,
        ..state(pods, vec![np])
    }
}

fn gate_on() -> SchedulerOptions {
    SchedulerOptions {
        reserved_capacity: true,
        ..SchedulerOptions::default()
    }
}

fn reserved_claims(p: &Plan) -> Vec<&NodeClaimPlan> {
    p.node_claims
        .iter()
        .filter(|c| c.capacity_types == vec![CapacityType::Reserved])
        .collect()
}

fn whole_node_pods(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| pod(&format!("p{i}"), "1500m", "1Gi"))
        .collect()
}

fn m5_large_only() -> Vec<Requirement> {
    vec![req(labels::INSTANCE_TYPE, Operator::In, &["m5.large"])]
}

#[test]
fn reservation_of_n_takes_exactly_n_node_claims_then_falls_back() {
    let s = reserved_state(
        whole_node_pods(5),
        reserving_pool(&["reserved", "spot", "on-demand"], m5_large_only()),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1b", 2)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(p.summary.scheduled, 5);
    assert_eq!(p.node_claims.len(), 5);
    let reserved = reserved_claims(&p);
    assert_eq!(reserved.len(), 2, "{p:#?}");
    // Reserved first: the first NodeClaims take the reservation.
    assert_eq!(reserved[0].name, p.node_claims[0].name);
    assert_eq!(reserved[1].name, p.node_claims[1].name);
    for c in &p.node_claims[2..] {
        assert!(
            !c.capacity_types.contains(&CapacityType::Reserved),
            "{c:#?}"
        );
        assert_eq!(c.price.capacity_type, CapacityType::Spot);
        assert!(!c.labels.contains_key(labels::CAPACITY_RESERVATION_ID));
    }
    assert_eq!(
        p.reservations,
        vec![crate::plan::ReservationUse {
            id: "cr-1".into(),
            instance_type: "m5.large".into(),
            zone: "test-1b".into(),
            reservation_type: "default".into(),
            instance_match_criteria: "targeted".into(),
            available: 2,
            used: 2,
        }]
    );
    // The service's counter caps the reservation: 1 instance left.
    let opts = SchedulerOptions {
        reservation_available: Some([("cr-1".to_string(), 1)].into()),
        ..gate_on()
    };
    let p = schedule(&s, &catalog(), &opts);
    assert_eq!(reserved_claims(&p).len(), 1);
    assert_eq!(p.node_claims.len(), 5);
    assert_eq!(
        (p.reservations[0].available, p.reservations[0].used),
        (1, 1)
    );
}

/// Plans made with a [`Prepared`] are the plans [`schedule`] makes: for
/// the state it was made of (twice: a reservation that runs out in one
/// run leaves the shared views as they were), for the same NodePools
/// with other nodes and pods, and (made afresh) under options or
/// NodePools it was not made for.
#[test]
fn a_prepared_cluster_plans_as_a_fresh_one() {
    let s = reserved_state(
        whole_node_pods(5),
        reserving_pool(&["reserved", "spot", "on-demand"], m5_large_only()),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1b", 2)],
    );
    let json = |p: &Plan| serde_json::to_string(p).unwrap_or_default();
    let prepared = Prepared::new(&s, &catalog(), &gate_on());
    let fresh = json(&schedule(&s, &catalog(), &gate_on()));
    assert_eq!(
        reserved_claims(&schedule(&s, &catalog(), &gate_on())).len(),
        2
    );
    for _ in 0..2 {
        assert_eq!(
            json(&schedule_prepared(&s, &catalog(), &gate_on(), &prepared)),
            fresh
        );
    }
    let mut other = s.clone();
    other.pending_pods.truncate(3);
    other.nodes.push(existing_node(
        "test-1a",
        ["4", "8Gi", "10"],
        false,
        pod("bound", "1", "1Gi"),
    ));
    assert_eq!(
        json(&schedule_prepared(
            &other,
            &catalog(),
            &gate_on(),
            &prepared
        )),
        json(&schedule(&other, &catalog(), &gate_on()))
    );
    let gate_off = SchedulerOptions::default();
    assert_eq!(
        json(&schedule_prepared(&s, &catalog(), &gate_off, &prepared)),
        json(&schedule(&s, &catalog(), &gate_off))
    );
    let mut renamed = s.clone();
    renamed.node_pools[0].name = "renamed".into();
    assert_eq!(
        json(&schedule_prepared(
            &renamed,
            &catalog(),
            &gate_on(),
            &prepared
        )),
        json(&schedule(&renamed, &catalog(), &gate_on()))
    );
}

#[test]
fn reserved_node_claims_carry_the_reservation_labels() {
    let mut block = reservation("cr-blk", "m5.xlarge", "test-1c", 1);
    block.reservation_type = ReservationType::CapacityBlock;
    let s = reserved_state(
        vec![pod("a", "3", "1Gi")],
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-blk"}]),
        vec![block],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    let c = &p.node_claims[0];
    let label = |k: &str| c.labels.get(k).map(String::as_str);
    assert_eq!(label(labels::CAPACITY_TYPE), Some("reserved"));
    assert_eq!(label(labels::CAPACITY_RESERVATION_ID), Some("cr-blk"));
    assert_eq!(
        label(labels::CAPACITY_RESERVATION_TYPE),
        Some("capacity-block")
    );
    assert_eq!(label(labels::ZONE), Some("test-1c"));
    assert_eq!(label(labels::INSTANCE_TYPE), Some("m5.xlarge"));
    assert_eq!(*c.instance_types, vec!["m5.xlarge".to_string()]);
    // Priced as on-demand (the RFC), taken before cheaper spot.
    assert_eq!(c.price.capacity_type, CapacityType::Reserved);
    assert_eq!(c.price.min, 0.192);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["reservations"][0]["used"], 1);
    assert_eq!(json["reservations"][0]["reservationType"], "capacity-block");
}

#[test]
fn open_and_targeted_reservations_are_used_only_when_selected() {
    let mut open = reservation("cr-open", "m5.large", "test-1a", 1);
    open.instance_match_criteria = "open".into();
    let targeted = reservation("cr-targeted", "m5.large", "test-1b", 1);
    let run = |terms| {
        let s = reserved_state(
            whole_node_pods(3),
            reserving_pool(&["reserved", "on-demand"], m5_large_only()),
            terms,
            vec![open.clone(), targeted.clone()],
        );
        schedule(&s, &catalog(), &gate_on())
    };
    let ids = |p: &Plan| {
        let mut v: Vec<String> = reserved_claims(p)
            .iter()
            .map(|c| c.labels[labels::CAPACITY_RESERVATION_ID].clone())
            .collect();
        v.sort();
        v
    };
    let p = run(serde_json::json!([{"id": "cr-open"}, {"id": "cr-targeted"}]));
    assert_eq!(ids(&p), vec!["cr-open", "cr-targeted"]);
    let p = run(serde_json::json!([{"id": "cr-targeted"}]));
    assert_eq!(ids(&p), vec!["cr-targeted"]);
    // An open ODCR is never used implicitly: not selected, not reserved.
    let p = run(serde_json::json!([{"tags": {"team": "other"}}]));
    assert!(ids(&p).is_empty());
    assert!(p.reservations.is_empty());
    let p = run(serde_json::Value::Null);
    assert!(ids(&p).is_empty());
    assert_eq!(p.node_claims.len(), 3);
}

#[test]
fn mismatched_reservations_are_ignored() {
    let base = reservation("cr-x", "m5.large", "test-1a", 3);
    let mut cases = vec![];
    let mut r = base.clone();
    r.platform = "Windows".into();
    cases.push(r);
    let mut r = base.clone();
    r.tenancy = "dedicated".into();
    cases.push(r);
    let mut r = base.clone();
    r.availability_zone = "elsewhere-1a".into();
    cases.push(r);
    let mut r = base.clone();
    r.state = "expired".into();
    cases.push(r);
    let mut r = base.clone();
    r.instance_type = "z9.nonexistent".into();
    cases.push(r);
    for r in cases {
        let s = reserved_state(
            whole_node_pods(1),
            reserving_pool(&["reserved", "on-demand"], vec![]),
            serde_json::json!([{"id": "cr-x"}]),
            vec![r.clone()],
        );
        let p = schedule(&s, &catalog(), &gate_on());
        assert!(reserved_claims(&p).is_empty(), "{r:?}");
        assert!(p.reservations.is_empty(), "{r:?}");
        assert_eq!(p.summary.scheduled, 1);
    }
    // The same reservation, matching, is used.
    let s = reserved_state(
        whole_node_pods(1),
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-x"}]),
        vec![base],
    );
    assert_eq!(
        reserved_claims(&schedule(&s, &catalog(), &gate_on())).len(),
        1
    );
}

#[test]
fn gate_off_ignores_reservations() {
    let s = reserved_state(
        whole_node_pods(2),
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 2)],
    );
    let p = schedule(&s, &catalog(), &SchedulerOptions::default());
    assert!(reserved_claims(&p).is_empty());
    assert!(p.reservations.is_empty());
    assert_eq!(p.summary.scheduled, 2);
    // A reserved-only NodePool cannot launch anything with the gate off.
    let s = reserved_state(
        whole_node_pods(1),
        reserving_pool(&["reserved"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 2)],
    );
    let p = schedule(&s, &catalog(), &SchedulerOptions::default());
    assert_eq!(p.unschedulable.len(), 1);
    assert!(
        p.unschedulable[0]
            .reason
            .contains("ReservedCapacity feature gate is off"),
        "{}",
        p.unschedulable[0].reason
    );
}

/// A pod pending because the ReservedCapacity gate is off says so: it asks
/// for reserved capacity (or a reservation), or every NodePool offers only
/// reserved capacity; any other pending pod does not.
#[test]
fn pods_pending_for_the_reserved_capacity_gate_say_so() {
    let ct = |v: &[&str]| req(labels::CAPACITY_TYPE, Operator::In, v);
    let big = || pod("big", "500", "1Gi");
    // (pods, pool capacity types, pending pod, reason names the gate)
    let cases: Vec<(Pod, &[&str], bool)> = vec![
        (
            {
                let mut p = pod("a", "1", "1Gi");
                p.node_selector = reqs(vec![ct(&["reserved"])]);
                p
            },
            &["spot", "on-demand", "reserved"],
            true,
        ),
        (
            {
                let mut p = pod("a", "1", "1Gi");
                p.node_selector = reqs(vec![req(
                    labels::CAPACITY_RESERVATION_ID,
                    Operator::In,
                    &["cr-1"],
                )]);
                p
            },
            &["spot", "on-demand", "reserved"],
            true,
        ),
        (pod("a", "1", "1Gi"), &["reserved"], true),
        (big(), &["spot", "on-demand"], false),
    ];
    for (i, (p, cts, gate)) in cases.into_iter().enumerate() {
        let s = state(vec![p], vec![pool("default", vec![ct(cts)])]);
        let plan = schedule(&s, &catalog(), &SchedulerOptions::default());
        assert_eq!(plan.unschedulable.len(), 1, "case {i}");
        let reason = &plan.unschedulable[0].reason;
        assert_eq!(
            reason.contains("ReservedCapacity feature gate is off"),
            gate,
            "case {i}: {reason}"
        );
    }
}

#[test]
fn a_node_claim_never_drops_its_last_reserved_offering() {
    // Two pods that do not fit one m5.large together. Without the rule the
    // second joins the reserved NodeClaim and grows it into an on-demand
    // m5.xlarge (the cost rule allows it); with it, it opens its own.
    let s = reserved_state(
        vec![pod("a", "1200m", "1Gi"), pod("b", "1200m", "1Gi")],
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 1)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(p.node_claims.len(), 2, "{p:#?}");
    let r = reserved_claims(&p);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].price.instance_type, "m5.large");
    assert_eq!(r[0].pods, vec!["default/a"]);
    assert_eq!(p.node_claims[1].price.capacity_type, CapacityType::OnDemand);
    // Only m5.large and m5.xlarge allowed: growing the reserved m5.large to
    // an m5.xlarge costs $0.096 more, no more than b's own m5.large, so the
    // cost rule alone would let b join; the reserved offering is kept.
    let s = reserved_state(
        vec![pod("a", "1200m", "1Gi"), pod("b", "1200m", "1Gi")],
        reserving_pool(
            &["reserved", "on-demand"],
            vec![req(
                labels::INSTANCE_TYPE,
                Operator::In,
                &["m5.large", "m5.xlarge"],
            )],
        ),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 1)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(p.node_claims.len(), 2, "{p:#?}");
    let r = reserved_claims(&p);
    assert_eq!(r.len(), 1, "{p:#?}");
    assert_eq!(r[0].price.instance_type, "m5.large");
    assert_eq!(*r[0].instance_types, vec!["m5.large".to_string()]);
    assert_eq!(r[0].pods, vec!["default/a"]);
    assert_eq!(p.node_claims[1].price.capacity_type, CapacityType::OnDemand);
    // Pods that fit share the reserved NodeClaim.
    let s = reserved_state(
        vec![pod("a", "500m", "1Gi"), pod("b", "500m", "1Gi")],
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 1)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(p.node_claims.len(), 1);
    assert_eq!(reserved_claims(&p)[0].pods.len(), 2);
}

#[test]
fn pods_requiring_reserved_capacity_report_exhausted_reservations() {
    let reserved_only = || {
        reqs(vec![req(
            labels::CAPACITY_TYPE,
            Operator::In,
            &["reserved"],
        )])
    };
    let mut pods = vec![];
    for name in ["a", "b", "d"] {
        let mut p = pod(name, "1500m", "1Gi");
        p.node_selector = reserved_only();
        pods.push(p);
    }
    let mut c = pod("c", "1500m", "1Gi");
    c.node_selector = reqs(vec![req(
        labels::CAPACITY_RESERVATION_ID,
        Operator::In,
        &["cr-2"],
    )]);
    pods.push(c);
    // Takes any capacity: falls back to spot, no reservation in its story.
    pods.push(pod("e", "1500m", "1Gi"));
    // Requires reserved capacity but fits no reserved type: the used-up
    // reservations are not why.
    let mut f = pod("f", "3", "1Gi");
    f.node_selector = reserved_only();
    pods.push(f);
    let s = reserved_state(
        pods,
        reserving_pool(&["reserved", "spot", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-1"}, {"id": "cr-2"}]),
        vec![
            reservation("cr-1", "m5.large", "test-1a", 1),
            reservation("cr-2", "c5.large", "test-1b", 1),
        ],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    let claim_of = |pod: &str| {
        p.node_claims
            .iter()
            .find(|c| c.pods.contains(&format!("default/{pod}")))
    };
    // Largest first, then by name: a, b, c, d, e. a takes the reservation
    // with the lower on-demand price (c5.large, $0.085 < m5.large $0.096),
    // b the other; c (only cr-2) and d (any reservation) find them used up.
    let a = claim_of("a").unwrap();
    assert_eq!(a.labels[labels::CAPACITY_RESERVATION_ID], "cr-2");
    assert_eq!(a.price.instance_type, "c5.large");
    assert_eq!(
        claim_of("b").unwrap().labels[labels::CAPACITY_RESERVATION_ID],
        "cr-1"
    );
    let e = claim_of("e").unwrap();
    assert_eq!(e.price.capacity_type, CapacityType::Spot);
    assert!(!e.labels.contains_key(labels::CAPACITY_RESERVATION_ID));
    let why = |pod: &str| {
        p.unschedulable
            .iter()
            .find(|u| u.pod == format!("default/{pod}"))
            .map(|u| u.reason.clone())
            .unwrap_or_else(|| panic!("{pod} scheduled: {p:#?}"))
    };
    assert_eq!(p.unschedulable.len(), 3, "{p:#?}");
    let c = why("c");
    assert!(
        c.contains("capacity reservations exhausted: cr-2 (c5.large in test-1b: 1 of 1 available instances planned)"),
        "{c}"
    );
    assert!(!c.contains("cr-1 ("), "{c}");
    let d = why("d");
    assert!(
        d.contains("capacity reservations exhausted: cr-1 (m5.large in test-1a: 1 of 1 available instances planned), cr-2 (c5.large in test-1b: 1 of 1"),
        "{d}"
    );
    let f = why("f");
    assert!(!f.contains("exhausted"), "{f}");
    let use_of = |id: &str| {
        p.reservations
            .iter()
            .find(|r| r.id == id)
            .map(|r| (r.used, r.available))
    };
    assert_eq!(use_of("cr-1"), Some((1, 1)));
    assert_eq!(use_of("cr-2"), Some((1, 1)));
}

#[test]
fn reservations_are_taken_in_on_demand_price_order() {
    // Ids in the opposite order of price: the cheaper type's reservation
    // (m5.large, $0.096 on demand) goes first, then the m5.xlarge one.
    let s = reserved_state(
        whole_node_pods(2),
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-a"}, {"id": "cr-b"}]),
        vec![
            reservation("cr-a", "m5.xlarge", "test-1a", 1),
            reservation("cr-b", "m5.large", "test-1a", 1),
        ],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    let ids: Vec<(&str, &str)> = p
        .node_claims
        .iter()
        .map(|c| {
            (
                c.labels[labels::CAPACITY_RESERVATION_ID].as_str(),
                c.price.instance_type.as_str(),
            )
        })
        .collect();
    assert_eq!(ids, vec![("cr-b", "m5.large"), ("cr-a", "m5.xlarge")]);
    // Priced as on demand in the plan (the RFC's model).
    assert_eq!(p.summary.hourly_price, 0.288);
}

#[test]
fn a_reservation_shared_by_node_pools_is_counted_once() {
    let mut heavy = pool(
        "heavy",
        vec![
            req(labels::CAPACITY_TYPE, Operator::In, &["reserved"]),
            req(labels::INSTANCE_TYPE, Operator::In, &["m5.large"]),
        ],
    );
    heavy.weight = 10;
    heavy.node_class = Some("default".into());
    let light = reserving_pool(&["reserved", "on-demand"], m5_large_only());
    let s = ClusterState {
        node_classes: vec![reserving_class(serde_json::json!([{"id": "cr-1"}]))],
        capacity_reservations: vec![reservation("cr-1", "m5.large", "test-1a", 1)],
        ..state(whole_node_pods(3), vec![light, heavy])
    };
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(p.summary.scheduled, 3, "{p:#?}");
    let r = reserved_claims(&p);
    assert_eq!(r.len(), 1, "{p:#?}");
    assert_eq!(r[0].node_pool, "heavy");
    for c in p.node_claims.iter().filter(|c| c.node_pool == "default") {
        assert_eq!(c.price.capacity_type, CapacityType::OnDemand);
    }
    assert_eq!(p.reservations.len(), 1);
    assert_eq!(
        (p.reservations[0].used, p.reservations[0].available),
        (1, 1)
    );
}

#[test]
fn reserved_only_node_pools_stop_at_the_reservation_and_not_in_reserved_keeps_out() {
    // NodePool `In [reserved]`: exactly the reservation's instances, the
    // rest unschedulable with the reservation named.
    let s = reserved_state(
        whole_node_pods(3),
        reserving_pool(&["reserved"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 2)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(reserved_claims(&p).len(), 2);
    assert_eq!(p.node_claims.len(), 2);
    assert_eq!(p.unschedulable.len(), 1);
    assert!(
        p.unschedulable[0]
            .reason
            .contains("capacity reservations exhausted: cr-1 (m5.large in test-1a: 2 of 2"),
        "{}",
        p.unschedulable[0].reason
    );
    // A pod `NotIn [reserved]` in a NodePool allowing it: on demand.
    let mut od = pod("od", "1500m", "1Gi");
    od.node_selector = reqs(vec![req(
        labels::CAPACITY_TYPE,
        Operator::NotIn,
        &["reserved"],
    )]);
    let s = reserved_state(
        vec![od],
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 2)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert!(reserved_claims(&p).is_empty(), "{p:#?}");
    assert_eq!(p.node_claims[0].price.capacity_type, CapacityType::OnDemand);
    assert_eq!(
        (p.reservations[0].used, p.reservations[0].available),
        (0, 2)
    );
    // A pod asking for a capacity block finds none among ODCRs.
    let mut blk = pod("blk", "1500m", "1Gi");
    blk.node_selector = reqs(vec![req(
        labels::CAPACITY_RESERVATION_TYPE,
        Operator::In,
        &["capacity-block"],
    )]);
    let s = reserved_state(
        vec![blk],
        reserving_pool(&["reserved", "on-demand"], vec![]),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 2)],
    );
    let p = schedule(&s, &catalog(), &gate_on());
    assert_eq!(p.unschedulable.len(), 1, "{p:#?}");
}

#[test]
fn plan_table_shows_reservation_use() {
    let s = reserved_state(
        whole_node_pods(3),
        reserving_pool(&["reserved", "on-demand"], m5_large_only()),
        serde_json::json!([{"id": "cr-1"}]),
        vec![reservation("cr-1", "m5.large", "test-1a", 2)],
    );
    let table = schedule(&s, &catalog(), &gate_on()).to_table();
    let line = table
        .lines()
        .find(|l| l.starts_with("cr-1 "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains("m5.large"), "{line}");
    assert!(line.contains("2 / 2"), "{line}");
    assert!(line.contains("(exhausted)"), "{line}");
    // Without reservations in play, no section.
    let table = schedule(&s, &catalog(), &SchedulerOptions::default()).to_table();
    assert!(!table.contains("RESERVATION"), "{table}");
}

/// `heavy` (weight 10, a CPU limit) ahead of an on-demand `light` pool,
/// four 1-CPU pods and one 3-CPU pod.
fn heavy_and_light(mut heavy: NodePool, cpu_limit: &str) -> ClusterState {
    heavy.weight = 10;
    heavy.limits = Some(Resources::new().with("cpu", q(cpu_limit)).into());
    let light = pool(
        "light",
        vec![req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])],
    );
    let mut pods: Vec<Pod> = (0..4)
        .map(|i| pod(&format!("small-{i}"), "1", "1Gi"))
        .collect();
    pods.push(pod("big", "3", "3Gi"));
    state(pods, vec![light, heavy])
}

#[test]
fn a_full_limited_pool_keeps_pods_on_its_node_claims_when_that_is_cheaper() {
    // The heavy pool may only run m5 and its limit holds one NodeClaim (it
    // is charged the m5.2xlarge it could become). Pods past the cost rule
    // on that NodeClaim either grow it or spill to the light pool: growing
    // is cheaper here (one m5.2xlarge vs an m5.xlarge plus c5 nodes), and
    // it is what the weights ask.
    let heavy = pool(
        "heavy",
        vec![
            req(labels::INSTANCE_FAMILY, Operator::In, &["m5"]),
            req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
        ],
    );
    let s = heavy_and_light(heavy, "8");
    let summary = |p: &Plan| -> Vec<(String, usize)> {
        p.node_claims
            .iter()
            .map(|c| (c.node_pool.clone(), c.pods.len()))
            .collect()
    };
    // The cost rule alone would not grow the big pod's m5.xlarge for a
    // 1-CPU pod and send the small ones to the light pool ($0.461/h); both
    // plans are packed again exactly (few pods, see `chain.rs`), and the
    // cost rule's is no cheaper than what is returned.
    let (spill, could) = schedule_with(
        &s,
        &s.pending_pods,
        &SchedulerOptions::default(),
        &Prepared::new(&s, &catalog(), &SchedulerOptions::default()),
        false,
    );
    assert!(could.is_some());
    // Returned: everything on the heavy pool's NodeClaim, an m5.2xlarge
    // ($0.384/h), within its 8-CPU limit.
    let p = plan(&s);
    assert_eq!(summary(&p), vec![("heavy".into(), 5)]);
    assert!((p.summary.hourly_price - 0.384).abs() < 1e-9);
    assert!(p.summary.hourly_price <= spill.summary.hourly_price);
}

/// Once a heavier NodePool's limits are spent, by a NodeClaim of this plan
/// or by its existing nodes, a pod's own node would come from the NodePool
/// behind it, so the cost rule prices the pod's solo node there: a
/// spot-able pod does not grow an on-demand NodeClaim by an on-demand
/// node's price when a spot node of its own costs less.
#[test]
fn a_pod_is_priced_where_its_own_node_would_come_from_once_limits_are_spent() {
    let mut steady = pool(
        "steady",
        vec![req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])],
    );
    steady.weight = 50;
    // One 2-vCPU node spends the limit.
    steady.limits = Some(Resources::new().with("cpu", q("2")).into());
    let mut on_demand = pod("on-demand", "1", "6Gi");
    on_demand.node_selector = reqs(vec![
        req(labels::ARCH, Operator::In, &["amd64"]),
        req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
    ]);
    let mut spot_able = pod("spot-able", "1", "5Gi");
    spot_able.node_selector = reqs(vec![req(labels::ARCH, Operator::In, &["amd64"])]);
    let pending = vec![on_demand, spot_able];
    // Spent by the plan's first NodeClaim (the largest pod's), or by an
    // existing node of the NodePool (tainted, so that no pod joins it).
    let by_claim = {
        let mut pods = pending.clone();
        pods.insert(0, pod("first", "1500m", "1Gi"));
        state(pods, vec![default_pool(), steady.clone()])
    };
    let by_node = {
        let mut bound = pod("bound", "1", "1Gi");
        bound.node_name = Some("n1".into());
        let mut node = existing_node("test-1a", ["2", "8Gi", "10"], true, bound);
        node.labels
            .insert(labels::NODEPOOL.to_string(), "steady".to_string());
        let mut s = state(pending, vec![default_pool(), steady]);
        s.nodes = vec![node];
        s
    };
    for (what, s) in [("a NodeClaim", by_claim), ("an existing node", by_node)] {
        let p = plan(&s);
        let od = claim_of(&p, "on-demand");
        assert_eq!(od.node_pool, "default", "{what}");
        assert_eq!(od.price.capacity_type, CapacityType::OnDemand, "{what}");
        assert_eq!(od.price.instance_type, "m5.large", "{what}");
        // Joining would grow it to an m5.xlarge ($0.096 more, the
        // on-demand m5.large the spent NodePool would have given); a spot
        // m5.large of its own costs $0.0384.
        let spot = claim_of(&p, "spot-able");
        assert_ne!(spot.name, od.name, "{what}: {:#?}", p.node_claims);
        assert_eq!(spot.price.capacity_type, CapacityType::Spot, "{what}");
        assert_eq!(spot.price.instance_type, "m5.large", "{what}");
    }
}

#[test]
fn the_weights_first_plan_is_made_only_when_step_three_would_join_a_heavier_pool() {
    // (heavy pool's CPU limit, whether the first run saw step 3 about to
    // join a heavier limited NodePool's NodeClaim, so the weights-first
    // run could differ and is made too).
    let cases = [
        // Room for every pod on new heavy NodeClaims: step 3 never
        // reaches the light pool, the weights-first run would be the same.
        ("1000", false),
        // Full after one NodeClaim: pods past the cost rule could join it.
        ("8", true),
    ];
    let heavy = pool(
        "heavy",
        vec![
            req(labels::INSTANCE_FAMILY, Operator::In, &["m5"]),
            req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
        ],
    );
    for (limit, differs) in cases {
        let s = heavy_and_light(heavy.clone(), limit);
        let opts = SchedulerOptions::default();
        let prepared = Prepared::new(&s, &catalog(), &opts);
        let (cost_rule, forked) = schedule_with(&s, &s.pending_pods, &opts, &prepared, false);
        assert_eq!(forked.is_some(), differs, "limit {limit}");
        let (weights_first, _) = schedule_with(&s, &s.pending_pods, &opts, &prepared, true);
        // Made from the start, the weights-first plan is the one the first
        // run forked, or the first run's own when it never would differ.
        assert_eq!(
            serde_json::to_value(&weights_first).ok(),
            serde_json::to_value(forked.as_ref().unwrap_or(&cost_rule)).ok(),
            "limit {limit}"
        );
    }
}

#[test]
fn the_forked_weights_first_plan_is_the_one_made_from_the_start() {
    // Drawn clusters: a heavy NodePool limited in CPU (one to a few
    // NodeClaims), a middle one limited too, a light one without limits;
    // pods of drawn sizes, some spread over zones (either mode), some kept
    // one per node. Wherever the first run forks the weights-first run,
    // that run's plan is the one planning it from the start gives.
    let mut draw = crate::scheduler::test_draws(0x5eed_f0c5);
    let mut forks = 0;
    for case in 0..24 {
        let mut heavy = pool(
            "heavy",
            vec![req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])],
        );
        heavy.weight = 20;
        let limit = (4 + 4 * draw(8)).to_string();
        heavy.limits = Some(Resources::new().with("cpu", q(&limit)).into());
        let mut middle = pool(
            "middle",
            vec![req(labels::INSTANCE_FAMILY, Operator::In, &["c5", "m5"])],
        );
        middle.weight = 10;
        let limit = (8 + 8 * draw(4)).to_string();
        middle.limits = Some(Resources::new().with("cpu", q(&limit)).into());
        let light = default_pool();
        let sizes = [
            ("250m", "512Mi"),
            ("500m", "1Gi"),
            ("1", "2Gi"),
            ("2", "3Gi"),
        ];
        let pods: Vec<Pod> = (0..10 + draw(30))
            .map(|i| {
                let (cpu, mem) = sizes[draw(4) as usize];
                let app = format!("app{}", draw(4));
                let mut p = labeled(pod(&format!("p{i}"), cpu, mem), "app", &app);
                match draw(6) {
                    0 => {
                        p.topology_spread = vec![spread(
                            labels::ZONE,
                            1,
                            WhenUnsatisfiable::DoNotSchedule,
                            selector("app", &app),
                        )]
                    }
                    1 => {
                        p.topology_spread = vec![spread(
                            labels::ZONE,
                            1,
                            WhenUnsatisfiable::ScheduleAnyway,
                            selector("app", &app),
                        )]
                    }
                    2 => p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", &app))],
                    _ => {}
                }
                p
            })
            .collect();
        let s = state(pods, vec![light, middle, heavy]);
        let opts = SchedulerOptions::default();
        let prepared = Prepared::new(&s, &catalog(), &opts);
        let (first, forked) = schedule_runs(&s, &s.pending_pods, &opts, &prepared, false, false);
        let Some(forked) = forked else {
            continue;
        };
        forks += 1;
        // Settling before the repack returns the plan the comparison after
        // it picks.
        let after = serde_json::to_value(preferred(first, forked.clone())).ok();
        // (Unsettled, both runs come back and `schedule` picks.)
        let settled = match schedule_with(&s, &s.pending_pods, &opts, &prepared, false) {
            (first, Some(weights_first)) => preferred(first, weights_first),
            (only, None) => only,
        };
        assert_eq!(
            serde_json::to_value(&settled).ok(),
            after,
            "case {case}: settled before the repack"
        );
        let (from_start, _) = schedule_with(&s, &s.pending_pods, &opts, &prepared, true);
        assert_eq!(
            serde_json::to_value(&forked).ok(),
            serde_json::to_value(&from_start).ok(),
            "case {case}"
        );
    }
    assert!(forks >= 6, "{forks} of 24 drawn clusters forked");
}

#[test]
fn a_full_limited_pool_lets_pods_spill_when_that_is_cheaper() {
    // The same shape, but the heavy pool's only way to grow is a type far
    // dearer than the light pool's nodes: the cost rule's plan is returned.
    let heavy = pool(
        "heavy",
        vec![
            req(
                labels::INSTANCE_TYPE,
                Operator::In,
                &["m5.xlarge", "g4.8xlarge"],
            ),
            req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
        ],
    );
    let s = heavy_and_light(heavy, "32");
    let (weights_first, _) = schedule_with(
        &s,
        &s.pending_pods,
        &SchedulerOptions::default(),
        &Prepared::new(&s, &catalog(), &SchedulerOptions::default()),
        true,
    );
    let p = plan(&s);
    assert!(
        weights_first.summary.hourly_price >= p.summary.hourly_price,
        "{} vs {}",
        weights_first.summary.hourly_price,
        p.summary.hourly_price
    );
    assert!(p.node_claims.iter().any(|c| c.node_pool == "light"));
    assert_eq!(p.summary.scheduled, 5);
}

#[test]
fn self_anti_affinity_groups_are_packed_again_one_pod_per_node() {
    // Three Deployments of three replicas, each replica kept off its
    // siblings' nodes. The cheapest plan puts one replica of each on three
    // nodes; whatever the first pass did, no node may hold two siblings.
    let mut pods = Vec::new();
    for (app, cpu, mem) in [
        ("a", "1", "2Gi"),
        ("b", "500m", "1Gi"),
        ("c", "250m", "512Mi"),
        ("d", "100m", "128Mi"),
    ] {
        for i in 0..3 {
            let mut p = labeled(pod(&format!("{app}-{i}"), cpu, mem), "app", app);
            p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", app))];
            pods.push(p);
        }
    }
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 12);
    for c in &p.node_claims {
        let mut apps: Vec<&str> = c
            .pods
            .iter()
            .map(|n| &n[n.len() - 3..n.len() - 2])
            .collect();
        apps.sort_unstable();
        let before = apps.len();
        apps.dedup();
        assert_eq!(
            apps.len(),
            before,
            "siblings share {}: {:?}",
            c.name,
            c.pods
        );
    }
    assert_eq!(p.node_claims.len(), 3, "{:#?}", p.node_claims);
}

#[test]
fn repacked_zone_spread_pods_keep_their_zones_counts() {
    // Three Deployments of mixed sizes spread over the zones: whatever the
    // repack does, each Deployment stays balanced (skew <= 1) and every
    // NodeClaim stays in one zone.
    let mut pods = Vec::new();
    for (app, cpu, mem, n) in [
        ("a", "1", "2Gi", 5),
        ("b", "500m", "1Gi", 7),
        ("c", "250m", "512Mi", 4),
    ] {
        for i in 0..n {
            let mut p = labeled(pod(&format!("{app}-{i}"), cpu, mem), "app", app);
            p.topology_spread = vec![spread(
                labels::ZONE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", app),
            )];
            pods.push(p);
        }
    }
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 16);
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in &p.node_claims {
        assert_eq!(c.zones.len(), 1, "{}: {:?}", c.name, c.zones);
        for pod in &c.pods {
            let app = pod.trim_start_matches("default/")[..1].to_string();
            *counts.entry((app, c.zones[0].clone())).or_default() += 1;
        }
    }
    for app in ["a", "b", "c"] {
        let per_zone: Vec<usize> = ZONES
            .iter()
            .map(|z| {
                counts
                    .get(&(app.to_string(), z.to_string()))
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        let (lo, hi) = (per_zone.iter().min(), per_zone.iter().max());
        assert!(
            hi.zip(lo).is_some_and(|(h, l)| h - l <= 1),
            "{app}: {per_zone:?}"
        );
    }
}

/// Pods per zone of the plan, per app (the pod name's first letter).
fn apps_per_zone(p: &Plan) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for c in &p.node_claims {
        assert_eq!(c.zones.len(), 1, "{}: {:?}", c.name, c.zones);
        for pod in &c.pods {
            let app = pod.trim_start_matches("default/")[..1].to_string();
            *counts.entry((app, c.zones[0].clone())).or_default() += 1;
        }
    }
    counts
}

/// `n` replicas of app `app` (pods named `{app}-{i}`) spread over the
/// zones with maxSkew 1.
fn spread_replicas(app: &str, cpu: &str, mem: &str, n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = labeled(pod(&format!("{app}-{i}"), cpu, mem), "app", app);
            p.topology_spread = vec![spread(
                labels::ZONE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("app", app),
            )];
            p
        })
        .collect()
}

#[test]
fn zone_spread_replicas_beyond_an_even_share_go_where_they_pack_cheapest() {
    // Four replicas that each fill a node, over three zones with maxSkew 1:
    // one zone gets two. The first pass gives the extra one to the first
    // zone; every offering in test-1c costs half, so it moves there.
    let mut cat = catalog();
    for e in &mut cat.entries {
        for o in &mut e.offerings {
            if o.zone == "test-1c" {
                o.price *= 0.5;
            }
        }
    }
    let s = state(
        spread_replicas("w", "1500m", "3Gi", 4),
        vec![default_pool()],
    );
    let p = schedule(&s, &cat, &SchedulerOptions::default());
    assert_eq!(p.summary.scheduled, 4);
    let counts = apps_per_zone(&p);
    let per_zone: Vec<usize> = ZONES
        .iter()
        .map(|z| {
            counts
                .get(&("w".into(), z.to_string()))
                .copied()
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(per_zone, vec![1, 1, 2], "{:#?}", p.node_claims);
    // One m6g.large spot (the cheapest node) per replica, at half price
    // for the two in test-1c.
    let m6g = 0.077 * 0.4;
    assert!(
        (p.summary.hourly_price - 3.0 * m6g).abs() < 1e-6,
        "{}",
        p.summary.hourly_price
    );
}

#[test]
fn zone_moves_pair_deployments_whose_extras_share_a_node() {
    // Two Deployments of four over three zones, two of them fitting a node
    // (m6g.large, the cheapest). An existing (tainted, full) node in
    // test-1a runs one pod of b, so the first pass gives a's extra replica
    // to test-1a and b's to test-1b: five nodes. a's extra moved to test-1b
    // meets b's (a stays within maxSkew, b is untouched): four.
    let mut old = labeled(pod("b-old", "100m", "128Mi"), "app", "b");
    old.node_name = Some("n1".into());
    let node = existing_node("test-1a", ["100m", "128Mi", "1"], true, old);
    let mut pods = spread_replicas("a", "900m", "3Gi", 4);
    pods.extend(spread_replicas("b", "900m", "3Gi", 4));
    let mut s = state(pods, vec![default_pool()]);
    s.nodes = vec![node];
    let p = plan(&s);
    assert_eq!(p.summary.scheduled, 8);
    let counts = apps_per_zone(&p);
    let per_zone = |app: &str| -> Vec<usize> {
        ZONES
            .iter()
            .map(|z| {
                counts
                    .get(&(app.into(), z.to_string()))
                    .copied()
                    .unwrap_or(0)
            })
            .collect()
    };
    assert_eq!(per_zone("a"), vec![1, 2, 1], "{:#?}", p.node_claims);
    assert_eq!(per_zone("b"), vec![1, 2, 1], "{:#?}", p.node_claims);
    assert_eq!(p.node_claims.len(), 4, "{:#?}", p.node_claims);
    // Without zone rebalancing (consolidation's simulations) the first
    // pass's five NodeClaims stay.
    let opts = SchedulerOptions {
        rebalance_zones: false,
        ..SchedulerOptions::default()
    };
    let first = schedule(&s, &catalog(), &opts);
    assert_eq!(first.summary.scheduled, 8);
    assert_eq!(first.node_claims.len(), 5, "{:#?}", first.node_claims);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever the zones' prices and the Deployments, zone moves keep
    /// every Deployment within its maxSkew (counting an existing pod).
    #[test]
    fn zone_moves_keep_every_deployment_within_its_skew(
        apps in proptest::collection::vec((0usize..4, 1usize..8, 1u32..3), 1..5),
        factors in proptest::collection::vec(1u32..5, 3),
        existing_app in proptest::option::of(0usize..4),
    ) {
        let mut cat = catalog();
        for e in &mut cat.entries {
            for o in &mut e.offerings {
                if let Some(z) = ZONES.iter().position(|z| *z == o.zone) {
                    o.price *= f64::from(factors[z]) / 4.0;
                }
            }
        }
        let sizes = [("1500m", "3Gi"), ("900m", "3Gi"), ("500m", "1Gi"), ("200m", "256Mi")];
        let mut pods = Vec::new();
        for (i, &(size, n, skew)) in apps.iter().enumerate() {
            let app = ["a", "b", "c", "d", "e"][i];
            for mut p in spread_replicas(app, sizes[size].0, sizes[size].1, n) {
                p.topology_spread[0].max_skew = skew;
                pods.push(p);
            }
        }
        let mut s = state(pods, vec![default_pool()]);
        let mut before: BTreeMap<(String, String), usize> = BTreeMap::new();
        if let Some(e) = existing_app.filter(|e| *e < apps.len()) {
            let app = ["a", "b", "c", "d", "e"][e];
            let mut old = labeled(pod(&format!("{app}-old"), "100m", "128Mi"), "app", app);
            old.node_name = Some("n1".into());
            s.nodes = vec![existing_node(ZONES[1], ["100m", "128Mi", "1"], false, old)];
            before.insert((app.to_string(), ZONES[1].to_string()), 1);
        }
        let p = schedule(&s, &cat, &SchedulerOptions::default());
        let total: usize = apps.iter().map(|a| a.1).sum();
        proptest::prop_assert_eq!(p.summary.scheduled, total);
        let mut counts = apps_per_zone(&p);
        for (k, n) in before {
            *counts.entry(k).or_default() += n;
        }
        for (i, &(_, _, skew)) in apps.iter().enumerate() {
            let app = ["a", "b", "c", "d", "e"][i];
            let per_zone: Vec<usize> = ZONES
                .iter()
                .map(|z| counts.get(&(app.into(), z.to_string())).copied().unwrap_or(0))
                .collect();
            let (lo, hi) = (per_zone.iter().min().copied(), per_zone.iter().max().copied());
            proptest::prop_assert!(
                hi.zip(lo).is_some_and(|(h, l)| h - l <= skew as usize),
                "{}: {:?} (maxSkew {})", app, per_zone, skew
            );
        }
    }
}

/// Required zone anti-affinity never risks co-location with a pod whose
/// NodeClaim's zone is still open: either pod may come first (the larger
/// one is placed first), and self anti-affinity spreads one pod per zone.
#[test]
fn zone_anti_affinity_against_open_zone_claims() {
    let zones_of = |p: &Plan, pod: &str| claim_of(p, pod).zones.clone();
    for (a_cpu, b_cpu) in [("2", "1"), ("1", "2"), ("1", "1")] {
        let a = labeled(pod("a", a_cpu, "1Gi"), "app", "a");
        let mut b = labeled(pod("b", b_cpu, "1Gi"), "app", "b");
        b.pod_anti_affinity = vec![term(labels::ZONE, selector("app", "a"))];
        let p = plan(&state(vec![a, b], vec![default_pool()]));
        assert!(
            p.unschedulable.is_empty(),
            "{a_cpu}/{b_cpu}: {:?}",
            p.unschedulable
        );
        let (za, zb) = (zones_of(&p, "a"), zones_of(&p, "b"));
        assert!(
            za.iter().all(|z| !zb.contains(z)),
            "{a_cpu}/{b_cpu}: a may land in {za:?}, b in {zb:?}"
        );
    }
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = labeled(pod(&format!("z{i}"), "1", "1Gi"), "app", "z");
            p.pod_anti_affinity = vec![term(labels::ZONE, selector("app", "z"))];
            p
        })
        .collect();
    let p = plan(&state(pods, vec![default_pool()]));
    let mut seen: Vec<String> = vec![];
    for c in &p.node_claims {
        assert_eq!(c.zones.len(), 1, "{c:?}");
        assert!(!seen.contains(&c.zones[0]), "two pods in {}", c.zones[0]);
        seen.push(c.zones[0].clone());
    }
    assert_eq!(seen.len(), ZONES.len());
    assert_eq!(p.unschedulable.len(), 1);
}

/// NodePool limits: a zero limit allows no node (it is not "no limit"),
/// and `nodes` counts nodes, existing ones included.
#[test]
fn limits_of_zero_and_of_nodes() {
    let pods = || {
        (0..4)
            .map(|i| pod(&format!("p{i}"), "1500m", "1Gi"))
            .collect::<Vec<_>>()
    };
    let limited = |k: &str, v: &str| {
        let mut np = default_pool();
        np.limits = Some(crate::model::ResourceLimits([(k.to_string(), q(v))].into()));
        np
    };
    let p = plan(&state(pods(), vec![limited("cpu", "0")]));
    assert!(p.node_claims.is_empty(), "{:?}", p.node_claims);
    assert_eq!(p.unschedulable.len(), 4);
    assert!(
        p.unschedulable[0].reason.contains("limits"),
        "{}",
        p.unschedulable[0].reason
    );

    // Four 1.5-cpu pods on 2-cpu types would take four nodes: two allowed.
    let mut s = state(pods(), vec![limited("nodes", "2")]);
    s.node_pools[0]
        .requirements
        .add(req(labels::INSTANCE_TYPE, Operator::In, &["c5.large"]));
    let p = plan(&s);
    assert_eq!(p.node_claims.len(), 2, "{:?}", p.node_claims);
    assert_eq!(p.unschedulable.len(), 2);

    // An existing node of the pool counts.
    let mut node = existing_node("test-1a", ["0", "0", "0"], false, pod("old", "1", "1Gi"));
    node.labels
        .insert(labels::NODEPOOL.into(), "default".into());
    s.nodes = vec![node];
    let p = plan(&s);
    assert_eq!(p.node_claims.len(), 1, "{:?}", p.node_claims);
}

/// A `PreferNoSchedule` NodePool is avoided while another NodePool fits,
/// and used when none does (Karpenter tolerates it as the last relaxation).
#[test]
fn prefer_no_schedule_pools_are_a_last_resort() {
    let mut preferred_off = pool("a-tainted", vec![]);
    preferred_off.weight = 10;
    preferred_off.taints = vec![Taint {
        key: "spot-only".into(),
        value: String::new(),
        effect: TaintEffect::PreferNoSchedule,
    }];
    let p = plan(&state(
        vec![pod("web", "1", "1Gi")],
        vec![preferred_off.clone(), default_pool()],
    ));
    assert_eq!(claim_of(&p, "web").node_pool, "default");
    let p = plan(&state(vec![pod("web", "1", "1Gi")], vec![preferred_off]));
    assert_eq!(claim_of(&p, "web").node_pool, "a-tainted");
}

/// `minValues` (NodePool requirements) under both policies: a pod that
/// would narrow a NodeClaim below the floor does not join it; a new
/// NodeClaim that cannot meet it leaves the pod pending (Strict) or is
/// relaxed and marked (BestEffort).
#[test]
fn min_values_are_kept_or_relaxed_by_policy() {
    use MinValuesPolicy::{BestEffort, Strict};
    let it = labels::INSTANCE_TYPE;
    let two_m5 = || {
        let mut np = pool(
            "default",
            vec![req(it, Operator::In, &["m5.large", "m5.xlarge"])],
        );
        np.min_values.insert(it.into(), 2);
        np
    };
    let wants_xlarge = || {
        let mut p = pod("b", "500m", "1Gi");
        p.node_selector = reqs(vec![req(it, Operator::In, &["m5.xlarge"])]);
        p
    };
    // (policy, pods, claims, pending pod with the reason's text, relaxed
    // claims: (pod, its minValues on the instance type)).
    type Case = (
        MinValuesPolicy,
        Vec<Pod>,
        usize,
        Option<(&'static str, &'static str)>,
        Vec<(&'static str, u32)>,
    );
    let cases: Vec<Case> = vec![
        // b would leave a's NodeClaim one type: it does not join, and a
        // NodeClaim of its own cannot keep two either.
        (
            Strict,
            vec![pod("a", "500m", "1Gi"), wants_xlarge()],
            1,
            Some(("default/b", "node.kubernetes.io/instance-type has minValues 2 but the instance types left offer 1")),
            vec![],
        ),
        (BestEffort, vec![pod("a", "500m", "1Gi"), wants_xlarge()], 2, None, vec![("b", 1)]),
        // 10Gi fits m5.xlarge alone.
        (Strict, vec![pod("c", "1", "10Gi")], 0, Some(("default/c", "MIN_VALUES_POLICY is Strict")), vec![]),
        (BestEffort, vec![pod("c", "1", "10Gi")], 1, None, vec![("c", 1)]),
        // Both fit both types: one NodeClaim, its floor kept.
        (Strict, vec![pod("a", "500m", "1Gi"), pod("d", "500m", "1Gi")], 1, None, vec![]),
    ];
    for (i, (policy, pods, claims, pending, relaxed)) in cases.into_iter().enumerate() {
        let opts = SchedulerOptions {
            min_values_policy: policy,
            ..SchedulerOptions::default()
        };
        let p = schedule(&state(pods, vec![two_m5()]), &catalog(), &opts);
        assert_eq!(p.node_claims.len(), claims, "case {i}: {p:#?}");
        match pending {
            Some((pod, text)) => {
                assert_eq!(p.unschedulable.len(), 1, "case {i}");
                assert_eq!(p.unschedulable[0].pod, pod, "case {i}");
                assert!(
                    p.unschedulable[0].reason.contains(text),
                    "case {i}: {}",
                    p.unschedulable[0].reason
                );
            }
            None => assert!(
                p.unschedulable.is_empty(),
                "case {i}: {:?}",
                p.unschedulable
            ),
        }
        for nc in &p.node_claims {
            let relax = relaxed
                .iter()
                .find(|(pod, _)| nc.pods.contains(&format!("default/{pod}")));
            let min = nc
                .requirements
                .iter()
                .find(|r| r.key == it)
                .and_then(|r| r.min_values);
            assert_eq!(min, Some(relax.map_or(2, |r| r.1)), "case {i}: {}", nc.name);
            assert_eq!(
                nc.annotations.get(MIN_VALUES_RELAXED).map(String::as_str),
                Some(if relax.is_some() { "true" } else { "false" }),
                "case {i}: {}",
                nc.name
            );
            if relax.is_none() {
                assert!(
                    nc.instance_types.len() >= 2,
                    "case {i}: {:?}",
                    nc.instance_types
                );
            }
        }
    }
}

/// Karpenter's registration and readiness taints (`karpenter.sh/unregistered:NoExecute`,
/// `readiness.k8s.io/*`) keep no pod off a NodePool's node until it is
/// initialized; afterwards, and on nodes of no NodePool, they do.
#[test]
fn registration_taints_block_only_initialized_or_unmanaged_nodes() {
    // (taint key, effect, NodePool label, initialized, pod placed on n1)
    let cases = [
        (
            "karpenter.sh/unregistered",
            TaintEffect::NoExecute,
            true,
            false,
            true,
        ),
        (
            "karpenter.sh/unregistered",
            TaintEffect::NoExecute,
            true,
            true,
            false,
        ),
        (
            "karpenter.sh/unregistered",
            TaintEffect::NoExecute,
            false,
            false,
            false,
        ),
        (
            "karpenter.sh/unregistered",
            TaintEffect::NoSchedule,
            true,
            false,
            false,
        ),
        (
            "readiness.k8s.io/network",
            TaintEffect::NoSchedule,
            true,
            false,
            true,
        ),
        (
            "readiness.k8s.io/network",
            TaintEffect::NoSchedule,
            true,
            true,
            false,
        ),
    ];
    for (key, effect, managed, init, placed) in cases {
        let mut node = existing_node(
            "test-1a",
            ["4", "8Gi", "10"],
            false,
            pod("old", "100m", "128Mi"),
        );
        node.pods[0].node_name = Some("n1".into());
        node.taints = vec![Taint {
            key: key.into(),
            value: String::new(),
            effect,
        }];
        if managed {
            node.labels
                .insert(labels::NODEPOOL.into(), "default".into());
        }
        if init {
            node.labels
                .insert("karpenter.sh/initialized".into(), "true".into());
        }
        let mut s = state(vec![pod("a", "1", "1Gi")], vec![default_pool()]);
        s.nodes = vec![node];
        let p = plan(&s);
        let on_n1 = p.existing_nodes.iter().any(|n| n.name == "n1");
        assert_eq!(
            on_n1, placed,
            "{key} {effect:?} managed={managed} initialized={init}"
        );
    }
}

/// NodeClaims given among the inputs that launched but have no Node yet
/// are in-flight capacity: pods are planned onto them, unless they are
/// being deleted, not launched, tainted against the pod, or their Node is
/// already there (then the Node counts, once).
#[test]
fn in_flight_node_claims_take_pods() {
    let claim = || NodeClaimObject {
        name: "default-x1".into(),
        node_pool: Some("default".into()),
        node_name: Some("ip-10-0-0-9".into()),
        provider_id: Some("aws:///test-1a/i-9".into()),
        labels: [(labels::INSTANCE_TYPE.to_string(), "m5.xlarge".to_string())].into(),
        requirements: reqs(vec![req(labels::ZONE, Operator::In, &["test-1a"])]),
        allocatable: Resources::new()
            .with("cpu", q("3900m"))
            .with("memory", q("14Gi"))
            .with("pods", q("58")),
        ..Default::default()
    };
    let full_node = || Node {
        name: "ip-10-0-0-9".into(),
        provider_id: Some("aws:///test-1a/i-9".into()),
        allocatable: Resources::new()
            .with("cpu", q("100m"))
            .with("memory", q("1Gi"))
            .with("pods", q("10")),
        ..Node::default()
    };
    // (name, claim, nodes, pod placed on the in-flight node)
    let cases: Vec<(&str, NodeClaimObject, Vec<Node>, bool)> = vec![
        ("launched, no node yet", claim(), vec![], true),
        (
            "being deleted",
            NodeClaimObject {
                deleting: true,
                ..claim()
            },
            vec![],
            false,
        ),
        (
            "not launched",
            NodeClaimObject {
                provider_id: None,
                ..claim()
            },
            vec![],
            false,
        ),
        (
            "no allocatable yet",
            NodeClaimObject {
                allocatable: Resources::new(),
                ..claim()
            },
            vec![],
            false,
        ),
        (
            "tainted",
            NodeClaimObject {
                taints: vec![Taint {
                    key: "dedicated".into(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                }],
                ..claim()
            },
            vec![],
            false,
        ),
        (
            "its Node is there (full)",
            claim(),
            vec![full_node()],
            false,
        ),
    ];
    for (name, c, nodes, placed) in cases {
        let mut s = state(vec![pod("a", "1", "1Gi")], vec![default_pool()]);
        s.node_claims = vec![c];
        s.nodes = nodes;
        let p = plan(&s);
        let on_it = p.existing_nodes.iter().any(|n| n.name == "ip-10-0-0-9");
        assert_eq!(on_it, placed, "{name}: {p:#?}");
        assert_eq!(p.node_claims.is_empty(), placed, "{name}");
    }
}

/// Which taints of an existing node block pods (Karpenter's state node):
/// ephemeral `NoSchedule` taints never; the ephemeral keys with `NoExecute`
/// and the registration taint only once a NodePool's node is initialized.
#[test]
fn effective_taints_of_existing_nodes() {
    let t = |key: &str, effect: TaintEffect| Taint {
        key: key.into(),
        value: String::new(),
        effect,
    };
    let not_ready_ns = t("node.kubernetes.io/not-ready", TaintEffect::NoSchedule);
    let not_ready_ne = t("node.kubernetes.io/not-ready", TaintEffect::NoExecute);
    let unregistered = t("karpenter.sh/unregistered", TaintEffect::NoExecute);
    let custom = t("team", TaintEffect::NoSchedule);
    let all = vec![
        not_ready_ns.clone(),
        not_ready_ne.clone(),
        unregistered.clone(),
        custom.clone(),
    ];
    let node = |labels: &[(&str, &str)]| Node {
        name: "n".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        taints: all.clone(),
        ..Node::default()
    };
    let cases = [
        (
            "managed, not initialized",
            node(&[(labels::NODEPOOL, "default")]),
            vec![custom.clone()],
        ),
        (
            "managed, initialized",
            node(&[
                (labels::NODEPOOL, "default"),
                ("karpenter.sh/initialized", "true"),
            ]),
            vec![not_ready_ne.clone(), unregistered.clone(), custom.clone()],
        ),
        (
            "not Karpenter's",
            node(&[]),
            vec![not_ready_ne, unregistered, custom],
        ),
    ];
    for (what, n, want) in cases {
        assert_eq!(effective_taints(&n, &[]), want, "{what}");
    }
}

/// A DaemonSet whose node affinity asks for a label Karpenter puts on its
/// nodes once they join (`karpenter.sh/initialized`, `…/registered`) runs on
/// them, so its requests count in a new NodeClaim's overhead; one asking for
/// a label no NodePool defines does not.
#[test]
fn daemon_overhead_with_karpenter_node_labels() {
    let ds = |key: &str| DaemonSet {
        namespace: "kube-system".into(),
        name: key.into(),
        pod: Pod::from(PodTemplate {
            requests: Resources::new().with("cpu", Quantity::from_units(1)),
            required_terms: vec![Requirements::from_iter_reqs([Requirement::in_values(
                key,
                ["true"],
            )])],
            ..PodTemplate::default()
        }),
    };
    let pool =
        Requirements::from_iter_reqs([Requirement::in_values(labels::NODEPOOL, ["default"])]);
    let cases = [
        ("karpenter.sh/initialized", 1000),
        ("karpenter.sh/registered", 1000),
        ("example.com/undefined", 0),
    ];
    for (key, cpu_millis) in cases {
        let overhead = daemon_overhead(&[], &pool, &[ds(key)]);
        assert_eq!(overhead.cpu().millis(), cpu_millis, "{key}");
    }
}

/// Pods of a node being deleted that need a place elsewhere (Karpenter's
/// `IsReschedulable`).
#[test]
fn reschedulable_pods_of_deleting_nodes() {
    let pod = |owner: Option<&str>, terminating: bool| Pod {
        terminating,
        ..Pod::from(PodTemplate {
            owner: owner.map(str::to_string),
            ..PodTemplate::default()
        })
    };
    let cases = [
        ("running, no owner", pod(None, false), true),
        (
            "running ReplicaSet pod",
            pod(Some("ReplicaSet/ns/rs"), false),
            true,
        ),
        (
            "ReplicaSet pod being deleted",
            pod(Some("ReplicaSet/ns/rs"), true),
            false,
        ),
        (
            "StatefulSet pod being deleted",
            pod(Some("StatefulSet/ns/ss"), true),
            true,
        ),
        ("DaemonSet pod", pod(Some("DaemonSet/ns/ds"), false), false),
        ("static pod", pod(Some("Node/ns/n1"), false), false),
    ];
    for (what, p, want) in cases {
        assert_eq!(reschedulable(&p), want, "{what}");
    }
}

#[test]
fn a_node_claim_cap_stops_planning_once_exceeded() {
    // Four pods that each need a node of their own (hostname
    // anti-affinity): (cap, NodeClaims planned, pods left unplaced).
    let cases: &[(Option<usize>, usize, usize)] = &[
        (None, 4, 0),
        (Some(4), 4, 0),
        (Some(3), 4, 0),
        (Some(2), 3, 1),
        (Some(0), 1, 3),
    ];
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = labeled(pod(&format!("api{i}"), "100m", "128Mi"), "app", "api");
            p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", "api"))];
            p
        })
        .collect();
    let s = state(pods, vec![default_pool()]);
    for &(cap, claims, unplaced) in cases {
        for pack in [false, true] {
            let opts = SchedulerOptions {
                max_node_claims: cap,
                pack_fewest_nodes: pack,
                ..SchedulerOptions::default()
            };
            let p = schedule(&s, &catalog(), &opts);
            let case = format!("cap {cap:?}, pack {pack}");
            assert_eq!(p.node_claims.len(), claims, "{case}: {p:#?}");
            assert_eq!(p.unschedulable.len(), unplaced, "{case}: {p:#?}");
            assert!(
                p.unschedulable
                    .iter()
                    .all(|u| u.reason.contains("NodeClaim cap")),
                "{case}: {p:#?}"
            );
        }
    }
}

#[test]
fn a_new_node_price_limit_keeps_new_node_claims_below_it() {
    // Packed first fit, six 1-cpu pods take one NodeClaim; under a price
    // limit below that node's price they take more, smaller ones, each
    // (instance plus volumes) under the limit; under a limit no type
    // meets, none, with the limit named.
    let catalog = Catalog::embedded("us-west-2").unwrap();
    let pods: Vec<Pod> = (0..6).map(|i| pod(&format!("w{i}"), "1", "2Gi")).collect();
    let s = state(pods, vec![default_pool()]);
    let packed = SchedulerOptions {
        pack_fewest_nodes: true,
        ..SchedulerOptions::default()
    };
    let one = schedule(&s, &catalog, &packed);
    assert_eq!(one.node_claims.len(), 1, "{one:#?}");
    let node = |c: &NodeClaimPlan| c.price.min + c.volume_price;
    let top = node(&one.node_claims[0]);
    for (limit, placed) in [(top, true), (top / 2.0, true), (1e-6, false)] {
        let opts = SchedulerOptions {
            new_node_price_limit: Some(limit),
            ..packed.clone()
        };
        let p = schedule(&s, &catalog, &opts);
        if placed {
            assert!(p.unschedulable.is_empty(), "limit {limit}: {p:#?}");
            assert!(p.node_claims.len() > 1, "limit {limit}: {p:#?}");
            assert!(
                p.node_claims.iter().all(|c| node(c) < limit),
                "limit {limit}: {p:#?}"
            );
            // The limit shapes the packing, not the launch list: each
            // NodeClaim still lists the dearer types that hold its pods
            // (what a spot replacement's flexibility is counted on), and
            // every type of a limited plan's list holds its requests.
            let cheapest = |t: &str| {
                let e = catalog.get(t).unwrap();
                e.offerings
                    .iter()
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)
                    .unwrap()
            };
            for c in &p.node_claims {
                assert!(
                    c.instance_types
                        .iter()
                        .any(|t| cheapest(t) + c.volume_price >= limit),
                    "limit {limit}: {c:#?}"
                );
                let cpu = c.resources.requests.cpu().millis();
                for t in c.instance_types.iter() {
                    let vcpus = i64::from(catalog.get(t).unwrap().info.vcpu);
                    assert!(vcpus * 1000 >= cpu, "limit {limit}: {t} for {c:#?}");
                }
            }
        } else {
            assert!(p.node_claims.is_empty(), "{p:#?}");
            assert_eq!(p.unschedulable.len(), 6, "{p:#?}");
            assert!(
                p.unschedulable.iter().all(|u| u
                    .reason
                    .contains("or more, the most a replacement may cost")),
                "{p:#?}"
            );
        }
    }
}

#[test]
fn packing_the_fewest_node_claims_puts_small_pods_on_one() {
    // On the real catalog's prices the cost rule spreads these pods over
    // several small cheap NodeClaims; packing the fewest puts them first
    // fit onto one, never cheaper than the cost rule's plan.
    let catalog = Catalog::embedded("us-west-2").unwrap();
    let pods: Vec<Pod> = (0..6).map(|i| pod(&format!("w{i}"), "1", "2Gi")).collect();
    let s = state(pods, vec![default_pool()]);
    let opts = SchedulerOptions {
        pack_fewest_nodes: true,
        ..SchedulerOptions::default()
    };
    let packed = schedule(&s, &catalog, &opts);
    let spread = schedule(&s, &catalog, &SchedulerOptions::default());
    assert!(packed.unschedulable.is_empty(), "{packed:#?}");
    assert!(spread.node_claims.len() > 1, "{spread:#?}");
    assert_eq!(packed.node_claims.len(), 1, "{packed:#?}");
    assert!(
        packed.summary.total_hourly_price >= spread.summary.total_hourly_price - 1e-9,
        "the cost rule is never dearer: {packed:#?} vs {spread:#?}"
    );
}

/// Topology narrows each key on its own: a node is admitted by
/// `added_over` exactly when every key the pod's groups name admits it
/// alone (`admits_on_key`, which trials ask per zone mask before
/// building anything); a key that no term of the pod's and no inverse
/// group is on (`key_free`) admits every node. Seeded random spreads, pod
/// affinity and anti-affinity (own and other pods' terms) over random
/// existing pods (some with required anti-affinity of their own), and
/// random node requirements on zone and hostname.
#[test]
fn topology_admits_a_node_exactly_when_each_key_does() {
    use super::topology::{Kind, Topology};
    let mut seed = 11u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n) as usize
    };
    let apps = ["a", "b", "c"];
    let keys = [labels::ZONE, labels::HOSTNAME];
    let (mut refused, mut free) = (0, 0);
    for case in 0..400 {
        let mut pending = Vec::new();
        for i in 0..4 {
            let mut p = labeled(
                pod(&format!("p{case}-{i}"), "1", "1Gi"),
                "app",
                apps[next(3)],
            );
            for _ in 0..1 + next(3) {
                let (key, sel) = (keys[next(2)], selector("app", apps[next(3)]));
                match next(4) {
                    0 | 1 => p.topology_spread.push(spread(
                        key,
                        1 + next(2) as u32,
                        WhenUnsatisfiable::DoNotSchedule,
                        sel,
                    )),
                    2 => p.pod_affinity.push(term(key, sel)),
                    _ => p.pod_anti_affinity.push(term(key, sel)),
                }
            }
            pending.push(p);
        }
        let nodes: Vec<Node> = (0..next(5))
            .map(|i| {
                let mut bound = labeled(pod(&format!("e{i}"), "1", "1Gi"), "app", apps[next(3)]);
                if next(3) == 0 {
                    // Its required anti-affinity: an inverse group.
                    let (key, sel) = (keys[next(2)], selector("app", apps[next(3)]));
                    bound.pod_anti_affinity.push(term(key, sel));
                }
                let mut n = existing_node(ZONES[next(3)], ["8", "32Gi", "110"], false, bound);
                n.name = format!("n{i}");
                n.labels.insert(labels::HOSTNAME.into(), n.name.clone());
                n
            })
            .collect();
        let universe = [(
            labels::ZONE.to_string(),
            ZONES.iter().map(|z| z.to_string()).collect(),
        )]
        .into();
        let (topo, owned) = Topology::build(&pending, &nodes, universe, Default::default(), None);
        for (p, g) in pending.iter().zip(&owned) {
            let groups: Vec<(usize, Kind)> = (g.spread.iter().map(|&i| (i, Kind::Spread)))
                .chain(g.affinity.iter().map(|&i| (i, Kind::Affinity)))
                .chain(g.anti_affinity.iter().map(|&i| (i, Kind::AntiAffinity)))
                .collect();
            for _ in 0..6 {
                let zones: Vec<&str> = ZONES.iter().copied().filter(|_| next(2) == 0).collect();
                let mut node = Requirements::default();
                if next(3) > 0 {
                    node.add(Requirement::in_values(labels::ZONE, zones));
                }
                let host = format!("n{}", next(6));
                node.add(req(labels::HOSTNAME, Operator::In, &[host.as_str()]));
                let pod_reqs = Requirements::default();
                let whole = topo.added_over(p, &groups, &pod_reqs, &node, &pod_reqs);
                let each = keys
                    .iter()
                    .all(|k| topo.admits_on_key(p, &groups, &pod_reqs, k, node.get(k).cloned()));
                assert_eq!(whole.is_ok(), each, "{p:?} on {node:?}: {whole:?}");
                refused += usize::from(whole.is_err());
                // A key none of the pod's terms nor any inverse group is
                // on admits any node.
                for k in keys.into_iter().filter(|k| topo.key_free(&groups, k)) {
                    let node = node.get(k).cloned();
                    assert!(topo.admits_on_key(p, &groups, &pod_reqs, k, node));
                    free += 1;
                }
            }
        }
    }
    assert!(
        refused > 100,
        "the cases refuse too rarely to test: {refused}"
    );
    assert!(free > 50, "keys free of terms too rarely: {free}");
}

/// A `Prepared` that keeps the existing pods' topology counts plans every
/// subset of a cluster's nodes as a fresh plan does, and after a node's
/// pods, labels or room change and what was kept is forgotten, the
/// changed cluster too.
/// Bound pods of two apps, some with zone spreads and hostname
/// anti-affinity, and pending pods spreading over the same apps.
#[test]
fn kept_existing_counts_plan_as_counted_afresh() {
    let app = |p: Pod, a: &str| labeled(p, "app", a);
    let spreading = |name: &str, a: &str| {
        let mut p = app(pod(name, "1", "1Gi"), a);
        p.topology_spread.push(spread(
            labels::ZONE,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            selector("app", a),
        ));
        p.pod_anti_affinity
            .push(term(labels::HOSTNAME, selector("app", a)));
        p
    };
    let nodes: Vec<Node> = (0..6)
        .map(|i| {
            let a = ["web", "db"][i % 2];
            let mut n = existing_node(
                ZONES[i % 3],
                ["4", "16Gi", "20"],
                false,
                app(pod(&format!("bound-{i}"), "1", "1Gi"), a),
            );
            n.name = format!("n{i}");
            n.labels.insert(labels::HOSTNAME.into(), n.name.clone());
            if i % 3 == 0 {
                n.pods
                    .push(app(pod(&format!("extra-{i}"), "1", "1Gi"), "web"));
            }
            n
        })
        .collect();
    let pending: Vec<Pod> = (0..4)
        .map(|i| spreading(&format!("new-{i}"), ["web", "db"][i % 2]))
        .collect();
    let mut s = state(pending, vec![default_pool()]);
    s.nodes = nodes.clone();
    let json = |p: &Plan| serde_json::to_string(p).unwrap_or_default();
    let opts = SchedulerOptions::default();
    let mut prepared = Prepared::new(&s, &catalog(), &opts);
    prepared.keep_existing_counts();
    for mask in [
        0b111111u32,
        0b000111,
        0b101010,
        0b011001,
        0b111111,
        0b000001,
    ] {
        let mut sub = s.clone();
        sub.nodes = (nodes.iter().enumerate())
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| n.clone())
            .collect();
        let kept = json(&schedule_prepared(&sub, &catalog(), &opts, &prepared));
        assert_eq!(kept, json(&schedule(&sub, &catalog(), &opts)), "{mask:b}");
    }
    // A node's pods change (same count: only forgetting can tell): its
    // counts and its room.
    s.nodes[1].pods[0] = app(pod("moved", "3", "1Gi"), "web");
    prepared.forget_existing_counts();
    assert_eq!(
        json(&schedule_prepared(&s, &catalog(), &opts, &prepared)),
        json(&schedule(&s, &catalog(), &opts))
    );
    // A node's taints change: spreads that honor taints no longer count
    // it, which topology reads afresh.
    for p in &mut s.pending_pods {
        for c in &mut p.topology_spread {
            c.node_taints_policy = InclusionPolicy::Honor;
        }
    }
    assert_eq!(
        json(&schedule_prepared(&s, &catalog(), &opts, &prepared)),
        json(&schedule(&s, &catalog(), &opts))
    );
    s.nodes[0].taints.push(Taint {
        key: "dedicated".into(),
        value: "batch".into(),
        effect: TaintEffect::NoSchedule,
    });
    prepared.forget_existing_counts();
    assert_eq!(
        json(&schedule_prepared(&s, &catalog(), &opts, &prepared)),
        json(&schedule(&s, &catalog(), &opts))
    );
    // Room alone: a node's bound pod grows (the pending pod no longer fits).
    let mut plain = state(vec![pod("p", "2", "1Gi")], vec![default_pool()]);
    plain.nodes = vec![existing_node(
        "test-1a",
        ["4", "16Gi", "20"],
        false,
        pod("b", "1", "1Gi"),
    )];
    let mut prepared = Prepared::new(&plain, &catalog(), &opts);
    prepared.keep_existing_counts();
    let on_node = schedule_prepared(&plain, &catalog(), &opts, &prepared);
    assert_eq!(json(&on_node), json(&schedule(&plain, &catalog(), &opts)));
    assert!(on_node.node_claims.is_empty(), "{on_node:#?}");
    plain.nodes[0].pods[0] = pod("b", "3", "1Gi");
    prepared.forget_existing_counts();
    let grown = schedule_prepared(&plain, &catalog(), &opts, &prepared);
    assert_eq!(json(&grown), json(&schedule(&plain, &catalog(), &opts)));
    assert_eq!(grown.node_claims.len(), 1, "{grown:#?}");
}

/// The anchor tests' catalog: two amd64 and two arm64 types, on demand in
/// one zone.
fn anchor_catalog() -> Catalog {
    let types = [
        (info("a.large", "amd64", 2, 8192, 0), 0.10),
        (info("a.2xlarge", "amd64", 8, 32768, 0), 0.30),
        (info("g.medium", "arm64", 1, 4096, 0), 0.01),
        (info("g.2xlarge", "arm64", 8, 32768, 0), 0.08),
    ];
    let entries = (types.into_iter())
        .map(|(info, price)| CatalogEntry {
            info,
            offerings: vec![Offering {
                zone: ZONES[0].into(),
                capacity_type: CapacityType::OnDemand,
                price,
                available: UNLIMITED,
                reservation: None,
            }],
        })
        .collect();
    Catalog {
        entries,
        ..catalog()
    }
}

/// The anchor tests' pods: four that prefer amd64 (`p0`-`p3`, 1500m,
/// each changed by `p`) and four of a hostname spread (`s0`-`s3`, 400m)
/// that must stay where the first pass puts them: they also prefer a pod
/// on their node (a term on the hostname, which the repack does not
/// move pods under; it selects none, so the first pass relaxes it).
fn amd64_and_hostname_spread_pods(p: impl Fn(Pod) -> Pod) -> Vec<Pod> {
    let mut pods = Vec::new();
    for i in 0..4 {
        let mut one = labeled(pod(&format!("p{i}"), "1500m", "1Gi"), "app", "p");
        one.preferred_terms = vec![PreferredNodeTerm {
            weight: 1,
            requirements: reqs(vec![req(labels::ARCH, Operator::In, &["amd64"])]),
        }];
        pods.push(p(one));
    }
    for i in 0..4 {
        let mut s = labeled(pod(&format!("s{i}"), "400m", "512Mi"), "app", "s");
        s.topology_spread = vec![spread(
            labels::HOSTNAME,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            selector("app", "s"),
        )];
        s.preferred_pod_affinity = vec![WeightedPodAffinityTerm {
            weight: 1,
            term: term(labels::HOSTNAME, selector("app", "none")),
        }];
        pods.push(s);
    }
    pods
}

/// The plan of `pods` on the anchor tests' catalog, default NodePool.
fn plan_on_anchor_catalog(pods: Vec<Pod>) -> Plan {
    schedule(
        &state(pods, vec![default_pool()]),
        &anchor_catalog(),
        &SchedulerOptions::default(),
    )
}

/// The anchor tests' outcome: the four amd64 pods on one `a.2xlarge`
/// beside one spread pod, the other spread pods one per node on arm64
/// ($0.33 in all).
fn assert_amd64_pods_share_one_node(p: &Plan) {
    assert_eq!(p.summary.scheduled, 8, "{p:#?}");
    let amd = claim_of(p, "p0");
    assert_eq!(amd.price.instance_type, "a.2xlarge", "{p:#?}");
    for i in 1..4 {
        assert_eq!(claim_of(p, &format!("p{i}")).name, amd.name, "{p:#?}");
    }
    let mut spread_nodes: Vec<&str> = (0..4)
        .map(|i| claim_of(p, &format!("s{i}")).name.as_str())
        .collect();
    spread_nodes.sort_unstable();
    spread_nodes.dedup();
    assert_eq!(spread_nodes.len(), 4, "one spread pod per node: {p:#?}");
    assert!(
        (p.summary.hourly_price - 0.33).abs() < 1e-9,
        "{}",
        p.summary.hourly_price
    );
}

/// Anchors (`repack/anchors.rs`): the first pass puts each pod that
/// prefers amd64 on its own amd64 node with one pod of a hostname spread
/// (which must stay: it prefers a pod on its node), four `a.large` at
/// $0.10. The
/// repack moves the amd64 pods together onto one of those NodeClaims (an
/// anchor: it keeps its spread pod), an `a.2xlarge` at $0.30, and the
/// other three NodeClaims, left with their spread pod, shrink to arm64
/// nodes at $0.01. Without anchors the plan stays at $0.40 (checked).
#[test]
fn movable_pods_leave_their_anchors_to_share_a_node() {
    let pods = amd64_and_hostname_spread_pods(|p| p);
    assert_amd64_pods_share_one_node(&plan_on_anchor_catalog(pods));
}

/// Pods under a zone spread move within their zone (`Run::zone_bound`):
/// as in `movable_pods_leave_their_anchors_to_share_a_node`, but the amd64
/// pods also spread over the zones (one zone offers the types). The first
/// pass puts each on its own `a.large` beside one pod of a hostname spread
/// ($0.40); the repack moves the four onto one of those NodeClaims (an
/// `a.2xlarge` keeping its spread pod) in their zone and shrinks the other
/// three ($0.33). Before pods under a zone spread could move, the plan
/// stayed at $0.40.
#[test]
fn spreading_pods_move_within_their_zone_to_share_a_node() {
    let pods = amd64_and_hostname_spread_pods(|mut p| {
        p.topology_spread = vec![spread(
            labels::ZONE,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            selector("app", "p"),
        )];
        p
    });
    let p = plan_on_anchor_catalog(pods);
    assert_amd64_pods_share_one_node(&p);
    assert_eq!(
        claim_of(&p, "p0").zones,
        vec![ZONES[0].to_string()],
        "{p:#?}"
    );
}

/// Drawn clusters of Deployments under zone spreads, zone pod affinity,
/// hostname spreads and hostname anti-affinity, some preferring amd64,
/// beside unconstrained ones (a run whose repack moves spreading pods
/// within their zones, `Run::zone_bound`): every pod is placed and every
/// term holds in the plan the repack returns.
#[test]
fn pods_moved_within_their_zones_keep_every_term() {
    let mut draw = crate::scheduler::test_draws(0x20e5_b0d5);
    let sizes = [
        ("250m", "512Mi"),
        ("500m", "1Gi"),
        ("1", "2Gi"),
        ("1500m", "1Gi"),
    ];
    for case in 0..24 {
        // Kind per app: 0 none, 1 zone spread, 2 hostname spread, 3 zone
        // affinity to app0, 4 hostname anti-affinity. app0 spreads.
        let kinds: Vec<u64> = (0..6).map(|a| if a == 0 { 1 } else { draw(5) }).collect();
        let mut pods = Vec::new();
        for (a, &kind) in kinds.iter().enumerate() {
            let app = format!("app{a}");
            let (cpu, mem) = sizes[draw(4) as usize];
            let amd64 = draw(2) == 0;
            for i in 0..1 + draw(8) {
                let mut p = labeled(pod(&format!("{app}-{i}"), cpu, mem), "app", &app);
                if amd64 {
                    p.preferred_terms = vec![PreferredNodeTerm {
                        weight: 1,
                        requirements: reqs(vec![req(labels::ARCH, Operator::In, &["amd64"])]),
                    }];
                }
                let sel = selector("app", &app);
                let dns = WhenUnsatisfiable::DoNotSchedule;
                match kind {
                    1 => p.topology_spread = vec![spread(labels::ZONE, 1, dns, sel)],
                    2 => p.topology_spread = vec![spread(labels::HOSTNAME, 1, dns, sel)],
                    3 => p.pod_affinity = vec![term(labels::ZONE, selector("app", "app0"))],
                    4 => p.pod_anti_affinity = vec![term(labels::HOSTNAME, sel)],
                    _ => {}
                }
                pods.push(p);
            }
        }
        let n = pods.len();
        let p = plan(&state(pods, vec![default_pool()]));
        assert_eq!(p.summary.scheduled, n, "case {case}: {p:#?}");
        let app_of = |pod: &str| {
            pod.trim_start_matches("default/")
                .split('-')
                .next()
                .map(str::to_string)
        };
        let mut zones_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in &p.node_claims {
            let mut on_node: BTreeSet<String> = BTreeSet::new();
            for pod in &c.pods {
                let Some(app) = app_of(pod) else { continue };
                let a: usize = app[3..].parse().unwrap_or(0);
                if kinds[a] == 1 {
                    assert_eq!(
                        c.zones.len(),
                        1,
                        "case {case}: {} holds {pod}: {p:#?}",
                        c.name
                    );
                }
                if matches!(kinds[a], 1 | 3) {
                    // A zone affinity holds in every zone its NodeClaim allows.
                    let zones = zones_of.entry(app.clone()).or_default();
                    zones.extend(c.zones.iter().cloned());
                }
                if matches!(kinds[a], 2 | 4) {
                    assert!(
                        on_node.insert(app.clone()),
                        "case {case}: two of {app} on {}",
                        c.name
                    );
                }
            }
        }
        for (app, zones) in &zones_of {
            let a: usize = app[3..].parse().unwrap_or(0);
            if kinds[a] == 1 {
                let counts: Vec<usize> = ZONES
                    .iter()
                    .map(|z| zones.iter().filter(|x| x == z).count())
                    .collect();
                let (lo, hi) = (counts.iter().min(), counts.iter().max());
                assert!(
                    hi.zip(lo).is_some_and(|(h, l)| h - l <= 1),
                    "case {case}: {app} {counts:?}"
                );
            } else {
                let targets = &zones_of["app0"];
                assert!(
                    zones.iter().all(|z| targets.contains(z)),
                    "case {case}: {app} in {zones:?}, app0 in {targets:?}"
                );
            }
        }
    }
}

/// Pods of two Deployments under hostname spreads (`ScheduleAnyway`,
/// maxSkew 1; three of 300m / 5 GiB, four of 250m / 512 MiB) and one of
/// 1500m. The first pass leaves two of the small spread pods alone on
/// their own `m6g.large` (five nodes, $0.154); every pod a hostname
/// spread counts carries it, so the repack may move them, one of each
/// Deployment per node, and packs four nodes ($0.1232). Before, such
/// pods stayed where the first pass put them.
#[test]
fn pods_under_hostname_spreads_move_to_share_nodes() {
    assert_spread_pods_share_four_nodes(two_spread_deployments_beside_one(|p| p));
}

/// As `pods_under_hostname_spreads_move_to_share_nodes`, but each
/// Deployment prefers its pods apart on the hostname (preferred pod
/// anti-affinity selecting its own pods) instead of the spread: the most
/// common way charts spread replicas. The first pass holds the
/// preference (five nodes, $0.154); the repack moves the pods and keeps
/// them one of each Deployment per node (four, $0.1232). Before, such pods
/// stayed where the first pass put them.
#[test]
fn pods_preferring_their_own_kind_apart_move_and_stay_apart() {
    assert_spread_pods_share_four_nodes(two_spread_deployments_beside_one(|mut p| {
        let app = p.labels.get("app").cloned().unwrap_or_default();
        p.topology_spread.clear();
        p.preferred_pod_anti_affinity = vec![WeightedPodAffinityTerm {
            weight: 100,
            term: term(labels::HOSTNAME, selector("app", &app)),
        }];
        p
    }));
}

/// The spread tests' pods: three of 300m / 5 GiB (`a`) and four of 250m
/// / 512 MiB (`b`), each Deployment under a hostname spread
/// (`ScheduleAnyway`, maxSkew 1) and changed by `each`, and one pod of
/// 1500m (`c0`).
fn two_spread_deployments_beside_one(each: impl Fn(Pod) -> Pod) -> Vec<Pod> {
    let mut pods = Vec::new();
    for (app, n, cpu, mem) in [("a", 3, "300m", "5Gi"), ("b", 4, "250m", "512Mi")] {
        for i in 0..n {
            let mut p = labeled(pod(&format!("{app}{i}"), cpu, mem), "app", app);
            p.topology_spread = vec![spread(
                labels::HOSTNAME,
                1,
                WhenUnsatisfiable::ScheduleAnyway,
                selector("app", app),
            )];
            pods.push(each(p));
        }
    }
    pods.push(labeled(pod("c0", "1500m", "1Gi"), "app", "c"));
    pods
}

/// The spread tests' outcome: every pod on four `m6g.large` ($0.1232),
/// at most one of each spread Deployment per node.
fn assert_spread_pods_share_four_nodes(pods: Vec<Pod>) {
    let p = plan(&state(pods, vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 8, "{p:#?}");
    assert!((p.summary.hourly_price - 0.1232).abs() < 1e-9, "{p:#?}");
    for c in &p.node_claims {
        for app in ["a", "b"] {
            let on_node = (c.pods.iter())
                .filter(|k| k.starts_with(&format!("default/{app}")))
                .count();
            assert!(on_node <= 1, "{} holds {on_node} of {app}: {p:#?}", c.name);
        }
    }
}

/// Every movable pod is packed by its own requirements, not by those of
/// the NodeClaim the first pass put it on: the anchor tests' pods, but
/// the spread pods carry only their hostname spread, so the repack may
/// move every pod and no NodeClaim is an anchor. The first pass's four
/// `a.large` ($0.40) hold each an amd64 pod and a spread pod; packed by
/// those NodeClaims' (amd64) requirements, the spread pods could not
/// leave amd64; by their own, they go one per node to arm64 beside the
/// amd64 pods' `a.2xlarge` ($0.33).
#[test]
fn movable_pods_are_packed_by_their_own_requirements() {
    let mut pods = amd64_and_hostname_spread_pods(|p| p);
    for p in &mut pods {
        p.preferred_pod_affinity.clear();
    }
    assert_amd64_pods_share_one_node(&plan_on_anchor_catalog(pods));
}

/// As `pods_under_hostname_spreads_move_to_share_nodes`, but the spread
/// pods also prefer the zone of the 1500m pod: a zone term, so they move
/// only within their zone (`Movability::InZone`), and their NodeClaims
/// have no zone (the preferred pod runs on one that may launch in any).
/// A pod whose only zone term is preferred affinity, which no zone spread
/// counts, moves off such a NodeClaim to any new node (its zone was not
/// decided): the same four nodes ($0.1232). Before, such pods stayed.
#[test]
fn pods_preferring_a_zone_move_off_nodeclaims_of_no_zone() {
    assert_spread_pods_share_four_nodes(two_spread_deployments_beside_one(|mut p| {
        p.preferred_pod_affinity = vec![WeightedPodAffinityTerm {
            weight: 1,
            term: term(labels::ZONE, selector("app", "c")),
        }];
        p
    }));
}

/// A hostname spread of maxSkew 2 over twelve small pods: Karpenter
/// counts a hostname from zero, so at most two per node, however densely
/// the repack could pack them otherwise; and with another Deployment
/// beside them the repack moves them (it packs them at most two per
/// node, not as the first pass placed them).
#[test]
fn pods_moved_under_a_hostname_spread_go_at_most_max_skew_per_node() {
    for with_others in [false, true] {
        let mut pods = Vec::new();
        for i in 0..12 {
            let mut p = labeled(pod(&format!("s{i}"), "250m", "256Mi"), "app", "s");
            p.topology_spread = vec![spread(
                labels::HOSTNAME,
                2,
                WhenUnsatisfiable::ScheduleAnyway,
                selector("app", "s"),
            )];
            pods.push(p);
        }
        if with_others {
            for i in 0..5 {
                pods.push(labeled(pod(&format!("w{i}"), "1500m", "3Gi"), "app", "w"));
            }
        }
        let n = pods.len();
        let p = plan(&state(pods, vec![default_pool()]));
        assert_eq!(p.summary.scheduled, n, "{p:#?}");
        for c in &p.node_claims {
            let on_node = c.pods.iter().filter(|k| k.starts_with("default/s")).count();
            assert!(on_node <= 2, "{} holds {on_node}: {p:#?}", c.name);
        }
    }
}

/// Which hostname spreads the repack may move pods under
/// (`Topology::closed_hostname_spreads`): those whose every counted
/// pending pod carries them, capped at their maxSkew.
#[test]
fn closed_hostname_spreads_are_those_every_counted_pod_carries() {
    use super::topology::Topology;
    let host = |skew, app| {
        let sel = selector("app", app);
        Some(spread(
            labels::HOSTNAME,
            skew,
            WhenUnsatisfiable::ScheduleAnyway,
            sel,
        ))
    };
    let zone = Some(spread(
        labels::ZONE,
        1,
        WhenUnsatisfiable::DoNotSchedule,
        selector("app", "a"),
    ));
    // (case, pods as (app, spread), the cap of the first pod's spread)
    type Case = (
        &'static str,
        Vec<(&'static str, Option<TopologySpreadConstraint>)>,
        Option<u32>,
    );
    let cases: Vec<Case> = vec![
        (
            "every counted pod carries it",
            vec![("a", host(1, "a")), ("a", host(1, "a"))],
            Some(1),
        ),
        (
            "maxSkew 3",
            vec![("a", host(3, "a")), ("a", host(3, "a"))],
            Some(3),
        ),
        (
            "a counted pod without it",
            vec![("a", host(1, "a")), ("a", None)],
            None,
        ),
        (
            "counts another app without it",
            vec![("a", host(1, "b")), ("b", None)],
            None,
        ),
        (
            "counts another app with it",
            vec![("a", host(1, "b")), ("b", host(1, "b"))],
            Some(1),
        ),
        (
            "counted pods with another maxSkew",
            vec![("a", host(1, "a")), ("a", host(2, "a"))],
            None,
        ),
        ("counts no pending pod", vec![("a", host(2, "z"))], Some(2)),
        ("on the zone", vec![("a", zone)], None),
    ];
    for (case, pods, want) in cases {
        let pending: Vec<Pod> = (pods.iter().enumerate())
            .map(|(i, (app, c))| {
                let mut p = labeled(pod(&format!("{app}{i}"), "100m", "128Mi"), "app", app);
                p.topology_spread = c.iter().cloned().collect();
                p
            })
            .collect();
        let universe = [(
            labels::ZONE.to_string(),
            ZONES.iter().map(|z| z.to_string()).collect(),
        )]
        .into();
        let (topo, owned) = Topology::build(&pending, &[], universe, Default::default(), None);
        let closed = topo.closed_hostname_spreads(&pending, &owned);
        assert_eq!(closed[owned[0].spread[0]], want, "{case}");
    }
}

/// `n` replicas of `template` (one template: twins), named `{name}-{i}`.
fn replicas(template: &Pod, n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = template.clone();
            p.name = format!("{}-{i}", template.name);
            p
        })
        .collect()
}

/// A Deployment that topology alone holds (zone affinity to pods not
/// placed yet) fails once: its twins fail the same way without a try
/// until a pod its terms count is placed; then they follow it.
#[test]
fn a_deployment_held_by_topology_is_remembered_until_its_topology_changes() {
    let mut cache = pod("cache", "1", "1Gi");
    cache.pod_affinity = vec![term(labels::ZONE, selector("app", "db"))];
    let mut pods = replicas(&cache, 3);
    let mut db = labeled(pod("db", "100m", "128Mi"), "app", "db");
    db.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &["test-1b"])]);
    pods.push(db);
    let s = state(pods, vec![default_pool()]);
    with_run(&s, &catalog(), |run| {
        let r = Relaxation::default();
        let (first, twin, db) = (PodIdx::new(0), PodIdx::new(1), PodIdx::new(3));
        assert!(run.still_unplaceable(twin, &r).is_none());
        let failed = run.add(first, &r).unwrap_err().to_string();
        assert!(failed.contains("pod affinity"), "{failed}");
        let stamp = run.topology_stamp(twin);
        assert!(run.still_unplaceable(twin, &r).is_some());
        assert_eq!(run.add(twin, &r).unwrap_err().to_string(), failed);
        // Another relaxation asks again.
        let relaxed = Relaxation {
            dropped_schedule_anyway: true,
            ..Relaxation::default()
        };
        assert!(run.still_unplaceable(twin, &relaxed).is_none());
        assert!(run.add(db, &r).is_ok());
        let moved = run.topology_stamp(twin);
        assert_ne!(moved, stamp);
        assert!(run.still_unplaceable(twin, &r).is_none());
        assert!(run.add(twin, &r).is_ok());
    });
    let p = plan(&s);
    assert_eq!(p.summary.scheduled, 4, "{p:#?}");
    for i in 0..3 {
        assert_eq!(claim_of(&p, &format!("cache-{i}")).zones, vec!["test-1b"]);
    }
}

/// A failure is remembered only when every NodePool's refusal lasts while
/// topology does: not a NodePool's limits, which narrowing NodeClaims give
/// back.
#[test]
fn a_failure_is_remembered_only_when_every_refusal_lasts() {
    let mut tainted = pool("tainted", vec![]);
    tainted.taints = vec![Taint {
        key: "gpu".into(),
        value: "true".into(),
        effect: TaintEffect::NoSchedule,
    }];
    let mut limited = pool("limited", vec![]);
    limited.limits = Some(Resources::new().with("cpu", q("1")).into());
    let amd = pool("amd", vec![req(labels::ARCH, Operator::In, &["amd64"])]);
    // (the second NodePool, its refusal, whether the failure is remembered)
    let cases = [(limited, "limits", false), (amd, "arm64", true)];
    for (second, why, remembered) in cases {
        let mut big = pod("big", "1", "1Gi");
        big.node_selector = reqs(vec![req(labels::ARCH, Operator::In, &["arm64"])]);
        let mut pods = replicas(&big, 2);
        // Topology is active: another pod spreads.
        let mut spreading = labeled(pod("web", "100m", "128Mi"), "app", "web");
        spreading.topology_spread = vec![spread(
            labels::ZONE,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            selector("app", "web"),
        )];
        pods.push(spreading);
        let s = state(pods, vec![tainted.clone(), second]);
        with_run(&s, &catalog(), |run| {
            let r = Relaxation::default();
            let failed = run.add(PodIdx::new(0), &r).unwrap_err().to_string();
            assert!(failed.contains(why), "{why}: {failed}");
            let memo = run.still_unplaceable(PodIdx::new(1), &r);
            assert_eq!(memo.is_some(), remembered, "{why}: {failed}");
        });
    }
}

/// Which pods have a shape (their walk starts where the shape's last one
/// ended: a node that refused one refuses it for good): pods whose only
/// topology is anti-affinity or hostname spreads. A zone spread's least
/// count moves, and pod affinity needs pods placed later.
#[test]
fn pods_with_hostname_spreads_only_have_a_shape() {
    let host = spread(
        labels::HOSTNAME,
        1,
        WhenUnsatisfiable::DoNotSchedule,
        selector("app", "s"),
    );
    let zone = spread(
        labels::ZONE,
        1,
        WhenUnsatisfiable::DoNotSchedule,
        selector("app", "s"),
    );
    let near = term(labels::HOSTNAME, selector("app", "t"));
    // (spreads, pod affinity, has a shape)
    let cases = [
        (vec![], vec![], true),
        (vec![host.clone()], vec![], true),
        (vec![host.clone(), host.clone()], vec![], true),
        (vec![zone.clone()], vec![], false),
        (vec![host.clone(), zone], vec![], false),
        (vec![host], vec![near], false),
    ];
    for (i, (spreads, affinity, shaped)) in cases.into_iter().enumerate() {
        let mut p = labeled(pod("s", "100m", "128Mi"), "app", "s");
        p.topology_spread = spreads;
        p.pod_affinity = affinity;
        let s = state(vec![p], vec![default_pool()]);
        with_run(&s, &catalog(), |run| {
            assert_eq!(
                run.hints.shape(PodIdx::new(0)).is_some(),
                shaped,
                "case {i}"
            );
        });
    }
}

/// A hostname spread of `maxSkew` 2 over one Deployment: two pods a node,
/// the walk of each pod starting where the last one's ended.
#[test]
fn a_hostname_spread_of_skew_two_puts_two_pods_on_each_node() {
    let mut web = labeled(pod("web", "100m", "128Mi"), "app", "web");
    web.topology_spread = vec![spread(
        labels::HOSTNAME,
        2,
        WhenUnsatisfiable::DoNotSchedule,
        selector("app", "web"),
    )];
    let p = plan(&state(replicas(&web, 7), vec![default_pool()]));
    assert_eq!(p.summary.scheduled, 7, "{p:#?}");
    assert_eq!(p.node_claims.len(), 4, "{p:#?}");
    assert!(p.node_claims.iter().all(|c| c.pods.len() <= 2), "{p:#?}");
}

/// Size classes alike on the hostname (`hints::host_alike_classes`): a
/// NodeClaim that a hostname constraint refuses for one pod of such a class
/// refuses them all for good, so the class's walk drops it.
#[test]
fn size_classes_alike_on_the_hostname() {
    let web = |name: &str| {
        let mut p = labeled(
            labeled(pod(name, "500m", "1Gi"), "tier", "web"),
            "app",
            name,
        );
        p.topology_spread = vec![
            spread(
                labels::ZONE,
                1,
                WhenUnsatisfiable::DoNotSchedule,
                selector("tier", "web"),
            ),
            spread(
                labels::HOSTNAME,
                2,
                WhenUnsatisfiable::DoNotSchedule,
                selector("tier", "web"),
            ),
        ];
        p
    };
    let with = |mut p: Pod, f: &dyn Fn(&mut Pod)| {
        f(&mut p);
        p
    };
    let cases: Vec<(&str, Vec<Pod>, bool)> = vec![
        (
            "two Deployments under one shared spread",
            vec![web("a"), web("b")],
            true,
        ),
        (
            "one pod the shared spread does not select",
            vec![web("a"), labeled(web("b"), "tier", "api")],
            false,
        ),
        (
            "another hostname maxSkew",
            vec![
                web("a"),
                with(web("b"), &|p| p.topology_spread[1].max_skew = 3),
            ],
            false,
        ),
        (
            "hostname anti-affinity on one only",
            vec![
                web("a"),
                with(web("b"), &|p| {
                    p.pod_anti_affinity = vec![term(labels::HOSTNAME, selector("app", "b"))]
                }),
            ],
            false,
        ),
        (
            "zone anti-affinity on one only (not read on the hostname)",
            vec![
                web("a"),
                with(web("b"), &|p| {
                    p.pod_anti_affinity = vec![term(labels::ZONE, selector("app", "b"))]
                }),
            ],
            true,
        ),
        (
            "another namespace",
            vec![web("a"), with(web("b"), &|p| p.namespace = "other".into())],
            false,
        ),
        (
            "no hostname term at all: nothing to refuse there",
            vec![
                with(web("a"), &|p| p.topology_spread.truncate(1)),
                with(web("b"), &|p| p.topology_spread.truncate(1)),
            ],
            false,
        ),
    ];
    for (name, pods, want) in cases {
        let volume = vec![volumes::VolumeTerms::default(); pods.len()];
        let (size, n) = hints::size_classes(&pods, &volume);
        assert_eq!(size[0], size[1], "{name}: one size class");
        let alike = hints::host_alike_classes(&pods, &size, n);
        assert_eq!(alike[size[0]], want, "{name}");
    }
}

/// A NodeClaim that one Deployment's hostname spread closes stays open to
/// another Deployment of the same size without that spread: the walk drops
/// a NodeClaim for a whole size class only when the class is alike on the
/// hostname (`hints::host_alike_classes`).
#[test]
fn a_hostname_spread_closes_nodeclaims_only_to_its_own_pods() {
    let deployment = |app: &str, host_skew: Option<u32>| -> Vec<Pod> {
        (0..2)
            .map(|i| {
                let mut p = labeled(pod(&format!("{app}-{i}"), "500m", "1Gi"), "app", app);
                p.topology_spread = vec![spread(
                    labels::ZONE,
                    10,
                    WhenUnsatisfiable::DoNotSchedule,
                    selector("app", app),
                )];
                if let Some(skew) = host_skew {
                    p.topology_spread.push(spread(
                        labels::HOSTNAME,
                        skew,
                        WhenUnsatisfiable::DoNotSchedule,
                        selector("app", app),
                    ));
                }
                p
            })
            .collect()
    };
    let mut pods = deployment("a", Some(1));
    pods.extend(deployment("b", None));
    let p = plan(&state(pods, vec![default_pool()]));
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let mut held: Vec<Vec<&str>> = (p.node_claims.iter())
        .map(|c| {
            c.pods
                .iter()
                .map(|k| k.rsplit('/').next().unwrap_or(k))
                .collect()
        })
        .collect();
    for h in &mut held {
        h.sort();
    }
    held.sort();
    // The first NodeClaim (a-0's) takes b's pods, as Karpenter's walk in
    // creation order does; a walk that dropped it for the size class when
    // it refused a-1 would put them beside a-1.
    assert_eq!(held, vec![vec!["a-0", "b-0", "b-1"], vec!["a-1"]]);
}

/// Pods of random sizes (so most are alone in their size class), a third
/// with a zone spread, some pinned to a zone, on the embedded catalog with
/// the default NodePool held to three zones, a few asking for a GPU: the
/// size classes' walks that jump the growth index's runs (`Walk::jump`)
/// plan as walks that ask every NodeClaim (debug builds check each jump's
/// hints, and each growth refusal against the rule).
#[test]
fn size_class_walks_that_jump_plan_as_walks_that_ask_each_nodeclaim() {
    let catalog = Catalog::embedded("us-west-2").unwrap();
    let zones = ["us-west-2a", "us-west-2b", "us-west-2c"];
    let mut draw = crate::scheduler::test_draws(0x5eed_2026);
    let json = |p: &Plan| serde_json::to_string(p).unwrap_or_default();
    // Few sizes (size classes of many pods, whose hints carry over) to
    // many.
    for (round, sizes) in [6, 12, 60].into_iter().enumerate() {
        let pods: Vec<Pod> = (0..600)
            .map(|i| {
                let size = 1 + draw(sizes);
                let cpu = format!("{}m", 250 * size);
                let mem = format!("{}Mi", 512 * (size + draw(3)));
                let app = format!("app-{}", draw(8));
                let mut p = labeled(pod(&format!("p{round}-{i}"), &cpu, &mem), "app", &app);
                if draw(3) == 0 {
                    let sel = selector("app", &app);
                    let when = WhenUnsatisfiable::DoNotSchedule;
                    p.topology_spread = vec![spread(labels::ZONE, 1, when, sel)];
                }
                if draw(15) == 0 {
                    // Weighed against NodeClaims without a GPU by the
                    // steps to types with one (`GrowthFloor`).
                    let gpu = p
                        .requests
                        .clone()
                        .with(crate::resources::NVIDIA_GPU, q("1"));
                    p.requests = gpu;
                }
                if draw(10) == 0 {
                    let zone = zones[draw(3) as usize];
                    p.node_selector = reqs(vec![req(labels::ZONE, Operator::In, &[zone])]);
                }
                p
            })
            .collect();
        let np = pool(
            "default",
            vec![
                req(labels::CAPACITY_TYPE, Operator::In, &["spot", "on-demand"]),
                req(labels::ZONE, Operator::In, &zones),
            ],
        );
        let s = state(pods, vec![np]);
        let opts = SchedulerOptions::default();
        super::joining::JUMPS.with(|j| j.set(0));
        let jumped = json(&schedule(&s, &catalog, &opts));
        assert!(
            super::joining::JUMPS.with(|j| j.get()) > 0,
            "round {round}: no jump"
        );
        super::joining::ASK_EACH.with(|a| a.set(true));
        let asked = json(&schedule(&s, &catalog, &opts));
        super::joining::ASK_EACH.with(|a| a.set(false));
        assert_eq!(jumped, asked, "round {round}");
    }
}
