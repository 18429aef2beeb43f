package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/internal/loadgen"
)

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "target", Value: loadgen.DefaultTarget, Usage: "base URL of the rooms: socket i goes to <target>/<prefix><i % rooms>", EnvVars: env("target")},
		&cli.StringFlag{Name: "prefix", Value: benchPrefix, Usage: "room names' prefix", EnvVars: env("prefix")},
		&cli.StringFlag{Name: "mode", Value: string(loadgen.DefaultMode), Usage: "echo (the server sends each message back) or broadcast (one sender per room; the server sends each message to every socket of the room)", EnvVars: env("mode")},
		&cli.IntFlag{Name: "sockets", Value: loadgen.DefaultSockets, Usage: "sockets to open", EnvVars: env("sockets")},
		&cli.IntFlag{Name: "rooms", Value: loadgen.DefaultRooms, Usage: "rooms the sockets are spread over, round-robin", EnvVars: env("rooms")},
		&cli.IntFlag{Name: "rate", Value: flagLimit(loadgen.DefaultRate), Usage: "messages a second sent in total (0: as fast as the windows allow)", EnvVars: env("rate")},
		&cli.IntFlag{Name: "inflight", Value: loadgen.DefaultInflight, Usage: "messages in flight per sender (socket in echo, room in broadcast)", EnvVars: env("inflight")},
		&cli.IntFlag{Name: "size", Value: loadgen.DefaultSize, Usage: "message size in bytes (at least 40)", EnvVars: env("size")},
		&cli.DurationFlag{Name: "warmup", Value: loadgen.DefaultWarmup, Usage: "sending before measuring", EnvVars: env("warmup")},
		&cli.DurationFlag{Name: "duration", Value: loadgen.DefaultDuration, Usage: "measured sending", EnvVars: env("duration")},
		&cli.DurationFlag{Name: "drain", Value: loadgen.DefaultDrain, Usage: "wait at the end for messages in flight; those that do not come are lost", EnvVars: env("drain")},
		&cli.IntFlag{Name: "dial-concurrency", Value: loadgen.DefaultDialConcurrency, Usage: "sockets being opened at once", EnvVars: env("dial-concurrency")},
		&cli.IntFlag{Name: "target-pid", Usage: "process id of the target's server on this machine, to report its CPU time per delivered message (Linux; 0: none)", EnvVars: env("target-pid")},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON", EnvVars: env("json")},
		&cli.BoolFlag{Name: "compare", Usage: "then run the same load against a plain gobwas/ws server (a child process on a loopback port) and print the ratio of delivered msgs/s", EnvVars: env("compare")},
		&cli.StringFlag{Name: "serve-plain", Usage: "run the plain gobwas/ws server (echo or broadcast, by --mode) on this address until interrupted, instead of a load", EnvVars: env("serve-plain")},
		&cli.StringFlag{Name: "http", Usage: "send HTTP requests to this http:// URL instead of WebSocket messages; " + loadgen.RoomMark + " in it is each client's room, <prefix><i % rooms>", EnvVars: env("http")},
		&cli.IntFlag{Name: "clients", Value: loadgen.DefaultClients, Usage: "with --http: clients sending requests one after the other, each on one keep-alive connection", EnvVars: env("clients")},
		&cli.StringFlag{Name: "method", Value: loadgen.DefaultMethod, Usage: "with --http: the requests' method", EnvVars: env("method")},
		&cli.StringFlag{Name: "body", Usage: "with --http: the requests' body", EnvVars: env("body")},
	}
}

// wsOnly and httpOnly are the flags of one kind of load only, which the
// other refuses.
var (
	wsOnly   = []string{"target", "mode", "sockets", "inflight", "size", "compare", "serve-plain"}
	httpOnly = []string{"clients", "method", "body"}
)

// refuseFlags returns an error naming the first of names that is set (on
// the command line or in the environment).
func refuseFlags(c *cli.Context, names []string, why string) error {
	for _, name := range names {
		if c.IsSet(name) {
			return fmt.Errorf("--%s %s", name, why)
		}
	}
	return nil
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "load rooms with WebSocket messages (or HTTP requests) and report delivered msgs/s and latency",
		Description: "Opens --sockets sockets to --rooms rooms under --target, sends for --warmup and then --duration,\n" +
			"and reports the messages delivered a second and their latency (send to receive), with\n" +
			"errors, lost and reordered messages. --compare runs the same load against a plain\n" +
			"gobwas/ws server too; --serve-plain runs that server alone.\n\n" +
			"With --http URL, --clients clients send HTTP requests to URL instead, one after the other\n" +
			"on one keep-alive connection each, and it reports the requests answered a second, their\n" +
			"latency and the errors by status.",
		Flags: benchFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usage(c, "bench [--target URL] [--sockets N] [--rooms M] [--mode echo|broadcast] [--compare] [--json] ...\n"+
					"       wasmkeep bench --http URL [--clients N] [--method M] [--body TEXT] [--json] ...")
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if c.IsSet("http") {
				return benchHTTPAction(ctx, c)
			}
			if err := refuseFlags(c, httpOnly, "needs --http"); err != nil {
				return cli.Exit("wasmkeep: "+err.Error(), 2)
			}
			mode := loadgen.Mode(c.String("mode"))
			if mode != loadgen.Echo && mode != loadgen.Broadcast {
				return cli.Exit(fmt.Sprintf("wasmkeep: --mode must be echo or broadcast, not %q", mode), 2)
			}
			if addr := c.String("serve-plain"); addr != "" {
				return servePlain(ctx, c.App.Writer, addr, mode)
			}
			if err := checkBenchFlags(c); err != nil {
				return cli.Exit("wasmkeep: "+err.Error(), 2)
			}
			cfg := loadgen.Config{
				Target:          c.String("target"),
				Prefix:          c.String("prefix"),
				Sockets:         c.Int("sockets"),
				Rooms:           c.Int("rooms"),
				Mode:            mode,
				Rate:            limitOf(c.Int("rate")),
				Inflight:        c.Int("inflight"),
				Size:            c.Int("size"),
				Warmup:          limitOf(c.Duration("warmup")),
				Duration:        c.Duration("duration"),
				Drain:           limitOf(c.Duration("drain")),
				DialConcurrency: c.Int("dial-concurrency"),
				TargetPID:       c.Int("target-pid"),
			}
			if err := cfg.Validate(); err != nil {
				return cli.Exit("wasmkeep: "+err.Error(), 2)
			}
			return bench(ctx, c.App.Writer, cfg, c.Bool("compare"), c.Bool("json"))
		},
	}
}

// benchHTTPAction is `wasmkeep bench --http`.
func benchHTTPAction(ctx context.Context, c *cli.Context) error {
	u := c.String("http")
	if err := refuseFlags(c, wsOnly, "is for WebSocket loads, not --http"); err != nil {
		return cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	if !strings.Contains(u, loadgen.RoomMark) {
		if err := refuseFlags(c, []string{"rooms", "prefix"}, "names rooms in the --http URL, which has no "+loadgen.RoomMark); err != nil {
			return cli.Exit("wasmkeep: "+err.Error(), 2)
		}
	}
	if err := checkBenchFlags(c); err != nil {
		return cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	if v := c.Int("clients"); v < 1 {
		return cli.Exit(fmt.Sprintf("wasmkeep: --clients must be at least 1, not %d", v), 2)
	}
	rooms := c.Int("rooms")
	if !c.IsSet("rooms") {
		rooms = min(rooms, c.Int("clients"))
	}
	cfg := loadgen.HTTPConfig{
		URL:             u,
		Prefix:          c.String("prefix"),
		Rooms:           rooms,
		Clients:         c.Int("clients"),
		Method:          c.String("method"),
		Body:            c.String("body"),
		Rate:            limitOf(c.Int("rate")),
		Warmup:          limitOf(c.Duration("warmup")),
		Duration:        c.Duration("duration"),
		Drain:           limitOf(c.Duration("drain")),
		DialConcurrency: c.Int("dial-concurrency"),
		TargetPID:       c.Int("target-pid"),
	}
	if err := cfg.Validate(); err != nil {
		return cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	res, err := loadgen.RunHTTP(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench %s: %w", u, err)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, res)
	}
	printHTTPResult(c.App.Writer, res)
	return nil
}

// benchPrefix is the command line's prefix of room names (the load
// generator takes any, none included).
const benchPrefix = "bench-"

// checkBenchFlags refuses what the load generator would not take as
// written: it reads a zero or negative count as its default, and a
// negative --rate, --warmup or --drain as off, where the command line
// says off with 0.
func checkBenchFlags(c *cli.Context) error {
	for _, name := range []string{"sockets", "rooms", "inflight", "size", "dial-concurrency"} {
		if v := c.Int(name); v < 1 {
			return fmt.Errorf("--%s must be at least 1, not %d", name, v)
		}
	}
	if v := c.Int("rate"); v < 0 {
		return fmt.Errorf("--rate must be 0 (as fast as the windows allow) or more, not %d", v)
	}
	for _, name := range []string{"warmup", "drain"} {
		if v := c.Duration(name); v < 0 {
			return fmt.Errorf("--%s must be 0 or more, not %v", name, v)
		}
	}
	if v := c.Duration("duration"); v <= 0 {
		return fmt.Errorf("--duration must be more than 0, not %v", v)
	}
	return nil
}

// servePlain runs the plain server until ctx ends.
func servePlain(ctx context.Context, w io.Writer, addr string, mode loadgen.Mode) error {
	s, err := loadgen.ListenPlain(addr, mode)
	if err != nil {
		return fmt.Errorf("plain server: %w", err)
	}
	fmt.Fprintf(w, plainBanner, mode, s.Addr())
	<-ctx.Done()
	return s.Close()
}

// comparison is the JSON of a --compare run.
type comparison struct {
	Target *loadgen.Result `json:"target"`
	Plain  *loadgen.Result `json:"plain"`
	Ratio  float64         `json:"ratio"` // target's delivered msgs/s over the plain server's
	// The target's server CPU time per delivered message over the plain
	// server's (with --target-pid).
	CPURatio float64 `json:"cpu_ratio,omitempty"`
}

func bench(ctx context.Context, w io.Writer, cfg loadgen.Config, compare, asJSON bool) error {
	var plain *plainProc
	if compare {
		// Started first, so that a failure to start it costs no run.
		var err error
		if plain, err = startPlain(cfg.Mode); err != nil {
			return err
		}
		defer plain.stop()
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench %s: %w", cfg.Target, err)
	}
	if !compare {
		if asJSON {
			return writeJSON(w, res)
		}
		printResult(w, "", res)
		return nil
	}
	pcfg := cfg
	pcfg.TargetPID = plain.cmd.Process.Pid
	pcfg.Target, err = plainTarget(cfg.Target, plain.addr)
	if err != nil {
		return err
	}
	pres, err := loadgen.Run(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("bench the plain server at %s: %w", pcfg.Target, err)
	}
	cmp := comparison{Target: res, Plain: pres}
	if pres.DeliveredPerSec > 0 {
		cmp.Ratio = math.Round(res.DeliveredPerSec/pres.DeliveredPerSec*1000) / 1000
	}
	if res.ServerCPU > 0 && pres.ServerCPU > 0 {
		cmp.CPURatio = math.Round(res.ServerCPU/pres.ServerCPU*100) / 100
	}
	if asJSON {
		return writeJSON(w, cmp)
	}
	printResult(w, "target", res)
	fmt.Fprintln(w)
	printResult(w, "plain gobwas/ws server (its own process, like the node)", pres)
	fmt.Fprintf(w, "\nratio  %.3f of the plain server's delivered msgs/s\n", cmp.Ratio)
	if cmp.CPURatio > 0 {
		fmt.Fprintf(w, "       %.2f times its CPU time per delivered message\n", cmp.CPURatio)
	}
	return nil
}

// plainProc is the plain server of --compare: `wasmkeep bench
// --serve-plain 127.0.0.1:0` as a child process, so that it runs in a
// process of its own like the node under test. (In the load generator's
// process it would share its Go runtime, whose goroutine switches are much
// cheaper than switches between processes: an unfair reference.)
type plainProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// plainBanner is the line --serve-plain prints first; startPlain reads the
// address from it.
const plainBanner = "plain %s server on ws://%s/ (any path); Ctrl-C stops it\n"

func startPlain(mode loadgen.Mode) (*plainProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--compare runs this program again as the plain server: %w", err)
	}
	cmd := exec.Command(self, "bench", "--mode", string(mode), "--serve-plain", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = plainProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the plain server: %w", err)
	}
	p := &plainProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() { // keep its stdout drained
		}
	}()
	select {
	case l := <-line:
		if _, rest, ok := strings.Cut(l, " server on ws://"); ok {
			if addr, _, ok := strings.Cut(rest, "/"); ok {
				p.addr = addr
				return p, nil
			}
		}
		p.stop()
		return nil, fmt.Errorf("the plain server said %q", l)
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, errors.New("the plain server did not start within 30s")
	}
}

// stop ends the plain server: SIGTERM, then SIGKILL after 5 s.
func (p *plainProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// plainTarget is target with its host replaced by the plain server's
// address, so that both get the same paths.
func plainTarget(target, addr string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("--target: %w", err)
	}
	u.Scheme = "ws"
	u.Host = addr
	return u.String(), nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printResult(w io.Writer, title string, r *loadgen.Result) {
	rooms := fmt.Sprintf("%s/%s{0..%d}", strings.TrimRight(r.Target, "/"), r.Prefix, r.Rooms-1)
	if title != "" {
		fmt.Fprintf(w, "%s\n", title)
	}
	fmt.Fprintf(w, "  %-10s %s through %s\n", "mode", r.Mode, rooms)
	fmt.Fprintf(w, "  %-10s %d over %d rooms, opened in %s\n", "sockets", r.Sockets, r.Rooms, seconds(r.Connect))
	rate := "unlimited"
	if r.Rate > 0 {
		rate = count(float64(r.Rate)) + " msgs/s"
	}
	fmt.Fprintf(w, "  %-10s %d-byte messages, %d in flight per sender, rate %s; %s warmup, %s measured\n",
		"load", r.Size, r.Inflight, rate, seconds(r.Warmup), seconds(r.Duration))
	fmt.Fprintf(w, "  %-10s %s (%s/s)\n", "sent", count(float64(r.Sent)), count(r.SentPerSec))
	fmt.Fprintf(w, "  %-10s %s (%s/s)\n", "delivered", count(float64(r.Delivered)), count(r.DeliveredPerSec))
	l := r.Latency
	fmt.Fprintf(w, "  %-10s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (mean %s)\n",
		"latency", ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max), ms(l.Mean))
	printCPU(w, r.ServerCPU, r.LoadCPU, "a delivered message")
	fmt.Fprintf(w, "  %-10s %d\n", "errors", r.Errors)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(w, "  %-10s   %s\n", "", e)
	}
	fmt.Fprintf(w, "  %-10s %d\n", "lost", r.Lost)
	fmt.Fprintf(w, "  %-10s %d\n", "reordered", r.Reordered)
	if r.Other > 0 {
		fmt.Fprintf(w, "  %-10s %d messages not from this run (greetings, history), ignored\n", "other", r.Other)
	}
}

// printCPU prints the CPU time the server and the load generator spent
// per unit of work, where the run measured it.
func printCPU(w io.Writer, server, load float64, per string) {
	switch {
	case server > 0:
		fmt.Fprintf(w, "  %-10s server %.2f µs, load generator %.2f µs %s\n", "cpu", server, load, per)
	case load > 0:
		fmt.Fprintf(w, "  %-10s load generator %.2f µs %s (--target-pid for the server's)\n", "cpu", load, per)
	}
}

func printHTTPResult(w io.Writer, r *loadgen.HTTPResult) {
	target := r.URL
	if r.Rooms > 0 {
		target = strings.ReplaceAll(target, loadgen.RoomMark, fmt.Sprintf("%s{0..%d}", r.Prefix, r.Rooms-1))
	}
	body := "no body"
	if r.Body > 0 {
		body = fmt.Sprintf("a %d-byte body", r.Body)
	}
	fmt.Fprintf(w, "  %-10s %s %s, %s\n", "requests", r.Method, target, body)
	rooms := ""
	if r.Rooms > 0 {
		rooms = fmt.Sprintf(" over %d rooms", r.Rooms)
	}
	fmt.Fprintf(w, "  %-10s %d%s, %d connections opened, the first requests in %s\n", "clients", r.Clients, rooms, r.Connections, seconds(r.Connect))
	rate := "back to back"
	if r.Rate > 0 {
		rate = "rate " + count(float64(r.Rate)) + " requests/s"
	}
	fmt.Fprintf(w, "  %-10s %s; %s warmup, %s measured\n", "load", rate, seconds(r.Warmup), seconds(r.Duration))
	fmt.Fprintf(w, "  %-10s %s (%s/s) without error\n", "answered", count(float64(r.Requests)), count(r.RequestsPerSec))
	l := r.Latency
	fmt.Fprintf(w, "  %-10s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (mean %s)\n",
		"latency", ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max), ms(l.Mean))
	printCPU(w, r.ServerCPU, r.LoadCPU, "a request")
	fmt.Fprintf(w, "  %-10s %d\n", "errors", r.Errors)
	for _, k := range r.StatusKeys() {
		what := "HTTP " + k
		if k == loadgen.FailedKey {
			what = "no answer"
		}
		fmt.Fprintf(w, "  %-10s   %s: %d\n", "", what, r.ErrorsByStatus[k])
	}
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(w, "  %-10s   %s\n", "", e)
	}
	fmt.Fprintf(w, "  %-10s %d\n", "unanswered", r.Unanswered)
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) + " ms" }

// count writes n rounded, with thousands separated by commas.
func count(n float64) string {
	s := strconv.FormatInt(int64(math.Round(n)), 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
