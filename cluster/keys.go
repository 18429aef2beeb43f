package cluster

import (
	"strings"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Room names a room by its class and name. It mirrors host/rooms.Key,
// which this package may not import (cmd/wasmkeep converts between them).
type Room struct{ Class, Name string }

// String is the room as logs and errors show it.
func (r Room) String() string { return r.Class + "/" + r.Name }

// The cluster's objects in the bucket:
//
//	nodes/<node>                 a node's lease
//	rooms/<class>/<name>/owner   a room's ownership record
//
// The record sits beside the room's snapshot keys (manifest, seg/) so that
// one listing of a room's prefix finds all of it, under a name the
// snapshot code neither reads nor collects. Names are escaped into single
// key segments with store.EscapeSegment.
const leasePrefix = "nodes/"

// RecordKey is the bucket key of r's ownership record.
func RecordKey(r Room) string {
	return "rooms/" + store.EscapeSegment(r.Class) + "/" + store.EscapeSegment(r.Name) + "/owner"
}

// LeaseKey is the bucket key of node's lease.
func LeaseKey(node string) string { return leasePrefix + store.EscapeSegment(node) }

// leaseNode is the node whose lease key is key, if key is one.
func leaseNode(key string) (string, bool) {
	seg, ok := strings.CutPrefix(key, leasePrefix)
	if !ok || strings.Contains(seg, "/") {
		return "", false
	}
	node, err := store.UnescapeSegment(seg)
	return node, err == nil
}
