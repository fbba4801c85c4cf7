# The imagecache image: one static binary on a distroless base, running as the non-root user (65532) that
# deploy/ and the Helm chart expect, with a read-only root filesystem.
#   docker build -t registry.example.com/imagecache:v0.1.0 --build-arg VERSION=v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /imagecache ./cmd/imagecache

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /imagecache /usr/local/bin/imagecache
USER 65532:65532
EXPOSE 5000
ENTRYPOINT ["/usr/local/bin/imagecache"]
CMD ["serve", "--listen", "0.0.0.0:5000", "--storage", "/var/lib/imagecache"]
