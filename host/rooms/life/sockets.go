package life

import (
	"slices"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Sockets reconciliation. A room's guest keeps, in its snapshot, the ids
// of the sockets it believes open; the node knows which are open now.
// When the two differ after a wake (sockets closed while the room slept
// or while the node was down, or a rollback past opens), the guest is told
// what it missed, so it always sees open → messages → close per socket.

// Closed is how a socket that the guest still believes open went away.
type Closed struct {
	Code   abi.CloseCode
	Reason string
}

// Missed is what a woken guest must be told, in order: Closes (sorted by
// id) for sockets it believes open that are gone, then Opens for sockets
// open here that it does not know.
type Missed struct {
	Closes []MissedClose
	Opens  []uint32
}

// MissedClose is one close to deliver.
type MissedClose struct {
	ID uint32
	Closed
}

// Reconcile compares known (the guest's open sockets) with open (the
// node's), given how gone sockets closed (a socket gone without a record
// closed with fallback) and which closes must never be replayed (skip:
// their delivery crashed the room once).
func Reconcile(known map[uint32]bool, open func(uint32) bool, openIDs []uint32, gone map[uint32]Closed, skip map[uint32]bool, fallback Closed) Missed {
	var m Missed
	for _, id := range sortedKeys(known) {
		if open(id) || skip[id] {
			continue
		}
		why, ok := gone[id]
		if !ok {
			why = fallback
		}
		m.Closes = append(m.Closes, MissedClose{ID: id, Closed: why})
	}
	ids := slices.Clone(openIDs)
	slices.Sort(ids)
	for _, id := range ids {
		if !known[id] {
			m.Opens = append(m.Opens, id)
		}
	}
	return m
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
