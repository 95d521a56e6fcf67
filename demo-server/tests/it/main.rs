//! The integration test binary of the demo server: its command line, run as the gateway, the
//! tests and the load tests run it (a separate process, real pipes and sockets). Named `it`
//! like the gateway's, so `cargo test --test it` at the workspace root builds this binary
//! before the gateway's tests run it.

mod cli;
