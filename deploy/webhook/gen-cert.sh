#!/bin/sh
# gen-cert.sh: TLS for the dataccel webhook without cert-manager. It keeps a
# private CA in the Secret $NS/$CA_SECRET (no pod mounts it), issues the
# webhook's serving certificate from that CA into the Secret $NS/$SECRET
# (the webhook reloads it), and makes sure the MutatingWebhookConfiguration's
# caBundle trusts the CA.
#
# Usage: gen-cert.sh [--rotate-ca | --drop-old-cas]
#   (no flag)       keep the CA (made on the first run) and issue a new
#                   serving certificate: run it again to renew.
#   --rotate-ca     make a new CA, add it to the caBundle beside the old one,
#                   then issue the serving certificate from the new CA.
#   --drop-old-cas  once every replica serves the new certificate, leave
#                   only the current CA in the caBundle.
#
# Why the CA is kept: the caBundle and the certificate the webhook serves
# change in two steps (the kubelet takes a minute or more to refresh the
# mounted Secret). With a new CA in every run, the API server distrusted the
# webhook in between, and with failurePolicy Fail refused annotated pods.
# Signed by a CA the caBundle already holds, a new certificate is trusted
# the moment it is served; a CA rotation adds the new CA to the caBundle
# before the certificate it signs is stored, and drops the old one only when
# asked to.
#
# Run it after `kubectl apply -k deploy/webhook` (it patches the
# configuration that apply creates). Needs openssl and kubectl. Environment:
# NS, SVC, SECRET, CA_SECRET, WEBHOOK (names), DAYS (serving certificate,
# 365), CA_DAYS (a new CA, 3650), CA_BUNDLE_FILE (where the caBundle goes
# when the configuration does not exist yet). With cert-manager, skip this
# script: see deploy/README.md.
set -eu
NS=${NS:-dataccel-system}
SVC=${SVC:-dataccel-webhook}
SECRET=${SECRET:-dataccel-webhook-tls}
CA_SECRET=${CA_SECRET:-dataccel-webhook-ca}
WEBHOOK=${WEBHOOK:-dataccel-sidecar-injector}
DAYS=${DAYS:-365}
CA_DAYS=${CA_DAYS:-3650}

usage() {
  echo "usage: $0 [--rotate-ca | --drop-old-cas]  (see the comment at the top of the script)"
}
die() {
  echo "gen-cert.sh: $*" >&2
  exit 1
}

mode=renew
case $# in
0) ;;
1)
  case $1 in
  --rotate-ca) mode=rotate ;;
  --drop-old-cas) mode=drop ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
  esac
  ;;
*) usage >&2; exit 2 ;;
esac
# A leading zero would read as octal in $((...)) but as decimal to openssl.
for d in "$DAYS" "$CA_DAYS"; do
  case $d in
  '' | *[!0-9]* | 0*) die "DAYS and CA_DAYS must be whole numbers of days, above 0, with no leading zero" ;;
  esac
done

# Keys and certificates only ever go to files in this private directory and
# to the Secrets, never to the terminal.
umask 077
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM # so that the EXIT trap removes the keys

# secret_file NAME KEY OUT: the decoded KEY of Secret $NS/NAME into OUT,
# empty when the Secret does not exist. --ignore-not-found makes "absent"
# the only empty answer: any other kubectl failure stops the script (set
# -e) rather than pass for "no CA" and rotate the CA by accident.
secret_file() {
  kubectl -n "$NS" get secret "$1" --ignore-not-found -o "jsonpath={.data.$2}" >"$dir/b64"
  openssl base64 -d -A <"$dir/b64" >"$3"
}

# fingerprint FILE: the SHA-256 fingerprint of the certificate in FILE.
fingerprint() {
  openssl x509 -noout -fingerprint -sha256 -in "$1"
}

# split_pem FILE PREFIX: one file per certificate, PREFIX.1, PREFIX.2, ...
split_pem() {
  awk -v p="$2" '/-----BEGIN CERTIFICATE-----/ { n++; f = p "." n }
    f != "" { print > f }
    /-----END CERTIFICATE-----/ { if (f != "") close(f); f = "" }' "$1"
}

kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS"

# The CA: read back from its Secret.
secret_file "$CA_SECRET" 'tls\.crt' "$dir/ca.crt"
secret_file "$CA_SECRET" 'tls\.key' "$dir/ca.key"
have_ca=false
if [ -s "$dir/ca.crt" ]; then
  [ -s "$dir/ca.key" ] || die "Secret $NS/$CA_SECRET has no tls.key: restore it, or delete the Secret and run with --rotate-ca"
  openssl x509 -noout -pubkey -in "$dir/ca.crt" >"$dir/ca.pub" 2>/dev/null &&
    openssl pkey -pubout -in "$dir/ca.key" >"$dir/ca.key.pub" 2>/dev/null &&
    cmp -s "$dir/ca.pub" "$dir/ca.key.pub" ||
    die "Secret $NS/$CA_SECRET does not hold a CA certificate and its key: restore it, or delete the Secret and run with --rotate-ca"
  have_ca=true
fi

# The configuration's caBundle now ("" when the configuration is missing).
mwc=$(kubectl get mutatingwebhookconfiguration "$WEBHOOK" --ignore-not-found -o name)
: >"$dir/bundle.old"
if [ -n "$mwc" ]; then
  kubectl get mutatingwebhookconfiguration "$WEBHOOK" -o 'jsonpath={.webhooks[0].clientConfig.caBundle}' >"$dir/b64"
  openssl base64 -d -A <"$dir/b64" >"$dir/bundle.old"
fi

# patch_bundle FILE: make FILE the configuration's caBundle (or write it to
# CA_BUNDLE_FILE when the configuration does not exist yet).
patch_bundle() {
  ca=$(openssl base64 -A <"$1")
  if [ -n "$mwc" ]; then
    kubectl patch mutatingwebhookconfiguration "$WEBHOOK" --type=json \
      -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$ca\"}]"
    echo "caBundle of $WEBHOOK updated"
  else
    echo "$ca" >"${CA_BUNDLE_FILE:-./dataccel-webhook-ca.b64}"
    echo "MutatingWebhookConfiguration $WEBHOOK not found yet: apply deploy/webhook, then run this script again"
    echo "(or patch caBundle with the content of ${CA_BUNDLE_FILE:-./dataccel-webhook-ca.b64})"
  fi
}

if [ "$mode" = drop ]; then
  $have_ca || die "no CA in Secret $NS/$CA_SECRET: nothing to keep"
  [ -n "$mwc" ] || die "MutatingWebhookConfiguration $WEBHOOK not found"
  # Only once the stored certificate is the current CA's; the replicas
  # must also have reloaded it ("tls certificate reloaded" in their logs).
  secret_file "$SECRET" 'tls\.crt' "$dir/tls.crt"
  [ -s "$dir/tls.crt" ] && openssl verify -CAfile "$dir/ca.crt" "$dir/tls.crt" >/dev/null 2>&1 ||
    die "the certificate in Secret $NS/$SECRET is not signed by the current CA: run $0 first, then --drop-old-cas"
  patch_bundle "$dir/ca.crt"
  exit 0
fi

new_ca=false
if [ "$mode" = rotate ] || ! $have_ca; then
  # On the first run, or on the first after an older gen-cert.sh (which
  # kept no CA): the caBundle's CAs stay beside this one below.
  openssl req -x509 -newkey rsa:2048 -nodes -days "$CA_DAYS" \
    -subj "/CN=dataccel-webhook-ca-$(date -u +%Y%m%d%H%M%S)-$(openssl rand -hex 4)" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  new_ca=true
fi
# A certificate outliving its CA would stop verifying when the CA expires.
openssl x509 -noout -checkend $((DAYS * 86400)) -in "$dir/ca.crt" >/dev/null ||
  die "the CA expires within $DAYS days, before the new certificate would: run with --rotate-ca (with CA_DAYS above DAYS), or set a lower DAYS"

openssl req -newkey rsa:2048 -nodes -subj "/CN=$SVC.$NS.svc" \
  -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "$SVC" "$SVC" "$NS" "$SVC" "$NS" "$SVC" "$NS" >"$dir/ext.cnf"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -days "$DAYS" -extfile "$dir/ext.cnf" -out "$dir/tls.crt" 2>/dev/null

# The new caBundle: the CAs it holds (but expired ones) and the current CA.
# Unchanged, it is not patched: a renewal touches the serving Secret alone.
cafp=$(fingerprint "$dir/ca.crt")
: >"$dir/bundle.new"
changed=false
have=false
split_pem "$dir/bundle.old" "$dir/old"
for f in "$dir"/old.*; do
  [ -f "$f" ] || continue
  if ! fp=$(fingerprint "$f" 2>/dev/null); then
    cat "$f" >>"$dir/bundle.new" # not ours to judge
    continue
  fi
  if ! openssl x509 -noout -checkend 0 -in "$f" >/dev/null; then
    changed=true # expired: it verifies nothing any more
    continue
  fi
  [ "$fp" = "$cafp" ] && have=true
  cat "$f" >>"$dir/bundle.new"
done
if ! $have; then
  cat "$dir/ca.crt" >>"$dir/bundle.new"
  changed=true
fi

# Order matters: the CA's key first (a later failure must not lose the key
# of a CA already trusted), then the caBundle, then the certificate it
# must trust.
if $new_ca; then
  kubectl -n "$NS" create secret tls "$CA_SECRET" --cert="$dir/ca.crt" --key="$dir/ca.key" \
    --dry-run=client -o yaml | kubectl apply -f -
fi
if $changed || [ -z "$mwc" ]; then
  patch_bundle "$dir/bundle.new"
fi
kubectl -n "$NS" create secret tls "$SECRET" --cert="$dir/tls.crt" --key="$dir/tls.key" \
  --dry-run=client -o yaml | kubectl apply -f -
if [ "$mode" = rotate ] && [ -n "$mwc" ]; then
  echo "the old CA stays in the caBundle: once every replica logs \"tls certificate reloaded\", run $0 --drop-old-cas"
fi
