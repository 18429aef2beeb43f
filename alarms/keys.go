// Package alarms holds the rules of the alarms rooms set
// (abi.ImportAlarmSet), once, for the servers and the simulation: it
// finds them, delivers each to its room wherever in the cluster the room
// runs, and retries those whose handler failed.
//
// A room keeps its one alarm with its state: the time, and the name of
// an index entry. The entry is an object of its own in the bucket,
// created by the commit that made the alarm durable, under a key that
// sorts by the alarm's time:
//
//	alarms/<at, 13 digits of Unix ms>/<class>/<name>/<entry>
//
// The entry's name holds the generation of the hold that wrote it, so an
// entry written by a hold that lost the room (its commit refused) names
// an alarm the room does not have, and is told apart: the room answers
// its delivery "stale" and the entry is deleted. Finding the alarms due
// is then one listing of the index's first keys, whatever the number of
// rooms, and the work of a pass is bounded by its pages.
//
// A delivery is a call to the room (calls.Call with Alarm set), routed
// as calls are: served here, sent to the node that holds or parks the
// room, or refused. The room runs its handler only if the alarm named is
// still its own and due; it clears the alarm when the handler returns
// (unless the handler set it again) and makes that durable before it
// answers. So a delivery is safe to repeat, and this package repeats
// any it is not sure of: at least once.
package alarms

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Prefix begins every key of the alarm index.
const Prefix = "alarms/"

// atDigits is how many digits an alarm's time takes in a key: enough for
// abi.MaxAlarmMs, zero-padded so that keys sort by time.
const atDigits = 13

// Entry is one alarm of the index: the room, its time (Unix ms) and the
// entry's name.
type Entry struct {
	Room  calls.Room
	At    int64
	Entry string
}

// Key is the entry's key in the bucket.
func (e Entry) Key() string {
	return fmt.Sprintf("%s%0*d/%s/%s/%s", Prefix, atDigits, e.At, store.EscapeSegment(e.Room.Class),
		store.EscapeSegment(e.Room.Name), e.Entry)
}

// Time is the entry's time on the wall clock.
func (e Entry) Time() time.Time { return time.UnixMilli(e.At) }

// ErrBadKey: a key under Prefix that is not an entry's.
var ErrBadKey = errors.New("alarms: not an alarm index key")

// ParseKey parses a key Entry.Key made.
func ParseKey(key string) (Entry, error) {
	rest, ok := strings.CutPrefix(key, Prefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 || len(parts[0]) != atDigits || !validName(parts[3]) {
		return Entry{}, ErrBadKey
	}
	at, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || at < abi.MinAlarmMs || at > abi.MaxAlarmMs {
		return Entry{}, ErrBadKey
	}
	class, err1 := store.UnescapeSegment(parts[1])
	name, err2 := store.UnescapeSegment(parts[2])
	if err1 != nil || err2 != nil {
		return Entry{}, ErrBadKey
	}
	return Entry{Room: calls.Room{Class: class, Name: name}, At: at, Entry: parts[3]}, nil
}

// EntryName names the seq-th alarm a hold of generation gen sets: unique
// per room, since generations are.
func EntryName(gen, seq uint64) string {
	return strconv.FormatUint(gen, 16) + "." + strconv.FormatUint(seq, 16)
}

// validName reports whether s is what EntryName makes.
func validName(s string) bool {
	g, q, ok := strings.Cut(s, ".")
	_, err1 := strconv.ParseUint(g, 16, 64)
	_, err2 := strconv.ParseUint(q, 16, 64)
	return ok && err1 == nil && err2 == nil && len(s) <= 33
}

// The retries of an alarm whose handler failed.
const (
	// FirstRetry is the wait before the first retry; each next one waits
	// twice as long.
	FirstRetry = 2 * time.Second
	// MaxRetries is how many retries an alarm gets before it is dropped.
	MaxRetries = 6
)

// RetryAfter is the wait before retry n (1 is the first).
func RetryAfter(n int) time.Duration {
	return FirstRetry << (n - 1)
}

// The answers of a delivery (calls.Result.Reply).
const (
	// ReplyRan: the handler ran and its room's state, the alarm cleared or
	// set anew, is durable.
	ReplyRan = "ran"
	// ReplyStale: the room's alarm is not the one delivered (cleared, set
	// again, or never made durable): nothing ran.
	ReplyStale = "stale"
	// ReplyDropped: the alarm was cleared without running (a drop after
	// its last retry, or a class with no alarm handler).
	ReplyDropped = "dropped"
)
