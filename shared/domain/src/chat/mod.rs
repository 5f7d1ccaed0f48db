//! # The chat half of the domain
//!
//! What a chat is made of, above the stream log: its events ([`event`]).

pub mod event;
