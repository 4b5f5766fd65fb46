//! NodePool disruption budgets (`spec.disruption.budgets`), Karpenter v1's
//! way: per NodePool and reason, the nodes that may be disrupting at once
//! are the minimum over the budgets active now that apply to the reason
//! (a percentage of the pool's nodes, rounded up), minus the pool's nodes
//! already disrupting for any reason. Forceful reasons (expiry, spot
//! interruption) are not limited but count as disrupting.

use crate::model::{Budget, DisruptionReason, NodePool};

use super::schedule::budget_active;

pub(crate) struct Budgets {
    pools: Vec<PoolBudget>,
}

struct PoolBudget {
    /// Nodes of the pool (disrupting ones included).
    nodes: usize,
    /// Nodes of the pool disrupting (in flight, and taken by this run).
    disrupting: usize,
    /// Per graceful reason: (allowed at once, the budget that sets it).
    limits: Vec<(DisruptionReason, usize, Option<String>)>,
}

const GRACEFUL: [DisruptionReason; 3] = [
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Underutilized,
];

fn describe(b: &Budget, nodes: usize, allowed: usize) -> String {
    let what = match b.nodes {
        crate::model::IntOrPercent::Int(n) => format!("nodes: {n}"),
        crate::model::IntOrPercent::Percent(p) => {
            format!("nodes: {p}% of {nodes} = {allowed}")
        }
    };
    match &b.schedule {
        Some(s) => format!("{what}, schedule {s:?}"),
        None => what,
    }
}

impl Budgets {
    /// `nodes[i]` / `disrupting[i]`: node counts of pool `i`. Budgets whose
    /// schedule does not parse count as active (never disrupt more than the
    /// user allowed); the error is returned as a warning.
    pub fn new(
        pools: &[NodePool],
        nodes: &[usize],
        disrupting: &[usize],
        now: i64,
        warnings: &mut Vec<String>,
    ) -> Budgets {
        let pools = pools
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let n = nodes.get(i).copied().unwrap_or(0);
                let mut limits = Vec::new();
                for reason in GRACEFUL {
                    let mut best: (usize, Option<String>) = (usize::MAX, None);
                    for b in &p.disruption.budgets {
                        if !b.reasons.is_empty() && !b.reasons.contains(&reason) {
                            continue;
                        }
                        let active = budget_active(b, now).unwrap_or_else(|e| {
                            let w = format!(
                                "NodePool {}: budget schedule {:?}: {e}; treating the budget as active",
                                p.name,
                                b.schedule.as_deref().unwrap_or("")
                            );
                            if !warnings.contains(&w) {
                                warnings.push(w);
                            }
                            true
                        });
                        if !active {
                            continue;
                        }
                        let allowed = b.nodes.of(n, true);
                        if allowed < best.0 {
                            best = (allowed, Some(describe(b, n, allowed)));
                        }
                    }
                    limits.push((reason, best.0, best.1));
                }
                PoolBudget {
                    nodes: n,
                    disrupting: disrupting.get(i).copied().unwrap_or(0),
                    limits,
                }
            })
            .collect();
        Budgets { pools }
    }

    /// Nodes of pool `pool` that may still start disrupting for `reason`.
    pub fn remaining(&self, pool: usize, reason: DisruptionReason) -> usize {
        let Some(p) = self.pools.get(pool) else {
            return 0;
        };
        if reason.is_forceful() {
            return usize::MAX;
        }
        p.limits
            .iter()
            .find(|(r, _, _)| *r == reason)
            .map_or(usize::MAX, |(_, allowed, _)| {
                if *allowed == usize::MAX {
                    usize::MAX
                } else {
                    allowed.saturating_sub(p.disrupting)
                }
            })
    }

    /// Count `n` more nodes of `pool` as disrupting.
    pub fn take(&mut self, pool: usize, n: usize) {
        if let Some(p) = self.pools.get_mut(pool) {
            p.disrupting = p.disrupting.saturating_add(n);
        }
    }

    /// Why pool `pool` may not disrupt another node for `reason` now.
    pub fn blocked_reason(&self, pool: usize, pool_name: &str, reason: DisruptionReason) -> String {
        let Some(p) = self.pools.get(pool) else {
            return format!("NodePool {pool_name} is unknown");
        };
        let limit = p.limits.iter().find(|(r, _, _)| *r == reason);
        match limit {
            Some((_, allowed, Some(which))) => format!(
                "disruption budget of NodePool {pool_name} ({which}) allows {allowed} {} disruption(s) at once and {} of its {} nodes are disrupting",
                reason.as_str(),
                p.disrupting,
                p.nodes
            ),
            _ => format!(
                "disruption budgets of NodePool {pool_name} allow no {} disruption now",
                reason.as_str()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Budget, IntOrPercent, NodePool};
    use crate::Requirements;

    fn pool(budgets: Vec<Budget>) -> NodePool {
        let mut p = NodePool::new("default", Requirements::new());
        p.disruption.budgets = budgets;
        p
    }

    fn b(nodes: IntOrPercent, reasons: &[DisruptionReason]) -> Budget {
        Budget {
            nodes,
            reasons: reasons.to_vec(),
            schedule: None,
            duration_seconds: None,
        }
    }

    #[test]
    fn table() {
        use DisruptionReason::*;
        use IntOrPercent::*;
        // (budgets, nodes, disrupting, reason, remaining)
        let cases: Vec<(Vec<Budget>, usize, usize, DisruptionReason, usize)> = vec![
            (vec![Budget::default_budget()], 10, 0, Underutilized, 1),
            (vec![Budget::default_budget()], 5, 0, Empty, 1), // 0.5 rounds up
            (vec![Budget::default_budget()], 0, 0, Empty, 0),
            (vec![Budget::default_budget()], 30, 2, Drifted, 1),
            (vec![b(Int(0), &[])], 10, 0, Empty, 0),
            (vec![b(Int(0), &[Drifted])], 10, 0, Empty, usize::MAX),
            (vec![b(Int(0), &[Drifted])], 10, 0, Drifted, 0),
            (
                vec![b(Percent(100), &[]), b(Int(2), &[Underutilized])],
                10,
                1,
                Underutilized,
                1,
            ),
            (vec![], 10, 3, Underutilized, usize::MAX),
            (vec![b(Int(0), &[])], 10, 0, Expired, usize::MAX),
        ];
        for (budgets, nodes, disrupting, reason, want) in cases {
            let pools = vec![pool(budgets.clone())];
            let mut w = vec![];
            let got = Budgets::new(&pools, &[nodes], &[disrupting], 0, &mut w).remaining(0, reason);
            assert_eq!(
                got, want,
                "{budgets:?} nodes={nodes} disrupting={disrupting} {reason:?}"
            );
        }
    }

    #[test]
    fn taking_uses_up_every_reason() {
        let pools = vec![pool(vec![b(IntOrPercent::Int(2), &[])])];
        let mut bs = Budgets::new(&pools, &[10], &[0], 0, &mut vec![]);
        bs.take(0, 1);
        assert_eq!(bs.remaining(0, DisruptionReason::Empty), 1);
        bs.take(0, 1);
        assert_eq!(bs.remaining(0, DisruptionReason::Drifted), 0);
        let why = bs.blocked_reason(0, "default", DisruptionReason::Drifted);
        assert!(why.contains("default") && why.contains("nodes: 2"), "{why}");
    }
}
