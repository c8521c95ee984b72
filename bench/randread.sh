#!/usr/bin/env bash
# randread.sh: readers at random offsets of large files (LMDB, HDF5, record files read through
# an index), dataccel beside s3fs and rclone, in one run: a local S3 server (versitygw) behind an
# emulated round trip, FILES files of MEAN_SIZE bytes, and for each mount in turn (fresh, cold)
# fio with JOBS jobs of BS random reads over every file for DURATION seconds, RUNS times back to back on
# that mount (the first run fills the caches). dataccel runs four times: with the flags
# `make compare` uses (--cache-dir, a 1 GiB RAM cache), with a RAM cache smaller than the
# dataset (RAM_SMALL) over the disk cache, over a disk cache smaller than the dataset as well
# (DISK_SMALL), and with that RAM cache alone. The local disk's own figure comes from the same
# job on a copy of the files.
# DIRECT=1 (the default) opens with O_DIRECT, so that every read reaches the mount; with 0 the
# kernel's page cache serves repeats, as it does for an application.
# Prints a table and writes $OUT/randread.json.
# Env: FILES (48), MEAN_SIZE (40000000), MIN_SIZE (20000000), MAX_SIZE (80000000), BS (64k),
# JOBS (16), DURATION (15, seconds), RUNS (2), DIRECT (1), RAM_SMALL (256MiB), DISK_SMALL (512MiB), RTT_MS (10),
# CONTENT (jpeg: incompressible; text: JSON lines, which the disk cache compresses),
# OUT (./.compare-rand), PEERS_DIR (shared/peers beside the checkout or a directory above it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. bench/peers.sh
PEERS=$(find_peers "$ROOT")
FILES=${FILES:-48} MEAN_SIZE=${MEAN_SIZE:-40000000} MIN_SIZE=${MIN_SIZE:-20000000} MAX_SIZE=${MAX_SIZE:-80000000}
BS=${BS:-64k} JOBS=${JOBS:-16} DURATION=${DURATION:-15} RUNS=${RUNS:-2} DIRECT=${DIRECT:-1}
RAM_SMALL=${RAM_SMALL:-256MiB} DISK_SMALL=${DISK_SMALL:-512MiB} RTT_MS=${RTT_MS:-10} OUT=${OUT:-$ROOT/.compare-rand}
for v in FILES MEAN_SIZE MIN_SIZE MAX_SIZE JOBS DURATION RUNS RTT_MS; do
  [[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} > 0)) || { echo "$v=${!v}: want a whole number > 0" >&2; exit 2; }
done
[[ $DIRECT == 0 || $DIRECT == 1 ]] || { echo "DIRECT=$DIRECT: want 0 or 1" >&2; exit 2; }
CONTENT=${CONTENT:-jpeg}
case $CONTENT in jpeg|text) ;; *) echo "CONTENT=$CONTENT: want jpeg or text" >&2; exit 2 ;; esac
[[ $BS =~ ^[0-9]+[kKmM]?$ ]] || { echo "BS=$BS: want a size such as 4k or 64k" >&2; exit 2; }
for v in RAM_SMALL DISK_SMALL; do
  [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT][iI]?[bB]?|%)?$ ]] || { echo "$v=${!v}: want a size such as 256MiB, 2GiB or 10%" >&2; exit 2; }
done
((MIN_SIZE <= MEAN_SIZE && MEAN_SIZE <= MAX_SIZE)) ||
  { echo "MEAN_SIZE=$MEAN_SIZE lies outside MIN_SIZE..MAX_SIZE ($MIN_SIZE..$MAX_SIZE)" >&2; exit 2; }
# Room for the local copy, dataccel's disk cache and rclone's.
. bench/room.sh
need_room "$OUT" $((3 * FILES * MEAN_SIZE + (256 << 20)))
need_peers "$PEERS"
DS=records-$FILES-$MEAN_SIZE-$MIN_SIZE-$MAX_SIZE
[[ $CONTENT == jpeg ]] || DS=$DS-$CONTENT
BIN=$ROOT/bin/dataccel
mkdir -p "$OUT"
mountpoint -q "$OUT/mnt" 2>/dev/null && { fusermount3 -u "$OUT/mnt" 2>/dev/null || umount -l "$OUT/mnt"; }
rm -rf "$OUT"/mnt "$OUT"/cache "$OUT"/*.json
. bench/lib.sh

say "install peers and tools"
"$PEERS/install.sh"
need_tools jq fio
make -s build

DC_PID=
cleanup() {
  mountpoint -q "$OUT/mnt" 2>/dev/null && { fusermount3 -u "$OUT/mnt" 2>/dev/null || umount -l "$OUT/mnt"; }
  [[ -n $DC_PID ]] && kill "$DC_PID" 2>/dev/null || true
  "$PEERS/s3-down.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT

s3_up "$RTT_MS"

say "dataset $DS: $FILES files (mean $MEAN_SIZE bytes)"
ensure_dataset "$DS" "$FILES" --classes 1 --mean-size "$MEAN_SIZE" --min-size "$MIN_SIZE" --max-size "$MAX_SIZE" --content "$CONTENT"
LOCAL=$OUT/local/$DS
if [[ $(find "$LOCAL" -type f 2>/dev/null | wc -l) != "$FILES" ]]; then
  rm -rf "$OUT/local"; mkdir -p "$OUT/local"; cp -r "$S3_ROOT/$DS" "$LOCAL"; sync
fi

# fio_runs NAME DIR: RUNS fio runs over the files under DIR; appends a JSON line per run.
fio_runs() {
  local name=$1 dir=$2 run
  for run in $(seq "$RUNS"); do
    fio --name=r --opendir="$dir" --rw=randread --bs="$BS" --numjobs="$JOBS" --time_based \
      --runtime="$DURATION" --ioengine=psync --group_reporting --readonly --randrepeat=1 \
      --file_service_type=random --direct="$DIRECT" --output-format=json --output="$OUT/fio.json" >/dev/null
    jq -c --arg name "$name" --argjson run "$run" '.jobs[0].read |
      {mount: $name, run: $run, reads_per_s: (.iops|floor), mib_per_s: (.bw_bytes/1048576*10|floor/10),
       p50_ms: (.clat_ns.percentile["50.000000"]/1e4|floor/100), p99_ms: (.clat_ns.percentile["99.000000"]/1e4|floor/100)}' \
      "$OUT/fio.json" >>"$OUT/runs.jsonl"
    printf '  %-34s run %d: %s\n' "$name" "$run" "$(tail -1 "$OUT/runs.jsonl" | jq -r '"\(.reads_per_s) reads/s, \(.mib_per_s) MiB/s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms"')"
  done
}
# dataccel NAME FLAGS...: a fresh mount, fio, then its GET bytes and reads from the disk cache.
dataccel() {
  local name=$1; shift
  rm -rf "$OUT/cache" "$OUT/mount.log"; mkdir -p "$OUT/mnt"; drop_caches
  "$BIN" mount --endpoint "$S3_ENDPOINT" --http 127.0.0.1:9111 "$@" "s3://$S3_BUCKET" "$OUT/mnt" 2>"$OUT/mount.log" &
  DC_PID=$!
  wait_for "dataccel on $OUT/mnt" 60 grep -q msg=mounted "$OUT/mount.log"
  fio_runs "$name" "$OUT/mnt/$DS"
  curl -s 127.0.0.1:9111/metrics | jq -R -s -c --arg name "$name" '
    [split("\n")[] | select(startswith("dataccel_")) | split(" ") | {key: .[0], value: (.[1]|tonumber)}] | from_entries |
    {mount: $name, get_bytes: .dataccel_store_get_bytes_total, part_gets: .dataccel_loader_part_gets_total,
     disk_part_reads: .dataccel_cache_disk_part_hits_total, disk_whole_reads: .dataccel_cache_disk_hits_total,
     disk_refused: .dataccel_cache_disk_rejected_total}' >>"$OUT/counters.jsonl"
  kill "$DC_PID"; wait "$DC_PID" 2>/dev/null || true; DC_PID=
}
peer() { # KIND NAME
  drop_caches
  RCLONE_OPTS="--use-server-modtime" "$PEERS/mount-peer.sh" "$1" "$OUT/mnt" >/dev/null
  fio_runs "$2" "$OUT/mnt/$DS"
  "$PEERS/umount-peer.sh" "$OUT/mnt" >/dev/null
}

rm -f "$OUT/runs.jsonl" "$OUT/counters.jsonl"
say "fio: $JOBS jobs of $BS random reads (O_DIRECT: $DIRECT) over $FILES files, $RUNS runs of $DURATION s per mount"
drop_caches; fio_runs "local disk (a copy)" "$LOCAL"
dataccel "dataccel" --cache-dir "$OUT/cache" --ram-cache-size 1GiB
dataccel "dataccel, RAM $RAM_SMALL + disk" --cache-dir "$OUT/cache" --ram-cache-size "$RAM_SMALL"
dataccel "dataccel, RAM $RAM_SMALL + disk $DISK_SMALL" --cache-dir "$OUT/cache" --ram-cache-size "$RAM_SMALL" --cache-size "$DISK_SMALL"
dataccel "dataccel, RAM $RAM_SMALL alone" --ram-cache-size "$RAM_SMALL"
peer rclone-full "rclone (full cache)"
peer s3fs "s3fs"

jq -s --slurpfile c "$OUT/counters.jsonl" --arg bs "$BS" --argjson jobs "$JOBS" --argjson direct "$DIRECT" \
  --arg ds "$DS" --argjson seconds "$DURATION" --argjson rtt "$RTT_MS" \
  '{dataset: $ds, block: $bs, jobs: $jobs, direct: ($direct == 1), seconds: $seconds, rtt_ms: $rtt,
    runs: ., dataccel_counters: $c}' "$OUT/runs.jsonl" >"$OUT/randread.json"
say "last run of each mount (all runs in $OUT/randread.json)"
jq -r '.runs | group_by(.mount)[] | max_by(.run) | [.mount, .reads_per_s, .mib_per_s, .p50_ms, .p99_ms] | @tsv' \
  "$OUT/randread.json" | awk -F'\t' 'BEGIN { printf "%-34s %10s %10s %9s %9s\n", "mount", "reads/s", "MiB/s", "p50 ms", "p99 ms" }
  { printf "%-34s %10d %10.1f %9.2f %9.2f\n", $1, $2, $3, $4, $5 }'
jq -r '.dataccel_counters[] | "  \(.mount): \(.get_bytes/1e9*100|floor/100) GB fetched, \(.part_gets) part GETs, \(.disk_part_reads) part reads and \(.disk_whole_reads) whole blocks from the disk cache, \(.disk_refused) blocks it refused"' "$OUT/randread.json"
