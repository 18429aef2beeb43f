// Package store is wasmkeep's bucket: the small key/value interface under
// which snapshots, classes and cluster ownership records are kept.
//
// A [Bucket] has four operations — Get, Put, Delete, List — and one
// concurrency primitive, the conditional write. Every object carries an ETag
// that names its version; a Put may require the current ETag (If-Match, a
// compare-and-swap) or the absence of the object (If-None-Match, a create).
// That is all the coordination the cluster layer needs, and it is exactly
// what S3 offers, so the same code runs on one node over a local directory
// and on many nodes over a shared S3 bucket.
//
// # Implementations
//
//   - [Mem]: in memory, for tests and simulations.
//   - [Dir]: a local directory, the default backend of a single node, safe for
//     several processes on one machine.
//   - [Faulty]: wraps any Bucket and injects failures chosen by a [FaultFunc]
//     (a lost request, or an applied write whose answer is lost).
//   - The S3 backend lives in its own package, host/store/s3, so that only
//     it imports the AWS SDK. It passes the conformance suite in package
//     storetest against versitygw, as every backend must pass it.
//
// # Error contract
//
// Errors are classified with [errors.Is] against the sentinels of this
// package; the error itself names the operation and key. In short:
//
//   - [ErrNotFound]: Get of a missing key; Delete with an ifMatch of a missing key.
//   - [ErrPrecondition]: a condition lost. The object was not changed. An
//     If-Match against a missing key is also a lost condition: errors.Is(err,
//     ErrPrecondition) is true for it whatever the backend (S3 answers 404,
//     Ceph 412), and errors.Is(err, ErrNotFound) may be true as well.
//   - [ErrConflict]: a concurrent write got in the way (S3's 409). Nothing was
//     changed; re-read and retry.
//   - [ErrUnknownOutcome]: the write may or may not have landed (a timeout, a
//     lost answer, a failed fsync after the rename). Resolve it by re-reading;
//     never assume either way.
//   - [ErrInvalidKey], [ErrInvalidCond]: the call was refused before any I/O.
//
// The rule that makes those answers usable: a Put or Delete that returns an
// error for which errors.Is(err, ErrUnknownOutcome) is false did not change
// the bucket. A backend that cannot be sure (a timeout after the request was
// sent, a context cancelled mid-flight, a 5xx, a conditional request that its
// transport retried) must wrap ErrUnknownOutcome around whatever else it
// reports.
//
// After ErrUnknownOutcome, re-read the object and compare its contents with
// what was written; never assume either way. Retrying the same conditional
// write blindly can lose to itself: the first attempt landed, so the second
// answers ErrPrecondition.
//
// ETags are opaque strings, compared for equality only. Backends differ in
// one respect callers must respect: S3 derives a single-part ETag from the
// body's MD5, so writing identical bytes twice gives the same ETag (an ABA
// hole). [Mem] and [Dir] give every successful Put a new ETag, but code that
// runs on S3 must make every body it writes unique (records carry their
// generation and a fresh nonce).
//
// # Keys
//
// Keys are '/'-separated segments of [A-Za-z0-9._~%-], with no empty, "." or
// ".." segments, no leading or trailing '/', at most [MaxKeyLen] bytes
// ([ValidKey]). User-chosen names enter keys through [EscapeSegment], a
// reversible percent-escape. The restriction keeps keys portable (every S3
// implementation, every filesystem) and lets Dir map them onto directories
// without any name the key namespace could reach.
//
// # Why Dir is built the way it is
//
// Dir must give the S3 guarantees — an object is either the old or the new
// version, never a mix; a conditional write is atomic with its check — on a
// plain POSIX filesystem shared by several processes, across crashes.
//
//   - Body and ETag change together because they live in one file: a small
//     header (magic, version counter, random nonce, length, CRC-32C) followed by
//     the body. A sidecar file would need two renames, and a crash between them
//     would pair a body with the wrong ETag.
//   - Replacement is atomic: the new file is written beside the target under a
//     temporary name that no key can produce, fsynced, renamed over the target,
//     and the directory is fsynced. rename(2) swaps the directory entry in one
//     step, so a reader opens either the old inode or the new one, and an open
//     descriptor keeps reading the inode it opened even if it is replaced. Get
//     therefore takes no lock. The file fsync makes the contents durable before
//     the name points at them; the directory fsync makes the name durable. A
//     failure of that last fsync is reported as ErrUnknownOutcome: the new
//     version is visible but might not survive a power loss.
//   - The read-check-write of a conditional Put or Delete runs under a lock
//     that holds across processes: flock(2) on a lock file. Lock files cannot
//     be the object files (rename replaces the inode a lock is held on), and a
//     lock file per key could never be removed safely (a waiter may hold a
//     descriptor to the unlinked inode), so keys are hashed onto a fixed set
//     of lock files kept under the reserved directory "@store". A key's lock is
//     always the same file; unrelated keys that share one merely take turns.
//   - ETags are "<version>-<nonce>": the version counts the object's writes
//     since it was created, and the per-write random nonce keeps an ETag from
//     repeating after a Delete and re-create, or after a power loss rolled back
//     a write whose ETag was already handed out.
//   - A CRC over header and body turns silent corruption into an error instead
//     of a wrong answer.
//   - The layout mirrors keys: each segment is a directory, and the object of
//     key "a/b" is the file "a/b@". Names that contain '@' or '+' are never
//     produced by a key, so temporary files ("b@tmp-…"), the object suffix and
//     "@store" cannot collide with keys. Segments longer than a safe file name
//     are split into chained directories ending in '+'. Directories emptied by
//     a Delete are removed; a Put that races with that removal recreates them.
//   - A Put that fails removes its temporary file. A process killed mid-Put
//     leaves one behind; OpenDir removes temporary files older than a minute.
//
// Dir needs a case-sensitive filesystem with flock(2) and atomic rename
// (ext4, xfs, btrfs, zfs, tmpfs; not NFS). OpenDir refuses a case-insensitive
// one.
//
// # Holding a directory
//
// A Dir may be shared by processes; a node's data directory may not, since
// each node keeps its resident rooms in memory and would overwrite the
// other's. [HoldDir] gives one process the directory: a flock(2) on its
// [HoldFile], which names the holder so that a refused process can say
// who it is ([InUseError]).
package store
