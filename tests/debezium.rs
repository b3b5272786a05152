//! The Debezium envelope end to end: the source writing Debezium's SQL Server change events
//! (JSON with and without Kafka Connect schemas, tombstones after deletes), an independent
//! consumer (Python `confluent-kafka`) rebuilding the table from the topic alone, and bronze
//! and silver built from the same topic.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::pipeline::{Pipeline, Setup};
use crate::support;

/// Python: rebuilds `dbo.orders` from a Debezium topic twice (replaying every event in order;
/// and as a compacted topic would keep it, the last record per key with tombstones removing
/// keys), decoding values by the Connect schema each record carries (or, without schemas, by
/// the known column types), and compares both with the table read over TDS by python-tds.
const PY_REBUILD: &str = r#"
import sys, json, base64, datetime, decimal, re, struct, uuid
import pytds
bootstrap, topic, port, password, mode, registry = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
with_schemas, avro = mode == "schemas", mode == "avro"
EPOCH = datetime.datetime(1970, 1, 1)
if avro:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import SerializationContext, MessageField
    client = SchemaRegistryClient({"url": registry})
    keys_of, values_of = AvroDeserializer(client), AvroDeserializer(client)

def decode(m):
    """(key columns, event payload or None for a tombstone, the event as sent)"""
    if avro:
        key = keys_of(m.key(), SerializationContext(topic, MessageField.KEY))
        event = None if m.value() is None else values_of(m.value(), SerializationContext(topic, MessageField.VALUE))
        return key, event, event
    key_doc = json.loads(m.key())
    key = key_doc["payload"] if with_schemas else key_doc
    if m.value() is None:
        return key, None, None
    event = json.loads(m.value())
    assert ("schema" in event) == with_schemas, list(event)
    return key, (event["payload"] if with_schemas else event), event

def f32(x):
    return None if x is None else struct.unpack("f", struct.pack("f", x))[0]

def scale_of(event):
    if not with_schemas:
        return 2
    after = next(f for f in event["schema"]["fields"] if f["field"] == "after")
    amount = next(f for f in after["fields"] if f["field"] == "amount")
    assert amount["name"] == "org.apache.kafka.connect.data.Decimal", amount
    return int(amount["parameters"]["scale"])

def row(image, scale):
    if avro:
        # Avro readers get the decimal logical type and bytes as they are.
        assert isinstance(image["amount"], decimal.Decimal) and image["amount"].as_tuple().exponent == -2, image["amount"]
        amount = image["amount"]
        blob = image["payload"]
    else:
        amount = decimal.Decimal(int.from_bytes(base64.b64decode(image["amount"]), "big", signed=True)).scaleb(-scale)
        blob = None if image["payload"] is None else base64.b64decode(image["payload"])
    created = EPOCH + datetime.timedelta(microseconds=image["created_at"])
    updated = None if image["updated_at"] is None else datetime.datetime.fromisoformat(image["updated_at"])
    ref = image["ref"]
    assert ref is None or ref == ref.upper(), ref
    return (image["customer_id"], image["status"], amount, image["currency"], image["note"], created, updated, image["is_priority"], ref, f32(image["weight"]), blob)

replayed, last, ops, tombstones = {}, {}, {}, 0
for m in messages(bootstrap, topic, "debezium-rebuild-" + topic):
    key_columns, payload, event = decode(m)
    key = key_columns["order_id"]
    last[key] = (payload, event)
    if payload is None:
        tombstones += 1
        assert key not in replayed, "a tombstone follows the delete of its key"
        continue
    source = payload["source"]
    assert source["connector"] == "sqlserver" and source["db"] == "sales" and (source["schema"], source["table"]) == ("dbo", "orders"), source
    assert re.fullmatch(r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}", source["commit_lsn"]), source["commit_lsn"]
    if payload["op"] == "r":
        assert payload["before"] is None and source["snapshot"] == "true" and source["change_lsn"] is None and source["event_serial_no"] is None, source
    else:
        assert source["snapshot"] == "false" and re.fullmatch(r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}", source["change_lsn"]), source
        assert source["event_serial_no"] in (1, 2), source
    op = payload["op"]
    ops[op] = ops.get(op, 0) + 1
    if op == "d":
        # A row the snapshot did not read (deleted before its read) may be deleted again after S.
        replayed.pop(key, None)
    else:
        replayed[key] = row(payload["after"], scale_of(event))
    if op == "u":
        assert payload["before"]["order_id"] == payload["after"]["order_id"] and source["event_serial_no"] == 2

compacted = {}
for key, (payload, event) in last.items():
    if payload is not None:
        assert payload["op"] != "d", "a delete is followed by its tombstone"
        compacted[key] = row(payload["after"], scale_of(event))

table = {}
with pytds.connect(server="127.0.0.1", port=port, user="sa", password=password, database="sales", autocommit=True) as conn:
    cur = conn.cursor()
    cur.execute("SELECT order_id, customer_id, status, amount, currency, note, created_at, updated_at, is_priority, ref, weight, payload FROM dbo.orders")
    for r in cur.fetchall():
        ref = None if r[9] is None else str(r[9]).upper()
        blob = None if r[11] is None else bytes(r[11])
        table[r[0]] = (r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8]), ref, f32(r[10]), blob)

def diff(name, got):
    missing = sorted(set(table) - set(got))[:5]
    extra = sorted(set(got) - set(table))[:5]
    changed = [(k, got[k], table[k]) for k in sorted(set(got) & set(table)) if got[k] != table[k]][:3]
    return f"{name}: {len(got)} rows vs {len(table)}; missing {missing}; extra {extra}; changed {changed}"

assert replayed == table, diff("replayed", replayed)
assert compacted == table, diff("compacted", compacted)
assert tombstones == ops.get("d", 0), (tombstones, ops)
print("rebuilt", len(table), "rows;", json.dumps(ops, sort_keys=True), "tombstones", tombstones)
"#;

/// Runs the rebuild over the pipeline's topic; `mode` is `schemas` (JSON with Connect
/// schemas), `bare` (JSON payloads) or `avro` (with the registry at `registry`).
fn rebuild(pipeline: &Pipeline, mode: &str, registry: &str) -> String {
    let script = format!("{}{PY_REBUILD}", support::PY_MESSAGES);
    let port = pipeline.sim.address.port().to_string();
    let password = mssql_cdc_sim::client::password_from_env();
    support::run_python(&script, &[&pipeline.broker.bootstrap, &pipeline.topic, &port, &password, mode, registry])
}

/// Invariant: with `envelope = "debezium"`, a table bootstrapped from its existing rows and
/// changed by a workload (inserts, updates, deletes, key moves logged as delete and insert) is
/// rebuilt exactly by an independent consumer from the topic alone (replay, and a compacted
/// read where tombstones remove deleted keys), and bronze and silver built from the same
/// events equal the change history and the table. Chunks of 7 rows: the cut that never splits
/// an update's two rows is crossed often.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_events_rebuild_the_table_for_an_independent_consumer_and_for_bronze_and_silver() {
    let mut pipeline = Pipeline::start(Setup { preloaded: 300, source_extra: "envelope = \"debezium\"\nbootstrap = true\nfetch_rows = 7", ..Setup::default() });
    let workload = pipeline.workload(3000, 500, 5);
    pipeline.catch_up_and_check(workload, Duration::from_secs(180)).await;
    let output = rebuild(&pipeline, "schemas", "");
    eprintln!("{output}");
    for op in ["\"c\":", "\"d\":", "\"r\":", "\"u\":"] {
        assert!(output.contains(op), "every kind of event was written: {output}");
    }
}

/// Invariant: without Connect schemas (`[debezium] schemas = false`) keys and values are the
/// bare payloads, and the table is still rebuilt exactly, by the consumer and by silver.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_events_without_schemas_rebuild_the_table() {
    let mut pipeline = Pipeline::start(Setup { source_extra: "envelope = \"debezium\"\n\n[debezium]\nschemas = false", ..Setup::default() });
    let workload = pipeline.workload(1500, 500, 6);
    pipeline.catch_up_and_check(workload, Duration::from_secs(180)).await;
    let output = rebuild(&pipeline, "bare", "");
    assert!(output.contains("rebuilt"), "{output}");
}

/// Invariant: with `format = "avro"`, the events are Avro records in the Confluent wire format
/// under the Debezium schemas registered for the topic (`<topic>-key`, `<topic>-value`);
/// confluent-kafka's Avro deserializer reads them (decimals as decimals, bytes as bytes) and
/// rebuilds the table exactly, by replay and compacted; bronze and silver built from the same
/// Avro events equal the change history and the table.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_events_in_avro_rebuild_the_table_for_confluent_kafkas_avro_deserializer() {
    let registry = crate::support::registry::TestRegistry::start().await;
    let mut pipeline = Pipeline::start(Setup { preloaded: 200, source_extra: "envelope = \"debezium\"\nbootstrap = true\nfetch_rows = 9", registry: Some(registry.url.clone()), ..Setup::default() });
    let workload = pipeline.workload(2000, 500, 7);
    pipeline.catch_up_and_check(workload, Duration::from_secs(180)).await;
    let subjects = registry.subjects();
    assert!(subjects.contains(&format!("{}-key", pipeline.topic)) && subjects.contains(&format!("{}-value", pipeline.topic)), "{subjects:?}");
    let output = rebuild(&pipeline, "avro", &registry.url);
    eprintln!("{output}");
    for op in ["\"c\":", "\"d\":", "\"r\":", "\"u\":"] {
        assert!(output.contains(op), "every kind of event was written: {output}");
    }
}
