package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitReady: the demo's wait for a node returns once its /readyz
// answers ok, not before, and says why it gave up when it never does.
func TestWaitReady(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	const joinedAt = 3 // the third /readyz answers ok
	joining := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) < joinedAt {
			http.Error(w, "not ready: joining: the lease is not written yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer joining.Close()
	if err := waitReady(context.Background(), joining.URL, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := asked.Load(); n != joinedAt {
		t.Fatalf("waitReady returned after %d requests, want %d (the first that answered ok)", n, joinedAt)
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: draining", http.StatusServiceUnavailable)
	}))
	defer never.Close()
	err := waitReady(context.Background(), never.URL, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not ready: draining") {
		t.Fatalf("waitReady of a node never ready: %v, want an error with its reason", err)
	}
}
