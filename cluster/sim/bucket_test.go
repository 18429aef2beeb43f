package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestBucketFaults(t *testing.T) {
	f := DefaultFaults
	for _, tc := range []struct {
		name    string
		faults  Faults
		err     error
		applied bool
		late    bool
		link    Link
	}{
		{"none", Faults{}, nil, true, false, Link{}},
		{"lost request", Faults{LostRequest: 1}, store.ErrUnknownOutcome, false, false, Link{}},
		{"lost answer", Faults{LostAnswer: 1}, store.ErrUnknownOutcome, true, false, Link{}},
		{"late", Faults{Late: 1}, store.ErrUnknownOutcome, true, true, Link{}},
		{"conflict", Faults{Conflict: 1}, store.ErrConflict, false, false, Link{}},
		{"slow", Faults{Slow: 1}, nil, true, false, Link{}},
		{"link cut", Faults{}, store.ErrUnknownOutcome, false, false, Link{CutUntil: int64(time.Hour)}},
		{"link slow", Faults{}, nil, true, false, Link{CutFrom: int64(time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.faults.Latency, tc.faults.Timeout, tc.faults.LateMax = f.Latency, f.Timeout, f.LateMax
			s := NewScheduler(rand.New(rand.NewPCG(1, 0)), nil)
			defer s.Close()
			mem := store.NewMem()
			b := NewNetwork(s, rand.New(rand.NewPCG(2, 0)), mem, tc.faults).Bucket("n1.1", &tc.link)
			var err error
			var answered int64
			s.Spawn(&Group{Name: "n1.1"}, "put", func(ctx context.Context) {
				_, err = b.Put(ctx, "k", []byte("v"), store.IfNoneMatch())
				answered = s.Now()
			})
			var atAnswer bool
			for {
				if _, ok := s.Step(int64(time.Minute)); !ok {
					break
				}
				if answered != 0 && !atAnswer {
					atAnswer = true
					_, _, gerr := mem.Get(context.Background(), "k")
					if landed := gerr == nil; landed == tc.late && tc.applied {
						t.Errorf("landed by the answer: %v", landed)
					}
				}
			}
			if (tc.err == nil) != (err == nil) || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("answer %v, want %v", err, tc.err)
			}
			_, _, gerr := mem.Get(context.Background(), "k")
			if applied := gerr == nil; applied != tc.applied {
				t.Errorf("applied %v, want %v", applied, tc.applied)
			}
			if strings.HasPrefix(tc.name, "slow") && answered < int64(time.Second) || tc.name == "link slow" && answered < int64(3*time.Second) {
				t.Errorf("a slow answer came after %v", time.Duration(answered))
			}
		})
	}
}
