// Replacements for the three functions AssemblyScript's standard library
// imports from the JavaScript "env" module (abort, trace, seed), which a
// wasmkeep host does not provide. asconfig.json adds this directory as a
// library, which makes these exports globals, and aliases the standard
// names to them with "use". Nothing here is called by a room directly.

// @ts-ignore: decorator
@external("wasmkeep", "log")
declare function wasmkeep_log(level: i32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "random_get")
declare function wasi_random_get(buf: usize, len: usize): u16;

function logText(level: i32, s: string): void {
  let b = String.UTF8.encode(s, false, String.UTF8.ErrorMode.REPLACE);
  wasmkeep_log(level, changetype<usize>(b), <usize>b.byteLength);
}

/**
 * abort (failed assertions, throw, array bounds, out of memory) logs its
 * message at error level and traps, so that the host discards the instance
 * and rolls the room back to its last snapshot, as it does for a Go panic.
 */
export function __wasmkeep_abort(
  message: string | null = null,
  fileName: string | null = null,
  line: u32 = 0,
  column: u32 = 0,
): void {
  // Allocating may itself fail (an abort for lack of memory); the trap
  // below is what matters, the log line is best effort.
  let s = "abort: " + (message === null ? "" : message);
  if (fileName !== null) s += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  logText(3, s);
  unreachable();
}

/** trace logs at debug level. */
export function __wasmkeep_trace(
  message: string,
  n: i32 = 0,
  a0: f64 = 0,
  a1: f64 = 0,
  a2: f64 = 0,
  a3: f64 = 0,
  a4: f64 = 0,
): void {
  let s = "trace: " + message;
  if (n > 0) s += " " + a0.toString();
  if (n > 1) s += " " + a1.toString();
  if (n > 2) s += " " + a2.toString();
  if (n > 3) s += " " + a3.toString();
  if (n > 4) s += " " + a4.toString();
  logText(0, s);
}

/**
 * seed seeds Math.random from the host's randomness (crypto/rand). The
 * generator's state then lives in the room's memory: like Go's math/rand,
 * two wakes of one snapshot draw the same numbers.
 */
export function __wasmkeep_seed(): f64 {
  let buf = memory.data(8);
  if (wasi_random_get(buf, 8) != 0) return 1;
  return reinterpret<f64>((load<u64>(buf) >> 12) | 0x3FF0000000000000);
}
