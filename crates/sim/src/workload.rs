//! The workload generator: inserts, updates, deletes and key updates in transactions of a
//! chosen size, at a target rate, with key skew, through any [`SqlClient`] (the in-process
//! engine here; tiberius over TDS against the served simulator or a real SQL Server).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::error::SqlError;
use super::value::Value;

/// Names values `@P1`, `@P2`, ... in order, as TDS clients declare them.
pub fn positional(values: Vec<Value>) -> Vec<(String, Value)> {
    values.into_iter().enumerate().map(|(index, value)| (format!("@P{}", index + 1), value)).collect()
}

/// Something that runs parameterised T-SQL: the simulator in-process, or a TDS client.
pub trait SqlClient {
    /// Runs `sql` with parameters named `@P1`, `@P2`, ... in order; returns the rows affected.
    fn execute(&mut self, sql: &str, params: &[(String, Value)]) -> Result<u64, SqlError>;
}

/// The default table the workload creates and drives.
pub const ORDERS_DDL: &str = "CREATE TABLE dbo.orders (
    order_id bigint NOT NULL PRIMARY KEY,
    customer_id int NOT NULL,
    status varchar(16) NOT NULL,
    amount decimal(18,2) NOT NULL,
    currency char(3) NOT NULL,
    note nvarchar(200) NULL,
    created_at datetime2(3) NOT NULL,
    updated_at datetimeoffset(3) NULL,
    is_priority bit NOT NULL,
    ref uniqueidentifier NULL,
    weight real NULL,
    payload varbinary(64) NULL
)";

/// The statements that enable CDC on the orders table.
pub const ORDERS_CDC: &[&str] = &[
    "EXEC sys.sp_cdc_enable_db",
    "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL, @supports_net_changes = 1",
];

/// Creates `dbo.orders` and enables CDC on it ([`ORDERS_DDL`], then [`ORDERS_CDC`]).
pub fn create_orders(client: &mut dyn SqlClient) -> Result<(), SqlError> {
    for sql in std::iter::once(ORDERS_DDL).chain(ORDERS_CDC.iter().copied()) {
        client.execute(sql, &[])?;
    }
    Ok(())
}

/// A fresh in-process simulator with `dbo.orders` (CDC on) and a backlog of `changes` made as
/// fast as one thread can: what the benchmarks start from. Blocks while the workload runs.
pub fn orders_backlog(changes: u64) -> Result<(crate::Simulator, WorkloadReport), SqlError> {
    let sim = crate::Simulator::new(crate::SimConfig::default());
    let mut client = crate::LocalClient::new(&sim);
    create_orders(&mut client)?;
    let options = WorkloadOptions { rate: 0, changes, ..WorkloadOptions::default() };
    let report = Workload::new(options, Vec::new()).run(&mut client)?;
    Ok((sim, report))
}

/// Shape of a workload.
#[derive(Clone, Debug, clap::Args)]
pub struct WorkloadOptions {
    /// Target changes per second (0: as fast as possible).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Stop after this many changes.
    #[arg(long, default_value_t = 10_000)]
    pub changes: u64,
    /// Statements per transaction: a random size from `--min-transaction-size` to this.
    #[arg(long, default_value_t = 5)]
    pub max_transaction_size: u32,
    /// The smallest transaction, in statements (the run's last transaction may be smaller: it
    /// ends at `--changes`; a `--max-transaction-size` below this is taken as this). Equal to `--max-transaction-size`, every transaction has that size:
    /// `--changes 1000000 --min-transaction-size 1000000 --max-transaction-size 1000000` is one
    /// transaction of a million changes.
    #[arg(long, default_value_t = 1)]
    pub min_transaction_size: u32,
    /// Percent of statements that insert.
    #[arg(long, default_value_t = 50)]
    pub insert_percent: u32,
    /// Percent that update a non-key column.
    #[arg(long, default_value_t = 35)]
    pub update_percent: u32,
    /// Percent that change a row's key.
    #[arg(long, default_value_t = 5)]
    pub key_update_percent: u32,
    /// Share of updates and deletes that hit the hottest 10% of keys, percent.
    #[arg(long, default_value_t = 80)]
    pub hot_key_percent: u32,
    /// Random seed, for repeatable runs.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        Self { rate: 1000, changes: 10_000, max_transaction_size: 5, min_transaction_size: 1, insert_percent: 50, update_percent: 35, key_update_percent: 5, hot_key_percent: 80, seed: 7 }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadReport {
    /// Changed rows (a key update counts once).
    pub changes: u64,
    /// Committed transactions.
    pub transactions: u64,
    /// Statements executed.
    pub statements: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Statements retried after a deadlock or lock timeout.
    pub retries: u64,
}

impl WorkloadReport {
    /// Changes per second.
    pub fn changes_per_second(&self) -> f64 {
        self.changes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Drives the orders table.
pub struct Workload {
    options: WorkloadOptions,
    rng: StdRng,
    live: Vec<i64>,
    next_id: i64,
    /// How the open transaction changed `live`, newest last: undone when it is rolled back
    /// (copying `live` per transaction would cost O(keys) each).
    undo: Vec<KeyChange>,
    stop: Option<Arc<AtomicBool>>,
    made: Option<Arc<AtomicU64>>,
}

/// One change to the workload's live keys, as [`Workload::roll_back_keys`] undoes it.
#[derive(Clone, Copy, Debug)]
enum KeyChange {
    /// A key pushed at the end.
    Pushed,
    /// `live[index]` replaced; it held `old`.
    Replaced { index: usize, old: i64 },
    /// `live.swap_remove(index)` took `old`.
    Removed { index: usize, old: i64 },
}

const STATUSES: &[&str] = &["new", "paid", "packed", "shipped", "delivered", "returned"];
/// The columns an insert names, in its parameters' order (`created_at` and `updated_at` are
/// `SYSDATETIME()` and NULL).
const INSERT_COLUMNS: &str = "order_id, customer_id, status, amount, currency, note, created_at, updated_at, is_priority, ref, weight, payload";
const CURRENCIES: &[&str] = &["EUR", "USD", "GBP", "BRL"];

impl Workload {
    /// A workload; `existing` are keys already in the table.
    pub fn new(options: WorkloadOptions, existing: Vec<i64>) -> Self {
        let next_id = existing.iter().copied().max().unwrap_or(0) + 1;
        let rng = StdRng::seed_from_u64(options.seed);
        Self { options, rng, live: existing, next_id, undo: Vec::new(), stop: None, made: None }
    }

    /// Stops at the next transaction boundary once `stop` is set, and counts the changes
    /// committed so far into `made` (for a live view).
    pub fn controlled(mut self, stop: Arc<AtomicBool>, made: Arc<AtomicU64>) -> Self {
        self.stop = Some(stop);
        self.made = Some(made);
        self
    }

    /// Undoes the open transaction's key changes, newest first, and restores `next_id`.
    fn roll_back_keys(&mut self, next_id: i64) {
        while let Some(change) = self.undo.pop() {
            match change {
                KeyChange::Pushed => {
                    self.live.pop();
                }
                KeyChange::Replaced { index, old } => self.live[index] = old,
                KeyChange::Removed { index, old } => {
                    // swap_remove moved the last key into `index`; put it back at the end.
                    if index == self.live.len() {
                        self.live.push(old);
                    } else {
                        let moved = std::mem::replace(&mut self.live[index], old);
                        self.live.push(moved);
                    }
                }
            }
        }
        self.next_id = next_id;
    }

    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|stop| stop.load(Ordering::Relaxed))
    }

    fn pick_key(&mut self) -> Option<usize> {
        if self.live.is_empty() {
            return None;
        }
        let hot = (self.live.len() / 10).max(1);
        Some(if self.rng.random_range(0..100) < self.options.hot_key_percent {
            self.live.len() - 1 - self.rng.random_range(0..hot)
        } else {
            self.rng.random_range(0..self.live.len())
        })
    }

    fn insert_params(&mut self, id: i64) -> Vec<(String, Value)> {
        positional(self.insert_values(id))
    }

    /// The values of a new order's `INSERT_COLUMNS` parameters.
    fn insert_values(&mut self, id: i64) -> Vec<Value> {
        let rng = &mut self.rng;
        let cents: i128 = rng.random_range(100..10_000_000);
        let note = if rng.random_bool(0.3) { Value::Null } else { Value::Text(format!("order {id} – 注文 🚚")) };
        vec![
            Value::Int(id),
            Value::Int(rng.random_range(1..50_000)),
            Value::Text(STATUSES[0].into()),
            Value::Numeric { value: cents, scale: 2 },
            Value::Text(CURRENCIES[rng.random_range(0..CURRENCIES.len())].into()),
            note,
            Value::Bit(rng.random_bool(0.1)),
            Value::Guid(uuid::Uuid::from_u128(rng.random())),
            Value::Float(f64::from(rng.random_range(0.1f32..40.0))),
            Value::Binary((0..rng.random_range(0..16)).map(|_| rng.random()).collect()),
        ]
    }

    /// Inserts orders `1..=rows` into an empty `dbo.orders`, 100 per statement, with values as
    /// the workload's inserts have them: a table's rows from before CDC was enabled. A workload
    /// then changes them when made with `Workload::new(options, (1..=rows).collect())`.
    pub fn preload(client: &mut dyn SqlClient, rows: u64, seed: u64) -> Result<(), SqlError> {
        let mut generator = Self::new(WorkloadOptions { seed, ..WorkloadOptions::default() }, Vec::new());
        let rows = i64::try_from(rows).unwrap_or(i64::MAX);
        let mut id = 1i64;
        while id <= rows {
            let count = (rows - id + 1).min(100);
            let mut tuples = Vec::with_capacity(count as usize);
            let mut values = Vec::with_capacity(count as usize * 10);
            for offset in 0..count {
                let p = |n: i64| format!("@P{}", offset * 10 + n);
                tuples.push(format!("({}, {}, {}, {}, {}, {}, SYSDATETIME(), NULL, {}, {}, {}, {})", p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10)));
                values.extend(generator.insert_values(id + offset));
            }
            let sql = format!("INSERT INTO dbo.orders ({INSERT_COLUMNS}) VALUES {}", tuples.join(", "));
            client.execute(&sql, &positional(values))?;
            id += count;
        }
        Ok(())
    }

    /// Runs until `options.changes` changes are made, pacing to `options.rate`.
    pub fn run(&mut self, client: &mut dyn SqlClient) -> Result<WorkloadReport, SqlError> {
        let started = Instant::now();
        let mut report = WorkloadReport::default();
        while report.changes < self.options.changes && !self.stopped() {
            let smallest = self.options.min_transaction_size.max(1);
            let size = self.rng.random_range(smallest..=self.options.max_transaction_size.max(smallest));
            let snapshot = self.next_id;
            self.undo.clear();
            let mut changed = 0u64;
            let mut statements = Vec::with_capacity(size as usize);
            for _ in 0..size {
                if report.changes + changed >= self.options.changes {
                    break;
                }
                statements.push(self.next_statement());
                changed += 1;
            }
            let outcome = self.transaction(client, &statements);
            match outcome {
                Ok(()) => {
                    report.transactions += 1;
                    report.statements += statements.len() as u64;
                    report.changes += changed;
                    if let Some(made) = &self.made {
                        made.fetch_add(changed, Ordering::Relaxed);
                    }
                }
                Err(error) if matches!(error.number, 1205 | 1222) => {
                    self.roll_back_keys(snapshot);
                    report.retries += 1;
                    continue;
                }
                Err(error) => return Err(error),
            }
            if self.options.rate > 0 {
                let due = Duration::from_secs_f64(report.changes as f64 / self.options.rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        report.elapsed = started.elapsed();
        Ok(report)
    }

    fn transaction(&mut self, client: &mut dyn SqlClient, statements: &[(String, Vec<(String, Value)>)]) -> Result<(), SqlError> {
        if statements.len() == 1 {
            let (sql, params) = &statements[0];
            return client.execute(sql, params).map(|_| ());
        }
        client.execute("BEGIN TRANSACTION", &[])?;
        for (sql, params) in statements {
            if let Err(error) = client.execute(sql, params) {
                // A deadlock victim's transaction is already rolled back; then this fails (3903).
                let _ = client.execute("ROLLBACK", &[]);
                return Err(error);
            }
        }
        client.execute("COMMIT", &[]).map(|_| ())
    }

    fn next_statement(&mut self) -> (String, Vec<(String, Value)>) {
        let roll = self.rng.random_range(0..100);
        let o = &self.options;
        let (insert, update, key_update) = (o.insert_percent, o.insert_percent + o.update_percent, o.insert_percent + o.update_percent + o.key_update_percent);
        match self.pick_key() {
            Some(index) if roll >= insert && roll < update => {
                let id = self.live[index];
                let status = STATUSES[self.rng.random_range(1..STATUSES.len())];
                let cents: i128 = self.rng.random_range(100..10_000_000);
                (
                    "UPDATE dbo.orders SET status = @P1, amount = @P2, updated_at = SYSDATETIMEOFFSET() WHERE order_id = @P3".to_owned(),
                    positional(vec![Value::Text(status.into()), Value::Numeric { value: cents, scale: 2 }, Value::Int(id)]),
                )
            }
            Some(index) if roll >= update && roll < key_update => {
                let old = self.live[index];
                // Half the moves go past every key, half before every key (negative ids): a
                // reader in key order meets rows moving both ahead of it and behind it.
                let new = if self.rng.random_bool(0.5) { self.next_id } else { -self.next_id };
                self.next_id += 1;
                self.undo.push(KeyChange::Replaced { index, old });
                self.live[index] = new;
                ("UPDATE dbo.orders SET order_id = @P1 WHERE order_id = @P2".to_owned(), positional(vec![Value::Int(new), Value::Int(old)]))
            }
            Some(index) if roll >= key_update => {
                let id = self.live.swap_remove(index);
                self.undo.push(KeyChange::Removed { index, old: id });
                ("DELETE FROM dbo.orders WHERE order_id = @P1".to_owned(), positional(vec![Value::Int(id)]))
            }
            _ => {
                let id = self.next_id;
                self.next_id += 1;
                self.live.push(id);
                self.undo.push(KeyChange::Pushed);
                (
                    format!("INSERT INTO dbo.orders ({INSERT_COLUMNS}) VALUES (@P1, @P2, @P3, @P4, @P5, @P6, SYSDATETIME(), NULL, @P7, @P8, @P9, @P10)"),
                    self.insert_params(id),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadlock victim's transaction is retried from the keys it started with: undoing its
    /// pushes, key moves and removals must give back exactly the keys (and their order) and
    /// the next id from before it.
    #[test]
    fn a_rolled_back_transaction_leaves_the_live_keys_as_they_were() {
        let options = WorkloadOptions { insert_percent: 30, update_percent: 10, key_update_percent: 30, hot_key_percent: 50, ..WorkloadOptions::default() };
        let mut workload = Workload::new(options, (1..=40).collect());
        let mut changed = 0;
        for round in 0..50 {
            let (live, next_id) = (workload.live.clone(), workload.next_id);
            workload.undo.clear();
            for _ in 0..(round % 9 + 1) {
                workload.next_statement();
            }
            changed += usize::from(workload.live != live);
            workload.roll_back_keys(next_id);
            assert_eq!((&workload.live, workload.next_id), (&live, next_id), "round {round}");
            // Then commit a few, so the next round starts elsewhere.
            workload.next_statement();
        }
        assert!(changed > 25, "only {changed} of 50 transactions changed the keys: the test undoes nothing");
    }

    /// Every transaction but the last has `--min-transaction-size` statements or more: with
    /// both bounds equal, a run is transactions of exactly that size (the bench's "one large
    /// transaction"), the last one ending at `--changes`.
    #[test]
    fn equal_bounds_make_transactions_of_that_size() {
        /// Counts the statements between each BEGIN TRANSACTION and its COMMIT.
        #[derive(Default)]
        struct Sizes {
            open: Option<usize>,
            closed: Vec<usize>,
        }
        impl SqlClient for Sizes {
            fn execute(&mut self, sql: &str, _: &[(String, Value)]) -> Result<u64, SqlError> {
                match sql {
                    "BEGIN TRANSACTION" => self.open = Some(0),
                    "COMMIT" => self.closed.extend(self.open.take()),
                    _ => match self.open.as_mut() {
                        Some(open) => *open += 1,
                        None => self.closed.push(1),
                    },
                }
                Ok(1)
            }
        }
        let options = WorkloadOptions { rate: 0, changes: 2500, min_transaction_size: 1000, max_transaction_size: 1000, ..WorkloadOptions::default() };
        let mut sizes = Sizes::default();
        let report = Workload::new(options, Vec::new()).run(&mut sizes).unwrap();
        assert_eq!(sizes.closed, vec![1000, 1000, 500]);
        assert_eq!((report.transactions, report.changes), (3, 2500));
        let options = WorkloadOptions { rate: 0, changes: 3000, min_transaction_size: 40, max_transaction_size: 60, ..WorkloadOptions::default() };
        let mut sizes = Sizes::default();
        Workload::new(options, Vec::new()).run(&mut sizes).unwrap();
        let last = sizes.closed.pop().unwrap();
        assert!(sizes.closed.iter().all(|n| (40..=60).contains(n)) && last <= 60, "sizes: {:?}, last {last}", sizes.closed);
    }
}
