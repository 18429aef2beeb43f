// wasmkeep's AssemblyScript SDK: the guest side of ABI v1 (docs/abi.md) as
// typed handlers and calls, mirroring the Go SDK (guest-sdk/go).
//
// A room's entry file imports this module for the API and re-exports the
// ABI's entry points from exports.ts, which the host calls:
//
//	import * as wk from "wasmkeep-assemblyscript";
//	export * from "wasmkeep-assemblyscript/exports";
//
//	let hits = 0; // a plain global: it survives hibernation
//
//	wk.handleRequest((r: wk.Request): wk.Response | null => {
//	  hits++;
//	  return wk.text(200, wk.room().name + ": " + hits.toString());
//	});
//
// Build it with the SDK's asconfig.json (README.md), which picks the
// runtime and routes abort() through the host's log.
//
// Host functions answer a status: the SDK returns it as an i32, a count or
// Status.OK on success and a negative Status on failure (statusText names
// it). Nothing here throws: AssemblyScript's throw and abort trap, and a
// trap rolls the room back to its last snapshot (README.md, "Crashes").

import * as host from "./host";
import { Header, HandOverRecord, Reader, out, putCall } from "./records";
import * as state from "./state";

export { Header } from "./records";

// ---------------------------------------------------------------------------
// Status codes

/** What a host function answered (abi.Status). Negative values are errors. */
export enum Status {
  OK = 0,
  /** A pointer or length outside memory, a bad kind or code, invalid UTF-8, a malformed record. */
  Invalid = -1,
  /** Not an open socket of this room. */
  NoSocket = -2,
  /** Over a limit (message size, close reason, response size). */
  TooLarge = -3,
  /** A reserved function this host does not implement yet. */
  Unsupported = -4,
  /** Not valid now (e.g. a second response). */
  State = -5,
  /** An outbound queue is full; the socket is being closed. */
  Overloaded = -6,
  /** A call's class does not exist, or it takes no calls. */
  NotFound = -7,
  /** A call was refused before it ran (overloaded, draining, no node): safe to retry. */
  Refused = -8,
  /** A call had no answer within the call timeout: it may have run. */
  Timeout = -9,
  /** The called room crashed handling the call; its state rolled back. */
  Crashed = -10,
  /** The called room is already in the call's chain (it waits on this one). */
  Cycle = -11,
  /** The chain of calls is as long as it may be (abi.MaxCallDepth rooms). */
  TooDeep = -12,
  /** The room has as many calls unanswered as it may (abi.MaxCallsInFlight); or a fetch past the fetches in flight the node allows. */
  TooMany = -13,
  /** A fetch the operator does not allow: its host (--fetch-allow), or the address it resolved to. */
  NotAllowed = -14,
  /** A fetch failed on the way (DNS, connection, TLS, protocol): it may have reached the server. */
  Failed = -15,
}

/** Names a status for log lines, as the Go SDK's errors do. */
export function statusText(st: i32): string {
  if (st >= 0) return "ok";
  switch (st) {
    case Status.Invalid: return "invalid argument";
    case Status.NoSocket: return "no such socket";
    case Status.TooLarge: return "too large";
    case Status.Unsupported: return "unsupported by this host";
    case Status.State: return "not valid in this state";
    case Status.Overloaded: return "overloaded";
    case Status.NotFound: return "not found";
    case Status.Refused: return "refused";
    case Status.Timeout: return "timed out";
    case Status.Crashed: return "the callee crashed";
    case Status.Cycle: return "call cycle";
    case Status.TooDeep: return "call chain too deep";
    case Status.TooMany: return "too many calls in flight";
    case Status.NotAllowed: return "not allowed";
    case Status.Failed: return "failed";
  }
  return "unknown status";
}

// ---------------------------------------------------------------------------
// Headers and queries

/** Tells whether two strings are equal ignoring ASCII case. */
function equalFold(a: string, b: string): bool {
  if (a.length != b.length) return false;
  for (let i = 0; i < a.length; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x == y) continue;
    if (x >= 65 && x <= 90) x += 32;
    if (y >= 65 && y <= 90) y += 32;
    if (x != y) return false;
  }
  return true;
}

/** The value of the first header in hs named name (ignoring case), or null. */
export function lookupHeader(hs: Header[], name: string): string | null {
  for (let i = 0; i < hs.length; i++) {
    let h = unchecked(hs[i]);
    if (equalFold(h.name, name)) return h.value;
  }
  return null;
}

function unhex(c: i32): i32 {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** Decodes a query component ("+" is a space, %XX a byte), or null if malformed. */
function unescape(s: string): string | null {
  if (s.indexOf("%") < 0 && s.indexOf("+") < 0) return s;
  // Work on the UTF-8 bytes so that %XX sequences of one character join up.
  let src = String.UTF8.encode(s);
  let n = src.byteLength;
  let b = new Uint8Array(n);
  let inp = Uint8Array.wrap(src);
  let j = 0;
  for (let i = 0; i < n; i++) {
    let c = <i32>inp[i];
    if (c == 43) {
      c = 32;
    } else if (c == 37) {
      if (i + 2 >= n) return null;
      let hi = unhex(inp[i + 1]);
      let lo = unhex(inp[i + 2]);
      if (hi < 0 || lo < 0) return null;
      c = (hi << 4) | lo;
      i += 2;
    }
    b[j++] = <u8>c;
  }
  return String.UTF8.decodeUnsafe(b.dataStart, j);
}

/**
 * The first value of parameter key in a raw query string ("a=1&b=x%20y"),
 * decoded, or null if it is absent. A parameter without "=" has the value
 * "". Parameters that do not decode are skipped.
 */
export function queryValue(query: string, key: string): string | null {
  let start = 0;
  while (start <= query.length && query.length > 0) {
    let amp = query.indexOf("&", start);
    let end = amp < 0 ? query.length : amp;
    let part = query.substring(start, end);
    let eq = part.indexOf("=");
    let k = unescape(eq < 0 ? part : part.substring(0, eq));
    if (k !== null && k == key) {
      let v = unescape(eq < 0 ? "" : part.substring(eq + 1));
      if (v !== null) return v;
    }
    if (amp < 0) break;
    start = amp + 1;
  }
  return null;
}

// ---------------------------------------------------------------------------
// Requests

/**
 * What a Request and a SocketOpen share: the path, query and headers of
 * the HTTP request behind them.
 */
export class HttpHead {
  /**
   * The URL path below the room, beginning with "/" ("/" for the room
   * itself; for /actor/chat/lobby/history it is "/history"), as the client
   * escaped it.
   */
  path: string = "";
  /** The raw query string without "?"; see queryValue. */
  query: string = "";
  /** The header lines in arrival order. */
  headers: Header[] = [];

  /** The first header named name (ignoring case), or "". */
  header(name: string): string {
    let v = lookupHeader(this.headers, name);
    return v === null ? "" : v;
  }

  /** The first value of query parameter key, decoded, or "". */
  queryValue(key: string): string {
    let v = queryValue(this.query, key);
    return v === null ? "" : v;
  }
}

/** An HTTP request delivered to the room. */
export class Request extends HttpHead {
  /** The HTTP method, e.g. "GET". */
  method: string = "";
  /** The body. It belongs to the handler, which may keep it. */
  body: Uint8Array = new Uint8Array(0);

  /** The body decoded as UTF-8. */
  text(): string {
    return String.UTF8.decodeUnsafe(this.body.dataStart, this.body.byteLength);
  }

  /**
   * Tells whether the request asks for a WebSocket (its Upgrade header
   * holds the token "websocket"): the requests a front may answer with
   * handOver.
   */
  isUpgrade(): bool {
    return headerHasToken(this.header("Upgrade"), "websocket");
  }
}

/** Tells whether a comma-separated header value holds token, ignoring ASCII case. */
function headerHasToken(v: string, token: string): bool {
  let parts = v.split(",");
  for (let i = 0; i < parts.length; i++) {
    if (equalFold(unchecked(parts[i]).trim(), token)) return true;
  }
  return false;
}

/** The room's answer to a Request. */
export class Response {
  /** The HTTP status code, 200–599. */
  status: i32 = 200;
  /** Sent as given, after the host's own. */
  headers: Header[] = [];
  /** The body as bytes; bodyText or bodyStatic, when set, is sent instead. */
  body: Uint8Array | null = null;
  /** The body as text, sent as UTF-8 without an intermediate copy. */
  bodyText: string | null = null;
  /** The body as static bytes (see staticData); sent before the others. */
  bodyStatic: StaticArray<u8> | null = null;

  /** The first header of this response named name (ignoring case), or "". */
  header(name: string): string {
    let v = lookupHeader(this.headers, name);
    return v === null ? "" : v;
  }

  /** Replaces every header named name (ignoring case) with one line; returns this. */
  setHeader(name: string, value: string): Response {
    let hs = new Array<Header>();
    for (let i = 0; i < this.headers.length; i++) {
      let h = unchecked(this.headers[i]);
      if (!equalFold(h.name, name)) hs.push(h);
    }
    hs.push(new Header(name, value));
    this.headers = hs;
    return this;
  }

  /** Appends the header line name: value; returns this. */
  addHeader(name: string, value: string): Response {
    this.headers.push(new Header(name, value));
    return this;
  }
}

/** A response with a text/plain UTF-8 body. */
export function text(status: i32, body: string): Response {
  return textAs(status, "text/plain; charset=utf-8", body);
}

/** A response with a text/html UTF-8 body. */
export function html(status: i32, body: string): Response {
  return textAs(status, "text/html; charset=utf-8", body);
}

/** A response with an application/json body. */
export function json(status: i32, body: string): Response {
  return textAs(status, "application/json", body);
}

/** A response with the given content type and text body (sent as UTF-8). */
export function textAs(status: i32, contentType: string, body: string): Response {
  let r = new Response();
  r.status = status;
  r.headers = [new Header("Content-Type", contentType)];
  r.bodyText = body;
  return r;
}

/** A response with the given content type and body. */
export function data(status: i32, contentType: string, body: Uint8Array): Response {
  let r = new Response();
  r.status = status;
  r.headers = [new Header("Content-Type", contentType)];
  r.body = body;
  return r;
}

/**
 * A response whose body is a StaticArray<u8>, such as a constant compiled
 * into the module's data segment (`const page: StaticArray<u8> = [...]`):
 * it is sent as it is, neither copied into the heap nor converted from
 * UTF-16 first, which matters for large constant bodies (a page of HTML).
 */
export function staticData(status: i32, contentType: string, body: StaticArray<u8>): Response {
  let r = new Response();
  r.status = status;
  r.headers = [new Header("Content-Type", contentType)];
  r.bodyStatic = body;
  return r;
}

/**
 * Registers the room's HTTP handler, replacing any earlier one. Its answer
 * is sent when it returns; null is sent as 500 "handler returned no
 * response". Without a handler every request is answered 404.
 */
export function handleRequest(h: (r: Request) => Response | null): void {
  state.setOnRequest(h);
}

// ---------------------------------------------------------------------------
// Sockets

/** Message kinds (the WebSocket opcodes). */
export enum MessageKind {
  Text = 1,
  Binary = 2,
}

/**
 * A WebSocket the host accepted for the room: the path, query and headers
 * of its upgrade request, and the client's address.
 */
export class SocketOpen extends HttpHead {
  /** The client's address as the host saw it. */
  remote: string = "";
}

/** One complete WebSocket message. */
export class Message {
  constructor(
    /** MessageKind.Text or MessageKind.Binary. */
    public kind: MessageKind,
    /**
     * The payload. It is a view of the buffer the SDK receives every event
     * in, valid only until the handler returns: copy it (slice()) or take
     * text() to keep it.
     */
    public data: Uint8Array,
  ) {}

  isText(): bool {
    return this.kind == MessageKind.Text;
  }

  /** The payload decoded as UTF-8: a string the handler may keep. */
  text(): string {
    return String.UTF8.decodeUnsafe(this.data.dataStart, this.data.byteLength);
  }
}

/**
 * One of the room's WebSockets. Its id is never 0 and never reused, so a
 * socket kept in the room's state stays right across hibernation.
 */
export class Socket {
  constructor(public readonly id: u32) {}

  /** Queues a text message to this socket. */
  send(text: string): i32 {
    out.reset();
    out.utf8(text);
    return host.socket_send(this.id, MessageKind.Text, out.ptr(), out.len());
  }

  /**
   * Queues a text message given as its UTF-8 bytes (a text Message's data,
   * say), with no conversion from or to AssemblyScript's UTF-16 strings.
   * The host refuses invalid UTF-8 (Status.Invalid).
   */
  sendUTF8(utf8: Uint8Array): i32 {
    return host.socket_send(this.id, MessageKind.Text, utf8.dataStart, utf8.byteLength);
  }

  /** Queues a binary message to this socket. */
  sendBinary(data: Uint8Array): i32 {
    return host.socket_send(this.id, MessageKind.Binary, data.dataStart, data.byteLength);
  }

  /**
   * Closes this socket with a close code (1000 or 3000–4999) and a reason
   * of at most 123 bytes. The room still receives the socket's close event.
   */
  close(code: i32, reason: string): i32 {
    out.reset();
    out.utf8(reason);
    return host.socket_close(this.id, code, out.ptr(), out.len());
  }

  /** Sends an event with a JSON payload on a topic this socket joined (or is joining). */
  push(topic: string, event: string, payload: string): i32 {
    channelOut(topic, event, false, payload, null);
    return host.channel_push(this.id, out.ptr(), out.len());
  }

  /** push with a raw binary payload (a Phoenix binary frame). */
  pushBinary(topic: string, event: string, payload: Uint8Array): i32 {
    channelOut(topic, event, true, null, payload);
    return host.channel_push(this.id, out.ptr(), out.len());
  }

  /** Ends this socket's join of topic: the client gets phx_close, the room a leave. */
  closeTopic(topic: string): i32 {
    out.reset();
    out.str(topic);
    return host.channel_close(this.id, out.ptr(), out.len());
  }

  /**
   * Tracks (or updates) presence for key on topic with a JSON object of
   * metadata. Every socket on the topic gets a presence_diff; the entry
   * ends with the join.
   */
  track(topic: string, key: string, meta: string): i32 {
    presence(topic, key, meta);
    return host.presence_track(this.id, out.ptr(), out.len());
  }

  /** Removes this socket's presence entry for key on topic. */
  untrack(topic: string, key: string): i32 {
    presence(topic, key, "");
    return host.presence_untrack(this.id, out.ptr(), out.len());
  }
}

/** The id of a socket to leave out of a broadcast, 0 for none. */
function exceptId(s: Socket | null): u32 {
  return s === null ? 0 : s.id;
}

/** The ids of the room's open sockets (empty if the host refuses). */
export function sockets(): Socket[] {
  let capacity: u32 = 16;
  let n: i32;
  let p: usize;
  do {
    out.reset();
    p = out.reserve(<usize>capacity * 4);
    n = host.socket_list(p, capacity);
    if (n < 0) return [];
    if (<u32>n <= capacity) break;
    capacity = <u32>n;
  } while (true);
  // Copy the ids out first: the output buffer is the SDK's scratch space.
  let ids = new StaticArray<u32>(n);
  memory.copy(changetype<usize>(ids), p, <usize>n * 4);
  let ss = new Array<Socket>(n);
  for (let i = 0; i < n; i++) ss[i] = new Socket(ids[i]);
  return ss;
}

/**
 * Queues a text message to every open socket of the room except except
 * (null: none) and returns how many sockets it was queued to.
 */
export function broadcast(text: string, except: Socket | null = null): i32 {
  out.reset();
  out.utf8(text);
  return host.broadcast(MessageKind.Text, out.ptr(), out.len(), exceptId(except));
}

/** broadcast for a text message given as its UTF-8 bytes (see Socket.sendUTF8). */
export function broadcastUTF8(utf8: Uint8Array, except: Socket | null = null): i32 {
  return host.broadcast(MessageKind.Text, utf8.dataStart, utf8.byteLength, exceptId(except));
}

/** broadcast for a binary message. */
export function broadcastBinary(data: Uint8Array, except: Socket | null = null): i32 {
  return host.broadcast(MessageKind.Binary, data.dataStart, data.byteLength, exceptId(except));
}

/** Registers the handler for accepted WebSockets. Without one, opens are ignored. */
export function handleSocketOpen(h: (s: Socket, o: SocketOpen) => void): void {
  state.setOnSocketOpen(h);
}

/** Registers the handler for every complete message. Without one, messages are ignored. */
export function handleSocketMessage(h: (s: Socket, m: Message) => void): void {
  state.setOnSocketMessage(h);
}

/**
 * Registers the handler told that a socket is gone, with its close code
 * and reason; the socket can no longer be sent to.
 */
export function handleSocketClose(h: (s: Socket, code: i32, reason: string) => void): void {
  state.setOnSocketClose(h);
}

// ---------------------------------------------------------------------------
// Phoenix channels
//
// A room whose class handles joins serves the Phoenix Channels protocol on
// its /socket/websocket path (phoenix.js: new Socket("/actor/<class>/<name>/socket")).
// The host speaks the protocol; the room sees joins, messages and leaves.
// Payloads are JSON text.

/** A client's request to join a topic. */
export class Join {
  topic: string = "";
  /** The join's parameters (JSON). */
  payload: string = "";
}

/** An event a client sent on a topic it joined. */
export class ChannelMessage {
  topic: string = "";
  event: string = "";
  /** The payload is raw bytes (a Phoenix binary push), not JSON. */
  binary: bool = false;
  /** The payload: JSON, or raw bytes when binary. A copy the handler may keep. */
  data: Uint8Array = new Uint8Array(0);

  /** The payload as text (JSON). */
  text(): string {
    return String.UTF8.decodeUnsafe(this.data.dataStart, this.data.byteLength);
  }
}

/** An answer to a join (ok accepts it) or to a channel message. */
export class Reply {
  constructor(
    /** An error reply (for a join: rejected). */
    public error: bool,
    /** The reply's JSON body; "" means {}. */
    public body: string,
  ) {}
}

/** A successful reply (for a join: accepted) with a JSON body. */
export function ok(body: string = ""): Reply {
  return new Reply(false, body);
}

/** An error reply (for a join: rejected) with a JSON body, e.g. {"reason":"unauthorized"}. */
export function err(body: string = ""): Reply {
  return new Reply(true, body);
}

function channelOut(topic: string, event: string, binary: bool, payload: string | null, raw: Uint8Array | null): void {
  out.reset();
  out.str(topic);
  out.str(event);
  out.putU8(binary ? 1 : 0);
  if (raw !== null) {
    out.bytes(raw);
  } else {
    out.str(payload === null ? "" : payload);
  }
}

function presence(topic: string, key: string, meta: string): void {
  out.reset();
  out.str(topic);
  out.str(key);
  out.str(meta);
}

/**
 * Sends an event with a JSON payload to every socket of the room that
 * joined topic, except except (null: none), and returns how many.
 */
export function broadcastTopic(topic: string, event: string, payload: string, except: Socket | null = null): i32 {
  channelOut(topic, event, false, payload, null);
  return host.channel_broadcast(exceptId(except), out.ptr(), out.len());
}

/** broadcastTopic with a raw binary payload. */
export function broadcastTopicBinary(topic: string, event: string, payload: Uint8Array, except: Socket | null = null): i32 {
  channelOut(topic, event, true, null, payload);
  return host.channel_broadcast(exceptId(except), out.ptr(), out.len());
}

/**
 * Registers the join handler: ok(...) accepts the join, err(...) or null
 * rejects it. Without a handler every join is refused.
 */
export function handleJoin(h: (s: Socket, j: Join) => Reply | null): void {
  state.setOnJoin(h);
}

/**
 * Registers the handler for events on joined topics. A Reply answers the
 * client's push (phoenix.js's receive("ok") or receive("error")); null
 * sends none.
 */
export function handleChannelMessage(h: (s: Socket, m: ChannelMessage) => Reply | null): void {
  state.setOnChannelMessage(h);
}

/**
 * Registers the handler told when an accepted join ends: reason is
 * "client" (the client left), "rejoin" (it joined again) or "closed" (the
 * socket went away, or the room closed the topic).
 */
export function handleLeave(h: (s: Socket, topic: string, reason: string) => void): void {
  state.setOnLeave(h);
}

// ---------------------------------------------------------------------------
// Calls between rooms (docs/abi.md)
//
// A room calls another by class and name with a payload of bytes and gets
// the bytes it replies, or a status saying why not. AssemblyScript has no
// exceptions to carry the Go SDK's typed errors (a throw traps and rolls
// the room back), so a call answers a CallResult: ok, or a negative
// Status the room can switch on, with the host's message.

/** The answer to a call: the callee's reply, or the status it failed with. */
export class CallResult {
  constructor(
    /** The class of the room that was called. */
    public readonly className: string,
    /** The name of the room that was called. */
    public readonly name: string,
    /** Status.OK, or the negative Status the call failed with (Status.NotFound, Status.Timeout, …). */
    public readonly status: i32,
    /** The callee's reply (empty after an error). The room may keep it. */
    public readonly reply: Uint8Array,
    /** After an error, what the host said went wrong ("" when it said nothing). */
    public readonly message: string,
  ) {}

  /** Tells whether the call succeeded: status is Status.OK and reply holds the answer. */
  get ok(): bool {
    return this.status == Status.OK;
  }

  /** The reply decoded as UTF-8. */
  text(): string {
    return decodeUTF8(this.reply);
  }

  /**
   * Describes the outcome for a log line or a response, as the Go SDK's
   * CallError does: "call to chat/lobby: timed out: no answer from
   * chat/lobby", or "call to chat/lobby: ok".
   */
  describe(): string {
    let s = "call to " + this.className + "/" + this.name + ": " + statusText(this.status);
    if (this.message != "") s += ": " + this.message;
    return s;
  }
}

/**
 * The first try at copying a call's result uses the output buffer with
 * this much room: most replies are small, and a larger one is copied
 * straight into an array of its size on a second try rather than grow the
 * output buffer (which the room would then keep at that size).
 */
const resultGuess: u32 = 256;

/** A call under way (startCall); wait() collects its answer. */
export class PendingCall {
  /** The answer, once known: at once for a call the host refused to start. */
  private result: CallResult | null = null;

  /** handle is call_start's answer: a handle, or a negative status (the call failed at once). */
  constructor(
    /** The class of the room called. */
    public readonly className: string,
    /** The name of the room called. */
    public readonly name: string,
    private handle: i32,
  ) {
    if (handle < 0) this.result = new CallResult(className, name, handle, new Uint8Array(0), "");
  }

  /**
   * Waits for the call's answer and returns it; later calls return the
   * same result. The time the room waits does not count toward its event
   * time limit.
   */
  wait(): CallResult {
    let done = this.result;
    if (done !== null) return done;
    let st = host.call_wait(this.handle);
    // After a success the result is the reply, after an error the host's
    // message: copied out either way, which also frees the handle.
    let got = takeResult(false, this.handle);
    let r: CallResult;
    if (st < 0) {
      // The wait's status is the call's, even if the message is lost.
      r = new CallResult(this.className, this.name, st, new Uint8Array(0), got === null ? "" : decodeUTF8(got));
    } else if (got === null) {
      r = new CallResult(this.className, this.name, takeStatus, new Uint8Array(0), "");
    } else {
      r = new CallResult(this.className, this.name, Status.OK, got, "");
    }
    this.result = r;
    return r;
  }

}

/** The status call_result or fetch_result failed with, when takeResult answers null. */
let takeStatus: i32 = 0;

function hostResult(fetch: bool, handle: i32, p: usize, cap: u32): i32 {
  return fetch ? host.fetch_result(handle, p, cap) : host.call_result(handle, p, cap);
}

/**
 * Copies a call's (or, with fetch, a fetch's) result out of the host (see
 * resultGuess), which frees the handle; null if the host refuses
 * (takeStatus says why).
 */
function takeResult(fetch: bool, handle: i32): Uint8Array | null {
  out.reset();
  let p = out.reserve(resultGuess);
  let n = hostResult(fetch, handle, p, resultGuess);
  if (n < 0) {
    takeStatus = n;
    return null;
  }
  if (<u32>n <= resultGuess) {
    let b = new Uint8Array(n);
    memory.copy(b.dataStart, p, <usize>n);
    return b;
  }
  // Too large for the first try: the host kept the handle and said how
  // much room the result needs.
  let b = new Uint8Array(n);
  let m = hostResult(fetch, handle, b.dataStart, <u32>n);
  if (m < 0 || m > n) {
    takeStatus = m < 0 ? m : Status.Invalid;
    return null;
  }
  return m == n ? b : b.slice(0, m);
}

/**
 * Starts a call to the room className/name with payload and returns it
 * under way: the room's code goes on, and wait() collects the answer.
 * Calls to different rooms run at once; calls to one room run there in
 * the order they were started. A call the event does not wait for still
 * runs, and its answer is dropped. startCall itself never fails: a call
 * the host refuses at once (Status.Cycle, Status.TooDeep, Status.TooMany,
 * Status.TooLarge, Status.Invalid for an empty class or name) comes back
 * from wait().
 */
export function startCall(className: string, name: string, payload: Uint8Array): PendingCall {
  putCall(className, name, payload, null);
  return new PendingCall(className, name, host.call_start(out.ptr(), out.len()));
}

/** startCall with a text payload, sent as UTF-8. */
export function startCallText(className: string, name: string, payload: string): PendingCall {
  putCall(className, name, null, payload);
  return new PendingCall(className, name, host.call_start(out.ptr(), out.len()));
}

/**
 * Calls the room className/name with payload and waits for its answer:
 * startCall(…).wait().
 *
 *	let r = wk.call("counter", "global", wk.encodeUTF8("add"));
 *	if (!r.ok) return wk.text(502, r.describe());
 */
export function call(className: string, name: string, payload: Uint8Array): CallResult {
  return startCall(className, name, payload).wait();
}

/** call with a text payload, sent as UTF-8; the reply's text is result.text(). */
export function callText(className: string, name: string, payload: string): CallResult {
  return startCallText(className, name, payload).wait();
}

// ---------------------------------------------------------------------------
// Fetches: HTTP requests to other services (docs/abi.md, "Fetches")
//
// Like a call, a fetch answers a result rather than throwing: ok (the
// service answered, whatever its HTTP status), or a negative Status with
// the host's message saying why not.

/** The answer to a fetch: the service's response, or the status it failed with. */
export class FetchResult {
  constructor(
    /** The URL fetched. */
    public readonly url: string,
    /** Status.OK, or the negative Status the fetch failed with (Status.NotAllowed, Status.Timeout, …). */
    public readonly status: i32,
    /** The service's HTTP status (0 after an error). */
    public readonly httpStatus: i32,
    /** The response's header lines, by name. */
    public readonly headers: Header[],
    /** The response's body (empty after an error). The room may keep it. */
    public readonly body: Uint8Array,
    /** After an error, what the host said went wrong: why it was not allowed, which limit. */
    public readonly message: string,
  ) {}

  /** Tells whether the service answered: status is Status.OK. */
  get ok(): bool {
    return this.status == Status.OK;
  }

  /** The first header named name (ignoring case), or "". */
  header(name: string): string {
    let v = lookupHeader(this.headers, name);
    return v === null ? "" : v;
  }

  /** The body decoded as UTF-8. */
  text(): string {
    return decodeUTF8(this.body);
  }

  /** Describes the outcome for a log line: "fetch http://…: not allowed: fetch: host not allowed (--fetch-allow): …". */
  describe(): string {
    let s = "fetch " + this.url + ": " + statusText(this.status);
    if (this.message != "") s += ": " + this.message;
    return s;
  }
}

/** A fetch under way (startFetch); wait() collects its answer. */
export class PendingFetch {
  private result: FetchResult | null = null;

  /** handle is fetch_start's answer: a handle, or a negative status (the fetch failed at once). */
  constructor(public readonly url: string, private handle: i32) {
    if (handle < 0) this.result = new FetchResult(url, handle, 0, [], new Uint8Array(0), "");
  }

  /**
   * Waits for the fetch's answer and returns it; later calls return the
   * same result. The time the room waits does not count toward its event
   * time limit; the node's fetch timeout bounds it.
   */
  wait(): FetchResult {
    let done = this.result;
    if (done !== null) return done;
    let st = host.fetch_wait(this.handle);
    let got = takeResult(true, this.handle);
    let r: FetchResult;
    if (st < 0) {
      r = new FetchResult(this.url, st, 0, [], new Uint8Array(0), got === null ? "" : decodeUTF8(got));
    } else if (got === null) {
      r = new FetchResult(this.url, takeStatus, 0, [], new Uint8Array(0), "");
    } else {
      let rd = new Reader(got.dataStart, <usize>got.byteLength);
      let status = <i32>rd.u32();
      let headers = rd.headers();
      let body = rd.bytes();
      r = rd.finish()
        ? new FetchResult(this.url, Status.OK, status, headers, body, "")
        : new FetchResult(this.url, Status.Invalid, 0, [], new Uint8Array(0), "a malformed answer from the host");
    }
    this.result = r;
    return r;
  }
}

/**
 * Sends an HTTP request to another service and returns it under way:
 * the room's code goes on, and wait() collects the answer, so that
 * several fetches run at once. method "" is GET. The request leaves
 * mid-event, before the event's state is durable: make it safe to repeat.
 * A fetch the event does not wait for still runs; its answer is dropped.
 */
export function startFetch(url: string, method: string = "GET", headers: Header[] = [], body: Uint8Array | null = null): PendingFetch {
  out.reset();
  out.str(method);
  out.str(url);
  out.headers(headers);
  out.bytes(body === null ? new Uint8Array(0) : body);
  return new PendingFetch(url, host.fetch_start(out.ptr(), out.len()));
}

/**
 * Sends an HTTP request to another service and waits for its answer:
 * startFetch(…).wait(). Only hosts the operator allows (--fetch-allow)
 * are fetched; the others answer Status.NotAllowed with the reason.
 *
 *	let r = wk.fetch("https://api.example.com/rates");
 *	if (!r.ok) return wk.text(502, r.describe());
 */
export function fetch(url: string, method: string = "GET", headers: Header[] = [], body: Uint8Array | null = null): FetchResult {
  return startFetch(url, method, headers, body).wait();
}

/** Who made a call: a room, or a front (name ""). */
export class Caller {
  constructor(
    /** The caller's class ("class" is a keyword). */
    public readonly className: string,
    /** The caller's room name; "" for a front. */
    public readonly name: string,
  ) {}

  /** Tells whether the call came from a front. */
  isFront(): bool {
    return this.name == "";
  }
}

/**
 * Registers the handler for calls from other rooms and fronts, replacing
 * any earlier one. What it returns is the reply (an empty array for an
 * empty one); the caller gets it once the event's sends and checkpoint
 * are done. The payload is a copy the handler may keep. An abort in it is
 * a crash like any other: the room rolls back and the caller gets
 * Status.Crashed. Without a handler the room takes no calls: callers get
 * Status.NotFound.
 */
export function handleCall(h: (from: Caller, payload: Uint8Array) => Uint8Array): void {
  state.setOnCall(h);
}

/** Encodes text as UTF-8, for call payloads and replies. */
export function encodeUTF8(text: string): Uint8Array {
  return Uint8Array.wrap(String.UTF8.encode(text));
}

/** Decodes UTF-8 bytes (a call's payload or reply) as text. */
export function decodeUTF8(bytes: Uint8Array): string {
  return String.UTF8.decodeUnsafe(bytes.dataStart, <usize>bytes.byteLength);
}

/**
 * Answers a front's WebSocket upgrade (Request.isUpgrade) by handing the
 * socket to the room className/name: the host accepts it for that room,
 * on the room's node, as if the client had come to
 * /actor/className/name, with headers in place of the request's of the
 * same names (what the front learnt of the client, say). Return what it
 * returns from the request handler, as it is. Only a front may hand over,
 * and only an upgrade: anything else is answered 500.
 *
 *	if (r.isUpgrade()) return wk.handOver("chat", room, [new wk.Header("X-User", user)]);
 */
export function handOver(className: string, name: string, headers: Header[] = []): Response {
  return state.setHandOver(new HandOverRecord(className, name, headers));
}

// ---------------------------------------------------------------------------
// The room, logs, durability, time

/** Names the room this instance runs as. */
export class RoomInfo {
  constructor(
    /** The actor class ("class" is a keyword). */
    public className: string,
    /** The room's name within its class. */
    public name: string,
  ) {}
}

let roomCache: RoomInfo | null = null;

/**
 * The room this instance runs as. Asked of the host once and cached (the
 * cache survives hibernation with the rest of memory); an empty RoomInfo,
 * not cached, if the host fails.
 */
export function room(): RoomInfo {
  let cached = roomCache;
  if (cached !== null) return cached;
  let capacity: u32 = 128;
  let n: i32;
  let p: usize;
  do {
    out.reset();
    p = out.reserve(capacity);
    n = host.room_info(p, capacity);
    if (n < 0) return new RoomInfo("", "");
    if (<u32>n <= capacity) break;
    capacity = <u32>n;
  } while (true);
  let r = new Reader(p, n);
  let className = r.str();
  let name = r.str();
  if (!r.finish()) return new RoomInfo("", "");
  let info = new RoomInfo(className, name);
  roomCache = info;
  return info;
}

let lastSecretStatus: i32 = 0;

/**
 * The value of the app's secret `name`, which an operator set with
 * `wasmkeep secret put NAME`; null if there is none (secretStatus() is
 * then Status.NotFound) or the node could not read it now
 * (Status.Refused: try again). The value is in the room's memory once
 * read, and so in its snapshots.
 */
export function secret(name: string): string | null {
  let nameBuf = String.UTF8.encode(name);
  let capacity: i32 = 256;
  while (true) {
    let buf = new ArrayBuffer(capacity);
    let n = host.secret_get(changetype<usize>(nameBuf), <u32>nameBuf.byteLength, changetype<usize>(buf), <u32>capacity);
    lastSecretStatus = n < 0 ? n : 0;
    if (n < 0) return null;
    if (n <= capacity) return String.UTF8.decodeUnsafe(changetype<usize>(buf), <usize>n);
    capacity = n;
  }
}

/** The status of the last secret(): Status.OK, or why it returned null. */
export function secretStatus(): Status { return <Status>lastSecretStatus; }

/** Log levels. */
export enum Level {
  Debug = 0,
  Info = 1,
  Warn = 2,
  Error = 3,
}

/** Writes a log line attributed to the room (cut at 4096 bytes by the host). */
export function log(level: Level, msg: string): void {
  out.reset();
  out.utf8(msg);
  host.log(level, out.ptr(), out.len());
}

export function debug(msg: string): void { log(Level.Debug, msg); }
export function info(msg: string): void { log(Level.Info, msg); }
export function warn(msg: string): void { log(Level.Warn, msg); }
export function error(msg: string): void { log(Level.Error, msg); }

/**
 * Makes the room's state as of the end of this event durable before any of
 * the event's output (response, sends) leaves the host.
 */
export function checkpoint(): i32 {
  return host.checkpoint();
}

/**
 * Deletes the room's state: when this event returns, the host deletes the
 * room's stored snapshot and drops its memory without writing it, before
 * any of the event's output leaves the host. The next event starts the room
 * fresh; its sockets stay open and the fresh room gets an open for each.
 * Nothing is deleted if the event traps.
 */
export function deleteState(): i32 {
  return host.state_delete();
}

// ---------------------------------------------------------------------------
// Upgrades: handing the room's state to the next version of its class

/**
 * Offers the room's state to the next version of its class. When a newer
 * version is uploaded, the host calls h on the room's current version and
 * starts the new version from the bytes it returns (see handleStartFrom);
 * the room's sockets stay open through the change. h should encode what
 * the room must keep (a history, scores) in a form the next version can
 * read, a format tag or version number first being the usual way: only
 * this version knows how its memory is laid out. Returning null offers no
 * handoff: the room stays on this version. Anything else h does (sends,
 * checkpoints, changes to the room's variables) is dropped with the
 * instance it ran in, whatever the outcome: the room either continues on
 * the new version or stays exactly as it was. Without a handler, rooms of
 * this version offer no handoff and stay on it until an operator resets
 * them.
 */
export function handleUpgrade(h: () => Uint8Array | null): void {
  state.setOnUpgrade(h);
}

/**
 * Registers how this version takes over a room from an older one: h gets
 * the state that version's handleUpgrade returned (a copy h may keep) and
 * that version's hash ("sha256:<hex>"), and runs instead of the room's
 * first event, after the top-level statements. The room's open sockets
 * are carried over: their ids stay valid and no open event comes for
 * them. If h aborts (AssemblyScript cannot catch, so a state it cannot
 * read is refused with abort() or assert), the upgrade fails and the room
 * stays on the older version with its state (the host tries again later).
 * Without a handler, this version takes over no state and rooms of older
 * versions stay where they are.
 */
export function handleStartFrom(h: (prev: Uint8Array, fromVersion: string) => void): void {
  state.setOnStartFrom(h);
}

/**
 * Sets the room's one alarm to atMs (Unix milliseconds, as now() gives),
 * replacing the one set before: at that time the host runs the handler
 * given to handleAlarm, waking the room wherever it sleeps, on whichever
 * node runs it then; a time in the past runs it at once. The alarm is made
 * durable with the event that set it, before any of its output leaves the
 * host, whatever the class's durability. Answers Status.OK, or
 * Status.Invalid for a time before 2001 or after 2286.
 */
export function setAlarm(atMs: i64): i32 {
  return host.alarm_set(atMs);
}

/** Clears the room's alarm, if one is set. */
export function clearAlarm(): i32 {
  return host.alarm_clear();
}

/** The time of the room's alarm (Unix ms), or 0 if none is set. */
export function getAlarm(): i64 {
  let at = memory.data(8);
  if (host.alarm_get(at) < 0) return 0;
  return load<i64>(at);
}

/**
 * What the alarm handler is told: the time the alarm was set for (Unix
 * ms), and how many runs of it failed before this one (0 the first time).
 */
export class Alarm {
  constructor(public at: i64, public retry: i32) {}
}

/**
 * Registers the handler that runs when the room's alarm is due, replacing
 * any earlier one. The alarm is cleared when it returns, unless it called
 * setAlarm (a recurring alarm sets the next one there). An abort in it is
 * a crash like any other: the room rolls back and the host runs it again
 * later, after 2 s, then twice as long each time, at most 6 times
 * (Alarm.retry counts them); so it may run more than once for one alarm.
 * Without a handler an alarm that comes due is cleared.
 */
export function handleAlarm(h: (a: Alarm) => void): void {
  state.setOnAlarm(h);
}

/**
 * The wall clock in milliseconds since the Unix epoch (WASI's realtime
 * clock; Date.now() would import a JavaScript function the host does not
 * provide).
 */
export function now(): i64 {
  return clock(0) / 1000000;
}

/**
 * The monotonic clock in nanoseconds. It continues across hibernation and
 * restarts, from where it was when the room went to sleep.
 */
export function nanotime(): i64 {
  return clock(1);
}

function clock(id: u32): i64 {
  out.reset();
  let p = out.reserve(8);
  if (host.clock_time_get(id, 1, p) != 0) return 0;
  return load<i64>(p);
}
