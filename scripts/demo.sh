#!/usr/bin/env bash
# demo.sh: the whole story on one machine, in a few minutes: a local S3 server behind an
# emulated round trip, a synthetic ImageNet-like dataset, a dataccel mount with a disk cache,
# the bench (cold and warm epochs through the mount, beside direct GETs), the HTML report,
# and the cost-performance score of the example GPU offers.
# Env: DEMO_FILES (default 2000), DEMO_RTT (default 10ms), DEMO_DIR (default ./.demo).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${DEMO_FILES:-2000} RTT=${DEMO_RTT:-10ms} D=${DEMO_DIR:-$PWD/.demo}
BIN=$PWD/bin/dataccel
rm -rf "$D"; mkdir -p "$D/mnt" "$D/cache"
PIDS=()
cleanup() {
  mountpoint -q "$D/mnt" && { kill "${MOUNT_PID:-0}" 2>/dev/null; sleep 1; umount -l "$D/mnt" 2>/dev/null || true; }
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

echo "== 1/6 local S3 server (versitygw) behind a ${RTT} round trip"
go build -o "$D/s3local" ./internal/tools/s3local
"$D/s3local" -rtt "$RTT" -env "$D/s3.env" -bucket demo &
PIDS+=($!)
for _ in $(seq 100); do [[ -s $D/s3.env ]] && break; sleep 0.1; done
set -a; . "$D/s3.env"; set +a

echo "== 2/6 synthetic ImageNet-like dataset: $FILES files (~110 KB mean, JPEG headers)"
"$BIN" bench gen --endpoint "$S3_ENDPOINT" --to "s3://demo/train" -n "$FILES" --classes 20

echo "== 3/6 dataccel mount s3://demo/train on $D/mnt (cache in $D/cache)"
"$BIN" mount --endpoint "$S3_ENDPOINT" --cache-dir "$D/cache" --cache-size 2GiB "s3://demo/train" "$D/mnt" 2>"$D/mount.log" &
MOUNT_PID=$!
for _ in $(seq 150); do grep -q 'msg=mounted' "$D/mount.log" 2>/dev/null && break; sleep 0.1; done
grep -q 'msg=mounted' "$D/mount.log" || { cat "$D/mount.log"; exit 1; }

echo "== 4/6 bench: the mount (epoch 1 cold, then warm) beside direct GETs (the network ceiling)"
"$BIN" bench run "$D/mnt" "s3://demo/train" --endpoint "$S3_ENDPOINT" \
  --epochs 3 --batch 100 --workers 8 --profile resnet50-h100 --announce \
  --json "$D/result.json" --html "$D/report.html"

echo "== 5/6 cost-performance score of the example offers (bench/offers.example.yaml)"
"$BIN" score --bench "$D/result.json" --offers bench/offers.example.yaml

echo "== 6/6 done"
echo "report: $D/report.html   JSON: $D/result.json   mount log: $D/mount.log"
