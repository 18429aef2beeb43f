package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/server"
)

func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Value: "http://" + node.DefaultListen, Usage: "base URL of the node's admin API: its --admin-listen address if it has one, else its --listen address (default: $WASMKEEP_ADMIN_LISTEN if set)", EnvVars: env("server")},
		&cli.StringFlag{Name: "token", Usage: "admin token, for a node off loopback", EnvVars: env("admin-token")},
	}
}

// adminClient talks to a node's admin API.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

func newAdminClient(c *cli.Context) *adminClient {
	base := clientFlag(c, "server")
	if givenTo(c, "server") == nil {
		if addr := os.Getenv(env("admin-listen")[0]); addr != "" {
			base = listenURL(addr)
		}
	}
	return &adminClient{
		base:  strings.TrimRight(base, "/"),
		token: clientFlag(c, "token"),
		http:  &http.Client{Timeout: 5 * time.Minute},
	}
}

// listenURL is the URL a client of this machine reaches a listen address
// at: a wildcard host is reached on loopback.
func listenURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// clientFlag reads a client flag from the innermost command it was given
// to. Both `rooms` and `rooms hibernate` have the client flags, and
// c.String alone would answer hibernate's default for
// `wasmkeep rooms --server URL hibernate CLASS NAME`.
func clientFlag(c *cli.Context, name string) string {
	if x := givenTo(c, name); x != nil {
		return x.String(name)
	}
	return c.String(name)
}

// givenTo returns the innermost command's context that was given the
// flag (on the command line or in its environment variable), or nil.
func givenTo(c *cli.Context, name string) *cli.Context {
	for _, x := range c.Lineage() {
		if x.Command != nil && hasFlag(x.Command.Flags, name) && x.IsSet(name) {
			return x
		}
	}
	return nil
}

func hasFlag(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// usage is the error for wrong arguments: exit code 2 and the usage line.
// (Flags after the arguments are read as flags: see flagsFirst.)
func usage(_ *cli.Context, line string) error {
	return cli.Exit("usage: wasmkeep "+line, 2)
}

// do sends a request and decodes a JSON answer into out (if not nil). An
// error answer becomes an error carrying the node's message.
func (a *adminClient) do(method, path string, body []byte, out any) error {
	data, err := a.raw(method, path, body, 64<<20)
	if err != nil {
		return err
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// raw sends a request and returns the answer's body, at most limit bytes.
func (a *adminClient) raw(method, path string, body []byte, limit int64) ([]byte, error) {
	req, err := http.NewRequest(method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	req.Header.Set(server.AdminHeader, "1")
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the node at %s (is `wasmkeep serve` running?): %w", a.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return data, nil
}

type classRecord struct {
	Name       string    `json:"name"`
	Hash       string    `json:"hash"`
	ABI        int       `json:"abi"`
	Size       int       `json:"size"`
	Uploaded   time.Time `json:"uploaded"`
	Durability string    `json:"durability"`
	// Front are the path prefixes of a front.
	Front []string `json:"front"`
}

type roomRecord struct {
	Class         string     `json:"class"`
	Name          string     `json:"name"`
	State         string     `json:"state"`
	Sockets       int        `json:"sockets"`
	Memory        uint64     `json:"memory_bytes"`
	IdleSeconds   *float64   `json:"idle_seconds"`
	SnapshotBytes uint64     `json:"snapshot_bytes"`
	Alarm         *time.Time `json:"alarm"`
	Awake         string     `json:"awake"`
	Version       string     `json:"version"`
	// Where is where the room runs, in a cluster.
	Where   *server.RoomPlace `json:"where"`
	Upgrade *struct {
		To      string     `json:"to"`
		State   string     `json:"state"`
		Error   string     `json:"error"`
		RetryAt *time.Time `json:"retry_at"`
	} `json:"upgrade"`
}

// upgradeWord says in a word or two where a room's move to its class's
// current version stands: "-" when none is pending.
func (r roomRecord) upgradeWord() string {
	switch {
	case r.Upgrade == nil:
		return "-"
	case r.Upgrade.State == "failed" && r.Upgrade.RetryAt != nil:
		return "failed,retry-" + r.Upgrade.RetryAt.Local().Format("15:04:05")
	}
	return r.Upgrade.State
}

// whereWords say where a room runs in a cluster: held, parked or free, and
// the node that holds or parks it; "-" for what the node does not know
// (it did not read the room's record: past the bound of a listing, or a
// read that failed).
func (r roomRecord) whereWords() (place, node string) {
	if r.Where == nil {
		return "-", "-"
	}
	return r.Where.Place, dash(r.Where.Node)
}

func classCommand() *cli.Command {
	return &cli.Command{
		Name:  "class",
		Usage: "upload, list and remove actor classes on a node",
		Subcommands: []*cli.Command{
			{
				Name:      "put",
				Usage:     "upload FILE.wasm as a new version of class NAME: new rooms start on it, others move to it by --upgrade; with --front, a front serving HTTP under path prefixes",
				ArgsUsage: "NAME FILE.wasm",
				Flags: append(append(clientFlags(), &cli.StringFlag{
					Name: "durability", EnvVars: env("durability"),
					Usage: "when rooms' state becomes durable: event (before any output of an event leaves the node; the default of a new class) or hibernate (at hibernation, a clean stop and checkpoint(): a crash loses what changed since); without it a new version keeps its class's",
				}, &cli.StringSliceFlag{
					Name: "front", EnvVars: env("front"),
					Usage: "make the class a front serving HTTP under this path prefix on every node (repeat for more); without it an upload keeps the prefixes the class holds",
				}), upgradeFlags()...),
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return usage(c, "class put [--server URL] NAME FILE.wasm")
					}
					wasm, err := os.ReadFile(c.Args().Get(1))
					if err != nil {
						return fmt.Errorf("reading the module: %w", err)
					}
					var rec uploadAnswer
					client := newAdminClient(c)
					q := url.Values{}
					if c.IsSet("durability") {
						// Only when given: a new version keeps its class's.
						q.Set("durability", c.String("durability"))
					}
					for _, p := range c.StringSlice("front") {
						q.Add("front", p)
					}
					path := "/admin/classes/" + url.PathEscape(c.Args().Get(0)) + "?" + upgradeQuery(c, q)
					if err := client.do(http.MethodPut, path, wasm, &rec); err != nil {
						return err
					}
					durability := "durable at hibernation"
					if rec.durability() == "event" {
						durability = "durable per event"
					}
					if len(rec.Front) > 0 {
						fmt.Fprintf(c.App.Writer, "class %s: %s (%d bytes, ABI v%d, a front serving %s)\n", rec.Name, rec.Hash, rec.Size, rec.ABI, strings.Join(rec.Front, " "))
					} else {
						fmt.Fprintf(c.App.Writer, "class %s: %s (%d bytes, ABI v%d, %s)\n", rec.Name, rec.Hash, rec.Size, rec.ABI, durability)
					}
					return reportUpgrade(c, client, rec)
				},
			},
			{
				Name:  "list",
				Usage: "list classes",
				Flags: clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 0 {
						return usage(c, "class list [--server URL]")
					}
					var recs []uploadAnswer
					client := newAdminClient(c)
					if err := client.do(http.MethodGet, "/admin/classes", nil, &recs); err != nil {
						return err
					}
					var list []roomRecord
					if err := client.do(http.MethodGet, "/admin/rooms", nil, &list); err != nil {
						return err
					}
					current, older := map[string]int{}, map[string]int{}
					hash := map[string]string{}
					for _, r := range recs {
						hash[r.Name] = r.Hash
					}
					for _, r := range list {
						if r.Version == "" || r.Version == hash[r.Class] {
							current[r.Class]++
						} else {
							older[r.Class]++
						}
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tHASH\tSIZE\tABI\tUPLOADED\tVERSIONS\tROOMS\tON-OLDER\tDURABLE\tFRONT")
					for _, r := range recs {
						durable := r.durability()
						if len(r.Front) > 0 {
							durable = "-" // a front has no rooms
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\tv%d\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Name, shortHash(r.Hash), r.Size, r.ABI, r.Uploaded.Format(time.RFC3339),
							max(len(r.Versions), 1), current[r.Name], older[r.Name], durable, dash(strings.Join(r.Front, ",")))
					}
					return tw.Flush()
				},
			},
			classVersionsCommand(),
			classRollbackCommand(),
			{
				Name:      "rm",
				Usage:     "remove a class name (stored rooms keep their state)",
				ArgsUsage: "NAME",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usage(c, "class rm [--server URL] NAME")
					}
					if err := newAdminClient(c).do(http.MethodDelete, "/admin/classes/"+url.PathEscape(c.Args().Get(0)), nil, nil); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "class %s removed\n", c.Args().Get(0))
					return nil
				},
			},
		},
	}
}

func shortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// defaultWatchInterval refreshes `rooms --watch` at a pace a reader can
// follow, for a request the node barely notices.
const defaultWatchInterval = 2 * time.Second

func roomsCommand() *cli.Command {
	return &cli.Command{
		Name:  "rooms",
		Usage: "list rooms: state, sockets, why awake, memory, last event, snapshot size",
		Flags: append(clientFlags(),
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "refresh the list every --interval until interrupted", EnvVars: env("watch")},
			&cli.DurationFlag{Name: "interval", Value: defaultWatchInterval, Usage: "time between two refreshes of --watch", EnvVars: env("interval")},
			&cli.BoolFlag{Name: "version", Usage: "show the version each room runs and where its move to the class's current version stands", EnvVars: env("version")},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usage(c, "rooms [--server URL] [--version] [--watch [--interval D]]\n       wasmkeep rooms hibernate|pin|unpin|rm [--server URL] CLASS NAME")
			}
			interval := c.Duration("interval")
			if interval <= 0 {
				return cli.Exit(fmt.Sprintf("wasmkeep rooms: --interval must be more than 0, not %v", interval), 2)
			}
			client := newAdminClient(c)
			if !c.Bool("watch") {
				var buf bytes.Buffer
				if err := writeRooms(&buf, client, c.Bool("version")); err != nil {
					return err
				}
				_, err := c.App.Writer.Write(buf.Bytes())
				return err
			}
			return watchRooms(c, client, interval)
		},
		Subcommands: []*cli.Command{
			roomAction("hibernate", "hibernate a room now", "hibernated"),
			roomAction("pin", "keep a room in memory (waking it): the idle timeout and --max-resident leave it until unpinned; a restart forgets pins", "pinned"),
			roomAction("unpin", "let a pinned room sleep again when idle", "unpinned"),
			roomRemove(),
		},
	}
}

// roomAction is `wasmkeep rooms VERB CLASS NAME`: a POST to the room's
// admin path /admin/rooms/CLASS/NAME/VERB, reported as "room CLASS/NAME
// DONE".
func roomAction(verb, help, done string) *cli.Command {
	return &cli.Command{
		Name:      verb,
		Usage:     help,
		ArgsUsage: "CLASS NAME",
		Flags:     clientFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usage(c, "rooms "+verb+" [--server URL] CLASS NAME")
			}
			path := "/admin/rooms/" + url.PathEscape(c.Args().Get(0)) + "/" + url.PathEscape(c.Args().Get(1)) + "/" + verb
			if err := newAdminClient(c).do(http.MethodPost, path, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "room %s/%s %s\n", c.Args().Get(0), c.Args().Get(1), done)
			return nil
		},
	}
}

// roomRemove is `wasmkeep rooms rm CLASS NAME`: the room's instance,
// sockets and stored state are deleted; its next request starts it fresh.
func roomRemove() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "delete a room: its memory, sockets (closed with 1000) and stored state; its next event starts it fresh",
		ArgsUsage: "CLASS NAME",
		Flags:     clientFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usage(c, "rooms rm [--server URL] CLASS NAME")
			}
			path := "/admin/rooms/" + url.PathEscape(c.Args().Get(0)) + "/" + url.PathEscape(c.Args().Get(1))
			if err := newAdminClient(c).do(http.MethodDelete, path, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "room %s/%s deleted\n", c.Args().Get(0), c.Args().Get(1))
			return nil
		},
	}
}

// writeRooms fetches the node's rooms and writes them as a table, then,
// after a blank line, what each class's rooms hold: how many, how many
// resident, and the bytes their snapshots take in the store.
func writeRooms(w io.Writer, client *adminClient, versions bool) error {
	var list []roomRecord
	if err := client.do(http.MethodGet, "/admin/rooms", nil, &list); err != nil {
		return err
	}
	// A node of a cluster says where each room runs: the STATE of a room
	// is this node's view of it, and a room another node runs is
	// hibernated here.
	clustered := slices.ContainsFunc(list, func(r roomRecord) bool { return r.Where != nil })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "CLASS\tNAME\tSTATE"
	if clustered {
		head += "\tWHERE\tNODE"
	}
	head += "\tSOCKETS\tAWAKE\tMEMORY\tLAST-EVENT\tSNAPSHOT\tALARM"
	if versions {
		head += "\tVERSION\tUPGRADE"
	}
	fmt.Fprintln(tw, head)
	for _, r := range list {
		awake, last := dash(r.Awake), "-"
		if r.IdleSeconds != nil {
			last = shortDuration(time.Duration(*r.IdleSeconds * float64(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s", r.Class, r.Name, r.State)
		if clustered {
			place, node := r.whereWords()
			fmt.Fprintf(tw, "\t%s\t%s", place, node)
		}
		alarm := "-"
		if r.Alarm != nil {
			if in := time.Until(*r.Alarm); in >= 0 {
				alarm = "in " + shortDuration(in)
			} else {
				alarm = shortDuration(-in) + " late"
			}
		}
		fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s\t%s", r.Sockets, awake, size(r.Memory), last, size(r.SnapshotBytes), alarm)
		if versions {
			fmt.Fprintf(tw, "\t%s\t%s", dash(shortHash(r.Version)), r.upgradeWord())
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil || len(list) == 0 {
		return err
	}
	type total struct {
		rooms, resident int
		stored          uint64
	}
	var names []string
	totals := map[string]*total{}
	for _, r := range list {
		t := totals[r.Class]
		if t == nil {
			t = &total{}
			totals[r.Class] = t
			names = append(names, r.Class)
		}
		t.rooms++
		if r.State == "resident" {
			t.resident++
		}
		t.stored += r.SnapshotBytes
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "CLASS\tROOMS\tRESIDENT\tSTORED")
	for _, name := range names { // the listing is sorted by class
		t := totals[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", name, t.rooms, t.resident, size(t.stored))
	}
	return tw.Flush()
}

// watchRooms writes the table every interval until SIGINT or SIGTERM:
// over the previous one on a terminal, one after the other otherwise. A
// node that does not answer is reported in the table's place, and
// watching goes on.
func watchRooms(c *cli.Context, client *adminClient, interval time.Duration) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	client.http.Timeout = max(interval, 10*time.Second)
	tty := isTerminal(c.App.Writer)
	if tty {
		fmt.Fprint(c.App.Writer, "\x1b[H\x1b[2J") // clear the screen once
	}
	for {
		var frame bytes.Buffer
		fmt.Fprintf(&frame, "Every %v: wasmkeep rooms --server %s    %s\n\n", interval, client.base, time.Now().Format(time.DateTime))
		if err := writeRooms(&frame, client, c.Bool("version")); err != nil {
			fmt.Fprintf(&frame, "wasmkeep: %v\n", err)
		}
		out := frame.Bytes()
		if tty {
			// Home, each line cleared to its end, then the rest of the
			// screen: the new table replaces the old without flicker.
			out = append(append([]byte("\x1b[H"), bytes.ReplaceAll(out, []byte("\n"), []byte("\x1b[K\n"))...), "\x1b[J"...)
		} else {
			out = append(out, '\n')
		}
		if _, err := c.App.Writer.Write(out); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// size writes a byte count in one word: 512B, 13.7KiB, 2.5MiB; "-" for 0.
func size(n uint64) string {
	if n == 0 {
		return "-"
	}
	if n < 1024 {
		return strconv.FormatUint(n, 10) + "B"
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + unit
}

// shortDuration writes a duration in one word, to its two largest units:
// 850ms is 0s, then 12s, 3m12s, 2h5m, 3d4h.
func shortDuration(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

// durability is when the class's rooms' state becomes durable, as the
// node takes its record: "event", or "hibernate" (a record from before
// per-event durability was the default, with no choice, reads so too).
func (rec classRecord) durability() string {
	if rec.Durability == "event" {
		return "event"
	}
	return "hibernate"
}
