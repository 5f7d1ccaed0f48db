//! What the integration tests share: a served Spool and clients of it ([`api`]), the whole
//! stack with a worker ([`stack`]), a chat's life over the API ([`chat`]) and the OpenAPI
//! document as a checker ([`spec`]). The stores' harnesses and `eventually` live in the
//! `spool_tests` library, which the test binaries of other crates can use too.

mod api;
mod chat;
pub(crate) mod model;
pub(crate) mod spec;
mod stack;

pub(crate) use api::*;
pub(crate) use chat::*;
pub(crate) use stack::*;
