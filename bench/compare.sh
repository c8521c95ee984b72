#!/usr/bin/env bash
# compare.sh: dataccel beside the peers users would otherwise pick, in one run, on one dataset:
# a local S3 server (versitygw) behind an emulated round trip, an ImageNet-like dataset, then
#   A. cold and warm epochs, shuffled, no announcement, READERS readers, measured with
#      `dataccel bench run` over every mount in turn (A B A B), beside direct GETs (the network
#      ceiling) and a copy of the dataset on local disk;
#   B. a cold epoch through a fresh dataccel mount with the order announced, beside direct GETs,
#      then the warm re-read beside the local disk's (no peer mounted);
#   C. listing a 10,000-file directory on fresh mounts;
#   D. peak RSS of the dataccel mount process;
#   F. `dataccel warm` into a fresh cache, then a cold epoch through a fresh mount using it, beside
#      direct GETs (the issue's "or after warm");
#   E. dataccel alone with 4 readers: cold epochs with --prefetch off, in directory order,
#      and in a shuffled order that is announced (the prefetch modes side by side).
# Peers come from ../shared/peers (installed if missing): s3fs, rclone mount --vfs-cache-mode full
# --use-server-modtime (its best configuration). Writes $OUT/{A,B}.json, $OUT/report.html,
# $OUT/summary.json and prints the table and the ratios.
# Env: FILES (5000), RTT_MS (10), READERS (16), OUT (./.compare), PEERS_DIR (../shared/peers);
# other file mixes and orders: MEAN_SIZE (110000), MIN_SIZE (10000), MAX_SIZE (1000000), CLASSES (100),
# ORDER (shuffle, or dir) for phases A and B, BATCH (32; 1 for large files such as shards, read one
# per worker). A mix other than the default gets its own prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS=${PEERS_DIR:-$ROOT/../shared/peers}
FILES=${FILES:-5000} RTT_MS=${RTT_MS:-10} READERS=${READERS:-16} OUT=${OUT:-$ROOT/.compare}
MEAN_SIZE=${MEAN_SIZE:-110000} MIN_SIZE=${MIN_SIZE:-10000} MAX_SIZE=${MAX_SIZE:-1000000} CLASSES=${CLASSES:-100}
ORDER=${ORDER:-shuffle} BATCH=${BATCH:-32}
case $ORDER in shuffle|dir) ;; *) echo "ORDER=$ORDER: want shuffle or dir" >&2; exit 2 ;; esac
DS=train # the dataset's prefix
[[ $MEAN_SIZE/$MIN_SIZE/$MAX_SIZE/$CLASSES == 110000/10000/1000000/100 ]] || DS=train-$MEAN_SIZE-$MIN_SIZE-$MAX_SIZE-$CLASSES
[[ -x $PEERS/install.sh ]] || { echo "peer scripts not found at $PEERS (set PEERS_DIR)" >&2; exit 1; }
BIN=$ROOT/bin/dataccel
mkdir -p "$OUT"; rm -rf "$OUT"/mnt-* "$OUT"/cache-*
say() { printf '\n== %s\n' "$*"; }

say "install peers and tools"
"$PEERS/install.sh"
command -v jq >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q jq >/dev/null; }
make -s build

. "$PEERS/lib.sh"
MOUNT_PIDS=()
cleanup() {
  for m in "$OUT"/mnt-*; do mountpoint -q "$m" 2>/dev/null && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; }; done
  for p in "${MOUNT_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$PEERS/s3-down.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "S3 server behind a ${RTT_MS} ms round trip"
"$PEERS/s3-up.sh" --latency-ms "$RTT_MS" >/dev/null
load_env
export AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY AWS_REGION=$S3_REGION

say "dataset $DS: $FILES ImageNet-like files (mean $MEAN_SIZE bytes) in $CLASSES directories, and a 10,000-file directory"
have=$(s3tool stat -prefix "$DS/" | sed -n 's/.* files=\([0-9]*\) .*/\1/p')
if [[ $have != "$FILES" ]]; then
  [[ $have == 0 ]] || s3tool rm -prefix "$DS/"
  "$BIN" bench gen -q --endpoint "$S3_ENDPOINT" --to "s3://$S3_BUCKET/$DS" -n "$FILES" --classes "$CLASSES" \
    --mean-size "$MEAN_SIZE" --min-size "$MIN_SIZE" --max-size "$MAX_SIZE"
fi
have=$(s3tool stat -prefix flat10k/ | sed -n 's/.* files=\([0-9]*\) .*/\1/p')
if [[ $have != 10000 ]]; then
  [[ $have == 0 ]] || s3tool rm -prefix flat10k/
  "$BIN" bench gen -q --endpoint "$S3_ENDPOINT" --to "s3://$S3_BUCKET/flat10k" -n 10000 --classes 1 \
    --mean-size 2000 --min-size 1000 --max-size 4000
fi
BYTES=$(s3tool stat -prefix "$DS/" | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
# The local-disk reads use a copy: the server's own files are read by every GET, so their page
# cache would have seen two more reads than any mount's before its warm epoch, and the kernel
# makes a page's second read dearer than its later ones (it moves the page to the active list).
# With the copy, local disk and the mounts both read cold, then re-read once.
LOCAL=$OUT/local/$DS
if [[ $(find "$LOCAL" -type f 2>/dev/null | wc -l) != "$FILES" ]]; then
  rm -rf "$LOCAL"; mkdir -p "$OUT/local"; cp -r "$S3_ROOT/$DS" "$LOCAL"; sync
fi

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# cold for the clients (local disk too), warm for the server: drop all caches, then re-read the
# server's files.
server_warm() { drop_caches; find "$S3_ROOT" -type f -print0 | xargs -0 -P4 -n64 cat >/dev/null; }

DC_PID=
start_dataccel() { # MNT CACHE_DIR LOG [extra flags]: mount on a cache dir as it is
  local mnt=$1 cache=$2 log=$3; shift 3
  mkdir -p "$mnt"
  "$BIN" mount --endpoint "$S3_ENDPOINT" --cache-dir "$cache" --ram-cache-size 1GiB "$@" "s3://$S3_BUCKET" "$mnt" 2>"$log" &
  DC_PID=$!; MOUNT_PIDS+=("$DC_PID")
  wait_for "dataccel on $mnt" 60 grep -q msg=mounted "$log"
}
mount_dataccel() { # MNT CACHE_DIR [extra flags]: mount on an empty cache dir
  local mnt=$1 cache=$2; shift 2
  rm -rf "$cache"
  start_dataccel "$mnt" "$cache" "$OUT/$(basename "$mnt").log" "$@"
}
umount_dataccel() { # MNT
  kill "$DC_PID"; wait "$DC_PID" 2>/dev/null || true
}
mount_peer() { # KIND MNT
  RCLONE_OPTS="--use-server-modtime" "$PEERS/mount-peer.sh" "$1" "$2" >/dev/null
}

RUN_FLAGS=(--endpoint "$S3_ENDPOINT" --workers "$READERS" --batch "$BATCH" --compute-per-sample 0 --order "$ORDER" --seed 7
  --concurrency 64 --no-probe --rtt "${RTT_MS}ms" -q)

say "A. cold + warm epochs, shuffled, no announcement, $READERS readers: dataccel, s3fs, rclone, direct GETs, local disk"
server_warm
mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-A"
mount_peer s3fs "$OUT/mnt-s3fs"
mount_peer rclone-full "$OUT/mnt-rclone"
"$BIN" bench run "${RUN_FLAGS[@]}" --epochs 2 --json "$OUT/A.json" --html "$OUT/report.html" \
  "$OUT/mnt-dataccel/$DS" "$OUT/mnt-s3fs/$DS" "$OUT/mnt-rclone/$DS" "s3://$S3_BUCKET/$DS" "$LOCAL"
RSS_KB=$(awk '/VmHWM/ {print $2}' "/proc/$DC_PID/status")
umount_dataccel "$OUT/mnt-dataccel"
"$PEERS/umount-peer.sh" "$OUT/mnt-s3fs" >/dev/null
"$PEERS/umount-peer.sh" "$OUT/mnt-rclone" >/dev/null

say "B. cold epoch with the order announced, then the warm re-read: a fresh dataccel mount beside direct GETs and local disk"
# No peer is mounted here: their daemons' background work (rclone writing its cache) would share
# the cores with the warm re-read, which takes a tenth of a second.
server_warm
mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-B"
"$BIN" bench run "${RUN_FLAGS[@]}" --epochs 2 --announce --json "$OUT/B.json" \
  "$OUT/mnt-dataccel/$DS" "s3://$S3_BUCKET/$DS" "$LOCAL"
umount_dataccel "$OUT/mnt-dataccel"

say "F. after warm: dataccel warm fills a fresh cache, then a fresh mount reads an epoch from it, beside direct GETs"
server_warm
rm -rf "$OUT/cache-F"
t0=$EPOCHREALTIME
"$BIN" warm -q --endpoint "$S3_ENDPOINT" --cache-dir "$OUT/cache-F" "s3://$S3_BUCKET/$DS" 2>"$OUT/warm-F.log"
WARM_S=$(awk "BEGIN { printf \"%.3f\", $EPOCHREALTIME - $t0 }")
start_dataccel "$OUT/mnt-dataccel" "$OUT/cache-F" "$OUT/mnt-dataccel-F.log"
"$BIN" bench run "${RUN_FLAGS[@]}" --epochs 1 --json "$OUT/F.json" "$OUT/mnt-dataccel/$DS" "s3://$S3_BUCKET/$DS"
umount_dataccel "$OUT/mnt-dataccel"

say "C. listing a 10,000-file directory on fresh mounts"
list_time() { # DIR -> seconds, with the server's metadata warm (a listing of its own first)
  local t0 n
  s3tool stat -prefix "${1#*/mnt-*/}/" >/dev/null
  t0=$EPOCHREALTIME
  n=$(ls -f "$1" | wc -l)
  [[ $n -ge 10000 ]] || { echo "listing $1 gave $n entries" >&2; exit 1; }
  awk "BEGIN { printf \"%.3f\", $EPOCHREALTIME - $t0 }"
}
FLAT=flat10k/$(ls "$S3_ROOT/flat10k" | head -n 1)
server_warm
mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-C" --manifest off
LIST_DC=$(list_time "$OUT/mnt-dataccel/$FLAT"); umount_dataccel "$OUT/mnt-dataccel"
mount_peer s3fs "$OUT/mnt-s3fs"; LIST_S3FS=$(list_time "$OUT/mnt-s3fs/$FLAT"); "$PEERS/umount-peer.sh" "$OUT/mnt-s3fs" >/dev/null
mount_peer rclone-full "$OUT/mnt-rclone"; LIST_RC=$(list_time "$OUT/mnt-rclone/$FLAT"); "$PEERS/umount-peer.sh" "$OUT/mnt-rclone" >/dev/null

say "E. prefetch modes, 4 readers, cold each: --prefetch off, directory order, announced shuffled order"
E_FLAGS=(--endpoint "$S3_ENDPOINT" --workers 4 --batch "$BATCH" --compute-per-sample 0 --seed 7 --no-probe --rtt "${RTT_MS}ms" -q --epochs 1)
for mode in off dir announced; do
  server_warm
  case $mode in
    off) mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-E" --prefetch off; extra=(--order shuffle) ;;
    dir) mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-E"; extra=(--order dir) ;;
    announced) mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-E"; extra=(--order shuffle --announce) ;;
  esac
  "$BIN" bench run "${E_FLAGS[@]}" "${extra[@]}" --json "$OUT/E-$mode.json" "$OUT/mnt-dataccel/$DS" >/dev/null
  umount_dataccel "$OUT/mnt-dataccel"
done

say "summary"
jq -n --slurpfile a "$OUT/A.json" --slurpfile b "$OUT/B.json" --slurpfile f "$OUT/F.json" --arg warm_s "$WARM_S" \
  --slurpfile eoff "$OUT/E-off.json" --slurpfile edir "$OUT/E-dir.json" --slurpfile eann "$OUT/E-announced.json" \
  --arg list_dc "$LIST_DC" --arg list_s3fs "$LIST_S3FS" --arg list_rc "$LIST_RC" --arg rss_kb "$RSS_KB" \
  --arg files "$FILES" --arg bytes "$BYTES" --arg rtt "$RTT_MS" --arg readers "$READERS" --arg batch "$BATCH" --arg ds "$DS" --arg order "$ORDER" '
  # An announced epoch also pays for its announcement (written and applied before the clock starts).
  def ep($p; $i): $p.epochs[$i].wall_s + ($p.epochs[$i].announce_s // 0);
  ($a[0].paths) as $A | ($b[0].paths) as $B |
  { dataset: {prefix: $ds, order: $order, files: ($files|tonumber), bytes: ($bytes|tonumber), rtt_ms: ($rtt|tonumber), readers: ($readers|tonumber), batch: ($batch|tonumber)},
    cold_s: {dataccel: ep($A[0];0), s3fs: ep($A[1];0), rclone: ep($A[2];0), direct: ep($A[3];0), local: ep($A[4];0)},
    warm_s: {dataccel: ep($A[0];1), s3fs: ep($A[1];1), rclone: ep($A[2];1), direct: ep($A[3];1), local: ep($A[4];1)},
    announced_cold_s: {dataccel: ep($B[0];0), direct: ep($B[1];0)},
    alone_warm_s: {dataccel: ep($B[0];1), local: ep($B[2];1)},
    after_warm_s: {warm: ($warm_s|tonumber), epoch: ep($f[0].paths[0];0), direct: ep($f[0].paths[1];0)},
    list_10k_s: {dataccel: ($list_dc|tonumber), s3fs: ($list_s3fs|tonumber), rclone: ($list_rc|tonumber)},
    prefetch_modes_4_readers_s: {off: ep($eoff[0].paths[0];0), dir_order: ep($edir[0].paths[0];0), announced: ep($eann[0].paths[0];0)},
    dataccel_peak_rss_mib: (($rss_kb|tonumber)/1024|floor), ram_cache_mib: 1024 }
  | .targets = {
      "cold, no announcement: x the faster peer (>= 3)": (([.cold_s.s3fs, .cold_s.rclone]|min) / .cold_s.dataccel),
      "cold, announced: x s3fs cold (>= 10)": (.cold_s.s3fs / .announced_cold_s.dataccel),
      "cold, announced: x direct-GET ceiling (>= 0.67)": (.announced_cold_s.direct / .announced_cold_s.dataccel),
      "after warm: epoch x direct-GET ceiling (>= 0.67)": (.after_warm_s.direct / .after_warm_s.epoch),
      "after warm: warm + epoch x direct-GET ceiling": (.after_warm_s.direct / (.after_warm_s.warm + .after_warm_s.epoch)),
      "warm: x local-disk re-read, peers unmounted (>= 0.9)": (.alone_warm_s.local / .alone_warm_s.dataccel),
      "warm: x local-disk re-read, peers mounted beside": (.warm_s.local / .warm_s.dataccel),
      "listing 10k: x s3fs (>= 10)": (.list_10k_s.s3fs / .list_10k_s.dataccel),
      "peak RSS - RAM cache, MiB (<= 300)": (.dataccel_peak_rss_mib - .ram_cache_mib),
      "4 readers: announced x prefetch off (>= 3)": (.prefetch_modes_4_readers_s.off / .prefetch_modes_4_readers_s.announced) }' > "$OUT/summary.json"
jq -r '
  "\(.dataset.prefix): files \(.dataset.files), \(.dataset.bytes/1e6|floor) MB, order \(.dataset.order), \(.dataset.rtt_ms) ms round trip, \(.dataset.readers) readers, batch \(.dataset.batch)\n",
  "seconds (files/s)      cold              warm",
  (["dataccel","s3fs","rclone","direct","local"][] as $k |
    "\($k|.+"            "|.[0:14]) \(.cold_s[$k]*100|round/100) (\(.dataset.files/.cold_s[$k]|round))    \(.warm_s[$k]*100|round/100) (\(.dataset.files/.warm_s[$k]|round))"),
  "dataccel announced     \(.announced_cold_s.dataccel*100|round/100) (\(.dataset.files/.announced_cold_s.dataccel|round)); direct GETs beside it \(.announced_cold_s.direct*100|round/100)",
  "after warm             warm \(.after_warm_s.warm*100|round/100) s, then epoch \(.after_warm_s.epoch*100|round/100) (\(.dataset.files/.after_warm_s.epoch|round)); direct GETs beside it \(.after_warm_s.direct*100|round/100)",
  "warm, peers unmounted  dataccel \(.alone_warm_s.dataccel*1000|round) ms, local disk \(.alone_warm_s.local*1000|round) ms",
  "list 10k dir           dataccel \(.list_10k_s.dataccel)  s3fs \(.list_10k_s.s3fs)  rclone \(.list_10k_s.rclone)",
  "dataccel peak RSS      \(.dataccel_peak_rss_mib) MiB (RAM cache \(.ram_cache_mib) MiB)",
  "4 readers, cold        prefetch off \(.prefetch_modes_4_readers_s.off*100|round/100) (\(.dataset.files/.prefetch_modes_4_readers_s.off|round))  dir order \(.prefetch_modes_4_readers_s.dir_order*100|round/100) (\(.dataset.files/.prefetch_modes_4_readers_s.dir_order|round))  announced \(.prefetch_modes_4_readers_s.announced*100|round/100) (\(.dataset.files/.prefetch_modes_4_readers_s.announced|round))\n",
  (.targets | to_entries[] | "\(.key): \(.value*100|round/100)")' "$OUT/summary.json"
echo; echo "JSON: $OUT/A.json $OUT/B.json $OUT/F.json $OUT/summary.json   HTML: $OUT/report.html"
