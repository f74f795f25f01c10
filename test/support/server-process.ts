// How the system tests start the service as operators run it: src/server.ts in a process of its own.
import { cp, rm, symlink } from 'node:fs/promises'
import { join, relative } from 'node:path'
import type { Test } from 'tap'
import { endLeftovers, ownedFolder, quit } from '../../db/cluster-folders.js'
import { projectRoot } from '../../src/project-root.js'
import { atExit } from './at-exit.js'
import { loaderArgs, nodeArgsOf, runnableOf, runRoot } from './node-args.js'
import { PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, TEST_SECRET } from './tokens.js'

/**
 * The real server as `node` runs it (its build, or its source under `--import tsx`), never through
 * tsx's CLI, so that a signal reaches the server itself: tsx's CLI relays signals through a parent
 * that SIGKILLs a child which has not acknowledged one within 30 ms, and a loaded machine is slower
 * than that (a SIGTERM test then sees a kill, not a drain).
 */
export const serverProcess = { command: process.execPath, args: nodeArgsOf('src/server.ts') }

/**
 * What the server needs to start under production rules on `databaseUrl`: a free port on loopback,
 * the tests' key, issuer and audience, and event-loop shedding off (other test files share the
 * cores: lag there is theirs; shedding is test/plugins/pressure.test.ts's).
 */
export const productionServerEnv = (databaseUrl: string) => ({
  PATH: process.env.PATH,
  NODE_ENV: 'production',
  HOST: '127.0.0.1',
  PORT: '0',
  DATABASE_URL: databaseUrl,
  JWT_SECRET: TEST_SECRET,
  JWT_ISSUER: PRODUCTION_ISSUER,
  JWT_AUDIENCE: PRODUCTION_AUDIENCE,
  MAX_EVENT_LOOP_DELAY_MS: '0'
})

/**
 * A copy of the project to start the server from without DATABASE_URL, as `npm start` runs on a
 * laptop: its embedded PostgreSQL and secret go in the copy's own .data/, never the checkout's
 * (a developer's running `npm start` holds that one). The files the server runs, the spec, the
 * migrations and the demo data, in a temporary folder the `postgres` user can enter when run as
 * root; node_modules is a link to the project's. Its PostgreSQL is stopped (immediate shutdown)
 * if this test process exits with it still running, and the folder is removed after the test;
 * those of a test killed with SIGKILL are ended by the next one's sweep.
 */
export async function projectCopy (t: Test): Promise<{ dir: string, args: string[], clusterDir: string }> {
  await endLeftovers(PROJECT_COPY_PREFIX, [join('.data', 'postgres')])
  const dir = await ownedFolder(PROJECT_COPY_PREFIX)
  const clusterDir = join(dir, '.data', 'postgres')
  const cancel = atExit(() => { quit(clusterDir) })
  t.teardown(async () => {
    cancel()
    await rm(dir, { recursive: true, force: true })
  })
  for (const folder of ['src', 'plugins', 'db']) await cp(join(runRoot, folder), join(dir, folder), { recursive: true })
  for (const path of ['package.json', 'openapi', join('db', 'migrations'), join('db', 'demo-data.json')]) {
    await cp(join(projectRoot, path), join(dir, path), { recursive: true })
  }
  await symlink(join(projectRoot, 'node_modules'), join(dir, 'node_modules'))
  return { dir, args: [...loaderArgs, join(dir, relative(runRoot, runnableOf('src/server.ts')))], clusterDir }
}

const PROJECT_COPY_PREFIX = 'client-permissions-project-'
