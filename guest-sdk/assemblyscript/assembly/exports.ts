// The exports of wasmkeep ABI v1 (docs/abi.md, "Exports"). A room's entry
// file re-exports them, since only an entry file's exports become the
// module's:
//
//	export * from "wasmkeep-assemblyscript/exports";
//
// The SDK always exports every event entry point, like the Go SDK, so the
// host accepts WebSockets and Phoenix sockets for every class built with
// it; events without a registered handler are ignored (a request gets 404,
// a join is refused, an upgrade hands over no state, a start from an
// older version's takes none over, and a call gets no reply, which the
// host answers to the caller as Status.NotFound).

import * as host from "./host";
import { Reader, out, readCall } from "./records";
import * as state from "./state";
import {
  Alarm, Caller, ChannelMessage, Join, Message, MessageKind, Request, Response, Socket, SocketOpen, Reply,
  error, text, statusText,
} from "./index";

/** The version marker: the host reads its name and never calls it. */
export function wasmkeep_abi_v1(): void {}

// inbox is the one region wasmkeep_alloc hands out; the host writes every
// event's payload into it and may reuse it for every later payload that
// fits, until it calls wasmkeep_alloc again. It is a managed ArrayBuffer
// held by this global, so the collector keeps it, and a message's data is
// a view of it rather than a copy. It only grows.
let inbox: ArrayBuffer | null = null;

/** Returns a region of at least size bytes (see inbox). */
export function wasmkeep_alloc(size: u32): usize {
  let cur = inbox;
  if (cur === null || <u32>cur.byteLength < size) {
    let have = cur === null ? 0 : <u32>cur.byteLength;
    let n = max(max(size, have << 1), <u32>1024);
    cur = new ArrayBuffer(<i32>n);
    inbox = cur;
  }
  return changetype<usize>(cur);
}

/** A view of the len payload bytes at ptr (in the inbox, as the ABI has it). */
function view(ptr: usize, len: u32): Uint8Array {
  let cur = inbox;
  if (len == 0) return new Uint8Array(0);
  if (cur !== null) {
    let start = changetype<usize>(cur);
    if (ptr >= start && ptr + <usize>len <= start + <usize>cur.byteLength) {
      return Uint8Array.wrap(cur, <i32>(ptr - start), <i32>len);
    }
  }
  // Not where the ABI says payloads are: copy rather than alias.
  let b = new Uint8Array(<i32>len);
  memory.copy(b.dataStart, ptr, len);
  return b;
}

// With the minimal runtime, garbage is collected only when the program
// asks, and only when nothing of the guest's is on the stack: between
// events. The SDK collects at the end of every collectEvery-th event, and
// at the end of any event during which the memory grew (the heap ran out of
// free blocks: collecting now lets the next events reuse what is garbage
// rather than grow the memory again). A collection marks every live
// object, so collecting after every event would cost the most for the
// rooms with the most state. The incremental runtime collects by itself as
// it allocates.
const collectEvery = 64;
let eventsSinceCollect = 0;
let pagesAtCollect: i32 = 0;

function endEvent(): void {
  if (ASC_RUNTIME != 1) return;
  eventsSinceCollect++;
  if (eventsSinceCollect < collectEvery && memory.size() == pagesAtCollect) return;
  __collect();
  eventsSinceCollect = 0;
  pagesAtCollect = memory.size();
}

function respond(r: Response): void {
  let to = state.handOverTo;
  state.clearHandOver();
  if (r === state.handOverResponse && to !== null) {
    // The handler returned handOver's answer: hand the socket over
    // instead of responding. If the host refuses (this is not a front's
    // upgrade), the stand-in Response goes out: a 500 saying so.
    to.put();
    let st = host.http_hand_over(out.ptr(), out.len());
    if (st >= 0) return;
    error("wasmkeep: http_hand_over: " + statusText(st));
  }
  let status = r.status == 0 ? 200 : r.status;
  out.reset();
  out.putU32(<u32>status);
  out.headers(r.headers);
  let st = r.bodyStatic;
  let t = r.bodyText;
  let b = r.body;
  if (st !== null) {
    out.span(changetype<usize>(st), <usize>st.length);
  } else if (t !== null) {
    out.str(t);
  } else if (b !== null) {
    out.bytes(b);
  } else {
    out.putU32(0);
  }
  let res = host.http_respond(out.ptr(), out.len());
  if (res < 0) error("wasmkeep: http_respond: " + statusText(res));
}

export function wasmkeep_on_request(ptr: usize, len: u32): void {
  let rd = new Reader(ptr, len);
  let req = new Request();
  req.method = rd.str();
  req.path = rd.str();
  req.query = rd.str();
  req.headers = rd.headers();
  req.body = rd.bytes();
  if (!rd.finish()) {
    error("wasmkeep: malformed request record from the host");
    respond(text(500, "malformed request record"));
    endEvent();
    return;
  }
  let h = state.onRequest;
  let resp: Response | null;
  if (h === null) {
    resp = text(404, "no request handler");
  } else {
    resp = h(req);
    if (resp === null) resp = text(500, "handler returned no response");
  }
  respond(resp);
  endEvent();
}

export function wasmkeep_on_socket_open(socket: u32, ptr: usize, len: u32): void {
  let rd = new Reader(ptr, len);
  let o = new SocketOpen();
  o.path = rd.str();
  o.query = rd.str();
  o.headers = rd.headers();
  o.remote = rd.str();
  if (!rd.finish()) {
    error("wasmkeep: malformed socket open record from the host");
  } else {
    let h = state.onSocketOpen;
    if (h !== null) h(new Socket(socket), o);
  }
  endEvent();
}

export function wasmkeep_on_socket_message(socket: u32, kind: i32, ptr: usize, len: u32): void {
  let h = state.onSocketMessage;
  if (h !== null) h(new Socket(socket), new Message(<MessageKind>kind, view(ptr, len)));
  endEvent();
}

/**
 * Several messages of one socket in one call (docs/abi.md,
 * wasmkeep_on_socket_messages): each is kind (u8), length (u32 LE) and
 * bytes, handed to the handler one by one as if each had come alone.
 */
export function wasmkeep_on_socket_messages(socket: u32, ptr: usize, len: u32): void {
  let h = state.onSocketMessage;
  if (h !== null) {
    let s = new Socket(socket);
    let pos = ptr;
    let end = ptr + <usize>len;
    while (pos < end) {
      if (end - pos < 5) {
        error("wasmkeep: malformed message batch from the host");
        break;
      }
      let kind = <i32>load<u8>(pos);
      let n = <usize>load<u32>(pos + 1);
      pos += 5;
      if (n > end - pos || (kind != <i32>MessageKind.Text && kind != <i32>MessageKind.Binary)) {
        error("wasmkeep: malformed message batch from the host");
        break;
      }
      h(s, new Message(<MessageKind>kind, view(pos, <u32>n)));
      pos += n;
    }
  }
  endEvent();
}

export function wasmkeep_on_socket_close(socket: u32, code: i32, ptr: usize, len: u32): void {
  let h = state.onSocketClose;
  if (h !== null) h(new Socket(socket), code, len == 0 ? "" : String.UTF8.decodeUnsafe(ptr, len));
  endEvent();
}

function reply(r: Reply): void {
  out.reset();
  out.utf8(r.body);
  let st = host.channel_reply(r.error ? 1 : 0, out.ptr(), out.len());
  if (st < 0) error("wasmkeep: channel_reply: " + statusText(st));
}

export function wasmkeep_on_join(socket: u32, ptr: usize, len: u32): void {
  let rd = new Reader(ptr, len);
  let j = new Join();
  j.topic = rd.str();
  j.payload = rd.text();
  if (!rd.finish()) {
    error("wasmkeep: malformed join record from the host");
    endEvent();
    return;
  }
  let h = state.onJoin;
  if (h === null) {
    reply(new Reply(true, '{"reason":"this room serves no channels"}'));
  } else {
    let r = h(new Socket(socket), j);
    if (r !== null) reply(r);
  }
  endEvent();
}

export function wasmkeep_on_channel_message(socket: u32, ptr: usize, len: u32): void {
  let rd = new Reader(ptr, len);
  let m = new ChannelMessage();
  m.topic = rd.str();
  m.event = rd.str();
  let flag = rd.u8();
  m.binary = flag == 1;
  m.data = rd.bytes();
  if (flag > 1 || !rd.finish()) {
    error("wasmkeep: malformed channel message record from the host");
    endEvent();
    return;
  }
  let h = state.onChannelMessage;
  if (h !== null) {
    let r = h(new Socket(socket), m);
    if (r !== null) reply(r);
  }
  endEvent();
}

export function wasmkeep_on_leave(socket: u32, ptr: usize, len: u32): void {
  let rd = new Reader(ptr, len);
  let topic = rd.str();
  let reason = rd.str();
  if (!rd.finish()) {
    error("wasmkeep: malformed leave record from the host");
  } else {
    let h = state.onLeave;
    if (h !== null) h(new Socket(socket), topic, reason);
  }
  endEvent();
}

/**
 * Hands the room's state to its next version, if the room offers one
 * (handleUpgrade); returning without a call to upgrade_state offers none,
 * and the room stays on this version. The host drops this instance
 * afterwards whatever happens, so there is nothing to collect.
 */
export function wasmkeep_on_upgrade(): void {
  let h = state.onUpgrade;
  if (h === null) return;
  let b = h();
  if (b === null) return;
  let st = host.upgrade_state(b.dataStart, <usize>b.byteLength);
  if (st < 0) error("wasmkeep: upgrade_state: " + statusText(st));
}

/**
 * Starts this version from an older one's state (handleStartFrom). The
 * state is a copy the handler may keep, and the version takes it over
 * only if the handler returns: without one, upgrade_accept is never
 * called and the room stays on the older version.
 */
export function wasmkeep_on_start_from(ptr: usize, len: u32): void {
  let h = state.onStartFrom;
  if (h === null) return;
  let rd = new Reader(ptr, len);
  let from = rd.str();
  let prev = rd.bytes();
  if (!rd.finish()) {
    error("wasmkeep: malformed start-from record from the host");
    return;
  }
  h(prev, from);
  let st = host.upgrade_accept();
  if (st < 0) error("wasmkeep: upgrade_accept: " + statusText(st));
  endEvent();
}

/**
 * A call from another room or a front (handleCall). The handler's answer
 * is the reply; without a handler none is given, and the host answers the
 * caller Status.NotFound, as for a class that takes no calls. The SDK
 * exports this function whatever the room registers (as the Go SDK does),
 * since a room registers handlers at run time and the exports are fixed
 * when the module is built.
 */
export function wasmkeep_on_call(ptr: usize, len: u32): void {
  let c = readCall(ptr, len);
  if (c === null) {
    error("wasmkeep: malformed call record from the host");
    endEvent();
    return;
  }
  let h = state.onCall;
  if (h !== null) {
    let reply = h(new Caller(c.className, c.name), c.payload);
    let st = host.call_reply(reply.dataStart, <usize>reply.byteLength);
    if (st < 0) error("wasmkeep: call_reply: " + statusText(st));
  }
  endEvent();
}

/**
 * The room's alarm is due (handleAlarm): an AlarmEvent record, the time
 * it was set for (i64) and the failed runs before this one (u32).
 * Exported whatever the room registers, as wasmkeep_on_call is.
 */
export function wasmkeep_on_alarm(ptr: usize, len: u32): void {
  if (len != 12) {
    error("wasmkeep: malformed alarm record from the host");
    endEvent();
    return;
  }
  let h = state.onAlarm;
  if (h !== null) h(new Alarm(load<i64>(ptr), <i32>load<u32>(ptr + 8)));
  endEvent();
}
