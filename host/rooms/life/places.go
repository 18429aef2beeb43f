package life

import (
	"cmp"
	"slices"
)

// Places counts the places under a node's bound of resident rooms: a
// resident room holds one, and so does a wake under way, from before it
// reads its snapshot, so that at no moment are more rooms resident than
// the bound, however many wakes run at once. The caller serializes the
// calls (the manager's lock).
type Places struct {
	// Max is the bound (--max-resident).
	Max int
	// Resident and Waking count the places held.
	Resident, Waking int
	// Waiting counts the wakes waiting for a place.
	Waiting int
	// Peak is the most rooms resident at once.
	Peak int
}

// Take reserves a place for a wake, if one is free.
func (p *Places) Take() bool {
	if p.Resident+p.Waking >= p.Max {
		return false
	}
	p.Waking++
	return true
}

// GiveBack returns the place of a wake that failed.
func (p *Places) GiveBack() { p.Waking-- }

// Woke turns a wake's place into a resident room's.
func (p *Places) Woke() {
	p.Waking--
	p.Resident++
	p.Peak = max(p.Peak, p.Resident)
}

// Left frees the place of a room that left memory.
func (p *Places) Left() { p.Resident-- }

// Evictions is how many more rooms must be asked to hibernate so that
// every waiting wake has a place on its way to being free, given that
// leaving rooms are already on their way out.
func (p *Places) Evictions(leaving int) int {
	return max(p.Resident+p.Waking+p.Waiting-p.Max-leaving, 0)
}

// Candidate is what eviction and the idle sweep know of one resident room.
type Candidate[ID any] struct {
	ID ID
	// LastActive is the monotonic time of its last event.
	LastActive int64
	// Busy: an event runs or waits in its mailbox.
	Busy bool
	// Pinned: an operator keeps it in memory.
	Pinned bool
	// Leaving: it was already asked to hibernate.
	Leaving bool
	// RetryAt: its last snapshot write failed; no attempt before then.
	RetryAt int64
}

// evictable reports whether c may be asked to hibernate at now.
func (c Candidate[ID]) evictable(now int64) bool {
	return !c.Busy && !c.Pinned && !c.Leaving && c.RetryAt <= now
}

// Victims picks up to n rooms to evict at now: the least recently used of
// those not busy, not pinned, not already leaving and not backing off
// after a failed write.
func Victims[ID any](cands []Candidate[ID], n int, now int64) []ID {
	if n <= 0 {
		return nil
	}
	var ok []Candidate[ID]
	for _, c := range cands {
		if c.evictable(now) {
			ok = append(ok, c)
		}
	}
	slices.SortStableFunc(ok, func(a, b Candidate[ID]) int { return cmp.Compare(a.LastActive, b.LastActive) })
	out := make([]ID, 0, min(n, len(ok)))
	for _, c := range ok[:min(n, len(ok))] {
		out = append(out, c.ID)
	}
	return out
}

// Idle picks the rooms the idle sweep hibernates at now: those whose last
// event is at least idleTimeout ago, on the same conditions as Victims.
func Idle[ID any](cands []Candidate[ID], now, idleTimeout int64) []ID {
	var out []ID
	for _, c := range cands {
		if c.evictable(now) && c.LastActive <= now-idleTimeout {
			out = append(out, c.ID)
		}
	}
	return out
}
