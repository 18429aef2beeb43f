package life

import (
	"slices"
	"testing"
)

func TestKeep(t *testing.T) {
	k := Keep[string]{Max: 10, For: 100}
	if out := k.Put("a", 4, 0); out != nil {
		t.Fatalf("put a: %v", out)
	}
	if out := k.Put("b", 4, 10); out != nil {
		t.Fatalf("put b: %v", out)
	}
	// c needs room: the oldest goes.
	if out := k.Put("c", 4, 20); !slices.Equal(out, []string{"a"}) {
		t.Fatalf("put c: %v, want [a]", out)
	}
	if k.Len() != 2 || k.Bytes() != 8 {
		t.Fatalf("len %d bytes %d", k.Len(), k.Bytes())
	}
	// An entry that can never fit is not kept.
	if out := k.Put("big", 11, 30); !slices.Equal(out, []string{"big"}) || k.Len() != 2 {
		t.Fatalf("put big: %v", out)
	}
	if !k.Take("b") || k.Take("b") || k.Bytes() != 4 {
		t.Fatal("take b")
	}
	// A put anew restarts an entry's time.
	k.Put("c", 4, 50)
	if out := k.Expire(149); out != nil {
		t.Fatalf("expired early: %v", out)
	}
	if out := k.Expire(150); !slices.Equal(out, []string{"c"}) || k.Len() != 0 || k.Bytes() != 0 {
		t.Fatalf("expire: %v", out)
	}
	k.Put("d", 1, 0)
	k.Put("e", 1, 0)
	if out := k.All(); !slices.Equal(out, []string{"d", "e"}) || k.Len() != 0 {
		t.Fatalf("all: %v", out)
	}
	for _, off := range []Keep[string]{{Max: 0, For: 100}, {Max: 10, For: 0}} {
		if out := off.Put("a", 1, 0); !slices.Equal(out, []string{"a"}) || off.Len() != 0 {
			t.Fatalf("a Keep with no room or time kept %v", out)
		}
	}
}
