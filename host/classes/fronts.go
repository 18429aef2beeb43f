package classes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Fronts. A class uploaded as a front serves HTTP under path prefixes, on
// every node, from a small pool of instances per node (host/fronts); it
// has no rooms. Which prefixes each front holds is kept in one object of
// the bucket:
//
//	fronts   JSON: {"prefixes": {"/app": "shop", "/api": "shop"}}
//
// rather than in each class's record, for two reasons. A claim must be
// checked against every other front's prefixes and made in one step:
// kept in the records, an upload would read the others' records and then
// write its own, and two uploads through two nodes at once could both
// pass and claim overlapping prefixes; kept in one object, the check and
// the claim are one conditional write, which the second upload's write
// finds changed and checks again. And every node needs every front's
// prefixes for each request outside its own paths: one object is one read
// per RecordTTL, where the records would be a listing and a read of every
// class. The record stays what it was, a class's versions and options.
//
// An upload with prefixes claims them before it writes the class's record;
// one that fails between the two leaves its prefixes claimed (the class
// serves them with its version from before the upload, and a new class
// only once its record is written): upload it again, or remove it.

// NodePaths are the paths a node serves itself (host/server's routes): a
// front may claim none of them, nor a prefix under one. "/" itself is the
// landing page, and would hold every path.
var NodePaths = []string{"/actor", "/admin", "/cluster", "/debug", "/healthz", "/metrics", "/readyz"}

// Bounds of a front's prefixes.
const (
	// MaxFrontPrefixes is how many prefixes one front may hold.
	MaxFrontPrefixes = 16
	// MaxPrefixLen bounds a prefix, in bytes.
	MaxPrefixLen = 256
)

// ErrPrefixHeld: a prefix an upload claims is the node's own, or overlaps
// one another front holds.
var ErrPrefixHeld = errors.New("classes: path prefix held")

// frontsKey is the bucket object of the fronts' prefixes.
const frontsKey = "fronts"

// CleanPrefix checks a front's path prefix and returns it as it is stored
// and matched: it starts with "/", and its segments are non-empty, neither
// "." nor "..", and made of letters, digits and -._~!$&'()*+,;=:@ (no
// query, no fragment, no percent-escape: a prefix is matched against the
// request's decoded path). A trailing "/" is dropped: "/app/" is "/app".
func CleanPrefix(p string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: front prefix %q: %s", ErrBadOption, p, why)
	}
	if len(p) > MaxPrefixLen {
		return bad(fmt.Sprintf("longer than %d bytes", MaxPrefixLen))
	}
	if !strings.HasPrefix(p, "/") {
		return bad(`it must start with "/"`)
	}
	clean := p
	if len(clean) > 1 {
		clean = strings.TrimSuffix(clean, "/")
	}
	if clean == "/" {
		return clean, nil // refused as the landing page by checkClaim, with the holder named
	}
	for seg := range strings.SplitSeq(clean[1:], "/") {
		switch {
		case seg == "":
			return bad(`an empty segment ("//")`)
		case seg == "." || seg == "..":
			return bad(`a "." or ".." segment`)
		}
		for _, c := range []byte(seg) {
			if !prefixByte(c) {
				return bad(fmt.Sprintf("the character %q (use letters, digits and -._~!$&'()*+,;=:@)", c))
			}
		}
	}
	return clean, nil
}

func prefixByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0
}

// UnderPrefix reports whether path is prefix or below it, a whole segment
// at a time: "/app" holds "/app", "/app/" and "/app/x", not "/apple".
func UnderPrefix(path, prefix string) bool {
	return path == prefix || (strings.HasPrefix(path, prefix) && path[len(prefix)] == '/')
}

// overlap reports whether one of two prefixes holds the other.
func overlap(a, b string) bool { return UnderPrefix(a, b) || UnderPrefix(b, a) }

// checkPrefixes cleans the prefixes of an upload: each valid, at most
// MaxFrontPrefixes, none a node's path, none overlapping another (a
// prefix given twice counts once).
func checkPrefixes(ps []string) ([]string, error) {
	var out []string
	for _, p := range ps {
		c, err := CleanPrefix(p)
		if err != nil {
			return nil, err
		}
		if c == "/" {
			return nil, fmt.Errorf(`%w: "/" is the node's landing page, and would hold every path`, ErrPrefixHeld)
		}
		for _, n := range NodePaths {
			if UnderPrefix(c, n) {
				return nil, fmt.Errorf("%w: %s is the node's own (it serves %s itself)", ErrPrefixHeld, c, n)
			}
		}
		if slices.Contains(out, c) {
			continue
		}
		for _, o := range out {
			if overlap(c, o) {
				return nil, fmt.Errorf("%w: front prefixes %s and %s overlap: give the shorter one alone", ErrBadOption, o, c)
			}
		}
		out = append(out, c)
	}
	if len(out) > MaxFrontPrefixes {
		return nil, fmt.Errorf("%w: %d front prefixes, at most %d", ErrBadOption, len(out), MaxFrontPrefixes)
	}
	slices.Sort(out)
	return out, nil
}

// frontIndex is the body of the fronts object.
type frontIndex struct {
	Prefixes map[string]string `json:"prefixes"`
}

// FrontTable is every front's prefixes, as this node read them last. It
// is never changed once made: a read makes a new one.
type FrontTable struct {
	byPrefix map[string]string   // prefix → front
	byClass  map[string][]string // front → its prefixes, sorted
	read     int64               // when, on the registry's clock
}

func newFrontTable(idx frontIndex, read int64) *FrontTable {
	t := &FrontTable{byPrefix: idx.Prefixes, byClass: map[string][]string{}, read: read}
	if t.byPrefix == nil {
		t.byPrefix = map[string]string{}
	}
	for p, c := range t.byPrefix {
		t.byClass[c] = append(t.byClass[c], p)
	}
	for _, ps := range t.byClass {
		slices.Sort(ps)
	}
	return t
}

// Match returns the front whose prefix holds path (a request's decoded
// path). Prefixes never overlap, so at most one does; it is found by
// looking path and each of its parents up.
func (t *FrontTable) Match(path string) (front string, ok bool) {
	for i := len(path); i > 0; i = strings.LastIndexByte(path[:i], '/') {
		if c, ok := t.byPrefix[path[:i]]; ok {
			return c, true
		}
	}
	return "", false
}

// Prefixes are the prefixes front holds, sorted (none: it is no front).
func (t *FrontTable) Prefixes(front string) []string { return t.byClass[front] }

// Fronts are the classes that hold prefixes, sorted.
func (t *FrontTable) Fronts() []string { return slices.Sorted(maps.Keys(t.byClass)) }

// Fronts returns every front's prefixes. Like Get, it reads them from the
// bucket at most once per RecordTTL, and goes on using what it read last
// while the bucket cannot be read; while one request reads them again,
// others use what was read before rather than wait.
func (r *Registry) Fronts(ctx context.Context) (*FrontTable, error) {
	return r.frontsWithin(ctx, RecordTTL)
}

// FrontsMissed is Fronts for a path no front's prefix held: what was read
// more than FrontMissTTL ago is read again, so that a front uploaded
// through another node serves here within a moment rather than after
// RecordTTL. Reads stay one at a time, so paths that are nobody's cost
// the bucket at most one GET per FrontMissTTL.
func (r *Registry) FrontsMissed(ctx context.Context) (*FrontTable, error) {
	return r.frontsWithin(ctx, FrontMissTTL)
}

// FrontMissTTL is how old the fronts' prefixes may be for a path none of
// them holds (FrontsMissed).
const FrontMissTTL = 250 * time.Millisecond

func (r *Registry) frontsWithin(ctx context.Context, ttl time.Duration) (*FrontTable, error) {
	r.mu.Lock()
	t := r.fronts
	r.mu.Unlock()
	if t != nil && r.now()-t.read < int64(ttl) {
		return t, nil
	}
	if t != nil && !r.frontsRead.TryLock() {
		return t, nil
	}
	if t == nil {
		r.frontsRead.Lock()
	}
	defer r.frontsRead.Unlock()
	r.mu.Lock()
	t = r.fronts
	r.mu.Unlock()
	now := r.now()
	if t != nil && now-t.read < int64(ttl) {
		return t, nil // read by the request this one waited for
	}
	body, _, err := r.bucket.Get(ctx, frontsKey)
	var idx frontIndex
	switch {
	case err == nil:
		if err = json.Unmarshal(body, &idx); err != nil {
			err = fmt.Errorf("the fronts' prefixes: %w", err)
		}
	case errors.Is(err, store.ErrNotFound):
		err = nil // no front yet
	}
	if err != nil {
		if t != nil && ctx.Err() == nil {
			// Read again after another ttl, not at every request.
			t = &FrontTable{byPrefix: t.byPrefix, byClass: t.byClass, read: now}
			r.setFronts(t)
			return t, nil
		}
		return nil, err
	}
	t = newFrontTable(idx, now)
	r.setFronts(t)
	return t, nil
}

func (r *Registry) setFronts(t *FrontTable) {
	r.mu.Lock()
	r.fronts = t
	r.mu.Unlock()
}

// IsFront reports whether the class name is a front (Fronts).
func (r *Registry) IsFront(ctx context.Context, name string) (bool, error) {
	t, err := r.Fronts(ctx)
	if err != nil {
		return false, err
	}
	return len(t.Prefixes(name)) > 0, nil
}

// claim makes prefixes (checked by checkPrefixes) front name's, in place
// of those it held: refused with ErrPrefixHeld, naming the holder, if
// another front holds one of them, one under them or one above them.
func (r *Registry) claim(ctx context.Context, name string, prefixes []string) error {
	return r.rewriteFronts(ctx, func(idx *frontIndex) error {
		for _, p := range prefixes {
			for q, holder := range idx.Prefixes {
				if holder == name || !overlap(p, q) {
					continue
				}
				switch {
				case p == q:
					return fmt.Errorf("%w: front %s holds %s", ErrPrefixHeld, holder, q)
				case UnderPrefix(p, q):
					return fmt.Errorf("%w: %s is under %s, which front %s holds", ErrPrefixHeld, p, q, holder)
				default:
					return fmt.Errorf("%w: %s holds %s, which front %s holds", ErrPrefixHeld, p, q, holder)
				}
			}
		}
		return setClaims(idx, name, prefixes)
	})
}

// unclaim gives up every prefix front name holds. It reports whether
// name held any.
func (r *Registry) unclaim(ctx context.Context, name string) (bool, error) {
	held := false
	err := r.rewriteFronts(ctx, func(idx *frontIndex) error {
		held = slices.Contains(slices.Collect(maps.Values(idx.Prefixes)), name)
		return setClaims(idx, name, nil)
	})
	return held, err
}

// setClaims makes prefixes the ones name holds in idx, or answers
// errUnchanged if they are already.
func setClaims(idx *frontIndex, name string, prefixes []string) error {
	var had []string
	for p, c := range idx.Prefixes {
		if c == name {
			had = append(had, p)
		}
	}
	slices.Sort(had)
	if slices.Equal(had, prefixes) {
		return errUnchanged
	}
	for _, p := range had {
		delete(idx.Prefixes, p)
	}
	for _, p := range prefixes {
		idx.Prefixes[p] = name
	}
	return nil
}

// rewriteFronts applies change to the fronts object (see rewrite) and,
// once it is written, makes what it wrote the table this node uses.
func (r *Registry) rewriteFronts(ctx context.Context, change func(*frontIndex) error) error {
	out, err := r.rewrite(ctx, frontsKey, "the fronts' prefixes", func(body []byte, exists bool) ([]byte, error) {
		idx := frontIndex{Prefixes: map[string]string{}}
		if exists {
			if err := json.Unmarshal(body, &idx); err != nil {
				return nil, fmt.Errorf("the fronts' prefixes: %w", err)
			}
			if idx.Prefixes == nil {
				idx.Prefixes = map[string]string{}
			}
		}
		if err := change(&idx); err != nil {
			return nil, err
		}
		return json.Marshal(idx)
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	var idx frontIndex
	if err := json.Unmarshal(out, &idx); err != nil {
		return err
	}
	r.setFronts(newFrontTable(idx, r.now()))
	return nil
}
