//! The end-to-end suites, one test binary (each binary links the whole DataFusion, rdkafka and
//! AWS stack, so one binary instead of seven saves their codegen and link time). Each suite is a
//! module; run one with a filter on its name:
//!
//! ```text
//! scripts/test.sh --test e2e pipeline::      # the end-to-end, chaos and resilience suites
//! scripts/test.sh --test e2e bronze::        # the bronze sink
//! ```
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod api;
mod backfill;
mod broker;
mod bronze;
mod cli;
mod debezium;
mod deploy;
mod many;
mod pipeline;
mod reconcile;
mod schema;
mod security;
mod seed;
mod silver;
mod source;
mod validate;
