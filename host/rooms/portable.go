package rooms

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// A room bundle is a room's whole state in one file, to move it between
// nodes and stores (production to a laptop, say): the module version its
// snapshot belongs to, its manifest and every segment the manifest
// references.
//
//	bundle = magic "WKROOM\0\1" class:str name:str module:bytes manifest:bytes
//	         count:u32 (id:str segment:bytes)*count crc32c:u32
//
// Importing checks everything before writing anything: the checksum, that
// the module is valid wasm with the hash the manifest names, and that every
// segment decodes and matches its reference.

var bundleMagic = [8]byte{'W', 'K', 'R', 'O', 'O', 'M', 0, 1}

// Errors of export and import.
var (
	// ErrBadBundle: not a room bundle, or a damaged one.
	ErrBadBundle = errors.New("rooms: not a valid room bundle")
	// ErrRoomExists: the target room already has state; import with
	// replace to overwrite it.
	ErrRoomExists = errors.New("rooms: the room already exists")
	// ErrRoomBusy: the room is resident or has sockets here; it cannot be
	// replaced under them.
	ErrRoomBusy = errors.New("rooms: the room is running on this node")
)

// Modules gives export and import access to module bytes.
type Modules interface {
	// Module returns the bytes of a stored module version.
	Module(ctx context.Context, hash string) ([]byte, error)
	// StoreModule validates and stores a module version, and points the
	// class name at it if the name does not exist yet.
	StoreModule(ctx context.Context, class string, wasm []byte) error
}

// Bundle is a decoded room bundle.
type Bundle struct {
	Key      Key
	Module   []byte
	Manifest *snapshot.Manifest
	manifest []byte
	segments map[string][]byte
}

// Export writes a resident room's current state to the bucket first (a
// checkpoint, without hibernating it) and returns its bundle.
func (m *Manager) Export(ctx context.Context, key Key, mods Modules) ([]byte, error) {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	if r != nil {
		done := make(chan error, 1)
		if err := r.enqueue(&event{kind: evCheckpoint, done: done}, false); err != nil {
			return nil, err
		}
		select {
		case err := <-done:
			if err != nil {
				return nil, fmt.Errorf("writing the room's state before export: %w", err)
			}
			m.snaps.invalidate(key)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	manBytes, _, err := m.layout.latest(ctx, m.bucket, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownRoom, key)
	}
	if err != nil {
		return nil, err
	}
	man, err := snapshot.DecodeManifest(manBytes)
	if err != nil {
		return nil, fmt.Errorf("the room's manifest: %w", err)
	}
	wasm, err := mods.Module(ctx, man.ModuleHash)
	if err != nil {
		return nil, err
	}
	b := append([]byte(nil), bundleMagic[:]...)
	b = appendField(b, []byte(key.Class))
	b = appendField(b, []byte(key.Name))
	b = appendField(b, wasm)
	b = appendField(b, manBytes)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(man.Segments)))
	for _, ref := range man.Segments {
		seg, _, err := m.bucket.Get(ctx, key.segmentKey(ref.ID))
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", ref.ID, err)
		}
		b = appendField(b, []byte(ref.ID))
		b = appendField(b, seg)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendField(dst, b []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// DecodeBundle parses and checks a bundle: its checksum, its manifest,
// and every segment against the manifest. The module is checked on import.
func DecodeBundle(b []byte) (*Bundle, error) {
	if len(b) < len(bundleMagic)+4 || [8]byte(b[:8]) != bundleMagic {
		return nil, fmt.Errorf("%w: no wasmkeep room bundle header", ErrBadBundle)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or damaged)", ErrBadBundle)
	}
	rest := body[8:]
	field := func() ([]byte, bool) {
		if len(rest) < 4 {
			return nil, false
		}
		n := binary.LittleEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, false
		}
		v := rest[4 : 4+n]
		rest = rest[4+n:]
		return v, true
	}
	class, ok1 := field()
	name, ok2 := field()
	module, ok3 := field()
	man, ok4 := field()
	if !ok1 || !ok2 || !ok3 || !ok4 || len(rest) < 4 {
		return nil, fmt.Errorf("%w: truncated", ErrBadBundle)
	}
	count := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	bd := &Bundle{Key: Key{string(class), string(name)}, Module: module, manifest: man, segments: map[string][]byte{}}
	for range count {
		id, ok1 := field()
		seg, ok2 := field()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: truncated segments", ErrBadBundle)
		}
		bd.segments[string(id)] = seg
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: trailing bytes", ErrBadBundle)
	}
	var err error
	if bd.Manifest, err = snapshot.DecodeManifest(man); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	if engine.Hash(module) != bd.Manifest.ModuleHash {
		return nil, fmt.Errorf("%w: the module does not match the snapshot's module hash", ErrBadBundle)
	}
	for _, ref := range bd.Manifest.Segments {
		raw, ok := bd.segments[ref.ID]
		if !ok {
			return nil, fmt.Errorf("%w: segment %s missing", ErrBadBundle, ref.ID)
		}
		seg, err := snapshot.DecodeSegment(raw)
		if err != nil || seg.Size() != ref.Size {
			return nil, fmt.Errorf("%w: segment %s damaged", ErrBadBundle, ref.ID)
		}
	}
	if _, err := decodeState(bd.Manifest.RoomState); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	return bd, nil
}

// ImportOptions choose where a bundle goes.
type ImportOptions struct {
	// Key renames the room (zero: the bundle's class and name).
	Key Key
	// Replace overwrites a room that already has state here (it must not
	// be running here).
	Replace bool
}

// Import writes a bundle's room into the bucket, where its next event
// wakes it exactly as it was exported (sockets it had elsewhere reach it as
// closes). The class name is created if the node does not have it; a node
// whose class points at another version still runs the room on the
// bundle's version, as any room keeps the version it was snapshotted with.
func (m *Manager) Import(ctx context.Context, bd *Bundle, mods Modules, opts ImportOptions) (Key, error) {
	key := opts.Key
	if key == (Key{}) {
		key = bd.Key
	}
	m.mu.Lock()
	r := m.rooms[key]
	busy := r != nil && (r.residentNow() || r.busy() || r.socketCount.Load() > 0)
	m.mu.Unlock()
	if busy {
		return key, fmt.Errorf("%w: hibernate it and close its sockets first", ErrRoomBusy)
	}
	old, oldVersion, err := m.layout.latest(ctx, m.bucket, key)
	switch {
	case err == nil && !opts.Replace:
		return key, fmt.Errorf("%w: %s (import with replace to overwrite it)", ErrRoomExists, key)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return key, err
	}
	if err := mods.StoreModule(ctx, key.Class, bd.Module); err != nil {
		return key, err
	}
	// The import writes as a hold of this node: its segments get a fresh
	// generation, so they can never collide with segments already here.
	hold, err := m.place.Acquire(ctx, key)
	if err != nil {
		return key, err
	}
	defer m.place.End(m.ctx, hold, life.EndAdmin, 0)
	man := *bd.Manifest
	man.Generation = hold.Generation
	man.Segments = make([]snapshot.SegmentRef, len(bd.Manifest.Segments))
	for i, ref := range bd.Manifest.Segments {
		id := snapshot.SegmentID(hold.Generation, uint64(i+1))
		if _, err := m.bucket.Put(ctx, key.segmentKey(id), bd.segments[ref.ID], store.Cond{IfNoneMatch: true}); err != nil {
			return key, fmt.Errorf("writing segment: %w", err)
		}
		man.Segments[i] = snapshot.SegmentRef{ID: id, Size: ref.Size}
	}
	// The import is its hold's first and only commit.
	if _, err := m.layout.commit(ctx, m.bucket, key, oldVersion, true, nil, man.Encode()); err != nil {
		return key, fmt.Errorf("writing the manifest: %w", err)
	}
	m.snaps.invalidate(key)
	m.forgetImage(key) // as a kept instance, a wake would restore the import anyway
	if r != nil {
		m.dropKept(r, warmChanged)
	}
	if old == nil {
		m.snapshotCreated()
	} else if prev, err := snapshot.DecodeManifest(old); err == nil {
		for _, id := range prev.SegmentIDs() {
			m.gc.add(key.segmentKey(id))
		}
	}
	return key, nil
}

// RoomDetail is what inspect shows about a room: what a listing shows,
// and more.
type RoomDetail struct {
	RoomInfo
	// AwakeDetail says in words why a resident room is in memory.
	AwakeDetail string    `json:"awake_detail,omitempty"`
	Idle        string    `json:"idle,omitempty"`
	Module      string    `json:"module,omitempty"`
	Snapshot    *SnapInfo `json:"snapshot,omitempty"`
}

// SnapInfo describes a room's stored snapshot.
type SnapInfo struct {
	Seq        uint64     `json:"seq"`
	Generation uint64     `json:"generation"`
	Taken      time.Time  `json:"taken"`
	Memory     uint32     `json:"memory_bytes"`
	Pages      [3]int     `json:"pages_total_stored_base"`
	LiveBytes  uint64     `json:"live_bytes"`
	TotalBytes uint64     `json:"total_bytes"`
	Segments   []SegRefJS `json:"segments"`
	Unreadable string     `json:"unreadable,omitempty"`
}

// SegRefJS is a segment in a SnapInfo.
type SegRefJS struct {
	ID   string `json:"id"`
	Size uint32 `json:"size"`
}

// Inspect describes one room: its state, why it is awake, its snapshot
// chain.
func (m *Manager) Inspect(ctx context.Context, key Key) (*RoomDetail, error) {
	d := &RoomDetail{RoomInfo: RoomInfo{Class: key.Class, Name: key.Name, State: StateHibernated}}
	m.mu.Lock()
	r := m.rooms[key]
	if r != nil {
		f := m.liveFactsOf(r)
		now := m.clock.Now()
		d.Sockets, d.Pending, d.OpenRequests, d.Pinned = f.sockets, f.pending, f.open, f.pinned
		d.LastEvent, d.IdleSeconds = lastEventAt(m.clock.Wall(), now, f.last), idleSeconds(now, f.last)
		if f.resident {
			d.State, d.Memory, d.Awake, d.AwakeDetail = StateResident, f.memory, f.awake, f.detail
			d.Idle = time.Duration(now - f.last).Round(time.Millisecond).String()
		}
	}
	m.mu.Unlock()
	body, _, err := m.layout.latest(ctx, m.bucket, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if r == nil {
			return nil, fmt.Errorf("%w: %s", ErrUnknownRoom, key)
		}
	case err != nil:
		return nil, err
	default:
		si := &SnapInfo{}
		d.Snapshot = si
		man, err := snapshot.DecodeManifest(body)
		if err != nil {
			si.Unreadable = err.Error()
			break
		}
		d.Module = man.ModuleHash
		d.Alarm = storedAlarmTime(man)
		si.Seq, si.Generation, si.Memory = man.Seq, man.Generation, man.MemorySize()
		si.Taken = time.Unix(0, man.WallUnixNano).UTC()
		si.Pages[0], si.Pages[1], si.Pages[2] = man.Pages()
		si.LiveBytes, si.TotalBytes = man.Bytes()
		d.SnapshotBytes = si.TotalBytes + uint64(len(body))
		d.SnapshotAt = &si.Taken
		for _, s := range man.Segments {
			si.Segments = append(si.Segments, SegRefJS{s.ID, s.Size})
		}
		if d.Memory == 0 {
			d.Memory = man.MemorySize()
		}
	}
	return d, nil
}
