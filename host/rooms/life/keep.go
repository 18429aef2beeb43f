package life

import "container/list"

// Keep decides which instances of hibernated rooms stay in memory, and for
// how long, so that a room that wakes soon after it went idle resumes its
// instance instead of restoring it from the store. It is bounded twice:
// by bytes (Max, over the Cost each entry was put with) and by time (For,
// from when an entry was put): what passes either bound leaves, the oldest
// first. Entries leave only through Take, Drop and what Put and Expire
// return; the caller closes what they return. The caller serializes the
// calls.
type Keep[ID comparable] struct {
	// Max bounds the sum of the entries' costs.
	Max int64
	// For is how long an entry may stay, in the callers' time unit.
	For int64

	bytes int64
	order list.List // of *keptEntry[ID], oldest first
	byID  map[ID]*list.Element
}

type keptEntry[ID comparable] struct {
	id   ID
	cost int64
	at   int64
}

// Put keeps id, of cost bytes, from now on, and returns the entries that
// must leave to make room for it (oldest first). An entry that could never
// fit (cost over Max), or a Keep with no room or no time at all, keeps
// nothing: id itself is then returned. An id already kept is put anew.
func (k *Keep[ID]) Put(id ID, cost, now int64) (out []ID) {
	k.Drop(id)
	if cost > k.Max || k.Max <= 0 || k.For <= 0 {
		return []ID{id}
	}
	if k.byID == nil {
		k.byID = map[ID]*list.Element{}
	}
	for k.bytes+cost > k.Max {
		out = append(out, k.removeOldest())
	}
	k.byID[id] = k.order.PushBack(&keptEntry[ID]{id: id, cost: cost, at: now})
	k.bytes += cost
	return out
}

// Take reports whether id is kept and forgets it: the caller now owns it.
func (k *Keep[ID]) Take(id ID) bool { return k.Drop(id) }

// Drop forgets id, reporting whether it was kept.
func (k *Keep[ID]) Drop(id ID) bool {
	e, ok := k.byID[id]
	if !ok {
		return false
	}
	k.remove(e)
	return true
}

// Expire returns (and forgets) the entries put For or longer before now.
func (k *Keep[ID]) Expire(now int64) (out []ID) {
	for e := k.order.Front(); e != nil && e.Value.(*keptEntry[ID]).at <= now-k.For; e = k.order.Front() {
		out = append(out, k.removeOldest())
	}
	return out
}

// All returns (and forgets) every entry, oldest first.
func (k *Keep[ID]) All() (out []ID) {
	for k.order.Len() > 0 {
		out = append(out, k.removeOldest())
	}
	return out
}

// Len is the number of entries kept; Bytes the sum of their costs.
func (k *Keep[ID]) Len() int { return k.order.Len() }

// Bytes is the sum of the kept entries' costs.
func (k *Keep[ID]) Bytes() int64 { return k.bytes }

func (k *Keep[ID]) removeOldest() ID {
	e := k.order.Front()
	k.remove(e)
	return e.Value.(*keptEntry[ID]).id
}

func (k *Keep[ID]) remove(e *list.Element) {
	v := e.Value.(*keptEntry[ID])
	k.order.Remove(e)
	delete(k.byID, v.id)
	k.bytes -= v.cost
}
