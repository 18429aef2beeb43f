package member

import (
	"context"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// PlaceKind is where a room runs, as this node can tell.
type PlaceKind uint8

// The places of a room.
const (
	// Free: no live process holds the room's record (there is none, it
	// is free, or its holder's lease is fenced, released or taken over):
	// the node its next event reaches takes it.
	Free PlaceKind = iota
	// Held: Place.Node holds the record, so the room runs there. A record
	// does not say whether a peer keeps the room resident or parked.
	Held
	// Parked: the room hibernated with sockets open on this node, which
	// keeps its record.
	Parked
)

// Place is where a room runs.
type Place struct {
	Kind PlaceKind
	Node string
}

// Where says where each of rooms runs, for an operator's listing: a room
// held or parked here from the core's own state, any other from a read
// of its record, judged by this node's view of the leases (none is read).
// It reads at most reads records, for the first rooms in order that need
// one, through Config.Parallel; a room it did not read, or whose record
// could not be read, is not in the answer. A record naming a node the
// view has not listed yet is taken at its word.
func (m *Member) Where(ctx context.Context, rooms []cluster.Room, reads int) map[cluster.Room]Place {
	st := m.core.Status()
	out := make(map[cluster.Room]Place, len(rooms))
	here := map[cluster.Room]Place{}
	for _, h := range st.Holds {
		here[h.Room] = Place{Kind: Held, Node: st.Node}
	}
	for _, h := range st.Parked {
		here[h.Room] = Place{Kind: Parked, Node: st.Node}
	}
	live := map[string]string{st.Node: st.Instance} // node: the process its live lease names
	known := map[string]bool{st.Node: true}
	for _, p := range st.Peers {
		known[p.Node] = true
		if p.State == cluster.LeaseLive {
			live[p.Node] = p.Instance
		}
	}
	var read []cluster.Room
	for _, r := range rooms {
		if p, ok := here[r]; ok {
			out[r] = p
		} else if len(read) < reads {
			read = append(read, r)
		}
	}
	places := make([]*Place, len(read))
	m.parallel(len(read), func(i int) {
		seen, err := m.core.Look(ctx, read[i])
		if err != nil {
			return
		}
		rec, p := seen.Record, Place{Kind: Free}
		if inst, ok := live[rec.Node]; seen.Exists && !rec.Free && (ok && inst == rec.Instance || !known[rec.Node]) {
			p = Place{Kind: Held, Node: rec.Node}
		}
		places[i] = &p
	})
	for i, r := range read {
		if places[i] != nil {
			out[r] = *places[i]
		}
	}
	return out
}
