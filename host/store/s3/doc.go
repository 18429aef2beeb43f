// Package s3 is the [store.Bucket] of an S3 bucket (AWS S3, R2, versitygw,
// MinIO and other servers that speak the protocol), through aws-sdk-go-v2.
// It is the only package of wasmkeep that imports the AWS SDK.
//
// A [Bucket] is made by [New] from a [Config]; [ParseURL] reads the
// "s3://BUCKET/PREFIX" form of a store's address. It passes the
// conformance suite of package storetest against versitygw.
//
// # Conditional writes
//
// Put sends If-None-Match: * to create and If-Match: <etag> to replace a
// version; Delete with an ifMatch sends If-Match. The server's answers map
// onto the contract of package store: 412 PreconditionFailed is
// ErrPrecondition, a 404 NoSuchKey to an If-Match is ErrPrecondition and
// ErrNotFound (AWS answers 404 there, Ceph 412), 409
// ConditionalRequestConflict is ErrConflict, and a 5xx, a timeout, a reset
// connection or a context cancelled in flight is ErrUnknownOutcome.
//
// The SDK's retries are off for every write. Its standard retryer resends
// a request after a timeout, a 5xx or a broken connection; a conditional
// Put that landed and lost its answer would be sent again and answer 412
// although it won, and the caller would believe it lost. Without retries
// the caller sees ErrUnknownOutcome and resolves it by reading. Reads
// (Get, List, and the HEAD before a conditional Delete) keep the SDK's
// retries: repeating them changes nothing.
//
// # ETags
//
// ETags are passed through as the opaque strings S3 gives, quotes
// included ("\"9b2cf535f27731c974343645a3985328\""); one a server sends
// without quotes is quoted, so that every ETag of a Bucket has one form.
// An If-Match that is not of that form cannot equal any of them, so it
// loses at once, without a request (an If-Match of "*" would mean "any
// version" to S3, and means nothing to the store). A single-part ETag is
// the MD5 of the body: writing identical bytes twice gives the same ETag,
// which is why callers that rely on ETags make every body unique (package
// store explains it).
//
// A Get pairs a body with its own ETag, which versitygw v1.8.0 does not
// always do: it reads a replaced object's ETag before it opens the file,
// so a GET racing with a PUT may answer the new body with the old ETag (a
// few GETs in a thousand under constant overwrites; the conformance suite
// catches it). Where an ETag has the form of an MD5 and should be the
// body's (a body up to 16 MiB, not encrypted with KMS or a customer's
// key), a Get that finds otherwise sends its GET again, three times at
// most. A server whose ETags are simply not MD5s shows it by answering the
// same ETag and body each time; the Bucket then stops checking.
//
// # Conditional deletes
//
// Before a conditional DELETE the Bucket sends a HEAD with the same
// If-Match: versitygw answers 204 to a conditional DELETE of a missing
// key, where the contract wants ErrNotFound, and MinIO ignores the
// condition altogether. The HEAD turns a missing key or a stale ETag into
// the contract's answer without deleting anything; the DELETE that follows
// still carries If-Match, so a version replaced between the two is not
// deleted on a server that honours it. Two deletes of one version racing
// may both succeed. Nothing in wasmkeep may depend on a conditional
// DELETE for safety (releases are conditional PUTs).
//
// # Keys
//
// Key k of the store is the object PREFIX/k ([Config.Prefix]); List
// strips the prefix and skips objects whose names are not keys of package
// store (written by something else). S3 limits object names to 1024 bytes,
// the prefix included. Servers that keep objects as files of a filesystem
// (versitygw's posix backend, MinIO) also refuse a key that is both an
// object and a directory of others ("a" and "a/b"), and segments longer
// than a file name (255 bytes); wasmkeep's own keys do neither. On
// versitygw a DELETE removes the directories it empties, and a PUT under
// one of them at that moment fails with 409 ExistingObjectIsDirectory
// although nothing is wrong with it; it did not land, so Put sends it
// again (three attempts at most).
//
// # Bodies
//
// Get reads a body into memory, and refuses one longer than
// [Config.MaxObjectSize] ([DefaultMaxObjectSize], 4 GiB, above the
// largest snapshot segment or module wasmkeep writes) before reading it;
// Put refuses one before sending it. Both return an error wrapping
// [ErrTooLarge].
//
// # Observing requests
//
// [Config.Observe], if set, is called once per request sent to S3 with the
// S3 operation, its [Outcome] and its duration, so that a caller can count
// and time requests (wasmkeep's metrics) without this package choosing a
// metrics library.
package s3
