# wasmkeep tasks. `just --list` shows them.

# Run a node with the example classes (built from source) on ./wasmkeep-data.
demo *ARGS:
    go run ./cmd/wasmkeep demo {{ARGS}}

# The test suite, as CI runs it.
test:
    go test -race -timeout 30m ./...

# Formatting, vet and staticcheck.
check:
    test -z "$(gofmt -l $(git ls-files '*.go'))" || (gofmt -l $(git ls-files '*.go'); exit 1)
    go vet ./...
    GOOS=wasip1 GOARCH=wasm go vet ./guest-sdk/... ./examples/... ./docs/examples/first-go
    go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Benchmarks behind docs/PERFORMANCE.md (the commands its tables give).
bench:
    go test -run 'TestIdleSocketMemory' -count 1 -v ./host/node/ ./host/socket/
    WASMKEEP_IDLE_SOCKETS=50000 go test -run 'TestIdleSocketMemory' -count 1 -v ./host/node/ ./host/socket/
    WASMKEEP_BURST_RECLAIM=compare WASMKEEP_BURST_SOCKETS=8000 WASMKEEP_BURST_ROOMS=800 go test -run TestBurstMemory -count 1 -v ./host/node/
    WASMKEEP_BURST_RECLAIM=compare WASMKEEP_BURST_SOCKETS=10000 WASMKEEP_BURST_ROOMS=100 go test -run TestBurstMemory -count 1 -v ./host/node/
    WASMKEEP_BURST_HEAPUSE=1 WASMKEEP_BURST_SOCKETS=8000 WASMKEEP_BURST_ROOMS=800 go test -run TestBurstMemory -count 1 -v ./host/node/
    WASMKEEP_BURST_WAKES=1 WASMKEEP_BURST_SOCKETS=8000 WASMKEEP_BURST_ROOMS=800 go test -run TestBurstMemory -count 1 -v ./host/node/
    WASMKEEP_BURST_WAKES=1 WASMKEEP_BURST_SOCKETS=10000 WASMKEEP_BURST_ROOMS=100 go test -run TestBurstMemory -count 1 -v ./host/node/
    go test -run '^$' -bench 'DeltaBytes' -benchtime 50x ./host/engine/
    go test -run '^$' -bench '^BenchmarkEvent$' -benchtime 3000x -count 3 ./host/engine/
    go test -run '^$' -bench 'GoChatEvents/message' -benchtime 300000x -count 3 ./host/engine/
    go test -run '^$' -bench 'GoChatEvents/page' -benchtime 30000x -count 3 ./host/engine/
    go test -run '^$' -bench 'Hibernate|DurableEvent' -benchtime 1000x -count 2 ./host/node/
    go test -run '^$' -bench 'Restore' -benchtime 3000x -count 3 ./host/engine/
    go test -run '^$' -bench 'Snapshot' -benchtime 2000x ./host/engine/
    go test -run '^$' -bench 'Snapshot/.*/commit' -benchtime 2000x ./host/engine/
    test/bench/durable.sh
    go test -run '^$' -bench 'Commit' -benchtime 3s -count 3 ./host/store/
    go test -run '^$' -bench 'Wake' -benchtime 1000x -count 2 ./host/node/
    go test -run '^$' -bench ChatFootprint -benchtime 3000x -count 3 ./host/engine/
    go test -run '^$' -bench ChatWake -benchtime 1000x -count 2 ./host/node/
    go test -run '^$' -bench GoChatWake -benchtime 500x -count 2 ./host/node/
    go test -run '^$' -bench RestoreMapped -benchtime 500x -count 3 ./host/snapshot/
    go test -run '^$' -bench Compile -benchtime 5x ./host/engine/
    go test -run '^$' -bench Echo -count 2 ./host/socket/
    go test -run TestChatDensity -count 1 -v ./host/engine/
    go test -run TestDensity -count 1 -v ./host/engine/
    go test -run '^$' -bench Echo -count 3 ./host/socket/
    go test -run '^$' -bench 'Interpreter' -benchtime 2000x ./host/engine/
    go test -run '^$' -bench . ./host/snapshot/ ./host/store/
    go test -run TestMaxResidentUnderConcurrency -count 1 -v ./host/node/
    go test -run '^$' -bench '^Benchmark(Wake|Hibernate)$' -benchtime 300x ./host/node/
    go test -run '^$' -bench DevSave -benchtime 8x -count 3 ./cmd/wasmkeep/
    go test -run '^$' -bench AssemblyScriptHandoff -benchtime 1000x -count 2 ./host/node/
    go test -run '^$' -bench 'BenchmarkCall$' -benchtime 5x ./host/node/
    go test -run '^$' -bench 'BenchmarkFetch$' -benchtime 3x ./host/node/
    WASMKEEP_UPGRADE_ROOMS=400 go test -run TestUpgradeNowAtScale -count 1 -v ./host/node/
    WASMKEEP_TEST_STORE=s3 go test -run '^$' -bench '^Benchmark(Wake|Hibernate)$' -benchtime 300x ./host/node/
    WASMKEEP_RESIDENT_NAMES=10000 go test -run TestMaxResidentUnderConcurrency -count 1 -v ./host/node/
    go test -run TestClassUploadsFreeOldVersions -count 1 -v ./host/node/
    WASMKEEP_UPLOADS_GO=1 go test -run TestClassUploadsFreeOldVersions -count 1 -v ./host/node/
    go test -run '^$' -bench 'ClusterRelay' -benchtime 2000x -v ./cmd/wasmkeep/
    WASMKEEP_TEST_STORE=s3 go test -run '^$' -bench 'ClusterRelayHTTP' -benchtime 2000x -v ./cmd/wasmkeep/
    go test -run '^$' -bench 'ClusterWake' -benchtime 300x -v ./cmd/wasmkeep/
    WASMKEEP_TEST_STORE=s3 go test -run '^$' -bench 'ClusterWake' -benchtime 300x -v ./cmd/wasmkeep/
    go test -run '^$' -bench 'ClusterIdle' -benchtime 1x -v ./cmd/wasmkeep/
    WASMKEEP_TEST_STORE=s3 go test -run '^$' -bench 'ClusterIdle' -benchtime 1x -v ./cmd/wasmkeep/
    WASMKEEP_TEST_STORE=s3 go test -run '^$' -bench 'BenchmarkClusterAlarms$' -benchtime 1x -v -timeout 30m ./cmd/wasmkeep/
    go test -count=1 -run 'TestClusterFailover$' -v ./cmd/wasmkeep/

# Build the example classes to ./build/*.wasm.
wasm:
    mkdir -p build
    for ex in counter chat; do GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o build/$ex.wasm ./examples/$ex; done
    ls -l build/*.wasm

# Short fuzzing runs of every decoder.
fuzz TIME="30s":
    go test -run '^$' -fuzz FuzzDecodeManifest$ -fuzztime {{TIME}} ./host/snapshot/
    go test -run '^$' -fuzz FuzzDecodeManifestFields -fuzztime {{TIME}} ./host/snapshot/
    go test -run '^$' -fuzz FuzzDecodeSegment -fuzztime {{TIME}} ./host/snapshot/
    go test -run '^$' -fuzz FuzzDecodeText -fuzztime {{TIME}} ./host/phoenix/
    go test -run '^$' -fuzz FuzzDecodeBinary -fuzztime {{TIME}} ./host/phoenix/
    go test -run '^$' -fuzz FuzzReader -fuzztime {{TIME}} ./host/socket/
    go test -run '^$' -fuzz FuzzRewrite -fuzztime {{TIME}} ./host/engine/wasmrw/
