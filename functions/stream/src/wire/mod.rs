//! # The front ends' wire formats
//!
//! How a turn is told to the front-end libraries the stream function speaks to, derived from
//! the chat's durable events alone (so a resumed stream is the turn replayed, chunk for chunk):
//!
//! - [`ui_message`]: a turn as the AI SDK's UI message stream (`useChat`'s wire format), served
//!   by the AI SDK routes;
//! - [`ag_ui`]: a turn as AG-UI events (CopilotKit's protocol), served by the AG-UI routes.

pub mod ag_ui;
pub mod ui_message;
