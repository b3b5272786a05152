//! `mssql-cdc bench`: stage benchmarks with a baseline measured in the same run.
//!
//! `bench source`: a workload on the in-process simulator (served over TDS), the source stage
//! reading one capture instance into the embedded broker; then a raw rdkafka producer sending
//! the very same records (keys and values read back from the data topic) with the same
//! producer settings. Both rates are printed side by side, with the process's peak RSS.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mssql_cdc::broker::BrokerStorage;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_sim::workload::orders_backlog;
use mssql_cdc_source::config::{ConnectionString, Encrypt};
use mssql_cdc_source::publish::Publisher;
use mssql_cdc_source::stream::Stream;
use mssql_cdc::connectors::validated;
use mssql_cdc_source::MssqlSourceOptions;
use mssql_cdc_testkit::kafka::{controls, read_all, totals};
use tokio_util::sync::CancellationToken;

use super::services::Services;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Without a subcommand: the report (`bench report` with its defaults).
    #[command(subcommand)]
    what: Option<BenchWhat>,
}

#[derive(Debug, clap::Subcommand)]
enum BenchWhat {
    /// The report: every stage as its own process, throughput, apply time, end-to-end
    /// latency and peak RSS, each next to a baseline from the same run (one Markdown table)
    Report(super::bench_report::ReportBench),
    /// The source: one capture instance into the embedded broker, next to a raw producer
    Source(SourceBench),
    /// The source's feed, then the bronze sink into Delta, next to writing the same Arrow
    /// batches straight to Parquet on the same disk
    Bronze(SourceBench),
    /// One folded batch MERGEd into silver tables of given sizes, with the key-range file
    /// filter and as delta-rs's plain MERGE
    Silver(super::bench_silver::SilverBench),
    /// A table's existing rows through the snapshot (source, then bronze, each its own
    /// process, with peak RSS), next to a bare TDS read of the same table
    Snapshot(super::bench_snapshot::SnapshotBench),
    /// A table's existing rows through a chunked snapshot with 1, 2 and 4 chunk readers, next
    /// to the full snapshot, under a workload: rows/s, the stream's lag, peak RSS
    Backfill(super::bench_backfill::BackfillBench),
    /// `mssql-cdc reconcile` over a table and its silver (tier 1, then every row hashed), next
    /// to a `COUNT_BIG(*)` over TDS and silver's row count
    Reconcile(super::bench_reconcile::ReconcileBench),
    /// The memory run: a backlog (10M changes by default) made while no stage runs, then the
    /// three stages catching up together, each its own process: time, rows/s, peak RSS
    Backlog(super::bench_backlog::BacklogBench),
}

#[derive(Debug, clap::Args)]
struct SourceBench {
    /// Changes the workload makes before the source starts.
    #[arg(long, default_value_t = 200_000)]
    changes: u64,
    /// The source's max_commits_per_batch (unlimited when omitted).
    #[arg(long)]
    max_commits_per_batch: Option<u64>,
    /// The source's num_partitions: connections a batch's change rows are read over.
    #[arg(long, default_value_t = 1)]
    num_partitions: u32,
    /// `bench bronze`: the sink's max_rows_per_commit (a batch over it is written in chunks of
    /// that many records). Default: the sink's, 100000.
    #[arg(long)]
    max_rows_per_commit: Option<u64>,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        None => super::bench_report::run(super::bench_report::ReportBench::defaults()).await,
        Some(BenchWhat::Report(bench)) => super::bench_report::run(bench).await,
        Some(BenchWhat::Source(bench)) => source(bench, false).await,
        Some(BenchWhat::Bronze(bench)) => source(bench, true).await,
        Some(BenchWhat::Silver(bench)) => super::bench_silver::run(bench).await,
        Some(BenchWhat::Snapshot(bench)) => super::bench_snapshot::run(bench).await,
        Some(BenchWhat::Backfill(bench)) => super::bench_backfill::run(bench).await,
        Some(BenchWhat::Reconcile(bench)) => super::bench_reconcile::run(bench).await,
        Some(BenchWhat::Backlog(bench)) => super::bench_backlog::run(bench).await,
    }
}

async fn source(args: SourceBench, then_bronze: bool) -> anyhow::Result<ExitCode> {
    let changes = args.changes;
    let (sim, report) = tokio::task::spawn_blocking(move || orders_backlog(changes)).await??;
    let _jobs = sim.spawn_jobs(Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let expected = sim.changes("dbo_orders").len() as u64;
    println!("workload: {} changes in {} transactions -> {expected} change rows", report.changes, report.transactions);
    let services = Services::start(BrokerStorage::Memory, "mssql-cdc-bench", &sim).await?;
    let (address, kafka) = (services.sim_address, KafkaConfig { bootstrap_servers: services.broker_address.to_string(), ..KafkaConfig::default() });

    let options = MssqlSourceOptions {
        connection_string: Some(ConnectionString(format!("Server=127.0.0.1,{};Database=sales", address.port()))),
        user: Some("sa".into()),
        password: Some(mssql_cdc_core::config::secret::Secret::Inline(mssql_cdc_core::config::secret::SecretString::new(mssql_cdc_sim::client::password_from_env()))),
        encrypt: Encrypt::NotSupported,
        capture_instances: vec!["dbo_orders".into()],
        topic_prefix: Some("bench".into()),
        max_commits_per_batch: args.max_commits_per_batch,
        num_partitions: args.num_partitions,
        poll_interval_ms: 50,
        ..MssqlSourceOptions::default()
    };
    let settings = validated(options).map_err(|problems| anyhow::anyhow!("bench source options: {problems:?}"))?;
    let stream = Stream::new("bench-source", "dbo_orders", Arc::new(settings), &kafka, None)?;
    let cancel = CancellationToken::new();
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    let task = tokio::spawn(stream.run(cancel.clone()));
    let (rows, bytes, batches) = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        anyhow::ensure!(!task.is_finished(), "the source stopped early");
        let cluster = kafka.clone();
        let totals = off_runtime(move || totals(&cluster, "bench.sales.dbo.orders")).await?;
        if totals.rows >= expected {
            break (totals.rows, totals.bytes, totals.batches);
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "the source did not finish in 10 minutes");
    };
    let source_secs = started.elapsed().as_secs_f64();
    let source_cpu = cpu_seconds() - cpu_before;
    cancel.cancel();
    task.await??;
    let cluster = kafka.clone();
    let published = off_runtime(move || controls(&cluster, "bench.sales.dbo.orders")).await?;
    let streaming = Landed::of_controls(&published).streaming_rate();

    // Baseline: the same records, produced raw.
    let (records, acked, raw_secs, raw_bytes) = raw_producer_baseline(&kafka, "bench.sales.dbo.orders").await?;
    if records != rows {
        println!("note: {records} of the {rows} records were read back for the baseline");
    }

    println!(
        "source (SQL Server CDC over TDS -> Arrow -> JSON -> broker, {batches} batches): {rows} rows, {:.1} MB in {source_secs:.2} s = {:.0} rows/s, {:.1} MB/s",
        bytes as f64 / 1e6,
        rows as f64 / source_secs,
        bytes as f64 / 1e6 / source_secs
    );
    println!(
        "baseline (raw rdkafka producer, same records, same settings): {acked} rows, {:.1} MB in {raw_secs:.2} s = {:.0} rows/s, {:.1} MB/s",
        raw_bytes as f64 / 1e6,
        acked as f64 / raw_secs,
        raw_bytes as f64 / 1e6 / raw_secs
    );
    println!("source streaming (from the first batch published to the last, setup and the totals poll left out): {streaming:.0} rows/s");
    println!(
        "CPU while the source ran (simulator, broker and source in this process): {source_cpu:.2} s in {source_secs:.2} s = {:.2} of {} cores",
        source_cpu / source_secs,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    // The ceiling: the same change rows read over TDS with nothing done to them.
    let cpu_before = cpu_seconds();
    let (bare_rows, bare_secs) = bare_read(address, "SELECT * FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, __$seqval, __$operation").await?;
    let bare_rate = bare_rows as f64 / bare_secs;
    println!("baseline (bare tiberius read of the same change rows over TDS): {bare_rows} rows in {bare_secs:.2} s = {bare_rate:.0} rows/s; the source reached {:.0}% of it with its setup, {:.0}% streaming", 100.0 * (rows as f64 / source_secs) / bare_rate, 100.0 * streaming / bare_rate);
    println!("CPU while the bare read ran: {:.2} s in {bare_secs:.2} s", cpu_seconds() - cpu_before);
    println!("peak RSS of the process (simulator, broker and source together): {:.0} MB", peak_rss_mb());
    if then_bronze {
        bronze(&kafka, batches, args.max_rows_per_commit).await?;
    }
    services.stop().await;
    Ok(ExitCode::SUCCESS)
}

/// The bronze sink over the feed just published, then the same rows as Arrow batches written
/// straight to one Parquet file in the same directory.
async fn bronze(kafka: &KafkaConfig, batches: u64, max_rows_per_commit: Option<u64>) -> anyhow::Result<()> {
    use mssql_cdc_core::config::WorkerConfig;
    use mssql_cdc_lake::bronze::{BronzeOptions, BronzeSink};
    use mssql_cdc_core::stage::{Stage, StageContext};

    let dir = std::env::temp_dir().join(format!("mssql-cdc-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let (target, facts) = (dir.join("bronze").display().to_string(), dir.join("facts").display().to_string());
    let options = BronzeOptions {
        topic: Some("bench.sales.dbo.orders".into()),
        target: Some(target.clone()),
        app_id: Some("bench-bronze".into()),
        facts_table: Some(facts.clone()),
        max_rows_per_commit,
        ..BronzeOptions::default()
    };
    let context = StageContext::new("bench-bronze", WorkerConfig { kafka: kafka.clone(), ..WorkerConfig::default() });
    // Peak RSS from here on (Linux: writing 5 to clear_refs resets VmHWM).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let base_rss = peak_rss_mb();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let settings = validated(options).map_err(|problems| anyhow::anyhow!("bench bronze options: {problems:?}"))?;
    let task = tokio::spawn(Box::new(BronzeSink::new(settings, &context)).run(cancel.clone()));
    let last = batches as i64 - 1;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        anyhow::ensure!(!task.is_finished(), "the bronze sink stopped early");
        if let Some(table) = mssql_cdc_lake::delta::table::open(&facts, &Default::default()).await?
            && mssql_cdc_lake::delta::table::txn_version(&table, "bench-bronze#facts").await?.unwrap_or(-1) >= last {
                break;
            }
    }
    let bronze_secs = started.elapsed().as_secs_f64();
    cancel.cancel();
    task.await??;
    let bronze_peak = peak_rss_mb();

    let (rows, bytes, decode_secs, write_secs) = parquet_baseline(kafka, "bench.sales.dbo.orders", &dir).await?;
    let files = std::fs::read_dir(&target)?.filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "parquet"))).count();
    println!(
        "bronze sink (control topic -> {batches} batches read by offset range -> JSON decode -> Delta commits with txn, plus facts): {rows} rows, {:.1} MB in {bronze_secs:.2} s = {:.0} rows/s, {:.1} MB/s; {files} data files; peak RSS {bronze_peak:.0} MB (from {base_rss:.0} MB at the start of the phase)",
        bytes as f64 / 1e6,
        rows as f64 / bronze_secs,
        bytes as f64 / 1e6 / bronze_secs
    );
    println!(
        "baseline (same rows: JSON decode {decode_secs:.2} s, then the same Arrow batches to one Parquet file {write_secs:.2} s): {:.0} rows/s decode+write, {:.0} rows/s write only",
        rows as f64 / (decode_secs + write_secs),
        rows as f64 / write_secs
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Every row `sql` returns, read over TDS from the simulator at `address` by tiberius, each
/// value decoded: (rows, seconds). The ceiling of a stage reading the same rows.
pub(super) async fn bare_read(address: std::net::SocketAddr, sql: &str) -> anyhow::Result<(u64, f64)> {
    use futures::TryStreamExt;
    let config = mssql_cdc_sim::client::ClientConfig { address, user: "sa".into(), password: mssql_cdc_sim::client::password_from_env(), database: "sales".into() };
    let mut client = mssql_cdc_sim::client::connect(&config).await?;
    let started = Instant::now();
    let mut stream = client.simple_query(sql).await?.into_row_stream();
    let (mut rows, mut cells) = (0u64, 0usize);
    while let Some(row) = stream.try_next().await? {
        cells += row.into_iter().count();
        rows += 1;
    }
    anyhow::ensure!(cells > 0 || rows == 0, "rows without values");
    Ok((rows, started.elapsed().as_secs_f64()))
}

/// Runs a blocking call (the test kit's Kafka readers) on the blocking pool.
pub(super) async fn off_runtime<T: Send + 'static, E: Send + 'static>(call: impl FnOnce() -> Result<T, E> + Send + 'static) -> anyhow::Result<T>
where
    anyhow::Error: From<E>,
{
    Ok(tokio::task::spawn_blocking(call).await??)
}

/// The records of `topic` read back, then produced again to a fresh topic by a bare rdkafka
/// producer with the source's settings: (records read, records acked, seconds, bytes).
pub(super) async fn raw_producer_baseline(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<(u64, u64, f64, usize)> {
    let (cluster, read) = (kafka.clone(), topic.to_owned());
    let records = off_runtime(move || read_topic(&cluster, &read)).await?;
    let (count, bytes) = (records.len() as u64, records.iter().map(|(k, v)| k.len() + v.len()).sum());
    let raw_topic = format!("{topic}.raw-baseline");
    let raw = Publisher::new(kafka, &Default::default(), "bench-raw")?;
    raw.ensure_topics(&raw_topic, 3, &format!("{raw_topic}.control")).await?;
    let started = Instant::now();
    raw.begin();
    raw.queue(move |producer, set| records.iter().try_for_each(|(key, value)| producer.send_in(set, &raw_topic, key, Some(value)))).await?;
    let acked: u64 = raw.finish().await?.iter().map(|p| p.records).sum();
    let secs = started.elapsed().as_secs_f64();
    Ok((count, acked, secs, bytes))
}

/// The data records of `topic` decoded from JSON into Arrow with the last control record's
/// schema, then written to one Parquet file in `dir`: (rows, bytes, decode s, write s).
pub(super) async fn parquet_baseline(kafka: &KafkaConfig, topic: &str, dir: &std::path::Path) -> anyhow::Result<(usize, usize, f64, f64)> {
    use mssql_cdc_lake::bronze::records::{decode, DataRecord};

    let (cluster, read) = (kafka.clone(), topic.to_owned());
    let (controls, records) = off_runtime(move || anyhow::Ok((controls(&cluster, &read)?, read_topic(&cluster, &read)?))).await?;
    let bytes: usize = records.iter().map(|(_, v)| v.len()).sum();
    let rows = records.len();
    let schema = &controls.iter().rev().find(|c| c.rows > 0).or(controls.last()).ok_or_else(|| anyhow::anyhow!("no control records"))?.schema;
    let started = Instant::now();
    let data: Vec<DataRecord> = records.into_iter().enumerate().map(|(i, (_, value))| DataRecord { partition: 0, offset: i as i64, value }).collect();
    let mut arrow_batches = Vec::new();
    for chunk in data.chunks(10_000) {
        let decoded = decode(schema, chunk, None, mssql_cdc_core::log::Envelope::Native, 0, "0x", "0xFFFFFFFFFFFFFFFFFFFFF");
        anyhow::ensure!(decoded.bad.is_empty(), "baseline decode failed: {:?}", decoded.bad.first().map(|b| &b.1));
        arrow_batches.extend(decoded.batch);
    }
    let decode_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let file = std::fs::File::create(dir.join("baseline.parquet"))?;
    let mut writer = deltalake::parquet::arrow::ArrowWriter::try_new(file, arrow_batches[0].schema(), None)?;
    for batch in &arrow_batches {
        writer.write(batch)?;
    }
    writer.close()?;
    Ok((rows, bytes, decode_secs, started.elapsed().as_secs_f64()))
}

/// Bronze's ceiling on the same feed: a bare rdkafka consumer reads `rows` data records of
/// `topic` from the start of every partition (with bronze's fetch size), decodes them from JSON
/// into Arrow 10,000 at a time as they arrive (the last control record's schema) and writes
/// them to one Parquet file in `dir`. Returns (rows, seconds from the consumer's creation to
/// the file's close).
pub(super) async fn consumer_parquet_baseline(kafka: &KafkaConfig, topic: &str, rows: u64, dir: &std::path::Path) -> anyhow::Result<(u64, f64)> {
    use mssql_cdc_lake::bronze::records::{decode, DataRecord};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;

    let (cluster, read) = (kafka.clone(), topic.to_owned());
    let controls = off_runtime(move || controls(&cluster, &read)).await?;
    let schema = controls.iter().rev().find(|c| c.rows > 0).or(controls.last()).ok_or_else(|| anyhow::anyhow!("no control records"))?.schema.clone();
    let (kafka, topic, path) = (kafka.clone(), topic.to_owned(), dir.join("consumer-baseline.parquet"));
    off_runtime(move || -> anyhow::Result<(u64, f64)> {
        let started = Instant::now();
        let consumer: BaseConsumer = kafka
            .client_config()?
            .set("group.id", format!("bench-consumer-baseline-{}", uuid::Uuid::new_v4()))
            .set("enable.auto.commit", "false")
            .set("fetch.max.bytes", "52428800")
            .set("fetch.wait.max.ms", "10")
            .create()?;
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let mut assignment = rdkafka::TopicPartitionList::new();
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            assignment.add_partition_offset(&topic, partition.id(), rdkafka::Offset::Beginning)?;
        }
        consumer.assign(&assignment)?;
        let mut writer: Option<deltalake::parquet::arrow::ArrowWriter<std::fs::File>> = None;
        let (mut pending, mut read) = (Vec::with_capacity(10_000), 0u64);
        let deadline = Instant::now() + Duration::from_secs(600);
        while read < rows || !pending.is_empty() {
            anyhow::ensure!(Instant::now() < deadline, "the consumer baseline read {read} of {rows} records in 10 minutes");
            if read < rows
                && let Some(message) = consumer.poll(Duration::from_millis(100)) {
                    let message = message?;
                    pending.push(DataRecord { partition: message.partition(), offset: message.offset(), value: message.payload().unwrap_or_default().to_vec() });
                    read += 1;
                }
            if pending.len() >= 10_000 || (read >= rows && !pending.is_empty()) {
                let decoded = decode(&schema, &pending, None, mssql_cdc_core::log::Envelope::Native, 0, "0x", "0xFFFFFFFFFFFFFFFFFFFFF");
                anyhow::ensure!(decoded.bad.is_empty(), "baseline decode failed: {:?}", decoded.bad.first().map(|b| &b.1));
                if let Some(batch) = decoded.batch {
                    if writer.is_none() {
                        writer = Some(deltalake::parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path)?, batch.schema(), None)?);
                    }
                    if let Some(writer) = writer.as_mut() {
                        writer.write(&batch)?;
                    }
                }
                pending.clear();
            }
        }
        if let Some(writer) = writer {
            writer.close()?;
        }
        Ok((read, started.elapsed().as_secs_f64()))
    })
    .await
}

/// Every record of `topic` as (key, value), read until nothing more arrives for 3 s (the memory
/// storage's watermarks can lag what a consumer reads).
fn read_topic(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    Ok(read_all(kafka, topic, Some(Duration::from_secs(3)))?.into_iter().map(|record| (record.key, record.value)).collect())
}

/// When a stage's output landed, by the stage's own clock: each batch's control record
/// (`published_at`) or each bronze commit's facts (`written_at`) with its rows, in order. Empty
/// entries (heartbeats) are left out.
pub(super) struct Landed(Vec<(chrono::DateTime<chrono::Utc>, u64)>);

impl Landed {
    pub(super) fn new(mut entries: Vec<(chrono::DateTime<chrono::Utc>, u64)>) -> Self {
        entries.retain(|(_, rows)| *rows > 0);
        entries.sort_by_key(|(at, _)| *at);
        Self(entries)
    }

    /// The source's batches, from its control records.
    pub(super) fn of_controls(published: &[mssql_cdc_core::log::ControlRecord]) -> Self {
        Self::new(published.iter().filter_map(|c| c.metrics.published_at.map(|t| (t, c.rows))).collect())
    }

    /// The rate once streaming: the rows of every entry after the first over the time from the
    /// first to the last (0 with fewer than two).
    pub(super) fn streaming_rate(&self) -> f64 {
        match (self.0.first(), self.0.last()) {
            (Some((first, _)), Some((last, _))) if last > first => {
                let rows: u64 = self.0[1..].iter().map(|(_, rows)| rows).sum();
                rows as f64 / ((*last - *first).num_microseconds().unwrap_or(1) as f64 / 1e6)
            }
            _ => 0.0,
        }
    }

    /// Seconds from `since` (the stage's spawn) until the entry that brought the rows to
    /// `rows` landed; `None` when they never did. Unlike a poll from outside, this leaves out
    /// the time the bench takes to notice.
    pub(super) fn seconds_until(&self, rows: u64, since: chrono::DateTime<chrono::Utc>) -> Option<f64> {
        let mut total = 0;
        self.0.iter().find_map(|(at, landed)| {
            total += landed;
            (total >= rows).then(|| (*at - since).num_microseconds().unwrap_or(0) as f64 / 1e6)
        })
    }
}

/// CPU seconds this process has used so far (user + system, all threads), from
/// `/proc/self/stat` at the usual 100 ticks a second.
pub(super) fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The fields after the command name (which may hold spaces), from field 3 on.
            let rest = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?)
        })
        .map_or(0.0, |ticks| ticks / 100.0)
}

/// Resets this process's peak RSS to its present RSS (Linux's `clear_refs`), so the next
/// [`peak_rss_mb`] covers only what runs after; false where the kernel refuses it.
pub(super) fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

pub(super) fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::Landed;
    use chrono::{TimeZone, Utc};

    /// A stage's time ends where its last rows landed, not at a heartbeat written after them,
    /// and its streaming rate leaves the first batch (the start) out.
    #[test]
    fn landed_times_end_at_the_last_rows() {
        let at = |ms: i64| Utc.timestamp_millis_opt(1_000_000 + ms).single().unwrap_or_default();
        let landed = Landed::new(vec![(at(3_000), 0), (at(500), 100), (at(1_000), 200), (at(1_500), 300)]);
        assert_eq!(landed.seconds_until(600, at(0)), Some(1.5));
        assert_eq!(landed.seconds_until(300, at(0)), Some(1.0));
        assert_eq!(landed.seconds_until(601, at(0)), None);
        assert_eq!(landed.streaming_rate(), 500.0);
        assert_eq!(Landed::new(vec![(at(1), 5)]).streaming_rate(), 0.0);
    }
}
