// Handlers the room registered, read by exports.ts. Internal to the SDK.

import { Request, Response, Socket, SocketOpen, Message, Join, ChannelMessage, Reply } from "./index";

export let onRequest: ((r: Request) => Response | null) | null = null;
export let onSocketOpen: ((s: Socket, o: SocketOpen) => void) | null = null;
export let onSocketMessage: ((s: Socket, m: Message) => void) | null = null;
export let onSocketClose: ((s: Socket, code: i32, reason: string) => void) | null = null;
export let onJoin: ((s: Socket, j: Join) => Reply | null) | null = null;
export let onChannelMessage: ((s: Socket, m: ChannelMessage) => Reply | null) | null = null;
export let onLeave: ((s: Socket, topic: string, reason: string) => void) | null = null;
export let onUpgrade: (() => Uint8Array | null) | null = null;
export let onStartFrom: ((prev: Uint8Array, fromVersion: string) => void) | null = null;

export function setOnRequest(h: (r: Request) => Response | null): void { onRequest = h; }
export function setOnSocketOpen(h: (s: Socket, o: SocketOpen) => void): void { onSocketOpen = h; }
export function setOnSocketMessage(h: (s: Socket, m: Message) => void): void { onSocketMessage = h; }
export function setOnSocketClose(h: (s: Socket, code: i32, reason: string) => void): void { onSocketClose = h; }
export function setOnJoin(h: (s: Socket, j: Join) => Reply | null): void { onJoin = h; }
export function setOnChannelMessage(h: (s: Socket, m: ChannelMessage) => Reply | null): void { onChannelMessage = h; }
export function setOnLeave(h: (s: Socket, topic: string, reason: string) => void): void { onLeave = h; }
export function setOnUpgrade(h: () => Uint8Array | null): void { onUpgrade = h; }
export function setOnStartFrom(h: (prev: Uint8Array, fromVersion: string) => void): void { onStartFrom = h; }
