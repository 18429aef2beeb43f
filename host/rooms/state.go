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
	// Joins are the channel joins the guest accepted and has not yet seen
	// end.
	Joins []joinKey
	// Alarm is the room's alarm (alarms.go), if it has one.
	Alarm alarmState
}

// The versions of the encoding: stateWithAlarm is stateVersion followed
// by the alarm, written only for a room that has one, so that the state
// of every other room reads as before (and older nodes read it).
const (
	stateVersion   = 2
	stateWithAlarm = 3
)

var errBadState = errors.New("rooms: malformed room state in snapshot")

func (s *savedState) encode() []byte {
	b := make([]byte, 0, 13+4*len(s.Sockets)+32*len(s.Joins)+32)
	version := byte(stateVersion)
	if s.Alarm.set() {
		version = stateWithAlarm
	}
	b = append(b, version)
	b = binary.LittleEndian.AppendUint32(b, s.NextSocket)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Sockets)))
	for _, id := range s.Sockets {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Joins)))
	for _, j := range s.Joins {
		b = binary.LittleEndian.AppendUint32(b, j.socket)
		b = appendString(b, j.topic)
		b = appendString(b, j.joinRef)
	}
	if s.Alarm.set() {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.Alarm.At))
		b = appendString(b, s.Alarm.Entry)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func decodeState(b []byte) (savedState, error) {
	if len(b) < 13 || (b[0] != stateVersion && b[0] != stateWithAlarm) {
		return savedState{}, errBadState
	}
	withAlarm := b[0] == stateWithAlarm
	s := savedState{NextSocket: binary.LittleEndian.Uint32(b[1:])}
	n := binary.LittleEndian.Uint32(b[5:])
	b = b[9:]
	if uint64(n)*4+4 > uint64(len(b)) {
		return savedState{}, errBadState
	}
	s.Sockets = make([]uint32, n)
	for i := range s.Sockets {
		s.Sockets[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	b = b[4*n:]
	n = binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n)*12 > uint64(len(b)) {
		return savedState{}, errBadState
	}
	str := func() (string, bool) {
		if len(b) < 4 {
			return "", false
		}
		l := binary.LittleEndian.Uint32(b)
		if uint64(l)+4 > uint64(len(b)) {
			return "", false
		}
		v := string(b[4 : 4+l])
		b = b[4+l:]
		return v, true
	}
	for range n {
		if len(b) < 4 {
			return savedState{}, errBadState
		}
		j := joinKey{socket: binary.LittleEndian.Uint32(b)}
		b = b[4:]
		var ok1, ok2 bool
		j.topic, ok1 = str()
		j.joinRef, ok2 = str()
		if !ok1 || !ok2 {
			return savedState{}, errBadState
		}
		s.Joins = append(s.Joins, j)
	}
	if withAlarm {
		if len(b) < 8 {
			return savedState{}, errBadState
		}
		s.Alarm.At = int64(binary.LittleEndian.Uint64(b))
		b = b[8:]
		entry, ok := str()
		if !ok || entry == "" {
			return savedState{}, errBadState
		}
		s.Alarm.Entry = entry
	}
	if len(b) != 0 {
		return savedState{}, errBadState
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
