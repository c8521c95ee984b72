# peers.sh: find_peers and need_peers, which compare.sh and randread.sh run to find the peer scripts (sourced,
# not run).

# find_peers ROOT: print the peer scripts' directory: $PEERS_DIR when set, else the first
# shared/peers (with its install.sh) beside ROOT or beside a directory above it, so that a
# checkout anywhere under the directory that holds shared/ finds them; else ROOT/../shared/peers,
# which the caller reports missing.
find_peers() {
  if [[ -n ${PEERS_DIR:-} ]]; then
    echo "$PEERS_DIR"
    return
  fi
  local d=$1
  while [[ $d != / && $d != . ]]; do
    d=$(dirname "$d")
    if [[ -x $d/shared/peers/install.sh ]]; then
      echo "${d%/}/shared/peers"
      return
    fi
  done
  echo "$1/../shared/peers"
}

# need_peers DIR: exit 1, saying what to set, unless DIR holds the peer scripts.
need_peers() {
  [[ -x $1/install.sh ]] && return
  echo "peer scripts not found at $1: set PEERS_DIR to the directory that holds install.sh, s3-up.sh and mount-peer.sh (shared/peers)" >&2
  exit 1
}
