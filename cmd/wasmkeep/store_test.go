package main

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/s3test"
)

// s3Env is the environment of a node on an S3 store of srv: its
// credentials, as the AWS SDK reads them.
func s3Env(accessKey, secret string) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_REGION=us-east-1"}
}

// TestServeOnS3: a node on a versitygw bucket keeps its classes and rooms
// there: a node started afterwards on another, empty data directory serves
// the same class and the room's state.
func TestServeOnS3(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	counter := guestFile(t, "./examples/counter")
	env := s3Env(srv.AccessKeyID, srv.SecretAccessKey)
	args := func() []string {
		return []string{"--data", t.TempDir(), "--idle-timeout", "1h", "--store", "s3://" + srv.Bucket + "/wk", "--s3-endpoint", srv.Endpoint}
	}
	first := startNode(t, nodeOpts{args: args(), env: env})
	first.ok("class", "put", "counter", counter)
	for i := 1; i <= 3; i++ {
		if got := expectHTTP(t, 200, "POST", first.url+"/actor/counter/c"); got != fmt.Sprint(i) {
			t.Fatalf("increment %d: %q", i, got)
		}
	}
	_, metrics, _ := httpDo(t, "GET", first.url+"/metrics")
	for _, want := range []string{`wasmkeep_bucket_requests_total{op="put",outcome="ok"}`, `wasmkeep_bucket_requests_total{op="put",outcome="precondition"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	first.signal(syscall.SIGTERM) // a clean stop hibernates the room into the bucket
	if code := first.wait(30 * time.Second); code != 0 {
		t.Fatalf("clean stop: exit code %d\n%s", code, first.stderr.String())
	}
	second := startNode(t, nodeOpts{args: args(), env: env})
	if got := expectHTTP(t, 200, "GET", second.url+"/actor/counter/c"); got != "3" {
		t.Fatalf("on a new data directory, the room from the bucket answers %q, want 3", got)
	}
}

// ignoringS3 is an S3 server that stores objects but ignores If-Match and
// If-None-Match, as some S3 servers and fakes do.
func ignoringS3(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	objects := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if r.Method == "GET" && key == "" { // ListObjectsV2
			prefix := r.URL.Query().Get("prefix")
			var list strings.Builder
			list.WriteString(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>` + bucket + `</Name><IsTruncated>false</IsTruncated>`)
			for path := range objects {
				if k := strings.TrimPrefix(path, "/"+bucket+"/"); strings.HasPrefix(k, prefix) {
					list.WriteString("<Contents><Key>" + k + "</Key></Contents>")
				}
			}
			list.WriteString("</ListBucketResult>")
			w.Header().Set("Content-Type", "application/xml")
			io.WriteString(w, list.String())
			return
		}
		switch r.Method {
		case "PUT":
			body, _ := io.ReadAll(r.Body)
			objects[r.URL.Path] = body
			sum := md5.Sum(body)
			w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		case "DELETE":
			delete(objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		case "GET", "HEAD":
			body, ok := objects[r.URL.Path]
			if !ok {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>`)
				return
			}
			sum := md5.Sum(body)
			w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
			w.Write(body)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestServeRefusesAStoreThatIgnoresConditions: the probe at start finds
// that the server lets a second create win, and the node exits non-zero
// within 10 s naming the check; with --store-probe=false it starts.
func TestServeRefusesAStoreThatIgnoresConditions(t *testing.T) {
	t.Parallel()
	fake := ignoringS3(t)
	args := []string{"serve", "--data", t.TempDir(), "--listen", freeAddr(t), "--store", "s3://b/wk", "--s3-endpoint", fake.URL}
	start := time.Now()
	p := spawn(t, moduleRoot(t), s3Env("k", "s"), args...)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a node on a store that ignores conditions still runs after 10 s")
	}
	code, log := p.cmd.ProcessState.ExitCode(), p.stderr.String()
	if code == 0 || !strings.Contains(log, `conformance check "create twice"`) || !strings.Contains(log, "got success") {
		t.Fatalf("exit code %d after %v, stderr:\n%s\nwant a non-zero code naming the check and the answer", code, time.Since(start), log)
	}
	t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(log))

	// AWS_ENDPOINT_URL alone reaches the server (its IP implies path-style).
	unsafe := startNode(t, nodeOpts{args: []string{"--data", t.TempDir(), "--store", "s3://b/wk2", "--store-probe=false"}, env: append(s3Env("k", "s"), "AWS_ENDPOINT_URL="+fake.URL)})
	unsafe.waitOutput("--store-probe=false", 10*time.Second)
}
