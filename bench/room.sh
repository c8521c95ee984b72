# room.sh: need_room, which compare.sh and randread.sh run before they install or write anything
# (sourced, not run; it needs nothing but df).

# need_room DIR BYTES: exit 2 unless the file system that holds (or will hold) DIR has BYTES free
# above the disk cache's free-space floor (`--cache-min-free`, 5% of it by default). A disk cache
# at that floor admits nothing: `dataccel warm` would cache nothing and its phase would time a cold
# epoch, and a mix larger than the RAM cache would be fetched again instead of read from disk.
need_room() {
  local dir=$1 need=$2 d=$1 avail size room
  until [[ -d $d ]]; do d=$(dirname "$d"); done
  read -r avail size < <(df -B1 --output=avail,size "$d" | tail -1)
  room=$((avail - size / 20))
  if ((room < need)); then
    echo "not enough disk at $dir for this mix: it needs about $((need >> 20)) MiB above the disk cache's free-space floor (5% of the file system), there are $((room > 0 ? room >> 20 : 0)) MiB ($((avail >> 20)) MiB free of $((size >> 20)) MiB); remove old output directories (.compare-*) or set OUT to a larger disk" >&2
    exit 2
  fi
}
