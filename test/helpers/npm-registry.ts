/**
 * A stand-in for the npm registry on 127.0.0.1 (port 0) serving one package that the test packs
 * with `npm pack` (offline) from a fixture directory: its packument at `GET /NAME` and its tarball
 * at `GET /NAME/-/FILE.tgz`, the tarball after `tarballDelayMs` (an install that takes a while).
 * A child started with `npm_config_registry` set to {@link NpmRegistry.url} and a private
 * `npm_config_cache` installs it as from the real registry, with no network beyond 127.0.0.1.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface NpmRegistry {
  /** The registry URL (`http://127.0.0.1:PORT/`). */
  url: string;
  /** The package's name. */
  name: string;
  /** How long the tarball's answer waits, in ms (may be changed between installs). */
  tarballDelayMs: number;
  /** Tarball requests received so far. */
  tarballRequests(): number;
  /** Resolves at the next tarball request (when it arrives, before its delay). */
  nextTarballRequest(): Promise<void>;
  /** Holds every tarball answer back (after its delay) until the function returned is called. */
  holdTarball(): () => void;
  close(): void;
}

/** Packs `packageDir` (a directory with a package.json) and serves it; see the module comment. */
export async function startNpmRegistry(packageDir: string, tarballDelayMs = 0): Promise<NpmRegistry> {
  const out = mkdtempSync(join(tmpdir(), 'mrtr-npm-pack-'));
  execFileSync('npm', ['pack', packageDir, '--pack-destination', out, '--silent'], {
    stdio: 'ignore',
    env: { ...process.env, npm_config_cache: join(out, 'cache'), npm_config_update_notifier: 'false' },
  });
  const file = readdirSync(out).find((f) => f.endsWith('.tgz'))!;
  const tarball = readFileSync(join(out, file));
  const manifest = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { name: string; version: string; bin?: unknown };
  const sockets = new Set<Socket>();
  let requests = 0;
  let waiting: (() => void)[] = [];
  let held: Promise<void> = Promise.resolve();
  const reg = {} as NpmRegistry & { srv: Server };
  const srv = createServer((req, res) => {
    const path = decodeURIComponent(req.url ?? '/');
    if (path === `/${manifest.name}`) {
      const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
      const version = {
        name: manifest.name,
        version: manifest.version,
        bin: manifest.bin,
        dist: {
          tarball: `${base}/${manifest.name}/-/${file}`,
          shasum: createHash('sha1').update(tarball).digest('hex'),
          integrity: `sha512-${createHash('sha512').update(tarball).digest('base64')}`,
        },
      };
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(
        JSON.stringify({ name: manifest.name, 'dist-tags': { latest: manifest.version }, versions: { [manifest.version]: version } }),
      );
    }
    if (path === `/${manifest.name}/-/${file}`) {
      requests++;
      for (const w of waiting.splice(0)) w();
      const gate = held;
      const timer = setTimeout(() => {
        void gate.then(() => {
          res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': tarball.length });
          res.end(tarball);
        });
      }, reg.tarballDelayMs);
      res.on('close', () => clearTimeout(timer));
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"Not found"}');
  });
  srv.on('connection', (s) => (sockets.add(s), s.on('close', () => sockets.delete(s))));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return Object.assign(reg, {
    srv,
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/`,
    name: manifest.name,
    tarballDelayMs,
    tarballRequests: () => requests,
    nextTarballRequest: () => new Promise<void>((r) => waiting.push(r)),
    holdTarball: () => {
      let release!: () => void;
      held = new Promise<void>((r) => (release = r));
      return release;
    },
    close: () => {
      waiting = [];
      sockets.forEach((s) => s.destroy());
      srv.close();
    },
  });
}
