# attention-server image. Multi-stage: build with the -dev packages, run on
# bookworm-slim with only the runtime libraries and the two binaries.
#
#   docker build -t attention-server .
#   docker run -p 50051:50051 attention-server                      # demo models
#   docker run -p 50051:50051 -v $PWD/models:/models:ro -e ATTN_MODEL_DIR=/models attention-server
#
# Configure with flags after the image name or ATTN_* variables (see
# attention-server --help). Runs as the non-root user 10001.

FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ make cmake libdnnl-dev ocl-icd-opencl-dev libgrpc++-dev libprotobuf-dev \
      protobuf-compiler protobuf-compiler-grpc libspdlog-dev libcpp-httplib-dev pkg-config libabsl-dev \
      libyaml-cpp-dev libssl-dev \
      libtcmalloc-minimal4 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY core core
COPY proto proto
COPY wire wire
COPY server server
COPY client client
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" --target attention-server attention-client \
 && strip /build/bin/attention-server /build/bin/attention-client

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libdnnl2 libgrpc++1.51 libprotobuf32 libspdlog1.10 libgomp1 libcpp-httplib0.11 libabsl20220623 \
      libyaml-cpp0.7 \
      libtcmalloc-minimal4 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/* \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin attention \
 && mkdir /models
COPY --from=build /build/bin/attention-server /build/bin/attention-client /usr/local/bin/
USER 10001:10001
# gRPC (attention.v1 and the Open Inference Protocol) on 50051; OIP's
# HTTP/JSON on 8000; Prometheus /metrics on 9090.
ENV ATTN_HOST=0.0.0.0 ATTN_PORT=50051 ATTN_HTTP_PORT=8000 ATTN_METRICS_PORT=9090
EXPOSE 50051 8000 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD attention-client health --target 127.0.0.1:${ATTN_PORT} --timeout 2s || exit 1
ENTRYPOINT ["attention-server"]
