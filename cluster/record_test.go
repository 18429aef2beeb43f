package cluster

import (
	"errors"
	"testing"
	"time"
)

func TestRecordBodiesRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Node: "n1", Instance: "i1", Generation: 7, Nonce: "x"},
		{Free: true, Generation: 7, Nonce: "y"},
	} {
		got, err := DecodeRecord(EncodeRecord(r))
		if err != nil || got != r {
			t.Errorf("DecodeRecord(EncodeRecord(%+v)) = %+v, %v", r, got, err)
		}
	}
	// A free record names nobody, whatever it was given.
	if got, _ := DecodeRecord(EncodeRecord(Record{Free: true, Node: "n1", Instance: "i", Nonce: "z"})); got.Node != "" || got.Instance != "" {
		t.Errorf("a free record kept its holder: %+v", got)
	}
	for _, body := range []string{
		``, `{`, `{"v":2,"state":"free","generation":1,"nonce":"a"}`,
		`{"v":1,"state":"free","generation":1}`,
		`{"v":1,"state":"held","generation":1,"nonce":"a","node":"n1"}`,
		`{"v":1,"state":"parked","generation":1,"nonce":"a"}`,
	} {
		if _, err := DecodeRecord([]byte(body)); !errors.Is(err, ErrBadObject) {
			t.Errorf("DecodeRecord(%q) = %v, want ErrBadObject", body, err)
		}
	}
}

func TestLeaseBodiesRoundTrip(t *testing.T) {
	for _, l := range []Lease{
		{Node: "n1", Instance: "i1", Address: "10.0.0.1:8080", Renewal: 3, TTL: 10 * time.Second, Nonce: "a"},
		{Node: "n1", Instance: "i1", Renewal: 9, TTL: 2500 * time.Millisecond, Draining: true, State: LeaseFenced, FencedBy: "n2", Nonce: "b"},
		{Node: "n1", Instance: "i1", TTL: time.Second, State: LeaseReleased, Nonce: "c"},
	} {
		got, err := DecodeLease(EncodeLease(l))
		if err != nil || got != l {
			t.Errorf("DecodeLease(EncodeLease(%+v)) = %+v, %v", l, got, err)
		}
	}
	for _, body := range []string{
		`[]`, `{"v":1,"node":"n","instance":"i","ttl_ms":1000,"state":"live"}`,
		`{"v":1,"node":"n","instance":"i","ttl_ms":0,"state":"live","nonce":"a"}`,
		`{"v":1,"node":"n","instance":"i","ttl_ms":1000,"state":"asleep","nonce":"a"}`,
	} {
		if _, err := DecodeLease([]byte(body)); !errors.Is(err, ErrBadObject) {
			t.Errorf("DecodeLease(%q) = %v, want ErrBadObject", body, err)
		}
	}
}

func TestKeys(t *testing.T) {
	if got := RecordKey(Room{"chat", "a b"}); got != "rooms/chat/a%20b/owner" {
		t.Errorf("RecordKey = %q", got)
	}
	key := LeaseKey("node/1")
	if node, ok := leaseNode(key); !ok || node != "node/1" {
		t.Errorf("leaseNode(%q) = %q, %v", key, node, ok)
	}
	if _, ok := leaseNode("nodes/a/b"); ok {
		t.Error("leaseNode took a key below a lease")
	}
}
