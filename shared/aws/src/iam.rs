//! The IAM actions behind each port call, as these adapters make it.
//!
//! [`PortCall`] names one kind of call through the ports ([`Store`],
//! [`Bus`], [`Ec2`] and its [`PriceList`]); [`PortCall::sdk_operations`] lists the API operations
//! the adapter sends for it and [`PortCall::iam_actions`] the IAM actions
//! those operations need. `infra/template.yaml` grants each function the
//! actions of the calls its code makes, and `tests/least_privilege.rs`
//! records those calls (running every handler over the simulator) and
//! checks the template against this table. The unit test below reads this
//! crate's sources and fails when an adapter sends an operation the table
//! does not list.
//!
//! [`Store`]: flotilla_ports::Store
//! [`Bus`]: flotilla_ports::Bus
//! [`Ec2`]: flotilla_ports::Ec2
//! [`PriceList`]: flotilla_ports::PriceList

use std::collections::BTreeSet;

use flotilla_ports::Write;

/// One kind of call through the ports. Writes are split by kind (a
/// transaction needs the action of each write it holds: DynamoDB authorizes
/// TransactWriteItems per item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortCall {
    StoreGet,
    StoreQuery,
    StorePut,
    StoreDelete,
    StoreAdd,
    BusPut,
    Ec2DescribeInstanceTypes,
    Ec2DescribeInstanceTypeOfferings,
    Ec2DescribeSpotPrices,
    Ec2DescribeSubnets,
    Ec2DescribeSecurityGroups,
    Ec2DescribeImages,
    Ec2DescribeCapacityReservations,
    Ec2CreateLaunchTemplate,
    Ec2DescribeLaunchTemplates,
    Ec2DeleteLaunchTemplate,
    Ec2CreateFleet,
    Ec2DescribeInstances,
    Ec2TerminateInstances,
    PricingGetProducts,
}

impl PortCall {
    pub const ALL: [PortCall; 20] = [
        PortCall::StoreGet,
        PortCall::StoreQuery,
        PortCall::StorePut,
        PortCall::StoreDelete,
        PortCall::StoreAdd,
        PortCall::BusPut,
        PortCall::Ec2DescribeInstanceTypes,
        PortCall::Ec2DescribeInstanceTypeOfferings,
        PortCall::Ec2DescribeSpotPrices,
        PortCall::Ec2DescribeSubnets,
        PortCall::Ec2DescribeSecurityGroups,
        PortCall::Ec2DescribeImages,
        PortCall::Ec2DescribeCapacityReservations,
        PortCall::Ec2CreateLaunchTemplate,
        PortCall::Ec2DescribeLaunchTemplates,
        PortCall::Ec2DeleteLaunchTemplate,
        PortCall::Ec2CreateFleet,
        PortCall::Ec2DescribeInstances,
        PortCall::Ec2TerminateInstances,
        PortCall::PricingGetProducts,
    ];

    /// The port method (`Store::write` kinds as `write(Put)` etc.).
    pub fn method(self) -> &'static str {
        match self {
            PortCall::StoreGet => "Store::get",
            PortCall::StoreQuery => "Store::query",
            PortCall::StorePut => "Store::write(Put)",
            PortCall::StoreDelete => "Store::write(Delete)",
            PortCall::StoreAdd => "Store::write(Add)",
            PortCall::BusPut => "Bus::put",
            PortCall::Ec2DescribeInstanceTypes => "Ec2::describe_instance_types",
            PortCall::Ec2DescribeInstanceTypeOfferings => "Ec2::describe_instance_type_offerings",
            PortCall::Ec2DescribeSpotPrices => "Ec2::describe_spot_prices",
            PortCall::Ec2DescribeSubnets => "Ec2::describe_subnets",
            PortCall::Ec2DescribeSecurityGroups => "Ec2::describe_security_groups",
            PortCall::Ec2DescribeImages => "Ec2::describe_images",
            PortCall::Ec2DescribeCapacityReservations => "Ec2::describe_capacity_reservations",
            PortCall::Ec2CreateLaunchTemplate => "Ec2::create_launch_template",
            PortCall::Ec2DescribeLaunchTemplates => "Ec2::describe_launch_templates",
            PortCall::Ec2DeleteLaunchTemplate => "Ec2::delete_launch_template",
            PortCall::Ec2CreateFleet => "Ec2::create_fleet",
            PortCall::Ec2DescribeInstances => "Ec2::describe_instances",
            PortCall::Ec2TerminateInstances => "Ec2::terminate_instances",
            PortCall::PricingGetProducts => "PriceList::on_demand_prices",
        }
    }

    /// The Ec2 port method of this call (`describe_instances`), if it is one.
    pub fn ec2_method(self) -> Option<&'static str> {
        self.method().strip_prefix("Ec2::")
    }

    /// The API operations the adapter sends for this call.
    pub fn sdk_operations(self) -> &'static [&'static str] {
        match self {
            PortCall::StoreGet => &["GetItem"],
            PortCall::StoreQuery => &["Query"],
            PortCall::StorePut => &["PutItem", "TransactWriteItems"],
            PortCall::StoreDelete => &["DeleteItem", "TransactWriteItems"],
            PortCall::StoreAdd => &["UpdateItem", "TransactWriteItems"],
            PortCall::BusPut => &["PutEvents"],
            PortCall::Ec2DescribeInstanceTypes => &["DescribeInstanceTypes"],
            PortCall::Ec2DescribeInstanceTypeOfferings => &["DescribeInstanceTypeOfferings"],
            PortCall::Ec2DescribeSpotPrices => &["DescribeSpotPriceHistory"],
            PortCall::Ec2DescribeSubnets => &["DescribeSubnets"],
            PortCall::Ec2DescribeSecurityGroups => &["DescribeSecurityGroups"],
            PortCall::Ec2DescribeImages => &["DescribeImages"],
            PortCall::Ec2DescribeCapacityReservations => &["DescribeCapacityReservations"],
            PortCall::Ec2CreateLaunchTemplate => &["CreateLaunchTemplate"],
            PortCall::Ec2DescribeLaunchTemplates => &["DescribeLaunchTemplates"],
            // A 4xx other than NotFound is double-checked with a describe
            // (some EC2-compatible endpoints answer a missing template so).
            PortCall::Ec2DeleteLaunchTemplate => {
                &["DeleteLaunchTemplate", "DescribeLaunchTemplates"]
            }
            PortCall::Ec2CreateFleet => &["CreateFleet"],
            PortCall::Ec2DescribeInstances => &["DescribeInstances"],
            PortCall::Ec2TerminateInstances => &["TerminateInstances"],
            PortCall::PricingGetProducts => &["GetProducts"],
        }
    }

    /// The IAM actions this call needs.
    ///
    /// - Writes inside TransactWriteItems are authorized per item with the
    ///   single-item action.
    /// - CreateLaunchTemplate and CreateFleet tag what they create
    ///   (TagSpecifications), which needs `ec2:CreateTags`.
    /// - CreateFleet launches with `ec2:RunInstances` on the caller's behalf
    ///   and passes the node role through the launch template's instance
    ///   profile (`iam:PassRole`); the first spot launch of an account creates
    ///   the `AWSServiceRoleForEC2Spot` service-linked role with the caller's
    ///   `iam:CreateServiceLinkedRole`.
    pub fn iam_actions(self) -> &'static [&'static str] {
        match self {
            PortCall::StoreGet => &["dynamodb:GetItem"],
            PortCall::StoreQuery => &["dynamodb:Query"],
            PortCall::StorePut => &["dynamodb:PutItem"],
            PortCall::StoreDelete => &["dynamodb:DeleteItem"],
            PortCall::StoreAdd => &["dynamodb:UpdateItem"],
            PortCall::BusPut => &["events:PutEvents"],
            PortCall::Ec2DescribeInstanceTypes => &["ec2:DescribeInstanceTypes"],
            PortCall::Ec2DescribeInstanceTypeOfferings => &["ec2:DescribeInstanceTypeOfferings"],
            PortCall::Ec2DescribeSpotPrices => &["ec2:DescribeSpotPriceHistory"],
            PortCall::Ec2DescribeSubnets => &["ec2:DescribeSubnets"],
            PortCall::Ec2DescribeSecurityGroups => &["ec2:DescribeSecurityGroups"],
            PortCall::Ec2DescribeImages => &["ec2:DescribeImages"],
            PortCall::Ec2DescribeCapacityReservations => &["ec2:DescribeCapacityReservations"],
            PortCall::Ec2CreateLaunchTemplate => &["ec2:CreateLaunchTemplate", "ec2:CreateTags"],
            PortCall::Ec2DescribeLaunchTemplates => &["ec2:DescribeLaunchTemplates"],
            PortCall::Ec2DeleteLaunchTemplate => {
                &["ec2:DeleteLaunchTemplate", "ec2:DescribeLaunchTemplates"]
            }
            PortCall::Ec2CreateFleet => &[
                "ec2:CreateFleet",
                "ec2:RunInstances",
                "ec2:CreateTags",
                "iam:PassRole",
                "iam:CreateServiceLinkedRole",
            ],
            PortCall::Ec2DescribeInstances => &["ec2:DescribeInstances"],
            PortCall::Ec2TerminateInstances => &["ec2:TerminateInstances"],
            // The Price List API has no resource-level permissions.
            PortCall::PricingGetProducts => &["pricing:GetProducts"],
        }
    }

    /// The call a store write is.
    pub fn of_write(w: &Write) -> PortCall {
        match w {
            Write::Put { .. } => PortCall::StorePut,
            Write::Delete { .. } => PortCall::StoreDelete,
            Write::Add { .. } => PortCall::StoreAdd,
        }
    }
}

/// The IAM actions a set of calls needs, sorted.
pub fn iam_actions(calls: impl IntoIterator<Item = PortCall>) -> BTreeSet<&'static str> {
    calls
        .into_iter()
        .flat_map(|c| c.iam_actions().iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `snake_case` → `PascalCase`.
    fn pascal(s: &str) -> String {
        s.split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Every `client.<operation>()` (whitespace allowed around the dots)
    /// in `src`, outside its test module.
    fn sdk_calls(src: &str) -> BTreeSet<String> {
        let code = src.split("#[cfg(test)]").next().unwrap_or(src);
        let mut out = BTreeSet::new();
        let mut rest = code;
        while let Some(i) = rest.find("client") {
            rest = &rest[i + "client".len()..];
            let after = rest.trim_start();
            let Some(after) = after.strip_prefix('.') else {
                continue;
            };
            let after = after.trim_start();
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && after[name.len()..].starts_with("()") {
                out.insert(pascal(&name));
            }
        }
        out
    }

    #[test]
    fn every_operation_the_adapters_send_is_in_the_table() {
        let sent: BTreeSet<String> = [
            include_str!("dynamo.rs"),
            include_str!("ec2.rs"),
            include_str!("eventbridge.rs"),
            include_str!("pricing.rs"),
        ]
        .iter()
        .flat_map(|s| sdk_calls(s))
        .collect();
        assert!(
            sent.contains("CreateFleet") && sent.contains("PutEvents"),
            "{sent:?}"
        );
        let mapped: BTreeSet<String> = PortCall::ALL
            .iter()
            .flat_map(|c| c.sdk_operations().iter().map(|s| s.to_string()))
            .collect();
        // DynamoStore::create_table (tests and local setup, not a port
        // method: the template creates the table).
        let setup: BTreeSet<String> = ["CreateTable", "DescribeTable", "UpdateTimeToLive"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let unmapped: Vec<_> = sent
            .difference(&mapped)
            .filter(|o| !setup.contains(*o))
            .collect();
        assert!(
            unmapped.is_empty(),
            "operations sent but not mapped to IAM actions: {unmapped:?}"
        );
        let unsent: Vec<_> = mapped.difference(&sent).collect();
        assert!(
            unsent.is_empty(),
            "mapped operations no adapter sends: {unsent:?}"
        );
    }

    #[test]
    fn every_call_maps_to_actions_of_its_service() {
        for c in PortCall::ALL {
            assert!(!c.iam_actions().is_empty(), "{c:?}");
            let service = match c.method().split("::").next() {
                Some("Store") => "dynamodb:",
                Some("Bus") => "events:",
                Some("PriceList") => "pricing:",
                _ => "ec2:",
            };
            assert!(c.iam_actions()[0].starts_with(service), "{c:?}");
            // The method names the trait's own method.
            if let Some(m) = c.ec2_method() {
                assert_eq!(format!("Ec2{}", pascal(m)), format!("{c:?}"));
            }
        }
        assert_eq!(
            iam_actions([PortCall::Ec2CreateFleet, PortCall::Ec2CreateLaunchTemplate])
                .into_iter()
                .collect::<Vec<_>>(),
            vec![
                "ec2:CreateFleet",
                "ec2:CreateLaunchTemplate",
                "ec2:CreateTags",
                "ec2:RunInstances",
                "iam:CreateServiceLinkedRole",
                "iam:PassRole"
            ]
        );
    }
}
