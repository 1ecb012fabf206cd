# The patch layer: the files of the pinned wheel the series changes (Serve's
# tree and its Grafana panels), with the series applied on the host (by the same
# code `make apply-patches` runs), copied over the installed ones. Serve's tree
# is replaced whole, so a file a patch deletes is gone. Editing a patch rebuilds
# only this layer.
ARG RAY_IMAGE
FROM ${RAY_IMAGE}
ARG SITE_DIR=/opt/ray/lib/python3.11/site-packages
RUN rm -rf ${SITE_DIR}/ray/serve
COPY ray ${SITE_DIR}/ray
