#!/usr/bin/env python3
"""A plain Kafka -> Delta sink for `mssql-cdc bench report --external-sink`, as a reference
point for sinks of your own: it reads a topic from its start with confluent-kafka until every
partition's end, and appends the JSON records to a Delta table with the deltalake package, in
batches of 50,000, one commit each (no exactly-once bookkeeping, no facts).

    mssql-cdc bench report --external-sink \
        "python3 scripts/bench-external-sink.py {bootstrap} {topic} {dir}/table"
"""
import json
import sys

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from deltalake import write_deltalake

bootstrap, topic, target = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-external-sink", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
ends = {}
for p in partitions:
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
    if high > low:
        ends[p] = high
consumer.assign([TopicPartition(topic, p, 0) for p in ends])
rows, written = [], 0


def flush():
    global rows, written
    if rows:
        write_deltalake(target, pa.Table.from_pylist(rows), mode="append", schema_mode="merge")
        written += len(rows)
        rows = []


while ends:
    for message in consumer.consume(10000, timeout=1.0):
        if message.error():
            continue
        if message.value():
            rows.append(json.loads(message.value()))
        if message.offset() + 1 >= ends.get(message.partition(), 0):
            ends.pop(message.partition(), None)
    if len(rows) >= 50000:
        flush()
flush()
consumer.close()
print(f"wrote {written} rows to {target}")
