// Scenarios for wasmkeep's Phoenix channels, driven with the real phoenix.js
// client (the npm package, on the ws transport). host/node's Go tests start
// a node with the presence and channels example classes and run:
//
//   node scenarios.mjs <node base URL> <scenario>
//
// A scenario prints "ok <scenario>" and exits 0, or prints why it failed
// and exits 1. Every wait has a deadline.
import { Socket, Presence } from "phoenix";
import WebSocket from "ws";

const [base, scenario] = process.argv.slice(2);
const wsBase = base.replace(/^http/, "ws");
const deadline = (ms, what) => new Promise((_, reject) => setTimeout(() => reject(new Error("timed out: " + what)), ms));

function socket(room, opts = {}) {
  const s = new Socket(`${wsBase}/actor/${room}/socket`, {
    transport: WebSocket,
    heartbeatIntervalMs: 100,
    reconnectAfterMs: () => 50,
    rejoinAfterMs: () => 50,
    ...opts,
  });
  s.connect();
  return s;
}

// join resolves with the join's response, or rejects with its error.
function join(channel) {
  return Promise.race([
    new Promise((resolve, reject) => {
      channel.join().receive("ok", resolve).receive("error", reject).receive("timeout", () => reject(new Error("join timeout")));
    }),
    deadline(10000, "join " + channel.topic),
  ]);
}

function push(channel, event, payload) {
  return Promise.race([
    new Promise((resolve, reject) => {
      channel.push(event, payload).receive("ok", resolve).receive("error", reject).receive("timeout", () => reject(new Error("push timeout")));
    }),
    deadline(10000, "push " + event),
  ]);
}

// until polls cond until it holds.
async function until(what, cond, ms = 10000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise(r => setTimeout(r, 10));
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function admin(method, path) {
  const r = await fetch(base + path, { method, headers: { "X-Wasmkeep-Admin": "1" } }); // as the CLI does
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function roomState(klass, name) {
  const rooms = await admin("GET", "/admin/rooms");
  return rooms.find(r => r.class === klass && r.name === name);
}

const scenarios = {
  // Join, push with a reply, broadcast between two clients, presence sync
  // on both, leave.
  async chat() {
    const s1 = socket("presence/js"), s2 = socket("presence/js");
    const ada = s1.channel("room:lobby", { name: "ada" });
    const bob = s2.channel("room:lobby", { name: "bob" });
    const p1 = new Presence(ada), p2 = new Presence(bob);
    const joined = await join(ada);
    assert(Array.isArray(joined.history), "join response has history: " + JSON.stringify(joined));
    await join(bob);
    const names = p => p.list((key) => key).sort().join(",");
    await until("both see ada,bob", () => names(p1) === "ada,bob" && names(p2) === "ada,bob");

    const got = [];
    bob.on("shout", m => got.push(m));
    ada.on("shout", m => got.push(m));
    const reply = await push(ada, "shout", { body: "hello bob" });
    assert(JSON.stringify(reply) === "{}", "shout reply " + JSON.stringify(reply));
    await until("both receive the shout", () => got.length === 2);
    assert(got.every(m => m.name === "ada" && m.body === "hello bob"), "shouts " + JSON.stringify(got));
    const pong = await push(bob, "ping", {});
    assert(pong.pong === true, "ping reply " + JSON.stringify(pong));
    await push(bob, "nonsense", {}).then(() => { throw new Error("unknown event accepted"); }, e => assert(e.reason === "unknown event", "error reply " + JSON.stringify(e)));

    await new Promise((resolve, reject) => bob.leave().receive("ok", resolve).receive("timeout", reject));
    await until("ada sees bob leave", () => names(p1) === "ada");
    s1.disconnect(); s2.disconnect();
  },

  // A refused join reaches receive("error") with the room's reason.
  async refused() {
    const s = socket("presence/js-refused");
    const ch = s.channel("room:lobby", {});
    await join(ch).then(() => { throw new Error("join without a name accepted"); }, e => assert(e.reason === "name required", "reason " + JSON.stringify(e)));
    s.disconnect();
  },

  // Heartbeats keep the socket up while the room is hibernated, and do not
  // wake it; the next push does.
  async heartbeat() {
    const s = socket("presence/js-hb");
    const ch = s.channel("room:lobby", { name: "hb" });
    await join(ch);
    // phoenix.js reconnects when a heartbeat's answer takes longer than
    // the interval (a loaded machine), and its rejoin is a real event that
    // wakes the room: only beats on one connection, with no open between
    // the hibernation and the room's state read after them, show that
    // heartbeats alone leave the room asleep.
    let beats = 0, opens = 0;
    s.onOpen(() => opens++);
    s.onMessage(m => { if (m.topic === "phoenix") beats++; });
    for (let attempt = 1; ; attempt++) {
      await until("joined", () => ch.state === "joined" && s.isConnected());
      const opensBefore = opens;
      await admin("POST", "/admin/rooms/presence/js-hb/hibernate");
      beats = 0;
      await until("ten heartbeats answered", () => beats >= 10 || opens !== opensBefore);
      const st = await roomState("presence", "js-hb");
      if (opens !== opensBefore) {
        assert(attempt < 5, "phoenix.js reconnected in each of " + attempt + " tries");
        continue;
      }
      assert(s.isConnected(), "socket dropped while the room slept");
      assert(st.state === "hibernated" && st.sockets === 1, "room woke for heartbeats: " + JSON.stringify(st));
      break;
    }
    const pong = await push(ch, "ping", {});
    assert(pong.pong === true, "ping after hibernation");
    s.disconnect();
  },

  // The server closes the socket (the room kicks it with 4000): phoenix.js
  // reconnects and rejoins by itself, and the room sees the new join.
  async rejoin() {
    const s = socket("channels/js-rejoin");
    const ch = s.channel("room:x", {});
    await join(ch);
    let joins = 0;
    s.onOpen(() => joins++);
    let closed = false;
    s.onClose(() => { closed = true; });
    ch.push("kick", {}); // no reply: the socket closes under it
    await until("the server's close", () => closed);
    await until("reconnected", () => joins >= 1 && s.isConnected());
    await until("rejoined", () => ch.state === "joined");
    const echoed = await push(ch, "echo", { back: 1 });
    assert(echoed.back === 1, "echo after rejoin " + JSON.stringify(echoed));
    s.disconnect();
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error("unknown scenario " + scenario + "; have: " + Object.keys(scenarios).join(", "));
  process.exit(2);
}
Promise.race([run(), deadline(60000, scenario)]).then(
  () => { console.log("ok " + scenario); process.exit(0); },
  e => { console.error("FAIL " + scenario + ": " + (e && e.stack || JSON.stringify(e))); process.exit(1); },
);
