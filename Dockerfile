# thinkproxy: OpenAI-compatible proxy for thinking models.
#   docker build -t thinkproxy .
#   docker run -p 8080:8080 -e THINKPROXY_UPSTREAM_BASE_URL=https://api.deepseek.com/v1 thinkproxy
#
# Behind a package mirror, or with no index at all:
#   docker build --build-arg PIP_INDEX_URL=https://pypi.mirror.example/simple -t thinkproxy .
#   docker build --build-arg WHEELHOUSE=deploy/wheels --build-arg PIP_NO_INDEX=1 -t thinkproxy .
# WHEELHOUSE is a directory of the build context whose wheels pip takes first (default
# deploy/wheels, empty but for its README): for PIP_NO_INDEX=1 fill it with every wheel the build
# needs, for the image's Python and platform (deploy/wheels/README.md has the command). PIP_* build arguments are environment variables of the build
# steps only, not of the image; they are kept in the image's history, so put no password in them.
ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS build
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ARG PIP_NO_INDEX
ARG WHEELHOUSE=deploy/wheels
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for this stage only: the wheel compiles the core with mypyc (hatch_build.py), which
# runs the same requests with ~28% fewer instructions. THINKPROXY_COMPILE=require fails the build
# rather than ship the pure-Python fallback unnoticed; the runtime image needs no compiler.
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md providers.yaml hatch_build.py ./
COPY proxy ./proxy
COPY ${WHEELHOUSE} /wheelhouse
# /wheels ends up holding the proxy's wheel and every dependency's: the runtime stage needs no index.
RUN THINKPROXY_COMPILE=require pip wheel --find-links /wheelhouse --wheel-dir /wheels .

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels thinkproxy && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin thinkproxy
USER 10001
# Listen on all interfaces inside the container; choose the upstream at `docker run` time.
# The default upstream is only there so the image starts; override it.
ENV THINKPROXY_HOST=0.0.0.0 \
    THINKPROXY_PORT=8080 \
    THINKPROXY_UPSTREAM_BASE_URL=https://api.openai.com/v1
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('THINKPROXY_PORT', '8080')}/healthz\", timeout=2)"]
# SIGTERM lets in-flight streams finish for THINKPROXY_SHUTDOWN_TIMEOUT seconds.
STOPSIGNAL SIGTERM
CMD ["thinkproxy", "serve"]
