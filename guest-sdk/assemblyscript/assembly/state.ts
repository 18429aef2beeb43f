// Handlers the room registered, and the hand-over a request handler asked
// for, read by exports.ts. Internal to the SDK.

import { Request, Response, Socket, SocketOpen, Message, Join, ChannelMessage, Reply, Caller, Alarm, text } from "./index";
import { HandOverRecord } from "./records";

export let onRequest: ((r: Request) => Response | null) | null = null;
export let onSocketOpen: ((s: Socket, o: SocketOpen) => void) | null = null;
export let onSocketMessage: ((s: Socket, m: Message) => void) | null = null;
export let onSocketClose: ((s: Socket, code: i32, reason: string) => void) | null = null;
export let onJoin: ((s: Socket, j: Join) => Reply | null) | null = null;
export let onChannelMessage: ((s: Socket, m: ChannelMessage) => Reply | null) | null = null;
export let onLeave: ((s: Socket, topic: string, reason: string) => void) | null = null;
export let onUpgrade: (() => Uint8Array | null) | null = null;
export let onStartFrom: ((prev: Uint8Array, fromVersion: string) => void) | null = null;
export let onCall: ((from: Caller, payload: Uint8Array) => Uint8Array) | null = null;
export let onAlarm: ((a: Alarm) => void) | null = null;

export function setOnRequest(h: (r: Request) => Response | null): void { onRequest = h; }
export function setOnSocketOpen(h: (s: Socket, o: SocketOpen) => void): void { onSocketOpen = h; }
export function setOnSocketMessage(h: (s: Socket, m: Message) => void): void { onSocketMessage = h; }
export function setOnSocketClose(h: (s: Socket, code: i32, reason: string) => void): void { onSocketClose = h; }
export function setOnJoin(h: (s: Socket, j: Join) => Reply | null): void { onJoin = h; }
export function setOnChannelMessage(h: (s: Socket, m: ChannelMessage) => Reply | null): void { onChannelMessage = h; }
export function setOnLeave(h: (s: Socket, topic: string, reason: string) => void): void { onLeave = h; }
export function setOnUpgrade(h: () => Uint8Array | null): void { onUpgrade = h; }
export function setOnStartFrom(h: (prev: Uint8Array, fromVersion: string) => void): void { onStartFrom = h; }
export function setOnCall(h: (from: Caller, payload: Uint8Array) => Uint8Array): void { onCall = h; }
export function setOnAlarm(h: (a: Alarm) => void): void { onAlarm = h; }

// A hand-over works as the Go SDK's does: handOver (index.ts) records the
// room in handOverTo and returns handOverResponse, one Response the SDK
// keeps for the purpose; respond (exports.ts) recognises it by identity
// when the request handler returns it and calls http_hand_over instead of
// http_respond. Should the host refuse (not a front, not an upgrade),
// handOverResponse is sent as it is: a 500 saying so. The record is kept
// as fields rather than encoded at once because the output buffer it
// would be encoded into is scratch space for everything the handler does
// afterwards (a log line, a send).
export let handOverTo: HandOverRecord | null = null;
export let handOverResponse: Response | null = null;

/** Records a hand-over and returns the Response that stands for it. */
export function setHandOver(to: HandOverRecord): Response {
  handOverTo = to;
  let r = handOverResponse;
  if (r === null) {
    // Made on first use, so that rooms that never hand over do not carry it.
    r = text(500, "the request could not be handed to a room");
    handOverResponse = r;
  }
  return r;
}

/** Forgets the recorded hand-over (at the end of every request). */
export function clearHandOver(): void { handOverTo = null; }
