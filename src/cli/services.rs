//! The services the stages talk to when one process holds everything (`demo`, `bench`): the
//! embedded broker and the simulator's TDS server, on a tokio runtime of their own. The stages
//! block threads of the main runtime (Kafka polls, Delta commits); on a two-core machine the
//! broker would otherwise starve behind them and its clients' requests time out.

use std::net::SocketAddr;

use mssql_cdc::broker::{self, BrokerOptions, BrokerStorage, RunningBroker};
use mssql_cdc_sim::{tds, Simulator};
use tokio_util::sync::CancellationToken;

/// The running broker and TDS server.
pub struct Services {
    runtime: Option<tokio::runtime::Runtime>,
    broker: Option<RunningBroker>,
    shutdown: CancellationToken,
    /// Where the broker listens.
    pub broker_address: SocketAddr,
    /// Where the simulator serves TDS.
    pub sim_address: SocketAddr,
}

impl Services {
    /// Starts the broker with `storage` and serves `sim`, both on free local ports.
    pub async fn start(storage: BrokerStorage, cluster_id: &str, sim: &Simulator) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("services").enable_all().build()?;
        let options = BrokerOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertised_host: None,
            storage,
            tls_cert: None,
            tls_key: None,
            cluster_id: cluster_id.to_owned(),
        };
        let mut services = Self { runtime: None, broker: None, shutdown: CancellationToken::new(), broker_address: options.listen, sim_address: options.listen };
        let broker = runtime.spawn(async move { broker::start(&options).await });
        let (served, shutdown) = (sim.clone(), services.shutdown.clone());
        let server = runtime.spawn(async move { tds::start(served, SocketAddr::from(([127, 0, 0, 1], 0)), tds::WireSecurity::default(), shutdown).await });
        // From here on a failure drops `services`, which shuts the runtime down in the background.
        services.runtime = Some(runtime);
        let broker = broker.await??;
        services.broker_address = broker.address;
        services.broker = Some(broker);
        services.sim_address = server.await??;
        Ok(services)
    }

    /// Stops the TDS server and the broker.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let (Some(runtime), Some(broker)) = (&self.runtime, self.broker.take()) {
            let _ = runtime.spawn(async move { broker.stop().await }).await;
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime inside another would block; this does not.
            runtime.shutdown_background();
        }
    }
}
