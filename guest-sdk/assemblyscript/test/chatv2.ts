// The upgrade tests' second version of the chat example, in AssemblyScript:
// testdata/guests/chatv2 (Go) line for line. It takes over a chat room's
// history (the "chat-history-1" handoff both chat examples write, Go or
// AssemblyScript) and hands it on in the same format, and its new
// behaviour is visible: every message it relays is prefixed "v2: ",
// GET /version answers "v2", any other request the history, one message a
// line. A socket's open sends the history as the chat does. A handoff it
// cannot read aborts (the upgrade fails).

import * as wk from "../index";
export * from "../exports";

const tag = "chat-history-1";

let history = new Array<string>();

wk.handleRequest((r: wk.Request): wk.Response | null => {
  if (r.path == "/version") return wk.text(200, "v2");
  return wk.text(200, history.join("\n"));
});

wk.handleSocketOpen((s: wk.Socket, o: wk.SocketOpen): void => {
  for (let i = 0; i < history.length; i++) s.send(history[i]);
});

wk.handleSocketMessage((s: wk.Socket, m: wk.Message): void => {
  let text = "v2: " + m.text();
  history.push(text);
  wk.broadcast(text);
});

wk.handleUpgrade((): Uint8Array | null => {
  let parts = new Array<ArrayBuffer>();
  let size = 4;
  for (let i = 0; i < history.length; i++) {
    let b = String.UTF8.encode(history[i]);
    parts.push(b);
    size += 4 + b.byteLength;
  }
  let t = String.UTF8.encode(tag);
  let out = new Uint8Array(t.byteLength + size);
  out.set(Uint8Array.wrap(t));
  let at = t.byteLength;
  store<u32>(out.dataStart + <usize>at, <u32>parts.length);
  at += 4;
  for (let i = 0; i < parts.length; i++) {
    let b = Uint8Array.wrap(parts[i]);
    store<u32>(out.dataStart + <usize>at, <u32>b.byteLength);
    out.set(b, at + 4);
    at += 4 + b.byteLength;
  }
  return out;
});

wk.handleStartFrom((prev: Uint8Array, from: string): void => {
  let t = String.UTF8.encode(tag);
  let n = t.byteLength;
  assert(prev.byteLength >= n + 4 && memory.compare(prev.dataStart, changetype<usize>(t), <usize>n) == 0,
    "chatv2: not a chat history");
  let count = load<u32>(prev.dataStart + <usize>n);
  let at = n + 4;
  for (let i: u32 = 0; i < count; i++) {
    assert(prev.byteLength - at >= 4, "chatv2: truncated");
    let size = <i32>load<u32>(prev.dataStart + <usize>at);
    assert(size >= 0 && size <= prev.byteLength - at - 4, "chatv2: truncated");
    history.push(String.UTF8.decodeUnsafe(prev.dataStart + <usize>at + 4, <usize>size));
    at += 4 + size;
  }
});
