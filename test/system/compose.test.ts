// docker-compose.yml as `docker-compose config` resolves it (Debian's docker-compose; no Docker
// engine needed): no secret anyone can read, the gateway on loopback unless told otherwise, and
// forwarded headers trusted from the gateway's address only.
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
