package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/clusternode"
	"github.com/wasmkeep/wasmkeep/host/node"
)

// minSecretBytes keeps the cluster secret out of a guesser's reach.
const minSecretBytes = 16

func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "node", Usage: "join a cluster on the store as this node (default with --cluster-secret: the host name)", EnvVars: env("node")},
		&cli.StringFlag{Name: "cluster-secret", Usage: "the secret every node of the cluster shares, at least 16 bytes, which signs node-to-node requests (prefer the environment variable: a flag shows in the process list)", EnvVars: env("cluster-secret")},
		&cli.StringFlag{Name: "advertise", Usage: "host:port where the other nodes reach this node's --listen (default: the bound listen address, with the host name for an unspecified host)", EnvVars: env("advertise")},
		&cli.DurationFlag{Name: "lease-ttl", Value: cluster.DefaultTTL, Usage: "the node's lease time: renewed every third of it; a node silent for it (plus a fifth) is fenced and its rooms taken", EnvVars: env("lease-ttl")},
		&cli.DurationFlag{Name: "failover-wait", Value: clusternode.DefaultFailoverWait, Usage: "time a request for a room of a node that stopped answering waits for the room to be free before HTTP 503", EnvVars: env("failover-wait")},
		&cli.DurationFlag{Name: "owner-sweep-interval", Value: clusternode.DefaultSweepInterval, Usage: "how often the node checks the rooms whose sockets it keeps: releases parked records with no socket left, closes sockets of rooms another node took (one pass in ten re-reads parked records)", EnvVars: env("owner-sweep-interval")},
	}
}

// clusterConfig reads the cluster flags: nil outside a cluster.
func clusterConfig(c *cli.Context, cfg *node.Config) error {
	name, secret := c.String("node"), c.String("cluster-secret")
	if name == "" && secret == "" {
		if cfg.Bucket != nil && !strings.HasPrefix(c.String("store"), "s3://") {
			return errors.New("--store DIR is for the nodes of a cluster (with --node and --cluster-secret); a single node keeps its store in --data")
		}
		return nil
	}
	if len(secret) < minSecretBytes {
		return fmt.Errorf("a cluster node needs --cluster-secret (or WASMKEEP_CLUSTER_SECRET) of at least %d bytes; it refuses to join without it", minSecretBytes)
	}
	if name == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node: no host name to default to: %w", err)
		}
		name = host
	}
	if cfg.Bucket == nil {
		return errors.New("a cluster node needs a store the nodes share: --store s3://BUCKET[/PREFIX] or --store DIR")
	}
	timing, err := clusterTiming(c)
	if err != nil {
		return err
	}
	advertise := c.String("advertise")
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return fmt.Errorf("--advertise must be host:port, not %q", advertise)
		}
	}
	cfg.Cluster = memberConfig(name, []byte(secret), advertise, timing)
	return nil
}

// memberTiming is a member's lease time, failover wait and owner sweep
// interval, from their flags.
type memberTiming struct{ ttl, wait, sweep time.Duration }

// clusterTiming reads and checks the cluster's timing flags.
func clusterTiming(c *cli.Context) (memberTiming, error) {
	t := memberTiming{ttl: c.Duration("lease-ttl"), wait: c.Duration("failover-wait"), sweep: c.Duration("owner-sweep-interval")}
	switch {
	case t.ttl < time.Second:
		return t, fmt.Errorf("--lease-ttl must be at least 1s, not %s", t.ttl)
	case t.wait < 0:
		return t, fmt.Errorf("--failover-wait must be 0 or more, not %s", t.wait)
	case t.sweep < time.Second:
		return t, fmt.Errorf("--owner-sweep-interval must be at least 1s, not %s", t.sweep)
	}
	return t, nil
}

// memberConfig makes node name a member of a cluster: secret signs its
// calls to its peers, advertise ("": its bound listen address) is where
// they reach it, and t its timing.
func memberConfig(name string, secret []byte, advertise string, t memberTiming) *node.ClusterConfig {
	return &node.ClusterConfig{
		Secret: secret,
		Member: func(ctx context.Context, env node.MemberEnv) (node.Member, error) {
			addr := advertise
			if addr == "" {
				addr = advertised(env.Addr)
			}
			return clusternode.New(ctx, clusternode.Config{Node: name, Address: addr, Secret: secret, TTL: t.ttl, FailoverWait: t.wait, SweepInterval: t.sweep,
				Bucket: env.Bucket, Clock: env.Clock, Metrics: env.Metrics, Logger: env.Logger})
		},
	}
}

// advertised is the address peers reach a listener bound at addr by: an
// unspecified host (0.0.0.0, ::) becomes the host name.
func advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			return net.JoinHostPort(name, port)
		}
	}
	return addr
}
