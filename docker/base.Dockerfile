# The base image where a registry answers. Where none does, harness/images.py
# bootstraps the same Debian release and packages with debootstrap instead.
FROM debian:bookworm-slim
ARG PACKAGES
RUN apt-get update && apt-get install -y --no-install-recommends ${PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
