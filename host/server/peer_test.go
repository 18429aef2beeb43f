package server

import (
	"net/http/httptest"
	"testing"
	"time"
)

func TestPeerSignatureChecks(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_800_000_000, 0)
	req := httptest.NewRequest("GET", "http://n2:8080/actor/counter/a?x=1", nil)
	signPeer(req, secret, "n1", now)
	if node, why := verifyPeer(req, secret, now.Add(time.Second)); node != "n1" || why != "" {
		t.Fatalf("a signed request: node %q, refusal %q", node, why)
	}
	cases := map[string]func(){
		"other secret": func() {},
		"late":         func() {},
		"early":        func() {},
		"other path":   func() { req.URL.Path = "/actor/counter/b" },
		"other method": func() { req.Method = "POST" },
		"other host":   func() { req.Host = "n3:8080" },
		"other node":   func() { req.Header.Set(PeerHeader, "n9") },
		"no signature": func() { req.Header.Del(PeerSigHeader) },
		"bad time":     func() { req.Header.Set(PeerTimeHeader, "soon") },
	}
	for name, spoil := range cases {
		req = httptest.NewRequest("GET", "http://n2:8080/actor/counter/a?x=1", nil)
		signPeer(req, secret, "n1", now)
		spoil()
		key, at := secret, now
		switch name {
		case "other secret":
			key = []byte("other")
		case "late":
			at = now.Add(peerSkew + time.Second)
		case "early":
			at = now.Add(-peerSkew - time.Second)
		}
		if node, why := verifyPeer(req, key, at); why == "" || node != "" {
			t.Errorf("%s: accepted as from %q", name, node)
		}
		if !fromPeer(req) {
			t.Errorf("%s: not seen as a peer request", name)
		}
	}
	if _, why := verifyPeer(req, nil, now); why == "" {
		t.Error("a node without a cluster secret accepted a peer request")
	}
	if fromPeer(httptest.NewRequest("GET", "/actor/a/b", nil)) {
		t.Error("a plain request taken for a peer's")
	}
}
