package calls

import (
	"bytes"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

func TestCheck(t *testing.T) {
	a, b, c := Room{"x", "a"}, Room{"x", "b"}, Room{"y", "c"}
	if err := Check(Chain{a, b}, c); err != nil {
		t.Fatalf("a → b → c: %v", err)
	}
	if err := Check(Chain{a, b}, a); err == nil || err.Status != abi.StatusCycle || err.Msg != "x/a → x/b → x/a" {
		t.Fatalf("a → b → a: %v", err)
	}
	deep := make(Chain, MaxDepth)
	for i := range deep {
		deep[i] = Room{"x", string(rune('a' + i))}
	}
	if err := Check(deep, c); err == nil || err.Status != abi.StatusTooDeep {
		t.Fatalf("a chain of %d rooms: %v", MaxDepth, err)
	}
	if err := Check(deep[:MaxDepth-1], c); err != nil {
		t.Fatalf("a chain of %d rooms: %v", MaxDepth-1, err)
	}
}

func TestWireRoundTrip(t *testing.T) {
	c := Call{To: Room{"game", "g/1"}, Chain: Chain{{"front", ""}, {"lobby", "main"}}, Payload: []byte("hi"), Deadline: 5e9}
	b := AppendWire(nil, &c, 2e9) // 3 s left
	got, err := DecodeWire(b, 100e9)
	if err != nil || got.To != c.To || len(got.Chain) != 2 || got.Chain[1] != c.Chain[1] || !bytes.Equal(got.Payload, c.Payload) || got.Deadline != 103e9 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range b {
		if _, err := DecodeWire(b[:i], 0); err == nil {
			t.Fatalf("%d of %d bytes decoded", i, len(b))
		}
	}
	if _, err := DecodeWire(append(b, 0), 0); err == nil {
		t.Fatal("trailing byte decoded")
	}
	long := c
	long.Chain = make(Chain, MaxDepth+1)
	if _, err := DecodeWire(AppendWire(nil, &long, 0), 0); err == nil {
		t.Fatal("a chain past MaxDepth decoded")
	}
}

// TestWireAlarm: an alarm's delivery travels with its alarm; cut short,
// or with a flag byte that is not one, it does not decode.
func TestWireAlarm(t *testing.T) {
	c := Call{To: Room{"game", "g"}, Deadline: 5e9, Alarm: &Alarm{At: 1_796_686_062_781, Entry: "a1.2", Retry: 3, Drop: true}}
	b := AppendWire(nil, &c, 0)
	got, err := DecodeWire(b, 0)
	if err != nil || got.Alarm == nil || *got.Alarm != *c.Alarm || got.To != c.To {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	plain := len(AppendWire(nil, &Call{To: c.To, Deadline: c.Deadline}, 0))
	for i := plain + 1; i < len(b); i++ {
		if _, err := DecodeWire(b[:i], 0); err == nil {
			t.Fatalf("%d of %d bytes decoded", i, len(b))
		}
	}
	bad := bytes.Clone(b)
	bad[len(bad)-1] = 2
	if _, err := DecodeWire(bad, 0); err == nil {
		t.Fatal("a drop flag of 2 decoded")
	}
}

func TestResultRoundTrip(t *testing.T) {
	for _, r := range []Result{{Reply: []byte("ok")}, {Reply: []byte{}}, Fail(abi.StatusCrashed, "boom")} {
		got, err := DecodeResult(AppendResult(nil, r))
		if err != nil || !bytes.Equal(got.Reply, r.Reply) || (r.Err == nil) != (got.Err == nil) || (r.Err != nil && *got.Err != *r.Err) {
			t.Fatalf("%+v: got %+v, %v", r, got, err)
		}
	}
	if _, err := DecodeResult([]byte{1, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("a positive status decoded")
	}
}

func TestPendingFinishesOnce(t *testing.T) {
	p := NewPending()
	p.Finish(Result{Reply: []byte("first")})
	p.Finish(Fail(abi.StatusTimeout, "late"))
	if r := p.Result(); string(r.Reply) != "first" || r.Err != nil {
		t.Fatalf("result %+v", r)
	}
}
