//! # Spool's chats
//!
//! What a chat is made of, above the stream log (`spool_log`), free of any storage, HTTP or AWS
//! dependency:
//!
//! - [`event`]: a chat's typed event vocabulary ([`event::ChatEvent`]) and feed events;
//! - [`session`]: chat sessions, their event envelope and the port that stores their records;
//! - [`global`]: the global chat read as the second source design's messages;
//! - [`history`]: a chat's message index (its events without the deltas), for agents' history;
//! - [`listing`]: lists (chats, tasks, turns) in pages, walked with opaque cursors;
//! - [`service`]: the chat's write side (messages, answers, controls, agents' messages) and a
//!   workspace's (its settings, agents and tasks), over ports only, for every HTTP function and
//!   action to call;
//! - [`claim`]: a chat's pending turn, and how a claim a crash left behind is reconciled;
//! - [`current_turn`]: which turn holds a chat (runs or waits), as its stream tells;
//! - [`turns`]: the queue of agent turns between a submission and the worker;
//! - [`workspace`]: workspaces and their agents, and the port that stores them;
//! - [`settings`]: a workspace's settings and how a change to them is applied;
//! - [`manage`]: a workspace's feed and how its events are announced;
//! - [`names`]: names people choose, kept free of invisible format characters;
//! - [`notifier`]: telling a person, by email or in the log, when an agent needs them;
//! - [`confine`]: where agents may run (working directories under configured roots);
//! - [`directory`]: organizations and their API keys, and the port that stores them;
//! - [`caps`]: how much one workspace, chat or organization may hold, enforced by the stores;
//! - [`revocation`]: revoked API keys, whose tokens stop working within a bound;
//! - [`runner`]: CLI turns offered to runners, the machines that hold the code;
//! - [`mcp`]: a workspace's MCP servers, whose tools its agents call;
//! - [`usage`]: the usage ledger (models' tokens per chat, agent, model and day), prices and
//!   reports.
//!
//! Invariants: every write is an event in the chat's stream before anything acts on it; a chat
//! has at most one pending turn (its claim), and a claim a crash left behind is released or its
//! turn requeued, never kept forever; an open request (a question, an approval) has exactly one
//! recorded answer.

pub mod attachment;
pub mod branch;
pub mod caps;
pub mod claim;
pub mod clis;
pub mod confine;
pub mod current_turn;
pub mod directory;
pub mod event;
pub mod global;
pub mod history;
pub mod listing;
pub mod manage;
pub mod mcp;
pub mod metadata;
pub mod names;
pub mod notifier;
pub mod revocation;
pub mod runner;
pub mod service;
pub mod session;
pub mod settings;
pub mod turns;
pub mod usage;
pub mod webhook;
pub mod workspace;
