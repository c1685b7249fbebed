# trainmem: docker build -t trainmem . && docker run --rm -p 8000:8000 trainmem
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/trainmem

# Dependencies first, from the same hashed lock that `make` uses, so code changes reuse this layer.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

COPY app ./app
COPY templates ./templates
COPY static ./static
COPY docs/validation.json docs/VALIDATION.md docs/timeline-*.svg ./docs/

RUN useradd --system --uid 10001 --no-create-home trainmem
USER 10001

# Settings (app/serve.py): listen on every interface in the container; trust X-Forwarded-* only from the
# proxies named in FORWARDED_ALLOW_IPS (none unless `docker run -e` names them); one worker process per CPU the
# container may use (TRAINMEM_WORKERS=auto), so that one slow request never holds up the rest. Models by Hub id
# are not fetched unless the operator says so (`docker run -e TRAINMEM_HUB=1`); huggingface_hub's cache is then
# under /tmp, the one place the unprivileged user may write (mount a volume there to keep it).
ENV TRAINMEM_HOST=0.0.0.0 \
    PORT=8000 \
    TRAINMEM_WORKERS=auto \
    TRAINMEM_HUB=0 \
    HF_HOME=/tmp/huggingface

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:%s/healthz' % __import__('os').environ.get('PORT', '8000'), timeout=2).status != 200)"

# SIGTERM (docker stop) ends it within a few seconds, slow clients or not.
STOPSIGNAL SIGTERM
CMD ["python", "-m", "app.serve"]
