//! # The companion
//!
//! `spool companion` runs on the person's own machine, over a library they choose (a folder of
//! notes). Spool's web UI finds it on loopback, and it answers with what the person's notes say
//! about a question, their open loops and suggestions: ids and short passages, never whole notes
//! ([`library`]). It holds an API key of the person's organization and exchanges it for Spool's
//! token for its library ([`spool`]), which the UI presents to Spool to turn the chat's
//! `context_for_query` capability on ([`http`]). With `capture_ingest` it also takes notes in
//! ([`capture`]): a message the person saves, or a capture an agent proposed and they approved.
//! With `mcp_tools` it runs the person's own MCP servers and offers their tools to chats ([`mcp`]).

pub mod capture;
pub mod http;
pub mod library;
pub mod mcp;
pub mod spool;

pub use http::{CompanionState, router};
pub use library::Library;
