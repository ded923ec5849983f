# One image for the three roles of logkeeper on Kubernetes:
#   the operator       command: python -m logkeeper_operator --namespace NS   (the chart's Deployment)
#   the sidecar        args:    sidecar --config /etc/logkeeper/config.yaml    (a LogVolume's pod)
#   the Spark job      command: logkeeper spark-compact --log-dir D --partition T-P --staging S --master M
#                               (a CompactionJob's Job; local[*] in the pod, or the driver of Spark on k8s)
# Build: docker build -t logkeeper:0.1.0 .   (make kind-e2e does, then loads it into kind)
# Runs as uid/gid 10001 with a read-only root filesystem: every writable path (/tmp, the numba
# cache — used only where the compiled kernels cannot run —, Spark's scratch space) is under
# /tmp, which the pods mount as an emptyDir.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/logkeeper
COPY pyproject.toml README.md constraints.txt ./
COPY sidecar ./sidecar
COPY operator ./operator
# gcc links the kernels compiled ahead of time (logkeeper.aot.build) into an extension module
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
RUN /opt/logkeeper/bin/pip install --no-cache-dir -c constraints.txt '.[operator,spark]' \
 && /opt/logkeeper/bin/python -m logkeeper.aot.build

FROM python:3.11-slim-bookworm
# Spark's JVM (PySpark 4 runs on JDK 17); tini reaps Spark's and the cleaner's children.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 logkeeper \
 && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin logkeeper
COPY --from=build /opt/logkeeper /opt/logkeeper
ENV PATH=/opt/logkeeper/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    NUMBA_CACHE_DIR=/tmp/numba \
    PYSPARK_PYTHON=/opt/logkeeper/bin/python \
    SPARK_LOCAL_DIRS=/tmp/spark \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "logkeeper"]
CMD ["--help"]
