// docker-compose.yml as `docker-compose config` resolves it (Debian's docker-compose; no Docker
// engine needed): no secret anyone can read, the gateway on loopback unless told otherwise,
// forwarded headers trusted from the gateway's address only, and a streaming replica of the
// database that the replicas read from.
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { parse } from 'yaml'
import { PUBLISHED_SECRETS } from '../../src/config.js'
import { projectRoot } from '../../src/project-root.js'

if (spawnSync('docker-compose', ['version'], { stdio: 'ignore' }).status !== 0) {
  // CI installs it (.ci/run); elsewhere: apt-get install docker-compose.
  if (process.env.CI) throw new Error('docker-compose is not installed, and CI must check docker-compose.yml')
  t.plan(0, 'docker-compose is not installed (apt-get install docker-compose): the compose test is skipped')
  process.exit(0)
}

/** `docker-compose config` with only these variables (and PATH) in its environment. */
function composeConfig (env: Record<string, string>) {
  const run = spawnSync('docker-compose', ['config'], { cwd: projectRoot, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' })
  return { status: run.status, stderr: run.stderr, config: run.status === 0 ? parse(run.stdout) : undefined }
}

const secret = randomBytes(32).toString('base64')
// Each run of docker-compose costs about a second: the plain deployment is resolved once.
const deployment = composeConfig({ JWT_SECRET: secret })
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
  t.same(composeConfig({ JWT_SECRET: secret, GATEWAY_HOST_IP: '0.0.0.0', GATEWAY_HOST_PORT: '8080' }).config.services.gateway.ports, ['0.0.0.0:8080:3000/tcp'])
  for (const name of replicas) t.notOk(deployment.config.services[name].ports, `${name} publishes nothing`)
})

t.test('the replicas trust forwarded headers from the gateway\'s fixed address only', async (t) => {
  const { config } = composeConfig({ JWT_SECRET: secret, TRUST_PROXY: 'true' })
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
  const { config } = composeConfig({ JWT_SECRET: secret, POSTGRES_PASSWORD: 'another-local-password' })
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
  t.same(environmentOf(composeConfig({ JWT_SECRET: secret, POSTGRES_REPLICATION_PASSWORD: 'chosen' }).config), ['chosen', 'chosen'])
})
