package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// probe sends GET path to h and returns the status and body.
func probe(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://127.0.0.1:8080"+path, nil)
	req.RemoteAddr = "10.0.0.9:5000" // a load balancer's: the probes need no admin access
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET %s: Content-Type %q, want text/plain", path, ct)
	}
	return rec.Code, rec.Body.String()
}

// expectReady fails unless /readyz on h answers 200 "ok", or, with a
// reason, 503 "not ready: " and the reason; /healthz answers "ok" either
// way (liveness is not readiness).
func expectReady(t *testing.T, h http.Handler, what, reason string) {
	t.Helper()
	code, body := probe(t, h, "/readyz")
	wantCode, wantBody := http.StatusOK, "ok\n"
	if reason != "" {
		wantCode, wantBody = http.StatusServiceUnavailable, "not ready: "+reason+"\n"
	}
	if code != wantCode || body != wantBody {
		t.Errorf("%s: /readyz answered %d %q, want %d %q", what, code, body, wantCode, wantBody)
	}
	if code, body := probe(t, h, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("%s: /healthz answered %d %q, want 200 \"ok\\n\"", what, code, body)
	}
}

// TestReadyzSingleNode: a node of no cluster is ready while it serves,
// and not once a stop has begun, on either listener.
func TestReadyzSingleNode(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate admin %v", separate), func(t *testing.T) {
			s := newTestServer(t, Config{SeparateAdmin: separate})
			handlers := []http.Handler{s}
			if separate {
				handlers = append(handlers, s.AdminHandler())
			}
			for _, h := range handlers {
				expectReady(t, h, "serving", "")
			}
			if err := s.rooms.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, h := range handlers {
				expectReady(t, h, "stopping", "stopping")
			}
		})
	}
}

// TestReadyzCluster: a cluster member is ready only while its membership
// says so (joined with a valid lease, not draining), with the membership's
// reason when not, and not once a stop has begun whatever the membership
// says (its lease stays valid while the stop hibernates its rooms).
func TestReadyzCluster(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate admin %v", separate), func(t *testing.T) {
			m := &fakeMember{}
			s := newTestServer(t, Config{SeparateAdmin: separate, Cluster: &Cluster{Node: "n1", Secret: testSecret, Member: m}})
			handlers := []http.Handler{s}
			if separate {
				handlers = append(handlers, s.AdminHandler())
			}
			for _, c := range []struct {
				what     string
				notReady error
			}{
				{"joining", errors.New("joining: the lease is not written yet")},
				{"joined", nil},
				{"draining", errors.New("draining")},
				{"undrained", nil},
				{"lapsed", errors.New("the lease has lapsed: it could not be renewed in time")},
			} {
				m.setReady(c.notReady)
				reason := ""
				if c.notReady != nil {
					reason = c.notReady.Error()
				}
				for _, h := range handlers {
					expectReady(t, h, c.what, reason)
				}
			}
			m.setReady(nil)
			if err := s.rooms.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, h := range handlers {
				expectReady(t, h, "stopping", "stopping")
			}
		})
	}
}
