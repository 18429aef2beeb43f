package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/secrets"
)

// secretCommand is `wasmkeep secret`: the app's secrets, which rooms and
// fronts read by name. Values go to the node on standard input and never
// come back out.
func secretCommand() *cli.Command {
	return &cli.Command{
		Name:  "secret",
		Usage: "put, list, remove and rotate the app's secrets, which rooms read by name (sealed in the store under the nodes' --secrets-key)",
		Subcommands: []*cli.Command{
			{
				Name:      "put",
				Usage:     "set secret NAME to what standard input holds (a trailing newline is dropped)",
				ArgsUsage: "NAME",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usage(c, "secret put [--server URL] NAME < value")
					}
					name := c.Args().Get(0)
					if err := secrets.ValidName(name); err != nil {
						return cli.Exit(err.Error(), 2)
					}
					if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
						fmt.Fprintf(c.App.ErrWriter, "type the value of %s, then Enter and Ctrl-D (it shows on the screen: printf %%s \"$VALUE\" | wasmkeep secret put %s does not)\n", name, name)
					}
					value, err := io.ReadAll(io.LimitReader(os.Stdin, secrets.MaxValue+2))
					if err != nil {
						return err
					}
					value = []byte(strings.TrimSuffix(strings.TrimSuffix(string(value), "\n"), "\r"))
					if len(value) > secrets.MaxValue {
						return cli.Exit(secrets.ErrTooLarge.Error(), 1)
					}
					if err := newAdminClient(c).do(http.MethodPut, "/admin/secrets/"+url.PathEscape(name), value, nil); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "secret %s set (%d bytes)\n", name, len(value))
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list the secrets: name, the key that sealed each, and whether the node can open it",
				Flags: clientFlags(),
				Action: func(c *cli.Context) error {
					var list []secrets.Info
					if err := newAdminClient(c).do(http.MethodGet, "/admin/secrets", nil, &list); err != nil {
						return err
					}
					if len(list) == 0 {
						fmt.Fprintln(c.App.Writer, "no secrets (wasmkeep secret put NAME < value)")
						return nil
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tKEY\tOPENS")
					for _, s := range list {
						fmt.Fprintf(tw, "%s\t%s\t%v\n", s.Name, s.Key, s.Opens)
					}
					return tw.Flush()
				},
			},
			{
				Name:      "rm",
				Usage:     "remove secret NAME",
				ArgsUsage: "NAME",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usage(c, "secret rm [--server URL] NAME")
					}
					name := c.Args().Get(0)
					if err := newAdminClient(c).do(http.MethodDelete, "/admin/secrets/"+url.PathEscape(name), nil, nil); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "secret %s removed\n", name)
					return nil
				},
			},
			{
				Name:  "rotate",
				Usage: "seal every secret anew under the node's current --secrets-key (it opens them with --secrets-key-previous); then the previous key can go",
				Flags: clientFlags(),
				Action: func(c *cli.Context) error {
					var out struct {
						Rotated int `json:"rotated"`
					}
					if err := newAdminClient(c).do(http.MethodPost, "/admin/secrets/rotate", nil, &out); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "%d secrets sealed anew under the current key\n", out.Rotated)
					return nil
				},
			},
		},
	}
}

// secretFlags are serve's flags for the keys of the app's secrets.
func secretFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "secrets-key", Usage: "the key the app's secrets are sealed with: base64 of 32 bytes (openssl rand -base64 32); prefer the environment variable or --secrets-key-file, which do not show in the process list", EnvVars: env("secrets-key")},
		&cli.StringFlag{Name: "secrets-key-file", Usage: "a file holding --secrets-key", EnvVars: env("secrets-key-file")},
		&cli.StringFlag{Name: "secrets-key-previous", Usage: "a key secrets sealed before a rotation are opened with too (base64 of 32 bytes), until `wasmkeep secret rotate` seals them under --secrets-key", EnvVars: env("secrets-key-previous")},
	}
}

// secretKeys reads the keys serve was given.
func secretKeys(c *cli.Context) (secrets.Keys, error) {
	var ks secrets.Keys
	var err error
	switch {
	case c.String("secrets-key") != "" && c.String("secrets-key-file") != "":
		return ks, cli.Exit("--secrets-key and --secrets-key-file: give one", 2)
	case c.String("secrets-key") != "":
		if ks.Current, err = secrets.ParseKey(c.String("secrets-key")); err != nil {
			return ks, cli.Exit("--secrets-key: "+err.Error(), 2)
		}
	case c.String("secrets-key-file") != "":
		if ks.Current, err = secrets.ReadKeyFile(c.String("secrets-key-file")); err != nil {
			return ks, cli.Exit("--secrets-key-file: "+err.Error(), 2)
		}
	}
	if p := c.String("secrets-key-previous"); p != "" {
		if ks.Current == nil {
			return ks, cli.Exit("--secrets-key-previous needs --secrets-key or --secrets-key-file", 2)
		}
		if ks.Previous, err = secrets.ParseKey(p); err != nil {
			return ks, cli.Exit("--secrets-key-previous: "+err.Error(), 2)
		}
	}
	return ks, nil
}
