#!/bin/bash
# The durability figures of docs/PERFORMANCE.md ("Durable per event, with
# group commit"): each line starts a node on a fresh data directory (or a
# fresh versitygw bucket), uploads the Go counter or chat with a durability
# mode, loads it with `wasmkeep bench` for 2 s + 8 s, and prints the rate,
# p50 and p99 (ms), errors, the p50 of a commit's write (ms, as the node's
# histogram has it: the upper bound of its bucket), the node's CPU per
# request or message (µs), and what its rooms wrote.
#
#   test/bench/durable.sh [OLD_BINARY]
#
# OLD_BINARY, if given, is a wasmkeep built before the output gate: its
# --durability event runs beside the new default. Needs versitygw on PATH
# for the S3 lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/wasmkeep" ./cmd/wasmkeep
for g in counter chat; do
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 go build -buildmode=c-shared -o "$work/$g.wasm" "./examples/$g"
done
old=${1:-}
only=${ONLY:-} # "s3": the S3 lines only

# one BINARY MODE STORE KIND CLIENTS ROOMS INFLIGHT LABEL [SERVE_FLAG...]
one() {
	local bin=$1 mode=$2 store=$3 kind=$4 clients=$5 rooms=$6 inflight=$7 label=$8
	shift 8
	local port=$((20000 + RANDOM % 20000)) data
	data=$(mktemp -d "$work/data.XXXX")
	local args=(serve --data "$data" --listen "127.0.0.1:$port" --idle-timeout 1h --log-level warn)
	local vpid=""
	if [ "$store" = s3 ]; then
		local vport=$((40000 + RANDOM % 20000)) vroot
		vroot=$(mktemp -d "$work/vgw.XXXX")
		mkdir "$vroot/bench"
		ROOT_ACCESS_KEY_ID=bench ROOT_SECRET_ACCESS_KEY=benchbenchbench versitygw --port "127.0.0.1:$vport" --quiet --keep-alive posix "$vroot" >/dev/null 2>&1 &
		vpid=$!
		until curl -s -o /dev/null "http://127.0.0.1:$vport"; do sleep 0.05; done
		export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchbenchbench AWS_REGION=us-east-1
		args+=(--store s3://bench/wk --s3-endpoint "http://127.0.0.1:$vport")
	fi
	"$bin" "${args[@]}" "$@" >"$data.log" 2>&1 &
	local pid=$!
	until curl -s -o /dev/null "http://127.0.0.1:$port/healthz"; do
		kill -0 "$pid" 2>/dev/null || { cat "$data.log" >&2; exit 1; }
		sleep 0.05
	done
	local class=counter dur=()
	[ "$kind" = chat ] && class=chat
	[ "$mode" != default ] && dur=(--durability "$mode")
	"$bin" class put --server "http://127.0.0.1:$port" "${dur[@]}" "$class" "$work/$class.wasm" >/dev/null
	local out
	if [ "$kind" = http ]; then
		out=$("$work/wasmkeep" bench --http "http://127.0.0.1:$port/actor/counter/{room}" --rooms "$rooms" --clients "$clients" \
			--method POST --warmup 2s --duration 8s --target-pid "$pid" --json)
	else
		out=$("$work/wasmkeep" bench --target "ws://127.0.0.1:$port/actor/chat" --sockets "$clients" --rooms "$rooms" \
			--inflight "$inflight" --warmup 2s --duration 8s --target-pid "$pid" --json)
	fi
	local metrics
	metrics=$(curl -s "http://127.0.0.1:$port/metrics")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	[ -n "$vpid" ] && { kill "$vpid"; wait "$vpid" 2>/dev/null || true; }
	python3 - "$label" "$out" "$metrics" <<'PY'
import json, sys
label, out, metrics = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
m = {}
for line in metrics.splitlines():
    if line and not line.startswith('#'):
        k, _, v = line.rpartition(' ')
        m[k] = float(v)
events = m.get('wasmkeep_room_events_total{kind="request"}', 0) + m.get('wasmkeep_room_events_total{kind="socket_message"}', 0)
commits = m.get('wasmkeep_room_commits_total', 0)
written = m.get('wasmkeep_snapshot_bytes_written_total', 0)
puts = sum(v for k, v in m.items() if k.startswith('wasmkeep_bucket_requests_total{op="put"'))
rate = out.get('requests_per_s', out.get('delivered_per_s'))
lat = out['latency_ms']
per = lambda x: x / events if events else 0
# The commit p50 (ms): the upper bound of the histogram bucket it is in.
buckets = sorted((float(k.split('...')[1].rstrip('"}')), v) for k, v in m.items()
                 if k.startswith('wasmkeep_room_commit_seconds_bucket{vmrange='))
seen, commit_p50 = 0, 0.0
for upper, count in buckets:
    seen += count
    if seen >= commits / 2:
        commit_p50 = upper * 1000
        break
print(f"{label:22} {rate:9.0f}/s p50 {lat['p50']:6.2f} p99 {lat['p99']:6.2f} errors {out['errors']} "
      f"commit p50 {commit_p50:5.2f} "
      f"cpu {out.get('server_cpu_us', 0):7.1f}µs  events/commit {events / commits if commits else 0:5.1f} "
      f"bytes/event {per(written):7.0f} puts/event {per(puts):5.2f}")
PY
}

for run in 1 2 3; do
	[ "$only" = s3 ] && break
	echo "== run $run"
	one "$work/wasmkeep" default dir http 16 1 0 "1 room, default"
	one "$work/wasmkeep" hibernate dir http 16 1 0 "1 room, hibernate"
	[ -n "$old" ] && one "$old" event dir http 16 1 0 "1 room, old event"
	one "$work/wasmkeep" default dir http 16 100 0 "100 rooms, default"
	one "$work/wasmkeep" hibernate dir http 16 100 0 "100 rooms, hibernate"
	[ -n "$old" ] && one "$old" event dir http 16 100 0 "100 rooms, old event"
	one "$work/wasmkeep" default dir http 8 4 0 "8 over 4, default"
	one "$work/wasmkeep" hibernate dir http 8 4 0 "8 over 4, hibernate"
	one "$work/wasmkeep" default dir chat 100 1 16 "chat, default"
	one "$work/wasmkeep" hibernate dir chat 100 1 16 "chat, hibernate"
done
if command -v versitygw >/dev/null; then
	echo "== versitygw"
	one "$work/wasmkeep" default s3 http 16 1 0 "s3 1 room, default"
	one "$work/wasmkeep" default s3 http 16 1 0 "s3 1 room, window 0" --commit-window 0
	one "$work/wasmkeep" hibernate s3 http 16 1 0 "s3 1 room, hibernate"
	one "$work/wasmkeep" default s3 chat 100 1 16 "s3 chat, default"
	one "$work/wasmkeep" default s3 chat 100 1 16 "s3 chat, window 0" --commit-window 0
	one "$work/wasmkeep" hibernate s3 chat 100 1 16 "s3 chat, hibernate"
fi
