//go:build unix

package main

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/loadgen"
)

// benchArgs is a small load: about a second and a half, at 1,000 messages
// a second in total, under the node's default --socket-message-rate (over
// it the node drops messages, and they would count as lost).
var benchArgs = []string{"--sockets", "20", "--rooms", "4", "--inflight", "8", "--rate", "1000", "--warmup", "200ms", "--duration", "1s", "--json"}

// benchJSON runs `wasmkeep bench` with benchArgs and args (which win) and
// decodes its JSON into out.
func benchJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	r := wk(t, nil, append(append([]string{"bench"}, benchArgs...), args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("wasmkeep bench %s: %v", strings.Join(args, " "), r)
	}
	if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
		t.Fatalf("wasmkeep bench printed no JSON (%v):\n%s", err, r.stdout)
	}
	t.Logf("wasmkeep bench %s:\n%s", strings.Join(args, " "), r.stdout)
}

// httpJSON runs `wasmkeep bench --http` for a short while with args and
// decodes its JSON into out.
func httpJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	r := wk(t, nil, append([]string{"bench", "--warmup", "200ms", "--duration", "1s", "--json"}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("wasmkeep bench %s: %v", strings.Join(args, " "), r)
	}
	if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
		t.Fatalf("wasmkeep bench printed no JSON (%v):\n%s", err, r.stdout)
	}
	t.Logf("wasmkeep bench %s:\n%s", strings.Join(args, " "), r.stdout)
}

func checkBench(t *testing.T, what string, res *loadgen.Result, other int64) {
	t.Helper()
	if res == nil {
		t.Fatalf("%s: no result", what)
	}
	if res.Delivered <= 0 || res.Lost != 0 || res.Reordered != 0 || res.Errors != 0 {
		t.Fatalf("%s: delivered %d, lost %d, reordered %d, errors %d %q; want deliveries and nothing lost, reordered or failed",
			what, res.Delivered, res.Lost, res.Reordered, res.Errors, res.ErrorSamples)
	}
	if res.Other != other {
		t.Fatalf("%s: %d messages not from the run, want %d", what, res.Other, other)
	}
}

// TestBench runs `wasmkeep bench` as a process against a node: echo
// through the echo guest, broadcast through the chat example with
// --compare, and the errors of a refused target and of bad flags.
func TestBench(t *testing.T) {
	t.Parallel()
	n := serveNode(t, t.TempDir())
	n.ok("class", "put", "echo", guestFile(t, "./testdata/guests/echo"))
	n.ok("class", "put", "chat", guestFile(t, "./examples/chat"))
	base := "ws://" + strings.TrimPrefix(n.url, "http://") + "/actor/"

	// Echo: every socket's greeting ("open /?") is the one message that is
	// not the run's.
	var echo loadgen.Result
	benchJSON(t, &echo, "--target", base+"echo", "--target-pid", strconv.Itoa(n.cmd.Process.Pid))
	checkBench(t, "echo", &echo, 20)
	if runtime.GOOS == "linux" && echo.ServerCPU <= 0 {
		t.Fatalf("echo with --target-pid: no server CPU figure")
	}

	// HTTP requests to two echo rooms: every request echoed, one
	// connection a client, the node's CPU time per request.
	var hr loadgen.HTTPResult
	httpJSON(t, &hr, "--http", n.url+"/actor/echo/{room}/x", "--clients", "4", "--rooms", "2", "--method", "POST", "--body", "hi",
		"--target-pid", strconv.Itoa(n.cmd.Process.Pid))
	if hr.Requests <= 0 || hr.Errors != 0 || hr.Connections != 4 || hr.Rooms != 2 || hr.Unanswered != 0 {
		t.Fatalf("HTTP: %d requests, %d errors %v, %d connections, %d rooms, %d unanswered; want requests, no errors, 4 connections, 2 rooms",
			hr.Requests, hr.Errors, hr.ErrorsByStatus, hr.Connections, hr.Rooms, hr.Unanswered)
	}
	if runtime.GOOS == "linux" && hr.ServerCPU <= 0 {
		t.Fatalf("HTTP with --target-pid: no server CPU figure")
	}
	// Answered 500 (the echo guest answers ?status=N with N): every
	// request an error of that status, none counted, and the run ends well.
	var h500 loadgen.HTTPResult
	httpJSON(t, &h500, "--http", n.url+"/actor/echo/x/y?status=500", "--clients", "2")
	if h500.Requests != 0 || h500.Errors <= 0 || h500.ErrorsByStatus["500"] != h500.Errors {
		t.Fatalf("HTTP answered 500: %d requests, %d errors %v; want every request an error of status 500", h500.Requests, h500.Errors, h500.ErrorsByStatus)
	}
	// Answered 404 at once: the run stops, exit code 1.
	r := wk(t, nil, "bench", "--http", n.url+"/actor/nope/x", "--clients", "2", "--duration", "1s")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "HTTP 404") || !strings.Contains(r.stderr, "opened 0 of 2 connections") {
		t.Fatalf("bench --http against a missing class: want exit code 1 and the HTTP 404 on stderr; got %v", r)
	}

	// Broadcast with --compare: 15 sockets a room, each message to all.
	var cmp comparison
	benchJSON(t, &cmp, "--target", base+"chat", "--mode", "broadcast", "--sockets", "30", "--rooms", "2", "--compare")
	checkBench(t, "broadcast through chat", cmp.Target, 0)
	checkBench(t, "broadcast through the plain server", cmp.Plain, 0)
	if cmp.Target.Delivered < 15*(cmp.Target.Sent-2*8) || cmp.Ratio <= 0 {
		t.Fatalf("broadcast: sent %d, delivered %d, ratio %v: want 15 deliveries a message and a ratio", cmp.Target.Sent, cmp.Target.Delivered, cmp.Ratio)
	}
	// The plain server is a child process: its CPU time is known (Linux).
	if runtime.GOOS == "linux" && (cmp.Plain.ServerCPU <= 0 || cmp.Plain.LoadCPU <= 0) {
		t.Fatalf("broadcast: the plain server's CPU %v µs, the load generator's %v µs a message; want both", cmp.Plain.ServerCPU, cmp.Plain.LoadCPU)
	}

	// A class that is not there: the node's 404, exit code 1.
	r = wk(t, nil, "bench", "--target", base+"nope", "--sockets", "2", "--rooms", "1", "--duration", "1s")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "HTTP 404") || !strings.Contains(r.stderr, "opened 0 of 2 sockets") {
		t.Fatalf("bench against a missing class: want exit code 1 and the HTTP 404 on stderr; got %v", r)
	}

	// Bad values: exit code 2, nothing done.
	for _, args := range [][]string{
		{"--mode", "fanout"},
		{"--sockets", "0"},
		{"--rooms", "11", "--sockets", "10"},
		{"--size", "10"},
		{"--target", "http://127.0.0.1:1/actor/echo"},
		{"extra-argument"},
		{"--target-pid", "-1"},
		{"--clients", "3"},
		{"--body", "x"},
		{"--http", "ws://127.0.0.1:1/actor/echo/x"},
		{"--http", "http://127.0.0.1:1/actor/echo/x", "--sockets", "3"},
		{"--http", "http://127.0.0.1:1/actor/echo/x", "--compare"},
		{"--http", "http://127.0.0.1:1/actor/echo/x", "--rooms", "3"},
		{"--http", "http://127.0.0.1:1/actor/echo/{room}", "--clients", "2", "--rooms", "2000000"},
		{"--http", "http://127.0.0.1:1/actor/echo/x", "--clients", "0"},
		{"--http", "http://127.0.0.1:1/actor/echo/x", "--method", "get"},
	} {
		r := wk(t, nil, append([]string{"bench"}, args...)...)
		if r.code != 2 || r.stdout != "" || r.stderr == "" {
			t.Errorf("wasmkeep bench %s: want exit code 2 and a message; got %v", strings.Join(args, " "), r)
		}
	}
}
