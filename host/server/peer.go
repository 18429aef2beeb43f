package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// Node-to-node requests (a forwarded room request, a relayed upgrade, a
// peer's status, drain, move or take call) carry three headers:
//
//	Wasmkeep-Peer:      the sending node's name (the hop marker)
//	Wasmkeep-Peer-Time: the send time, Unix milliseconds
//	Wasmkeep-Peer-Sig:  hex HMAC-SHA256, under the cluster secret, of the
//	                    name, time, method, Host and request URI
//
// A request with any of them is refused (403) unless the signature checks
// and the time is within peerSkew of the receiver's wall clock, so a
// client cannot pose as a peer, nor make a node take its request for a
// forwarded one. The body is not signed (a forwarded body is streamed):
// the link between nodes is meant to be private; a captured request could
// be replayed within peerSkew. docs/cluster.md says so.
const (
	PeerHeader     = "Wasmkeep-Peer"
	PeerTimeHeader = "Wasmkeep-Peer-Time"
	PeerSigHeader  = "Wasmkeep-Peer-Sig"
)

// peerSkew bounds the difference between a peer's wall clock and this
// node's, and so how long a captured request stays replayable.
const peerSkew = 30 * time.Second

// peerSignature is the signature of a request from node at ms.
func peerSignature(secret []byte, node, ms, method, host, uri string) string {
	mac := hmac.New(sha256.New, secret)
	for _, part := range []string{node, ms, method, host, uri} {
		mac.Write([]byte(part))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// signPeer signs r as a request from node, sent now.
func signPeer(r *http.Request, secret []byte, node string, now time.Time) {
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	r.Header.Set(PeerHeader, node)
	r.Header.Set(PeerTimeHeader, ms)
	r.Header.Set(PeerSigHeader, peerSignature(secret, node, ms, r.Method, r.Host, r.URL.RequestURI()))
}

// fromPeer reports whether r carries any of the peer headers.
func fromPeer(r *http.Request) bool {
	return r.Header.Get(PeerHeader) != "" || r.Header.Get(PeerTimeHeader) != "" || r.Header.Get(PeerSigHeader) != ""
}

// verifyPeer checks r's peer headers with secret at now: the sending
// node's name, or why it is refused.
func verifyPeer(r *http.Request, secret []byte, now time.Time) (node, why string) {
	node, ms, sig := r.Header.Get(PeerHeader), r.Header.Get(PeerTimeHeader), r.Header.Get(PeerSigHeader)
	if len(secret) == 0 {
		return "", "this node is not a member of a cluster"
	}
	if node == "" || ms == "" || sig == "" {
		return "", "a node-to-node request needs all of " + PeerHeader + ", " + PeerTimeHeader + " and " + PeerSigHeader
	}
	sent, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return "", PeerTimeHeader + " is not a time in Unix milliseconds"
	}
	if d := now.Sub(time.UnixMilli(sent)); d > peerSkew || d < -peerSkew {
		return "", "the node-to-node request's time is off by more than " + peerSkew.String()
	}
	want := peerSignature(secret, node, ms, r.Method, r.Host, r.URL.RequestURI())
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return "", "the node-to-node request's signature does not match this cluster's secret"
	}
	return node, ""
}
