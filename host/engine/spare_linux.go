//go:build linux

package engine

import (
	"sync"
	"time"
	"weak"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// Spare memories (issue 13 §2). A restore from the store writes each of
// the room's stored pages into a fresh memory, and each first write to a
// page is a fault: about 2 µs on the virtual machines this was measured
// on (11–19 µs on one), most of a Go room's wake from the store. The
// memory of an instance that just closed still has its pages: a restore
// that writes over them does not fault. So a class keeps the memories of
// its last closed instances for a moment (at most maxSpares, released by
// Engine.DropSpares once older than it is told), and a restore from the
// store takes the newest.
//
// Nothing of the room that used a spare may reach the next one. Before
// the new instance sees the memory, every page of it that the old room
// made its own (present or swapped, and not the class image's page
// cache) and that the snapshot does not store is given back
// (MADV_DONTNEED: it reads as the class image, or as zeros past it, as in
// a fresh memory); the stored ones the restore overwrites whole. Only
// the restore path takes spares: a cold start, and a wake that maps its
// image file (which replaces the mapping), start from a fresh memory.
const maxSpares = 2

// spares are a class image's kept memories, oldest first.
type spares struct {
	now    func() int64 // the engine clock's; nil: none are kept
	mu     sync.Mutex
	list   []spare
	closed bool // the image is closed: none are kept any more
}

type spare struct {
	m  *mappedMemory
	at int64 // when it was kept, on now's clock
}

// keepSpare keeps m, freed by wazero, as a spare (the oldest spare goes
// if there are maxSpares already), unless the image is closed (false:
// the caller unmaps it).
func (img *classImage) keepSpare(m *mappedMemory) bool {
	s := &img.spares
	if s.now == nil {
		return false
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	var out *mappedMemory
	if len(s.list) == maxSpares {
		out = s.list[0].m
		s.list = append(s.list[:0], s.list[1:]...)
	}
	s.list = append(s.list, spare{m: m, at: s.now()})
	s.mu.Unlock()
	if out != nil {
		out.release()
	}
	return true
}

// take removes the newest spare and returns it, or nil.
func (s *spares) take() *mappedMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.list)
	if n == 0 {
		return nil
	}
	m := s.list[n-1].m
	s.list = s.list[:n-1]
	return m
}

// drop releases the spares kept before the clock read before, and
// returns how many.
func (s *spares) drop(before int64) int {
	return s.release(func(sp spare) bool { return sp.at < before })
}

// close releases every spare, and keeps none from then on.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.release(func(spare) bool { return true })
}

// release unmaps the spares that out selects, and returns how many.
func (s *spares) release(out func(spare) bool) int {
	s.mu.Lock()
	var gone []*mappedMemory
	kept := s.list[:0]
	for _, sp := range s.list {
		if out(sp) {
			gone = append(gone, sp.m)
		} else {
			kept = append(kept, sp)
		}
	}
	clear(s.list[len(kept):])
	s.list = kept
	s.mu.Unlock()
	for _, m := range gone {
		m.release()
	}
	return len(gone)
}

// spareMemory returns a spare memory of the class made ready for a
// restore of man, or nil if there is none.
func (c *Class) spareMemory(man *snapshot.Manifest) spareMemory {
	v, ok := images.Load(weak.Make(c))
	if !ok {
		return nil
	}
	img := v.(*imageSlot).loaded()
	if img == nil {
		return nil
	}
	m := img.spares.take()
	if m == nil {
		return nil
	}
	if !m.resetFor(man) {
		m.release()
		return nil
	}
	return m
}

func (m *mappedMemory) fits(maxBytes uint64) bool { return m.max == maxBytes }

// resetFor gives back every page of m that a room made its own and that
// man does not store; it reports false if the memory's pages cannot be
// read (then m must not be used).
func (m *mappedMemory) resetFor(man *snapshot.Manifest) bool {
	ps := int(osPageSize)
	if ps%snapshot.PageSize != 0 {
		return false
	}
	stored := make([]uint16, len(man.Chunks))
	for i := range man.Chunks {
		stored[i] = man.Chunks[i].Stored()
	}
	// An OS page is kept only if the restore writes all of it: every
	// snapshot page in it is stored.
	const perChunk = snapshot.ChunkSize / snapshot.PageSize
	sub := ps / snapshot.PageSize
	written := func(p int) bool {
		for k := p * sub; k < (p+1)*sub; k++ {
			if c := k / perChunk; c >= len(stored) || stored[c]&(1<<(k%perChunk)) == 0 {
				return false
			}
		}
		return true
	}
	return m.giveBack(int(m.usable)/ps, func(p int, e uint64) bool {
		return e&(pagePresent|pageSwapped) != 0 && e&pageFile == 0 && !written(p)
	})
}

// DropSpares releases the spare memories of every class that were kept
// longer than age ago, and returns how many. The node calls it on a
// tick, so that the memory of closed instances goes back to the OS a
// moment after the last of them closed.
func (e *Engine) DropSpares(age time.Duration) int {
	before := e.clock.Now() - int64(age)
	n := 0
	e.eachImage(func(img *classImage) { n += img.spares.drop(before) })
	return n
}

// spares counts the spare memories of every class.
func (e *Engine) spares() int {
	n := 0
	e.eachImage(func(img *classImage) {
		img.spares.mu.Lock()
		n += len(img.spares.list)
		img.spares.mu.Unlock()
	})
	return n
}

// eachImage calls f with the image of each class of e that has one.
func (e *Engine) eachImage(f func(*classImage)) {
	e.mu.Lock()
	classes := make([]*Class, 0, len(e.classes))
	for c := range e.classes {
		classes = append(classes, c)
	}
	e.mu.Unlock()
	for _, c := range classes {
		if v, ok := images.Load(weak.Make(c)); ok {
			if img := v.(*imageSlot).loaded(); img != nil {
				f(img)
			}
		}
	}
}
