package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrBadObject means a lease or record in the bucket could not be decoded.
// It proves nothing about who holds what, so whoever reads one acts as if
// it named a live stranger: it takes nothing.
var ErrBadObject = errors.New("cluster: undecodable object")

// formatVersion is written in every body; a reader refuses other versions.
const formatVersion = 1

// Record is a room's ownership record: either free or held by one
// instance of one node, at a generation. A release keeps the generation,
// so the next hold's generation (one more) is new for the room.
//
// Every body written carries a fresh Nonce: two writes never have the
// same bytes, so an ETag derived from the body (S3's MD5) never comes
// back (the ABA hole), and a writer that lost an answer can tell its own
// write by the nonce.
type Record struct {
	Free       bool
	Node       string // the holder's node name; empty when Free
	Instance   string // the holder's process instance; empty when Free
	Generation uint64
	Nonce      string
}

type recordWire struct {
	V          int    `json:"v"`
	State      string `json:"state"`
	Node       string `json:"node,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Generation uint64 `json:"generation"`
	Nonce      string `json:"nonce"`
}

// EncodeRecord is r's body in the bucket.
func EncodeRecord(r Record) []byte {
	w := recordWire{V: formatVersion, State: "held", Node: r.Node, Instance: r.Instance, Generation: r.Generation, Nonce: r.Nonce}
	if r.Free {
		w.State, w.Node, w.Instance = "free", "", ""
	}
	b, _ := json.Marshal(w) // a struct of strings and numbers: cannot fail
	return b
}

// DecodeRecord reads a record body; anything but a well-formed record of
// this format gives an error wrapping ErrBadObject.
func DecodeRecord(body []byte) (Record, error) {
	var w recordWire
	if err := json.Unmarshal(body, &w); err != nil {
		return Record{}, fmt.Errorf("%w: record: %v", ErrBadObject, err)
	}
	if w.V != formatVersion || w.Nonce == "" {
		return Record{}, fmt.Errorf("%w: record of version %d, nonce %q", ErrBadObject, w.V, w.Nonce)
	}
	switch w.State {
	case "free":
		return Record{Free: true, Generation: w.Generation, Nonce: w.Nonce}, nil
	case "held":
		if w.Node == "" || w.Instance == "" {
			return Record{}, fmt.Errorf("%w: a held record names no holder", ErrBadObject)
		}
		return Record{Node: w.Node, Instance: w.Instance, Generation: w.Generation, Nonce: w.Nonce}, nil
	}
	return Record{}, fmt.Errorf("%w: record state %q", ErrBadObject, w.State)
}

// LeaseState is what a lease says of the instance it names.
type LeaseState uint8

// Lease states. Fenced and Released end the named instance for good.
const (
	// LeaseLive: the instance renews it; it is alive while its ETag
	// keeps changing.
	LeaseLive LeaseState = iota
	// LeaseFenced: a peer found it silent for ttl + grace and wrote this;
	// the instance's next renewal fails and it stops acting.
	LeaseFenced
	// LeaseReleased: the instance stopped cleanly and wrote this last.
	LeaseReleased
)

var leaseStates = [...]string{"live", "fenced", "released"}

// String is the state as the body spells it.
func (s LeaseState) String() string {
	if int(s) < len(leaseStates) {
		return leaseStates[s]
	}
	return fmt.Sprintf("LeaseState(%d)", uint8(s))
}

// Lease is a node's lease: which process (instance) is node right now,
// where peers reach it, and how long its peers wait before taking it for
// dead.
type Lease struct {
	Node     string
	Instance string
	Address  string
	// Renewal counts the writes of the lease, across its processes: each
	// write (a renewal, a takeover, a fence, a release) is the one before
	// it plus one, If-Match on it, so of two reads the one with the higher
	// Renewal is the later, whatever order their answers came in.
	Renewal uint64
	// TTL is the holder's lease time: peers watch for ttl + their grace.
	TTL      time.Duration
	Draining bool
	State    LeaseState
	// FencedBy is the node that fenced it, when State is LeaseFenced.
	FencedBy string
	Nonce    string
}

type leaseWire struct {
	V        int    `json:"v"`
	Node     string `json:"node"`
	Instance string `json:"instance"`
	Address  string `json:"address,omitempty"`
	Renewal  uint64 `json:"renewal"`
	TTLMilli int64  `json:"ttl_ms"`
	Draining bool   `json:"draining,omitempty"`
	State    string `json:"state"`
	FencedBy string `json:"fenced_by,omitempty"`
	Nonce    string `json:"nonce"`
}

// EncodeLease is l's body in the bucket.
func EncodeLease(l Lease) []byte {
	b, _ := json.Marshal(leaseWire{
		V: formatVersion, Node: l.Node, Instance: l.Instance, Address: l.Address, Renewal: l.Renewal,
		TTLMilli: l.TTL.Milliseconds(), Draining: l.Draining, State: l.State.String(), FencedBy: l.FencedBy, Nonce: l.Nonce,
	})
	return b
}

// DecodeLease reads a lease body; anything but a well-formed lease of
// this format gives an error wrapping ErrBadObject.
func DecodeLease(body []byte) (Lease, error) {
	var w leaseWire
	if err := json.Unmarshal(body, &w); err != nil {
		return Lease{}, fmt.Errorf("%w: lease: %v", ErrBadObject, err)
	}
	if w.V != formatVersion || w.Node == "" || w.Instance == "" || w.Nonce == "" || w.TTLMilli <= 0 {
		return Lease{}, fmt.Errorf("%w: lease of version %d for %q/%q, ttl %d ms", ErrBadObject, w.V, w.Node, w.Instance, w.TTLMilli)
	}
	l := Lease{
		Node: w.Node, Instance: w.Instance, Address: w.Address, Renewal: w.Renewal,
		TTL: time.Duration(w.TTLMilli) * time.Millisecond, Draining: w.Draining, FencedBy: w.FencedBy, Nonce: w.Nonce,
	}
	for i, s := range leaseStates {
		if s == w.State {
			l.State = LeaseState(i)
			return l, nil
		}
	}
	return Lease{}, fmt.Errorf("%w: lease state %q", ErrBadObject, w.State)
}
