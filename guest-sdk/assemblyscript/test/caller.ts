// The calls tests' room in AssemblyScript: the Go caller guest
// (testdata/guests/caller) in this SDK, speaking the same commands, so
// that rooms of the two can call each other and make chains across
// languages. host/node's assemblyscript_calls_test.go drives it.
//
// Requests:
//
//	POST /call?to=<class>/<name>  calls that room with the body as the
//	                              payload (call); answers 200 and the
//	                              reply, or 502 "<status> <text>: <message>"
//	                              (the status as a number, then as
//	                              statusText names it)
//	POST /fan?to=<class>&n=N      calls rooms <class>/0 … <class>/N-1 with
//	                              "count" at once (startCall, then wait for
//	                              each, at most 16 under way); answers the
//	                              replies' sum, or 502 with the first error
//	GET  /count                   how many "count" calls the room took
//	GET  /front?class=&name=&user=  a front's upgrade: if the request is
//	                              one (isUpgrade), handOver to that room
//	                              with the header X-User: <user>; else 400
//	                              "not an upgrade"
//
// Calls (the payload is a command; the reply is what it says):
//
//	echo:<x>                      <x>
//	count                         adds one to the room's count; the count
//	from                          the caller: "<class>/<name>", and
//	                              " (front)" for a front
//	call:<class>/<name>:<payload> calls that room with payload (callText);
//	                              its reply, or "error:<status> <text>:
//	                              <message>"
//	crash                         aborts
//	anything else                 "unknown command <payload>"

import * as wk from "../index";
export * from "../exports";

let count = 0;

/** The error a call failed with, as /call and call: answer it. */
function describe(r: wk.CallResult): string {
  return r.status.toString() + " " + wk.statusText(r.status) + ": " + r.message;
}

/** Splits "<class>/<name>" at its first slash. */
function splitRoom(to: string): string[] {
  let slash = to.indexOf("/");
  if (slash < 0) return [to, ""];
  return [to.substring(0, slash), to.substring(slash + 1)];
}

wk.handleRequest((r: wk.Request): wk.Response | null => {
  if (r.method == "POST" && r.path == "/call") {
    let to = splitRoom(r.queryValue("to"));
    let res = wk.call(to[0], to[1], r.body);
    if (!res.ok) return wk.text(502, describe(res));
    return wk.data(200, "application/octet-stream", res.reply);
  }
  if (r.method == "POST" && r.path == "/fan") return fan(r.queryValue("to"), I32.parseInt(r.queryValue("n")));
  if (r.method == "GET" && r.path == "/count") return wk.text(200, count.toString());
  if (r.path == "/front") {
    if (!r.isUpgrade()) return wk.text(400, "not an upgrade");
    return wk.handOver(r.queryValue("class"), r.queryValue("name"), [new wk.Header("X-User", r.queryValue("user"))]);
  }
  return wk.text(404, "no such path");
});

/** Calls n rooms at once, 16 at a time (the most a room may have under way). */
function fan(className: string, n: i32): wk.Response {
  let sum = 0;
  for (let start = 0; start < n; start += 16) {
    let under = new Array<wk.PendingCall>();
    for (let i = start; i < min(start + 16, n); i++) {
      under.push(wk.startCallText(className, i.toString(), "count"));
    }
    for (let i = 0; i < under.length; i++) {
      let res = under[i].wait();
      if (!res.ok) return wk.text(502, describe(res));
      sum += I32.parseInt(res.text());
    }
  }
  return wk.text(200, sum.toString());
}

wk.handleCall((from: wk.Caller, payload: Uint8Array): Uint8Array => {
  let p = wk.decodeUTF8(payload);
  let colon = p.indexOf(":");
  let cmd = colon < 0 ? p : p.substring(0, colon);
  let arg = colon < 0 ? "" : p.substring(colon + 1);
  if (cmd == "echo") return wk.encodeUTF8(arg);
  if (cmd == "count") {
    count++;
    return wk.encodeUTF8(count.toString());
  }
  if (cmd == "from") return wk.encodeUTF8(from.className + "/" + from.name + (from.isFront() ? " (front)" : ""));
  if (cmd == "call") {
    let c = arg.indexOf(":");
    let to = splitRoom(c < 0 ? arg : arg.substring(0, c));
    let res = wk.callText(to[0], to[1], c < 0 ? "" : arg.substring(c + 1));
    if (!res.ok) return wk.encodeUTF8("error:" + describe(res));
    return res.reply;
  }
  if (cmd == "crash") abort("asked to crash");
  return wk.encodeUTF8("unknown command " + p);
});
