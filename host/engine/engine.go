// Package engine runs actor classes on wazero: it validates and compiles an
// uploaded module, creates room instances (fresh or restored from a
// snapshot), delivers events to them, and captures their state for
// hibernation. It is the only package of wasmkeep that imports wazero.
//
// An instance is owned by one goroutine at a time (the room's mailbox); the
// engine never calls into an instance concurrently with its owner, except to
// interrupt it when an event overruns its CPU-time budget.
package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/internal/cachedir"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Config holds the engine's settings. A zero field means its Default*
// constant, and limits.Off turns off the limits that say so
// (internal/limits has the convention).
type Config struct {
	// CacheDir keeps compiled machine code across restarts ("" = no cache).
	CacheDir string
	// CacheBytes bounds the machine code kept in CacheDir
	// (DefaultCacheBytes): New removes the least recently used files past
	// it, never one used in the last ten minutes (cachedir.Trim).
	// limits.Off keeps no cache, as CacheDir "" does.
	CacheBytes int64
	// MaxMemoryPages caps each instance's linear memory, in 64 KiB pages
	// (DefaultMaxMemoryPages). A guest that grows past it fails to grow;
	// Go guests then abort, which is handled as a crash.
	MaxMemoryPages uint32
	// EventTimeout caps the wall time of one event's call into the guest
	// (DefaultEventTimeout). An overrun ends the call and discards the
	// instance. limits.Off: no limit, for trusted guests only (a guest
	// that loops forever then holds its room, and a CPU, forever).
	EventTimeout time.Duration
	// MaxResponseBytes caps an encoded HTTP response
	// (DefaultMaxResponseBytes).
	MaxResponseBytes int
	// PoolSize is how many blank instances each class keeps ready so that
	// wakes and cold starts skip instantiation (DefaultPoolSize; limits.Off:
	// no pool).
	PoolSize int
	// Interpreter selects wazero's interpreter instead of its compiler.
	Interpreter bool
	// WazeroInterrupt enforces EventTimeout with wazero's own checks
	// (WithCloseOnContextDone: a call out of the guest's code at every
	// loop back-edge, a goroutine watching every call) rather than with the
	// check of a global the engine inserts at every loop header
	// (wasmrw.AddInterrupt). Slower; for comparison, and a way back should
	// the inserted check ever misbehave. Modules AddInterrupt refuses, and
	// every module on the interpreter, use wazero's checks in any case.
	WazeroInterrupt bool
	// Logger receives guest output and engine events (default slog.Default()).
	Logger *slog.Logger
	// Secrets reads the app's secrets for guests (abi.ImportSecretGet).
	// Nil: the app has none.
	Secrets SecretSource
	// Fetcher makes the guests' fetches (abi.ImportFetchStart). Nil: the
	// host makes none (StatusUnsupported).
	Fetcher Fetcher
	// Clock is the host's clock (default clock.Real()): guests' monotonic
	// and wall clocks and their sleeps, the event timeout's watchdog, and
	// the wall time a snapshot records and a restore measures the sleep by.
	Clock clock.Clock
}

// SecretSource reads the app's secrets (host/secrets).
type SecretSource interface {
	// Secret returns the value of the secret name, or found false. An
	// error means the store could not be read.
	Secret(ctx context.Context, name string) (value []byte, found bool, err error)
}

// Defaults of Config.
const (
	// DefaultMaxMemoryPages is 256 MiB: enough for any room that keeps its
	// state in memory, small enough that a runaway one cannot take a
	// machine's memory.
	DefaultMaxMemoryPages = 4096
	// DefaultEventTimeout is far above what an event handler needs, and
	// short enough that a looping guest frees its room soon.
	DefaultEventTimeout = 10 * time.Second
	// DefaultMaxResponseBytes bounds what one response holds in memory.
	DefaultMaxResponseBytes = 16 << 20
	// DefaultPoolSize keeps a wake or two per class ready; a burst beyond
	// instantiates (about 0.16 ms each) while the pool refills.
	DefaultPoolSize = 2
	// DefaultCacheBytes keeps the machine code of about 120 versions of a
	// Go guest (8 MB each), many more of AssemblyScript ones.
	DefaultCacheBytes = 1 << 30
)

// PagesPerMiB is the number of 64 KiB WebAssembly pages in a MiB, the
// unit the command line gives MaxMemoryPages in.
const PagesPerMiB = 16

func (c Config) withDefaults() Config {
	limits.Default(&c.MaxMemoryPages, DefaultMaxMemoryPages)
	limits.DefaultOrOff(&c.EventTimeout, DefaultEventTimeout)
	limits.Default(&c.MaxResponseBytes, DefaultMaxResponseBytes)
	limits.DefaultOrOff(&c.PoolSize, DefaultPoolSize)
	limits.DefaultOrOff(&c.CacheBytes, DefaultCacheBytes)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Engine is a wazero runtime with the wasmkeep and WASI host modules, and a
// second one, made when first needed, for modules that must be interrupted
// by wazero's own checks (Config.WazeroInterrupt, or a module
// wasmrw.AddInterrupt refuses).
type Engine struct {
	cfg Config
	// rt runs every module: without wazero's interruption checks, unless
	// WazeroInterrupt says otherwise.
	rt wazero.Runtime
	// checked is a runtime with wazero's checks on (WithCloseOnContextDone)
	// for modules the engine cannot instrument; nil until one comes.
	// Guarded by checkedMu.
	checked   wazero.Runtime
	checkedMu sync.Mutex
	provided  map[string]map[string]bool // module → function names the host provides
	clock     clock.Clock

	// addInterrupt is wasmrw.AddInterrupt; a test replaces it on its own
	// engine to see a refusal.
	addInterrupt func([]byte) ([]byte, error)

	mu      sync.Mutex
	live    map[*Instance]struct{} // instances the watchdog looks at
	closed  uint64                 // instances closed, for Stats
	classes map[*Class]struct{}    // closed with the engine
	// spareRestores counts restores into spare memories, for Stats.
	spareRestores atomic.Uint64

	stop chan struct{}
	done chan struct{}
}

// New creates an engine. Close it to release its compiled code.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:          cfg,
		clock:        cfg.Clock,
		addInterrupt: wasmrw.AddInterrupt,
		live:         map[*Instance]struct{}{},
		classes:      map[*Class]struct{}{},
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	if limits.IsOff(cfg.CacheBytes) {
		e.cfg.CacheDir = "" // no cache, as documented
	} else if cfg.CacheDir != "" {
		e.trimCache()
	}
	// The event timeout is enforced by a global the engine sets and the
	// guest checks at every loop header (wasmrw.AddInterrupt), not by
	// wazero's own checks, which cost a call out of the guest's code at
	// every loop back-edge and a goroutine per call (docs/PERFORMANCE.md).
	rt, err := e.newRuntime(ctx, cfg.EventTimeout > 0 && !cfg.ownInterrupt())
	if err != nil {
		return nil, err
	}
	e.rt = rt
	e.provided = map[string]map[string]bool{}
	for _, name := range []string{abi.WASIModule, abi.ImportModule} {
		fns := map[string]bool{}
		for fn := range e.rt.Module(name).ExportedFunctionDefinitions() {
			fns[fn] = true
		}
		e.provided[name] = fns
	}
	if cfg.EventTimeout > 0 {
		go e.watchdog()
	} else {
		close(e.done)
	}
	return e, nil
}

// ownInterrupt reports whether the event timeout is enforced with the
// engine's interrupt global rather than wazero's checks. Not on the
// interpreter: it reads globals in Go, so the watchdog's write would be a
// data race (the compiler's code reads them outside Go's memory model, as
// it reads memory the host writes).
func (c Config) ownInterrupt() bool { return !c.WazeroInterrupt && !c.Interpreter }

// checkedCacheDir is the subdirectory of Config.CacheDir that a runtime
// with wazero's interruption checks keeps its machine code in: wazero's
// cache key (v1.12) leaves the checks out, so the two kinds of code of one
// module must not share a directory.
const checkedCacheDir = "close-on-context-done"

// trimCache keeps the compilation cache under Config.CacheBytes. wazero
// writes a file for every module it compiles and removes none, so each
// class version a node ever ran would stay on its disk. The directories
// are wazero's, one per version of it (those an upgrade left included),
// in CacheDir and its checkedCacheDir. A failure costs only disk space:
// it is logged, and the node runs.
func (e *Engine) trimCache() {
	var dirs []string
	for _, parent := range []string{e.cfg.CacheDir, filepath.Join(e.cfg.CacheDir, checkedCacheDir)} {
		found, _ := filepath.Glob(filepath.Join(parent, "wazero-*")) // the pattern is valid
		dirs = append(dirs, found...)
	}
	t, err := cachedir.Trim(dirs, e.cfg.CacheBytes, e.clock.Wall())
	if err != nil {
		e.cfg.Logger.Warn("engine: could not trim the compilation cache", "dir", e.cfg.CacheDir, "err", err)
		return
	}
	if t.Removed > 0 {
		e.cfg.Logger.Info("compilation cache trimmed: the least recently used machine code removed", "dir", e.cfg.CacheDir,
			"removed", t.Removed, "freed_mib", t.Freed>>20, "kept", t.Files-t.Removed, "kept_mib", (t.Bytes-t.Freed)>>20)
	}
}

// newRuntime makes a wazero runtime with the host modules, with wazero's
// interruption checks on or off.
func (e *Engine) newRuntime(ctx context.Context, checked bool) (wazero.Runtime, error) {
	cfg := e.cfg
	rc := wazero.NewRuntimeConfigCompiler()
	if cfg.Interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	rc = rc.WithCloseOnContextDone(checked).WithMemoryLimitPages(cfg.MaxMemoryPages)
	if dir := cfg.CacheDir; dir != "" {
		if checked {
			dir = filepath.Join(dir, checkedCacheDir)
		}
		cache, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return nil, fmt.Errorf("engine: compilation cache: %w", err)
		}
		rc = rc.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("engine: wasi: %w", err)
	}
	if err := e.instantiateHostModule(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return rt, nil
}

// checkedRuntime returns the runtime with wazero's interruption checks,
// making it on first use.
func (e *Engine) checkedRuntime(ctx context.Context) (wazero.Runtime, error) {
	if !e.cfg.ownInterrupt() || e.cfg.EventTimeout <= 0 {
		return e.rt, nil // e.rt has the checks, or none are wanted
	}
	e.checkedMu.Lock()
	defer e.checkedMu.Unlock()
	if e.checked == nil {
		rt, err := e.newRuntime(ctx, true)
		if err != nil {
			return nil, err
		}
		e.checked = rt
	}
	return e.checked, nil
}

// Close stops the engine, its classes and every instance it made.
func (e *Engine) Close(ctx context.Context) error {
	close(e.stop)
	<-e.done
	e.mu.Lock()
	// wazero's checks end a running call when its module is closed; the
	// engine's own check needs its global set.
	for inst := range e.live {
		if inst.callStart.Load() != 0 {
			inst.interruptCall()
		}
	}
	classes := e.classes
	e.classes = nil
	e.mu.Unlock()
	for c := range classes {
		c.Close()
	}
	e.checkedMu.Lock()
	checked := e.checked
	e.checked = nil
	e.checkedMu.Unlock()
	if checked != nil {
		checked.Close(ctx)
	}
	return e.rt.Close(ctx)
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// nanotime is the host's monotonic clock, in nanoseconds. Guest clocks are
// offsets from it.
func (e *Engine) nanotime() int64 { return e.clock.Now() }

// walltime is the host's wall clock in wazero's form, for guests.
func (e *Engine) walltime() (sec int64, nsec int32) {
	w := e.clock.Wall()
	return w.Unix(), int32(w.Nanosecond())
}

// watchdog interrupts calls that overrun the event timeout. Instances mark
// the start of each call in an atomic; the watchdog reads them on a tick, so
// a call costs one clock read and one store, not a timer.
func (e *Engine) watchdog() {
	defer close(e.done)
	tick := min(max(e.cfg.EventTimeout/20, 5*time.Millisecond), 250*time.Millisecond)
	t := e.clock.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C():
		}
		now := e.nanotime()
		limit := int64(e.cfg.EventTimeout)
		e.mu.Lock()
		for inst := range e.live {
			if s := inst.callStart.Load(); s != 0 && !inst.waiting.Load() && now-s > limit {
				inst.interruptCall()
			}
		}
		e.mu.Unlock()
	}
}

func (e *Engine) track(i *Instance) {
	e.mu.Lock()
	e.live[i] = struct{}{}
	e.mu.Unlock()
}

func (e *Engine) untrack(i *Instance) {
	e.mu.Lock()
	delete(e.live, i)
	e.closed++
	e.mu.Unlock()
}

// ModuleError is a module refused at upload; its message is meant for the
// person who uploaded it.
type ModuleError struct{ Reason string }

func (e *ModuleError) Error() string { return "invalid module: " + e.Reason }

// ErrInvalidModule matches every *ModuleError with errors.Is.
var ErrInvalidModule = errors.New("engine: invalid module")

// Is makes errors.Is(err, ErrInvalidModule) true for module errors.
func (e *ModuleError) Is(target error) bool { return target == ErrInvalidModule }

func refuse(format string, args ...any) error {
	return &ModuleError{Reason: fmt.Sprintf(format, args...)}
}

// Class is a compiled, validated module. Rooms of a class share its code;
// each room has its own instance.
type Class struct {
	e *Engine
	// Hash is "sha256:<hex>" of the uploaded bytes.
	Hash string
	// ABI is the ABI version the module declared.
	ABI int
	// Size is the uploaded module's size in bytes.
	Size int

	// rt is the runtime the class was compiled on (Engine.rt, or
	// Engine.checked for a module without the engine's interrupt check).
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	// interrupt: the module has the engine's interrupt check
	// (wasmrw.AddInterrupt) and its global, which no snapshot holds.
	interrupt bool
	info      *wasmrw.Info
	globals   []string // export names of every defined global, in order
	mutable   []bool
	has       [numEvents]bool

	// initial is a blank instance's memory: snapshots leave out the chunks
	// that still equal it, since a restore starts from a blank instance.
	initial   []byte
	basePages []uint64 // the page hashes of initial
	dirty     []bool   // page i of initial holds non-zero bytes
	dirtyOnce sync.Once

	// memoryHint is the memory size, in bytes, the class's rooms had at
	// their latest restore or capture; new instances reserve that much.
	memoryHint atomic.Uint64

	pool     chan *Instance
	refill   chan struct{}
	closed   chan struct{}
	closeOne sync.Once
	filling  sync.WaitGroup // the pool's filler goroutine

	// uses counts the instances handed out by Start and Restore and not
	// yet closed; retiredUses (-1) marks a class that Retire closed.
	uses atomic.Int64
	// onIdle, if set, runs when uses falls to zero (SetIdleHook).
	onIdle atomic.Pointer[func()]
}

// retiredUses is the value of Class.uses once the class is retired.
const retiredUses = -1

// ErrRetired: the class was retired (closed because nothing used it) after
// the caller got it; ask the registry for the version again.
var ErrRetired = errors.New("engine: class version retired")

// Handles reports whether the class exports a handler for the event kind.
func (c *Class) Handles(k Event) bool { return c.has[k] }

// Event names an event kind a class may handle.
type Event int

// Event kinds, one per guest export.
const (
	EventRequest Event = iota
	EventSocketOpen
	EventSocketMessage
	EventSocketClose
	EventJoin
	EventChannelMessage
	EventLeave
	EventSocketMessages // optional: a batch of one socket's messages
	EventUpgrade        // optional: hand the room's state to a newer version
	EventStartFrom      // optional: start from an older version's state
	EventIdle           // optional: the call a guest asked for once its room is idle
	EventCall           // optional: another room calls this one
	EventAlarm          // optional: the room's alarm is due
	numEvents
)

var eventExports = [numEvents]string{
	abi.ExportOnRequest, abi.ExportOnSocketOpen, abi.ExportOnSocketMessage, abi.ExportOnSocketClose,
	abi.ExportOnJoin, abi.ExportOnChannelMessage, abi.ExportOnLeave, abi.ExportOnSocketMessages,
	abi.ExportOnUpgrade, abi.ExportOnStartFrom, abi.ExportOnIdle, abi.ExportOnCall,
	abi.ExportOnAlarm,
}

// Hash returns the content hash wasmkeep uses for a module's bytes.
func Hash(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Compile validates, rewrites and compiles a module. Every refusal is a
// *ModuleError that says what is wrong in terms the uploader can act on.
func (e *Engine) Compile(ctx context.Context, wasm []byte) (*Class, error) {
	out, info, err := wasmrw.Rewrite(wasm)
	if err != nil {
		// The uploader reads the reason; the package is for logs.
		return nil, &ModuleError{Reason: strings.TrimPrefix(err.Error(), "wasmrw: ")}
	}
	version, err := declaredABI(info)
	if err != nil {
		return nil, err
	}
	if err := e.checkImports(info); err != nil {
		return nil, err
	}
	exports := map[string]wasmrw.Export{}
	for _, x := range info.Exports {
		exports[x.Name] = x
	}
	if x, ok := exports[abi.ExportAlloc]; !ok || x.Kind != wasmrw.KindFunc {
		return nil, refuse("the module does not export the function %s (the guest SDK provides it)", abi.ExportAlloc)
	}
	rt, interrupt := e.rt, false
	if e.cfg.EventTimeout > 0 && e.cfg.ownInterrupt() {
		if instrumented, err := e.addInterrupt(out); err == nil {
			out, interrupt = instrumented, true
		} else {
			// Valid modules AddInterrupt does not decode run with
			// wazero's checks; invalid ones fail to compile there.
			e.cfg.Logger.Warn("engine: module interrupted by wazero's checks", "err", err)
			if rt, err = e.checkedRuntime(ctx); err != nil {
				return nil, err
			}
		}
	}
	cctx := experimental.WithCompilationWorkers(ctx, 2)
	compiled, err := rt.CompileModule(cctx, out)
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &pathErr):
		// The compilation cache could not be read or written (a full
		// disk, say): the node's failure, not the module's.
		return nil, fmt.Errorf("engine: compiling: %w", err)
	case err != nil:
		return nil, refuse("%v", err)
	}
	c := &Class{
		e:         e,
		Hash:      Hash(wasm),
		ABI:       version,
		Size:      len(wasm),
		rt:        rt,
		compiled:  compiled,
		interrupt: interrupt,
		info:      info,
		closed:    make(chan struct{}),
	}
	for _, g := range info.Globals {
		c.globals = append(c.globals, g.ExportName)
		c.mutable = append(c.mutable, g.Mutable)
	}
	fns := compiled.ExportedFunctions()
	for k, name := range eventExports {
		c.has[k] = fns[name] != nil
	}
	if err := c.checkSignatures(fns); err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	// Instantiating once proves the imports link (signatures included) and
	// gives the pool its first instance.
	inst, err := c.instantiate(ctx)
	if err != nil {
		compiled.Close(ctx)
		return nil, refuse("%v", err)
	}
	c.markDirty(inst)
	e.mu.Lock()
	if e.classes == nil {
		e.mu.Unlock()
		inst.Close()
		return nil, errors.New("engine: closed")
	}
	e.classes[c] = struct{}{}
	e.mu.Unlock()
	if n := e.cfg.PoolSize; n > 0 {
		c.pool = make(chan *Instance, n)
		c.refill = make(chan struct{}, 1)
		c.pool <- inst
		c.filling.Add(1)
		go c.filler()
		c.refill <- struct{}{}
	} else {
		inst.Close()
	}
	return c, nil
}

// declaredABI finds the version marker export.
func declaredABI(info *wasmrw.Info) (int, error) {
	found := -1
	for _, x := range info.Exports {
		rest, ok := strings.CutPrefix(x.Name, abi.VersionExportPrefix)
		if !ok {
			continue
		}
		v, err := strconv.Atoi(rest)
		if err != nil || v <= 0 {
			return 0, refuse("export %q is not a valid ABI version marker", x.Name)
		}
		if found != -1 && found != v {
			return 0, refuse("the module declares two ABI versions (%d and %d)", found, v)
		}
		found = v
	}
	switch {
	case found == -1:
		return 0, refuse("the module declares no wasmkeep ABI version (export a function named %s; the guest SDK does)", abi.VersionExport)
	case found != abi.Version:
		return 0, refuse("the module was built for wasmkeep ABI v%d; this host speaks v%d", found, abi.Version)
	}
	return found, nil
}

func (e *Engine) checkImports(info *wasmrw.Info) error {
	var missing []string
	for _, im := range info.Imports {
		name := im.Module + "." + im.Name
		if im.Kind != wasmrw.KindFunc {
			return refuse("the module imports %s (%s); only functions can be imported", name, im.Kind)
		}
		if !e.provided[im.Module][im.Name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	for i, m := range missing {
		if name, ok := strings.CutPrefix(m, abi.ImportModule+"."); ok && slices.Contains(abi.ReservedImports, name) {
			missing[i] = m + " (reserved for a later ABI minor version)"
		}
	}
	return refuse("the module imports functions this host does not provide: %s", strings.Join(missing, ", "))
}

// checkSignatures refuses handler exports whose types differ from the ABI,
// so a mistake shows at upload rather than as a crash on the first event.
func (c *Class) checkSignatures(fns map[string]api.FunctionDefinition) error {
	i32 := api.ValueTypeI32
	want := map[string][2][]api.ValueType{
		abi.ExportAlloc:            {{i32}, {i32}},
		abi.ExportOnRequest:        {{i32, i32}, nil},
		abi.ExportOnSocketOpen:     {{i32, i32, i32}, nil},
		abi.ExportOnSocketMessage:  {{i32, i32, i32, i32}, nil},
		abi.ExportOnSocketMessages: {{i32, i32, i32}, nil},
		abi.ExportOnSocketClose:    {{i32, i32, i32, i32}, nil},
		abi.ExportOnJoin:           {{i32, i32, i32}, nil},
		abi.ExportOnChannelMessage: {{i32, i32, i32}, nil},
		abi.ExportOnLeave:          {{i32, i32, i32}, nil},
		abi.ExportOnUpgrade:        {nil, nil},
		abi.ExportOnStartFrom:      {{i32, i32}, nil},
		abi.ExportOnIdle:           {nil, nil},
		abi.ExportOnCall:           {{i32, i32}, nil},
		abi.ExportOnAlarm:          {{i32, i32}, nil},
		abi.ExportInitialize:       {nil, nil},
	}
	for name, sig := range want {
		fn := fns[name]
		if fn == nil {
			continue
		}
		if !slices.Equal(fn.ParamTypes(), sig[0]) || !slices.Equal(fn.ResultTypes(), sig[1]) {
			return refuse("export %s has type %s, the ABI says %s", name,
				sigString(fn.ParamTypes(), fn.ResultTypes()), sigString(sig[0], sig[1]))
		}
	}
	return nil
}

func sigString(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	return name(params) + " -> " + name(results)
}

// markDirty keeps a blank instance's memory and records which of its chunks
// are not zero, so a restore clears only those where the snapshot has zeros.
func (c *Class) markDirty(inst *Instance) {
	c.dirtyOnce.Do(func() {
		view, _ := inst.mem.Read(0, inst.mem.Size())
		c.initial = bytes.Clone(view)
		c.basePages = snapshot.HashPages(c.initial)
		c.dirty = make([]bool, (len(view)+pageSize-1)/pageSize)
		for i := range c.dirty {
			end := min((i+1)*pageSize, len(view))
			c.dirty[i] = !isZero(view[i*pageSize : end])
		}
	})
}

func (c *Class) isDirty(page int) bool { return page < len(c.dirty) && c.dirty[page] }

// blank returns an instantiated instance on which nothing has run, from the
// pool when one is ready.
func (c *Class) blank(ctx context.Context) (*Instance, error) {
	if c.pool != nil {
		select {
		case inst := <-c.pool:
			select {
			case c.refill <- struct{}{}:
			default:
			}
			return inst, nil
		default:
			select {
			case c.refill <- struct{}{}:
			default:
			}
		}
	}
	return c.instantiate(ctx)
}

// filler keeps the pool full in the background.
func (c *Class) filler() {
	defer c.filling.Done()
	for {
		select {
		case <-c.closed:
			return
		case <-c.refill:
		}
		for len(c.pool) < cap(c.pool) {
			inst, err := c.instantiate(context.Background())
			if err != nil {
				c.e.cfg.Logger.Warn("engine: pool instantiate failed", "class", c.Hash, "err", err)
				break
			}
			select {
			case c.pool <- inst:
			case <-c.closed:
				inst.Close()
				return
			}
		}
	}
}

// Close releases the class: its pool of blank instances and the goroutine
// that fills it, its memory image, and its compiled code (wazero keeps the
// machine code of instances still running until they are closed).
// Instances already created keep working until closed; new ones cannot be
// made.
func (c *Class) Close() {
	c.closeOne.Do(func() {
		close(c.closed)
		c.filling.Wait() // it may have been putting one more in the pool
		if c.pool != nil {
			for {
				select {
				case inst := <-c.pool:
					inst.Close()
					continue
				default:
				}
				break
			}
		}
		c.releaseMemoryImage()
		_ = c.compiled.Close(context.Background())
		c.e.mu.Lock()
		if c.e.classes != nil {
			delete(c.e.classes, c)
		}
		c.e.mu.Unlock()
	})
}

// SetIdleHook makes f run whenever the last instance handed out by Start
// or Restore is closed (on the goroutine that closes it), so that a class
// registry can retire versions nothing runs any more.
func (c *Class) SetIdleHook(f func()) { c.onIdle.Store(&f) }

// InUse counts the instances handed out by Start and Restore and not yet
// closed (0 for a retired class).
func (c *Class) InUse() int { return int(max(c.uses.Load(), 0)) }

// Retire closes the class if no instance it handed out is open, and
// reports whether it did; from then on Start and Restore fail with
// ErrRetired. A class in use is left as it is.
func (c *Class) Retire() bool {
	if !c.uses.CompareAndSwap(0, retiredUses) {
		return false
	}
	c.Close()
	return true
}

// use counts a new instance handed out, unless the class is retired.
func (c *Class) use() error {
	for {
		n := c.uses.Load()
		if n == retiredUses {
			return ErrRetired
		}
		if c.uses.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// unuse counts an instance handed out as closed.
func (c *Class) unuse() {
	if c.uses.Add(-1) == 0 {
		if f := c.onIdle.Load(); f != nil {
			(*f)()
		}
	}
}

// Stats describes an engine's state for metrics.
type Stats struct {
	LiveInstances int
	// Classes counts the module versions compiled and not closed.
	Classes int
	// ClosedInstances counts the instances closed since the engine
	// started: each one's memory was freed (its linear memory unmapped or
	// kept as a spare, its Go structures left to the garbage collector).
	ClosedInstances uint64
	// Spares counts the memories of closed instances kept for restores
	// to write into, and SpareRestores the restores from segments made
	// into one (spare_linux.go).
	Spares        int
	SpareRestores uint64
}

// Stats returns counts for metrics.
func (e *Engine) Stats() Stats {
	spares := e.spares()
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{LiveInstances: len(e.live), Classes: len(e.classes), ClosedInstances: e.closed,
		Spares: spares, SpareRestores: e.spareRestores.Load()}
}
