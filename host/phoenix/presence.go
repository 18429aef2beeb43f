package phoenix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Errors of Presence.Track. Compare with errors.Is.
var (
	// ErrPresenceKey: the key is not valid UTF-8 (two different keys
	// would be one key in JSON).
	ErrPresenceKey = errors.New("phoenix: presence key is not valid UTF-8")
	// ErrPresenceMeta: the meta is not a JSON object.
	ErrPresenceMeta = errors.New("phoenix: presence meta is not a JSON object")
)

// Fields a Presence writes into every meta; an application's own fields
// of these names are dropped.
const (
	// MetaRef is the meta field holding the ref the tracker assigned.
	MetaRef = "phx_ref"
	// MetaRefPrev is the meta field holding, after an update, the ref of
	// the meta it replaced.
	MetaRefPrev = "phx_ref_prev"
)

// Presence is the presence list of one topic: for each key (a user id,
// say), one meta per socket that tracks it, in the shapes phoenix.js's
// Presence expects. It is pure: the host calls Track, Untrack and
// UntrackAll and broadcasts the Diff each returns as presence_diff, and
// pushes State as presence_state to a socket that has just joined. Not safe
// for concurrent use.
//
// Every meta carries a phx_ref unique to it. The client matches metas by
// phx_ref alone, and it keeps its list across a reconnect before comparing
// it with the fresh state, so refs must never repeat, not even across two
// Presence values of the same topic: NewPresence takes a prefix for that.
type Presence struct {
	prefix  string
	seq     uint64
	keys    map[string][]*meta             // metas of a key, in the order of their refs
	sockets map[uint64]map[string]struct{} // socket -> keys it tracks
}

// meta is one tracked meta: the socket that tracks it and its encoded JSON
// object, refs included.
type meta struct {
	socket uint64
	ref    string
	json   json.RawMessage
}

// NewPresence returns an empty Presence whose refs are refPrefix followed by
// a counter. The host must pick a prefix no other Presence has used while
// clients may still hold refs from it, for instance the node's random
// instance id and a node-wide counter ("3f9a1c.17.").
func NewPresence(refPrefix string) *Presence {
	return &Presence{
		prefix:  refPrefix,
		keys:    make(map[string][]*meta),
		sockets: make(map[uint64]map[string]struct{}),
	}
}

// Diff is a presence change: the metas that joined and left, by key. Its
// JSON is the presence_diff payload. A meta updated by Track shows in both:
// the new meta (with phx_ref_prev) in Joins and the old one in Leaves,
// which is how phoenix.js replaces it.
type Diff struct {
	// Joins are the metas added, by key.
	Joins map[string][]json.RawMessage
	// Leaves are the metas removed, by key.
	Leaves map[string][]json.RawMessage
}

// Empty reports whether the diff changes nothing (and need not be sent).
func (d Diff) Empty() bool { return len(d.Joins) == 0 && len(d.Leaves) == 0 }

// AppendJSON appends {"joins":{...},"leaves":{...}}, each key written as
// {"metas":[...]}, keys in byte order.
func (d Diff) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"joins":`...)
	dst = appendMetaMap(dst, d.Joins)
	dst = append(dst, `,"leaves":`...)
	dst = appendMetaMap(dst, d.Leaves)
	return append(dst, '}')
}

// JSON returns the presence_diff payload (see AppendJSON).
func (d Diff) JSON() json.RawMessage { return d.AppendJSON(nil) }

func appendMetaMap(dst []byte, m map[string][]json.RawMessage) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendKeyMetas(dst, k, m[k])
	}
	return append(dst, '}')
}

// appendKeyMetas writes "key":{"metas":[m1,m2,...]}.
func appendKeyMetas(dst []byte, key string, metas []json.RawMessage) []byte {
	dst = appendString(dst, key)
	dst = append(dst, `:{"metas":[`...)
	for i, m := range metas {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, "]}"...)
}

func (d *Diff) add(joins bool, key string, m json.RawMessage) {
	target := &d.Leaves
	if joins {
		target = &d.Joins
	}
	if *target == nil {
		*target = make(map[string][]json.RawMessage)
	}
	(*target)[key] = append((*target)[key], m)
}

// Track sets the meta of socket under key and returns the diff to
// broadcast. meta must be a JSON object (nil or empty means {}); its
// phx_ref and phx_ref_prev fields, if any, are replaced. If socket already
// tracks key this is an update: the new meta gets a new phx_ref and carries
// the old one as phx_ref_prev, and the diff shows the old meta leaving and
// the new one joining.
func (p *Presence) Track(socket uint64, key string, metaJSON json.RawMessage) (Diff, error) {
	if !utf8.ValidString(key) {
		return Diff{}, ErrPresenceKey
	}
	fields, err := metaFields(metaJSON)
	if err != nil {
		return Diff{}, err
	}
	p.seq++
	ref := p.prefix + strconv.FormatUint(p.seq, 36)
	var d Diff
	metas := p.keys[key]
	var prev string
	if i := indexSocket(metas, socket); i >= 0 {
		prev = metas[i].ref
		d.add(false, key, metas[i].json)
		metas = slices.Delete(metas, i, i+1)
	}
	m := &meta{socket: socket, ref: ref, json: encodeMeta(ref, prev, fields)}
	p.keys[key] = append(metas, m)
	d.add(true, key, m.json)
	ks := p.sockets[socket]
	if ks == nil {
		ks = make(map[string]struct{})
		p.sockets[socket] = ks
	}
	ks[key] = struct{}{}
	return d, nil
}

func indexSocket(metas []*meta, socket uint64) int {
	return slices.IndexFunc(metas, func(m *meta) bool { return m.socket == socket })
}

// Untrack removes the meta of socket under key and returns the diff (empty
// if socket did not track key).
func (p *Presence) Untrack(socket uint64, key string) Diff {
	var d Diff
	p.untrack(&d, socket, key)
	if ks := p.sockets[socket]; ks != nil {
		delete(ks, key)
		if len(ks) == 0 {
			delete(p.sockets, socket)
		}
	}
	return d
}

func (p *Presence) untrack(d *Diff, socket uint64, key string) {
	metas := p.keys[key]
	i := indexSocket(metas, socket)
	if i < 0 {
		return
	}
	d.add(false, key, metas[i].json)
	metas = slices.Delete(metas, i, i+1)
	if len(metas) == 0 {
		delete(p.keys, key)
	} else {
		p.keys[key] = metas
	}
}

// UntrackAll removes every meta of socket, as when it leaves the topic or
// goes away, and returns the diff (empty if it tracked nothing).
func (p *Presence) UntrackAll(socket uint64) Diff {
	var d Diff
	for key := range p.sockets[socket] {
		p.untrack(&d, socket, key)
	}
	delete(p.sockets, socket)
	return d
}

// Len returns the number of keys present.
func (p *Presence) Len() int { return len(p.keys) }

// AppendState appends the whole list, {"key":{"metas":[...]}, ...}, keys in
// byte order and each key's metas in the order they were tracked (an
// update counts as tracked anew), which is the order phoenix.js reaches by
// applying the diffs.
func (p *Presence) AppendState(dst []byte) []byte {
	keys := make([]string, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = append(dst, '{')
	var raw []json.RawMessage
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		raw = raw[:0]
		for _, m := range p.keys[k] {
			raw = append(raw, m.json)
		}
		dst = appendKeyMetas(dst, k, raw)
	}
	return append(dst, '}')
}

// State returns the presence_state payload (see AppendState).
func (p *Presence) State() json.RawMessage { return p.AppendState(nil) }

// field is one member of a meta object: its key re-encoded and its value
// compacted.
type field struct {
	key   string
	value []byte
}

// metaFields splits a meta object into its members, in order, without
// phx_ref and phx_ref_prev.
func metaFields(raw json.RawMessage) ([]field, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrPresenceMeta)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPresenceMeta, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, ErrPresenceMeta
	}
	var fields []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPresenceMeta, err)
		}
		key := tok.(string) // inside an object, a key is always a string
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPresenceMeta, err)
		}
		if key == MetaRef || key == MetaRefPrev {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPresenceMeta, err)
		}
		fields = append(fields, field{key: key, value: buf.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("%w: %v", ErrPresenceMeta, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the object", ErrPresenceMeta)
	}
	return fields, nil
}

// encodeMeta writes {"phx_ref":ref[,"phx_ref_prev":prev],fields...}.
func encodeMeta(ref, prev string, fields []field) json.RawMessage {
	dst := append([]byte(nil), `{"phx_ref":`...)
	dst = appendString(dst, ref)
	if prev != "" {
		dst = append(dst, `,"phx_ref_prev":`...)
		dst = appendString(dst, prev)
	}
	for _, f := range fields {
		dst = append(dst, ',')
		dst = appendString(dst, f.key)
		dst = append(dst, ':')
		dst = append(dst, f.value...)
	}
	return append(dst, '}')
}
