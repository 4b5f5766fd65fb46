//! Resource lists (`cpu`, `memory`, `pods`, extended resources) with exact
//! arithmetic. The resources the scheduler sees on every pod sit in a fixed
//! array so the hot `fits` check is a handful of integer compares; any other
//! extended resource lives in a small sorted side map.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::quantity::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
pub const EFA: &str = "vpc.amazonaws.com/efa";

/// Resources stored in the fixed array, in output order.
pub const KNOWN: [&str; 11] = [
    CPU,
    MEMORY,
    PODS,
    EPHEMERAL_STORAGE,
    NVIDIA_GPU,
    AMD_GPU,
    AWS_NEURON,
    AWS_NEURON_CORE,
    HABANA_GAUDI,
    POD_ENI,
    EFA,
];
const N: usize = KNOWN.len();

fn known_index(name: &str) -> Option<usize> {
    KNOWN.iter().position(|k| *k == name)
}

/// Resource names a pod may request that Kubernetes treats as extended
/// (domain-prefixed) rather than native.
pub fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.starts_with("kubernetes.io/")
}

/// How many of the known resources (cpu, memory, pods, ephemeral-storage)
/// a [`Compact`] list holds.
pub const COMPACT: usize = 4;

/// How many [`KNOWN`] resources come past the [`COMPACT`] ones.
pub const BEYOND: usize = KNOWN.len() - COMPACT;

/// The first [`COMPACT`] known quantities (millis) of a resource list, for
/// the hot fit checks of requests that ask for nothing else: a small array
/// kept beside each instance type, compared without touching the type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compact([i64; COMPACT]);

impl Compact {
    /// Its quantities (millis), in [`KNOWN`]'s order.
    pub fn quantities(&self) -> &[i64; COMPACT] {
        &self.0
    }

    /// Whether a request of these quantities fits in `capacity`.
    #[inline]
    pub fn fits_in(&self, capacity: &Compact) -> bool {
        self.0.iter().zip(&capacity.0).all(|(a, b)| a <= b)
    }

    #[cfg(test)]
    pub(crate) fn for_test(quantities: [i64; COMPACT]) -> Compact {
        Compact(quantities)
    }
}

#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    known: [Quantity; N],
    other: Option<BTreeMap<String, Quantity>>,
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, name: &str, q: Quantity) -> Self {
        self.set(name, q);
        self
    }

    pub fn get(&self, name: &str) -> Quantity {
        match known_index(name) {
            Some(i) => self.known[i],
            None => self
                .other
                .as_ref()
                .and_then(|m| m.get(name).copied())
                .unwrap_or(Quantity::ZERO),
        }
    }

    pub fn cpu(&self) -> Quantity {
        self.known[0]
    }
    pub fn memory(&self) -> Quantity {
        self.known[1]
    }
    pub fn pods(&self) -> Quantity {
        self.known[2]
    }

    pub fn set(&mut self, name: &str, q: Quantity) {
        match known_index(name) {
            Some(i) => self.known[i] = q,
            None => {
                let m = self.other.get_or_insert_with(Default::default);
                if q.is_zero() {
                    m.remove(name);
                } else {
                    m.insert(name.to_string(), q);
                }
                if m.is_empty() {
                    self.other = None;
                }
            }
        }
    }

    pub fn add_assign(&mut self, o: &Resources) {
        for i in 0..N {
            self.known[i] += o.known[i];
        }
        if let Some(om) = &o.other {
            for (k, v) in om.iter() {
                let cur = self.get(k);
                self.set(k, cur + *v);
            }
        }
    }

    pub fn plus(&self, o: &Resources) -> Resources {
        let mut r = self.clone();
        r.add_assign(o);
        r
    }

    /// Component-wise subtraction, saturating at zero.
    pub fn minus(&self, o: &Resources) -> Resources {
        let mut r = self.clone();
        for i in 0..N {
            r.known[i] = r.known[i] - o.known[i];
        }
        if let Some(om) = &o.other {
            for (k, v) in om.iter() {
                let cur = r.get(k);
                r.set(k, cur - *v);
            }
        }
        r
    }

    /// How many copies of `each` fit in `self` less `reserved`: the least,
    /// over the resources `each` asks (see [`Self::iter`]), of room over
    /// request (a zero request counts as one milli); 0 when it asks none.
    /// Same as `self.minus(reserved)` asked per resource, without building it.
    pub fn copies_of(&self, reserved: &Resources, each: &Resources) -> i64 {
        let per = |room: Quantity, q: Quantity| room.millis() / q.millis().max(1);
        let known = (0..N)
            .filter(|&i| !each.known[i].is_zero())
            .map(|i| per(self.known[i] - reserved.known[i], each.known[i]));
        let other = (each.other.iter())
            .flat_map(|m| m.iter())
            .map(|(k, q)| per(self.get(k) - reserved.get(k), *q));
        known.chain(other).min().unwrap_or(0)
    }

    /// The component-wise minimum of `all` (see [`Self::min_each`]; zero
    /// when there are none).
    pub fn min_of<'r>(all: impl IntoIterator<Item = &'r Resources>) -> Resources {
        let mut it = all.into_iter();
        let first = it.next().cloned().unwrap_or_default();
        it.fold(first, |min, r| min.min_each(r))
    }

    /// Component-wise minimum (a resource absent on either side is zero).
    pub fn min_each(&self, o: &Resources) -> Resources {
        let mut r = Resources::new();
        for i in 0..N {
            r.known[i] = self.known[i].min(o.known[i]);
        }
        if let Some(m) = &self.other {
            for (k, v) in m.iter() {
                let q = (*v).min(o.get(k));
                if !q.is_zero() {
                    r.set(k, q);
                }
            }
        }
        r
    }

    /// The position of resource `name` in [`KNOWN`], if it is one.
    pub fn known_position(name: &str) -> Option<usize> {
        known_index(name)
    }

    /// Its quantities of the [`KNOWN`] resources, in that order.
    pub fn known(&self) -> &[Quantity; KNOWN.len()] {
        &self.known
    }

    /// Raises its quantity of `KNOWN[i]` to `q` where that is more.
    pub fn raise_known(&mut self, i: usize, q: Quantity) {
        if let Some(k) = self.known.get_mut(i) {
            *k = (*k).max(q);
        }
    }

    /// Whether it has a resource beyond the [`KNOWN`] ones.
    pub fn has_other(&self) -> bool {
        self.other.as_ref().is_some_and(|m| !m.is_empty())
    }

    /// Component-wise maximum, in place.
    pub fn max_assign(&mut self, o: &Resources) {
        for (a, b) in self.known.iter_mut().zip(&o.known) {
            *a = (*a).max(*b);
        }
        if let Some(om) = &o.other {
            for (k, v) in om.iter() {
                let cur = self.get(k);
                if *v > cur {
                    self.set(k, *v);
                }
            }
        }
    }

    /// Component-wise maximum.
    pub fn max(&self, o: &Resources) -> Resources {
        let mut r = self.clone();
        for i in 0..N {
            r.known[i] = r.known[i].max(o.known[i]);
        }
        if let Some(om) = &o.other {
            for (k, v) in om.iter() {
                let cur = r.get(k);
                r.set(k, cur.max(*v));
            }
        }
        r
    }

    /// `self.plus(extra).fits_in(capacity)` without building the sum.
    #[inline]
    pub fn fits_in_with(&self, extra: &Resources, capacity: &Resources) -> bool {
        if self.other.is_some() || extra.other.is_some() {
            return self.plus(extra).fits_in(capacity);
        }
        self.known
            .iter()
            .zip(&extra.known)
            .zip(&capacity.known)
            .all(|((a, b), c)| *a + *b <= *c)
    }

    /// As a request, its first [`COMPACT`] known quantities, when it
    /// requests nothing else (see [`Compact`]).
    pub fn compact_request(&self) -> Option<Compact> {
        let rest_zero = self.known[COMPACT..].iter().all(|q| q.is_zero())
            && self
                .other
                .as_ref()
                .is_none_or(|m| m.values().all(|q| q.is_zero()));
        rest_zero.then(|| self.compact_head())
    }

    /// As a capacity, its first [`COMPACT`] known quantities, when it has
    /// no negative quantity beyond them (so a compact request fits in it
    /// exactly when its compact quantities do).
    pub fn compact_capacity(&self) -> Option<Compact> {
        let rest_ok = self.known[COMPACT..].iter().all(|q| *q >= Quantity::ZERO)
            && self
                .other
                .as_ref()
                .is_none_or(|m| m.values().all(|q| *q >= Quantity::ZERO));
        rest_ok.then(|| self.compact_head())
    }

    /// As a NodeClaim's requests under the largest allocatable `capacity`:
    /// the room left in the first [`COMPACT`] known quantities, such that a
    /// compact request `r` (see [`Resources::compact_request`]) satisfies
    /// `r.fits_in(&room)` exactly when `self.fits_in_with(r's resources,
    /// capacity)`. `None` (ask `fits_in_with`) when the rest of `self`
    /// exceeds `capacity`, a head quantity of `self` is negative or a
    /// room would not be exact (`capacity` at `i64::MAX`, or overflow).
    pub fn compact_room(&self, capacity: &Resources) -> Option<Compact> {
        let rest_ok = (self.known[COMPACT..].iter())
            .zip(&capacity.known[COMPACT..])
            .all(|(want, have)| want <= have)
            && (self.other.as_ref()).is_none_or(|m| m.iter().all(|(k, v)| *v <= capacity.get(k)));
        if !rest_ok {
            return None;
        }
        let mut room = [0i64; COMPACT];
        for ((r, want), have) in room.iter_mut().zip(&self.known).zip(&capacity.known) {
            let (want, have) = (want.millis(), have.millis());
            if want < 0 || have == i64::MAX {
                return None;
            }
            *r = have.checked_sub(want)?;
        }
        Some(Compact(room))
    }

    /// Its [`KNOWN`] quantities past the first [`COMPACT`] (millis), in
    /// [`KNOWN`]'s order.
    pub fn beyond_compact(&self) -> [i64; BEYOND] {
        let mut out = [0i64; BEYOND];
        for (o, q) in out.iter_mut().zip(&self.known[COMPACT..]) {
            *o = q.millis();
        }
        out
    }

    /// Its first [`COMPACT`] known quantities, whatever the rest: a
    /// necessary part of a fit (what holds these resources may still lack
    /// the rest).
    pub fn compact_head(&self) -> Compact {
        let mut head = [0i64; COMPACT];
        for (h, q) in head.iter_mut().zip(&self.known) {
            *h = q.millis();
        }
        Compact(head)
    }

    /// True when every requested quantity is within `capacity`.
    #[inline]
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.first_exceeding(capacity).is_none()
    }

    /// The first resource (in canonical order) whose request exceeds
    /// `capacity`, or `None` when everything fits.
    pub fn first_exceeding(&self, capacity: &Resources) -> Option<&str> {
        for ((name, want), have) in KNOWN.iter().zip(&self.known).zip(&capacity.known) {
            if want > have {
                return Some(name);
            }
        }
        if let Some(m) = &self.other {
            for (k, v) in m.iter() {
                if *v > capacity.get(k) {
                    return Some(k.as_str());
                }
            }
        }
        None
    }

    /// Non-zero entries in canonical order: known names first, then the rest
    /// sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Quantity)> {
        let known = KNOWN
            .iter()
            .zip(self.known.iter())
            .filter(|(_, q)| !q.is_zero())
            .map(|(n, q)| (*n, *q));
        let other = self
            .other
            .iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), *v)));
        known.chain(other)
    }

    pub fn is_zero(&self) -> bool {
        self.iter().next().is_none()
    }

    pub fn to_map(&self) -> BTreeMap<String, Quantity> {
        self.iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

impl<'de> serde::Deserialize<'de> for Resources {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = std::collections::BTreeMap::<String, Quantity>::deserialize(d)?;
        let mut r = Resources::new();
        for (k, v) in m {
            r.set(&k, v);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compact head, a known resource beyond it and an extended one.
    const TEST_NAMES: [&str; 6] = [
        CPU,
        MEMORY,
        PODS,
        EPHEMERAL_STORAGE,
        NVIDIA_GPU,
        "example.com/dongle",
    ];

    /// Where both lists are compact, the compact check is `fits_in`; a
    /// request of anything else, or a capacity negative elsewhere, has no
    /// compact form.
    #[test]
    fn compact_fits_agree_with_fits_in() {
        let mut draw = crate::scheduler::test_draws(11);
        let mut next = |m: i64| draw(m as u64) as i64;
        let names = TEST_NAMES;
        let mut compared = 0;
        for _ in 0..5000 {
            let mut want = Resources::new();
            let mut have = Resources::new();
            for name in names {
                if next(3) > 0 {
                    want.set(name, Quantity::from_millis(next(6)));
                }
                if next(4) > 0 {
                    have.set(name, Quantity::from_millis(next(8) - 1));
                }
            }
            match (want.compact_request(), have.compact_capacity()) {
                (Some(w), Some(h)) => {
                    compared += 1;
                    assert_eq!(w.fits_in(&h), want.fits_in(&have), "{want:?} in {have:?}");
                }
                (w, h) => {
                    let other_want = names[COMPACT..].iter().any(|n| !want.get(n).is_zero());
                    let other_neg = names[COMPACT..]
                        .iter()
                        .any(|n| have.get(n) < Quantity::ZERO);
                    assert_eq!(w.is_none(), other_want, "{want:?}");
                    assert_eq!(h.is_none(), other_neg, "{have:?}");
                }
            }
        }
        assert!(compared > 500, "{compared}");
    }

    /// A compact request fits a NodeClaim's compact room exactly when
    /// `fits_in_with` says it fits; a room is missing only when the rest of
    /// the requests exceeds the capacity (or a head quantity is negative).
    #[test]
    fn compact_room_agrees_with_fits_in_with() {
        let mut draw = crate::scheduler::test_draws(13);
        let mut next = |m: i64| draw(m as u64) as i64;
        let names = TEST_NAMES;
        let (mut compared, mut fell_back) = (0, 0);
        for _ in 0..5000 {
            let (mut held, mut extra, mut cap) =
                (Resources::new(), Resources::new(), Resources::new());
            for name in names {
                if next(3) > 0 {
                    held.set(name, Quantity::from_millis(next(8) - 1));
                }
                if next(3) > 0 && (next(4) == 0 || names[..COMPACT].contains(&name)) {
                    extra.set(name, Quantity::from_millis(next(6)));
                }
                if next(4) > 0 {
                    cap.set(name, Quantity::from_millis(next(12) - 1));
                }
            }
            if next(50) == 0 {
                cap.set(CPU, Quantity::from_millis(i64::MAX));
            }
            let want = held.fits_in_with(&extra, &cap);
            match (extra.compact_request(), held.compact_room(&cap)) {
                (Some(e), Some(room)) => {
                    compared += 1;
                    assert_eq!(e.fits_in(&room), want, "{held:?} + {extra:?} in {cap:?}");
                }
                (Some(_), None) => fell_back += 1,
                (None, _) => {}
            }
        }
        assert!(compared > 500 && fell_back > 100, "{compared} {fell_back}");
    }

    /// `copies_of` counts what `minus`, then room over request per
    /// requested resource, counts; extended resources and negative room
    /// included.
    #[test]
    fn copies_of_agrees_with_room_over_request() {
        let mut draw = crate::scheduler::test_draws(17);
        let mut next = |m: i64| draw(m as u64) as i64;
        let mut positive = 0;
        for _ in 0..5000 {
            let (mut alloc, mut reserved, mut each) =
                (Resources::new(), Resources::new(), Resources::new());
            for name in TEST_NAMES {
                if next(4) > 0 {
                    alloc.set(name, Quantity::from_millis(next(64)));
                }
                if next(3) == 0 {
                    reserved.set(name, Quantity::from_millis(next(16)));
                }
                if next(3) == 0 {
                    each.set(name, Quantity::from_millis(next(8)));
                }
            }
            let room = alloc.minus(&reserved);
            let want = (each.iter())
                .map(|(name, q)| room.get(name).millis() / q.millis().max(1))
                .min()
                .unwrap_or(0);
            let got = alloc.copies_of(&reserved, &each);
            assert_eq!(got, want, "{each:?} in {alloc:?} less {reserved:?}");
            positive += usize::from(got > 0);
        }
        assert!(positive > 500, "{positive}");
    }

    fn r(pairs: &[(&str, &str)]) -> Resources {
        let mut r = Resources::new();
        for (k, v) in pairs {
            r.set(k, Quantity::parse(v).unwrap());
        }
        r
    }

    #[test]
    fn add_sub_max_fit() {
        let a = r(&[("cpu", "500m"), ("memory", "1Gi"), ("example.com/foo", "2")]);
        let b = r(&[("cpu", "1"), ("memory", "512Mi")]);
        let s = a.plus(&b);
        assert_eq!(s.cpu(), Quantity::from_millis(1500));
        assert_eq!(s.get("example.com/foo"), Quantity::from_units(2));
        assert_eq!(a.max(&b).cpu(), Quantity::from_units(1));
        assert_eq!(a.max(&b).memory(), Quantity::parse("1Gi").unwrap());
        assert_eq!(b.minus(&a).cpu(), Quantity::from_millis(500));
        assert_eq!(b.minus(&a).memory(), Quantity::ZERO);
        assert!(b.fits_in(&s));
        assert_eq!(a.first_exceeding(&b), Some("memory"));
        // An extended resource the capacity does not have at all.
        assert_eq!(
            a.first_exceeding(&r(&[("cpu", "8"), ("memory", "8Gi")])),
            Some("example.com/foo")
        );
    }

    #[test]
    fn iteration_is_canonical() {
        let a = r(&[
            ("z.io/x", "1"),
            ("nvidia.com/gpu", "1"),
            ("cpu", "1"),
            ("a.io/y", "1"),
        ]);
        let names: Vec<_> = a.iter().map(|(k, _)| k).collect();
        assert_eq!(names, vec!["cpu", "nvidia.com/gpu", "a.io/y", "z.io/x"]);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"cpu":"1","nvidia.com/gpu":"1","a.io/y":"1","z.io/x":"1"}"#
        );
    }
}
