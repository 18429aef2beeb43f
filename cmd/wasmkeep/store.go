package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/s3"
)

// s3Store returns the bucket --store names (an S3 bucket, or a shared
// directory), or nil for the data
// directory's store. Credentials come from the AWS environment and shared
// config (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, profiles, instance
// roles), never from a flag: a flag's value shows in the process list.
func s3Store(c *cli.Context, logger *slog.Logger) (store.Bucket, error) {
	url := c.String("store")
	if url == "" {
		return nil, nil
	}
	if !strings.Contains(url, "://") {
		// A directory the nodes of a local cluster share (flock(2)
		// makes its conditional writes hold across processes).
		return store.OpenDir(url)
	}
	cfg, err := s3.ParseURL(url)
	if err != nil {
		return nil, err
	}
	cfg.Endpoint = c.String("s3-endpoint")
	cfg.Region = c.String("s3-region")
	cfg.PathStyle = c.Bool("s3-path-style")
	cfg.Profile = c.String("s3-profile")
	b, err := s3.New(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	if !c.Bool("store-probe") {
		logger.Warn("--store-probe=false: the store's conditional writes are not checked; run one node only on it")
	}
	return b, nil
}
