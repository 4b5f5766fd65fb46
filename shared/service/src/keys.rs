//! The single-table key schema (DynamoDB `pk` / `sk`).
//!
//! | pk | sk | what | TTL |
//! |----|----|------|-----|
//! | `CLUSTERS` | `<cluster>` | registry of clusters (sweep enumerates it) | — |
//! | `CLUSTER#<c>` | `SCHEDULER` | pending batch pointer + scheduling lease | — |
//! | `CLUSTER#<c>` | `BATCH#<b>` | batch header (chunk count, content hash) | retention |
//! | `CLUSTER#<c>` | `BATCH#<b>#<nnnn>` | batch body chunk (gzip JSON) | retention |
//! | `CLUSTER#<c>` | `CONTEXT#<b>` | NodePools/NodeClasses/overlays + cluster info for launch | retention |
//! | `CLUSTER#<c>` | `RESULT#<b>` | plan summary and unschedulable pods of a batch | retention |
//! | `CLUSTER#<c>` | `NODECLAIM#<name>` | NodeClaim record (state machine) | after deletion |
//! | `CLUSTER#<c>` | `ACTION#<id>` | an action for the agent (cordon, drain, relabel) | after done |
//! | `CLUSTER#<c>` | `NODES` | the cluster's nodes of Flotilla NodeClaims, as the agent last posted them | — |
//! | `CLUSTER#<c>` | `STATE` | the newest stored batch (cluster state) of any post, heartbeats included | — |
//! | `CLUSTER#<c>` | `STATE#HEAD` | the state kept by changes: stream, sequence, snapshot and deltas since (see `changes`) | — |
//! | `CLUSTER#<c>` | `STATE#<SNAPSHOT\|DELTA\|PART>#<id>#<nnnn>` | a snapshot of the state, one post's changes, a resync part (gzip JSON chunks) | retention |
//! | `CLUSTER#<c>` | `DISRUPTION#<id>` | a disruption decision being carried out (state machine) | after it ends |
//! | `CLUSTER#<c>` | `REPLACEMENTS#<id>#<hash>#<nnnn>` | a decision's replacement plans (gzip JSON chunks; `hash`: of the plans, checked on reading) | 1 day |
//! | `CLUSTER#<c>` | `DISRUPTING#<node>` | the node's in-flight decision (one per node: written with it) | after it ends |
//! | `CLUSTER#<c>` | `INTERRUPTED#<nodeclaim>` | an EC2 interruption (or rebalance) notice for the NodeClaim's instance | 1 day |
//! | `CLUSTER#<c>` | `NODETIMES` | since when each node has had its current pods (disruption's clock) | — |
//! | `CLUSTER#<c>` | `NODECLASS#<name>` | what the EC2NodeClass resolved to (disruption's drift checks, see `resolve`) | 5 min |
//! | `REGION#<r>` | `OFFERINGS` | offering-cache head (generation, chunk count) | — |
//! | `REGION#<r>` | `OFFERINGS#<gen>#<nnnn>` | offering-cache chunk | 1 day |
//! | `REGION#<r>` | `ICE#<type>#<zone>#<capacity-type>` | unavailable offering | 45 s |
//! | `REGION#<r>` | `PRICES` | on-demand prices from the AWS Price List API (or the last failure) | 2 days |
//! | `RESERVATION#<id>` | `COUNT` | NodeClaims holding the reservation (counter, bounded by its size) | — |
//! | `LAUNCHTEMPLATE#<region>` | `<name>` | last use of a Flotilla launch template (for GC) | — |

use flotilla_ports::Key;

pub const CLUSTERS: &str = "CLUSTERS";

pub fn cluster_pk(cluster: &str) -> String {
    format!("CLUSTER#{cluster}")
}

pub fn registry(cluster: &str) -> Key {
    Key::new(CLUSTERS, cluster)
}

pub fn scheduler(cluster: &str) -> Key {
    Key::new(cluster_pk(cluster), "SCHEDULER")
}

pub fn batch_header(cluster: &str, batch: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("BATCH#{batch}"))
}

pub fn batch_chunk(cluster: &str, batch: &str, i: usize) -> Key {
    Key::new(cluster_pk(cluster), format!("BATCH#{batch}#{i:04}"))
}

pub fn context(cluster: &str, batch: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("CONTEXT#{batch}"))
}

pub fn result(cluster: &str, batch: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("RESULT#{batch}"))
}

pub const NODECLAIM_PREFIX: &str = "NODECLAIM#";

pub fn node_claim(cluster: &str, name: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("{NODECLAIM_PREFIX}{name}"))
}

pub const ACTION_PREFIX: &str = "ACTION#";

pub fn action(cluster: &str, id: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("{ACTION_PREFIX}{id}"))
}

/// The nodes the agent last reported (see `intake::NodesReport`).
pub fn nodes(cluster: &str) -> Key {
    Key::new(cluster_pk(cluster), "NODES")
}

/// The newest stored batch of the cluster (see `cluster_state`).
pub fn state_pointer(cluster: &str) -> Key {
    Key::new(cluster_pk(cluster), "STATE")
}

/// The head of the cluster's state kept by changes (see `changes`).
pub fn state_head(cluster: &str) -> Key {
    Key::new(cluster_pk(cluster), "STATE#HEAD")
}

/// Chunk `i` of a stored state blob: `kind` is `SNAPSHOT`, `DELTA` or
/// `PART`.
pub fn state_blob(cluster: &str, kind: &str, id: &str, i: usize) -> Key {
    Key::new(cluster_pk(cluster), format!("STATE#{kind}#{id}#{i:04}"))
}

/// What EC2NodeClass `name` resolved to (see `resolve`).
pub fn node_class(cluster: &str, name: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("NODECLASS#{name}"))
}

pub const DISRUPTION_PREFIX: &str = "DISRUPTION#";

pub fn disruption(cluster: &str, id: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("{DISRUPTION_PREFIX}{id}"))
}

/// Chunk `i` of decision `id`'s replacement plans, compressed to a blob
/// whose content hash is `blob`.
pub fn replacements(cluster: &str, id: &str, blob: &str, i: usize) -> Key {
    Key::new(
        cluster_pk(cluster),
        format!("REPLACEMENTS#{id}#{blob}#{i:04}"),
    )
}

pub const DISRUPTING_PREFIX: &str = "DISRUPTING#";

/// The per-node marker of an in-flight disruption decision.
pub fn disrupting(cluster: &str, node: &str) -> Key {
    Key::new(cluster_pk(cluster), format!("{DISRUPTING_PREFIX}{node}"))
}

pub const INTERRUPTED_PREFIX: &str = "INTERRUPTED#";

pub fn interrupted(cluster: &str, node_claim: &str) -> Key {
    Key::new(
        cluster_pk(cluster),
        format!("{INTERRUPTED_PREFIX}{node_claim}"),
    )
}

/// Since when each node has carried its current pods.
pub fn node_times(cluster: &str) -> Key {
    Key::new(cluster_pk(cluster), "NODETIMES")
}

pub fn region_pk(region: &str) -> String {
    format!("REGION#{region}")
}

pub fn offerings_head(region: &str) -> Key {
    Key::new(region_pk(region), "OFFERINGS")
}

pub fn offerings_chunk(region: &str, generation: &str, i: usize) -> Key {
    Key::new(region_pk(region), format!("OFFERINGS#{generation}#{i:04}"))
}

pub fn prices(region: &str) -> Key {
    Key::new(region_pk(region), "PRICES")
}

pub const ICE_PREFIX: &str = "ICE#";

pub fn ice(region: &str, instance_type: &str, zone: &str, capacity_type: &str) -> Key {
    Key::new(
        region_pk(region),
        format!("{ICE_PREFIX}{instance_type}#{zone}#{capacity_type}"),
    )
}

pub fn reservation(id: &str) -> Key {
    Key::new(format!("RESERVATION#{id}"), "COUNT")
}

pub fn launch_template(region: &str, name: &str) -> Key {
    Key::new(format!("LAUNCHTEMPLATE#{region}"), name)
}
