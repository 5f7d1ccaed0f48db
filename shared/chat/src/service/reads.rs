//! # What callers read through the chat service
//!
//! The global chat's history as messages ([`crate::global`]), and whether one of an
//! organization's streams exists (before a read grant is issued for it): reads over the stream
//! log, so that the HTTP functions never touch the log themselves.

use super::{ChatService, GLOBAL_SESSION};
use crate::{
    global::{self, Message},
    session::Session,
};
use spool_log::{error::Error, stream::StreamPath};

impl ChatService {
    /// Up to `limit` messages of the organization's global chat (made on first use), oldest
    /// first: those with ids greater than `after`, or the last `limit` without it.
    pub async fn global_history(&self, org: &str, after: Option<u64>, limit: usize) -> Result<Vec<Message>, Error> {
        let session = self.session(org, GLOBAL_SESSION).await?;
        let path = Session::stream(org, &session.id)?;
        match after {
            Some(after) => global::messages_after(self.log.as_ref(), &path, after, limit).await,
            None => global::last_messages(self.log.as_ref(), &path, limit).await,
        }
    }

    /// Checks that the organization has the stream `path` (named within its namespace, as the
    /// stream routes name it): [`Error::NotFound`] otherwise.
    pub async fn check_stream(&self, org: &str, path: &StreamPath) -> Result<(), Error> {
        self.log.metadata(&StreamPath::in_org(org, path.as_str())?).await?;
        Ok(())
    }
}
