#!/usr/bin/env bash
# bench/peers/redis/run.sh: the reference for the relay1 row, what one
# request at a time costs on this machine's sockets without any engine:
# redis-server on a Unix socket in a fresh temporary directory (no
# persistence), and redis-benchmark with 8 connections, one request at a
# time on each (no pipelining), SET with 3-byte values.
#
#   bash bench/peers/redis/run.sh N
#
# Prints one line like stepx-bench's:
#   bench=relay1 runtime=redis n=N secs=S ns_per_op=NS ops_per_sec=R ok=1
set -euo pipefail
n=${1:?usage: bench/peers/redis/run.sh N}
for tool in redis-server redis-benchmark; do
    command -v "$tool" >/dev/null || {
        echo "redis/run.sh: $tool is missing (apt-get install -y redis-server redis-tools)" >&2
        exit 1
    }
done
dir=$(mktemp -d /tmp/stepx-redis.XXXXXX)
sock=$dir/redis.sock
redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 \
    --save '' --appendonly no --dir "$dir" --logfile "$dir/log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 200); do
    [ -S "$sock" ] && break
    sleep 0.05
done
[ -S "$sock" ] || { echo "redis/run.sh: redis-server did not start" >&2; exit 1; }
# --csv: "test","rps",... ; the rate is redis-benchmark's own count over
# its own clock.
line=$(redis-benchmark -s "$sock" -c 8 -n "$n" -P 1 -t set -d 3 --csv |
    awk -F'"' '$2 == "SET" {print $4}')
[ -n "$line" ] || { echo "redis/run.sh: no SET figure from redis-benchmark" >&2; exit 1; }
awk -v n="$n" -v rps="$line" 'BEGIN {
    printf "bench=relay1 runtime=redis n=%d secs=%.6f ns_per_op=%.2f ops_per_sec=%.0f ok=1 conns=8 pipeline=1\n",
        n, n / rps, 1e9 / rps, rps }'
