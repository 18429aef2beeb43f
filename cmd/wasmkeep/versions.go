package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
)

// upgradeFlags are the upgrade choices of `class put` and `class rollback`.
func upgradeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "upgrade", Value: classes.UpgradeLazy, EnvVars: env("upgrade"),
			Usage: "rooms on other versions: lazy (move at their next wake), now (move every room at once, with progress) or never (stay)"},
		&cli.BoolFlag{Name: "reset-without-handoff", EnvVars: env("reset-without-handoff"),
			Usage: "reset (delete the state of) the rooms whose version offers no handoff, instead of leaving them on it"},
		&cli.BoolFlag{Name: "no-wait", Usage: "with --upgrade now: do not wait for the rooms, only start moving them", EnvVars: env("no-wait")},
	}
}

// upgradeQuery is the query an upload or rollback sends for its flags.
func upgradeQuery(c *cli.Context, q url.Values) string {
	q.Set("upgrade", c.String("upgrade"))
	if c.Bool("reset-without-handoff") {
		q.Set("reset_without_handoff", "true")
	}
	return q.Encode()
}

// uploadAnswer is what an upload or a rollback answers.
type uploadAnswer struct {
	classRecord
	Upgrade             string            `json:"upgrade"`
	ResetWithoutHandoff bool              `json:"reset_without_handoff"`
	Job                 *rooms.UpgradeJob `json:"upgrade_job"`
	Versions            []struct {
		Hash string `json:"hash"`
	} `json:"versions"`
}

// reportUpgrade says what the upload's policy does to the rooms, and for
// --upgrade now follows the job until it ends, with a progress bar.
func reportUpgrade(c *cli.Context, client *adminClient, ans uploadAnswer) error {
	w := c.App.Writer
	if len(ans.Versions) <= 1 && ans.Job == nil {
		return nil // the class's first version: no room runs another
	}
	reset := ""
	if ans.ResetWithoutHandoff {
		reset = "; rooms without a handoff are reset"
	}
	switch ans.Upgrade {
	case classes.UpgradeNever:
		fmt.Fprintf(w, "upgrade: never: rooms stay on their versions; new rooms start on %s\n", shortHash(ans.Hash))
		return nil
	case classes.UpgradeNow:
	default:
		fmt.Fprintf(w, "upgrade: lazy: each room moves to %s at its next wake%s\n", shortHash(ans.Hash), reset)
		return nil
	}
	if ans.Job == nil {
		fmt.Fprintln(w, "upgrade: now: the node could not start moving the rooms; they move at their next wake")
		return nil
	}
	fmt.Fprintf(w, "upgrade: now: moving every room of %s to %s%s\n", ans.Name, shortHash(ans.Hash), reset)
	if c.Bool("no-wait") {
		fmt.Fprintf(w, "follow it with: wasmkeep class versions %s\n", ans.Name)
		return nil
	}
	job := *ans.Job
	// On a terminal the bar is redrawn in place; in a log, a line every
	// few seconds while it runs, and the last.
	tty, printed := isTerminal(w), time.Now()
	for {
		line := progressLine(job)
		switch {
		case tty:
			fmt.Fprintf(w, "\r%s", line)
		case job.Finished != nil || time.Since(printed) >= 5*time.Second:
			fmt.Fprintln(w, line)
			printed = time.Now()
		}
		if job.Finished != nil {
			break
		}
		select {
		case <-c.Context.Done():
			fmt.Fprintln(w)
			return c.Context.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := client.do(http.MethodGet, "/admin/classes/"+url.PathEscape(ans.Name)+"/upgrade", nil, &job); err != nil {
			return err
		}
	}
	if tty {
		fmt.Fprintln(w)
	}
	if job.NoHandoff > 0 {
		fmt.Fprintf(w, "%d rooms offer no handoff and stay on their versions: see `wasmkeep rooms --version`; reset them with `wasmkeep rooms rm` or upload again with --upgrade now --reset-without-handoff\n", job.NoHandoff)
	}
	if job.Failed > 0 {
		fmt.Fprintf(w, "%d rooms failed to move and stay on their versions with their state; they are tried again at a later wake (see `wasmkeep rooms --version`)\n", job.Failed)
	}
	return nil
}

// progressLine is one line of an upgrade job's progress: a bar of the
// rooms handled so far, then the counts.
func progressLine(j rooms.UpgradeJob) string {
	handled := j.Done + j.Failed + j.NoHandoff + j.Reset + j.Elsewhere
	const width = 24
	filled := width
	if j.Total > 0 {
		filled = handled * width / j.Total
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	line := fmt.Sprintf("[%s] %d/%d rooms: %d moved", bar, handled, j.Total, j.Done)
	for _, p := range []struct {
		n    int
		what string
	}{{j.Reset, "reset"}, {j.NoHandoff, "without handoff"}, {j.Failed, "failed"}, {j.Elsewhere, "on other nodes (move at their next wake there)"}} {
		if p.n > 0 {
			line += fmt.Sprintf(", %d %s", p.n, p.what)
		}
	}
	if j.Finished != nil {
		line += ", done"
	}
	return line
}

func classVersionsCommand() *cli.Command {
	return &cli.Command{
		Name:      "versions",
		Usage:     "list a class's versions: which is current, which offer a handoff, how many rooms run each",
		ArgsUsage: "NAME",
		Flags:     clientFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c, "class versions [--server URL] NAME")
			}
			var vs server.ClassVersions
			if err := newAdminClient(c).do(http.MethodGet, "/admin/classes/"+url.PathEscape(c.Args().Get(0))+"/versions", nil, &vs); err != nil {
				return err
			}
			return writeVersions(c.App.Writer, vs)
		},
	}
}

// writeVersions writes a class's versions as a table, the current one
// marked, then the upgrade job's progress if one ran.
func writeVersions(w io.Writer, vs server.ClassVersions) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tHASH\tUPLOADED\tSIZE\tHANDOFF\tROOMS\tNO-HANDOFF\tFAILED\tMOVED-OFF")
	for _, v := range vs.Versions {
		cur, up := "-", "-"
		if v.Current {
			cur = "*"
		}
		if !v.Uploaded.IsZero() {
			up = v.Uploaded.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", cur, shortHash(v.Hash), up, size(uint64(v.Size)), handoff(v.Offers, v.Takes),
			v.Rooms, v.NoHandoff, v.Failed, v.Upgrades.Done+v.Upgrades.Reset)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nupgrade policy: %s\n", vs.Upgrade)
	if vs.Job != nil {
		fmt.Fprintf(w, "last upgrade on this node: %s\n", progressLine(*vs.Job))
	}
	return nil
}

// handoff says in a word what a version's module can do in an upgrade.
func handoff(offers, takes bool) string {
	switch {
	case offers && takes:
		return "gives+takes"
	case offers:
		return "gives"
	case takes:
		return "takes"
	}
	return "none"
}

func classRollbackCommand() *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "make an older version of a class current again (the one before the current, or --back-to); rooms move back to it as --upgrade says",
		ArgsUsage: "NAME",
		Flags: append(append(clientFlags(), &cli.StringFlag{Name: "back-to", Usage: "the version's hash (as `class versions` shows it, or in full)", EnvVars: env("back-to")}),
			upgradeFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c, "class rollback [--server URL] [--back-to HASH] [--upgrade lazy|now|never] NAME")
			}
			client := newAdminClient(c)
			name := c.Args().Get(0)
			q := url.Values{}
			if v := c.String("back-to"); v != "" {
				full, err := fullVersion(client, name, v)
				if err != nil {
					return err
				}
				q.Set("version", full)
			}
			var ans uploadAnswer
			if err := client.do(http.MethodPost, "/admin/classes/"+url.PathEscape(name)+"/rollback?"+upgradeQuery(c, q), nil, &ans); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "class %s: %s is current again (uploaded %s)\n", ans.Name, ans.Hash, ans.Uploaded.Format(time.RFC3339))
			return reportUpgrade(c, client, ans)
		},
	}
}

// fullVersion expands a version's hash prefix (as tables show it) to the
// one kept version it names.
func fullVersion(client *adminClient, class, prefix string) (string, error) {
	var vs server.ClassVersions
	if err := client.do(http.MethodGet, "/admin/classes/"+url.PathEscape(class)+"/versions", nil, &vs); err != nil {
		return "", err
	}
	want := strings.TrimPrefix(prefix, "sha256:")
	var found []string
	for _, v := range vs.Versions {
		if strings.HasPrefix(strings.TrimPrefix(v.Hash, "sha256:"), want) {
			found = append(found, v.Hash)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("class %s has no version %s (see `wasmkeep class versions %s`)", class, prefix, class)
	}
	return "", fmt.Errorf("%s names %d versions of %s: give more of the hash", prefix, len(found), class)
}
