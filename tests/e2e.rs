//! The end-to-end suites, one test binary (each binary links the whole DataFusion, rdkafka and
//! AWS stack, so one binary instead of seven saves their codegen and link time). Each suite is a
//! module; run one with a filter on its name:
//!
//! ```text
//! scripts/test.sh --test e2e pipeline::      # the end-to-end, chaos and resilience suites
//! scripts/test.sh --test e2e bronze::        # the bronze sink
//! ```

mod support;

mod broker;
mod bronze;
mod cli;
mod pipeline;
mod silver;
mod source;
mod validate;
