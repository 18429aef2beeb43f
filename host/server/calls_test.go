package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
)

// echoCalls makes n answer every call from a peer with its payload, on a
// clock at 1,000 s.
func echoCalls(n *testNode, got *calls.Call) {
	n.member.mu.Lock()
	defer n.member.mu.Unlock()
	n.member.serveCall = func(wire []byte) (calls.Result, error) {
		c, err := calls.DecodeWire(wire, 1000e9)
		if err != nil {
			return calls.Result{}, err
		}
		*got = c
		return calls.Result{Reply: append([]byte("echo "), c.Payload...)}, nil
	}
}

// TestSendCall: a call goes to a peer signed, body and all, with its
// chain and the time it has left, and its answer comes back.
func TestSendCall(t *testing.T) {
	n1, n2 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret)
	var got calls.Call
	echoCalls(n2, &got)
	c := &calls.Call{To: calls.Room{Class: "game", Name: "g1"}, Chain: calls.Chain{{Class: "lobby", Name: "main"}},
		Payload: []byte("hi"), Deadline: 7e9}
	res, sent := n1.srv.cfg.Cluster.SendCall(context.Background(), "n2", n2.addr(), c, 2e9) // 5 s left
	if !sent || res.Err != nil || string(res.Reply) != "echo hi" {
		t.Fatalf("SendCall = %+v, sent %v", res, sent)
	}
	if got.To != c.To || len(got.Chain) != 1 || got.Chain[0] != c.Chain[0] || got.Deadline != 1005e9 {
		t.Fatalf("the peer got %+v, want the call with 5 s left on its clock", got)
	}
	// Past its deadline a call is not sent.
	if res, sent := n1.srv.cfg.Cluster.SendCall(context.Background(), "n2", n2.addr(), c, 8e9); sent || res.Err == nil || res.Err.Status != abi.StatusTimeout {
		t.Fatalf("a call past its deadline: %+v, sent %v", res, sent)
	}
}

// TestSendCallUnreachable: a call to an address nobody listens on was not
// sent: the member may route it again.
func TestSendCallUnreachable(t *testing.T) {
	n1 := startNode(t, "n1", testSecret)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := &calls.Call{To: calls.Room{Class: "game", Name: "g1"}, Deadline: int64(time.Minute)}
	res, sent := n1.srv.cfg.Cluster.SendCall(context.Background(), "n9", addr, c, 0)
	if sent || res.Err == nil || res.Err.Status != abi.StatusRefused {
		t.Fatalf("a call to a closed port: %+v, sent %v; want refused, not sent", res, sent)
	}
}

// TestPeerCallIsSigned: a call from anyone but a peer, or whose body was
// changed on its way, is refused before it reaches the member.
func TestPeerCallIsSigned(t *testing.T) {
	n2 := startNode(t, "n2", testSecret)
	var got calls.Call
	echoCalls(n2, &got)
	body := calls.AppendWire(nil, &calls.Call{To: calls.Room{Class: "game", Name: "g1"}, Payload: []byte("hi"), Deadline: 5e9}, 0)
	post := func(sign bool, tamper bool) int {
		req, err := http.NewRequest("POST", n2.http.URL+"/cluster/v1/call", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if sign {
			signPeer(req, testSecret, "n1", time.Now())
			req.Header.Set(PeerBodySigHeader, bodySignature(testSecret, req.Header.Get(PeerSigHeader), body))
		}
		if tamper {
			b := bytes.Replace(body, []byte("hi"), []byte("ho"), 1)
			req.Body, req.ContentLength = readCloser{bytes.NewReader(b)}, int64(len(b))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := post(false, false); st != http.StatusForbidden {
		t.Fatalf("an unsigned call: %d, want 403", st)
	}
	if st := post(true, true); st != http.StatusForbidden {
		t.Fatalf("a call whose body changed: %d, want 403", st)
	}
	if got.To.Name != "" {
		t.Fatal("a refused call reached the member")
	}
	if st := post(true, false); st != http.StatusOK || got.To.Name != "g1" {
		t.Fatalf("a signed call: %d, the member got %+v", st, got)
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }
