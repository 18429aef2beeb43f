// Unit tests of the client library, run by host/node's Go test
// (TestClientLibraryUnits) with `node --test`: the close policy, the
// waits, the queue's bound, and the reconnect loop over a fake WebSocket.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, policy, delayFor, defaults, roomURL } from "./index.js";

test("policy by close code", () => {
  assert.equal(policy(1012, true), "soon");
  assert.equal(policy(1001, true), "soon");
  assert.equal(policy(1013, true), "busy");
  assert.equal(policy(1006, false), "busy"); // refused before it opened
  assert.equal(policy(1006, true), "backoff");
  assert.equal(policy(1011, true), "backoff");
  for (const code of [1000, 1008, 4000, 4999]) assert.equal(policy(code, true), "stop");
  assert.equal(policy(4001, true, (c) => c === 4001), "backoff");
});

test("waits: exponential, bounded, jittered", () => {
  const none = () => 0, all = () => 1;
  assert.deepEqual([1, 2, 3, 4].map((n) => delayFor("backoff", n, defaults, none)), [250, 500, 1000, 2000]);
  assert.equal(delayFor("backoff", 30, defaults, none), defaults.maxDelay);
  assert.equal(delayFor("backoff", 1, defaults, all), 125); // half of it at most jitter
  assert.equal(delayFor("busy", 1, defaults, none), defaults.busyDelay);
  assert.equal(delayFor("soon", 1, defaults, none), defaults.soonDelay);
  assert.equal(delayFor("soon", 9, defaults, none), defaults.soonDelay * 8);
});

test("roomURL", () => {
  assert.equal(roomURL("https://ex.com/x", "chat", "a b"), "wss://ex.com/actor/chat/a%20b");
});

// FakeWS records what is sent and lets the test open and close it.
class FakeWS {
  static all = [];
  constructor(url) { this.url = url; this.readyState = 0; this.sent = []; FakeWS.all.push(this); }
  send(d) { this.sent.push(d); }
  close(code) { this.readyState = 3; this.onclose?.({ code: code ?? 1000, reason: "" }); }
  open() { this.readyState = 1; this.onopen?.(); }
  drop(code) { this.readyState = 3; this.onclose?.({ code, reason: "" }); }
}

test("queues while reconnecting, sends on open, stops on 4001", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  FakeWS.all = [];
  const room = connect("ws://h/actor/c/r", { WebSocket: FakeWS });
  const events = [];
  for (const k of ["open", "close"]) room.addEventListener(k, (e) => events.push(k + (e.code ? " " + e.code : "")));
  room.send("early");
  FakeWS.all[0].open();
  assert.deepEqual(FakeWS.all[0].sent, ["early"]);
  FakeWS.all[0].drop(1012);
  assert.equal(room.state, "reconnecting");
  room.send("while away");
  t.mock.timers.tick(defaults.soonDelay);
  assert.equal(FakeWS.all.length, 2);
  FakeWS.all[1].open();
  assert.deepEqual(FakeWS.all[1].sent, ["while away"]);
  FakeWS.all[1].drop(4001);
  assert.equal(room.state, "closed");
  t.mock.timers.tick(defaults.maxDelay);
  assert.equal(FakeWS.all.length, 2, "no reconnect after 4001");
  assert.throws(() => room.send("late"));
  assert.deepEqual(events, ["open", "close 1012", "open", "close 4001"]);
});

test("the queue is bounded", () => {
  FakeWS.all = [];
  const room = connect("ws://h/actor/c/r", { WebSocket: FakeWS, maxQueued: 2 });
  room.send("a");
  room.send("b");
  assert.throws(() => room.send("c"), /over the bound/);
  room.close();
});
