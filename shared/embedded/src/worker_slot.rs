//! # Which worker of a data directory this process is
//!
//! Several `spool serve` processes may share a data directory, each running a worker that
//! leases turns from the embedded queue. A worker names its leases after a *slot*: the first
//! of `{data_dir}/workers/{n}.lock` it can lock exclusively. The operating system releases the
//! lock when the process dies however it dies, so a worker that takes a slot knows that
//! whoever held it before is gone, and that every lease still held under its name was
//! interrupted: it hands them back at once ([`spool_chat::turns::TurnQueue::recover`]) instead of
//! waiting for them to run out.

use std::{fs::File, path::Path};

use spool_log::error::Error;

/// A worker's slot, held until it is dropped (or the process ends).
#[derive(Debug)]
pub struct WorkerSlot {
    _lock: File,
    name: String,
}

/// The most workers one data directory has at once.
const MAX_SLOTS: usize = 1024;

impl WorkerSlot {
    /// Takes the first free slot of the data directory `dir`.
    pub fn acquire(dir: &Path) -> Result<Self, Error> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let folder = dir.join("workers");
        let fail =
            |e: std::io::Error| Error::unavailable(format!("cannot take a worker slot in {}", folder.display()), e);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&folder)
            .map_err(fail)?;
        for n in 0..MAX_SLOTS {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(folder.join(format!("{n}.lock")))
                .map_err(fail)?;
            match file.try_lock() {
                Ok(()) => {
                    return Ok(Self {
                        _lock: file,
                        name: format!("worker-{n}"),
                    });
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(fail(e)),
            }
        }
        Err(Error::unavailable(
            format!("all {MAX_SLOTS} worker slots of {} are taken", folder.display()),
            "stop some spool processes sharing this data directory",
        ))
    }

    /// The slot's name, which the worker's leases carry.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_taken_once_and_free_again_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = WorkerSlot::acquire(dir.path()).unwrap();
        let second = WorkerSlot::acquire(dir.path()).unwrap();
        assert_eq!((first.name(), second.name()), ("worker-0", "worker-1"));
        drop(first);
        assert_eq!(WorkerSlot::acquire(dir.path()).unwrap().name(), "worker-0");
    }
}
