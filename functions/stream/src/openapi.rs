//! # The stream function's routes in the OpenAPI document
//!
//! The Durable Streams protocol is specified in its own `PROTOCOL.md` (headers, offsets, live
//! modes), and the official conformance suite checks Spool against it; this part of the
//! document names the routes, their parameters and answers, so that one document lists every
//! route Spool serves. The chat API merges it into `GET /v1/openapi.json`.

use utoipa::OpenApi;

use crate::{ag_ui, ai_sdk, chat_stream, handlers, subscriptions};

#[derive(OpenApi)]
#[openapi(paths(
    handlers::read,
    handlers::head,
    handlers::create,
    handlers::append,
    handlers::delete,
    chat_stream::chat_events,
    chat_stream::global_events,
    ai_sdk::post,
    ai_sdk::resume,
    ag_ui::post,
    ag_ui::resume,
    subscriptions::jwks,
    subscriptions::put,
    subscriptions::get,
    subscriptions::delete,
    subscriptions::add_streams,
    subscriptions::remove_stream,
    subscriptions::claim,
    subscriptions::callback,
    subscriptions::ack,
    subscriptions::release
))]
struct StreamDoc;

/// The stream function's routes: the protocol at `/v1/stream/{path}` and the chat event
/// streams.
pub fn openapi() -> utoipa::openapi::OpenApi {
    StreamDoc::openapi()
}
