//! # Counting AWS requests
//!
//! An SDK interceptor that counts every request sent (retries included), by service and
//! operation, and the capacity units DynamoDB reports each one consuming (it asks for them with
//! `ReturnConsumedCapacity::TOTAL`). The benchmarks use it to report requests per appended
//! message and per chat event, which is what DynamoDB, S3 and SQS bill by.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use aws_sdk_dynamodb::{
    operation::{
        batch_get_item::{BatchGetItemInput, BatchGetItemOutput},
        batch_write_item::{BatchWriteItemInput, BatchWriteItemOutput},
        delete_item::{DeleteItemInput, DeleteItemOutput},
        get_item::{GetItemInput, GetItemOutput},
        put_item::{PutItemInput, PutItemOutput},
        query::{QueryInput, QueryOutput},
        scan::{ScanInput, ScanOutput},
        transact_get_items::{TransactGetItemsInput, TransactGetItemsOutput},
        transact_write_items::{TransactWriteItemsInput, TransactWriteItemsOutput},
        update_item::{UpdateItemInput, UpdateItemOutput},
    },
    types::{ConsumedCapacity, ReturnConsumedCapacity},
};
use aws_smithy_runtime_api::{
    box_error::BoxError,
    client::{
        interceptors::{
            Intercept,
            context::{
                AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
                BeforeTransmitInterceptorContextRef,
            },
        },
        orchestrator::Metadata,
        runtime_components::RuntimeComponents,
    },
};
use aws_smithy_types::config_bag::ConfigBag;

/// Requests sent, by `(service, operation)`, and DynamoDB capacity consumed, by operation;
/// cheap to clone, clones share counts.
#[derive(Debug, Default, Clone)]
pub struct RequestCounter {
    counts: Arc<Mutex<Counts>>,
}

#[derive(Debug, Default)]
struct Counts {
    requests: BTreeMap<(String, String), u64>,
    capacity: BTreeMap<String, f64>,
    /// DynamoDB requests by operation and the shape of the keys they address.
    targets: BTreeMap<String, u64>,
    /// The capacity units they consumed, by the same.
    target_units: BTreeMap<String, f64>,
}

/// What a request addresses ([`target`]), kept in its config bag from its input to its output.
#[derive(Debug, Clone)]
struct Target(String);

impl aws_smithy_types::config_bag::Storable for Target {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

/// A key with its ids taken out: `o#{org}#ses#{id}` is `o#_#ses#_`, `m#00000000000000000042`
/// is `m#_`. Segments that are short words stay.
fn shape(key: &str) -> String {
    key.split('#')
        .map(|part| {
            let word = !part.is_empty() && part.len() <= 8 && part.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            if word { part } else { "_" }
        })
        .collect::<Vec<_>>()
        .join("#")
}

/// What a DynamoDB request addresses: its keys' shapes (and, for an update, what it sets).
fn target(input: &aws_smithy_runtime_api::client::interceptors::context::Input) -> Option<String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let key_of = |key: Option<&std::collections::HashMap<String, AttributeValue>>| {
        let part = |name: &str| {
            key.and_then(|k| k.get(name))
                .and_then(|v| v.as_s().ok())
                .map_or_else(|| "-".to_owned(), |v| shape(v))
        };
        format!("{} {}", part("pk"), part("sk"))
    };
    if let Some(i) = input.downcast_ref::<GetItemInput>() {
        return Some(format!("GetItem {}", key_of(i.key())));
    }
    if let Some(i) = input.downcast_ref::<PutItemInput>() {
        return Some(format!("PutItem {}", key_of(i.item())));
    }
    if let Some(i) = input.downcast_ref::<DeleteItemInput>() {
        return Some(format!("DeleteItem {}", key_of(i.key())));
    }
    if let Some(i) = input.downcast_ref::<UpdateItemInput>() {
        let what: String = i.update_expression().unwrap_or("").chars().take(40).collect();
        return Some(format!("UpdateItem {} [{what}]", key_of(i.key())));
    }
    if let Some(i) = input.downcast_ref::<QueryInput>() {
        let values = i.expression_attribute_values();
        let pk = values
            .and_then(|v| v.get(":pk").or_else(|| v.get(":k")))
            .and_then(|v| v.as_s().ok())
            .map_or_else(|| "-".to_owned(), |v| shape(v));
        let index = i.index_name().unwrap_or("");
        return Some(format!(
            "Query {index} {pk} [{}]",
            i.key_condition_expression().unwrap_or("")
        ));
    }
    if let Some(i) = input.downcast_ref::<TransactWriteItemsInput>() {
        let items: Vec<String> = i
            .transact_items()
            .iter()
            .map(|t| {
                if let Some(p) = t.put() {
                    format!("put {}", key_of(Some(p.item())))
                } else if let Some(u) = t.update() {
                    format!("update {}", key_of(Some(u.key())))
                } else if let Some(c) = t.condition_check() {
                    format!("check {}", key_of(Some(c.key())))
                } else if let Some(d) = t.delete() {
                    format!("delete {}", key_of(Some(d.key())))
                } else {
                    "?".to_owned()
                }
            })
            .collect();
        return Some(format!("TransactWriteItems {}", items.join(", ")));
    }
    None
}

/// DynamoDB operations that consume write capacity; the others consume read capacity.
fn is_write(operation: &str) -> bool {
    matches!(
        operation,
        "PutItem" | "UpdateItem" | "DeleteItem" | "BatchWriteItem" | "TransactWriteItems"
    )
}

impl RequestCounter {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A snapshot of the counts.
    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.counts().requests.clone()
    }

    /// The DynamoDB read and write capacity units consumed, as DynamoDB reported them (a
    /// request that failed, such as a conditional write whose condition was false, reports
    /// none, though DynamoDB bills one write unit for it).
    pub fn capacity_units(&self) -> (f64, f64) {
        let counts = self.counts();
        let of = |write: bool| {
            counts
                .capacity
                .iter()
                .filter(|(op, _)| is_write(op) == write)
                .fold(0.0, |total, (_, units)| total + units)
        };
        (of(false), of(true))
    }

    /// The DynamoDB capacity units consumed, by operation (as [`Self::capacity_units`]).
    pub fn capacity_by_operation(&self) -> BTreeMap<String, f64> {
        self.counts().capacity.clone()
    }

    /// Requests sent to `service` (e.g. `DynamoDB`, `S3`, `SQS`) whose operation satisfies
    /// `filter`.
    pub fn total(&self, service: &str, filter: impl Fn(&str) -> bool) -> u64 {
        self.counts()
            .requests
            .iter()
            .filter(|((s, op), _)| s.eq_ignore_ascii_case(service) && filter(op))
            .map(|(_, n)| n)
            .sum()
    }

    /// DynamoDB requests by operation and the shape of the keys they address (ids taken out),
    /// to see which records a workload's requests go to.
    pub fn targets(&self) -> BTreeMap<String, u64> {
        self.counts().targets.clone()
    }

    /// The DynamoDB capacity units consumed, by what [`Self::targets`] counts requests by.
    pub fn target_units(&self) -> BTreeMap<String, f64> {
        self.counts().target_units.clone()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        *self.counts() = Counts::default();
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(meta) = cfg.load::<Metadata>() {
            let key = (meta.service().to_owned(), meta.name().to_owned());
            *self.counts().requests.entry(key).or_default() += 1;
        }
        Ok(())
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        if let Some(target) = target(input) {
            *self.counts().targets.entry(target.clone()).or_default() += 1;
            cfg.interceptor_state().store_put(Target(target));
        }
        macro_rules! ask {
            ($($input:ty),*) => {
                $(if let Some(input) = input.downcast_mut::<$input>() {
                    input.return_consumed_capacity = Some(ReturnConsumedCapacity::Total);
                })*
            };
        }
        ask!(
            PutItemInput,
            UpdateItemInput,
            DeleteItemInput,
            GetItemInput,
            QueryInput,
            ScanInput,
            BatchGetItemInput,
            BatchWriteItemInput,
            TransactGetItemsInput,
            TransactWriteItemsInput
        );
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (Ok(output), Some(meta)) = (context.output_or_error(), cfg.load::<Metadata>()) else {
            return Ok(());
        };
        let units = |c: &ConsumedCapacity| c.capacity_units().unwrap_or(0.0);
        let mut consumed = None;
        macro_rules! one {
            ($($output:ty),*) => {
                $(if let Some(output) = output.downcast_ref::<$output>() {
                    consumed = Some(output.consumed_capacity().map_or(0.0, units));
                })*
            };
        }
        macro_rules! many {
            ($($output:ty),*) => {
                $(if let Some(output) = output.downcast_ref::<$output>() {
                    consumed = Some(output.consumed_capacity().iter().map(units).sum());
                })*
            };
        }
        one!(
            PutItemOutput,
            UpdateItemOutput,
            DeleteItemOutput,
            GetItemOutput,
            QueryOutput,
            ScanOutput
        );
        many!(
            BatchGetItemOutput,
            BatchWriteItemOutput,
            TransactGetItemsOutput,
            TransactWriteItemsOutput
        );
        if let Some(units) = consumed {
            let mut counts = self.counts();
            *counts.capacity.entry(meta.name().to_owned()).or_default() += units;
            if let Some(Target(target)) = cfg.load::<Target>() {
                *counts.target_units.entry(target.clone()).or_default() += units;
            }
        }
        Ok(())
    }
}
