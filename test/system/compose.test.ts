// docker-compose.yml as `docker-compose config` resolves it (Debian's docker-compose; no Docker
// engine needed): no secret anyone can read, the gateway on loopback unless told otherwise,
// forwarded headers trusted from the gateway's address only, a streaming replica of the
// database that the replicas read from, and the tracing profile: a collector and Jaeger that
// only `--profile tracing` starts, and replicas that send no traces unless told where.
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join, sep } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { PUBLISHED_SECRETS } from '../../src/config.js'
import { projectRoot } from '../../src/project-root.js'

/** `docker-compose config` with only these variables (and PATH) in its environment, and these profiles on. */
function composeConfig (env: Record<string, string>, profiles: string[] = []) {
  const args = [...profiles.flatMap((profile) => ['--profile', profile]), 'config']
  const run = spawnSync('docker-compose', args, { cwd: projectRoot, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' })
  return { missing: run.error !== undefined, status: run.status, stderr: run.stderr, config: run.status === 0 ? parse(run.stdout) : undefined }
}

const secret = randomBytes(32).toString('base64')
// Each run of docker-compose costs about half a second of CPU, on cores the other test files
// share: the plain deployment is resolved once, and once with every variable the tests choose
// (each of its own value, so one taken for another shows).
const deployment = composeConfig({ JWT_SECRET: secret })
if (deployment.missing) {
  // CI installs it (.ci/run); elsewhere: apt-get install docker-compose.
  if (process.env.CI) throw new Error('docker-compose is not installed, and CI must check docker-compose.yml')
  t.plan(0, 'docker-compose is not installed (apt-get install docker-compose): the compose test is skipped')
  process.exit(0)
}
const chosen = composeConfig({
  JWT_SECRET: secret,
  GATEWAY_HOST_IP: '0.0.0.0',
  GATEWAY_HOST_PORT: '8080',
  TRUST_PROXY: 'true',
  POSTGRES_PASSWORD: 'another-local-password',
  POSTGRES_REPLICATION_PASSWORD: 'chosen'
})
const replicas = ['service-1', 'service-2']

t.test('without JWT_SECRET the deployment does not resolve, and says which variable is missing', async (t) => {
  const { status, stderr } = composeConfig({})
  t.not(status, 0)
  t.match(stderr, /set JWT_SECRET to a secret of your own/)
})

t.test('with a secret of one\'s own: the replicas get it, in production, and no published secret appears', async (t) => {
  const { status, config } = deployment
  t.equal(status, 0)
  for (const name of replicas) {
    t.equal(config.services[name].environment.JWT_SECRET, secret, name)
    t.equal(config.services[name].environment.NODE_ENV, 'production', name)
  }
  const text = JSON.stringify(config)
  for (const published of PUBLISHED_SECRETS) t.notOk(text.includes(published), 'no published secret')
})

t.test('the gateway is published on 127.0.0.1 unless GATEWAY_HOST_IP says otherwise', async (t) => {
  t.same(deployment.config.services.gateway.ports, ['127.0.0.1:3000:3000/tcp'])
  t.same(chosen.config.services.gateway.ports, ['0.0.0.0:8080:3000/tcp'])
  for (const name of replicas) t.notOk(deployment.config.services[name].ports, `${name} publishes nothing`)
})

t.test('the gateway and the replicas run on a read-only filesystem: they write nothing (.ci/runtime-image-check runs the service so)', async (t) => {
  for (const name of ['gateway', ...replicas]) t.equal(deployment.config.services[name].read_only, true, name)
})

t.test('the replicas trust forwarded headers from the gateway\'s fixed address only', async (t) => {
  const { config } = chosen
  const gatewayAddress = config.services.gateway.networks.default.ipv4_address
  t.match(gatewayAddress, /^\d+\.\d+\.\d+\.\d+$/)
  t.match(config.networks.default.ipam.config[0].subnet, new RegExp(`^${gatewayAddress.split('.').slice(0, 3).join('\\.')}\\.`), 'inside the network\'s range')
  for (const name of replicas) t.equal(config.services[name].environment.TRUST_PROXY, gatewayAddress, `${name}, whatever TRUST_PROXY the shell has`)
})

t.test('a streaming replica of postgres, from the same image, made with pg_basebackup -R once the primary is healthy', async (t) => {
  const { postgres, 'postgres-replica': replica } = deployment.config.services
  t.ok(replica, 'the postgres-replica service')
  t.equal(replica.image, postgres.image, 'the primary\'s image')
  t.same(replica.depends_on, { postgres: { condition: 'service_healthy' } })
  t.match(replica.healthcheck.test.join(' '), /pg_isready -h 127\.0\.0\.1/)
  // Its own data volume, mounted where the image keeps PGDATA (/var/lib/postgresql/18/docker).
  const dataVolume = (service: { volumes: string[] }) => service.volumes.find((volume) => volume.split(':')[1] === '/var/lib/postgresql')?.split(':')[0]
  t.ok(dataVolume(replica))
  t.not(dataVolume(replica), dataVolume(postgres), 'not the primary\'s volume')
  // The copy: made only into an empty data folder, as a standby (-R) with the WAL of its own
  // making (-X stream), then the image's entrypoint starts it.
  const script = replica.command[replica.command.length - 1]
  t.match(script, /if \[ ! -s "\$+PGDATA\/PG_VERSION" \]/)
  t.match(script, /pg_basebackup -h postgres -U \S+ -D \S+ -R -X stream/)
  t.match(script, /exec docker-entrypoint\.sh postgres\s*$/)
  // The primary lets the replica's role in: the init script mounted where the image runs it.
  t.ok(postgres.volumes.some((volume: string) => /\/db\/compose\/replication\.sh:\/docker-entrypoint-initdb\.d\/[^:]+\.sh:ro$/.test(volume)))
})

t.test('service-1 and service-2 read from postgres-replica, as DATABASE_URL\'s user of its database, and start once it is healthy', async (t) => {
  const { config } = chosen
  const credentials = (url: URL) => [url.protocol, url.username, url.password, url.port, url.pathname]
  for (const name of replicas) {
    const { environment, depends_on: dependsOn } = config.services[name]
    const primary = new URL(environment.DATABASE_URL)
    const replica = new URL(environment.DATABASE_REPLICA_URLS)
    t.equal(primary.hostname, 'postgres', name)
    t.equal(replica.hostname, 'postgres-replica', name)
    t.same(credentials(replica), credentials(primary), name)
    t.equal(replica.password, 'another-local-password', `${name}: POSTGRES_PASSWORD, as for the primary`)
    t.same(dependsOn['postgres-replica'], { condition: 'service_healthy' }, name)
    t.same(dependsOn.postgres, { condition: 'service_healthy' }, name)
  }
})

t.test('the replication password comes from POSTGRES_REPLICATION_PASSWORD, the same on both sides', async (t) => {
  const environmentOf = (config: { services: Record<string, { environment: Record<string, string> }> }) =>
    [config.services.postgres.environment.POSTGRES_REPLICATION_PASSWORD, config.services['postgres-replica'].environment.PGPASSWORD]
  const [primary, replica] = environmentOf(deployment.config)
  t.ok(primary, 'a local default')
  t.equal(replica, primary)
  t.same(environmentOf(chosen.config), ['chosen', 'chosen'])
})

interface Service { image?: string, profiles?: string[], depends_on?: Record<string, unknown>, ports?: string[], volumes?: string[], environment?: Record<string, string> }

/**
 * The services `up` starts with these profiles on: every one without a profile or with one of
 * them, and whatever those depend on. Debian's docker-compose (1.29) lists every service in
 * `config` whatever the profiles, so which ones start is read from the file, as `up` reads it.
 */
function startedBy (services: Record<string, Service>, profiles: string[]) {
  const started = new Set<string>()
  const start = (name: string) => {
    if (started.has(name)) return
    started.add(name)
    for (const dependency of Object.keys(services[name]?.depends_on ?? {})) start(dependency)
  }
  for (const [name, service] of Object.entries(services)) {
    if (!service.profiles || service.profiles.some((profile) => profiles.includes(profile))) start(name)
  }
  return started
}

// The README's command turns tracing on: the endpoint it gives is the one resolved here.
const readme = readFileSync(join(projectRoot, 'README.md'), 'utf8')
const documentedEndpoint = /`OTEL_EXPORTER_OTLP_ENDPOINT=(\S+) docker compose --profile tracing up`/.exec(readme)?.[1] ?? ''
const tracing = composeConfig({ JWT_SECRET: secret, OTEL_EXPORTER_OTLP_ENDPOINT: documentedEndpoint }, ['tracing'])
const tracingServices: Record<string, Service> = tracing.config?.services ?? {}
const collectorName = 'otel-collector'
const jaegerName = Object.keys(tracingServices).find((name) => tracingServices[name].image?.startsWith('jaegertracing/jaeger:'))

/** The collector's configuration: the file of this repository that docker-compose.yml mounts where the image reads it. */
function collectorConfiguration () {
  const mount = tracingServices[collectorName]?.volumes?.find((volume) => volume.split(':')[1] === '/etc/otelcol/config.yaml')
  if (mount === undefined) throw new Error(`${collectorName} mounts nothing at /etc/otelcol/config.yaml`)
  const [source, , mode] = mount.split(':')
  return { source, mode, config: parse(readFileSync(source, 'utf8')) }
}

t.test('the tracing profile resolves; a plain `up` starts neither the collector nor Jaeger, `--profile tracing` both', async (t) => {
  t.ok(documentedEndpoint, 'the README gives the command that turns tracing on')
  t.equal(tracing.status, 0, tracing.stderr)
  t.ok(jaegerName, 'a service runs jaegertracing/jaeger')
  for (const name of [collectorName, jaegerName ?? 'jaeger']) t.same(tracingServices[name]?.profiles, ['tracing'], `${name}: in the tracing profile only`)
  const plain = startedBy(deployment.config.services, [])
  const traced = startedBy(tracingServices, ['tracing'])
  for (const name of [collectorName, jaegerName ?? 'jaeger']) {
    t.notOk(plain.has(name), `a plain up does not start ${name}`)
    t.ok(traced.has(name), `--profile tracing starts ${name}`)
  }
  t.same([...traced].filter((name) => !plain.has(name)).sort(), [collectorName, jaegerName].sort(), 'the profile adds those two and nothing else')
})

t.test('the collector: a pinned image, its configuration mounted read-only from the repository, receiving OTLP/HTTP on 4318 from the compose network', async (t) => {
  const collector = tracingServices[collectorName]
  t.match(collector.image, /^otel\/opentelemetry-collector:\d+\.\d+\.\d+$/, 'a version, not latest')
  const { source, mode, config } = collectorConfiguration()
  t.equal(mode, 'ro', 'mounted read-only')
  t.ok(source.startsWith(projectRoot + sep), `${source}: a file of this repository`)
  // 0.0.0.0: the receiver's default, localhost, would not be reachable from the replicas' containers.
  t.equal(config.receivers?.otlp?.protocols?.http?.endpoint, '0.0.0.0:4318', 'OTLP/HTTP on every interface of its container')
  t.notOk(collector.ports, 'nothing published on the host')
})

t.test('the collector\'s traces pipeline takes OTLP and exports it, over OTLP/HTTP, to the Jaeger service; every component it names is configured', async (t) => {
  const { config } = collectorConfiguration()
  const pipeline = config.service?.pipelines?.traces
  t.ok(pipeline, 'a traces pipeline')
  t.ok(pipeline.receivers.includes('otlp'), 'from the otlp receiver')
  for (const kind of ['receivers', 'processors', 'exporters']) {
    // An entry without settings (`batch:`) parses as null: it is there all the same.
    for (const name of pipeline[kind] ?? []) t.ok(config[kind] && name in config[kind], `${kind}: ${name} is configured`)
  }
  const toJaeger = (pipeline.exporters as string[]).filter((name) => {
    const endpoint = config.exporters?.[name]?.endpoint
    return typeof endpoint === 'string' && URL.canParse(endpoint) && new URL(endpoint).hostname === jaegerName
  })
  t.equal(toJaeger.length, 1, `one exporter to ${jaegerName}`)
  for (const name of toJaeger) {
    // otlp_http is the exporter's name since collector 0.144 (otlphttp, its old name, is a deprecated alias).
    t.equal(name.split('/')[0], 'otlp_http', `${name}: OTLP over HTTP`)
    t.equal(new URL(config.exporters[name].endpoint).port, '4318', `${name}: Jaeger's OTLP/HTTP port`)
  }
})

t.test('Jaeger: a pinned 2.x image, its UI published on 127.0.0.1:16686 only', async (t) => {
  const jaeger = tracingServices[jaegerName ?? 'jaeger']
  t.match(jaeger.image, /^jaegertracing\/jaeger:2\.\d+\.\d+$/, 'Jaeger v2, a version, not latest')
  t.same(jaeger.ports, ['127.0.0.1:16686:16686/tcp'], 'the UI only, on loopback')
})

t.test('the replicas send no traces by default; with the README\'s endpoint, to the collector\'s receiver', async (t) => {
  const { config } = collectorConfiguration()
  const receiverPort = String(config.receivers?.otlp?.protocols?.http?.endpoint).split(':').pop()
  for (const name of replicas) {
    const plain = deployment.config.services[name].environment
    t.equal(plain.OTEL_EXPORTER_OTLP_ENDPOINT, '', `${name}: empty, so tracing is off`)
    t.equal(plain.OTEL_SERVICE_NAME, 'client-permissions-service', name)
    const endpoint = new URL(tracingServices[name].environment?.OTEL_EXPORTER_OTLP_ENDPOINT ?? '')
    t.equal(endpoint.protocol, 'http:', name)
    t.equal(endpoint.hostname, collectorName, name)
    t.equal(endpoint.port, receiverPort, `${name}: the receiver's port`)
  }
})
