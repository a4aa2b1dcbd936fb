/**
 * The Kubernetes manifests under deploy/kubernetes/ as `kubectl kustomize` renders an overlay, and
 * the rules they must keep ({@link problems}): probes, the stop's timing, where each secret comes
 * from, the config as the gateway's own loader reads it, sizing, and what each overlay promises.
 * A rule broken is a line of text naming it, so a test can show each rule catches its breach.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { parseConfig } from '../../src/config/load.js';
import type { GatewayConfig } from '../../src/config/schema.js';
import { OriginGuard } from '../../src/http/frontdoor.js';
import { PROGRAMS } from './installed.js';
import { ROOT } from './processes.js';

/** A rendered Kubernetes object, as parsed from YAML. */
export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> } } & Record<
  string,
  any
>;

/** What an overlay promises: `single` one pod on the memory store, `replicas` several on Redis. */
export type OverlayKind = 'single' | 'replicas';

/** `kubectl`: `$KUBECTL` when set (to try another kustomize), else Debian's kubernetes-client. */
export const KUBECTL = process.env.KUBECTL || PROGRAMS['kubernetes-client'];

/** kustomize v5 warns about the fields kustomize v2.0.3 needs; any other line on stderr is a failure. */
const KNOWN_WARNINGS = [/^# Warning: 'bases' is deprecated\./, /^# Warning: 'patchesStrategicMerge' is deprecated\./];

/** Where the image reads its config: the Dockerfile CMD's `--config` path. */
export function imageConfigPath(): string {
  const m = /^CMD .*"--config", "([^"]+)"/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
  if (!m) throw new Error('Dockerfile: no CMD with --config');
  return m[1]!;
}

/**
 * Renders `deploy/kubernetes/overlays/<name>` with `kubectl kustomize` and parses every object.
 * @throws Error with kubectl's stderr when it fails or warns about anything but the known deprecations.
 */
export function render(name: string): K8sObject[] {
  const r = spawnSync(KUBECTL, ['kustomize', join(ROOT, 'deploy/kubernetes/overlays', name)], { encoding: 'utf8' });
  const unexpected = r.stderr
    .split('\n')
    .filter((l) => l.trim() && !KNOWN_WARNINGS.some((w) => w.test(l)))
    .join('\n');
  if (r.status !== 0 || unexpected) throw new Error(`kubectl kustomize ${name} (exit ${r.status}): ${r.stderr}`);
  return parseAllDocuments(r.stdout).map((d) => {
    if (d.errors.length) throw new Error(`kubectl kustomize ${name}: ${d.errors[0]!.message}`);
    return d.toJS() as K8sObject;
  });
}

/**
 * Validates `obj` with the kubernetes-models class of its apiVersion and kind (its OpenAPI schema).
 * @throws Error for a kind kubernetes-models does not know, or the schema's complaints.
 */
export async function validateModel(obj: K8sObject): Promise<void> {
  const spec = `kubernetes-models/${obj.apiVersion}/${obj.kind}`;
  let Model: new (data: unknown) => { validate(): void };
  try {
    Model = ((await import(spec)) as Record<string, typeof Model>)[obj.kind]!;
  } catch {
    throw new Error(`${obj.kind} ${obj.metadata.name}: kubernetes-models has no ${obj.apiVersion} ${obj.kind}`);
  }
  if (!Model) throw new Error(`${obj.kind} ${obj.metadata.name}: kubernetes-models has no ${obj.apiVersion} ${obj.kind}`);
  new Model(obj).validate();
}

/** The values a container's environment gets, by name, and whether each comes from a Secret. */
interface EnvSource {
  fromSecret: boolean;
  /** The value when known: a literal, or a Secret's or ConfigMap's key (decoded). */
  value?: string;
  fieldPath?: string;
}

function containerEnv(container: any, objects: K8sObject[]): Map<string, EnvSource> {
  const out = new Map<string, EnvSource>();
  const find = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);
  const secretValue = (name: string, key: string) => {
    const b64 = find('Secret', name)?.data?.[key] as string | undefined;
    return b64 === undefined ? undefined : Buffer.from(b64, 'base64').toString('utf8');
  };
  for (const from of container.envFrom ?? []) {
    if (from.secretRef) {
      for (const key of Object.keys(find('Secret', from.secretRef.name)?.data ?? {}))
        out.set(key, { fromSecret: true, value: secretValue(from.secretRef.name, key) });
    }
    if (from.configMapRef) {
      for (const [key, value] of Object.entries(find('ConfigMap', from.configMapRef.name)?.data ?? {}))
        out.set(key, { fromSecret: false, value: value as string });
    }
  }
  for (const e of container.env ?? []) {
    const ref = e.valueFrom?.secretKeyRef;
    if (ref && find('Secret', ref.name)?.data?.[ref.key] !== undefined)
      out.set(e.name, { fromSecret: true, value: secretValue(ref.name, ref.key) });
    else if (e.valueFrom?.fieldRef) out.set(e.name, { fromSecret: false, fieldPath: e.valueFrom.fieldRef.fieldPath });
    else if (!ref) out.set(e.name, { fromSecret: false, value: e.value });
  }
  return out;
}

/** Every string of `value` with its JSON path (`a.b[0].c`). */
function strings(value: unknown, path = ''): [string, string][] {
  if (typeof value === 'string') return [[path, value]];
  if (Array.isArray(value)) return value.flatMap((v, i) => strings(v, `${path}[${i}]`));
  if (value && typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => strings(v, path ? `${path}.${k}` : k));
  return [];
}

/** Config paths that hold a secret: names ending in key, secret, token or password, a store URL (it may carry one), HTTP headers. */
const SECRET_PATH = /(^|\.)[^.[\]]*(key|secret|token|password)$|^store\.url$|\.headers\./i;
const VAR = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** Memory of the gateway process itself, and of one stdio child (server-everything), in MiB (docs/operations.md, "Sizing" and "Kubernetes"). */
export const GATEWAY_MIB = 190;
export const CHILD_MIB = 68;
/** Headroom the memory limit keeps over those figures (a fraction): RSS varies with load. */
export const MEMORY_HEADROOM = 0.1;
/** The image user's home (uid 1000, "node"): HOME unless the container sets it. */
export const IMAGE_HOME = '/home/node';

/** Kubernetes quantity (`1Gi`, `384Mi`, `512M`) in MiB. */
export function mebibytes(q: string | number): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|M|G)?$/.exec(String(q));
  if (!m) throw new Error(`not a memory quantity: ${q}`);
  const unit = { Ki: 1 / 1024, Mi: 1, Gi: 1024, k: 1000 / 1048576, M: 1e6 / 1048576, G: 1e9 / 1048576 }[m[2] ?? ''] ?? 1 / 1048576;
  return Number(m[1]) * unit;
}

/** The gateway Deployment, its container, the config it mounts (raw JSON) and the container's environment. */
export function gatewayParts(objects: K8sObject[]) {
  const deployment = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'mrtr-gateway');
  if (!deployment) throw new Error('no Deployment mrtr-gateway');
  const pod = deployment.spec.template.spec;
  const container = pod.containers.find((c: any) => c.name === 'gateway');
  if (!container) throw new Error('Deployment mrtr-gateway: no container "gateway"');
  const file = imageConfigPath();
  const mount = (container.volumeMounts ?? []).find((m: any) => file.startsWith(`${m.mountPath}/`));
  const volume = pod.volumes?.find((v: any) => v.name === mount?.name);
  const configMap = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volume?.configMap?.name);
  const text = configMap?.data?.[file.slice(mount?.mountPath.length + 1)] as string | undefined;
  if (text === undefined) throw new Error(`Deployment mrtr-gateway: no ConfigMap mounted with ${file}`);
  return { deployment, pod, container, rawConfig: JSON.parse(text) as Record<string, any>, env: containerEnv(container, objects) };
}

/** The environment the config is loaded with in the tests: the pod's, with a stand-in for each field reference and placeholder. */
export function testEnv(env: Map<string, EnvSource>, placeholder: (v: string) => boolean): NodeJS.ProcessEnv {
  const fields: Record<string, string> = { 'status.podIP': '10.1.2.3', 'metadata.namespace': 'mrtr' };
  return Object.fromEntries(
    [...env].map(([k, s]) => [
      k,
      s.fieldPath ? (fields[s.fieldPath] ?? 'x') : s.value !== undefined && !placeholder(s.value) ? s.value : `dummy-${k}-`.padEnd(48, 'x'),
    ]),
  );
}

/** The placeholder the Secret ships with; the gateway refuses it at start. */
export const isPlaceholder = (v: string) => v === 'REPLACE-ME';

function probePath(probe: any, ports: any[]): string | undefined {
  const get = probe?.httpGet;
  if (!get) return undefined;
  const port = ports.find((p) => p.name === get.port || p.containerPort === get.port);
  return port?.containerPort === 8787 ? get.path : `${get.path} on port ${get.port}`;
}

function preStopMs(container: any): number {
  const cmd = container.lifecycle?.preStop?.exec?.command as string[] | undefined;
  if (cmd?.[0] === 'sleep') return Number(cmd[1]) * 1000;
  return (container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
}

/** Rules of the pod's security context and of each container's. */
function securityProblems(objects: K8sObject[]): string[] {
  const out: string[] = [];
  for (const d of objects.filter((o) => o.kind === 'Deployment')) {
    const pod = d.spec.template.spec;
    if (pod.securityContext?.runAsNonRoot !== true) out.push(`${d.metadata.name}: runAsNonRoot is not true`);
    for (const c of pod.containers) {
      const sc = c.securityContext ?? {};
      if (sc.allowPrivilegeEscalation !== false) out.push(`${d.metadata.name}/${c.name}: allowPrivilegeEscalation is not false`);
      if (!sc.capabilities?.drop?.includes('ALL')) out.push(`${d.metadata.name}/${c.name}: capabilities do not drop ALL`);
      if (sc.readOnlyRootFilesystem !== true) out.push(`${d.metadata.name}/${c.name}: root filesystem is writable`);
      if (!c.resources?.requests?.memory || !c.resources?.limits?.memory)
        out.push(`${d.metadata.name}/${c.name}: no memory request and limit`);
    }
  }
  return out;
}

/** Rules of the config: secrets only as ${VAR} from a Secret, every ${VAR} set, and the gateway's loader accepts it. */
function configProblems(parts: ReturnType<typeof gatewayParts>): { out: string[]; config?: GatewayConfig } {
  const out: string[] = [];
  for (const [path, value] of strings(parts.rawConfig)) {
    const vars = [...value.matchAll(VAR)].map((m) => m[1]!);
    if (SECRET_PATH.test(path)) {
      if (!(path.includes('.headers.') ? vars.length : /^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/.test(value)))
        out.push(`config ${path}: a secret written into the ConfigMap, not a \${VAR}`);
      for (const v of vars) if (!parts.env.get(v)?.fromSecret) out.push(`config ${path}: \${${v}} does not come from a Secret`);
    }
    for (const v of vars) if (!parts.env.has(v)) out.push(`config ${path}: \${${v}} is not in the container's environment`);
  }
  if (out.length) return { out };
  try {
    return { out, config: parseConfig(parts.rawConfig, testEnv(parts.env, isPlaceholder)) };
  } catch (e) {
    return { out: [`config does not load: ${(e as Error).message}`] };
  }
}

/**
 * Every rule the rendered `objects` of an overlay of kind `kind` break, one line each (empty: none).
 * Objects are assumed valid Kubernetes (see {@link validateModel}).
 */
export function problems(objects: K8sObject[], kind: OverlayKind): string[] {
  const parts = gatewayParts(objects);
  const { deployment, pod, container } = parts;
  const out = securityProblems(objects);
  if (pod.securityContext?.runAsUser !== 1000) out.push('gateway: runAsUser is not 1000 (the image\'s "node" user)');
  const ports = container.ports ?? [];
  if (probePath(container.livenessProbe, ports) !== '/healthz') out.push('gateway: liveness probe is not GET /healthz on 8787');
  const store = parts.rawConfig.store?.kind ?? 'memory';
  // With Redis, readiness on /readyz would drain every pod at once while Redis is unreachable (docs/replicas.md).
  const readiness = store === 'redis' ? '/healthz' : '/readyz';
  if (probePath(container.readinessProbe, ports) !== readiness) out.push(`gateway: readiness probe is not GET ${readiness} on 8787`);
  if (store === 'redis' && probePath(container.startupProbe, ports) !== '/readyz')
    out.push('gateway: startup probe is not GET /readyz on 8787');
  const { out: configOut, config } = configProblems(parts);
  out.push(...configOut);
  if (!config) return out;
  const stopMs = config.shutdownGraceMs + preStopMs(container);
  if ((pod.terminationGracePeriodSeconds ?? 30) * 1000 < stopMs + 1000)
    out.push(
      `gateway: terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds ?? 30} s leaves under 1 s over preStop + shutdownGraceMs (${stopMs} ms)`,
    );
  const children =
    Object.values(config.upstreams).reduce((n, u) => n + (u.transport === 'stdio' ? u.maxSessions : 0), 0) +
    (config.legacySessions.enabled ? config.legacySessions.maxSessions : 0);
  const needMib = GATEWAY_MIB + CHILD_MIB * children;
  const withHeadroom = Math.round(needMib * (1 + MEMORY_HEADROOM));
  if (mebibytes(container.resources?.limits?.memory ?? 0) < withHeadroom)
    out.push(
      `gateway: memory limit ${container.resources?.limits?.memory} is under ${withHeadroom} MiB (${needMib} MiB for ${children} stdio children + 10%)`,
    );
  out.push(...homeProblems(pod, container, parts.env));
  // The names a client in the cluster uses for the Service (namespace "mrtr" in the test environment).
  const guard = new OriginGuard(config.listen.host, config.http.allowedHosts, config.http.allowedOrigins);
  for (const host of ['mrtr-gateway', 'mrtr-gateway.mrtr', 'mrtr-gateway.mrtr.svc', 'mrtr-gateway.mrtr.svc.cluster.local'])
    if (guard.check(`${host}:8787`, undefined)) out.push(`config: the Host check refuses the Service name ${host}:8787`);
  const replicas = deployment.spec.replicas ?? 1;
  if (kind === 'single') {
    if (replicas !== 1) out.push(`single: ${replicas} replicas, not 1`);
    if (config.store.kind !== 'memory') out.push(`single: store is ${config.store.kind}, not memory`);
  } else {
    if (replicas < 2) out.push(`replicas: ${replicas} replica(s), not several`);
    if (config.store.kind !== 'redis') out.push(`replicas: store is ${config.store.kind}, not redis`);
    if (parts.rawConfig.replicas?.advertiseUrl !== 'http://${POD_IP}:8787' || parts.env.get('POD_IP')?.fieldPath !== 'status.podIP')
      out.push('replicas: advertiseUrl is not http://${POD_IP}:8787 with POD_IP from status.podIP');
    const redisHost = config.store.kind === 'redis' ? new URL(config.store.url).hostname : '';
    if (!redisHost.includes('.') && !objects.some((o) => o.kind === 'Service' && o.metadata.name === redisHost))
      out.push(`replicas: Redis host ${redisHost} is neither a Service of the overlay nor an external name`);
  }
  out.push(...selectorProblems(objects, deployment));
  return out;
}

/**
 * With a read-only root filesystem, HOME must be a writable volume: npx-launched upstreams keep
 * npm's cache in ~/.npm and fail to start without it.
 */
function homeProblems(pod: any, container: any, env: Map<string, EnvSource>): string[] {
  if (container.securityContext?.readOnlyRootFilesystem !== true) return [];
  const home = env.get('HOME')?.value ?? IMAGE_HOME;
  const mount = (container.volumeMounts ?? []).find((m: any) => home === m.mountPath || home.startsWith(`${m.mountPath}/`));
  const volume = pod.volumes?.find((v: any) => v.name === mount?.name);
  if (!mount || mount.readOnly || !volume?.emptyDir)
    return [`gateway: HOME ${home} is not a writable emptyDir under the read-only root filesystem`];
  return [];
}

/** Services and PodDisruptionBudgets that select the gateway must select its pods. */
function selectorProblems(objects: K8sObject[], deployment: K8sObject): string[] {
  const labels = deployment.spec.template.metadata.labels as Record<string, string>;
  const selects = (sel: Record<string, string> = {}) =>
    Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels[k] === v);
  const out: string[] = [];
  const service = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'mrtr-gateway');
  if (!service || !selects(service.spec.selector)) out.push('Service mrtr-gateway does not select the gateway pods');
  else if (!service.spec.ports?.some((p: any) => p.targetPort === 'http' || p.targetPort === 8787))
    out.push('Service mrtr-gateway does not target port 8787');
  const pdb = objects.find((o) => o.kind === 'PodDisruptionBudget');
  if (!pdb || !selects(pdb.spec.selector?.matchLabels)) out.push('no PodDisruptionBudget selecting the gateway pods');
  return out;
}
