# mrtr-gateway container: the build stage compiles TypeScript and keeps the production
# dependencies only (without type declarations and source maps, which node never loads); the
# runtime stage holds them, dist/ and the bin launcher (which runs dist/ there), no npm cache and
# no build tools, and runs as the unprivileged "node" user (uid 1000) under tini as PID 1, which
# forwards signals to node and reaps the orphans of stdio children (npx-launched servers leave some).
# Config: mount yours at /etc/mrtr-gateway/gateway.config.json (the default there needs
# MRTR_API_KEY; see docs/operations.md, "Running the container").

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build \
 && npm prune --omit=dev --no-audit --no-fund \
 && find node_modules -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \) -delete

FROM node:20-bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8787
WORKDIR /app
COPY package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY config/gateway.schema.json ./config/gateway.schema.json
COPY config/container.json /etc/mrtr-gateway/gateway.config.json
# The default --config (gateway.config.json in /app) is the mounted one too, for `check` as well.
RUN ln -s /etc/mrtr-gateway/gateway.config.json /app/gateway.config.json
USER node
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=3s --start-period=15s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||8787)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# The gateway exits 0 within shutdownGraceMs (8 s in the bundled config) of SIGTERM, inside docker
# stop's default 10 s; raise both together (docs/operations.md, "Sizing the grace period").
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/main.js", "--config", "/etc/mrtr-gateway/gateway.config.json"]
