# The patch layer: the pinned wheel's ray/serve tree with the series applied on
# the host (by harness/patchset.py, the same code `make apply-patches` runs),
# copied over the installed one. Editing a patch rebuilds only this layer.
ARG RAY_IMAGE
FROM ${RAY_IMAGE}
ARG SERVE_DIR=/opt/ray/lib/python3.11/site-packages/ray/serve
RUN rm -rf ${SERVE_DIR}
COPY serve ${SERVE_DIR}
