//! # A chat's files, fetched from the deployment
//!
//! The CLI runtime places a chat's files in its folder by reading them from a
//! [`FileStore`]. On a runner the bytes are not at hand: [`TurnFiles`] fetches each from the
//! deployment, through the runner route of the claimed turn and epoch (so a superseded run
//! reads nothing). A runner only reads: every other method is refused.

use std::sync::Arc;

use async_trait::async_trait;
use spool_chat::attachment::{FileReader, FileStore, Transfer, object_key};
use spool_log::error::Error;

use super::client::Client;

/// The files of one claimed turn, read through the deployment.
#[derive(Debug)]
pub(crate) struct TurnFiles {
    client: Arc<Client>,
    org: String,
    session_id: String,
    turn_id: String,
    epoch: u64,
}

impl TurnFiles {
    /// The files of `session_id` (of `org`), for claim `epoch` of `turn_id`.
    pub(crate) fn new(client: Arc<Client>, org: String, session_id: String, turn_id: String, epoch: u64) -> Self {
        Self {
            client,
            org,
            session_id,
            turn_id,
            epoch,
        }
    }

    /// The attachment `key` names, if it is one of this chat's.
    fn file_id<'k>(&self, key: &'k str) -> Option<&'k str> {
        let prefix = object_key(&self.org, &self.session_id, "");
        key.strip_prefix(&prefix)
            .filter(|id| !id.is_empty() && !id.contains(['/', '?', '#', '%']))
    }
}

/// The response's body as it comes (a file may be 100 MiB): a failure midway is the reader's
/// error, so a cut-off download is never placed as if it were the whole file.
fn reader(response: reqwest::Response) -> FileReader {
    let chunks = futures_util::stream::unfold(Some(response), |response| async move {
        let mut response = response?;
        match response.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(response))),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e)), None)),
        }
    });
    Box::pin(tokio_util::io::StreamReader::new(chunks))
}

fn refused(what: &'static str) -> Error {
    Error::invalid(what, "a runner only reads the chat's files")
}

#[async_trait]
impl FileStore for TurnFiles {
    async fn upload(
        &self,
        _: &str,
        _: &str,
        _: u64,
        _: Option<&str>,
        _: std::time::Duration,
    ) -> Result<Transfer, Error> {
        Err(refused("upload"))
    }

    async fn download(&self, _: &str, _: &str, _: &str, _: std::time::Duration) -> Result<Transfer, Error> {
        Err(refused("download"))
    }

    async fn size(&self, _: &str) -> Result<Option<u64>, Error> {
        Err(refused("size"))
    }

    async fn write(&self, _: &str, _: u64, _: FileReader) -> Result<(), Error> {
        Err(refused("write"))
    }

    async fn put(&self, _: &str, _: Vec<u8>) -> Result<(), Error> {
        Err(refused("put"))
    }

    async fn read(&self, key: &str) -> Result<Option<FileReader>, Error> {
        let Some(file_id) = self.file_id(key) else {
            return Err(Error::invalid("file", format!("`{key}` is not a file of this chat")));
        };
        match self.client.file(&self.turn_id, file_id, self.epoch).await {
            Ok(Some(response)) => Ok(Some(reader(response))),
            Ok(None) => Ok(None),
            Err(e) => Err(Error::unavailable("fetch a chat's file from the deployment", e)),
        }
    }

    async fn keep(&self, _: &str) -> Result<(), Error> {
        Err(refused("keep"))
    }

    async fn delete(&self, _: &str) -> Result<(), Error> {
        Err(refused("delete"))
    }

    async fn copy(&self, _: &str, _: &str) -> Result<(), Error> {
        Err(refused("copy"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_chats_own_files_are_fetched() {
        let client = Arc::new(Client::new("http://127.0.0.1:9".to_owned(), String::new().into()));
        let files = TurnFiles::new(client, "acme".into(), "ses_1".into(), "turn_1".into(), 1);
        assert_eq!(files.file_id("attachments/acme/ses_1/att_9"), Some("att_9"));
        for other in [
            "attachments/acme/ses_2/att_9",
            "attachments/other/ses_1/att_9",
            "attachments/acme/ses_1/",
            "attachments/acme/ses_1/a/b",
            "runner-requests/acme/turn_1.json",
        ] {
            assert_eq!(files.file_id(other), None, "{other}");
        }
    }
}
