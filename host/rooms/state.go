package rooms

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
)

// savedState is the host-side room state stored in a snapshot beside the
// guest's memory: what the guest has been told about its sockets.
type savedState struct {
	// NextSocket is the next socket id to hand out, so ids are never
	// reused within a room, across hibernations and restarts.
	NextSocket uint32
	// Sockets are the ids the guest believes open: it saw their open
	// event and not yet their close.
	Sockets []uint32
}

const stateVersion = 1

var errBadState = errors.New("rooms: malformed room state in snapshot")

func (s *savedState) encode() []byte {
	b := make([]byte, 0, 9+4*len(s.Sockets))
	b = append(b, stateVersion)
	b = binary.LittleEndian.AppendUint32(b, s.NextSocket)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Sockets)))
	for _, id := range s.Sockets {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return b
}

func decodeState(b []byte) (savedState, error) {
	if len(b) < 9 || b[0] != stateVersion {
		return savedState{}, errBadState
	}
	s := savedState{NextSocket: binary.LittleEndian.Uint32(b[1:])}
	n := binary.LittleEndian.Uint32(b[5:])
	b = b[9:]
	if uint64(n)*4 != uint64(len(b)) {
		return savedState{}, errBadState
	}
	s.Sockets = make([]uint32, n)
	for i := range s.Sockets {
		s.Sockets[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return s, nil
}

func sortedIDs[V any](m map[uint32]V) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func sortRooms(rs []RoomInfo) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Class != rs[j].Class {
			return rs[i].Class < rs[j].Class
		}
		return rs[i].Name < rs[j].Name
	})
}
