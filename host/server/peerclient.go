package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// The node-to-node calls of the admin API (cluster_admin.go): a JSON
// request to a peer's /cluster/v1/ endpoint, signed (peer.go), bounded in
// time and in what is read of the answer.

// Bounds of a peer call.
const (
	// peerStatusTimeout bounds a status call: GET /admin/cluster asks
	// every peer at once and answers within it, whatever the peers do.
	peerStatusTimeout = 2 * time.Second
	// fenceProbeTimeout bounds the check a fence by hand makes that the
	// node does not answer: a running node answers its status within
	// milliseconds, and the operator waits for the fence.
	fenceProbeTimeout = 500 * time.Millisecond
	// peerCallTimeout bounds a drain, move or take call, and the member's
	// work on one: a move writes the room's state, releases its record and
	// has the target take it.
	peerCallTimeout = 30 * time.Second
	// peerDialTimeout bounds a connect: a peer whose machine is gone does
	// not answer at all.
	peerDialTimeout = 2 * time.Second
	// maxPeerAnswer caps what is read of a peer's answer to a drain, move
	// or take, or of an error.
	maxPeerAnswer = 1 << 20
	// maxPeerStatus caps a peer's status: it lists every room the peer
	// holds, about 80 bytes each, so 16 MiB is some 200,000 rooms.
	maxPeerStatus = 16 << 20
	// maxPeerBody caps the body of a peer endpoint's request, and of a
	// cluster admin request: a few names.
	maxPeerBody = 4 << 10
)

// peerHTTP is the client of node-to-node calls. No proxy from the
// environment: the link between nodes is meant to be private, and a
// proxy would see the signed requests. No redirect is followed: a peer
// endpoint never redirects, and a signature is for one URL.
var peerHTTP = &http.Client{
	Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: peerDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: peerCallTimeout,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// peerError is a peer's answer other than 2xx.
type peerError struct {
	node   string
	status int
	msg    string
}

func (e *peerError) Error() string {
	return fmt.Sprintf("node %s answered HTTP %d: %s", e.node, e.status, e.msg)
}

// peerUnreachable is a peer call that got no answer.
type peerUnreachable struct {
	node, address string
	err           error
}

func (e *peerUnreachable) Error() string {
	return fmt.Sprintf("cannot reach node %s at %s: %v", e.node, e.address, e.err)
}

func (e *peerUnreachable) Unwrap() error { return e.err }

// peerURL is the URL of path at a peer's address, as its lease gives it:
// host:port (HTTP), or a base URL with its scheme.
func peerURL(address, path string) (string, error) {
	if address == "" {
		return "", errors.New("its lease gives no address")
	}
	base := address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("its lease's address %q is not host:port", address)
	}
	return strings.TrimRight(base, "/") + path, nil
}

// call sends in (nil: no body) as JSON to node's path at address, signed
// as this node's, and decodes the answer into out (if not nil). The call
// is bounded by timeout and the answer by limit bytes. A non-2xx answer
// is a *peerError with the peer's message; no answer, a
// *peerUnreachable.
func (c *Cluster) call(ctx context.Context, node, address, method, path string, in, out any, timeout time.Duration, limit int64) error {
	target, err := peerURL(address, path)
	if err != nil {
		return &peerUnreachable{node: node, address: address, err: err}
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return &peerUnreachable{node: node, address: address, err: err}
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	signPeer(req, c.Secret, c.Node, time.Now())
	resp, err := peerHTTP.Do(req)
	if err != nil {
		err = withoutURL(err)
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("no answer within %v", timeout)
		}
		return &peerUnreachable{node: node, address: address, err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return &peerUnreachable{node: node, address: address, err: fmt.Errorf("reading its answer: %w", err)}
	}
	if int64(len(data)) > limit {
		return &peerError{node: node, status: resp.StatusCode, msg: fmt.Sprintf("an answer over %d bytes", limit)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &peerError{node: node, status: resp.StatusCode, msg: answerMessage(data)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &peerError{node: node, status: resp.StatusCode, msg: "an answer that is not the JSON expected: " + err.Error()}
	}
	return nil
}

// withoutURL is err without the method and URL of a *url.Error: the node
// and address a message names say where, and the cause is what a reader
// needs.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// AskTake asks node, at address (its lease's), to acquire and wake a
// room: the target's side of a move, for a ClusterMember's Move. It is a
// signed POST /cluster/v1/take, where the target's Member.Take does the
// work; its refusal comes back with the target's message.
func (c *Cluster) AskTake(ctx context.Context, node, address string, key rooms.Key) error {
	return c.call(ctx, node, address, http.MethodPost, "/cluster/v1/take", takeRequest{Class: key.Class, Name: key.Name}, nil, peerCallTimeout, maxPeerAnswer)
}

// answerMessage is the message of an error answer: its JSON "error", or
// its text, cut short.
func answerMessage(data []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return e.Error
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = strings.ToValidUTF8(msg[:200], "") + "…"
	}
	if msg == "" {
		msg = "no message"
	}
	return msg
}
