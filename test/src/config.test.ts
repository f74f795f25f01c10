// src/config.ts's production rules, in-process (test/system/server.test.ts starts a real process with one).
import { execFileSync } from 'node:child_process'
import { createPublicKey, generateKeyPairSync, type KeyObject, randomBytes } from 'node:crypto'
import { readdirSync, readFileSync, realpathSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { authOptionsOf, jwksOverNetworkHttp, jwtKeyOf, scopeClaimsOf, tokenTypeOf } from '../../plugins/auth/key.js'
import { assertProductionReady, audiencesOf, type Config, isProduction, loadConfig, loadStartupConfig, PUBLISHED_SECRETS, replicaUrlsOf, settingNames } from '../../src/config.js'
import { withLocalDefaults } from '../../src/local-dev.js'
import { startupConfigOf } from '../../src/serve.js'
import { projectRoot } from '../../src/project-root.js'
import { ecKeyPair, PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, rsaKeyPair, TEST_SECRET } from '../support/tokens.js'

const unreachable = 'postgres://u@127.0.0.1:1/db'
const production = { NODE_ENV: 'production', JWT_ISSUER: PRODUCTION_ISSUER, JWT_AUDIENCE: PRODUCTION_AUDIENCE }

t.test('local rules only for NODE_ENV unset, development or test, spelled exactly so', async (t) => {
  for (const NODE_ENV of [undefined, 'development', 'test']) t.notOk(isProduction(loadConfig({ NODE_ENV })), String(NODE_ENV))
  for (const NODE_ENV of ['production', 'prod', 'Production', 'staging', 'Development', 'TEST', 'dev', 'development ']) {
    t.ok(isProduction(loadConfig({ NODE_ENV })), NODE_ENV)
  }
})

t.test('under production rules nothing is filled in locally: no generated secret', async (t) => {
  await t.rejects(withLocalDefaults(loadConfig({ NODE_ENV: 'prod' })), /local defaults are for development only \(NODE_ENV=prod\)/)
})

t.test('production needs DATABASE_URL, a key, JWT_ISSUER and JWT_AUDIENCE, named one at a time', async (t) => {
  const complete = { NODE_ENV: 'production', DATABASE_URL: 'postgres://db/x', JWT_SECRET: TEST_SECRET, JWT_ISSUER: 'https://idp/', JWT_AUDIENCE: 'api' }
  t.doesNotThrow(() => assertProductionReady(loadConfig(complete)))
  for (const [missing, named] of [['DATABASE_URL', 'DATABASE_URL'], ['JWT_SECRET', 'one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET'], ['JWT_ISSUER', 'JWT_ISSUER'], ['JWT_AUDIENCE', 'JWT_AUDIENCE']]) {
    t.throws(() => assertProductionReady(loadConfig({ ...complete, [missing]: undefined })), { message: `Refusing to start: ${named} is required in production (NODE_ENV=production).` }, missing)
  }
})

t.test('JWT_AUDIENCE: comma-separated, blanks ignored; a value with nothing in it is refused', async (t) => {
  t.same(audiencesOf(loadConfig({ JWT_AUDIENCE: 'api' })), ['api'])
  t.same(audiencesOf(loadConfig({ JWT_AUDIENCE: ' api , https://api.example/,, legacy ' })), ['api', 'https://api.example/', 'legacy'])
  t.same(audiencesOf(loadConfig({})), [])
  for (const value of [' ', ',', ' , ']) t.throws(() => loadConfig({ JWT_AUDIENCE: value }), /JWT_AUDIENCE must match pattern/, JSON.stringify(value))
})

t.test('DATABASE_REPLICA_URLS: comma-separated, in order, blanks around them ignored; none when unset', async (t) => {
  const first = 'postgres://reader@replica-1:5432/app'
  const second = 'postgres://reader@replica-2:5432/app?sslmode=require'
  t.same(replicaUrlsOf(loadConfig({ DATABASE_REPLICA_URLS: first })), [first])
  t.same(replicaUrlsOf(loadConfig({ DATABASE_REPLICA_URLS: ` ${second} ,  ${first} ` })), [second, first])
  t.same(replicaUrlsOf(loadConfig({})), [])
})

t.test('JWT_SCOPE_CLAIMS: the claims in order, however many spaces between them', async (t) => {
  t.same(scopeClaimsOf(loadConfig({ JWT_SCOPE_CLAIMS: ' scope  scp   permissions ' })), ['scope', 'scp', 'permissions'])
})

t.test('the auth plugin\'s options need a key source: without one, the sentence naming all three', async (t) => {
  t.throws(() => authOptionsOf(loadConfig({})), { message: 'one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET is required' })
  t.same(authOptionsOf(loadConfig({ JWT_SECRET: TEST_SECRET })).key, { kind: 'secret', algorithms: ['HS256'], secret: TEST_SECRET })
})

t.test('JWT_TYPE: compared as fast-jwt does, lower case without "application/"; junk refused', async (t) => {
  t.equal(tokenTypeOf(loadConfig({})), undefined)
  t.equal(tokenTypeOf(loadConfig({ JWT_TYPE: 'at+jwt' })), 'at+jwt')
  t.equal(tokenTypeOf(loadConfig({ JWT_TYPE: 'Application/AT+JWT' })), 'at+jwt')
  for (const value of ['at jwt', 'at+jwt,jwt', 'application/']) t.throws(() => loadConfig({ JWT_TYPE: value }), /JWT_TYPE must match pattern/, value)
})

t.test('JWKS over http: loopback hosts are local; any other host needs JWKS_ALLOW_HTTP in production', async (t) => {
  const loopback = ['http://127.0.0.1/jwks', 'http://127.9.8.7:8080/jwks', 'http://localhost:9/jwks', 'http://[::1]:9/jwks', 'https://idp.example/jwks']
  for (const url of loopback) {
    t.notOk(jwksOverNetworkHttp({ JWKS_URL: url }), url)
    t.equal(jwtKeyOf(loadConfig({ NODE_ENV: 'production', JWKS_URL: url }))?.kind, 'jwks', `${url} in production`)
  }
  const remote = ['http://idp.example/jwks', 'http://10.0.0.7/jwks', 'http://127.example.com/jwks', 'http://localhost.example.com/jwks', 'http://[::2]/jwks', 'http://128.0.0.1/jwks']
  for (const url of remote) {
    t.ok(jwksOverNetworkHttp({ JWKS_URL: url }), url)
    t.throws(() => jwtKeyOf(loadConfig({ NODE_ENV: 'production', JWKS_URL: url })), /JWKS_URL must be https:\/\/ in production/, url)
    t.equal(jwtKeyOf(loadConfig({ NODE_ENV: 'production', JWKS_URL: url, JWKS_ALLOW_HTTP: 'true' }))?.kind, 'jwks', `${url} allowed`)
    t.equal(jwtKeyOf(loadConfig({ JWKS_URL: url }))?.kind, 'jwks', `${url} outside production`)
  }
})

t.test('production without DATABASE_URL, a key, JWT_ISSUER or JWT_AUDIENCE, or with two keys → refuses to start, says why (the server exits 1 with this line)', async (t) => {
  const rsaJwk = createPublicKey(rsaKeyPair().publicKey).export({ format: 'jwk' })
  const ecJwk = createPublicKey(ecKeyPair().publicKey).export({ format: 'jwk' })
  const okpJwk = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' })
  const octJwk = { kty: 'oct', k: randomBytes(32).toString('base64url') }
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ ...production, JWT_SECRET: TEST_SECRET }, /^Refusing to start: DATABASE_URL is required in production \(NODE_ENV=production\)\.$/],
    [{ ...production, DATABASE_URL: unreachable }, /one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET is required/],
    [{ ...production, JWT_ISSUER: '', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable }, /^Refusing to start: JWT_ISSUER is required in production/],
    [{ ...production, JWT_AUDIENCE: '', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable }, /^Refusing to start: JWT_AUDIENCE is required in production/],
    [{ ...production, JWT_AUDIENCE: ' , ', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable }, /JWT_AUDIENCE must match pattern/],
    [{ JWT_SECRET: TEST_SECRET, JWT_PUBLIC_KEY: 'x', DATABASE_URL: unreachable }, /set only one of JWKS_URL, JWT_PUBLIC_KEY, JWT_SECRET/],
    [{ JWKS_URL: 'https://idp.example/jwks.json', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable }, /set only one of JWKS_URL, JWT_PUBLIC_KEY, JWT_SECRET \(got JWKS_URL and JWT_SECRET\)/],
    [{ ...production, JWKS_URL: 'http://idp.example/jwks.json', DATABASE_URL: unreachable }, /JWKS_URL must be https:\/\/ in production, or http:\/\/ on a loopback host \(set JWKS_ALLOW_HTTP=true/],
    [{ ...production, JWKS_URL: 'http://127.example.com/jwks.json', DATABASE_URL: unreachable }, /JWKS_URL must be https:\/\/ in production/],
    [{ JWKS_URL: 'https://user:secret@idp.example/jwks.json', DATABASE_URL: unreachable }, /^Invalid configuration: JWKS_URL must not hold a user name or password \(a key set is public\)$/],
    [{ JWKS_URL: 'https://user@idp.example/jwks.json', DATABASE_URL: unreachable }, /JWKS_URL must not hold a user name or password/],
    // Past its https?:// prefix the schema does not look; URL's own "Invalid URL" would name nothing.
    [{ JWKS_URL: 'https://', DATABASE_URL: unreachable }, /^Invalid configuration: JWKS_URL is not a URL$/],
    [{ JWKS_URL: 'https://idp example/jwks.json', DATABASE_URL: unreachable }, /^Invalid configuration: JWKS_URL is not a URL$/],
    [{ ...production, JWKS_URL: 'http://[::1/jwks.json', DATABASE_URL: unreachable }, /^Invalid configuration: JWKS_URL is not a URL$/],
    [{ JWT_SECRET: 'short', DATABASE_URL: unreachable }, /JWT_SECRET must NOT have fewer than 32 characters/],
    [{ PORT: 'eighty', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable }, /PORT must be integer/],
    [{ JWT_PUBLIC_KEY: 'not a pem', DATABASE_URL: unreachable }, /JWT_PUBLIC_KEY is not a PEM public key/],
    // Node derives the public key from a private one: taken, the secret would sit in the environment.
    [{ JWT_PUBLIC_KEY: rsaKeyPair().privateKey, DATABASE_URL: unreachable }, /^Invalid configuration: JWT_PUBLIC_KEY holds a private key: give the public key only/],
    [{ JWT_PUBLIC_KEY: ecKeyPair().privateKey, DATABASE_URL: unreachable }, /JWT_PUBLIC_KEY holds a private key/],
    // A PEM in the secret's place: fast-jwt refuses it only when the app registers its auth ("Public
    // keys are not supported for signing"), a sentence naming neither the setting nor the remedy.
    [{ JWT_SECRET: rsaKeyPair().publicKey, DATABASE_URL: unreachable }, /^Invalid configuration: JWT_SECRET holds a PEM key, not a shared secret: a public key goes in JWT_PUBLIC_KEY$/],
    [{ JWT_SECRET: ecKeyPair().privateKey, DATABASE_URL: unreachable }, /^Invalid configuration: JWT_SECRET holds a PEM key/],
    [{ ...production, JWT_SECRET: `  ${rsaKeyPair().publicKey.replaceAll('\n', '\\n')}`, DATABASE_URL: unreachable }, /^Invalid configuration: JWT_SECRET holds a PEM key/],
    // The provider's public key as a JWK, or its whole key set: fast-jwt refuses them too when the
    // auth registers ("Raw asymmetric JWK/JWKS JSON cannot be used as an HMAC secret"), naming nothing.
    // Any asymmetric one (RSA, EC, OKP), alone, in an array or in a set, beside symmetric ones too.
    ...[rsaJwk, ecJwk, okpJwk, { keys: [rsaJwk] }, [ecJwk], [octJwk, rsaJwk], { keys: [octJwk, okpJwk] }].map((value): [Record<string, string>, RegExp] =>
      [{ JWT_SECRET: ` ${JSON.stringify(value)}`, DATABASE_URL: unreachable },
        /^Invalid configuration: JWT_SECRET holds a JSON Web Key, not a shared secret: a public key goes in JWT_PUBLIC_KEY \(as PEM\), a key set's URL in JWKS_URL$/])
  ]
  for (const [env, message] of cases) t.throws(() => startupConfigOf(env), { message }, JSON.stringify(env))
})

t.test('a secret that is JSON but holds no asymmetric key (a symmetric JWK, a number, null, a set of other keys) is a secret like any other', async (t) => {
  const octJwk = { kty: 'oct', k: randomBytes(32).toString('base64url') }
  for (const secret of [JSON.stringify(octJwk), JSON.stringify([octJwk]), JSON.stringify({ keys: [octJwk] }), JSON.stringify({ keys: 5, pad: TEST_SECRET }),
    '1'.repeat(40), `null${' '.repeat(40)}`, JSON.stringify(TEST_SECRET)]) {
    t.match(jwtKeyOf(loadConfig({ JWT_SECRET: secret })), { kind: 'secret', secret }, secret)
  }
})

t.test('any NODE_ENV but unset, development or test gets production rules: no embedded database, no generated secret', async (t) => {
  for (const NODE_ENV of ['prod', 'Production', 'staging', 'DEVELOPMENT', ' development']) {
    t.throws(() => loadStartupConfig({ NODE_ENV }), { message: `Refusing to start: DATABASE_URL is required in production (NODE_ENV=${NODE_ENV}).` }, NODE_ENV)
  }
})

t.test('the bounds tests shorten are configuration, with the defaults production runs with', async (t) => {
  t.match(loadConfig({}), {
    DATABASE_CONNECTION_WAIT_MS: 1000,
    DATABASE_STATEMENT_TIMEOUT_MS: 5000,
    DATABASE_QUERY_TIMEOUT_MS: 10000,
    MIGRATIONS_CONNECTION_WAIT_MS: 5000,
    READINESS_TIMEOUT_MS: 1000,
    JWKS_COOLDOWN_MS: 5000,
    JWKS_FETCH_TIMEOUT_MS: 5000
  })
  t.match(jwtKeyOf(loadConfig({ JWKS_URL: 'https://idp.example/jwks', JWKS_COOLDOWN_MS: '250', JWKS_FETCH_TIMEOUT_MS: '750' })), { cooldownMs: 250, fetchTimeoutMs: 750 })
  t.throws(() => loadConfig({ JWKS_COOLDOWN_MS: '0' }), /JWKS_COOLDOWN_MS must be >= 100/)
})

t.test('every setting unset: exactly these defaults, nothing else', async (t) => {
  t.same(loadConfig({}), {
    NODE_ENV: 'development',
    HOST: '127.0.0.1',
    PORT: 3000,
    REQUEST_TIMEOUT_MS: 30000,
    DATABASE_POOL_MAX: 10,
    DATABASE_CONNECTION_WAIT_MS: 1000,
    DATABASE_STATEMENT_TIMEOUT_MS: 5000,
    DATABASE_QUERY_TIMEOUT_MS: 10000,
    DATABASE_POOLER: 'none',
    DATABASE_REPLICA_MAX_LAG_MS: 1000,
    DATABASE_REPLICA_PROBE_INTERVAL_MS: 250,
    READINESS_TIMEOUT_MS: 1000,
    DATABASE_PREPARED_STATEMENTS: true,
    MIGRATIONS_CONNECTION_WAIT_MS: 5000,
    JWKS_ALLOW_HTTP: false,
    JWKS_CACHE_MAX_AGE_MS: 600000,
    JWKS_COOLDOWN_MS: 5000,
    JWKS_FETCH_TIMEOUT_MS: 5000,
    JWT_SCOPE_CLAIMS: 'scope scp',
    FEED_MAX_STREAMS: 200,
    FEED_HEARTBEAT_MS: 10000,
    FEED_STREAM_BUFFER_BYTES: 262144,
    FEED_STALL_TIMEOUT_MS: 60000,
    LIST_PAGE_CACHE_BYTES: 8388608,
    LOG_LEVEL: 'info',
    TRUST_PROXY: 'false',
    METRICS_ENABLED: true,
    MAX_EVENT_LOOP_DELAY_MS: 1000,
    EVENT_LOOP_SAMPLE_INTERVAL_MS: 1000,
    SHUTDOWN_DELAY_MS: 0,
    SHUTDOWN_TIMEOUT_MS: 10000,
    EMBEDDED_POSTGRES_PORT: 54329
  })
})

t.test('whole numbers within their bounds: the bounds accepted, one past them and non-integers refused, naming the setting', async (t) => {
  // [setting, accepted, refused, the other settings a value needs (the cross rules of loadConfig)]
  const integers: Array<[string, number[], number[], Record<string, string>?]> = [
    ['PORT', [0, 65535], [-1, 65536]],
    ['DATABASE_POOL_MAX', [1, 1000], [0, 1001]],
    ['DATABASE_CONNECTION_WAIT_MS', [1, 60000], [0, 60001]],
    ['DATABASE_STATEMENT_TIMEOUT_MS', [1, 599999], [0], { DATABASE_QUERY_TIMEOUT_MS: '600000' }],
    ['DATABASE_QUERY_TIMEOUT_MS', [2, 600000], [0, 600001], { DATABASE_STATEMENT_TIMEOUT_MS: '1' }],
    ['READINESS_TIMEOUT_MS', [1, 60000], [0, 60001]],
    ['REQUEST_TIMEOUT_MS', [1000, 600000], [999, 600001]],
    ['DATABASE_REPLICA_MAX_LAG_MS', [0, 3600000], [-1, 3600001]],
    ['DATABASE_REPLICA_PROBE_INTERVAL_MS', [50, 60000], [49, 60001]],
    ['JWT_MAX_LIFETIME_S', [1, 31536000], [0, 31536001]],
    ['MIGRATIONS_CONNECTION_WAIT_MS', [1, 600000], [0, 600001]],
    ['JWKS_CACHE_MAX_AGE_MS', [1000, 86400000], [999, 86400001]],
    ['JWKS_COOLDOWN_MS', [100, 600000], [99, 600001]],
    ['JWKS_FETCH_TIMEOUT_MS', [100, 60000], [99, 60001]],
    ['METRICS_PORT', [0, 65535], [-1, 65536]],
    ['MAX_EVENT_LOOP_DELAY_MS', [0, 60000], [-1, 60001]],
    ['EVENT_LOOP_SAMPLE_INTERVAL_MS', [100, 60000], [99, 60001]],
    ['SHUTDOWN_DELAY_MS', [0, 9999], [-1, 600001]],
    ['SHUTDOWN_TIMEOUT_MS', [1000, 600000], [999, 600001]],
    ['EMBEDDED_POSTGRES_PORT', [1, 65535], [0, 65536]]
  ]
  for (const [name, accepted, refused, others = {}] of integers) {
    for (const value of accepted) t.equal(loadConfig({ ...others, [name]: String(value) })[name as 'PORT'], value, `${name}=${value}`)
    for (const value of [...refused.map(String), '1.5', 'ten']) t.throws(() => loadConfig({ ...others, [name]: value }), new RegExp(name), `${name}=${value}`)
  }
})

t.test('texts, choices and switches: what each accepts and refuses', async (t) => {
  const accepts = (env: Record<string, string>) => t.doesNotThrow(() => loadConfig(env), JSON.stringify(env))
  const refuses = (env: Record<string, string>) => t.throws(() => loadConfig(env), new RegExp(Object.keys(env)[0]), JSON.stringify(env))
  for (const name of ['DATABASE_URL', 'MIGRATIONS_DATABASE_URL']) {
    accepts({ [name]: 'postgres://u@db/x' })
    accepts({ [name]: 'postgresql://u@db/x' })
    refuses({ [name]: 'mysql://u@db/x' })
    refuses({ [name]: 'my-postgres://u@db/x' })
  }
  accepts({ JWT_SECRET: 'x'.repeat(32) })
  refuses({ JWT_SECRET: 'x'.repeat(31) })
  for (const value of ['true', 'false', '10.0.0.2', '10.0.0.2, 10.0.0.3', '10.0.0.0/8,loopback', '::1']) accepts({ TRUST_PROXY: value })
  // Refused at start, naming the setting, not by a TypeError from deep in Fastify's start.
  for (const value of ['TRUE', 'yes', 'gateway.local', '10.0.0.2,', '10.0.0.0/33']) refuses({ TRUST_PROXY: value })
  accepts({ JWKS_URL: 'https://idp.example/jwks' })
  refuses({ JWKS_URL: 'ftp://idp.example/jwks' })
  t.equal(loadConfig({ DATABASE_POOLER: 'transaction' }).DATABASE_POOLER, 'transaction')
  refuses({ DATABASE_POOLER: 'session' })
  for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) t.equal(loadConfig({ LOG_LEVEL: level }).LOG_LEVEL, level)
  refuses({ LOG_LEVEL: 'verbose' })
  for (const name of ['DATABASE_PREPARED_STATEMENTS', 'JWKS_ALLOW_HTTP', 'METRICS_ENABLED'] as const) {
    t.equal(loadConfig({ [name]: 'false' })[name], false, `${name}=false`)
    t.equal(loadConfig({ [name]: 'true' })[name], true, `${name}=true`)
    refuses({ [name]: 'maybe' })
  }
  t.equal(loadConfig({ TRUST_PROXY: '10.0.0.1,10.0.0.2' }).TRUST_PROXY, '10.0.0.1,10.0.0.2')
})

t.test('the cross rules: a statement timeout shorter than the query timeout, a shutdown delay shorter than its bound', async (t) => {
  t.throws(() => loadConfig({ DATABASE_STATEMENT_TIMEOUT_MS: '7000', DATABASE_QUERY_TIMEOUT_MS: '7000' }),
    /^Invalid configuration: DATABASE_STATEMENT_TIMEOUT_MS must be shorter than DATABASE_QUERY_TIMEOUT_MS$/)
  t.equal(loadConfig({ DATABASE_STATEMENT_TIMEOUT_MS: '6999', DATABASE_QUERY_TIMEOUT_MS: '7000' }).DATABASE_STATEMENT_TIMEOUT_MS, 6999)
  t.throws(() => loadConfig({ SHUTDOWN_DELAY_MS: '3000', SHUTDOWN_TIMEOUT_MS: '3000' }),
    /^Invalid configuration: SHUTDOWN_DELAY_MS must be shorter than SHUTDOWN_TIMEOUT_MS$/)
  t.equal(loadConfig({ SHUTDOWN_DELAY_MS: '2999', SHUTDOWN_TIMEOUT_MS: '3000' }).SHUTDOWN_DELAY_MS, 2999)
})

t.test('only the given variables count: an empty one is unset, the process environment is not read', async (t) => {
  t.equal(loadConfig({ HOST: '', PORT: '' }).HOST, '127.0.0.1', 'empty: the default')
  const saved = process.env.PORT
  process.env.PORT = '4321'
  t.teardown(() => { if (saved === undefined) delete process.env.PORT; else process.env.PORT = saved })
  t.equal(loadConfig({}).PORT, 3000, 'PORT in process.env but not in what loadConfig was given')
})

t.test('a .env file in the working directory is never loaded: the environment comes from whoever starts the process', async (t) => {
  const dir = t.testdir({ '.env': 'CPS_DOTENV_PROBE=loaded\nPORT=4321\n' })
  const cwd = process.cwd()
  // Back in the same tick: a process stopped while it is in the fixture (Stryker sends SIGTERM at
  // the first failure) would write its runner's result file there, and the mutant would count as
  // a runtime error instead of killed.
  process.chdir(dir)
  let config: Config
  try { config = loadConfig({}) } finally { process.chdir(cwd) }
  t.teardown(() => { delete process.env.CPS_DOTENV_PROBE })
  t.equal(config.PORT, 3000)
  t.equal(process.env.CPS_DOTENV_PROBE, undefined, 'nothing of .env reached process.env')
})

t.test('locally nothing more is required to start; each key source pins its algorithms', async (t) => {
  t.doesNotThrow(() => loadStartupConfig({}), 'development with nothing set')
  t.same(jwtKeyOf(loadConfig({ JWKS_URL: 'https://idp.example/jwks' }))?.algorithms, ['RS256', 'ES256'])
  t.same(jwtKeyOf(loadConfig({ JWT_PUBLIC_KEY: ecKeyPair().publicKey }))?.algorithms, ['ES256'])
  t.same(jwtKeyOf(loadConfig({ JWT_PUBLIC_KEY: rsaKeyPair().publicKey }))?.algorithms, ['RS256'])
  const pemOf = (key: KeyObject) => key.export({ type: 'spki', format: 'pem' }) as string
  const p384 = pemOf(generateKeyPairSync('ec', { namedCurve: 'P-384' }).publicKey)
  const ed25519 = pemOf(generateKeyPairSync('ed25519').publicKey)
  for (const [label, publicKey] of [['P-384', p384], ['Ed25519', ed25519]]) {
    t.throws(() => jwtKeyOf(loadConfig({ JWT_PUBLIC_KEY: publicKey })),
      /^Invalid configuration: JWT_PUBLIC_KEY must be an RSA key \(RS256\) or a P-256 EC key \(ES256\)$/, label)
  }
  t.throws(() => jwtKeyOf(loadConfig({ JWT_PUBLIC_KEY: pemOf(generateKeyPairSync('rsa', { modulusLength: 2040 }).publicKey) })),
    /^Invalid configuration: JWT_PUBLIC_KEY is an RSA key of 2040 bits; RS256 needs 2048 or more$/, 'an RSA key under 2048 bits (RFC 7518 §3.3)')
})

/**
 * The files of the project: git's list in a checkout; in a copy of the project that is no checkout
 * of its own (Stryker's sandbox, in an ignored folder of this one, where git lists nothing), the
 * copy's files but what is built or installed.
 */
function projectFiles (): string[] {
  let topLevel = ''
  try {
    topLevel = execFileSync('git', ['rev-parse', '--show-toplevel'], { cwd: projectRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {}
  if (topLevel && realpathSync(topLevel) === realpathSync(projectRoot)) {
    return execFileSync('git', ['ls-files', '-z'], { cwd: projectRoot, encoding: 'utf8' }).split('\0').filter(Boolean)
  }
  const generated = new Set(['node_modules', 'dist', '.test-build', '.data', '.tap', 'reports', 'tmp', 'coverage'])
  const under = (dir: string): string[] => readdirSync(join(projectRoot, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = dir ? `${dir}/${entry.name}` : entry.name
    if (entry.isDirectory()) return generated.has(entry.name) ? [] : under(path)
    return entry.isFile() ? [path] : []
  })
  return under('')
}

t.test('production refuses every HS256 secret written in this repository, in one line; a secret of one\'s own starts', async (t) => {
  // Long literals on any line of a tracked file that speaks of a secret: all must be on the list.
  const files = projectFiles().filter((file) => !/\.(png|jpe?g)$|package-lock\.json$/.test(file))
  const written = new Set<string>()
  for (const file of files) {
    for (const line of readFileSync(join(projectRoot, file), 'utf8').split('\n')) {
      if (!/secret/i.test(line)) continue
      for (const [, literal] of line.matchAll(/(?:['"=]|:-)([A-Za-z0-9_.+/~-]{32,})/g)) written.add(literal)
    }
  }
  t.ok(written.size >= 1, `found ${written.size}`)
  for (const literal of written) t.ok(PUBLISHED_SECRETS.has(literal), `${literal} is on the list`)
  const deployed = { ...production, DATABASE_URL: 'postgres://db/x' }
  for (const published of PUBLISHED_SECRETS) {
    t.throws(() => loadStartupConfig({ ...deployed, JWT_SECRET: published }), {
      message: 'Refusing to start: JWT_SECRET is a secret published in this repository; make one of your own (openssl rand -base64 32) (NODE_ENV=production).'
    }, published)
    t.doesNotThrow(() => loadStartupConfig({ JWT_SECRET: published }), 'outside production it is only a local key')
  }
  t.doesNotThrow(() => loadStartupConfig({ ...deployed, JWT_SECRET: randomBytes(32).toString('base64') }))
  t.throws(() => loadStartupConfig({ ...deployed, JWT_SECRET: 'é'.repeat(31) }), /JWT_SECRET must NOT have fewer than 32 characters/)
})

// .env.example's entries, `# NAME=value` each: every variable the schema of src/config.ts names, and
// every one docker-compose.yml reads from the environment (docker-compose only: the postgres
// containers', the gateway's), and nothing else.
t.test('.env.example sets nothing: every entry is commented out, every setting is there with its default, and nothing unknown', async (t) => {
  const example = readFileSync(join(projectRoot, '.env.example'), 'utf8')
  for (const [index, line] of example.split('\n').entries()) {
    t.ok(line === '' || line.startsWith('#'), `line ${index + 1} is a comment or blank: ${line}`)
  }
  const entries = new Map([...example.matchAll(/^# ?([A-Z][A-Z0-9_]*)=(.*)$/gm)].map(([, name, value]) => [name, value]))

  const settings: readonly string[] = settingNames
  const defaults = loadConfig({}) as unknown as Record<string, unknown>
  t.ok(settings.length >= 40, `${settings.length} settings in the schema of src/config.ts`)
  for (const name of Object.keys(defaults)) t.ok(settings.includes(name), `${name}, which has a default, is a setting`)

  // What docker-compose.yml interpolates (${NAME:-default}, ${NAME:?message}); $${NAME} is the container's.
  const compose = readFileSync(join(projectRoot, 'docker-compose.yml'), 'utf8')
  const composeDefaults = new Map<string, string>()
  for (const [, name, operator, rest] of compose.matchAll(/(?<!\$)\$\{([A-Z][A-Z0-9_]*)(:-|:\?|-|\?)?([^}]*)\}/g)) {
    composeDefaults.set(name, operator === ':-' || operator === '-' ? rest : '')
  }
  const composeOnly = [...composeDefaults.keys()].filter((name) => !settings.includes(name))
  t.ok(composeOnly.length >= 5, `docker-compose-only: ${composeOnly.join(', ')}`)

  t.same([...entries.keys()].sort(), [...new Set([...settings, ...composeOnly])].sort(), 'the schema\'s settings and docker-compose.yml\'s, each once')
  t.equal(entries.size, [...example.matchAll(/^# ?[A-Z][A-Z0-9_]*=/gm)].length, 'no setting has two entries')
  for (const name of settings) {
    const shown = entries.get(name)
    const value = defaults[name]
    t.equal(shown, value === undefined ? '' : String(value), `${name}: the entry shows ${value === undefined ? 'no value (unset by default)' : 'the default'}`)
  }
  for (const name of composeOnly) t.equal(entries.get(name), composeDefaults.get(name), `${name}: docker-compose.yml's default`)
})

/** The variable names in the first column of a Markdown table's rows (`NAME`, several to a cell). */
function tableNamesOf (markdown: string): string[] {
  return markdown.split('\n').filter((line) => /^\| `[A-Z]/.test(line))
    .flatMap((line) => [...line.split('|')[1].matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map(([, name]) => name))
}

t.test('docs/configuration.md\'s table names every setting of the schema, once, and nothing else; the README\'s only settings', async (t) => {
  const documented = tableNamesOf(readFileSync(join(projectRoot, 'docs', 'configuration.md'), 'utf8'))
  t.same([...documented].sort(), [...settingNames].sort(), 'the configuration table: every setting, each once')
  const essentials = tableNamesOf(readFileSync(join(projectRoot, 'README.md'), 'utf8'))
  t.ok(essentials.length >= 5, `the README's essentials: ${essentials.join(', ')}`)
  for (const name of essentials) t.ok((settingNames as readonly string[]).includes(name), `the README names ${name}, a setting`)
})
