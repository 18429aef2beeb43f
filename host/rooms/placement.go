package rooms

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Placement decides where a room runs and grants this node the right to
// run it. The server asks it where a room runs before it does any work for
// an event; the room manager asks it for a hold before waking a room,
// checks the hold before every event and snapshot write, and tells it when
// the hold ends and why. A cluster implements it over ownership records in
// the bucket (parking a hold whose room hibernated with sockets open here,
// seed 000 §1); a single node uses Local.
//
// The manager's side of the contract, for a placement to call back: Drop
// (a hold found invalid: the instance goes, unwritten), DropAll (a lease
// lapse), CloseSockets, RoomsWithSockets, and Hibernate (a hand-over).
type Placement interface {
	// Route says where key's events go: here, on another node (which the
	// server forwards requests and relays upgrades to), or nowhere yet
	// (its owner is dead and its record not yet free: wait, then 503). It
	// is asked before the class is resolved or a socket admitted.
	Route(ctx context.Context, key Key) (Route, error)
	// Acquire grants this node the right to run key until End. Each grant
	// has a generation of its own, higher than any before it for that
	// room, which tags what the hold writes.
	Acquire(ctx context.Context, key Key) (Hold, error)
	// Valid reports whether h still lets this node act: asked before each
	// event and each snapshot write (a cluster's lease may have lapsed).
	Valid(h Hold) bool
	// End ends a hold, for why, while open of the room's sockets are open
	// (and not closing) on this node. The placement parks the hold (the
	// room then wakes here again: life.EndReason.Parks, and the node's own
	// state) or releases it.
	End(ctx context.Context, h Hold, why life.EndReason, open int)
	// SocketsGone tells that key has no open socket left on this node
	// (checked each time one goes), so that a parked hold can be released.
	SocketsGone(key Key)
	// CloseLost tells that a socket of key closed and its guest could not
	// be told (its wake failed): the room's record of its sockets is out
	// of date until it next wakes.
	CloseLost(key Key)
	// Fence is the generation below which no hold of key can still write
	// (from the room's stored ownership record, in a cluster): the orphan
	// sweep deletes only unreferenced segments older than it. 0 lets it
	// delete nothing of the room.
	Fence(ctx context.Context, key Key) (uint64, error)
}

// RouteKind is where a room's events go.
type RouteKind uint8

// Routes.
const (
	// RouteHere: this node runs the room, or may.
	RouteHere RouteKind = iota
	// RouteElsewhere: another node runs it: Route.Node at Route.Address.
	RouteElsewhere
	// RouteWait: nobody may run it yet (its owner died and its record is
	// not free); retry later.
	RouteWait
)

// Route is where a room's events go.
type Route struct {
	Kind RouteKind
	// Node and Address name the node that runs the room, for
	// RouteElsewhere.
	Node, Address string
}

// Hold is a node's right to run a room.
type Hold struct {
	Key        Key
	Generation uint64
	// Version is the ownership record's version (an ETag) in a cluster.
	Version string
}

// Local is the placement of a single node: every room runs here. It still
// hands out increasing generations, so snapshot tagging and the owner
// fence work the same way with one node as with many, and it knows the
// node's live holds, so the orphan sweep can tell a segment a hold may
// still reference from garbage.
type Local struct {
	// gens hands out generations: from a counter kept in the bucket
	// (NewStoredLocal), so that they keep growing across restarts whatever
	// the wall clock does, or from memory (NewLocal).
	gens generations

	mu   sync.Mutex
	live map[Key][]uint64 // generations of the holds not yet ended, by room
}

// generations hands out increasing generations.
type generations interface {
	next(ctx context.Context) (uint64, error)
}

// NewLocal returns a single-node placement whose generations start above
// base and live in memory only (tests; a node uses NewStoredLocal).
func NewLocal(base uint64) *Local {
	c := &memGenerations{}
	c.n.Store(base)
	return &Local{gens: c, live: map[Key][]uint64{}}
}

type memGenerations struct{ n atomic.Uint64 }

func (c *memGenerations) next(context.Context) (uint64, error) { return c.n.Add(1), nil }

// generationKey is the bucket object that keeps a single node's next
// block of generations.
const generationKey = "placement/generation"

// generationBlock is how many generations a node reserves with one write.
const generationBlock = 1 << 20

// NewStoredLocal returns the placement of a single node whose generations
// come from a counter in the bucket, reserved a block at a time with a
// conditional write: they grow across restarts even if the wall clock is
// set back, which an orphan sweep relies on (a repeated generation could
// name a segment a new manifest is about to reference as an old one's
// garbage). A bucket without the counter starts it at firstBase (the
// wall clock in microseconds, above the generations of older versions,
// which used it).
func NewStoredLocal(ctx context.Context, bucket store.Bucket, firstBase uint64) (*Local, error) {
	g := &storedGenerations{bucket: bucket, firstBase: firstBase}
	if err := g.reserve(ctx); err != nil {
		return nil, err
	}
	return &Local{gens: g, live: map[Key][]uint64{}}, nil
}

type storedGenerations struct {
	bucket    store.Bucket
	firstBase uint64

	mu       sync.Mutex
	from, to uint64 // the block reserved: [from, to)
}

func (g *storedGenerations) next(ctx context.Context) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.from == g.to {
		if err := g.reserveLocked(ctx); err != nil {
			return 0, err
		}
	}
	n := g.from
	g.from++
	return n, nil
}

func (g *storedGenerations) reserve(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reserveLocked(ctx)
}

// reserveLocked moves the stored counter a block forward and takes the
// block; a concurrent writer (another process on the same bucket) makes
// it read again.
func (g *storedGenerations) reserveLocked(ctx context.Context) error {
	for range 10 {
		body, etag, err := g.bucket.Get(ctx, generationKey)
		start, cond := g.firstBase+1, store.Cond{IfNoneMatch: true}
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return fmt.Errorf("rooms: reading the generation counter: %w", err)
		default:
			if start, err = parseGenerationCounter(body); err != nil {
				return err
			}
			cond = store.Cond{IfMatch: etag}
		}
		end := start + generationBlock
		_, err = g.bucket.Put(ctx, generationKey, []byte(strconv.FormatUint(end, 10)+"\n"), cond)
		switch {
		case err == nil:
			g.from, g.to = start, end
			return nil
		case errors.Is(err, store.ErrPrecondition), errors.Is(err, store.ErrConflict):
			continue // another writer moved it: read again
		default:
			// An unknown outcome may have moved the counter: skipping
			// its block is harmless, reusing it is not, so read again.
			if errors.Is(err, store.ErrUnknownOutcome) {
				continue
			}
			return fmt.Errorf("rooms: writing the generation counter: %w", err)
		}
	}
	return errors.New("rooms: the generation counter keeps changing underneath this node")
}

// Route implements Placement: here.
// GenerationFloor is the highest generation a single node on bucket may
// have handed out (the end of its reserved block), or 0 if none ever ran
// on it: a cluster on the same bucket starts its rooms' records above it,
// so that its holds' generations exceed those of every snapshot written
// before.
func GenerationFloor(ctx context.Context, bucket store.Bucket) (uint64, error) {
	body, _, err := bucket.Get(ctx, generationKey)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("rooms: reading the generation counter: %w", err)
	}
	return parseGenerationCounter(body)
}

func parseGenerationCounter(body []byte) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("rooms: the generation counter %s holds %q", generationKey, body)
	}
	return n, nil
}

func (l *Local) Route(context.Context, Key) (Route, error) { return Route{Kind: RouteHere}, nil }

// Acquire implements Placement. One counter serves every room: a generation
// only has to exceed the room's earlier ones.
func (l *Local) Acquire(ctx context.Context, key Key) (Hold, error) {
	g, err := l.gens.next(ctx)
	if err != nil {
		return Hold{}, err
	}
	l.mu.Lock()
	l.live[key] = append(l.live[key], g)
	l.mu.Unlock()
	return Hold{Key: key, Generation: g}, nil
}

// Valid implements Placement: a single node's holds stay valid.
func (l *Local) Valid(Hold) bool { return true }

// End implements Placement: a single node has nothing to park or release;
// the hold is no longer live.
func (l *Local) End(_ context.Context, h Hold, _ life.EndReason, _ int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gens := slices.DeleteFunc(l.live[h.Key], func(g uint64) bool { return g == h.Generation })
	if len(gens) == 0 {
		delete(l.live, h.Key)
	} else {
		l.live[h.Key] = gens
	}
}

// Fence implements Placement: the oldest live hold of the room here, or,
// with none, no bound (a single node is the only writer).
func (l *Local) Fence(_ context.Context, key Key) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gens := l.live[key]; len(gens) > 0 {
		return slices.Min(gens), nil
	}
	return math.MaxUint64, nil
}

// SocketsGone implements Placement.
func (l *Local) SocketsGone(Key) {}

// CloseLost implements Placement.
func (l *Local) CloseLost(Key) {}

var _ Placement = (*Local)(nil)
