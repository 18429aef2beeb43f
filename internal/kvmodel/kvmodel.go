// Package kvmodel is the model of a kv room's state (testdata/guests/kv)
// that the tests checking a node against what it acknowledged share: the
// randomized hibernate/wake test and the SIGKILL test.
package kvmodel

import (
	"sort"
	"strconv"
	"strings"
)

// State is one state of a kv room. States are never modified once made:
// a write makes a new one, so a model can keep several by pointer.
type State struct {
	Version uint64
	Values  map[string]string
}

// Empty is the state of a room that has never been written.
var Empty = &State{Values: map[string]string{}}

// With returns the state after setting key to *value (deleting it for
// nil): the next version.
func (s *State) With(key string, value *string) *State {
	next := &State{Version: s.Version + 1, Values: make(map[string]string, len(s.Values)+1)}
	for k, v := range s.Values {
		next.Values[k] = v
	}
	if value == nil {
		delete(next.Values, key)
	} else {
		next.Values[key] = *value
	}
	return next
}

// Dump is what the kv guest answers to GET /state in state s.
func (s *State) Dump() string {
	keys := make([]string, 0, len(s.Values))
	for k := range s.Values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("v=" + strconv.FormatUint(s.Version, 10) + "\n")
	for _, k := range keys {
		b.WriteString(k + "=" + s.Values[k] + "\n")
	}
	return b.String()
}
