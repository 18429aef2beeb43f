// wasmkeep-client: a WebSocket to a wasmkeep room that reconnects, and the
// room's HTTP. An ES module with no dependencies: import it from a
// <script type="module"> as it is, or from Node 22+ (which has WebSocket).
//
//   import { connect } from "wasmkeep-client";
//   const room = connect("wss://example.com/actor/chat/lobby");
//   room.addEventListener("message", (e) => console.log(e.data));
//   room.send("hello"); // queued while (re)connecting, sent once open
//
// What it does on a close, by code (docs/operations.md, "What clients
// should do"):
//   1012 (the node restarts, drains, or moved the room): reconnect soon;
//   1013 (try again later), or a socket that closed before it opened (a
//        refused upgrade, which a browser reports only as 1006): back off
//        longer;
//   1000, 1008 and 4000-4999 (the room or the node ended it on purpose):
//        do not reconnect, unless options.reconnectOn(code) says to;
//   any other (the network, 1006 after it opened, 1011): reconnect with
//        jittered exponential backoff.

/** The defaults of connect's options. */
export const defaults = Object.freeze({
  /** First wait before a reconnect, in ms; each next one doubles. */
  initialDelay: 250,
  /** Longest wait between two attempts, in ms. */
  maxDelay: 30000,
  /** How much of each wait is random (0.5: from half the wait to all of it). */
  jitter: 0.5,
  /** The wait after a 1012 (restart, drain, move), in ms, jittered. */
  soonDelay: 100,
  /** The shortest wait after a 1013 or a socket refused before it opened, in ms. */
  busyDelay: 5000,
  /** A connection open this long resets the backoff, in ms. */
  stableAfter: 5000,
  /** Messages queued while not open; past it send() throws. */
  maxQueued: 1000,
  /** Bytes queued while not open (strings counted as UTF-16 code units × 2). */
  maxQueuedBytes: 1 << 20,
});

/** What connect does after a close with code: "soon", "busy", "backoff" or "stop". */
export function policy(code, opened, reconnectOn) {
  if (reconnectOn && reconnectOn(code)) return "backoff";
  if (code === 1012 || code === 1001) return "soon";
  if (code === 1013 || !opened) return "busy";
  if (code === 1000 || code === 1008 || (code >= 4000 && code <= 4999)) return "stop";
  return "backoff";
}

/** The wait before attempt n (1 is the first after a close), in ms. */
export function delayFor(kind, n, o = defaults, random = Math.random) {
  const jittered = (ms) => Math.round(ms * (1 - o.jitter * random()));
  if (kind === "soon") return jittered(o.soonDelay * Math.min(2 ** (n - 1), 8));
  const exp = Math.min(o.maxDelay, o.initialDelay * 2 ** (n - 1));
  return jittered(kind === "busy" ? Math.min(o.maxDelay, Math.max(o.busyDelay, exp)) : exp);
}

function size(data) {
  if (typeof data === "string") return data.length * 2;
  return data.byteLength ?? data.size ?? 0;
}

/**
 * A room's socket that reconnects. Events: "open" (detail: { reconnected,
 * attempt }), "message" (data), "close" (code, reason, and retryIn: the ms
 * before the next attempt, or -1 when it gives up), "error".
 */
export class RoomSocket extends EventTarget {
  constructor(url, options = {}) {
    super();
    this.url = String(url);
    this.options = { ...defaults, ...options };
    this.state = "connecting";
    this.attempt = 0;
    this.queue = [];
    this.queuedBytes = 0;
    this.opens = 0;
    this._ws = null;
    this._timer = null;
    this._openedAt = 0;
    this._open();
  }

  /** The room's HTTP base: the socket's URL as http(s), without its query. */
  get httpURL() {
    const u = new URL(this.url);
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    u.search = "";
    u.hash = "";
    return u.toString().replace(/\/$/, "");
  }

  /** fetch()es path below the room (a string starting with "/", or ""). */
  fetch(path = "", init) {
    const f = this.options.fetch ?? globalThis.fetch;
    return f(this.httpURL + path, init);
  }

  /**
   * Sends data now if the socket is open, else queues it (in order) for
   * the next open. Throws past the queue's bounds, and after close().
   */
  send(data) {
    if (this.state === "closed") throw new Error("wasmkeep-client: send after close");
    if (this.state === "open" && this._ws.readyState === 1) {
      this._ws.send(data);
      return;
    }
    const n = size(data);
    if (this.queue.length >= this.options.maxQueued || this.queuedBytes + n > this.options.maxQueuedBytes) {
      throw new Error(`wasmkeep-client: ${this.queue.length} messages (${this.queuedBytes} bytes) queued while reconnecting: over the bound`);
    }
    this.queue.push(data);
    this.queuedBytes += n;
  }

  /** Closes the socket for good: no reconnect. */
  close(code = 1000, reason = "") {
    this.state = "closed";
    clearTimeout(this._timer);
    if (this._ws && this._ws.readyState <= 1) this._ws.close(code, reason);
  }

  /** Reconnects now, if a reconnect is waiting (or the socket gave up). */
  reconnect() {
    clearTimeout(this._timer);
    if (this.state !== "open" && this.state !== "connecting") {
      this.state = "connecting";
      this._open();
    }
  }

  _open() {
    const WS = this.options.WebSocket ?? globalThis.WebSocket;
    let opened = false;
    const ws = new WS(this.url, this.options.protocols);
    this._ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      opened = true;
      this._openedAt = Date.now();
      const reconnected = this.opens > 0;
      this.opens++;
      this.state = "open";
      const queued = this.queue;
      this.queue = [];
      this.queuedBytes = 0;
      for (const m of queued) ws.send(m);
      this.dispatchEvent(Object.assign(new Event("open"), { reconnected, attempt: this.attempt }));
    };
    ws.onmessage = (e) => this.dispatchEvent(Object.assign(new Event("message"), { data: e.data }));
    ws.onerror = () => this.dispatchEvent(new Event("error"));
    ws.onclose = (e) => {
      if (this._ws !== ws) return;
      if (opened && Date.now() - this._openedAt >= this.options.stableAfter) this.attempt = 0;
      const kind = this.state === "closed" ? "stop" : policy(e.code, opened, this.options.reconnectOn);
      let retryIn = -1;
      if (kind === "stop") {
        this.state = "closed";
      } else {
        if (kind === "soon" && opened) this.attempt = 0;
        this.attempt++;
        retryIn = delayFor(kind, this.attempt, this.options);
        this.state = "reconnecting";
        this._timer = setTimeout(() => {
          if (this.state === "reconnecting") {
            this.state = "connecting";
            this._open();
          }
        }, retryIn);
      }
      this.dispatchEvent(Object.assign(new Event("close"), { code: e.code, reason: e.reason, opened, retryIn }));
    };
  }
}

/** Opens a RoomSocket to url (ws:// or wss://, /actor/CLASS/NAME[...]). */
export function connect(url, options) {
  return new RoomSocket(url, options);
}

/** The ws(s) URL of a room below base (an http(s) or ws(s) URL of a node). */
export function roomURL(base, className, name) {
  const u = new URL(base);
  if (u.protocol === "http:") u.protocol = "ws:";
  if (u.protocol === "https:") u.protocol = "wss:";
  u.pathname = `/actor/${encodeURIComponent(className)}/${encodeURIComponent(name)}`;
  return u.toString();
}
