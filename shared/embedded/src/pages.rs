//! # Sealed page files
//!
//! `pages/{sid}/{first:020}-{last:020}.page`, written create-only: the bytes go to a temporary
//! file that is synced, then hard-linked to the final name (which fails if that name exists,
//! so a page is never overwritten) and the directory is synced. A reader therefore sees either
//! no page or a whole one.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::Write,
    path::{Path, PathBuf},
    sync::Mutex,
};

use bytes::Bytes;
use spool_log::{
    error::Error,
    page::{Page, decode_page, page_name, parse_page_name},
    state::new_sid,
    stream::SeqRange,
};

const EXTENSION: &str = ".page";

/// The page directory, with a per-stream index of the pages seen so far.
#[derive(Debug)]
pub(crate) struct PageFiles {
    root: PathBuf,
    index: Mutex<HashMap<String, BTreeMap<u64, SeqRange>>>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::unavailable(format!("embedded store: {what} {}", path.display()), e)
}

impl PageFiles {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            index: Mutex::new(HashMap::new()),
        }
    }

    fn dir(&self, sid: &str) -> PathBuf {
        self.root.join(sid)
    }

    fn file(&self, sid: &str, range: SeqRange) -> PathBuf {
        self.dir(sid).join(format!("{}{EXTENSION}", page_name(range)))
    }

    /// Every page of stream `sid`, in order.
    pub(crate) fn list(&self, sid: &str) -> Result<Vec<SeqRange>, Error> {
        let dir = self.dir(sid);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("list", &dir, e)),
        };
        let mut pages = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io("list", &dir, e))?;
            let name = entry.file_name();
            if let Some(range) = name
                .to_str()
                .and_then(|n| n.strip_suffix(EXTENSION))
                .and_then(parse_page_name)
            {
                pages.push(range);
            }
        }
        pages.sort();
        Ok(pages)
    }

    fn refresh(&self, sid: &str) -> Result<(), Error> {
        let pages = self.list(sid)?;
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if index.len() > 10_000 {
            index.clear();
        }
        index.insert(sid.to_owned(), pages.into_iter().map(|r| (r.first, r)).collect());
        Ok(())
    }

    fn cached_containing(&self, sid: &str, seq: u64) -> Option<SeqRange> {
        let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let (_, range) = index.get(sid)?.range(..=seq).next_back()?;
        range.contains(seq).then_some(*range)
    }

    /// The page of stream `sid` that holds message `seq`.
    pub(crate) fn find_containing(&self, sid: &str, seq: u64) -> Result<Option<SeqRange>, Error> {
        if let Some(range) = self.cached_containing(sid, seq) {
            return Ok(Some(range));
        }
        self.refresh(sid)?;
        Ok(self.cached_containing(sid, seq))
    }

    /// A page of stream `sid` starting at message `first`.
    pub(crate) fn find_starting_at(&self, sid: &str, first: u64) -> Result<Option<SeqRange>, Error> {
        Ok(self.list(sid)?.into_iter().filter(|r| r.first == first).max())
    }

    /// Reads and verifies a page.
    pub(crate) fn read(&self, sid: &str, range: SeqRange) -> Result<Page, Error> {
        let file = self.file(sid, range);
        let data = fs::read(&file).map_err(|e| io("read", &file, e))?;
        decode_page(Bytes::from(data), range)
    }

    /// The raw bytes of every page of stream `sid`, by name (for tests and tools).
    pub(crate) fn raw(&self, sid: &str) -> Result<Vec<(String, Bytes)>, Error> {
        self.list(sid)?
            .into_iter()
            .map(|range| {
                let file = self.file(sid, range);
                let data = fs::read(&file).map_err(|e| io("read", &file, e))?;
                Ok((page_name(range), Bytes::from(data)))
            })
            .collect()
    }

    /// Writes a page create-only; an existing page of the same range is left as it is.
    pub(crate) fn write(&self, sid: &str, range: SeqRange, page: &[u8]) -> Result<(), Error> {
        let dir = self.dir(sid);
        let file = self.file(sid, range);
        if file.exists() {
            return Ok(());
        }
        crate::private::dir(&dir).map_err(|e| io("create", &dir, e))?;
        let tmp = dir.join(format!(".tmp-{}", new_sid()));
        let written = (|| {
            let mut f = crate::private::create_new(&tmp)?;
            f.write_all(page)?;
            f.sync_all()?;
            match fs::hard_link(&tmp, &file) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
            fs::File::open(&dir)?.sync_all()
        })();
        let _ = fs::remove_file(&tmp);
        written.map_err(|e| io("write", &file, e))
    }

    /// Removes every page of stream `sid`.
    pub(crate) fn remove_all(&self, sid: &str) -> Result<(), Error> {
        self.index.lock().unwrap_or_else(|e| e.into_inner()).remove(sid);
        let dir = self.dir(sid);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &dir, e)),
            _ => Ok(()),
        }
    }
}
