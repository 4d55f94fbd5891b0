#!/usr/bin/env bash
# The entry point of meltwater's image (deploy/docker/Dockerfile), under tini. The first
# argument picks what the container is:
#
#   serve ARGS...     `meltwater serve ARGS` (the image's default command; arguments that
#                     start with `-`, as in `docker run IMAGE --config F`, mean the same)
#   driver ARGS...    a Spark-on-Kubernetes driver: Spark's cluster mode starts the driver
#                     pod with these arguments, and deploy/kubernetes/meltwater.yaml's
#                     Deployment does the same in client mode
#   executor          a Spark-on-Kubernetes executor: the driver creates executor pods with
#                     this argument and describes the executor in SPARK_* variables
#   anything else     run as given (`meltwater version`, `spark-submit ...`, `bash`)
#
# `driver` and `executor` follow the contract of Apache Spark's own Kubernetes images: the
# variables read below are the ones Spark sets on the pods it creates
# (tests/service_tests/test_deploy.py checks them, and the executor's flags, against the
# Spark jars that pyspark installs).
set -euo pipefail

# Dockerfile sets JAVA_HOME to a link made at build time; a JVM on PATH answers otherwise.
if [[ -z "${JAVA_HOME:-}" ]]; then
  java_bin="$(readlink -f "$(command -v java)")"
  JAVA_HOME="$(dirname "$(dirname "$java_bin")")"
  export JAVA_HOME
fi
export SPARK_HOME="${SPARK_HOME:-/opt/spark}"

# Kubernetes may run the image under a user id with no /etc/passwd entry (OpenShift's
# arbitrary ids, a pod's runAsUser); Hadoop's login in the JVM then fails on the missing
# user name. nss_wrapper answers getpwuid() with an entry written here.
ensure_user_entry() {
  local uid gid lib
  uid="$(id -u)"
  gid="$(id -g)"
  if getent passwd "$uid" >/dev/null; then
    return
  fi
  for lib in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
    if [[ -f "$lib" ]]; then
      NSS_WRAPPER_PASSWD="$(mktemp)"
      NSS_WRAPPER_GROUP="$(mktemp)"
      echo "meltwater:x:$uid:$gid:${SPARK_USER_NAME:-meltwater}:${HOME:-/var/lib/meltwater}:/usr/sbin/nologin" \
        >"$NSS_WRAPPER_PASSWD"
      echo "meltwater:x:$gid:" >"$NSS_WRAPPER_GROUP"
      export NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LD_PRELOAD="$lib"
      return
    fi
  done
}

# What the executor's JVM loads: Spark's configuration (mounted by the driver), the jars
# pyspark ships, and what the pod names in SPARK_CLASSPATH / SPARK_EXTRA_CLASSPATH /
# SPARK_DIST_CLASSPATH; the working directory last, where Spark puts the jars a job adds.
executor_classpath() {
  local path="${SPARK_CONF_DIR:-$SPARK_HOME/conf}"
  if [[ -n "${HADOOP_CONF_DIR:-}" ]]; then
    path="$HADOOP_CONF_DIR:$path"
  fi
  path="$path:$SPARK_HOME/jars/*"
  local extra
  for extra in "${SPARK_CLASSPATH:-}" "${SPARK_EXTRA_CLASSPATH:-}" "${SPARK_DIST_CLASSPATH:-}"; do
    if [[ -n "$extra" ]]; then
      path="$path:$extra"
    fi
  done
  echo "$path:$PWD"
}

mode="${1:-serve}"
if [[ "$mode" == -* ]]; then
  mode=serve
elif (($#)); then
  shift
fi

ensure_user_entry
case "$mode" in
  serve)
    exec meltwater serve "$@"
    ;;
  driver)
    # Spark sets SPARK_DRIVER_BIND_ADDRESS to the pod's IP; executors reach the driver there.
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?the driver pod sets it}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    # The driver passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... in order.
    java_opts=()
    while read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n || true)
    memory="${SPARK_EXECUTOR_MEMORY:?the executor pod sets it}"
    exec "$JAVA_HOME/bin/java" \
      "${java_opts[@]}" \
      "-Xms$memory" "-Xmx$memory" \
      -cp "$(executor_classpath)" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL:?the executor pod sets it}" \
      --executor-id "${SPARK_EXECUTOR_ID:?the executor pod sets it}" \
      --cores "${SPARK_EXECUTOR_CORES:?the executor pod sets it}" \
      --app-id "${SPARK_APPLICATION_ID:?the executor pod sets it}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:?the executor pod sets it}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:?the executor pod sets it}"
    ;;
  *)
    exec "$mode" "$@"
    ;;
esac
