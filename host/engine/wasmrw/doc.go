// Package wasmrw parses and rewrites WebAssembly binary modules so that a
// wazero instance can be hibernated and restored.
//
// A room is hibernated by saving its linear memory and every global, and
// restored by instantiating the same module afresh, writing the memory back
// and setting the globals. Two things in a module stand in the way:
//
//   - wazero lets the host read and set only exported globals
//     (api.MutableGlobal), while compilers keep their state (stack pointer,
//     heap pointers, the Go runtime's registers) in unexported globals;
//   - a start section runs on every instantiation, including a restore,
//     where it would clobber the state being restored.
//
// So at upload the host runs Rewrite once. The rewritten module exports every
// defined global as "__wk_g<N>" (N is the defined-global index, counted after
// imported globals), exports memory 0 as "__wk_mem", and has no start section:
// the former start function is exported as "__wk_start", for a cold start to
// call explicitly (before "_initialize").
//
// Rewrite also lifts the active data segments out of the module when each
// writes memory 0 at a constant offset inside its initial size (Info.Data):
// the host writes them itself, which lets it share a class's initial memory
// between its instances (copy-on-write) instead of having wazero copy the
// segments into every instance, and spares wazero a slice entry per
// segment in every instance (a Go module has tens of thousands). The data
// section is left out if the module has no data count section (no
// instruction can then name a segment), or else keeps every segment with
// the active ones emptied, so that segment indices stay valid.
//
// Every other section is copied byte for byte; only the export and data
// sections are re-encoded.
//
// AddInterrupt is a second, optional rewrite of Rewrite's output, done at
// compile time rather than at upload: one more global (InterruptExport)
// and a check of it at the start of every loop body, so that a host can stop
// a running guest by setting the global instead of having wazero check for a
// closed module at every loop back-edge. It decodes every instruction.
//
// Names starting with "__wk_" are reserved: a module that already exports
// one is refused. Rewrite also refuses what cannot be snapshotted (imported,
// shared, 64-bit or several memories, v128 globals, mutable reference-typed
// globals). Parse decodes without rewriting or applying those policies, for
// example to describe an already rewritten module.
//
// The decoder reads every count and length from untrusted input, so it checks
// each against the bytes that remain before allocating: memory use is
// proportional to the input size. It checks the same for every count that
// wazero's decoder (v1.12) trusts and pre-allocates from (types, function
// bodies and their locals, element and data segments, the "name" section):
// without that, a module of a few dozen bytes makes CompileModule allocate
// gigabytes. Run Rewrite before compiling an untrusted module. Beyond that,
// this package is not a validator: instructions in function bodies are not
// decoded, and typing is left to wazero.
package wasmrw
