package socket

import "errors"

// Errors returned by this package. Compare with errors.Is.
var (
	// ErrClosed is returned by a send to a socket that is closing or
	// closed, whoever closed it.
	ErrClosed = errors.New("socket: closed")

	// ErrSlowReader is returned by the send that would have taken the
	// socket's outbound queue past its hard cap (QueueLimitFactor times
	// its byte budget). The socket has been evicted (it is closing with
	// abi.CloseSlowReader) and the message was not queued.
	ErrSlowReader = errors.New("socket: outbound queue at its hard cap, socket evicted")

	// ErrTooLarge is returned for a message larger than the whole outbound
	// byte budget; it is not queued and the socket stays open.
	ErrTooLarge = errors.New("socket: message larger than the outbound budget")

	// ErrBadKind is returned for a message kind other than abi.MessageText
	// or abi.MessageBinary.
	ErrBadKind = errors.New("socket: message kind must be text or binary")

	// ErrInvalidUTF8 is returned for a text message that is not valid UTF-8
	// (a client would fail the connection on it).
	ErrInvalidUTF8 = errors.New("socket: text message is not valid UTF-8")

	// ErrAtCapacity is returned by Upgrade when the node-wide socket cap is
	// reached; HTTP 429 has been written.
	ErrAtCapacity = errors.New("socket: node socket cap reached")

	// ErrRateLimited is returned by Upgrade when the client address's
	// attempt rate is exceeded; HTTP 429 has been written.
	ErrRateLimited = errors.New("socket: too many upgrade attempts from the address")

	// ErrAddressLimit is returned by Upgrade when the client address has
	// as many sockets open as it may (or the table of addresses is full);
	// HTTP 429 has been written.
	ErrAddressLimit = errors.New("socket: too many sockets from the address")

	// ErrHubClosed is returned by Upgrade after Hub.Close; HTTP 503 has been
	// written.
	ErrHubClosed = errors.New("socket: hub closed")
)
