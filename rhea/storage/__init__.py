"""Files that survive a kill: atomic writes, directory swaps, per-path locks and digests (`atomic`)."""
from rhea.storage.atomic import (
    OutputNotEmptyError,
    SaveInProgressError,
    StorageError,
    atomic_write_bytes,
    atomic_write_text,
    check_writable_directory,
    file_digest,
    fsync_directory,
    locked,
    not_utf8,
    output_file,
    replace_directory,
    read_text_file,
    readable_directory,
    sha256_bytes,
)

__all__ = ["OutputNotEmptyError", "SaveInProgressError", "StorageError", "atomic_write_bytes", "atomic_write_text", "check_writable_directory", "file_digest", "fsync_directory",
           "locked", "not_utf8", "output_file", "read_text_file", "readable_directory", "replace_directory", "sha256_bytes"]
