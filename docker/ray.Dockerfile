# The Ray layer of a node image: one Ray release installed offline from the
# host's wheelhouse. Rebuilt only when the base or the wheels change.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG RAY_REQUIREMENT
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/ray \
 && /opt/ray/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels "${RAY_REQUIREMENT}" \
 && rm -rf /tmp/wheels
ENV PATH=/opt/ray/bin:$PATH \
    PYTHONUNBUFFERED=1
