package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"

	"github.com/urfave/cli/v2"
)

// maxBundleDownload bounds an exported room bundle.
const maxBundleDownload = 1 << 30

func roomCommand() *cli.Command {
	return &cli.Command{
		Name:  "room",
		Usage: "inspect one room, or move it between nodes and stores",
		Subcommands: []*cli.Command{
			{
				Name:      "inspect",
				Usage:     "print a room's state, memory, snapshot chain, sockets and why it is awake",
				ArgsUsage: "CLASS NAME",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return usage(c, "room inspect [--server URL] CLASS NAME")
					}
					data, err := newAdminClient(c).raw(http.MethodGet, roomPath(c.Args().Get(0), c.Args().Get(1)), nil, 16<<20)
					if err != nil {
						return err
					}
					var v any
					if err := json.Unmarshal(data, &v); err != nil {
						return err
					}
					out, _ := json.MarshalIndent(v, "", "  ")
					fmt.Fprintln(c.App.Writer, string(out))
					return nil
				},
			},
			{
				Name:      "export",
				Usage:     "write a room's whole state (its module version and snapshot) to one file; a running room is checkpointed first",
				ArgsUsage: "CLASS NAME",
				Flags: append(clientFlags(), &cli.StringFlag{
					Name: "output", Aliases: []string{"o"}, Usage: "the file to write (default CLASS-NAME.wkroom)", EnvVars: env("output"),
				}),
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return usage(c, "room export [--server URL] [-o FILE] CLASS NAME")
					}
					class, name := c.Args().Get(0), c.Args().Get(1)
					data, err := newAdminClient(c).raw(http.MethodPost, roomPath(class, name)+"/export", nil, maxBundleDownload)
					if err != nil {
						return err
					}
					file := c.String("output")
					if file == "" {
						file = class + "-" + url.PathEscape(name) + ".wkroom"
					}
					if err := os.WriteFile(file, data, 0o600); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "room %s/%s exported to %s (%d bytes)\n", class, name, file, len(data))
					return nil
				},
			},
			{
				Name:      "import",
				Usage:     "load a room from an exported file; its next event wakes it where it was",
				ArgsUsage: "FILE",
				Flags: append(clientFlags(),
					&cli.StringFlag{Name: "class", Usage: "import under another class name (default: the file's)", EnvVars: env("class")},
					&cli.StringFlag{Name: "name", Usage: "import under another room name (default: the file's)", EnvVars: env("name")},
					&cli.BoolFlag{Name: "replace", Usage: "overwrite a room that already has state (it must not be running)", EnvVars: env("replace")},
				),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usage(c, "room import [--server URL] [--class C] [--name N] [--replace] FILE")
					}
					data, err := os.ReadFile(c.Args().Get(0))
					if err != nil {
						return fmt.Errorf("reading the bundle: %w", err)
					}
					q := url.Values{}
					if v := c.String("class"); v != "" {
						q.Set("class", v)
					}
					if v := c.String("name"); v != "" {
						q.Set("name", v)
					}
					if c.Bool("replace") {
						q.Set("replace", "1")
					}
					var got struct{ Class, Name string }
					if err := newAdminClient(c).do(http.MethodPost, "/admin/rooms/import?"+q.Encode(), data, &got); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "room %s/%s imported\n", got.Class, got.Name)
					return nil
				},
			},
		},
	}
}

func roomPath(class, name string) string {
	return "/admin/rooms/" + url.PathEscape(class) + "/" + url.PathEscape(name)
}
