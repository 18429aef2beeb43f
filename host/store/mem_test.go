package store_test

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/storetest"
)

func TestMem(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Bucket { return store.NewMem() })
}

func TestMemZeroValue(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Bucket { return new(store.Mem) })
}
