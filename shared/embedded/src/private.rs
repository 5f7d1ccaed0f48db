//! # The data directory is its owner's alone
//!
//! It holds every organization's chats and metadata, API key hashes, the local API key and the
//! token signing secret, so folders are made `0700` and files `0600`, whatever the umask, and
//! an older data directory has its modes narrowed when it is opened.

use std::{
    os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt},
    path::Path,
};

/// Makes `dir` (and missing parents) readable by its owner only, and narrows it if it exists.
pub(crate) fn dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Makes a SQLite database file private before SQLite opens it (its `-wal` and `-shm` files
/// take the database's mode), and narrows those that exist.
pub(crate) fn database(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)?;
    for suffix in ["", "-wal", "-shm"] {
        let file = path.with_file_name(format!(
            "{}{suffix}",
            path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
        ));
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// A new file only its owner can read, for writing.
pub(crate) fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Makes the data directory `dir` (with `folders` in it) and its database `database` private,
/// or says what to check; the database's path.
pub(crate) fn prepare(
    dir: &Path,
    folders: &[&str],
    database: &str,
) -> Result<std::path::PathBuf, spool_log::error::Error> {
    let db = dir.join(database);
    self::dir(dir)
        .and_then(|()| folders.iter().try_for_each(|f| self::dir(&dir.join(f))))
        .and_then(|()| self::database(&db))
        .map_err(|e| {
            spool_log::error::Error::unavailable(
                format!(
                    "cannot create the data directory {}; check SPOOL_DATA_DIR",
                    dir.display()
                ),
                e,
            )
        })?;
    Ok(db)
}
