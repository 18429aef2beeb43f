package rooms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// A room's manifest is kept in one of two layouts, which the bucket's
// format object names (store.Format):
//
//	overwrite  rooms/<class>/<name>/manifest, replaced under If-Match: one
//	           key a room, written at every commit.
//	numbered   rooms/<class>/<name>/manifests/<n>, a new object a commit,
//	           created under If-None-Match; the room's manifest is the one
//	           of the highest n. For stores that take at most one write a
//	           second to one key (Cloudflare R2, Google Cloud Storage).
//
// Either way a commit names the version it follows (an ETag, or n) and
// fails if another writer wrote since, which is the owner fence: a stale
// hold's commit is refused.
//
// In the numbered layout a manifest no longer current is deleted, but not
// all at once: a hold's next write is the number after the last it knows,
// so the number after what a hold that may still write last knew must
// stay, or that hold's commit would land unseen. Each hold writes its
// numbers in a row from the one after what it read at its wake, so what
// such a hold would write is the first number another hold wrote after
// it. A hold therefore deletes the manifests it superseded itself, but
// never its first; the orphan sweep deletes the others once every hold
// older than their writer is fenced (SweepOrphans).
type manifestLayout interface {
	// latest returns the room's current manifest and its version, or an
	// error wrapping store.ErrNotFound if it has none.
	latest(ctx context.Context, b store.Bucket, key Key) (body []byte, version string, err error)
	// commit writes created, then body as the room's manifest after
	// version ("" for a room with none), and returns the new version.
	// first says it is the first commit of its hold.
	commit(ctx context.Context, b store.Bucket, key Key, version string, first bool, created []store.Object, body []byte) (string, error)
	// superseded returns the keys a landed commit after prev lets go,
	// first being the first version its hold wrote.
	superseded(key Key, prev, first string) []string
	// remove deletes every manifest of the room, the current one last,
	// so that no reader ever finds an older one current.
	remove(ctx context.Context, b store.Bucket, key Key) error
	// manifest reports whether rest (a room's key less its prefix) is
	// one of its manifests, and its number in the numbered layout.
	manifest(rest string) (n uint64, ok bool)
}

// layoutOf returns the layout a bucket's format names.
func layoutOf(numbered bool) manifestLayout {
	if numbered {
		return numberedManifests{}
	}
	return overwrittenManifest{}
}

type overwrittenManifest struct{}

func (overwrittenManifest) latest(ctx context.Context, b store.Bucket, key Key) ([]byte, string, error) {
	return b.Get(ctx, key.manifestKey())
}

func (overwrittenManifest) commit(ctx context.Context, b store.Bucket, key Key, version string, _ bool, created []store.Object, body []byte) (string, error) {
	cond := store.Cond{IfMatch: version}
	if version == "" {
		cond = store.IfNoneMatch()
	}
	return store.PutCommit(ctx, b, created, key.manifestKey(), body, cond)
}

func (overwrittenManifest) superseded(Key, string, string) []string { return nil }

func (overwrittenManifest) remove(ctx context.Context, b store.Bucket, key Key) error {
	return b.Delete(ctx, key.manifestKey(), "")
}

func (overwrittenManifest) manifest(rest string) (uint64, bool) { return 0, rest == "manifest" }

type numberedManifests struct{}

// numberedDir is the directory of a room's numbered manifests.
const numberedDir = "manifests/"

func (numberedManifests) key(key Key, n uint64) string {
	return key.prefix() + numberedDir + fmt.Sprintf("%020d", n)
}

func (l numberedManifests) manifest(rest string) (uint64, bool) {
	digits, ok := strings.CutPrefix(rest, numberedDir)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil && n > 0
}

// numbers lists the numbers of the room's manifests, in order.
func (l numberedManifests) numbers(ctx context.Context, b store.Bucket, key Key) ([]uint64, error) {
	keys, err := b.List(ctx, key.prefix()+numberedDir)
	if err != nil {
		return nil, err
	}
	var ns []uint64
	for _, k := range keys {
		if _, rest, ok := parseRoomKey(k); ok {
			if n, ok := l.manifest(rest); ok {
				ns = append(ns, n)
			}
		}
	}
	slices.Sort(ns)
	return ns, nil
}

func (l numberedManifests) latest(ctx context.Context, b store.Bucket, key Key) ([]byte, string, error) {
	// The highest number can be deleted between the listing and the read
	// only by a delete of the room: read again, a few times.
	for range 3 {
		ns, err := l.numbers(ctx, b, key)
		if err != nil {
			return nil, "", err
		}
		if len(ns) == 0 {
			return nil, "", fmt.Errorf("%w: no manifest of %s", store.ErrNotFound, key)
		}
		n := ns[len(ns)-1]
		body, _, err := b.Get(ctx, l.key(key, n))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return body, strconv.FormatUint(n, 10), nil
	}
	return nil, "", fmt.Errorf("%w: the manifests of %s went while being read", store.ErrNotFound, key)
}

func (l numberedManifests) commit(ctx context.Context, b store.Bucket, key Key, version string, first bool, created []store.Object, body []byte) (string, error) {
	var n uint64
	if version != "" {
		var err error
		if n, err = strconv.ParseUint(version, 10, 64); err != nil {
			return "", fmt.Errorf("rooms: manifest version %q: %w", version, err)
		}
	}
	if _, err := store.PutCommit(ctx, b, created, l.key(key, n+1), body, store.IfNoneMatch()); err != nil {
		return "", err
	}
	if first {
		// The number after what this hold read may have been written by
		// an older, stale hold that has written past it since and let it
		// go (a hold deletes the manifests it superseded, its first
		// excepted): then this one landed where no reader looks. Only a
		// hold's first commit can: its later ones follow its own.
		ns, err := l.numbers(ctx, b, key)
		if err != nil {
			return "", fmt.Errorf("%w: checking the room's manifests after its first commit: %v", store.ErrUnknownOutcome, err)
		}
		if len(ns) > 0 && ns[len(ns)-1] > n+1 {
			_ = b.Delete(ctx, l.key(key, n+1), "")
			return "", fmt.Errorf("%w: manifest %d of %s is newer than this hold's first", store.ErrPrecondition, ns[len(ns)-1], key)
		}
	}
	return strconv.FormatUint(n+1, 10), nil
}

func (l numberedManifests) superseded(key Key, prev, first string) []string {
	if prev == "" || prev == first {
		return nil
	}
	p, err1 := strconv.ParseUint(prev, 10, 64)
	f, err2 := strconv.ParseUint(first, 10, 64)
	if err1 != nil || err2 != nil || p < f {
		return nil // another hold's: the sweep decides
	}
	return []string{l.key(key, p)}
}

func (l numberedManifests) remove(ctx context.Context, b store.Bucket, key Key) error {
	ns, err := l.numbers(ctx, b, key)
	if err != nil {
		return err
	}
	for _, n := range ns {
		if err := b.Delete(ctx, l.key(key, n), ""); err != nil {
			return err
		}
	}
	return nil
}

// storedRooms returns the rooms that have a manifest among keys (keys of
// the bucket under rooms/).
func (m *Manager) storedRooms(keys []string) map[Key]bool {
	stored := map[Key]bool{}
	for _, s := range keys {
		if k, rest, ok := parseRoomKey(s); ok {
			if _, ok := m.layout.manifest(rest); ok {
				stored[k] = true
			}
		}
	}
	return stored
}

// sweepManifests deletes the numbered manifests of a room that are not
// its latest and that no hold that may still write could follow: those
// written by a hold older than bound (the room's fence), whose older holds
// are older still. It returns how many it deleted, up to limit.
func (m *Manager) sweepManifests(ctx context.Context, key Key, ns []uint64, bound uint64, limit int) (int, error) {
	l, ok := m.layout.(numberedManifests)
	if !ok || len(ns) < 2 {
		return 0, nil
	}
	slices.Sort(ns)
	deleted := 0
	for _, n := range ns[:len(ns)-1] {
		if deleted >= limit {
			break
		}
		body, _, err := m.bucket.Get(ctx, l.key(key, n))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return deleted, err
		}
		man, err := snapshot.DecodeManifest(body)
		if err != nil || man.Generation >= bound {
			continue // unreadable proves nothing; a live hold's first stays
		}
		if err := m.bucket.Delete(ctx, l.key(key, n), ""); err != nil && !errors.Is(err, store.ErrNotFound) {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}
