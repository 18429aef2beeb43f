package socket

// A freeList keeps up to its capacity of spare buffers of one kind for
// reuse. The socket layer's buffers live only while a socket has something
// in flight, and a busy node allocates them thousands of times a second:
// a sync.Pool, which every collection empties (and a busy node collects
// often) and whose Put of a slice allocates, missed about as often as it
// hit in an echo. A freeList survives collections and allocates nothing;
// it holds at most its capacity of spares, and an idle node keeps them.
type freeList[T any] struct {
	spare chan T
	fresh func() T // a new buffer when there is no spare
	reset func(T) (T, bool)
}

// newFreeList makes a free list of at most n spares. reset readies a
// buffer for reuse, or says it is not worth keeping.
func newFreeList[T any](n int, fresh func() T, reset func(T) (T, bool)) *freeList[T] {
	return &freeList[T]{spare: make(chan T, n), fresh: fresh, reset: reset}
}

func (l *freeList[T]) get() T {
	select {
	case b := <-l.spare:
		return b
	default:
		return l.fresh()
	}
}

func (l *freeList[T]) put(b T) {
	b, ok := l.reset(b)
	if !ok {
		return
	}
	select {
	case l.spare <- b:
	default: // full: left to the collector
	}
}

// Queues of frames (a socket's outbound queue) and of messages (its
// inbound one) come from free lists while they hold something, so that a
// burst does not grow a fresh slice from nothing each time and an idle
// socket holds none. Queues that grew past maxPooledQueue are left to the
// collector.
const (
	pooledQueue    = 16
	maxPooledQueue = 256
	spareQueues    = 256 // a list's spares: at most 1.5 MiB of frame queues, 2 MiB of message queues
)

var (
	frameQueues   = newFreeList(spareQueues, func() [][]byte { return make([][]byte, 0, pooledQueue) }, resetQueue[[]byte])
	messageQueues = newFreeList(spareQueues, func() []Message { return make([]Message, 0, pooledQueue) }, resetQueue[Message])
)

// resetQueue empties a queue for reuse, dropping what it referred to.
func resetQueue[T any](q []T) ([]T, bool) {
	if cap(q) > maxPooledQueue {
		return nil, false
	}
	clear(q)
	return q[:0], true
}

func getFrameQueue() [][]byte     { return frameQueues.get() }
func putFrameQueue(q [][]byte)    { frameQueues.put(q) }
func getMessageQueue() []Message  { return messageQueues.get() }
func putMessageQueue(q []Message) { messageQueues.put(q) }

// Send's chunks (see outSpaceLocked), by size: at most 256 KiB of small
// and 512 KiB of large spares.
var (
	smallOutChunks = newFreeList(512, func() []byte { return make([]byte, 0, minOutChunk) }, resetChunk)
	largeOutChunks = newFreeList(128, func() []byte { return make([]byte, 0, maxOutChunk) }, resetChunk)
)

func resetChunk(b []byte) ([]byte, bool) { return b[:0], true }
