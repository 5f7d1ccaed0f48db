//! # Fail points
//!
//! Named places in the adapters and the chat service where a test can make the process "crash":
//! the operation stops right there with [`Error::Injected`], leaving storage exactly as a killed
//! process would. Used to prove that sealing survives a crash between writing a page and
//! recording it, that a person's message survives one between its writes, and that a command's
//! retry finishes what a crash after its invoked event left undone. In production no
//! point is ever armed and a check costs one uncontended lock.

use std::{collections::HashSet, sync::Mutex};

use crate::error::Error;

/// A page was written to storage but the stream head does not record it yet.
pub const SEAL_AFTER_PAGE_WRITE: &str = "seal.after_page_write";
/// The stream head records a page but the hot-tail rows it covers were not removed yet.
pub const SEAL_AFTER_COMMIT: &str = "seal.after_commit";

/// A person's message that answers an agent's question has made the first of its two writes and
/// not the second: its event is appended, the question is not closed yet.
pub const ANSWER_MIDWAY: &str = "message.answer_midway";
/// A person's message is appended; its turn is neither recorded nor queued by it yet.
pub const MESSAGE_APPENDED: &str = "message.appended";
/// A message queued behind a turn without a client id has its turn's job queued, and is not
/// appended yet.
pub const MESSAGE_QUEUED_FIRST: &str = "message.queued_first";

/// A command's `slash_command_invoked` is appended; its action has not run yet.
pub const COMMAND_INVOKED: &str = "command.invoked";

/// A set of armed fail points.
#[derive(Debug, Default)]
pub struct FailPoints {
    armed: Mutex<HashSet<&'static str>>,
}

impl FailPoints {
    /// Arms `point`: every later [`FailPoints::check`] of it fails until it is disarmed.
    pub fn arm(&self, point: &'static str) {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).insert(point);
    }

    /// Disarms `point`.
    pub fn disarm(&self, point: &'static str) {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).remove(point);
    }

    /// Fails with [`Error::Injected`] if `point` is armed.
    pub fn check(&self, point: &'static str) -> Result<(), Error> {
        if self.armed.lock().unwrap_or_else(|e| e.into_inner()).contains(point) {
            return Err(Error::Injected { point });
        }
        Ok(())
    }
}
