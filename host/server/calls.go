package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
)

// Calls between rooms across nodes (docs/cluster.md, "Calls"). The node
// whose room makes a call sends it, when the member routes it to another
// node, as a signed POST /cluster/v1/call whose body is the call
// (calls.AppendWire: the callee, the chain, the time left, the payload)
// and whose answer is the result (calls.AppendResult). Unlike a forwarded
// room request, the body is signed too (PeerBodySigHeader): a call is
// read whole before it runs, so its bytes can be checked first.

// PeerBodySigHeader is hex HMAC-SHA256, under the cluster secret, of a
// call's PeerSigHeader and its body.
const PeerBodySigHeader = "Wasmkeep-Peer-Body-Sig"

// Bounds of a call between nodes.
const (
	// maxCallWire bounds a call's body: its payload and room for the
	// names of its chain.
	maxCallWire = calls.MaxPayload + 64<<10
	// maxCallAnswer bounds its answer: the reply and a status.
	maxCallAnswer = calls.MaxReply + 64<<10
	// maxCallConnsPerPeer keeps warm connections to each peer: calls are
	// many and small, and a connection per call would cost a handshake.
	maxCallConnsPerPeer = 64
)

// callHTTP is the client of calls between nodes: as peerHTTP, with more
// warm connections per peer and no bound of its own on the answer's
// wait, which the call's deadline bounds.
var callHTTP = &http.Client{
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: peerDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxCallConnsPerPeer,
		IdleConnTimeout:     idleConnTimeout,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func bodySignature(secret []byte, sig string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(PeerBodySigHeader + "\x00" + sig + "\x00"))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// SendCall sends c to node, at address, and returns its answer; now is
// the time on the clock of c's deadline. sent is false only if the
// request was not written whole (it could not connect, or the connection
// failed first): the peer cannot have run it. A call that was sent and
// got no answer by its deadline is answered StatusTimeout.
func (c *Cluster) SendCall(ctx context.Context, node, address string, call *calls.Call, now int64) (res calls.Result, sent bool) {
	left := time.Duration(call.Deadline - now)
	if left <= 0 {
		return calls.Expired(call), false
	}
	target, err := peerURL(address, "/cluster/v1/call")
	if err != nil {
		return calls.Fail(abi.StatusRefused, "cannot send the call to node %s: %v", node, err), false
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	body := calls.AppendWire(nil, call, now)
	var wrote bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote = i.Err == nil },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return calls.Fail(abi.StatusRefused, "cannot send the call to node %s: %v", node, err), false
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	signPeer(req, c.Secret, c.Node, time.Now())
	req.Header.Set(PeerBodySigHeader, bodySignature(c.Secret, req.Header.Get(PeerSigHeader), body))
	resp, err := callHTTP.Do(req)
	if err != nil {
		if !wrote {
			return calls.Fail(abi.StatusRefused, "cannot reach node %s: %v", node, withoutURL(err)), false
		}
		if ctx.Err() != nil {
			return calls.Expired(call), true
		}
		return calls.Fail(abi.StatusTimeout, "the connection to node %s failed after the call was sent (it may have run): %v", node, withoutURL(err)), true
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxCallAnswer+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return calls.Expired(call), true
	case err != nil:
		return calls.Fail(abi.StatusTimeout, "reading node %s's answer (the call may have run): %v", node, err), true
	case len(data) > maxCallAnswer:
		return calls.Fail(abi.StatusTooLarge, "node %s answered over %d bytes", node, maxCallAnswer), true
	case resp.StatusCode != http.StatusOK:
		// Refused before anything ran: a bad signature, a malformed call.
		return calls.Fail(abi.StatusRefused, "node %s refused the call: HTTP %d: %s", node, resp.StatusCode, answerMessage(data)), true
	}
	res, err = calls.DecodeResult(data)
	if err != nil {
		return calls.Fail(abi.StatusTimeout, "node %s's answer is malformed (the call may have run)", node), true
	}
	return res, true
}

// peerCall serves a call another node sent: the member routes it here
// (forwarded: it goes no further) and its answer goes back.
func (s *Server) peerCall(w http.ResponseWriter, r *http.Request, c *Cluster) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallWire))
	if err != nil {
		jsonError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a call's body is at most %d bytes: %v", maxCallWire, err))
		return
	}
	if !hmac.Equal([]byte(r.Header.Get(PeerBodySigHeader)), []byte(bodySignature(c.Secret, r.Header.Get(PeerSigHeader), body))) {
		jsonError(w, http.StatusForbidden, "the call's body does not match its signature ("+PeerBodySigHeader+")")
		return
	}
	res, err := c.Member.ServeCall(r.Context(), body)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(calls.AppendResult(nil, res))
}
