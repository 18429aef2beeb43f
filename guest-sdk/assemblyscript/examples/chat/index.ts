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
