//! The instance types a planned NodeClaim may launch as (the plan's
//! `instanceTypes`), cheapest first.
//!
//! NodeClaims of one plan that allow the same types share one list, and
//! its JSON is made once: a 10,000-pod plan has thousands of NodeClaims
//! and a few hundred lists of up to a thousand names, and escaping every
//! name again for every NodeClaim was a fifth of `flotilla plan -o json`.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// See the module doc. Reads as a `Vec<String>`; serializes as a JSON
/// array of strings.
#[derive(Clone, Default)]
pub struct InstanceTypeNames(Arc<Shared>);

#[derive(Default)]
struct Shared {
    names: Vec<String>,
    /// `names` as compact JSON, made when first serialized.
    json: OnceLock<Option<Box<RawValue>>>,
}

impl InstanceTypeNames {
    pub fn new(names: Vec<String>) -> InstanceTypeNames {
        InstanceTypeNames(Arc::new(Shared {
            names,
            json: OnceLock::new(),
        }))
    }
}

impl From<Vec<String>> for InstanceTypeNames {
    fn from(names: Vec<String>) -> Self {
        InstanceTypeNames::new(names)
    }
}

impl Deref for InstanceTypeNames {
    type Target = Vec<String>;

    fn deref(&self) -> &Vec<String> {
        &self.0.names
    }
}

impl PartialEq for InstanceTypeNames {
    fn eq(&self, other: &Self) -> bool {
        self.0.names == other.0.names
    }
}

impl fmt::Debug for InstanceTypeNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.names.fmt(f)
    }
}

impl Serialize for InstanceTypeNames {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let json = self.0.json.get_or_init(|| {
            let text = serde_json::to_string(&self.0.names).ok()?;
            RawValue::from_string(text).ok()
        });
        match json {
            Some(raw) => raw.serialize(serializer),
            None => self.0.names.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for InstanceTypeNames {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(InstanceTypeNames::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> InstanceTypeNames {
        v.iter().map(|s| s.to_string()).collect::<Vec<_>>().into()
    }

    /// Serialized (twice: the second from the JSON made by the first),
    /// through a string and through a `Value`, it is the array of its
    /// names; and it reads back.
    #[test]
    fn serializes_as_the_array_of_its_names_every_time() {
        for list in [
            names(&[]),
            names(&["m6g.medium", "t4g.medium"]),
            names(&["a\"b"]),
        ] {
            let want = serde_json::to_string(&*list).unwrap();
            for _ in 0..2 {
                assert_eq!(serde_json::to_string(&list).unwrap(), want);
                let pretty = serde_json::to_string_pretty(&[&list]).unwrap();
                let back: Vec<InstanceTypeNames> = serde_json::from_str(&pretty).unwrap();
                assert_eq!(back, vec![list.clone()]);
            }
            let value = serde_json::to_value(&list).unwrap();
            assert_eq!(value, serde_json::to_value(&*list).unwrap());
        }
    }

    #[test]
    fn compares_and_prints_as_its_names() {
        assert_eq!(names(&["a"]), names(&["a"]));
        assert_ne!(names(&["a"]), names(&["b"]));
        assert_eq!(format!("{:?}", names(&["a"])), r#"["a"]"#);
        assert_eq!(*names(&["a"]), vec!["a".to_string()]);
    }
}
