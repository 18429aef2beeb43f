package node

import (
	"context"
	"time"

	"github.com/wasmkeep/wasmkeep/clusternode"
)

// testClusterSecret signs the node-to-node requests of test clusters.
var testClusterSecret = []byte("a test cluster's secret")

// testCluster makes a node a member named name of a cluster on its
// bucket, as wasmkeep serve --node does, with a short lease.
func testCluster(name string) *ClusterConfig {
	return &ClusterConfig{
		Secret: testClusterSecret,
		Member: func(ctx context.Context, env MemberEnv) (Member, error) {
			return clusternode.New(ctx, clusternode.Config{Node: name, Address: env.Addr, Secret: testClusterSecret,
				TTL: testLeaseTTL, Bucket: env.Bucket, Clock: env.Clock, Metrics: env.Metrics, Logger: env.Logger})
		},
	}
}

// testLeaseTTL keeps failovers in tests short.
const testLeaseTTL = 2 * time.Second
