//! # Group commit
//!
//! Concurrent appends to one stream from one process are merged: while one durable write is
//! under way, requests queue up, and the next write carries all of them. Under load this turns
//! N writes (and N rounds of conditional-write conflicts) into one, without adding latency when
//! there is no load.
//!
//! The drain loop runs in its own task, so a caller that goes away (a dropped HTTP request) can
//! never strand the requests queued behind it.

use std::{
    collections::HashMap,
    future::Future,
    hash::Hash,
    sync::{Arc, Mutex},
};

use tokio::sync::oneshot;

use crate::error::Error;

type Queue<Req, Resp> = Vec<(Req, oneshot::Sender<Result<Resp, Error>>)>;

/// Per-key queues of requests waiting for the next merged write.
pub struct GroupCommit<K, Req, Resp> {
    queues: Mutex<HashMap<K, Queue<Req, Resp>>>,
    max_batch: usize,
}

impl<K, Req, Resp> std::fmt::Debug for GroupCommit<K, Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("max_batch", &self.max_batch)
            .finish()
    }
}

impl<K, Req, Resp> GroupCommit<K, Req, Resp>
where
    K: Eq + Hash + Clone + Send + 'static,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    /// Merges at most `max_batch` requests into one write.
    pub fn new(max_batch: usize) -> Arc<Self> {
        Arc::new(Self {
            queues: Mutex::new(HashMap::new()),
            max_batch: max_batch.max(1),
        })
    }

    /// Queues `req` under `key` and waits for its answer. If no write is under way for `key`,
    /// starts a drain task that calls `write` with batches of queued requests (in arrival order)
    /// until the queue is empty. `write` answers each request of its batch, in order.
    pub async fn submit<W, Fut>(self: &Arc<Self>, key: K, req: Req, write: W) -> Result<Resp, Error>
    where
        W: Fn(Vec<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<Resp, Error>>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let start_drain = {
            let mut queues = self.lock();
            match queues.get_mut(&key) {
                Some(queue) => {
                    queue.push((req, tx));
                    false
                }
                None => {
                    queues.insert(key.clone(), vec![(req, tx)]);
                    true
                }
            }
        };
        if start_drain {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.drain(key, write).await });
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::unavailable(
                "the write was abandoned",
                "group-commit drain task ended without answering",
            ))
        })
    }

    async fn drain<W, Fut>(self: Arc<Self>, key: K, write: W)
    where
        W: Fn(Vec<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<Resp, Error>>> + Send + 'static,
    {
        // Removes the key when the task ends for any reason, dropping (and so failing) any
        // request still queued, rather than leaving it waiting forever.
        struct Done<'a, K: Eq + Hash, Req, Resp>(&'a GroupCommit<K, Req, Resp>, Option<K>);
        impl<K: Eq + Hash, Req, Resp> Drop for Done<'_, K, Req, Resp> {
            fn drop(&mut self) {
                if let Some(key) = self.1.take() {
                    self.0.queues.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                }
            }
        }
        let mut done = Done(&self, Some(key.clone()));
        loop {
            let batch = {
                let mut queues = self.lock();
                let Some(queue) = queues.get_mut(&key) else { return };
                if queue.is_empty() {
                    queues.remove(&key);
                    done.1 = None;
                    return;
                }
                let n = queue.len().min(self.max_batch);
                queue.drain(..n).collect::<Vec<_>>()
            };
            let (reqs, senders): (Vec<Req>, Vec<_>) = batch.into_iter().unzip();
            let mut answers = write(reqs).await.into_iter();
            for sender in senders {
                let answer = answers.next().unwrap_or_else(|| {
                    Err(Error::unavailable(
                        "the write was abandoned",
                        "a batch answer is missing",
                    ))
                });
                // The caller may have gone away; its answer is then of no use to anyone.
                let _ = sender.send(answer);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Queue<Req, Resp>>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_are_merged_and_each_gets_its_own_answer() {
        // GIVEN a slow write that records the batch sizes it saw
        let gc: Arc<GroupCommit<&str, u32, u32>> = GroupCommit::new(64);
        let writes = Arc::new(AtomicUsize::new(0));
        // WHEN 50 requests arrive at once
        let tasks: Vec<_> = (0..50u32)
            .map(|i| {
                let (gc, writes) = (gc.clone(), writes.clone());
                tokio::spawn(async move {
                    gc.submit("k", i, move |batch: Vec<u32>| {
                        let writes = writes.clone();
                        async move {
                            writes.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                            batch.into_iter().map(|x| Ok(x * 2)).collect()
                        }
                    })
                    .await
                })
            })
            .collect();
        // THEN each request gets its own answer, with fewer writes than requests
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().unwrap(), i as u32 * 2);
        }
        assert!(writes.load(Ordering::SeqCst) < 50);
    }
}
