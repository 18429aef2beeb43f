// Package s3test runs a real S3 server for tests: versitygw, serving a
// temporary directory (its posix backend) on a loopback port, started and
// stopped by the test that asks for it.
//
// A mock would answer what its author believes S3 answers; the cluster's
// safety rests on what servers really do with If-Match and If-None-Match,
// so the tests talk to a server that implements them
// (../shared/research/s3-conditional-writes.md has the comparison).
//
// Without the versitygw binary a test skips, saying how to install it,
// except under CI, where it fails (package testenv).
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// BinaryEnv names the environment variable that gives the versitygw
// binary's path, ahead of PATH and $(go env GOPATH)/bin.
const BinaryEnv = "WASMKEEP_VERSITYGW"

// Install is the command that installs the version of versitygw the tests
// were written against (.ci/run runs it).
const Install = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Region is the region the server is addressed in; versitygw accepts any,
// and signs with this one by default.
const Region = "us-east-1"

// startTimeout bounds how long a server may take to answer; versitygw
// answers within a second on an idle machine.
const startTimeout = 30 * time.Second

// Server is a running versitygw. Its fields are what a client needs.
type Server struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:PORT".
	Endpoint string
	// AccessKeyID and SecretAccessKey are the root credentials, random for
	// each server so that a client can never reach another test's server
	// by a port reused in between.
	AccessKeyID, SecretAccessKey string
	// Bucket is a bucket created empty by Start.
	Bucket string
	// Dir is the directory the server keeps its buckets' files in: what
	// a test may read to see what reached the disk.
	Dir string

	client  *s3.Client
	buckets atomic.Int64
}

// Start starts versitygw on a free loopback port, serving a temporary
// directory, waits until it answers, creates Bucket and registers a
// cleanup that stops the server. Without the binary it calls
// [testenv.Missing].
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := Binary(tb)
	// A free port found by listening can be taken by another process
	// before versitygw binds it; then versitygw exits and another port
	// is tried.
	var errs []error
	for range 3 {
		s, err := start(tb, bin)
		if err == nil {
			return s
		}
		errs = append(errs, err)
	}
	tb.Fatalf("s3test: versitygw did not start: %v", errors.Join(errs...))
	return nil
}

// Binary returns the path of the versitygw binary: $WASMKEEP_VERSITYGW,
// else versitygw on PATH, else $(go env GOPATH)/bin/versitygw. Without one
// it calls [testenv.Missing].
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("s3test: %s=%s: %v", BinaryEnv, p, err)
		}
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	if gopath := goPath(); gopath != "" {
		p := filepath.Join(gopath, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	testenv.Missing(tb, "versitygw is not installed (not in $"+BinaryEnv+", on PATH or in $(go env GOPATH)/bin; "+Install+")")
	return ""
}

var goPath = sync.OnceValue(func() string {
	// The first entry of GOPATH is where go install puts binaries.
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), string(os.PathListSeparator))
	return first
})

// start makes one attempt at starting a server on a free port.
func start(tb testing.TB, bin string) (*Server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	root := tb.TempDir()
	s := &Server{
		Dir:             root,
		Endpoint:        "http://" + addr,
		AccessKeyID:     "k" + randomHex(8),
		SecretAccessKey: randomHex(20),
	}
	output := testenv.Buffer{Limit: maxOutput}
	// --quiet: no line per request on stdout; --keep-alive: connections
	// are reused, as they are by every real S3 service.
	cmd := exec.Command(bin, "--port", addr, "--quiet", "--keep-alive", "posix", root)
	cmd.Env = append(os.Environ(),
		"ROOT_ACCESS_KEY_ID="+s.AccessKeyID,
		"ROOT_SECRET_ACCESS_KEY="+s.SecretAccessKey,
	)
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	s.client = s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, ""),
		Retryer:      aws.NopRetryer{},
	})
	s.Bucket = "wasmkeep-test"
	if err := s.awaitBucket(exited, s.Bucket); err != nil {
		stop()
		if waitErr != nil {
			err = fmt.Errorf("%w (versitygw: %v)", err, waitErr)
		}
		return nil, fmt.Errorf("%s: %w\n%s", addr, err, output.String())
	}
	tb.Cleanup(stop)
	return s, nil
}

// awaitBucket creates bucket, retrying while the server is not yet
// listening. The credentials are this server's own, so a success also
// proves that the port is not another server's.
func (s *Server) awaitBucket(exited <-chan struct{}, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("versitygw exited before it answered (last answer: %v)", err)
		case <-ctx.Done():
			return fmt.Errorf("versitygw did not answer within %v: %v", startTimeout, err)
		case <-tick.C:
		}
	}
}

// NewBucket creates another empty bucket on the server and returns its
// name, for tests that need a fresh bucket each (the conformance suite
// does, per subtest).
func (s *Server) NewBucket(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("wasmkeep-test-%d", s.buckets.Add(1))
	if _, err := s.client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxOutput bounds the server output kept for a failure message: its start
// is what explains a failed start.
const maxOutput = 64 << 10
