package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/server"
)

// The cluster commands talk to one node's admin API (GET /admin/cluster,
// POST /admin/cluster/drain|move|fence), which asks or tells the other
// nodes itself: any node of the cluster will do.

// Drain waits.
const (
	// defaultDrainTimeout bounds `cluster drain --wait`: time for a node
	// to hand over its rooms, one snapshot and one release each.
	defaultDrainTimeout = 10 * time.Minute
	// drainPollInterval is how often `cluster drain --wait` asks.
	drainPollInterval = 500 * time.Millisecond
	// drainPollTimeout bounds each of its requests: a status answers
	// within the peers' 2 s.
	drainPollTimeout = 10 * time.Second
)

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "see the nodes of a cluster, drain one, move a room, fence a dead node",
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "list the nodes with a live lease (lease, drain, rooms held, pending releases), then the rooms each holds",
				Flags: append(clientFlags(), &cli.BoolFlag{Name: "json", Usage: "print the admin API's answer, JSON, instead of the tables", EnvVars: env("json")}),
				Action: func(c *cli.Context) error {
					if c.NArg() != 0 {
						return usage(c, "cluster status [--server URL] [--json]")
					}
					data, err := newAdminClient(c).raw(http.MethodGet, "/admin/cluster", nil, 64<<20)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						_, err := c.App.Writer.Write(data)
						return err
					}
					var view server.ClusterView
					if err := json.Unmarshal(data, &view); err != nil {
						return fmt.Errorf("the node's answer is not a cluster status: %w", err)
					}
					return writeCluster(c.App.Writer, view)
				},
			},
			{
				Name:      "drain",
				Usage:     "make NODE hand its rooms over to the others and take none (--off: take rooms again)",
				ArgsUsage: "NODE",
				Flags: append(clientFlags(),
					&cli.BoolFlag{Name: "off", Usage: "end the drain: the node takes rooms again", EnvVars: env("off")},
					&cli.BoolFlag{Name: "wait", Usage: "wait until the node is drained (no room held, no release pending), printing its progress", EnvVars: env("wait")},
					&cli.DurationFlag{Name: "timeout", Value: defaultDrainTimeout, Usage: "with --wait: how long to wait before giving up (exit code 1)", EnvVars: env("timeout")},
				),
				Action: clusterDrain,
			},
			{
				Name:      "move",
				Usage:     "hand room CLASS NAME over to node --to: its sockets close with 1012 and reconnect there",
				ArgsUsage: "CLASS NAME",
				Flags:     append(clientFlags(), &cli.StringFlag{Name: "to", Usage: "the node to move the room to", EnvVars: env("to")}),
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 || c.String("to") == "" {
						return usage(c, "cluster move [--server URL] --to NODE CLASS NAME")
					}
					body, _ := json.Marshal(map[string]string{"class": c.Args().Get(0), "name": c.Args().Get(1), "to": c.String("to")})
					var done server.ClusterMove
					if err := newAdminClient(c).do(http.MethodPost, "/admin/cluster/move", body, &done); err != nil {
						return err
					}
					printMove(c.App.Writer, done)
					return nil
				},
			},
			{
				Name:      "fence",
				Usage:     "fence a dead NODE by hand: its lease is written fenced and its rooms are free at once (refused while it answers)",
				ArgsUsage: "NODE",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usage(c, "cluster fence [--server URL] NODE")
					}
					body, _ := json.Marshal(map[string]string{"node": c.Args().Get(0)})
					var done struct{ Node, Instance string }
					if err := newAdminClient(c).do(http.MethodPost, "/admin/cluster/fence", body, &done); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "node %s fenced (instance %s): its lease is written fenced, and its rooms are free for any node to take\n", done.Node, dash(done.Instance))
					return nil
				},
			},
		},
	}
}

func clusterDrain(c *cli.Context) error {
	if c.NArg() != 1 {
		return usage(c, "cluster drain [--server URL] [--off] [--wait [--timeout D]] NODE")
	}
	name, off, wait, timeout := c.Args().Get(0), c.Bool("off"), c.Bool("wait"), c.Duration("timeout")
	if wait && off {
		return cli.Exit("wasmkeep cluster drain: --wait waits for a drain to end; with --off there is nothing to wait for", 2)
	}
	if timeout <= 0 {
		return cli.Exit(fmt.Sprintf("wasmkeep cluster drain: --timeout must be more than 0, not %v", timeout), 2)
	}
	client := newAdminClient(c)
	body, _ := json.Marshal(map[string]any{"node": name, "off": off})
	var n server.ClusterNode
	if err := client.do(http.MethodPost, "/admin/cluster/drain", body, &n); err != nil {
		return err
	}
	w := c.App.Writer
	if off {
		fmt.Fprintf(w, "node %s takes rooms again\n", n.Node)
		return nil
	}
	fmt.Fprintf(w, "node %s draining: %s\n", n.Node, drainLeft(n))
	if !wait {
		return nil
	}

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	client.http.Timeout = drainPollTimeout
	deadline := time.Now().Add(timeout)
	path := "/admin/cluster"
	last := drainLeft(n)
	for !drained(n) {
		select {
		case <-ctx.Done():
			return cli.Exit(fmt.Sprintf("wasmkeep cluster drain: interrupted; node %s goes on draining (%s)", name, last), 1)
		case <-time.After(drainPollInterval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s is not drained after %v: %s (it goes on draining)", name, timeout, last)
		}
		var view server.ClusterView
		err := client.do(http.MethodGet, path, nil, &view)
		if err == nil && view.Node.Node == name {
			path = "/admin/cluster?local=1" // no need to ask the peers
		}
		found := false
		for _, x := range view.Nodes {
			if x.Node == name {
				n, found = x, true
			}
		}
		now := ""
		switch {
		case err != nil:
			now = "cannot ask: " + err.Error()
		case !found:
			// Its lease is no longer live: it stopped, releasing what it
			// still held, or it died and was fenced.
			fmt.Fprintf(w, "node %s left the cluster: its lease is no longer live\n", name)
			return nil
		case n.Error != "":
			now = "cannot ask: " + n.Error
		case !n.Draining:
			return fmt.Errorf("node %s is no longer draining (a drain --off, or a restart, ended it)", name)
		default:
			now = drainLeft(n)
		}
		if now != last {
			fmt.Fprintf(w, "node %s: %s\n", name, now)
			last = now
		}
	}
	fmt.Fprintf(w, "node %s drained\n", name)
	return nil
}

// drained: the node drains and nothing names it any more.
func drained(n server.ClusterNode) bool {
	return n.Error == "" && n.Draining && n.Drained && len(n.Holds) == 0 && len(n.Parked) == 0 && len(n.Pending) == 0
}

// drainLeft says what a draining node still has.
func drainLeft(n server.ClusterNode) string {
	return plural(len(n.Holds), "room held", "rooms held") + ", " + plural(len(n.Parked), "record parked", "records parked") + ", " + plural(len(n.Pending), "release pending", "releases pending")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// writeCluster writes the nodes as a table, the errors of those that
// could not be asked, then, after a blank line, the rooms each holds or
// has a release pending for.
func writeCluster(w io.Writer, view server.ClusterView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tINSTANCE\tADDRESS\tPHASE\tLEASE\tFOR\tDRAINING\tHOLDS\tPARKED\tPENDING")
	var unasked []string
	for _, n := range view.Nodes {
		draining := "no"
		if n.Draining {
			draining = "yes"
			if n.Drained {
				draining = "drained"
			}
		}
		if n.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t?\t?\t-\t%s\t?\t?\t?\n", n.Node, dash(n.Instance), dash(n.Address), draining)
			unasked = append(unasked, n.Node+": "+n.Error)
			continue
		}
		lease, valid := "lapsed", "-"
		if n.LeaseValid {
			lease, valid = "valid", (time.Duration(n.ValidForMS) * time.Millisecond).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", n.Node, dash(n.Instance), dash(n.Address), dash(n.Phase), lease, valid, draining, len(n.Holds), len(n.Parked), len(n.Pending))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(unasked) > 0 {
		fmt.Fprintln(w)
		for _, u := range unasked {
			fmt.Fprintln(w, u)
		}
	}
	type hold struct {
		node string
		room server.ClusterRoom
		what string
	}
	var holds []hold
	for _, n := range view.Nodes {
		for _, r := range n.Holds {
			holds = append(holds, hold{n.Node, r, "held"})
		}
		for _, r := range n.Parked {
			holds = append(holds, hold{n.Node, r, "parked"})
		}
		for _, r := range n.Pending {
			holds = append(holds, hold{n.Node, r, "release-pending"})
		}
		for _, m := range n.Moving {
			holds = append(holds, hold{n.Node, server.ClusterRoom{Class: m.Class, Name: m.Name}, "moving-to-" + m.To})
		}
	}
	if len(holds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "NODE\tROOM\tGENERATION\tHOLD")
	for _, h := range holds {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", h.node, roomLabel(h.room), h.room.Generation, h.what)
	}
	return tw.Flush()
}

// roomLabel is CLASS/NAME, the name escaped as in the room's URL if it
// has spaces, which would break the table's columns.
func roomLabel(r server.ClusterRoom) string {
	if strings.ContainsFunc(r.Name, unicode.IsSpace) {
		return r.Class + "/" + url.PathEscape(r.Name)
	}
	return r.Class + "/" + r.Name
}

// printMove says what a move did.
func printMove(w io.Writer, done server.ClusterMove) {
	room := done.Class + "/" + done.Name
	switch {
	case done.UnderWay:
		fmt.Fprintf(w, "room %s is moving from node %s to node %s, in the background: %s\n"+
			"(it is finished or given up within %v, or twelve lease times if that is longer; `wasmkeep cluster status` shows it meanwhile)\n",
			room, done.From, done.To, done.Note, cluster.MoveLookFor)
	case done.TakenBy != "":
		fmt.Fprintf(w, "room %s left node %s, but node %s took it before node %s did: %s\n", room, done.From, done.TakenBy, done.To, done.Note)
	case !done.Moved:
		fmt.Fprintf(w, "room %s is on node %s already\n", room, done.To)
	default:
		fmt.Fprintf(w, "room %s moved from node %s to node %s\n", room, done.From, done.To)
	}
}
