//! The store port on one DynamoDB table.
//!
//! Attributes: `pk` (S, hash key), `sk` (S, range key), `v` (N, version),
//! `n` (N, counter), `b` (B, body; omitted when empty), `expiresAt` (N, the
//! table's TTL attribute; omitted when the item does not expire).

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, Delete, KeySchemaElement, KeyType, Put,
    ScalarAttributeType, TimeToLiveSpecification, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use aws_smithy_types::Blob;
use flotilla_ports::{
    Condition, Item, Key, PortError, PortResult, Store, Write, MAX_TRANSACT_WRITES,
};

use crate::error::{classify, ErrorKind};

pub(crate) const PK: &str = "pk";
pub(crate) const SK: &str = "sk";
pub(crate) const VERSION: &str = "v";
pub(crate) const COUNTER: &str = "n";
pub(crate) const BODY: &str = "b";
pub(crate) const EXPIRES_AT: &str = "expiresAt";

type Attrs = HashMap<String, AttributeValue>;

/// [`Store`] on one DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
}

/// A condition expression with its placeholder values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expr {
    pub expression: String,
    pub values: Attrs,
}

/// One write as DynamoDB request parts (shared by the single-item calls and
/// TransactWriteItems).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    Put {
        item: Attrs,
        condition: Option<Expr>,
    },
    Delete {
        key: Attrs,
        condition: Option<Expr>,
    },
    Update {
        key: Attrs,
        update: String,
        condition: Expr,
    },
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn key_attrs(key: &Key) -> Attrs {
    HashMap::from([
        (PK.to_string(), AttributeValue::S(key.pk.clone())),
        (SK.to_string(), AttributeValue::S(key.sk.clone())),
    ])
}

pub(crate) fn item_attrs(item: &Item) -> Attrs {
    let mut a = key_attrs(&item.key);
    a.insert(VERSION.into(), n(item.version));
    a.insert(COUNTER.into(), n(item.counter));
    if !item.body.is_empty() {
        a.insert(BODY.into(), AttributeValue::B(Blob::new(item.body.clone())));
    }
    if let Some(t) = item.expires_at {
        a.insert(EXPIRES_AT.into(), n(t));
    }
    a
}

pub(crate) fn condition_expr(c: Condition) -> Option<Expr> {
    match c {
        Condition::Always => None,
        Condition::Absent { now_secs } => Some(Expr {
            expression: format!("attribute_not_exists({PK}) OR {EXPIRES_AT} <= :now"),
            values: HashMap::from([(":now".to_string(), n(now_secs))]),
        }),
        Condition::Version(v) => Some(Expr {
            expression: format!("{VERSION} = :v"),
            values: HashMap::from([(":v".to_string(), n(v))]),
        }),
    }
}

pub(crate) fn request(w: &Write) -> Request {
    match w {
        Write::Put { item, condition } => Request::Put {
            item: item_attrs(item),
            condition: condition_expr(*condition),
        },
        Write::Delete { key, condition } => Request::Delete {
            key: key_attrs(key),
            condition: condition_expr(*condition),
        },
        Write::Add {
            key,
            delta,
            min,
            max,
        } => {
            // n + delta in [min, max]  <=>  n in [min - delta, max - delta].
            let lo = min.saturating_sub(*delta);
            let hi = max.saturating_sub(*delta);
            Request::Update {
                key: key_attrs(key),
                update: format!("SET {COUNTER} = {COUNTER} + :d"),
                condition: Expr {
                    expression: format!(
                        "attribute_exists({PK}) AND {COUNTER} >= :lo AND {COUNTER} <= :hi"
                    ),
                    values: HashMap::from([
                        (":d".to_string(), n(delta)),
                        (":lo".to_string(), n(lo)),
                        (":hi".to_string(), n(hi)),
                    ]),
                },
            }
        }
    }
}

fn rejected(what: &str, detail: impl std::fmt::Display) -> PortError {
    PortError::Rejected(format!("{what}: {detail}"))
}

fn num<T: std::str::FromStr>(a: &Attrs, name: &str, what: &str) -> PortResult<Option<T>> {
    match a.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| rejected(what, format!("attribute {name} = {s:?} is not an integer"))),
        Some(other) => Err(rejected(
            what,
            format!("attribute {name} is not a number: {other:?}"),
        )),
    }
}

fn string(a: &Attrs, name: &str, what: &str) -> PortResult<String> {
    match a.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        _ => Err(rejected(what, format!("attribute {name} missing or not S"))),
    }
}

/// A stored item back into an [`Item`].
pub(crate) fn parse_item(a: &Attrs, what: &str) -> PortResult<Item> {
    let body = match a.get(BODY) {
        None => Vec::new(),
        Some(AttributeValue::B(b)) => b.as_ref().to_vec(),
        Some(other) => {
            return Err(rejected(
                what,
                format!("attribute {BODY} is not binary: {other:?}"),
            ))
        }
    };
    Ok(Item {
        key: Key::new(string(a, PK, what)?, string(a, SK, what)?),
        version: num(a, VERSION, what)?.unwrap_or(0),
        expires_at: num(a, EXPIRES_AT, what)?,
        counter: num(a, COUNTER, what)?.unwrap_or(0),
        body,
    })
}

fn op_name(w: &Write) -> &'static str {
    match w {
        Write::Put { .. } => "PutItem",
        Write::Delete { .. } => "DeleteItem",
        Write::Add { .. } => "UpdateItem",
    }
}

fn build_err(what: &str, e: impl std::fmt::Display) -> PortError {
    rejected(what, format!("building the request: {e}"))
}

impl DynamoStore {
    pub fn new(config: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        DynamoStore {
            client: Client::new(config),
            table: table.into(),
        }
    }

    pub fn from_client(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
        }
    }

    /// From the environment's configuration (`AWS_ENDPOINT_URL`, region,
    /// credentials, ...).
    pub async fn from_env(table: impl Into<String>) -> Self {
        Self::new(&crate::load_config().await, table)
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the table (on-demand billing, `pk`/`sk` string keys, TTL on
    /// `expiresAt`), for tests and local use; infrastructure creates the
    /// real one. An existing table is left as is.
    pub async fn create_table(&self) -> PortResult<()> {
        let what = format!("DynamoDB CreateTable {}", self.table);
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| build_err(&what, e))
        };
        let key = |name: &str, kt: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kt)
                .build()
                .map_err(|e| build_err(&what, e))
        };
        let created = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attr(PK)?)
            .attribute_definitions(attr(SK)?)
            .key_schema(key(PK, KeyType::Hash)?)
            .key_schema(key(SK, KeyType::Range)?)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(e) if crate::error::code(&e) == Some("ResourceInUseException") => return Ok(()),
            Err(e) => return Err(classify(&what, &e)),
        }
        // Wait until ACTIVE (immediate on local endpoints).
        for _ in 0..120 {
            let d = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(|e| classify(&what, &e))?;
            let active = d
                .table()
                .and_then(|t| t.table_status())
                .is_some_and(|s| s.as_str() == "ACTIVE");
            if active {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name(EXPIRES_AT)
            .enabled(true)
            .build()
            .map_err(|e| build_err(&what, e))?;
        self.client
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(|e| classify(&format!("DynamoDB UpdateTimeToLive {}", self.table), &e))?;
        Ok(())
    }

    fn transact_item(&self, w: &Write) -> PortResult<TransactWriteItem> {
        let what = format!("DynamoDB TransactWriteItems {}", w.key());
        let b = TransactWriteItem::builder();
        Ok(match request(w) {
            Request::Put { item, condition } => {
                let mut p = Put::builder().table_name(&self.table).set_item(Some(item));
                if let Some(c) = condition {
                    p = p
                        .condition_expression(c.expression)
                        .set_expression_attribute_values(Some(c.values));
                }
                b.put(p.build().map_err(|e| build_err(&what, e))?).build()
            }
            Request::Delete { key, condition } => {
                let mut d = Delete::builder().table_name(&self.table).set_key(Some(key));
                if let Some(c) = condition {
                    d = d
                        .condition_expression(c.expression)
                        .set_expression_attribute_values(Some(c.values));
                }
                b.delete(d.build().map_err(|e| build_err(&what, e))?)
                    .build()
            }
            Request::Update {
                key,
                update,
                condition,
            } => {
                let u = Update::builder()
                    .table_name(&self.table)
                    .set_key(Some(key))
                    .update_expression(update)
                    .condition_expression(condition.expression)
                    .set_expression_attribute_values(Some(condition.values))
                    .build()
                    .map_err(|e| build_err(&what, e))?;
                b.update(u).build()
            }
        })
    }
}

/// The error of a TransactWriteItems call: a cancellation is classified by
/// its reasons (moto reports them only in the message).
fn transact_error(
    what: &str,
    err: &aws_sdk_dynamodb::error::SdkError<
        TransactWriteItemsError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
) -> PortError {
    if let Some(TransactWriteItemsError::TransactionCanceledException(e)) = err.as_service_error() {
        let mut reasons: Vec<String> = e
            .cancellation_reasons()
            .iter()
            .filter_map(|r| r.code().map(str::to_string))
            .collect();
        let message = e.message().unwrap_or_default().to_string();
        if reasons.is_empty() {
            // "Transaction cancelled, please refer cancellation reasons for
            // specific reasons [ConditionalCheckFailed, None]".
            if let Some(list) = message
                .rsplit_once('[')
                .and_then(|(_, r)| r.split_once(']'))
                .map(|(l, _)| l)
            {
                reasons = list.split(',').map(|s| s.trim().to_string()).collect();
            }
        }
        let kind = ErrorKind::of_cancellation(reasons.iter().map(String::as_str));
        return kind.into_error(format!(
            "{what}: TransactionCanceledException {reasons:?}: {message}"
        ));
    }
    classify(what, err)
}

impl Store for DynamoStore {
    async fn get(&self, key: &Key) -> PortResult<Option<Item>> {
        let what = format!("DynamoDB GetItem {key}");
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_attrs(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(&what, &e))?;
        out.item().map(|a| parse_item(a, &what)).transpose()
    }

    async fn query(&self, pk: &str, sk_prefix: &str) -> PortResult<Vec<Item>> {
        let what = format!("DynamoDB Query {pk} / {sk_prefix}*");
        let mut values = HashMap::from([(":pk".to_string(), AttributeValue::S(pk.into()))]);
        // DynamoDB rejects an empty string as a key-condition value.
        let expression = if sk_prefix.is_empty() {
            format!("{PK} = :pk")
        } else {
            values.insert(":p".into(), AttributeValue::S(sk_prefix.into()));
            format!("{PK} = :pk AND begins_with({SK}, :p)")
        };
        let mut items = Vec::new();
        let mut start: Option<Attrs> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression(&expression)
                .set_expression_attribute_values(Some(values.clone()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| classify(&what, &e))?;
            for a in out.items() {
                items.push(parse_item(a, &what)?);
            }
            match out.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(items)
    }

    async fn write(&self, write: Write) -> PortResult<()> {
        let what = format!("DynamoDB {} {}", op_name(&write), write.key());
        let result = match request(&write) {
            Request::Put { item, condition } => {
                let (expr, values) = condition.map(|c| (c.expression, c.values)).unzip();
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .set_condition_expression(expr)
                    .set_expression_attribute_values(values)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| classify(&what, &e))
            }
            Request::Delete { key, condition } => {
                let (expr, values) = condition.map(|c| (c.expression, c.values)).unzip();
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(key))
                    .set_condition_expression(expr)
                    .set_expression_attribute_values(values)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| classify(&what, &e))
            }
            Request::Update {
                key,
                update,
                condition,
            } => self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key))
                .update_expression(update)
                .condition_expression(condition.expression)
                .set_expression_attribute_values(Some(condition.values))
                .send()
                .await
                .map(drop)
                .map_err(|e| classify(&what, &e)),
        };
        result
    }

    async fn transact(&self, writes: Vec<Write>) -> PortResult<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let what = format!(
            "DynamoDB TransactWriteItems ({} writes, first {})",
            writes.len(),
            writes[0].key()
        );
        if writes.len() > MAX_TRANSACT_WRITES {
            return Err(rejected(
                &what,
                format!("at most {MAX_TRANSACT_WRITES} writes per transaction"),
            ));
        }
        let items = writes
            .iter()
            .map(|w| self.transact_item(w))
            .collect::<PortResult<Vec<_>>>()?;
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map(drop)
            .map_err(|e| transact_error(&what, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::new("cluster#a", "claim#b")
    }

    #[test]
    fn items_round_trip_and_omit_empty_attributes() {
        let mut item = Item::new(key(), Vec::new());
        let a = item_attrs(&item);
        assert!(!a.contains_key(BODY) && !a.contains_key(EXPIRES_AT));
        assert_eq!(a[VERSION], AttributeValue::N("1".into()));
        assert_eq!(parse_item(&a, "t").unwrap(), item);
        item.body = b"{\"x\":1}".to_vec();
        item.expires_at = Some(1_700_000_000);
        item.counter = -3;
        item.version = 7;
        let a = item_attrs(&item);
        assert_eq!(a[EXPIRES_AT], AttributeValue::N("1700000000".into()));
        assert_eq!(parse_item(&a, "t").unwrap(), item);
    }

    #[test]
    fn malformed_items_are_rejected_with_the_attribute() {
        let mut a = item_attrs(&Item::new(key(), vec![1]));
        a.insert(VERSION.into(), AttributeValue::S("x".into()));
        let e = parse_item(&a, "DynamoDB GetItem k").unwrap_err();
        assert!(
            matches!(&e, PortError::Rejected(m) if m.contains("attribute v")),
            "{e}"
        );
    }

    #[test]
    fn conditions() {
        assert_eq!(condition_expr(Condition::Always), None);
        let c = condition_expr(Condition::Absent { now_secs: 42 }).unwrap();
        assert_eq!(
            c.expression,
            "attribute_not_exists(pk) OR expiresAt <= :now"
        );
        assert_eq!(c.values[":now"], AttributeValue::N("42".into()));
        let c = condition_expr(Condition::Version(3)).unwrap();
        assert_eq!(c.expression, "v = :v");
        assert_eq!(c.values[":v"], AttributeValue::N("3".into()));
    }

    #[test]
    fn add_bounds_are_shifted_by_delta() {
        let r = request(&Write::Add {
            key: key(),
            delta: -1,
            min: 0,
            max: 10,
        });
        let Request::Update {
            update, condition, ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(update, "SET n = n + :d");
        assert_eq!(
            condition.expression,
            "attribute_exists(pk) AND n >= :lo AND n <= :hi"
        );
        assert_eq!(condition.values[":d"], AttributeValue::N("-1".into()));
        assert_eq!(condition.values[":lo"], AttributeValue::N("1".into()));
        assert_eq!(condition.values[":hi"], AttributeValue::N("11".into()));
        // Extreme bounds saturate instead of overflowing.
        let Request::Update { condition, .. } = request(&Write::Add {
            key: key(),
            delta: 5,
            min: i64::MIN,
            max: i64::MAX,
        }) else {
            unreachable!()
        };
        assert_eq!(
            condition.values[":lo"],
            AttributeValue::N(i64::MIN.to_string())
        );
    }

    #[test]
    fn puts_and_deletes_carry_their_condition() {
        let r = request(&Write::Delete {
            key: key(),
            condition: Condition::Version(2),
        });
        assert!(
            matches!(r, Request::Delete { condition: Some(c), .. } if c.expression == "v = :v")
        );
        let r = request(&Write::Put {
            item: Item::new(key(), vec![]),
            condition: Condition::Always,
        });
        assert!(matches!(
            r,
            Request::Put {
                condition: None,
                ..
            }
        ));
    }
}
