package sim

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// runAll steps s until nothing is left before end.
func runAll(s *Scheduler, end int64) {
	for {
		if _, ok := s.Step(end); !ok {
			return
		}
	}
}

func TestSchedulerRunsOneTaskAtATimeInTimeOrder(t *testing.T) {
	orders := map[string]bool{}
	for seed := range uint64(20) {
		s := NewScheduler(rand.New(rand.NewPCG(seed, 0)), nil)
		g := &Group{Name: "g"}
		var log []string
		running := 0
		for _, name := range []string{"a", "b", "c"} {
			s.Spawn(g, name, func(ctx context.Context) {
				t := TaskOf(ctx)
				for i := range 3 {
					running++
					if running != 1 {
						panic("two tasks run at once")
					}
					log = append(log, name)
					running--
					// a and b wake together at every step; c later.
					d := int64(time.Second) * int64(i+1)
					if name == "c" {
						d += int64(time.Millisecond)
					}
					t.BlockUntil(s.Now() + d)
				}
			})
		}
		runAll(s, int64(time.Minute))
		s.Close()
		for i := 3; i < len(log); i += 3 {
			if log[i+2] != "c" {
				t.Fatalf("seed %d: c, waking 1 ms later, ran before a or b: %v", seed, log)
			}
		}
		orders[log[3]+log[4]+log[6]+log[7]] = true
	}
	if len(orders) < 2 {
		t.Errorf("ties were broken the same way by 20 seeds: %v", orders)
	}
}

func TestKilledAndPausedTasks(t *testing.T) {
	s := NewScheduler(rand.New(rand.NewPCG(1, 0)), nil)
	g, other := &Group{Name: "g"}, &Group{Name: "other"}
	var ticks, woke []int64
	s.Spawn(g, "ticker", func(ctx context.Context) {
		for {
			TaskOf(ctx).BlockUntil(s.Now() + int64(time.Second))
			ticks = append(ticks, s.Now())
		}
	})
	s.Spawn(other, "sleeper", func(ctx context.Context) {
		TaskOf(ctx).BlockUntil(int64(2 * time.Second))
		woke = append(woke, s.Now())
	})
	s.At(int64(time.Second+time.Millisecond), "pause", func() { s.Pause(other, int64(5*time.Second)) })
	s.At(int64(3500*time.Millisecond), "kill", func() { s.Kill(g) })
	runAll(s, int64(time.Minute))
	s.Close()
	if len(ticks) != 3 {
		t.Errorf("the killed task ticked at %v: want 3 ticks before the kill", ticks)
	}
	if len(woke) != 1 || woke[0] != int64(5*time.Second) {
		t.Errorf("the paused task woke at %v, want 5 s (its pause's end)", woke)
	}
}

func TestUnparkWakesABlockedTaskEarly(t *testing.T) {
	s := NewScheduler(rand.New(rand.NewPCG(1, 0)), nil)
	defer s.Close()
	sec := int64(time.Second)
	var woke, wokePaused []int64
	var task, paused *Task
	s.Spawn(&Group{Name: "g"}, "waiter", func(ctx context.Context) {
		task = TaskOf(ctx)
		task.BlockUntil(10 * sec)
		woke = append(woke, s.Now())
		task.BlockUntil(s.Now() + 20*sec) // not ended by the first block's event
		woke = append(woke, s.Now())
	})
	g := &Group{Name: "paused"}
	s.Spawn(g, "waiter", func(ctx context.Context) {
		paused = TaskOf(ctx)
		paused.BlockUntil(2 * sec) // due during the pause: put off to its end
		wokePaused = append(wokePaused, s.Now())
		paused.BlockUntil(s.Now() + 20*sec)
		wokePaused = append(wokePaused, s.Now())
	})
	s.At(sec, "pause", func() { s.Pause(g, 6*sec) })
	s.At(3*sec, "unpark", func() { s.Unpark(task); s.Unpark(paused) })
	runAll(s, int64(time.Minute))
	if len(woke) != 2 || woke[0] != 3*sec || woke[1] != 23*sec {
		t.Errorf("woke at %v; want 3 s (unparked), then 23 s (its second block's end)", woke)
	}
	if len(wokePaused) != 2 || wokePaused[0] != 6*sec || wokePaused[1] != 26*sec {
		t.Errorf("a paused task unparked woke at %v; want 6 s (its pause's end), then 26 s", wokePaused)
	}
}
