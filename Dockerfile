# syntax=docker/dockerfile:1
# Build: compile TypeScript with the dev dependencies. Runtime: production dependencies only,
# the compiled code, the contract and the migrations, run as the unprivileged `node` user.
# Node 22 (LTS), the newest 22.x: one of the versions package.json's engines names
# (test/node-versions.test.ts). Both stages use the same one.

FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY openapi ./openapi
COPY src ./src
COPY plugins ./plugins
COPY db ./db
COPY scripts ./scripts
RUN npm run build

FROM node:22-bookworm-slim AS runtime
# V8's young generation at 2 x 8 MiB instead of 2 x 16 (V8 rounds the size up to a power of two):
# less resident under load (docs/performance.md, "The young generation made smaller"). The bench
# starts the service with this line's NODE_OPTIONS; set your own to change it.
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    NODE_OPTIONS=--max-semi-space-size=8
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY openapi ./openapi
COPY db/migrations ./db/migrations
COPY db/demo-data.json ./db/demo-data.json
USER node
# 9464: /metrics when METRICS_PORT=9464 (for the scraper, not the gateway).
EXPOSE 3000 9464
# Liveness only: readiness (/readyz) is for the orchestrator's routing, not for restarting.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.PORT}/healthz`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Migrations are applied at start, under an advisory lock, before the port opens.
# After each major garbage collection V8 lets the old generation grow to 1.5 times what survived,
# not the up to 4 times it picks itself: under overload, 110 MiB resident at most instead of 170,
# for no throughput the bench can see (docs/performance.md, "The old generation's growth").
# NODE_OPTIONS cannot carry this V8 flag, so it is node's argument; the bench starts the service
# with the flags given here.
CMD ["node", "--heap-growing-percent=50", "dist/src/server.js"]
