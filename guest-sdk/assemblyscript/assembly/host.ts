// The host functions of wasmkeep ABI v1 (docs/abi.md), imported from the
// "wasmkeep" module. Every pointer is an address in this module's linear
// memory; every function answers a status: 0 or a count on success, a
// negative Status on failure. Internal to the SDK: use the functions of
// index.ts.

// @ts-ignore: decorator
@external("wasmkeep", "http_respond")
export declare function http_respond(ptr: usize, len: usize): i32;

// Only during a front's request for a WebSocket upgrade: hands the socket
// to the room a HandOver record names; no response follows.
// @ts-ignore: decorator
@external("wasmkeep", "http_hand_over")
export declare function http_hand_over(ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "socket_send")
export declare function socket_send(socket: u32, kind: i32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "socket_close")
export declare function socket_close(socket: u32, code: i32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "socket_list")
export declare function socket_list(ptr: usize, cap: u32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "broadcast")
export declare function broadcast(kind: i32, ptr: usize, len: usize, except: u32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "room_info")
export declare function room_info(ptr: usize, cap: u32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "secret_get")
export declare function secret_get(name: usize, nameLen: u32, buf: usize, cap: u32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "log")
export declare function log(level: i32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "checkpoint")
export declare function checkpoint(): i32;

// @ts-ignore: decorator
@external("wasmkeep", "state_delete")
export declare function state_delete(): i32;

// @ts-ignore: decorator
@external("wasmkeep", "upgrade_state")
export declare function upgrade_state(ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "upgrade_accept")
export declare function upgrade_accept(): i32;

// @ts-ignore: decorator
@external("wasmkeep", "alarm_set")
export declare function alarm_set(atMs: i64): i32;

// @ts-ignore: decorator
@external("wasmkeep", "alarm_clear")
export declare function alarm_clear(): i32;

// alarm_get writes the alarm's time (i64 LE) at ptr, or answers
// Status.NotFound.
// @ts-ignore: decorator
@external("wasmkeep", "alarm_get")
export declare function alarm_get(ptr: usize): i32;

// Calls between rooms. call_start takes a Call record naming the callee
// and answers a handle (1 or more) or a negative status; call_wait blocks
// until the call is answered; call_result copies the reply (or the host's
// message after an error) if it fits in cap and frees the handle,
// answering the length in either case; call_reply answers the call being
// handled (wasmkeep_on_call), once.

// @ts-ignore: decorator
@external("wasmkeep", "call_start")
export declare function call_start(ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "call_wait")
export declare function call_wait(handle: i32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "call_result")
export declare function call_result(handle: i32, ptr: usize, cap: u32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "call_reply")
export declare function call_reply(ptr: usize, len: usize): i32;

// Fetches: HTTP requests to other services. fetch_start takes a Fetch
// record (method, URL, headers, body) and answers a handle or a negative
// status; fetch_wait blocks until the answer (not counted toward the
// event time limit); fetch_result copies the Response record (or the
// host's message after an error) as call_result does.

// @ts-ignore: decorator
@external("wasmkeep", "fetch_start")
export declare function fetch_start(ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "fetch_wait")
export declare function fetch_wait(handle: i32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "fetch_result")
export declare function fetch_result(handle: i32, ptr: usize, cap: u32): i32;

// @ts-ignore: decorator
@external("wasmkeep", "channel_reply")
export declare function channel_reply(status: i32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "channel_push")
export declare function channel_push(socket: u32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "channel_broadcast")
export declare function channel_broadcast(except: u32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "channel_close")
export declare function channel_close(socket: u32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "presence_track")
export declare function presence_track(socket: u32, ptr: usize, len: usize): i32;

// @ts-ignore: decorator
@external("wasmkeep", "presence_untrack")
export declare function presence_untrack(socket: u32, ptr: usize, len: usize): i32;

// WASI preview 1, which every wasmkeep host provides: real clocks and
// randomness (docs/abi.md). Imported only by programs that use them.

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "clock_time_get")
export declare function clock_time_get(id: u32, precision: u64, out: usize): u16;

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "random_get")
export declare function random_get(buf: usize, len: usize): u16;
