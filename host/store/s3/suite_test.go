package s3_test

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/storetest"
	"github.com/wasmkeep/wasmkeep/internal/s3test"
)

// TestConformance runs the store's conformance suite against versitygw,
// a fresh bucket per subtest.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	storetest.RunWith(t, func(t *testing.T) store.Bucket {
		return open(t, config(srv, srv.NewBucket(t)))
	}, storetest.Options{ContentETags: true, FileTree: true})
}
