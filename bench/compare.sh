#!/usr/bin/env bash
# compare.sh: dataccel beside the peers users would otherwise pick, in one run, on one dataset:
# a local S3 server (versitygw) behind an emulated round trip, an ImageNet-like dataset, a warm-up
# epoch that is not measured (dataccel and direct GETs: the machine settles after the build), then
#   A. cold and warm epochs, shuffled (or ORDER), no announcement, READERS readers, measured with
#      `dataccel bench run` over every mount in turn (A B A B), beside direct GETs (the network
#      ceiling) and a copy of the dataset on local disk; each path's walk of the dataset (the
#      bench lists every directory before its first epoch) is reported for reference;
#   B. a cold epoch through a fresh dataccel mount with the order announced, beside direct GETs,
#      then the warm re-read beside the local disk's (no peer mounted);
#   C. listing a 10,000-file directory on fresh mounts (REPEATS times; s3fs once);
#   D. peak RSS of the dataccel mount process (the highest of every mount of the run);
#   F. `dataccel warm` into a fresh cache, then a cold epoch through a fresh mount using it, beside
#      direct GETs (the issue's "or after warm");
#   E. dataccel alone with 4 readers: cold epochs with --prefetch off, in directory order,
#      and in a shuffled order that is announced (the prefetch modes side by side);
#   G. a training loader (8 workers that each load whole batches of 100, as PyTorch's DataLoader
#      workers do, and resnet50-h100's compute between steps), a cold then a warm epoch through
#      dataccel and rclone, then dataccel with the order announced beside direct GETs (one run):
#      each epoch's time, accelerator utilisation and wait for the first batch, for reference.
# Peers come from shared/peers (PEERS_DIR below; installed if missing): s3fs, rclone mount --vfs-cache-mode full
# --use-server-modtime (its best configuration).
# A, B, C and F run REPEATS times (s3fs only in the first run of A and C: each of its epochs and
# listings takes ten times the others', and its run-to-run spread is small); the table shows each
# time's median over the runs and its range, and the ratios are ratios of medians. One run of a
# two-core VM can land in a slow spell of its host (first touches of fresh memory cost several
# times more for a minute), which hits whatever touches fresh memory (a mount's page cache and RAM
# cache) and not direct GETs.
# So the run also times, at its start, before B and at its end, a first touch of 1 GiB of fresh
# memory (dd), and prints it beside the results: a slow spell shows there. It says too whether the
# host pages out idle page cache (DAMON), which leaves holes for the warm re-reads to refill.
# B also re-reads with --python-open: files opened as Python's open() opens them (before 3.14).
# Writes $OUT/{A,B,F,P}-N.json, $OUT/G-{plain,announced}.json, $OUT/report.html (run 1 of A), $OUT/summary.json (medians, every run
# under runs_s, the targets) and $OUT/summary.html, and prints the table and each target met or missed
# (`dataccel bench compare-report`).
# Env: FILES (5000), RTT_MS (10), READERS (16), REPEATS (3), OUT (./.compare), PEERS_DIR (shared/peers beside the checkout or a directory above it);
# other file mixes and orders: MEAN_SIZE (110000; within MIN_SIZE..MAX_SIZE), MIN_SIZE (10000), MAX_SIZE (1000000), CLASSES (100),
# SUBDIRS (0; N splits each class directory into N subdirectories, a tree two levels deep),
# ORDER (shuffle, or dir) for phases A and B, BATCH (32; 1 for large files such as shards, read one
# per worker), CONTENT (jpeg: incompressible; text: JSON lines, which the disk cache compresses),
# WALK (1: every path is walked before its first epoch, as ImageFolder does; 0: the bench reads
# the files from a list of paths instead, as a job with an annotation file or a CSV does).
# A mix other than the default gets its own prefix. DATACCEL_FLAGS: more `dataccel mount` flags for
# every dataccel mount and `dataccel warm` (e.g. "--passthrough-min-size 16MiB"), named in the summary.
# Disk: about three times the dataset on OUT's file system above the disk cache's 5% floor, checked
# before anything is installed or written.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. bench/peers.sh
PEERS=$(find_peers "$ROOT")
FILES=${FILES:-5000} RTT_MS=${RTT_MS:-10} READERS=${READERS:-16} OUT=${OUT:-$ROOT/.compare}
MEAN_SIZE=${MEAN_SIZE:-110000} MIN_SIZE=${MIN_SIZE:-10000} MAX_SIZE=${MAX_SIZE:-1000000} CLASSES=${CLASSES:-100} SUBDIRS=${SUBDIRS:-0}
ORDER=${ORDER:-shuffle} BATCH=${BATCH:-32} REPEATS=${REPEATS:-3} CONTENT=${CONTENT:-jpeg} WALK=${WALK:-1}
DATACCEL_FLAGS=${DATACCEL_FLAGS:-}
read -r -a DC_FLAGS <<<"$DATACCEL_FLAGS"
for fl in "${DC_FLAGS[@]}"; do
  [[ $fl =~ ^[-A-Za-z0-9=.%]+$ ]] || { echo "DATACCEL_FLAGS: $fl: want flags and plain values" >&2; exit 2; }
done
case $ORDER in shuffle|dir) ;; *) echo "ORDER=$ORDER: want shuffle or dir" >&2; exit 2 ;; esac
case $WALK in 0|1) ;; *) echo "WALK=$WALK: want 1 or 0" >&2; exit 2 ;; esac
case $CONTENT in jpeg|text) ;; *) echo "CONTENT=$CONTENT: want jpeg or text" >&2; exit 2 ;; esac
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { echo "REPEATS=$REPEATS: want a count >= 1" >&2; exit 2; }
# No leading zeros (bash would read 08 as octal); 0 only where it means something.
for v in FILES MEAN_SIZE MIN_SIZE MAX_SIZE CLASSES READERS BATCH; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v=${!v}: want a whole number > 0" >&2; exit 2; }
done
for v in SUBDIRS RTT_MS; do
  [[ ${!v} =~ ^(0|[1-9][0-9]*)$ ]] || { echo "$v=${!v}: want a whole number" >&2; exit 2; }
done
((MIN_SIZE <= MEAN_SIZE && MEAN_SIZE <= MAX_SIZE)) ||
  { echo "MEAN_SIZE=$MEAN_SIZE lies outside MIN_SIZE..MAX_SIZE ($MIN_SIZE..$MAX_SIZE): set them around it" >&2; exit 2; }
DS=train # the dataset's prefix
[[ $MEAN_SIZE/$MIN_SIZE/$MAX_SIZE/$CLASSES == 110000/10000/1000000/100 ]] || DS=train-$MEAN_SIZE-$MIN_SIZE-$MAX_SIZE-$CLASSES
[[ $CONTENT == jpeg ]] || DS=$DS-$CONTENT
((SUBDIRS == 0)) || DS=$DS-s$SUBDIRS
# Room for the local copy, one dataccel disk cache (each is removed at its unmount) and rclone's.
. bench/room.sh
need_room "$OUT" $((3 * FILES * MEAN_SIZE + (256 << 20)))
need_peers "$PEERS"
BIN=$ROOT/bin/dataccel
[[ $EUID == 0 ]] || { echo "make compare needs root: it drops the page cache between epochs and mounts FUSE file systems" >&2; exit 2; }
mkdir -p "$OUT"
# A run killed before its cleanup (SIGKILL, a CI timeout) leaves its mounts behind: unmount them
# first, or the removal below would go through a peer's read-write mount into the bucket.
for m in "$OUT"/mnt-*; do
  # mountinfo, not mountpoint(1): a dead FUSE mount fails its stat.
  if awk -v m="$(realpath -m "$m")" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    echo "unmounting $m, left by an earlier run" >&2
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m"
  fi
done
rm -rf --one-file-system "$OUT"/mnt-* "$OUT"/cache-* "$OUT"/*.json "$OUT"/warm-F*
. bench/lib.sh

say "install peers and tools"
"$PEERS/install.sh"
need_tools jq
make -s build

MOUNT_PIDS=()
cleanup() { # every step may fail: the rest still runs
  for m in "$OUT"/mnt-*; do mountpoint -q "$m" 2>/dev/null && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" || true; }; done
  for p in ${MOUNT_PIDS[@]+"${MOUNT_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
  "$PEERS/s3-down.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT

s3_up "$RTT_MS"

say "dataset $DS: $FILES ImageNet-like files (mean $MEAN_SIZE bytes) in $CLASSES directories$( ((SUBDIRS == 0)) || echo " of $SUBDIRS subdirectories"), and a 10,000-file directory"
ensure_dataset "$DS" "$FILES" --classes "$CLASSES" --subdirs "$SUBDIRS" --mean-size "$MEAN_SIZE" --min-size "$MIN_SIZE" --max-size "$MAX_SIZE" --content "$CONTENT"
ensure_dataset flat10k 10000 --classes 1 --mean-size 2000 --min-size 1000 --max-size 4000
BYTES=$(s3tool stat -prefix "$DS/" | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
# The local-disk reads use a copy: the server's own files are read by every GET, so their page
# cache would have seen two more reads than any mount's before its warm epoch, and the kernel
# makes a page's second read dearer than its later ones (it moves the page to the active list).
# With the copy, local disk and the mounts both read cold, then re-read once.
LOCAL=$OUT/local/$DS
if [[ $(find "$LOCAL" -type f 2>/dev/null | wc -l) != "$FILES" ]]; then
  rm -rf "$LOCAL"; mkdir -p "$OUT/local"; cp -r "$S3_ROOT/$DS" "$LOCAL"; sync
fi

# cold for the clients (local disk too), warm for the server: drop all caches, then re-read the
# server's files.
server_warm() { drop_caches; find "$S3_ROOT" -type f -print0 | xargs -0 -P4 -n64 cat >/dev/null; }

DC_PID= DC_CACHE=
start_dataccel() { # MNT CACHE_DIR LOG [extra flags]: mount on a cache dir as it is
  local mnt=$1 cache=$2 log=$3; shift 3
  mkdir -p "$mnt"; DC_CACHE=$cache
  rm -f "$log" # else the wait below may read the last mount's msg=mounted
  "$BIN" mount --endpoint "$S3_ENDPOINT" --cache-dir "$cache" --ram-cache-size 1GiB ${DC_FLAGS[@]+"${DC_FLAGS[@]}"} "$@" "s3://$S3_BUCKET" "$mnt" 2>"$log" &
  DC_PID=$!; MOUNT_PIDS+=("$DC_PID")
  wait_for "dataccel on $mnt" 60 grep -q msg=mounted "$log"
}
mount_dataccel() { # MNT CACHE_DIR [extra flags]: mount on an empty cache dir
  local mnt=$1 cache=$2; shift 2
  rm -rf "$cache"
  start_dataccel "$mnt" "$cache" "$OUT/$(basename "$mnt").log" "$@"
}
# The peak RSS of every dataccel mount of the run, and the memory of its RAM cache's memory file
# (memfd) at unmount, which RSS does not show; the largest of each over the mounts.
RSS_KB=0 RAM_FILE_KB=0
ram_file_kb() { # PID: the memory of the process's RAM cache file, in KiB (0 if none)
  local fd
  for fd in /proc/"$1"/fd/*; do
    if [[ $(readlink "$fd" 2>/dev/null) == /memfd:dataccel-ram* ]]; then
      stat -L -c '%b %B' "$fd" 2>/dev/null | awk '{print int($1 * $2 / 1024)}'; return
    fi
  done
  echo 0
}
umount_dataccel() { # MNT: unmount, and remove its cache dir (no phase reads one again)
  local rss file
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$DC_PID/status" 2>/dev/null || echo 0); ((rss > RSS_KB)) && RSS_KB=$rss
  file=$(ram_file_kb "$DC_PID"); ((file > RAM_FILE_KB)) && RAM_FILE_KB=$file
  kill "$DC_PID"; wait "$DC_PID" 2>/dev/null || true
  local keep=() p # it is gone: its PID may be reused
  for p in "${MOUNT_PIDS[@]}"; do [[ $p == "$DC_PID" ]] || keep+=("$p"); done
  MOUNT_PIDS=(${keep[@]+"${keep[@]}"})
  rm -rf "$DC_CACHE"
}
mount_peer() { # KIND MNT
  RCLONE_OPTS="--use-server-modtime" "$PEERS/mount-peer.sh" "$1" "$2" >/dev/null
}

# Every bench run's flags (BENCH_FLAGS); RUN_FLAGS for the phases measured against the targets
# (readers with no compute), G_FLAGS below for phase G's loader.
BENCH_FLAGS=(--endpoint "$S3_ENDPOINT" --order "$ORDER" --seed 7 --concurrency 64 --no-probe --rtt "${RTT_MS}ms" -q)
if [[ $WALK == 0 ]]; then
  (cd "$LOCAL" && find . -type f -printf '%P\t%s\n') >"$OUT/files.tsv"
  BENCH_FLAGS+=(--files-from "$OUT/files.tsv")
fi
RUN_FLAGS=("${BENCH_FLAGS[@]}" --workers "$READERS" --batch "$BATCH" --compute-per-sample 0)

# fresh_mem: seconds to touch 1 GiB of fresh anonymous memory (dd fills one 1 GiB buffer from
# /dev/zero): the cost of fresh pages, which a slow spell of the host multiplies.
FRESH_MEM=()
fresh_mem() {
  local t0=$EPOCHREALTIME
  dd if=/dev/zero of=/dev/null bs=1G count=1 status=none
  FRESH_MEM+=("$(awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $t0 }")")
}
fresh_mem
# Some VMs run DAMON to page out page cache it finds idle, and hand the memory back to the host. A
# warm re-read then finds holes in the page cache: a FUSE mount refills them through its daemon (a
# request each, which waits for a core beside the readers), the local disk from the disk, in the
# kernel. The summary says so when it is on, since it moves the warm re-reads from run to run.
DAMON_PAGEOUT=false
for k in /sys/kernel/mm/damon/admin/kdamonds/*; do
  [[ $(cat "$k/state" 2>/dev/null) == on ]] && grep -qsx pageout "$k"/contexts/*/schemes/*/action && DAMON_PAGEOUT=true
done
# Some VMs hand the memory freed in them back to their host within a second or so (virtio-balloon
# free page reporting: device 5, feature bit 5). Each first touch of it afterwards costs a host fault:
# a cold epoch pays it for the memory it fills (a mount's page cache and RAM cache), and the more
# the host is loaded, the more (the fresh-memory times above). The summary says so when it is on.
PAGE_REPORTING=false
for d in /sys/bus/virtio/devices/*; do
  [[ $(cat "$d/device" 2>/dev/null) == 0x0005 && $(cut -c6 "$d/features" 2>/dev/null) == 1 ]] && PAGE_REPORTING=true
done

say "warm-up: one cold epoch through a dataccel mount and direct GETs, not measured"
# The machine settles after the build and the server's start (the server's heap grows, memory
# the build freed goes back to the VM's host and costs a host fault when touched again); without
# this, the first client measured pays for it, and it is always dataccel.
server_warm
mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-W"
"$BIN" bench run "${RUN_FLAGS[@]}" --epochs 1 "$OUT/mnt-dataccel/$DS" "s3://$S3_BUCKET/$DS" >/dev/null
umount_dataccel "$OUT/mnt-dataccel"

ORDER_WORDS=shuffled; [ "$ORDER" = dir ] && ORDER_WORDS="in directory order"
say "A. cold + warm epochs, $ORDER_WORDS, no announcement, $READERS readers: dataccel, s3fs, rclone, direct GETs, local disk ($REPEATS runs)"
for r in $(seq "$REPEATS"); do
  server_warm
  mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-A"
  paths=("$OUT/mnt-dataccel/$DS")
  html=()
  if [[ $r == 1 ]]; then mount_peer s3fs "$OUT/mnt-s3fs"; paths+=("$OUT/mnt-s3fs/$DS"); html=(--html "$OUT/report.html"); fi
  mount_peer rclone-full "$OUT/mnt-rclone"
  paths+=("$OUT/mnt-rclone/$DS" "s3://$S3_BUCKET/$DS" "$LOCAL")
  "$BIN" bench run "${RUN_FLAGS[@]}" --epochs 2 --json "$OUT/A-$r.json" "${html[@]}" "${paths[@]}"
  umount_dataccel "$OUT/mnt-dataccel"
  [[ $r == 1 ]] && "$PEERS/umount-peer.sh" "$OUT/mnt-s3fs" >/dev/null
  "$PEERS/umount-peer.sh" "$OUT/mnt-rclone" >/dev/null
done

fresh_mem
say "B. cold epoch with the order announced, then the warm re-read: a fresh dataccel mount beside direct GETs and local disk ($REPEATS runs)"
# No peer is mounted here: their daemons' background work (rclone writing its cache) would share
# the cores with the warm re-read, which takes a tenth of a second.
for r in $(seq "$REPEATS"); do
  server_warm
  mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-B"
  "$BIN" bench run "${RUN_FLAGS[@]}" --epochs 2 --announce --json "$OUT/B-$r.json" \
    "$OUT/mnt-dataccel/$DS" "s3://$S3_BUCKET/$DS" "$LOCAL"
  # The same re-read opening files as Python's open() does before 3.14 (and so torchvision's
  # default loader): one isatty() ioctl per file, which every FUSE mount must answer itself.
  "$BIN" bench run "${RUN_FLAGS[@]}" --epochs 1 --python-open --json "$OUT/P-$r.json" "$OUT/mnt-dataccel/$DS" "$LOCAL"
  umount_dataccel "$OUT/mnt-dataccel"
done

say "F. after warm: dataccel warm fills a fresh cache, then a fresh mount reads an epoch from it, beside direct GETs ($REPEATS runs)"
for r in $(seq "$REPEATS"); do
  server_warm
  rm -rf "$OUT/cache-F"
  t0=$EPOCHREALTIME
  # A warm that cached none or part of the dataset (a full disk) would make this phase time a cold
  # epoch: the run stops, with warm's reason.
  if ! "$BIN" warm -q --endpoint "$S3_ENDPOINT" --cache-dir "$OUT/cache-F" ${DC_FLAGS[@]+"${DC_FLAGS[@]}"} "s3://$S3_BUCKET/$DS" 2>"$OUT/warm-F.log" ||
    grep -q "cache is full" "$OUT/warm-F.log"; then
    cat "$OUT/warm-F.log" >&2; echo "dataccel warm did not cache the whole dataset in $OUT/cache-F" >&2; exit 1
  fi
  awk "BEGIN { printf \"%.3f\\n\", $EPOCHREALTIME - $t0 }" >>"$OUT/warm-F.times"
  start_dataccel "$OUT/mnt-dataccel" "$OUT/cache-F" "$OUT/mnt-dataccel-F.log"
  "$BIN" bench run "${RUN_FLAGS[@]}" --epochs 1 --json "$OUT/F-$r.json" "$OUT/mnt-dataccel/$DS" "s3://$S3_BUCKET/$DS"
  umount_dataccel "$OUT/mnt-dataccel"
done

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
# A listing is a handful of LIST requests, each of which makes the server read the whole
# directory: one slow answer moves the whole time, so it runs REPEATS times too.
LIST_DC=() LIST_S3FS=() LIST_RC=()
server_warm
for r in $(seq "$REPEATS"); do
  mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-C" --manifest off
  LIST_DC+=("$(list_time "$OUT/mnt-dataccel/$FLAT")"); umount_dataccel "$OUT/mnt-dataccel"
  if [[ $r == 1 ]]; then
    mount_peer s3fs "$OUT/mnt-s3fs"; LIST_S3FS+=("$(list_time "$OUT/mnt-s3fs/$FLAT")"); "$PEERS/umount-peer.sh" "$OUT/mnt-s3fs" >/dev/null
  fi
  mount_peer rclone-full "$OUT/mnt-rclone"; LIST_RC+=("$(list_time "$OUT/mnt-rclone/$FLAT")"); "$PEERS/umount-peer.sh" "$OUT/mnt-rclone" >/dev/null
done

say "E. prefetch modes, 4 readers, cold each: --prefetch off, directory order, announced shuffled order"
E_FLAGS=(--endpoint "$S3_ENDPOINT" --workers 4 --batch "$BATCH" --compute-per-sample 0 --seed 7 --no-probe --rtt "${RTT_MS}ms" -q --epochs 1)
[[ $WALK == 1 ]] || E_FLAGS+=(--files-from "$OUT/files.tsv")
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

# A training job's loader: PyTorch's DataLoader gives each worker a whole batch to load, file by
# file, and the accelerator computes between steps; one run, as a view of what the GPU sees.
# Batches of 100, or a fiftieth of a smaller mix (at least 1).
LOADER_BATCH=$((FILES / 50)); ((LOADER_BATCH <= 100)) || LOADER_BATCH=100; ((LOADER_BATCH >= 1)) || LOADER_BATCH=1
say "G. a training loader: 8 workers x batches of $LOADER_BATCH, resnet50-h100's compute, cold then warm epoch: dataccel, rclone, then dataccel announced, direct GETs (one run)"
G_FLAGS=("${BENCH_FLAGS[@]}" --workers 8 --batch "$LOADER_BATCH" --profile resnet50-h100 --epochs 2)
server_warm
mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-G"
mount_peer rclone-full "$OUT/mnt-rclone"
"$BIN" bench run "${G_FLAGS[@]}" --json "$OUT/G-plain.json" "$OUT/mnt-dataccel/$DS" "$OUT/mnt-rclone/$DS" >/dev/null
umount_dataccel "$OUT/mnt-dataccel"
"$PEERS/umount-peer.sh" "$OUT/mnt-rclone" >/dev/null
server_warm
mount_dataccel "$OUT/mnt-dataccel" "$OUT/cache-G"
"$BIN" bench run "${G_FLAGS[@]}" --announce --json "$OUT/G-announced.json" "$OUT/mnt-dataccel/$DS" "s3://$S3_BUCKET/$DS" >/dev/null
umount_dataccel "$OUT/mnt-dataccel"

fresh_mem
say "summary"
json_list() { local IFS=,; echo "[$*]"; } # numbers -> a JSON array
for x in A B F P; do jq -s . "$OUT"/$x-[0-9]*.json >"$OUT/$x-runs.tmp"; done
jq -n --slurpfile a "$OUT/A-runs.tmp" --slurpfile b "$OUT/B-runs.tmp" --slurpfile f "$OUT/F-runs.tmp" --slurpfile p "$OUT/P-runs.tmp" \
  --argjson warm_s "$(jq -s . "$OUT/warm-F.times")" \
  --slurpfile eoff "$OUT/E-off.json" --slurpfile edir "$OUT/E-dir.json" --slurpfile eann "$OUT/E-announced.json" \
  --slurpfile gplain "$OUT/G-plain.json" --slurpfile gann "$OUT/G-announced.json" \
  --argjson list_dc "$(json_list "${LIST_DC[@]}")" --argjson list_s3fs "$(json_list "${LIST_S3FS[@]}")" \
  --argjson list_rc "$(json_list "${LIST_RC[@]}")" --arg rss_kb "$RSS_KB" --arg ram_file_kb "$RAM_FILE_KB" \
  --argjson fresh_mem "$(json_list "${FRESH_MEM[@]}")" --argjson damon_pageout "$DAMON_PAGEOUT" --argjson page_reporting "$PAGE_REPORTING" \
  --arg files "$FILES" --arg bytes "$BYTES" --arg rtt "$RTT_MS" --arg readers "$READERS" --arg batch "$BATCH" --arg ds "$DS" \
  --arg order "$ORDER" --arg repeats "$REPEATS" --arg walk "$WALK" \
  --arg command "FILES=$FILES MEAN_SIZE=$MEAN_SIZE MIN_SIZE=$MIN_SIZE MAX_SIZE=$MAX_SIZE CLASSES=$CLASSES SUBDIRS=$SUBDIRS ORDER=$ORDER BATCH=$BATCH READERS=$READERS RTT_MS=$RTT_MS REPEATS=$REPEATS CONTENT=$CONTENT WALK=$WALK${DATACCEL_FLAGS:+ DATACCEL_FLAGS=\"$DATACCEL_FLAGS\"} make compare" '
  # An announced epoch also pays for its announcement (written and applied before the clock starts).
  def ep($i): .epochs[$i].wall_s + (.epochs[$i].announce_s // 0);
  def role: if test("/mnt-dataccel/") then "dataccel" elif test("/mnt-s3fs/") then "s3fs"
    elif test("/mnt-rclone/") then "rclone" elif startswith("s3://") then "direct" else "local" end;
  # every run of one path of a phase, epoch $i
  def runs($phase; $who; $i): [$phase[0][] | .paths[] | select((.path | role) == $who) | ep($i)];
  # every walk of the dataset (the bench lists it before its first epoch) by one path of a phase
  def walks($phase; $who): [$phase[0][] | .paths[] | select((.path | role) == $who) | .list_s];
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def medians: with_entries(.value |= with_entries(.value |= median));
  # bytes the store sent over bytes read, epoch $i of one path of a phase (median over the runs; null
  # where the bench could not count them)
  def fetched($phase; $who; $i): [$phase[0][] | .paths[] | select((.path | role) == $who) | .epochs[$i].fetched.bytes_per_read // empty]
    | if length > 0 then median else null end;
  ($eoff[0].paths[0]) as $Eoff | ($edir[0].paths[0]) as $Edir | ($eann[0].paths[0]) as $Eann |
  # phase G: the cold and warm epochs of a path
  def loader($p): {cold: 0, warm: 1} | map_values(. as $i | $p.epochs[$i] |
    {wall_s: (.wall_s + (.announce_s // 0)), au: .au, first_batch_s: .time_to_first_batch_s});
  { cold: (["dataccel", "s3fs", "rclone", "direct", "local"] | map({key: ., value: runs($a; .; 0)}) | from_entries),
    warm: (["dataccel", "s3fs", "rclone", "direct", "local"] | map({key: ., value: runs($a; .; 1)}) | from_entries),
    announced_cold: {dataccel: runs($b; "dataccel"; 0), direct: runs($b; "direct"; 0)},
    alone_warm: {dataccel: runs($b; "dataccel"; 1), local: runs($b; "local"; 1)},
    python_open_warm: {dataccel: runs($p; "dataccel"; 0), local: runs($p; "local"; 0)},
    after_warm: {warm: $warm_s, epoch: runs($f; "dataccel"; 0), direct: runs($f; "direct"; 0)},
    list_10k: {dataccel: $list_dc, s3fs: $list_s3fs, rclone: $list_rc},
    walk: (if $walk == "1" then ["dataccel", "s3fs", "rclone", "direct", "local"] | map({key: ., value: walks($a; .)}) | from_entries
      else {} end) } as $runs |
  ($runs | medians) as $m |
  { command: $command,
    dataset: {prefix: $ds, order: $order, files: ($files|tonumber), bytes: ($bytes|tonumber), rtt_ms: ($rtt|tonumber),
      readers: ($readers|tonumber), batch: ($batch|tonumber), repeats: ($repeats|tonumber)},
    cold_s: $m.cold, warm_s: $m.warm, announced_cold_s: $m.announced_cold, alone_warm_s: $m.alone_warm, python_open_warm_s: $m.python_open_warm, after_warm_s: $m.after_warm,
    runs_s: $runs,
    list_10k_s: $m.list_10k, walk_s: $m.walk,
    prefetch_modes_4_readers_s: {off: ($Eoff|ep(0)), dir_order: ($Edir|ep(0)), announced: ($Eann|ep(0))},
    dataccel_fetched_per_read: {cold: fetched($a; "dataccel"; 0), warm: fetched($a; "dataccel"; 1),
      announced_cold: fetched($b; "dataccel"; 0), after_warm: fetched($f; "dataccel"; 0)},
    dataccel_peak_rss_mib: (($rss_kb|tonumber)/1024|floor), dataccel_ram_file_mib: (($ram_file_kb|tonumber)/1024|floor), ram_cache_mib: 1024,
    host_fresh_memory_s_per_gib: {start: $fresh_mem[0], before_b: $fresh_mem[1], end: $fresh_mem[2]},
    host_damon_pageout: $damon_pageout, host_page_reporting: $page_reporting,
    loader: (($gplain[0].config | {workers, batch, profile}) + {compute_s: $gplain[0].paths[0].epochs[0].compute_s,
      epochs: {dataccel: loader($gplain[0].paths[0]), rclone: loader($gplain[0].paths[1]),
        dataccel_announced: loader($gann[0].paths[0]), direct: loader($gann[0].paths[1])}}) }
  # Each measure of the issue, with its bound: min for a ratio that must reach it, max for a
  # figure that must stay under it, none for a measure shown for reference.
  | .targets = [
      {name: "cold, no announcement: x the faster peer", value: (([.cold_s.s3fs, .cold_s.rclone]|min) / .cold_s.dataccel), min: 3},
      {name: "cold, announced: x s3fs cold", value: (.cold_s.s3fs / .announced_cold_s.dataccel), min: 10},
      {name: "cold, announced: x direct-GET ceiling", value: (.announced_cold_s.direct / .announced_cold_s.dataccel), min: 0.67},
      # Under 10, "10x s3fs" asks dataccel to beat the direct GETs beside it.
      {name: "cold, announced: direct-GET ceiling x s3fs cold", value: (.cold_s.s3fs / .announced_cold_s.direct)},
      {name: "after warm: epoch x direct-GET ceiling", value: (.after_warm_s.direct / .after_warm_s.epoch), min: 0.67},
      {name: "after warm: warm + epoch x direct-GET ceiling", value: (.after_warm_s.direct / (.after_warm_s.warm + .after_warm_s.epoch))},
      {name: "warm: x local-disk re-read, peers unmounted", value: (.alone_warm_s.local / .alone_warm_s.dataccel), min: 0.9},
      {name: "warm: x local-disk re-read, peers mounted beside", value: (.warm_s.local / .warm_s.dataccel)},
      {name: "warm, Python open(): x local-disk re-read", value: (.python_open_warm_s.local / .python_open_warm_s.dataccel)},
      {name: "listing 10k: x s3fs", value: (.list_10k_s.s3fs / .list_10k_s.dataccel), min: 10} ]
    + if (.walk_s | length) > 0 then [
      {name: "walking the dataset: x the faster peer", value: (([.walk_s.s3fs, .walk_s.rclone]|min) / .walk_s.dataccel)} ] else [] end
    + (.dataccel_fetched_per_read | [
      {name: "cold, no announcement: dataccel bytes fetched / read", value: .cold},
      {name: "cold, announced: dataccel bytes fetched / read", value: .announced_cold},
      {name: "after warm: dataccel bytes fetched / read in the epoch", value: .after_warm} ] | map(select(.value != null)))
    + [
      {name: "training loader, cold epoch, no announcement: x rclone", value: (.loader.epochs.rclone.cold.wall_s / .loader.epochs.dataccel.cold.wall_s)},
      {name: "peak RSS + RAM cache file - RAM cache, MiB", value: (.dataccel_peak_rss_mib + .dataccel_ram_file_mib - .ram_cache_mib), max: 300},
      {name: "4 readers: announced x prefetch off", value: (.prefetch_modes_4_readers_s.off / .prefetch_modes_4_readers_s.announced), min: 3} ]' > "$OUT/summary.json"
rm -f "$OUT"/*-runs.tmp
"$BIN" bench compare-report "$OUT/summary.json" --html "$OUT/summary.html"
echo; echo "JSON: $OUT/{A,B,F,P}-N.json $OUT/G-{plain,announced}.json $OUT/summary.json   HTML: $OUT/summary.html (targets, every phase), $OUT/report.html (phase A, run 1)"
