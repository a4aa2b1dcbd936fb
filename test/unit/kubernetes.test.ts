/**
 * deploy/kubernetes/: each overlay renders with `kubectl kustomize` (Debian's kubernetes-client,
 * kustomize v2.0.3, or a current kubectl with kustomize v5; `KUBECTL=path` tries another), every
 * object validates against its kubernetes-models schema, and the rules of test/helpers/kubernetes.ts
 * hold: probes, the stop's timing, secrets only from the Secret, the config accepted by the gateway's
 * own loader, sizing, a writable HOME, one pod on memory or several on Redis. Each rule is shown to catch a breach.
 */
import { beforeAll, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { describeWith } from '../helpers/installed.js';
import { gatewayParts, problems, render, testEnv, validateModel, type K8sObject, type OverlayKind } from '../helpers/kubernetes.js';

const OVERLAYS: OverlayKind[] = ['single', 'replicas'];

/** A copy of `objects` whose gateway config has gone through `edit`. */
function withConfig(objects: K8sObject[], edit: (config: Record<string, any>) => void): K8sObject[] {
  const copy = structuredClone(objects);
  const { rawConfig, pod } = gatewayParts(copy);
  edit(rawConfig);
  const map = copy.find((o) => o.kind === 'ConfigMap' && o.metadata.name === pod.volumes.find((v: any) => v.configMap).configMap.name)!;
  map.data['gateway.config.json'] = JSON.stringify(rawConfig);
  return copy;
}

/** A copy of `objects` whose gateway Deployment has gone through `edit` (its pod spec and container). */
function withGateway(objects: K8sObject[], edit: (pod: any, container: any, deployment: K8sObject) => void): K8sObject[] {
  const copy = structuredClone(objects);
  const { pod, container, deployment } = gatewayParts(copy);
  edit(pod, container, deployment);
  return copy;
}

describeWith(['kubernetes-client'], 'Kubernetes manifests', () => {
  const rendered = {} as Record<OverlayKind, K8sObject[]>;
  beforeAll(() => {
    for (const o of OVERLAYS) rendered[o] = render(o);
  });

  for (const overlay of OVERLAYS) {
    it(`${overlay}: kubectl kustomize renders it and every object validates against kubernetes-models`, async () => {
      const objects = rendered[overlay];
      const kinds = objects.map((o) => o.kind).sort();
      expect(kinds).toEqual(expect.arrayContaining(['ConfigMap', 'Deployment', 'PodDisruptionBudget', 'Secret', 'Service']));
      for (const o of objects) await validateModel(o);
    });

    it(`${overlay}: keeps every rule (probes, stop timing, secrets, config, sizing, store and replicas)`, () => {
      expect(problems(rendered[overlay], overlay)).toEqual([]);
    });

    it(`${overlay}: the Secret as shipped stops the gateway at start, naming each placeholder's field`, () => {
      const { rawConfig, env } = gatewayParts(rendered[overlay]);
      const asShipped = testEnv(env, () => false);
      expect(() => parseConfig(rawConfig, asShipped)).toThrow(/auth\.keys\[0\]\.key.*\n?[\s\S]*requestState\.keys\[0\]\.secret/);
      if (overlay === 'replicas') expect(() => parseConfig(rawConfig, asShipped)).toThrow(/replicas\.secret/);
    });
  }

  it('single is one pod on the memory store; replicas is several on Redis, reached at the pod IP', () => {
    const single = gatewayParts(rendered.single);
    const replicas = gatewayParts(rendered.replicas);
    expect(single.deployment.spec.replicas).toBe(1);
    expect(single.rawConfig.store ?? { kind: 'memory' }).toEqual({ kind: 'memory' });
    expect(replicas.deployment.spec.replicas).toBeGreaterThan(1);
    expect(replicas.rawConfig.store).toEqual({ kind: 'redis', url: '${REDIS_URL}' });
    expect(replicas.rawConfig.replicas.advertiseUrl).toBe('http://${POD_IP}:8787');
    expect(replicas.env.get('POD_IP')).toEqual({ fromSecret: false, fieldPath: 'status.podIP' });
    expect(rendered.replicas.filter((o) => o.metadata.name === 'mrtr-gateway-redis').map((o) => o.kind)).toEqual(
      expect.arrayContaining(['Deployment', 'Service']),
    );
  });

  it('a kind kubernetes-models does not know, or an object against its schema, fails validation', async () => {
    await expect(validateModel({ apiVersion: 'example.com/v1', kind: 'Gadget', metadata: { name: 'g' } })).rejects.toThrow(
      /kubernetes-models has no example\.com\/v1 Gadget/,
    );
    const bad = withGateway(rendered.single, (_pod, c) => {
      c.ports[0].containerPort = 'eighty';
    }).find((o) => o.kind === 'Deployment')!;
    await expect(validateModel(bad)).rejects.toThrow(/containerPort must be integer/);
  });

  const breaches: [string, OverlayKind, (o: K8sObject[]) => K8sObject[], RegExp][] = [
    [
      'allowedHosts without the namespaced Service names',
      'single',
      (o) => withConfig(o, (c) => (c.http.allowedHosts = ['localhost', 'mrtr-gateway'])),
      /the Host check refuses the Service name mrtr-gateway\.mrtr\.svc:8787/,
    ],
    [
      'readiness on /healthz',
      'single',
      (o) => withGateway(o, (_p, c) => (c.readinessProbe.httpGet.path = '/healthz')),
      /readiness probe is not GET \/readyz/,
    ],
    [
      'liveness on another port',
      'single',
      (o) => withGateway(o, (_p, c) => (c.livenessProbe.httpGet.port = 9090)),
      /liveness probe is not GET \/healthz/,
    ],
    [
      'readiness on /readyz with Redis',
      'replicas',
      (o) => withGateway(o, (_p, c) => (c.readinessProbe.httpGet.path = '/readyz')),
      /readiness probe is not GET \/healthz/,
    ],
    [
      'no startup probe with Redis',
      'replicas',
      (o) => withGateway(o, (_p, c) => delete c.startupProbe),
      /startup probe is not GET \/readyz/,
    ],
    [
      'a grace period under the stop',
      'single',
      (o) => withGateway(o, (p) => (p.terminationGracePeriodSeconds = 20)),
      /terminationGracePeriodSeconds 20 s/,
    ],
    [
      'shutdownGraceMs over the grace period',
      'single',
      (o) => withConfig(o, (c) => (c.shutdownGraceMs = 29_000)),
      /terminationGracePeriodSeconds 30 s/,
    ],
    [
      'a secret in the ConfigMap',
      'single',
      (o) => withConfig(o, (c) => (c.requestState.keys[0].secret = 's'.repeat(40))),
      /requestState\.keys\[0\]\.secret: a secret written into the ConfigMap/,
    ],
    [
      'a store URL in the ConfigMap',
      'replicas',
      (o) => withConfig(o, (c) => (c.store.url = 'redis://:pw@redis:6379')),
      /store\.url: a secret written/,
    ],
    [
      'an API key from a plain env value',
      'single',
      (o) => withGateway(o, (_p, c) => c.env.push({ name: 'MRTR_API_KEY', value: 'k'.repeat(20) })),
      /auth\.keys\[0\]\.key: \$\{MRTR_API_KEY\} does not come from a Secret/,
    ],
    [
      'a variable nothing sets',
      'single',
      (o) => withConfig(o, (c) => (c.upstreams.everything.cwd = '${NOWHERE}')),
      /\$\{NOWHERE\} is not in the container's environment/,
    ],
    [
      'a config the gateway refuses',
      'single',
      (o) => withConfig(o, (c) => (c.shutdownGraceMs = -1)),
      /config does not load:[\s\S]*shutdownGraceMs/,
    ],
    ['root user', 'single', (o) => withGateway(o, (p) => (p.securityContext.runAsUser = 0)), /runAsUser is not 1000/],
    [
      'a writable root filesystem',
      'replicas',
      (o) => withGateway(o, (_p, c) => (c.securityContext.readOnlyRootFilesystem = false)),
      /root filesystem is writable/,
    ],
    [
      'a memory limit under the sessions allowed',
      'single',
      (o) => withGateway(o, (_p, c) => (c.resources.limits.memory = '512Mi')),
      /memory limit 512Mi is under 1107 MiB \(1006 MiB for 12 stdio children/,
    ],
    [
      'maxSessions left at its default',
      'single',
      (o) => withConfig(o, (c) => delete c.upstreams.everything.maxSessions),
      /memory limit 1152Mi is under 1705 MiB \(1550 MiB for 20 stdio children/,
    ],
    [
      'the limit at 1Gi, without headroom',
      'single',
      (o) => withGateway(o, (_p, c) => (c.resources.limits.memory = '1Gi')),
      /memory limit 1Gi is under 1107 MiB/,
    ],
    [
      'no writable HOME',
      'single',
      (o) =>
        withGateway(o, (p, c) => {
          c.volumeMounts = c.volumeMounts.filter((m: any) => m.mountPath !== '/home/node');
          p.volumes = p.volumes.filter((v: any) => c.volumeMounts.some((m: any) => m.name === v.name));
        }),
      /HOME \/home\/node is not a writable emptyDir/,
    ],
    [
      'HOME mounted read-only',
      'replicas',
      (o) => withGateway(o, (_p, c) => c.volumeMounts.forEach((m: any) => (m.readOnly = true))),
      /HOME \/home\/node is not a writable emptyDir/,
    ],
    ['two pods on the memory store', 'single', (o) => withGateway(o, (_p, _c, d) => (d.spec.replicas = 2)), /single: 2 replicas, not 1/],
    [
      'one pod for replicas',
      'replicas',
      (o) => withGateway(o, (_p, _c, d) => (d.spec.replicas = 1)),
      /replicas: 1 replica\(s\), not several/,
    ],
    ['replicas on memory', 'replicas', (o) => withConfig(o, (c) => delete c.store), /store is memory, not redis/],
    [
      'advertiseUrl not from the pod IP',
      'replicas',
      (o) => withConfig(o, (c) => (c.replicas.advertiseUrl = 'http://mrtr-gateway:8787')),
      /advertiseUrl is not http:\/\/\$\{POD_IP\}:8787/,
    ],
    [
      'no Redis to reach',
      'replicas',
      (o) => o.filter((x) => !(x.kind === 'Service' && x.metadata.name === 'mrtr-gateway-redis')),
      /Redis host mrtr-gateway-redis is neither/,
    ],
    [
      'a Service selecting other pods',
      'single',
      (o) => structuredClone(o).map((x) => (x.kind === 'Service' ? { ...x, spec: { ...x.spec, selector: { app: 'other' } } } : x)),
      /Service mrtr-gateway does not select/,
    ],
  ];
  it.each(breaches)('a breach is caught: %s (%s)', (_what, overlay, breach, message) => {
    const found = problems(breach(rendered[overlay]), overlay);
    expect(found.join('\n')).toMatch(message);
  });
});
