package loadgen

// A benchmark message is text (so that servers that relay text only, like
// the chat example, carry it too): a fixed header in ASCII hex, then
// padding up to the message size.
//
//	offset  0  "wkb1"
//	        4  run id, 8 hex digits: messages of other runs (a chat room's
//	           history, say) are told apart and ignored
//	       12  stream id, 8 hex digits: the socket (echo) or room (broadcast)
//	           that sent it
//	       20  sequence number in its stream, 8 hex digits
//	       28  send time, 12 hex digits: nanoseconds since the run's start
//	           on the monotonic clock (the receiver is the same process)
//	       40  padding: 'x' up to the message size
const (
	magic      = "wkb1"
	headerSize = 40

	// MinSize is the smallest message size: the header alone.
	MinSize = headerSize
)

// header is what a benchmark message carries.
type header struct {
	run, stream, seq uint32
	sent             int64 // ns since the run's start
}

const hexDigits = "0123456789abcdef"

func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

func getHex(src []byte) (uint64, bool) {
	var v uint64
	for _, c := range src {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// newPayload returns a message of size bytes (at least MinSize) with its
// padding in place; encode writes the header into it.
func newPayload(size int) []byte {
	p := make([]byte, size)
	copy(p, magic)
	for i := headerSize; i < size; i++ {
		p[i] = 'x'
	}
	return p
}

// encode writes h into the first headerSize bytes of p.
func encode(p []byte, h header) {
	copy(p, magic)
	putHex(p[4:12], uint64(h.run))
	putHex(p[12:20], uint64(h.stream))
	putHex(p[20:28], uint64(h.seq))
	putHex(p[28:40], uint64(h.sent)&(1<<48-1))
}

// decode reads a benchmark message's header; ok is false for any other
// message.
func decode(p []byte) (h header, ok bool) {
	if len(p) < headerSize || string(p[:4]) != magic {
		return h, false
	}
	run, ok1 := getHex(p[4:12])
	stream, ok2 := getHex(p[12:20])
	seq, ok3 := getHex(p[20:28])
	sent, ok4 := getHex(p[28:40])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return h, false
	}
	return header{run: uint32(run), stream: uint32(stream), seq: uint32(seq), sent: int64(sent)}, true
}
