// The records of ABI v1 (docs/abi.md, "Records"), encoded and decoded in
// AssemblyScript. All integers are little-endian, which is WebAssembly's
// byte order, so a field is one load or store:
//
//	str     = len:u32 bytes[len]        (UTF-8)
//	bytes   = len:u32 bytes[len]
//	headers = count:u32 (name:str value:str)*count   (at most 256)
//
// The records of calls between rooms are encoded and decoded here (the
// others where they are used, in index.ts and exports.ts):
//
//	Call     = class:str name:str payload:bytes   (the callee in call_start, the caller in on_call)
//	HandOver = class:str name:str headers         (a front's upgrade handed to a room)
//
// Decoders stop at the first field that does not fit and report it from
// finish(), which also rejects trailing bytes, so a record decodes whole
// or not at all.

/** One HTTP header line. Names keep the case they arrived with. */
export class Header {
  constructor(public name: string, public value: string) {}
}

/** The most headers a record may carry (abi.MaxHeaderCount). */
export const MAX_HEADERS: u32 = 256;

/** Reads the fields of one record in order. */
export class Reader {
  private pos: usize;
  private end: usize;
  private bad: bool = false;

  constructor(ptr: usize, len: usize) {
    this.pos = ptr;
    this.end = ptr + len;
  }

  private need(n: usize): bool {
    if (this.bad || this.end - this.pos < n) {
      this.bad = true;
      return false;
    }
    return true;
  }

  u8(): u8 {
    if (!this.need(1)) return 0;
    let v = load<u8>(this.pos);
    this.pos += 1;
    return v;
  }

  u32(): u32 {
    if (!this.need(4)) return 0;
    let v = load<u32>(this.pos);
    this.pos += 4;
    return v;
  }

  /** A str field, decoded from UTF-8 (invalid bytes become U+FFFD). */
  str(): string {
    let n = <usize>this.u32();
    if (!this.need(n)) return "";
    let s = n == 0 ? "" : String.UTF8.decodeUnsafe(this.pos, n);
    this.pos += n;
    return s;
  }

  /** A bytes field, copied into a new array the caller owns. */
  bytes(): Uint8Array {
    let n = <usize>this.u32();
    if (!this.need(n)) return new Uint8Array(0);
    let b = new Uint8Array(<i32>n);
    memory.copy(b.dataStart, this.pos, n);
    this.pos += n;
    return b;
  }

  /** A bytes field decoded as UTF-8 text (JSON payloads). */
  text(): string {
    return this.str();
  }

  headers(): Header[] {
    let n = this.u32();
    // Each header takes at least 8 bytes: that bounds n before anything
    // is allocated for it.
    if (n > MAX_HEADERS || !this.need(<usize>n * 8)) {
      this.bad = true;
      return [];
    }
    let hs = new Array<Header>(<i32>n);
    for (let i: u32 = 0; i < n; i++) {
      let name = this.str();
      let value = this.str();
      hs[i] = new Header(name, value);
    }
    return hs;
  }

  /** Reports whether every field fitted and nothing is left over. */
  finish(): bool {
    return !this.bad && this.pos == this.end;
  }
}

// The output buffer: one unmanaged region (not seen by the garbage
// collector) that grows to the largest record the room has sent and is
// reused for every record, message and reply, so sending allocates
// nothing in steady state. Host functions copy what they keep before they
// return.
let outPtr: usize = 0;
let outCap: usize = 0;
let outLen: usize = 0;

/** Writes one record at a time into the output buffer. */
export namespace out {
  /** Starts a new record. */
  export function reset(): void {
    outLen = 0;
  }

  /** The record's address. */
  export function ptr(): usize {
    return outPtr;
  }

  /** The record's length. */
  export function len(): usize {
    return outLen;
  }

  /** Makes room for n more bytes and returns their address. */
  export function reserve(n: usize): usize {
    if (outLen + n > outCap) {
      let c = max(max(outCap << 1, outLen + n), <usize>256);
      outPtr = outPtr == 0 ? heap.alloc(c) : heap.realloc(outPtr, c);
      outCap = c;
    }
    return outPtr + outLen;
  }

  export function putU8(v: u8): void {
    store<u8>(reserve(1), v);
    outLen += 1;
  }

  export function putU32(v: u32): void {
    store<u32>(reserve(4), v);
    outLen += 4;
  }

  /** Appends s as UTF-8 without a length (lone surrogates become U+FFFD). */
  export function utf8(s: string): void {
    let n = <usize>String.UTF8.byteLength(s);
    let p = reserve(n);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p, false, String.UTF8.ErrorMode.REPLACE);
    outLen += n;
  }

  /** Appends a str field. */
  export function str(s: string): void {
    putU32(<u32>String.UTF8.byteLength(s));
    utf8(s);
  }

  /** Appends raw bytes without a length. */
  export function raw(b: Uint8Array): void {
    let n = <usize>b.byteLength;
    let p = reserve(n);
    memory.copy(p, b.dataStart, n);
    outLen += n;
  }

  /** Appends a bytes field from n bytes at p. */
  export function span(p: usize, n: usize): void {
    putU32(<u32>n);
    let d = reserve(n);
    memory.copy(d, p, n);
    outLen += n;
  }

  /** Appends a bytes field. */
  export function bytes(b: Uint8Array): void {
    putU32(<u32>b.byteLength);
    raw(b);
  }

  export function headers(hs: Header[]): void {
    putU32(<u32>hs.length);
    for (let i = 0; i < hs.length; i++) {
      let h = unchecked(hs[i]);
      str(h.name);
      str(h.value);
    }
  }
}

/**
 * A Call record: in wasmkeep_on_call it names the caller (name "" for a
 * front), in call_start the callee.
 */
export class CallRecord {
  constructor(
    public className: string,
    public name: string,
    /** A copy the handler may keep. */
    public payload: Uint8Array,
  ) {}
}

/** Decodes a Call record, or answers null if it is malformed. */
export function readCall(ptr: usize, len: usize): CallRecord | null {
  let rd = new Reader(ptr, len);
  let className = rd.str();
  let name = rd.str();
  let payload = rd.bytes();
  if (!rd.finish()) return null;
  return new CallRecord(className, name, payload);
}

/**
 * Encodes a Call record into the output buffer, its payload given as
 * bytes or, when bytes is null, as text: a str and a bytes field are the
 * same on the wire, so a text payload is encoded straight from the string
 * rather than through an intermediate array.
 */
export function putCall(className: string, name: string, bytes: Uint8Array | null, text: string | null): void {
  out.reset();
  out.str(className);
  out.str(name);
  if (bytes !== null) {
    out.bytes(bytes);
  } else {
    out.str(text === null ? "" : text);
  }
}

/** A HandOver record: the room a front hands a WebSocket upgrade to. */
export class HandOverRecord {
  constructor(
    public className: string,
    public name: string,
    public headers: Header[],
  ) {}

  /** Encodes the record into the output buffer. */
  put(): void {
    out.reset();
    out.str(this.className);
    out.str(this.name);
    out.headers(this.headers);
  }
}
