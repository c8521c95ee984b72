# lib.sh: what compare.sh and randread.sh share. Source it after setting PEERS (the peer
# scripts) and BIN (the dataccel binary); it sources $PEERS/lib.sh.
. "$PEERS/lib.sh"

say() { printf '\n== %s\n' "$*"; }

# need_tools TOOL...: install the Debian packages of the same names that are missing.
need_tools() {
  local tool
  for tool; do
    command -v "$tool" >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$tool" >/dev/null; }
  done
}

# s3_up RTT_MS: the test server behind an emulated round trip, its settings loaded and its
# credentials exported for dataccel.
s3_up() {
  say "S3 server behind a $1 ms round trip"
  "$PEERS/s3-up.sh" --latency-ms "$1" >/dev/null
  load_env
  export AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY AWS_REGION=$S3_REGION
}

# ensure_dataset PREFIX FILES GEN_FLAGS...: generate FILES files under PREFIX with
# `dataccel bench gen GEN_FLAGS...` unless it holds that many already.
ensure_dataset() {
  local prefix=$1 files=$2 have
  shift 2
  have=$(s3tool stat -prefix "$prefix/" | sed -n 's/.* files=\([0-9]*\) .*/\1/p')
  if [[ $have != "$files" ]]; then
    [[ $have == 0 ]] || s3tool rm -prefix "$prefix/"
    "$BIN" bench gen -q --endpoint "$S3_ENDPOINT" --to "s3://$S3_BUCKET/$prefix" -n "$files" "$@"
  fi
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
