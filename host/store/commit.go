package store

import (
	"context"
	"errors"
	"fmt"
)

// Committer is a [Bucket] that writes a commit (new objects, then the one
// object that references them) with fewer flushes than a Put each. The
// directory store is one: the new objects and the reference share one
// flush of their data and one of the name that makes them reachable,
// and concurrent commits share those flushes too (flush.go).
type Committer interface {
	// PutCommit creates each object of created (none may exist), then
	// writes body as key's object if cond holds, and returns its ETag.
	// When it returns without an error all of them are durable, and key
	// is never durable before the objects it references. On an error the
	// objects created may be left behind, unreferenced, and incomplete
	// (a Get of one may fail as corrupt): no caller reads them, since key
	// does not name them. Errors as for Put; ErrPrecondition also when
	// one of created exists.
	PutCommit(ctx context.Context, created []Object, key string, body []byte, cond Cond) (etag string, err error)
}

// Object is an object to create in a commit.
type Object struct {
	Key  string
	Body []byte
}

// PutCommit writes a commit to b: with b's own PutCommit if b is a
// [Committer], else as a Put (If-None-Match) of each object of created and
// then a Put of key: one request each on S3, which has no cheaper way.
func PutCommit(ctx context.Context, b Bucket, created []Object, key string, body []byte, cond Cond) (string, error) {
	if c, ok := b.(Committer); ok {
		return c.PutCommit(ctx, created, key, body, cond)
	}
	return putEach(ctx, b, created, key, body, cond)
}

// putEach is a commit as one Put of each object.
func putEach(ctx context.Context, b Bucket, created []Object, key string, body []byte, cond Cond) (string, error) {
	for _, o := range created {
		if _, err := b.Put(ctx, o.Key, o.Body, IfNoneMatch()); err != nil {
			if errors.Is(err, ErrUnknownOutcome) {
				// It may have landed, but key was not written: the
				// commit certainly did not land.
				return "", fmt.Errorf("store: commit of %q not written: creating %q: %v", key, o.Key, err)
			}
			return "", err
		}
	}
	return b.Put(ctx, key, body, cond)
}
