// One step of the bench's ablation ladder (scripts/bench/ladder.ts), as a process of its own: the
// list's page answered with the service's layers up to that step. Each layer is the service's own
// module, loaded from its build (dist/, which the bench makes first) so that a step runs the very
// code the service runs; only the glue that stacks them is here. Configured as the service is:
// from the environment, through src/config.ts. Prints its URL once it listens.
//   LADDER_STEP=minimal|validated|pool|statement|auth-hs256|auth-rs256|hooks|headers|kept-pages PORT=… DATABASE_URL=… JWT_…=… \
//     node --import tsx scripts/bench/ladder-server.ts
// The steps, each adding to the one before:
//   minimal     Fastify (no logger), one pg.Pool of DATABASE_POOL_MAX connections, the best SQL for the
//               page (scripts/bench/best-sql.ts, as pgbench runs it: a named prepared statement on its
//               generic plan) and the route's response schema; nothing validated, nothing else
//   validated   the route's request schema (path and query) with the service's validation (src/validation.ts)
//   pool        the service's pool and read() (plugins/env.ts, plugins/db.ts) in place of the pg.Pool
//   statement   the service's statement, listGrantedPermissions, in place of the best SQL, called as
//               the route calls it (fastify.queries, plugins/db.ts), with its 404 check
//   auth-hs256  plugins/auth/ as src/app.ts registers it, the route's scope checked (JWT_SECRET)
//   auth-rs256  the same with JWT_PUBLIC_KEY (RS256), as the bench runs the service
//   hooks       the request id (src/request-id.ts as the id and the X-Request-Id hook of src/app.ts),
//               plugins/pressure.ts and plugins/metrics.ts (with plugins/feed.ts, which it needs), in
//               src/app.ts's order
//   headers     the route itself (src/routes/permissions/list.ts): ETag, If-None-Match, Link,
//               X-Total-Count, Consistency-Token, with its page cache off (LIST_PAGE_CACHE_BYTES=0):
//               every read builds its page
//   kept-pages  the route with its page cache (LIST_PAGE_CACHE_BYTES as configured): a read of a
//               page unchanged since the last one gets the version from the database, not the page
import Fastify from 'fastify'
import pg from 'pg'
import type * as Sort from '../../db/queries/sort.js'
import type * as AuthPlugin from '../../plugins/auth/index.js'
import type * as AuthKey from '../../plugins/auth/key.js'
import type * as DbPlugin from '../../plugins/db.js'
import type * as EnvPlugin from '../../plugins/env.js'
import type * as FeedPlugin from '../../plugins/feed.js'
import type * as ListPagesPlugin from '../../plugins/list-pages.js'
import type * as MetricsPlugin from '../../plugins/metrics.js'
import type * as PressurePlugin from '../../plugins/pressure.js'
import type * as ConfigModule from '../../src/config.js'
import type { operations as OperationTypes } from '../../src/generated/openapi.js'
import type * as Operations from '../../src/generated/operations.js'
import type * as RequestId from '../../src/request-id.js'
import type * as ListRoute from '../../src/routes/permissions/list.js'
import type * as Target from '../../src/routes/permissions/target.js'
import type * as Validation from '../../src/validation.js'
import { isEntryPoint } from '../../src/command-line.js'
import { idealListSql } from './best-sql.js'

const STEPS = ['minimal', 'validated', 'pool', 'statement', 'auth-hs256', 'auth-rs256', 'hooks', 'headers', 'kept-pages'] as const
/** The steps this server serves; the ladder's last, the service, is the service's own build. */
export type ServedStep = typeof STEPS[number]

// The service's build, not its sources through tsx: the code the service runs, compiled as it is.
const built = async <T> (path: string): Promise<T> => await import(new URL(`../../dist/${path}`, import.meta.url).href) as T

/** Serves the step LADDER_STEP names, configured from the environment, until SIGTERM; prints its URL. */
async function serve (): Promise<void> {
  const step = process.env.LADDER_STEP as ServedStep
  const at = STEPS.indexOf(step)
  if (at === -1) throw new Error(`LADDER_STEP must be one of ${STEPS.join(', ')} (got ${step})`)
  /** Whether this step has the layer `since` adds. */
  const has = (since: ServedStep) => at >= STEPS.indexOf(since)

  const { loadStartupConfig } = await built<typeof ConfigModule>('src/config.js')
  const { authOptionsOf } = await built<typeof AuthKey>('plugins/auth/key.js')
  const { operations } = await built<typeof Operations>('src/generated/operations.js')

  const config = loadStartupConfig(step === 'headers' ? { ...process.env, LIST_PAGE_CACHE_BYTES: '0' } : process.env)
  const route = operations.listClientPermissions
  type List = OperationTypes['listClientPermissions']

  const app = has('hooks')
    ? Fastify({ logger: false, requestIdHeader: false, genReqId: (await built<typeof RequestId>('src/request-id.js')).requestIdOf })
    : Fastify({ logger: false })

  if (!has('statement')) {
    // The best SQL for the page, as pgbench runs it: a named prepared statement on its generic plan.
    const best = { name: 'best', text: idealListSql({ sortBy: 'name.asc' }) }
    interface Row { permission_id: string | null, permission_name: string, permission_description: string | null }
    let rowsOf: (values: unknown[]) => Promise<Row[]>
    if (has('pool')) {
      const { default: env } = await built<typeof EnvPlugin>('plugins/env.js')
      const { default: db } = await built<typeof DbPlugin>('plugins/db.js')
      await app.register(env, { config })
      await app.register(db)
      rowsOf = async (values) => (await app.read(async (db) => ({ rows: (await db.query<Row>({ ...best, values })).rows, position: undefined }))).rows
    } else {
      const pool = new pg.Pool({ connectionString: config.DATABASE_URL, max: config.DATABASE_POOL_MAX, options: '-c plan_cache_mode=force_generic_plan' })
      pool.on('error', () => {}) // an idle connection lost: the pool connects anew
      app.addHook('onClose', async () => { await pool.end() })
      rowsOf = async (values) => (await pool.query<Row>({ ...best, values })).rows
    }
    if (has('validated')) app.setValidatorCompiler((await built<typeof Validation>('src/validation.js')).validatorCompiler)
    app.get<{ Params: { resource_id: string, client_id: string }, Querystring: { limit?: string | number, offset?: string | number } }>(
      route.url, { schema: has('validated') ? route.schema : { response: route.schema.response } }, async (request) => {
        const { resource_id: resourceId, client_id: clientId } = request.params
        const { limit = '50', offset = '0' } = request.query
        const page: Array<{ id: string, name: string, description?: string }> = []
        for (const row of await rowsOf([resourceId, clientId, limit, offset])) {
          if (row.permission_id === null) continue
          page.push(row.permission_description === null
            ? { id: row.permission_id, name: row.permission_name }
            : { id: row.permission_id, name: row.permission_name, description: row.permission_description })
        }
        return page
      })
  } else {
    const { REQUEST_ID_HEADER } = await built<typeof RequestId>('src/request-id.js')
    const { validatorCompiler } = await built<typeof Validation>('src/validation.js')
    const { default: env } = await built<typeof EnvPlugin>('plugins/env.js')
    const { default: db } = await built<typeof DbPlugin>('plugins/db.js')
    // First, as in src/app.ts (whose Host check falls in the last step, the service).
    if (has('hooks')) app.addHook('onRequest', async (request, reply) => { reply.header(REQUEST_ID_HEADER, request.id) })
    app.setValidatorCompiler(validatorCompiler)
    await app.register(env, { config })
    await app.register(db)
    if (has('hooks')) {
      await app.register((await built<typeof FeedPlugin>('plugins/feed.js')).default)
      await app.register((await built<typeof ListPagesPlugin>('plugins/list-pages.js')).default)
      await app.register((await built<typeof PressurePlugin>('plugins/pressure.js')).default)
      await app.register((await built<typeof MetricsPlugin>('plugins/metrics.js')).default)
    }
    if (has('auth-hs256')) {
      const options = authOptionsOf(config)
      // The step is what its name says, or its figures would be another step's.
      const expected = step === 'auth-hs256' ? 'secret' : 'public-key'
      if (options.key.kind !== expected) throw new Error(`LADDER_STEP=${step} verifies tokens with a ${expected === 'secret' ? 'JWT_SECRET' : 'JWT_PUBLIC_KEY'}; got ${options.key.kind}`)
      const { default: auth } = await built<typeof AuthPlugin>('plugins/auth/index.js')
      await app.register(auth, options)
    }
    if (has('headers')) await app.register((await built<typeof ListRoute>('src/routes/permissions/list.js')).default)
    else {
      const { parseSortBy } = await built<typeof Sort>('db/queries/sort.js')
      const { assertClientAuthorized } = await built<typeof Target>('src/routes/permissions/target.js')
      // The route's handler up to its statement and its 404 (src/routes/permissions/list.ts), in a
      // plugin of its own as the route is: none of the headers.
      await app.register(async function listStatement (fastify) {
        fastify.get<{
          Params: List['parameters']['path']
          Querystring: Required<NonNullable<List['parameters']['query']>>
        }>(route.url, { schema: route.schema, config: route.config }, async (request, reply) => {
          const { resource_id: resourceId, client_id: clientId } = request.params
          const { limit, offset: page, sort_by: sortBy } = request.query
          const result = await fastify.queries.listGrantedPermissions({ resourceId, clientId, limit, page, sort: parseSortBy(sortBy) })
          assertClientAuthorized(result, resourceId, clientId)
          return reply.type('application/json; charset=utf-8').send(result.permissionsJson)
        })
      })
    }
  }

  console.log(await app.listen({ host: config.HOST, port: config.PORT }))
  process.once('SIGTERM', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
}

if (isEntryPoint(import.meta.url)) await serve()
