#!/bin/sh
# gen-cert.sh: make a private CA and a serving certificate for the dataccel
# webhook, store them as the Secret dataccel-system/dataccel-webhook-tls, and
# put the CA into the MutatingWebhookConfiguration's caBundle.
#
# Run it once after `kubectl apply -k deploy/webhook` (it patches the
# configuration and fills the Secret in the namespace that apply creates), and again to rotate
# (the webhook reloads the files; the CA changes, so the caBundle is patched
# again). Needs openssl and kubectl. With cert-manager, skip this script:
# see deploy/README.md.
set -eu
NS=${NS:-dataccel-system}
SVC=${SVC:-dataccel-webhook}
SECRET=${SECRET:-dataccel-webhook-tls}
WEBHOOK=${WEBHOOK:-dataccel-sidecar-injector}
DAYS=${DAYS:-365}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

openssl req -x509 -newkey rsa:2048 -nodes -days "$DAYS" -subj "/CN=dataccel-webhook-ca" \
  -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=$SVC.$NS.svc" \
  -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "$SVC" "$SVC" "$NS" "$SVC" "$NS" "$SVC" "$NS" >"$dir/ext.cnf"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -days "$DAYS" -extfile "$dir/ext.cnf" -out "$dir/tls.crt" 2>/dev/null

kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS"
kubectl -n "$NS" create secret tls "$SECRET" --cert="$dir/tls.crt" --key="$dir/tls.key" \
  --dry-run=client -o yaml | kubectl apply -f -

ca=$(base64 <"$dir/ca.crt" | tr -d '\n')
if kubectl get mutatingwebhookconfiguration "$WEBHOOK" >/dev/null 2>&1; then
  kubectl patch mutatingwebhookconfiguration "$WEBHOOK" --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$ca\"}]"
  echo "caBundle of $WEBHOOK updated"
else
  echo "$ca" >"${CA_BUNDLE_FILE:-./dataccel-webhook-ca.b64}"
  echo "MutatingWebhookConfiguration $WEBHOOK not found yet: apply deploy/webhook, then run this script again"
  echo "(or patch caBundle with the content of ${CA_BUNDLE_FILE:-./dataccel-webhook-ca.b64})"
fi
