package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Sentinel errors. Backends wrap them with the operation and key; test with
// [errors.Is]. See the package documentation for the full contract.
var (
	// ErrNotFound means the key has no object: Get of a missing key, or
	// Delete with a non-empty ifMatch of a missing key.
	ErrNotFound = errors.New("store: not found")

	// ErrPrecondition means a conditional write lost: If-None-Match found an
	// object, or If-Match found another ETag or no object at all. The bucket
	// was not changed.
	ErrPrecondition = errors.New("store: precondition failed")

	// ErrConflict means the backend refused the write because a concurrent
	// write to the same key was in progress (S3's 409
	// ConditionalRequestConflict). The bucket was not changed; re-read the
	// object and retry.
	ErrConflict = errors.New("store: conflicting concurrent write")

	// ErrUnknownOutcome means the write may or may not have been applied
	// (and, if applied, may or may not be durable). Re-read to find out.
	ErrUnknownOutcome = errors.New("store: outcome unknown")

	// ErrInvalidKey means a key or List prefix breaks the key rules of
	// [ValidKey]. Nothing was done.
	ErrInvalidKey = errors.New("store: invalid key")

	// ErrInvalidCond means a [Cond] sets both IfMatch and IfNoneMatch.
	// Nothing was done.
	ErrInvalidCond = errors.New("store: invalid condition")
)

// Cond is the precondition of a Put. The zero Cond writes unconditionally.
//
// ETags are compared as opaque strings; "*" has no special meaning.
type Cond struct {
	// IfMatch, when not empty, requires the object to exist with this ETag.
	IfMatch string
	// IfNoneMatch requires the object not to exist (create only).
	IfNoneMatch bool
}

// IfMatch returns the Cond that requires the current ETag to be etag.
func IfMatch(etag string) Cond { return Cond{IfMatch: etag} }

// IfNoneMatch returns the Cond that requires the key to have no object.
func IfNoneMatch() Cond { return Cond{IfNoneMatch: true} }

// Validate returns an error wrapping [ErrInvalidCond] if c sets both fields.
func (c Cond) Validate() error {
	if c.IfMatch != "" && c.IfNoneMatch {
		return fmt.Errorf("%w: both If-Match and If-None-Match set", ErrInvalidCond)
	}
	return nil
}

// String renders c for error messages.
func (c Cond) String() string {
	switch {
	case c.IfMatch != "" && c.IfNoneMatch:
		return fmt.Sprintf("If-Match %q and If-None-Match", c.IfMatch)
	case c.IfMatch != "":
		return fmt.Sprintf("If-Match %q", c.IfMatch)
	case c.IfNoneMatch:
		return "If-None-Match"
	}
	return "unconditional"
}

// Bucket is a flat namespace of objects, each a byte body with an ETag.
//
// Every method is safe for concurrent use, and operations on one key are
// linearizable: a Get that starts after a Put returned sees that Put or a
// later write. Bodies are never shared: Put does not retain body after it
// returns, and the body Get returns belongs to the caller.
//
// Every method checks its key (or prefix) first and returns an error
// wrapping [ErrInvalidKey] for a bad one. A context that is already done
// makes a method return its error without doing anything.
//
// Put and Delete obey the rule of the package documentation: an error for
// which errors.Is(err, ErrUnknownOutcome) is false means the bucket was not
// changed.
type Bucket interface {
	// Get returns the object's body and ETag.
	//
	// A missing key gives an error wrapping ErrNotFound. The body of an
	// object written empty has length zero (it may be nil).
	Get(ctx context.Context, key string) (body []byte, etag string, err error)

	// Put writes body as the object of key if cond holds, and returns the
	// new ETag.
	//
	// Errors: ErrInvalidCond if cond sets both fields; ErrPrecondition if
	// cond does not hold (an If-Match on a missing key also satisfies
	// errors.Is(err, ErrNotFound) where the backend can tell); ErrConflict
	// if a concurrent write got in the way; ErrUnknownOutcome if the write
	// may have landed.
	Put(ctx context.Context, key string, body []byte, cond Cond) (etag string, err error)

	// Delete removes the object of key.
	//
	// With ifMatch == "" it is unconditional and deleting a missing key
	// returns nil. With ifMatch != "" the object must exist with that ETag:
	// a missing key gives an error for which both errors.Is(err,
	// ErrNotFound) and errors.Is(err, ErrPrecondition) are true, another
	// ETag gives ErrPrecondition. ErrConflict and ErrUnknownOutcome as for
	// Put.
	Delete(ctx context.Context, key string, ifMatch string) error

	// List returns every key that starts with prefix, in ascending byte
	// order. The prefix need not end at a segment boundary ("rooms/ch"
	// matches "rooms/chat/x" and "rooms/ch"); "" lists the whole bucket. A
	// prefix that no valid key can start with (see [ValidPrefix]) gives
	// ErrInvalidKey.
	//
	// List is not a snapshot: keys written or deleted while it runs may or
	// may not appear.
	List(ctx context.Context, prefix string) ([]string, error)

	// ListPage returns, in ascending byte order, up to limit entries (at
	// most MaxListPage; limit <= 0 means MaxListPage) whose keys start with
	// prefix and sort after after ("" starts at the beginning), each with
	// its object's ETag, and whether more such keys follow. The next page
	// starts after the last key returned. Bounded sweeps and membership
	// read a bucket this way, a page per step, where List would read it
	// whole. Prefix and errors are as for List; after needs no checking
	// (any string orders keys).
	ListPage(ctx context.Context, prefix, after string, limit int) (page []Entry, more bool, err error)
}

// Entry is a key with its object's ETag, as ListPage returns them.
type Entry struct {
	Key  string
	ETag string
}

// MaxListPage is the most entries one ListPage returns: S3's page size.
const MaxListPage = 1000

// pageLimit is limit as ListPage takes it.
func pageLimit(limit int) int {
	if limit <= 0 || limit > MaxListPage {
		return MaxListPage
	}
	return limit
}

// pageOf cuts a page out of sorted keys: those after after, up to limit.
func pageOf(sorted []string, after string, limit int) (page []string, more bool) {
	i, _ := slices.BinarySearch(sorted, after)
	for i < len(sorted) && sorted[i] <= after {
		i++
	}
	sorted = sorted[i:]
	limit = pageLimit(limit)
	if len(sorted) > limit {
		return sorted[:limit], true
	}
	return sorted, false
}

// opError wraps err (usually one of the sentinels) with the operation and
// key it belongs to.
func opError(op, key string, err error) error {
	return fmt.Errorf("%s %q: %w", op, key, err)
}

// errMissingIfMatch is the answer to an If-Match against a missing key: a
// lost precondition that also reports the missing object.
var errMissingIfMatch = fmt.Errorf("%w (%w)", ErrPrecondition, ErrNotFound)

// checkCond decides cond against the current state of a key: exists and, if
// so, its ETag. It returns nil, ErrPrecondition or errMissingIfMatch.
func checkCond(cond Cond, exists bool, etag string) error {
	switch {
	case cond.IfNoneMatch && exists:
		return ErrPrecondition
	case cond.IfMatch != "" && !exists:
		return errMissingIfMatch
	case cond.IfMatch != "" && cond.IfMatch != etag:
		return ErrPrecondition
	}
	return nil
}
