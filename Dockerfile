# One image for every Ralph mesh service: the command names the service
# (`docker run IMAGE service critic`); the default is the builder, whose
# `run` tool needs sh, git and coreutils, and bubblewrap to confine what it
# runs. Extend it for a team's toolchains (README, "Deploy").

# Build: a static binary, so the runtime stage needs no Go and no libc match.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd ./cmd
COPY internal ./internal
COPY pkg ./pkg
COPY services ./services
# The module and build caches are emptied in the same step: only the binary
# is wanted, and a layer holding tens of thousands of cache files is slow to
# commit (minutes on some storage drivers) and wastes disk.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/ralph ./cmd/ralph \
 && go clean -cache -modcache

FROM debian:bookworm-slim
# The builder's run tool and the critic's verify run `sh -c` in the
# workspace, in bubblewrap; git for the workspace's history; CA
# certificates for HTTPS model endpoints.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates coreutils git \
 && rm -rf /var/lib/apt/lists/*
# A numeric uid, so Kubernetes' runAsNonRoot can check it; /workspaces is
# where the builder and the critic share the workspace volume.
RUN groupadd --gid 10001 ralph \
 && useradd --uid 10001 --gid 10001 --create-home --shell /bin/sh ralph \
 && mkdir /workspaces && chown ralph:ralph /workspaces
COPY --from=build /out/ralph /usr/local/bin/ralph
USER 10001:10001
WORKDIR /home/ralph
# /metrics, /healthz and /readyz on every interface of the container; a
# service alone in its container takes this port whatever its name.
ENV RALPH_METRICS_ADDR=:9464
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["ralph", "health"]
ENTRYPOINT ["ralph"]
CMD ["service", "builder"]
