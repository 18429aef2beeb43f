// The SDK's test guest: host/node's AssemblyScript tests drive every part
// of the SDK through it on a real node.
//
// Requests:
//
//	GET  /                   the counter
//	POST /                   increments the counter and answers it
//	DELETE /                 deleteState(): answers its status; the room starts fresh next
//	POST /abort              increments the counter, then fails an assertion (a trap)
//	POST /throw              increments the counter, then throws
//	GET  /sockets            the room's open socket ids, comma-separated
//	POST /broadcast          broadcasts the body as text to every socket; answers the count
//	GET  /room               "class/name"
//	GET  /secret/NAME        secret(NAME), or 404 and secretStatus()
//	POST /fetch              fetch(the body, a URL): "<HTTP status> <body>", or 502 "<Status> <message>"
//	POST /checkpoint         checkpoint()'s status
//	POST /alarm              setAlarm()'s status, for a minute from now
//	POST /alarm/now          sets the alarm in the past: it runs at once; answers the status
//	GET  /alarm              getAlarm() (0: none), then the handler's runs: "<at> <runs> <last retry>"
//	GET  /query?...          queryValue of "k x", "a", "flag" and "none", one a line
//	GET  /misc               checks of Math.random, now, nanotime and trace; "ok" or what failed
//	GET  /closes             the socket closes seen, one "id code reason" a line
//	GET  /leaves             the leaves seen, one "id topic reason" a line
//	anything else            the echo below, with header X-Echo: 1 and
//	                         status from the query's status parameter
//
//	method GET
//	path /some/path
//	query a=1&b=2
//	x-test <value of the first X-Test header>
//	body <the body>
//
// Sockets: on open, "open <path>?<query> <remote is set>"; a text message
// "trap" aborts, "close" closes the socket with 4000 "bye", "others:<t>"
// broadcasts <t> to every other socket; other messages come back with the
// same kind.
//
// Channels: a join of "reject" is refused with {"reason":"rejected"}; any
// other join tracks key "s<id>" and answers {"joined":"<topic>","payload":<payload>}.
// Events: "echo" replies ok with its payload, "push" pushes "pushed" with
// the payload to the sender, "shout" broadcasts "shout" to the topic with
// no reply, "bin" pushes the binary payload back as "bin", "close" closes
// the sender's join, "untrack" untracks, "trap" aborts, others error.

import * as wk from "../index";
export * from "../exports";

let counter = 0;
let closes = new Array<string>();
let leaves = new Array<string>();
let alarmRuns = 0;
let alarmRetry = -1;

wk.handleAlarm((a: wk.Alarm): void => {
  alarmRuns++;
  alarmRetry = a.retry;
});

wk.handleRequest((r: wk.Request): wk.Response | null => {
  let p = r.path;
  if (p == "/" && r.method == "GET") return wk.text(200, counter.toString());
  if (p == "/" && r.method == "POST") {
    counter++;
    return wk.text(200, counter.toString());
  }
  if (p == "/" && r.method == "DELETE") return wk.text(200, wk.deleteState().toString());
  if (p == "/abort") {
    counter++;
    assert(counter < 0, "the counter is positive");
    return wk.text(200, "unreachable");
  }
  if (p == "/throw") {
    counter++;
    throw new Error("thrown by the guest");
  }
  if (p == "/sockets") {
    let ss = wk.sockets();
    let parts = new Array<string>();
    for (let i = 0; i < ss.length; i++) parts.push(ss[i].id.toString());
    return wk.text(200, parts.join(","));
  }
  if (p == "/broadcast") return wk.text(200, wk.broadcast(r.text()).toString());
  if (p == "/room") {
    let info = wk.room();
    return wk.text(200, info.className + "/" + info.name);
  }
  if (p == "/fetch") {
    let f = wk.fetch(r.text());
    if (!f.ok) return wk.text(502, f.status.toString() + " " + f.message);
    return wk.text(200, f.httpStatus.toString() + " " + f.text());
  }
  if (p.startsWith("/secret/")) {
    let v = wk.secret(p.substring(8));
    if (v === null) return wk.text(404, wk.secretStatus().toString());
    return wk.text(200, v);
  }
  if (p == "/checkpoint") return wk.text(200, wk.checkpoint().toString());
  if (p == "/alarm" && r.method == "POST") return wk.text(200, wk.setAlarm(wk.now() + 60000).toString());
  if (p == "/alarm/now") return wk.text(200, wk.setAlarm(wk.now() - 1).toString());
  if (p == "/alarm") return wk.text(200, wk.getAlarm().toString() + " " + alarmRuns.toString() + " " + alarmRetry.toString());
  if (p == "/query") {
    let keys = ["k x", "a", "flag", "none"];
    let lines = new Array<string>();
    for (let i = 0; i < keys.length; i++) {
      let v = wk.queryValue(r.query, keys[i]);
      lines.push(v === null ? "<null>" : v);
    }
    return wk.text(200, lines.join("\n"));
  }
  if (p == "/misc") {
    let x = Math.random();
    if (x < 0 || x >= 1) return wk.text(200, "random " + x.toString());
    // now() is the wall clock: later than 2020-01-01.
    if (wk.now() < 1577836800000) return wk.text(200, "now " + wk.now().toString());
    let t0 = wk.nanotime();
    if (t0 <= 0 || wk.nanotime() < t0) return wk.text(200, "nanotime");
    trace("trace from the guest", 2, 1.5, 2.5);
    return wk.text(200, "ok");
  }
  if (p == "/closes") return wk.text(200, closes.join("\n"));
  if (p == "/leaves") return wk.text(200, leaves.join("\n"));

  let body = "method " + r.method + "\npath " + p + "\nquery " + r.query +
    "\nx-test " + r.header("x-test") + "\nbody " + r.text();
  let status = 200;
  let s = r.queryValue("status");
  if (s != "") status = I32.parseInt(s);
  return wk.text(status, body).setHeader("X-Echo", "0").setHeader("x-echo", "1");
});

wk.handleSocketOpen((s: wk.Socket, o: wk.SocketOpen): void => {
  s.send("open " + o.path + "?" + o.query + " " + (o.remote != "" ? "remote" : "no remote"));
});

wk.handleSocketMessage((s: wk.Socket, m: wk.Message): void => {
  if (!m.isText()) {
    s.sendBinary(m.data);
    return;
  }
  let t = m.text();
  if (t == "trap") {
    counter++;
    abort("trap requested by the client");
  }
  if (t == "close") {
    s.close(4000, "bye");
    return;
  }
  if (t.startsWith("others:")) {
    wk.broadcast(t.substring(7), s);
    return;
  }
  s.send(t);
});

wk.handleSocketClose((s: wk.Socket, code: i32, reason: string): void => {
  closes.push(s.id.toString() + " " + code.toString() + " " + reason);
});

wk.handleJoin((s: wk.Socket, j: wk.Join): wk.Reply | null => {
  if (j.topic == "reject") return wk.err('{"reason":"rejected"}');
  let st = s.track(j.topic, "s" + s.id.toString(), '{"online":true}');
  if (st < 0) return wk.err('{"reason":"track: ' + wk.statusText(st) + '"}');
  return wk.ok('{"joined":"' + j.topic + '","payload":' + (j.payload == "" ? "null" : j.payload) + "}");
});

wk.handleChannelMessage((s: wk.Socket, m: wk.ChannelMessage): wk.Reply | null => {
  let e = m.event;
  if (e == "echo") return wk.ok(m.text());
  if (e == "push") {
    s.push(m.topic, "pushed", m.text());
    return wk.ok();
  }
  if (e == "shout") {
    wk.broadcastTopic(m.topic, "shout", m.text());
    return null;
  }
  if (e == "bin") {
    s.pushBinary(m.topic, "bin", m.data);
    return null;
  }
  if (e == "close") {
    s.closeTopic(m.topic);
    return null;
  }
  if (e == "untrack") {
    return wk.ok('{"status":' + s.untrack(m.topic, "s" + s.id.toString()).toString() + "}");
  }
  if (e == "trap") abort("trap in a channel message");
  return wk.err('{"reason":"unknown event"}');
});

wk.handleLeave((s: wk.Socket, topic: string, reason: string): void => {
  leaves.push(s.id.toString() + " " + topic + " " + reason);
});
