// npm run bench:levers: A/B of the service's performance levers in one run. Every variant is the
// same build of the service started side by side on the same data (page 0, limit 50, of a client
// holding 1,000 grants, 50 connections); measurements go round-robin, so the machine's drift
// (large here) falls on every variant alike, and the median of the rounds is compared with the
// baseline's, beside each variant's peak resident set. Environment: BENCH_SECONDS (per
// measurement, default 5), BENCH_ROUNDS (default 5), BENCH_LEVERS (comma-separated parts of the
// variants' names: only those run, beside the baseline).
import { spawn, type ChildProcess } from 'node:child_process'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import autocannon from 'autocannon'
import { createSigner } from 'fast-jwt'
import pg from 'pg'
import { loadScale, RESOURCE_ID, SMALL_CLIENT } from '../db/bench-data.js'
import { freePort, startThrowawayPostgres } from '../db/embedded-postgres.js'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir, projectRoot } from '../src/project-root.js'
import { memoryOf } from './bench/ladder.js'
import { imageNode } from './bench/processes.js'
import { type Command, isEntryPoint, openingComment, readCommandLine } from '../src/command-line.js'

const CONNECTIONS = 50

/** nodeOptions: node's flags, after the image's; imageFlags false: without the image's flags. */
interface Variant { name: string, env: Record<string, string>, nodeOptions?: string[], imageFlags?: boolean, socket?: boolean }
const allVariants: Variant[] = [
  { name: 'baseline: TCP, pool 10', env: {} },
  // Every variant runs with the image's NODE_OPTIONS and node flags (the Dockerfile's), as the
  // service ships; node's flags on a variant's command line take precedence over them.
  { name: "node's defaults (neither the image's NODE_OPTIONS nor its flags)", env: { NODE_OPTIONS: '' }, imageFlags: false },
  // The embedded PostgreSQL's Unix socket is in /tmp (its build's default).
  { name: 'Unix socket', env: {}, socket: true },
  { name: 'pool 4', env: { DATABASE_POOL_MAX: '4' } },
  { name: 'metrics off', env: { METRICS_ENABLED: 'false' } },
  { name: 'semi-space 8 MiB', env: {}, nodeOptions: ['--max-semi-space-size=8'] },
  { name: 'semi-space 32 MiB', env: {}, nodeOptions: ['--max-semi-space-size=32'] },
  { name: 'semi-space 64 MiB', env: {}, nodeOptions: ['--max-semi-space-size=64'] },
  // Memory: V8 lets the old space grow to several times the live heap before a major GC.
  { name: 'old space 256 MiB', env: {}, nodeOptions: ['--max-old-space-size=256'] },
  { name: 'old space 128 MiB', env: {}, nodeOptions: ['--max-old-space-size=128'] },
  // The image fixes how far the old space grows after a major GC (--heap-growing-percent); 0 lets V8 pick (up to 4×).
  { name: "heap growing: V8's own factor", env: {}, nodeOptions: ['--heap-growing-percent=0'] }
]

/** The baseline and the variants BENCH_LEVERS names, or all of them. */
function chosenVariants (): Variant[] {
  const wanted = process.env.BENCH_LEVERS?.split(',').map((part) => part.trim()).filter(Boolean)
  if (!wanted?.length) return allVariants
  const [baseline, ...others] = allVariants
  return [baseline, ...others.filter((variant) => wanted.some((part) => variant.name.includes(part)))]
}

/** Returns the exit code: 0 measured (or --help), 2 bad arguments. */
async function main (args: string[]): Promise<number> {
  // Its settings are the environment's, written once in the opening comment, which --help prints.
  const command = { usage: 'npm run -s bench:levers', about: await openingComment(new URL(import.meta.url)), options: {} } satisfies Command
  const commandLine = readCommandLine(command, args)
  if (typeof commandLine === 'number') return commandLine
  const seconds = Number(process.env.BENCH_SECONDS ?? 5)
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
  const variants = chosenVariants()

  const server = await startThrowawayPostgres()
  const databaseName = `levers_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${databaseName}`)
  const tcpUrl = Object.assign(new URL(server.url), { pathname: `/${databaseName}` })
  const socketUrl = new URL(tcpUrl)
  socketUrl.searchParams.set('host', '/tmp')
  const children: ChildProcess[] = []

  try {
    const db = new pg.Pool({ connectionString: tcpUrl.toString(), max: 2 })
    await migrateDatabase(db, migrationsDir)
    await loadScale(db, 10_000)
    await db.end()
    console.log('building the service (tsc)…')
    const tsc = spawn(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: projectRoot, stdio: 'inherit' })
    const [code] = await once(tsc, 'exit')
    if (code !== 0) throw new Error(`tsc exited with ${code}`)

    const keys = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } })
    const claims = { iss: 'https://bench.invalid/', aud: 'client-permissions-service' }
    const token = createSigner({ key: keys.privateKey, algorithm: 'RS256', expiresIn: 3_600_000 })({ scope: 'read:resource', sub: 'bench', ...claims })
    const urls: string[] = []
    const image = await imageNode()
    for (const variant of variants) {
      const port = await freePort()
      const flags = variant.imageFlags === false ? [] : image.flags
      const child = spawn(process.execPath, [...flags, ...variant.nodeOptions ?? [], 'dist/src/server.js'], {
        cwd: projectRoot,
        stdio: ['ignore', 'ignore', 'inherit'],
        env: {
          ...process.env,
          NODE_ENV: 'production',
          NODE_OPTIONS: image.options,
          DATABASE_URL: (variant.socket ? socketUrl : tcpUrl).toString(),
          JWT_PUBLIC_KEY: keys.publicKey,
          JWT_ISSUER: claims.iss,
          JWT_AUDIENCE: claims.aud,
          LOG_LEVEL: 'warn',
          HOST: '127.0.0.1',
          PORT: String(port),
          ...variant.env
        }
      })
      children.push(child)
      const url = `http://127.0.0.1:${port}/resources/${RESOURCE_ID}/authorized_clients/${SMALL_CLIENT}/permissions?limit=50`
      for (let attempt = 0; ; attempt++) {
        if (await fetch(`http://127.0.0.1:${port}/readyz`).then((res) => res.ok, () => false)) break
        if (attempt > 300) throw new Error(`${variant.name} did not start`)
        await sleep(100)
      }
      urls.push(url)
    }

    const headers = { authorization: `Bearer ${token}` }
    const results = variants.map(() => [] as Array<{ rps: number, p50: number, p99: number, errors: number }>)
    for (const url of urls) await autocannon({ url, headers, connections: CONNECTIONS, duration: 2 }) // warm-up
    for (let round = 0; round < rounds; round++) {
      for (const [i, url] of urls.entries()) {
        const result = await autocannon({ url, headers, connections: CONNECTIONS, duration: seconds })
        const errors = result.errors + result.timeouts + result.non2xx
        results[i].push({ rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, errors })
        console.error(`round ${round + 1}: ${variants[i].name}: ${result.requests.average.toFixed(0)} req/s`)
      }
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
    const baseline = median(results[0].map(({ rps }) => rps))
    console.log(`\npage 0, limit 50, 1,000 grants; ${CONNECTIONS} connections; median of ${rounds} rounds of ${seconds} s\n`)
    console.log('| variant | req/s (median) | ÷ baseline | p50 ms | p99 ms | errors | RSS peak MiB | req/s per round |')
    console.log('|---|---|---|---|---|---|---|---|')
    for (const [i, variant] of variants.entries()) {
      const runs = results[i]
      const rps = median(runs.map(({ rps }) => rps))
      console.log(`| ${variant.name} | ${rps.toFixed(0)} | ${(rps / baseline).toFixed(2)} | ${median(runs.map(({ p50 }) => p50))} | ` +
        `${median(runs.map(({ p99 }) => p99))} | ${runs.reduce((sum, { errors }) => sum + errors, 0)} | ${(await memoryOf(children[i].pid!)).rssPeakMiB.toFixed(0)} | ` +
        `${runs.map(({ rps }) => rps.toFixed(0)).join(', ')} |`)
    }
  } finally {
    for (const child of children) child.kill('SIGTERM')
    await Promise.all(children.map((child) => child.exitCode === null ? once(child, 'exit') : undefined))
    await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`).catch(() => {})
    await admin.end()
    await server.stop()
  }
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
