// The chat example (examples/chat, in Go) written in AssemblyScript: the
// same protocol, the same page, and the same behaviour on the same host.
// Each room keeps the last 100 messages in memory (they survive
// hibernation with the rest of the room's memory) and relays every
// message to everyone in the room.
//
//	GET /actor/<class>/<name>        an HTML page that joins the room over a WebSocket
//	WebSocket /actor/<class>/<name>  on open, the history (oldest first), one text
//	                                 frame per message; then every text message
//	                                 any member sends, the sender's own included
//
// Binary messages are ignored; a message longer than 16 KiB closes its
// socket with 4009; other paths answer 404 (and their sockets are closed
// with 4004).
//
// When a new version of the class is uploaded, a room hands its history to
// it (handleUpgrade) and takes one over from an older version
// (handleStartFrom), in the Go chat's format: the "chat-history-1" tag, a
// count, then each message, lengths as u32 little-endian. So a class can
// move between this chat and the Go one in either direction, its rooms
// keeping their history and their sockets.
//
// Build it from guest-sdk/assemblyscript with:
//
//	npx asc examples/chat/index.ts --config asconfig.json -o chat.wasm

import * as wk from "../../index";
export * from "../../exports";
import { page } from "./page";

const maxHistory = 100;
const maxMessage = 16 << 10;

/**
 * The last maxHistory messages, oldest first, as the UTF-8 bytes they
 * arrived in: like the Go chat's strings, they go out again as they came,
 * with no conversion to AssemblyScript's UTF-16 strings and back.
 */
let history = new Array<Uint8Array>();

wk.handleRequest((r: wk.Request): wk.Response | null => {
  if (r.path != "/") return wk.text(404, "not found");
  if (r.method != "GET") return wk.text(405, "method not allowed").setHeader("Allow", "GET");
  return wk.staticData(200, "text/html; charset=utf-8", page).setHeader("Cache-Control", "no-cache");
});

wk.handleSocketOpen((s: wk.Socket, o: wk.SocketOpen): void => {
  if (o.path != "/") {
    s.close(4004, "not found");
    return;
  }
  for (let i = 0; i < history.length; i++) {
    // A failure means the socket is gone or overloaded; its close follows.
    if (s.sendUTF8(history[i]) < 0) return;
  }
});

wk.handleSocketMessage((s: wk.Socket, m: wk.Message): void => {
  if (!m.isText()) return;
  if (m.data.byteLength > maxMessage) {
    s.close(4009, "message too long");
    return;
  }
  // m.data is only valid during this event: keep a copy.
  let text = m.data.slice();
  if (history.length == maxHistory) history.shift();
  history.push(text);
  let n = wk.broadcastUTF8(text);
  if (n < 0) wk.warn("chat: broadcast: " + wk.statusText(n));
});

/** Tags the handoff (the Go chat's historyFormat). */
const historyFormat = "chat-history-1";

wk.handleUpgrade((): Uint8Array | null => {
  let tag = String.UTF8.encode(historyFormat);
  let size = tag.byteLength + 4;
  for (let i = 0; i < history.length; i++) size += 4 + history[i].byteLength;
  let b = new Uint8Array(size);
  b.set(Uint8Array.wrap(tag));
  let at = tag.byteLength;
  store<u32>(b.dataStart + <usize>at, <u32>history.length);
  at += 4;
  for (let i = 0; i < history.length; i++) {
    let m = history[i];
    store<u32>(b.dataStart + <usize>at, <u32>m.byteLength);
    b.set(m, at + 4);
    at += 4 + m.byteLength;
  }
  return b;
});

/**
 * Reads what handleUpgrade wrote, from this chat, the Go one or an older
 * version of either. A handoff it cannot read aborts, which fails the
 * upgrade: the room stays on its version with its history rather than
 * losing it. An older version may have kept more than maxHistory
 * messages; the newest are kept.
 */
wk.handleStartFrom((prev: Uint8Array, from: string): void => {
  let tag = String.UTF8.encode(historyFormat);
  let n = tag.byteLength;
  if (prev.byteLength < n + 4 || memory.compare(prev.dataStart, changetype<usize>(tag), <usize>n) != 0) {
    abort("chat: unknown handoff from " + from);
  }
  let count = load<u32>(prev.dataStart + <usize>n);
  let at = n + 4;
  let h = new Array<Uint8Array>();
  for (let i: u32 = 0; i < count; i++) {
    if (prev.byteLength - at < 4) abort("chat: truncated handoff from " + from);
    let size = <i32>load<u32>(prev.dataStart + <usize>at);
    at += 4;
    if (size < 0 || size > prev.byteLength - at) abort("chat: truncated handoff from " + from);
    h.push(prev.slice(at, at + size));
    at += size;
  }
  if (h.length > maxHistory) h = h.slice(h.length - maxHistory);
  history = h;
});
