#!/usr/bin/env bash
# Fetch a released Apache Kafka from Maven Central into a cache and compile the client harness.
#
#   interop/fetch_kafka.sh            # prints the cache directory on its last line
#
# Environment:
#   KAFKA_VERSION          Kafka release (kafka_2.13) to fetch; default in interop/pom.xml's
#                          kafka.version property (4.1.2)
#   LOGKEEPER_KAFKA_CACHE  cache directory; default <repo>/.cache/kafka-<version> (git-ignored)
#
# The cache holds libs/*.jar (Kafka with all its runtime dependencies and a log4j2 backend),
# classpath (the jars joined with ':'), classes/ (interop/KafkaClientHarness.java compiled), and
# a .complete stamp (the version and a digest of pom.xml). A rerun with the stamp matching and the
# harness unchanged does nothing and needs no network; a fresh cache with ~/.m2 already filled
# needs no network either.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
pom="$here/pom.xml"
default_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")"
version="${KAFKA_VERSION:-$default_version}"
cache="${LOGKEEPER_KAFKA_CACHE:-$repo/.cache/kafka-$version}"
harness="$here/KafkaClientHarness.java"

log() { echo "fetch_kafka: $*" >&2; }

stamp="$version $(sha256sum "$pom" | cut -c1-16)"  # a changed pom refetches
if [[ "$(cat "$cache/.complete" 2>/dev/null)" != "$stamp" ]]; then
    command -v mvn >/dev/null || { log "mvn not found (Maven 3 is needed to fetch Kafka)"; exit 1; }
    log "resolving org.apache.kafka:kafka_2.13:$version and its dependencies into $cache/libs"
    rm -rf "$cache/libs"
    mkdir -p "$cache"
    if ! mvn -B -q -f "$pom" -Dkafka.version="$version" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$cache/libs" >"$cache/mvn.log" 2>&1; then
        log "Maven failed; its output:"
        cat "$cache/mvn.log" >&2
        exit 1
    fi
    jars=("$cache"/libs/*.jar)
    [[ -f "$cache/libs/kafka_2.13-$version.jar" ]] || { log "kafka_2.13-$version.jar missing after Maven"; exit 1; }
    (IFS=:; echo "${jars[*]}") >"$cache/classpath"
    echo "$version" >"$cache/VERSION"
    echo "$stamp" >"$cache/.complete"
    log "$(ls "$cache/libs" | wc -l) jars"
fi

if [[ ! -f "$cache/classes/KafkaClientHarness.class" || "$harness" -nt "$cache/classes/KafkaClientHarness.class" ]]; then
    log "compiling $(basename "$harness")"
    rm -rf "$cache/classes"
    mkdir -p "$cache/classes"
    javac -nowarn -encoding UTF-8 -d "$cache/classes" -cp "$(cat "$cache/classpath")" "$harness" >&2
fi

echo "$cache"
