//! Spool's integration tests: one binary (`cargo nextest run -p spool-tests`), the emulator
//! parts behind the `emulator` feature, which `make test` turns on after starting the emulator.

mod contract;
mod directory;
mod handshake;
mod processes;
mod sealing;
mod stream_http;
mod workspaces;
