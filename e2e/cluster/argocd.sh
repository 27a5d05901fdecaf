# shellcheck shell=bash disable=SC2154 # variables come from lib.sh and up.sh
# Argo CD in the local cluster: meant to be sourced by up.sh after lib.sh (and
# flux.sh), not run. start_argocd / stop_argocd.
#
# Argo CD's application-controller and repo-server, built from its module
# (build-argocd.sh, ARGOCD_VERSION of versions.env), run on the host like the
# control plane and Flux, so that a test can have Argo CD sync an app from a Git
# repository served on this machine and watch it honour
# argocd.argoproj.io/skip-reconcile. What runs, all on the host's loopback:
#
#   redis-stand-in                 127.0.0.1:21185  the Redis both cache in
#                                                   (e2e/images/cmd/redis-stand-in)
#   argocd-repo-server             127.0.0.1:21186  gRPC (TLS, self-signed: as in
#                                                   Argo CD's own install)
#                                  127.0.0.1:21187  /healthz, /metrics
#   argocd-application-controller  0.0.0.0:21188    /healthz, /metrics (Argo CD
#                                                   has no flag for the address)
#   git-daemon                     127.0.0.1:21189  git://, the test repositories
#
# (each port plus REFILL_PORT_OFFSET; the last two digits, 85-89, differ from
# every other port of lib.sh, nodes.sh and flux.sh). Logs are
# $cluster_dir/logs/<name>.log, pid files $cluster_dir/run/<name>.pid, like every
# other component; down.sh stops them (lib.sh's components).
#
#   - Only the two controllers: no API server, UI, Dex, ApplicationSet or
#     notifications controller. Tests talk to Argo CD through its CRDs.
#   - The controller uses one identity (group refill:argocd) bound to
#     cluster-admin, as Flux does here; Argo CD's own install grants its
#     controller every verb on every resource too. The in-cluster destination
#     (https://kubernetes.default.svc) is this cluster: ARGOCD_FAKE_IN_CLUSTER
#     makes the controller take it from KUBECONFIG instead of a pod's service
#     account.
#   - Applications are refreshed every 20 s without jitter (Argo CD's default is
#     120 s plus up to 60 s): a test that pushes a commit need not wait minutes,
#     and can still ask at once with the argocd.argoproj.io/refresh annotation.
#   - The repo-server's checkouts, TLS and SSH data, plugin sockets and ask-pass
#     socket live under $cluster_dir/argocd, not in /tmp or /app as in a pod, so
#     that two clusters never share them. GnuPG verification is off (no keyring).
#     Only plain directories of manifests can be synced: the host has no helm or
#     kustomize on the repo-server's PATH.
#
# Test repositories: bare repositories under $cluster_dir/argocd/git, served by
# `git daemon` (every repository there, pushes allowed). A test adds one with
#
#   git init --bare "$cluster_dir/argocd/git/<name>.git"
#   git -C <work tree> push "$cluster_dir/argocd/git/<name>.git" HEAD:main
#
# (or pushes to the git:// URL) and points its Application's spec.source.repoURL
# at "$(cat "$cluster_dir/argocd-git-url")/<name>.git", i.e.
# git://127.0.0.1:21189/<name>.git. The daemon serves new repositories without a
# restart.
#
# The Application and AppProject CRDs come from the same module; the `default`
# AppProject allows every repository, destination and cluster-scoped kind.
#
# The release is ARGOCD_VERSION: the newest the Go module proxy serves (v3.6.2
# when this was written; versions.env says what its go.mod needs to build). Any
# release since v2.7 honours skip-reconcile, the annotation refill sets.

argocd_namespace=argocd
argocd_redis_port=$((21185 + port_offset))
argocd_repo_server_port=$((21186 + port_offset))
argocd_repo_server_metrics_port=$((21187 + port_offset))
argocd_controller_metrics_port=$((21188 + port_offset))
argocd_git_port=$((21189 + port_offset))

# A RESP PING, as Redis clients send it, answered by +PONG.
argocd_redis_ready() {
  local reply
  reply="$(exec 3<>"/dev/tcp/127.0.0.1/$argocd_redis_port" && printf '*1\r\n$4\r\nPING\r\n' >&3 &&
    timeout 2 head -c 7 <&3)" || return 1
  [[ "$reply" == $'+PONG\r' ]]
}
# A connection accepted is enough (the daemon logs this empty one as "the remote
# end hung up unexpectedly").
argocd_git_ready() { (exec 3<>"/dev/tcp/127.0.0.1/$argocd_git_port") 2>/dev/null; }
# ?full=true: the repo-server also calls its own gRPC health service.
argocd_repo_server_ready() { healthy "http://127.0.0.1:$argocd_repo_server_metrics_port/healthz?full=true"; }
argocd_controller_ready() { healthy "http://127.0.0.1:$argocd_controller_metrics_port/healthz"; }

# What the controllers read from their namespace: argocd-cm (only exclusions of
# objects that churn and that no app declares: the nodes' Leases above all),
# argocd-rbac-cm (read by the API server only, which does not run; kept so that
# the namespace looks installed), argocd-secret (server.secretkey, without which
# Argo CD reports its settings incomplete) and the `default` AppProject.
# argocd-cmd-params-cm is left out: in a pod it only feeds environment
# variables, and here the flags say everything.
argocd_settings_manifest() {
  local secret_key="$1"
  argocd_settings_head ConfigMap argocd-cm
  cat <<'EOF'
data:
  resource.exclusions: |
    - apiGroups: ["", discovery.k8s.io]
      kinds: [Endpoints, EndpointSlice]
    - apiGroups: [coordination.k8s.io]
      kinds: [Lease]
    - apiGroups: [authentication.k8s.io, authorization.k8s.io]
      kinds: [SelfSubjectReview, TokenReview, LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview]
---
EOF
  argocd_settings_head ConfigMap argocd-rbac-cm
  echo ---
  argocd_settings_head Secret argocd-secret
  printf '%s\n' "type: Opaque" "stringData:" "  server.secretkey: $secret_key" ---
  cat <<EOF
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: default
  namespace: $argocd_namespace
spec:
  sourceRepos: ["*"]
  destinations:
  - server: "*"
    namespace: "*"
  clusterResourceWhitelist:
  - group: "*"
    kind: "*"
EOF
}

# argocd_settings_head <kind> <name>: the start of a ConfigMap or Secret Argo CD
# reads. Its informers select on app.kubernetes.io/part-of=argocd.
argocd_settings_head() {
  printf '%s\n' "apiVersion: v1" "kind: $1" "metadata:" "  name: $2" "  namespace: $argocd_namespace" \
    "  labels:" "    app.kubernetes.io/name: $2" "    app.kubernetes.io/part-of: argocd"
}

start_argocd() {
  local built argocd_bin crd_dir images_bin
  built="$("$here/build-argocd.sh")"
  argocd_bin="$(sed -n 1p <<<"$built")"
  crd_dir="$(sed -n 2p <<<"$built")"
  images_bin="$(sed -n 3p <<<"$built")"
  [[ -x "$argocd_bin/argocd-application-controller" && -x "$argocd_bin/argocd-repo-server" ]] ||
    { say "build-argocd.sh gave no usable bin dir ('$argocd_bin')"; exit 1; }
  apply_crds "$crd_dir"

  local dir="$cluster_dir/argocd"
  mkdir -p "$dir/git" "$dir/config" "$dir/tls" "$dir/ssh" "$dir/plugins" "$dir/repo-server-tmp"
  # One key for the life of the state directory: a new one at every start would
  # change argocd-secret under a running controller.
  [[ -s "$dir/server.secretkey" ]] || openssl rand -hex 32 >"$dir/server.secretkey"
  tool_identity argocd "$argocd_namespace"
  argocd_settings_manifest "$(cat "$dir/server.secretkey")" |
    "${kubectl[@]}" apply --server-side --force-conflicts -f - >/dev/null
  echo "git://127.0.0.1:$argocd_git_port" >"$cluster_dir/argocd-git-url"

  # No flag names a file of the state directory: argv[0] carries it, for down.sh
  # (see launch), and ARGOCD_BINARY_NAME tells Argo CD's main which component
  # to be, as argv[0] would.
  bin="$images_bin" argv0="redis-stand-in@$cluster_dir/" \
    ensure redis-stand-in -addr "127.0.0.1:$argocd_redis_port"
  # git-daemon, not `git daemon`: the process's binary must be the component's
  # name (lib.sh's component_pid).
  bin="$(git --exec-path)" \
    ensure git-daemon --reuseaddr --listen=127.0.0.1 --port="$argocd_git_port" \
    --base-path="$dir/git" --export-all --enable=receive-pack --informative-errors \
    --log-destination=stderr "$dir/git"
  wait_until 30 redis-stand-in "the Redis stand-in" argocd_redis_ready
  wait_until 30 git-daemon "git daemon" argocd_git_ready

  # On its PATH, what Argo CD's image puts there: git-verify-wrapper.sh, which
  # it runs for every commit it reads, and `argocd`, git's askpass helper for
  # repositories with credentials.
  ARGOCD_BINARY_NAME=argocd-repo-server ARGOCD_GPG_ENABLED=false \
    ARGOCD_APP_CONF_PATH="$dir/config" ARGOCD_TLS_DATA_PATH="$dir/tls" ARGOCD_SSH_DATA_PATH="$dir/ssh" \
    ARGOCD_PLUGINSOCKFILEPATH="$dir/plugins" ARGOCD_ASK_PASS_SOCK="$dir/ask-pass.sock" \
    TMPDIR="$dir/repo-server-tmp" PATH="$argocd_bin:$PATH" \
    bin="$argocd_bin" argv0="argocd-repo-server@$cluster_dir/" \
    ensure argocd-repo-server \
    --address 127.0.0.1 --port "$argocd_repo_server_port" \
    --metrics-address 127.0.0.1 --metrics-port "$argocd_repo_server_metrics_port" \
    --redis "127.0.0.1:$argocd_redis_port" \
    --logformat text
  wait_until 60 argocd-repo-server "argocd-repo-server /healthz" argocd_repo_server_ready

  KUBECONFIG="$cluster_dir/argocd.kubeconfig" ARGOCD_FAKE_IN_CLUSTER=true \
    ARGOCD_BINARY_NAME=argocd-application-controller \
    ARGOCD_APP_CONF_PATH="$dir/config" ARGOCD_TLS_DATA_PATH="$dir/tls" ARGOCD_SSH_DATA_PATH="$dir/ssh" \
    bin="$argocd_bin" \
    ensure argocd-application-controller \
    --kubeconfig "$cluster_dir/argocd.kubeconfig" \
    --namespace "$argocd_namespace" \
    --redis "127.0.0.1:$argocd_redis_port" \
    --repo-server "127.0.0.1:$argocd_repo_server_port" \
    --metrics-port "$argocd_controller_metrics_port" \
    --app-resync 20 --app-resync-jitter 0 \
    --logformat text
  wait_until 60 argocd-application-controller "argocd-application-controller /healthz" argocd_controller_ready
  say "Argo CD $ARGOCD_VERSION application-controller and repo-server ready"
}

# A cluster started again without Argo CD keeps no Argo CD process running.
stop_argocd() {
  stop_component argocd-application-controller
  stop_component argocd-repo-server
  stop_component git-daemon
  stop_component redis-stand-in
}
